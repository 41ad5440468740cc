"""The hub's prompt: a fixed system part, then a short state line per decision. Pure text, no model.

A prompt is ``Frame.prefix`` (the chat template's system turn with ``system_text`` and the opening of the
user turn) + the state line (``state_text``) + ``Frame.suffix`` (the end of the user turn and the opening
of the assistant's) + ``schema.ANSWER_PREFIX``. The prefix is the same bytes on every call, so the hub
tokenizes it once and llama.cpp keeps its evaluated KV state between calls: only the state line, the
suffix and the answer are evaluated per decision. Every token of those costs model time on each
decision (``bench.llm`` measures it), so the state line is kept to a few dozen tokens: short words, no
units the system text already states.

Frames (``chat_frame``): a model whose GGUF carries ``tokenizer.chat_template`` is prompted through
that template, rendered by llama-cpp-python's ``Jinja2ChatFormatter`` with a system and a user message;
the user message is a marker, and the text before it is the prefix, the text after it the suffix. The
split is checked by rendering a real state line, which must come out as prefix + line + suffix (a
template that rewrites the user's text cannot be split: ``ValueError``). A model without a template
(the tiny stand-in) gets ``plain_frame``: the system text, ``STATE``, the line, ``ANSWER``.

The state line (``state_text``), from one SIGNAL_CTX record and what the stage knows of the position::

    BTCUSDT lean buy 82% mid 100.05 spread 1 imb +31 vol 4.2 pos +2 moves +1 -1

the fast model's label (``SIGNAL_WORDS``) and its probability; the mid; the spread in ticks; the
top-5-level book imbalance in percent (+: more size on the bid); the short-horizon volatility (bps per
root second, 1 s decay, two digits); the position in lots (``unknown`` before the risk stage's first POSITION) and its latest
changes, newest first (``moves``). The hub sees positions, not fills: the risk stage writes a POSITION
whenever a fill changes one, so a change of the position is the fills' net effect, and that is what
``moves`` shows (``PositionTrack`` keeps them).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import msgspec
import numpy as np

from pipeline.trading import features as F
from pipeline.trading.llm.schema import ACTION_WORDS, Bounds
from pipeline.trading.messages import Label

ChatFormat = Literal["auto", "plain"]

SYSTEM_RULES = """You advise a market-making bot. Each message is one instrument's state: the fast \
model's signal and its probability, mid price, spread in ticks, book imbalance in percent (+ means more \
bids), volatility, our position in lots and its latest moves. Reply with one JSON object: act ({ACTS}), pos \
(wanted position in lots, -{L}..{L}), off (extra passive offset in ticks, 0..{O}), conf (confidence in \
percent, 0..100). Prefer hold when unsure; flatten when the flow looks toxic (EMERGENCY); cancel pulls \
our working orders."""

#: the fast label in the state line: short words, one or two tokens each (LEAN_BUY is five)
SIGNAL_WORDS = {Label.HOLD: "hold", Label.LEAN_BUY: "lean buy", Label.LEAN_SELL: "lean sell",
                Label.EMERGENCY: "emergency"}
#: the plain frame's markers, for models without a chat template
PLAIN_STATE, PLAIN_ANSWER = "\nSTATE\n", "\nANSWER "
#: what the template is rendered with in place of the user's text, to find where that text goes
_MARK = "\x1fSTATE\x1f"


class Frame(msgspec.Struct, frozen=True):
    """How a state line becomes a prompt: ``prefix`` + line + ``suffix`` (+ ``schema.ANSWER_PREFIX``);
    ``template`` says where it came from (``gguf`` or ``plain``)."""

    prefix: str
    suffix: str
    template: str


def system_text(bounds: Bounds) -> str:
    """The fixed rules and schema (the same for every call of one configuration)."""
    return SYSTEM_RULES.format(L=bounds.max_position_lots, O=bounds.max_offset_ticks, ACTS="|".join(ACTION_WORDS))


def plain_frame(bounds: Bounds) -> Frame:
    return Frame(prefix=system_text(bounds) + PLAIN_STATE, suffix=PLAIN_ANSWER, template="plain")


def chat_frame(template: str, bounds: Bounds, *, bos_token: str = "", eos_token: str = "") -> Frame:
    """The frame of a Jinja chat template (a GGUF's ``tokenizer.chat_template``), rendered by
    llama-cpp-python's ``Jinja2ChatFormatter`` with the generation prompt (see the module docstring).

    Raises:
        ValueError: the template does not render, or does not keep the user's text verbatim in one place.
    """
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        fmt = Jinja2ChatFormatter(template, eos_token=eos_token, bos_token=bos_token, add_generation_prompt=True)
    except Exception as exc:  # jinja2's syntax errors
        raise ValueError(f"the chat template does not render: {type(exc).__name__}: {exc}") from None
    system = system_text(bounds)

    def render(user: str) -> str:
        try:
            return fmt(messages=[{"role": "system", "content": system}, {"role": "user", "content": user}]).prompt
        except Exception as exc:  # jinja2's errors, or the template's own raise_exception
            raise ValueError(f"the chat template does not render: {type(exc).__name__}: {exc}") from None

    marked = render(_MARK)
    if marked.count(_MARK) != 1:
        raise ValueError("the chat template does not place the user's text exactly once")
    prefix, _, suffix = marked.partition(_MARK)
    probe = state_text(example_signal(0), symbol="BTCUSDT", position=PositionView(lots=1, moves=(1,)), tick_size=0.1)
    if render(probe) != prefix + probe + suffix or system not in prefix:
        raise ValueError("the chat template rewrites the user's or the system's text; it cannot be split")
    return Frame(prefix=prefix, suffix=suffix, template="gguf")


# ------------------------------------------------------------------------------------- position
class PositionView(msgspec.Struct, frozen=True):
    """An instrument's position in lots and its latest changes (``moves``, newest first)."""

    lots: int
    moves: tuple[int, ...] = ()


class PositionTrack:
    """The latest position of each instrument and its last ``keep`` changes within ``horizon_ns``,
    from the risk stage's POSITION messages. Pure: times are the caller's."""

    def __init__(self, keep: int = 3, horizon_ns: int = 60_000_000_000):
        self.keep = keep
        self.horizon_ns = horizon_ns
        self._lots: dict[int, int] = {}
        self._moves: dict[int, deque] = {}

    def update(self, instrument_id: int, lots: int, now_ns: int) -> None:
        """A POSITION of ``lots``; a change from the last one is a move (the first one is not)."""
        old = self._lots.get(instrument_id)
        self._lots[instrument_id] = lots
        if old is not None and lots != old:
            self._moves.setdefault(instrument_id, deque(maxlen=self.keep)).append((lots - old, now_ns))

    def lots(self, instrument_id: int) -> int | None:
        return self._lots.get(instrument_id)

    def view(self, instrument_id: int, now_ns: int) -> PositionView | None:
        """None before the instrument's first POSITION."""
        lots = self._lots.get(instrument_id)
        if lots is None:
            return None
        moves = self._moves.get(instrument_id, ())
        return PositionView(lots=lots, moves=tuple(d for d, t in reversed(moves) if now_ns - t <= self.horizon_ns))


def as_position(position) -> PositionView | None:
    """A ``PositionView``, an int (lots, no moves known) or None, as a ``PositionView`` or None."""
    if position is None or isinstance(position, PositionView):
        return position
    return PositionView(lots=int(position))


# ------------------------------------------------------------------------------------- state line
def _num(x, fmt: str) -> str:
    x = float(x)
    return format(x, fmt) if math.isfinite(x) else "nan"


def _mid(x, tick_size: float | None) -> str:
    """The mid with the tick's decimals and one more (a mid may fall between two ticks), zeros trimmed."""
    if not tick_size or not math.isfinite(float(x)) or tick_size <= 0:
        return _num(x, ".10g")
    decimals = max(0, -math.floor(math.log10(tick_size) + 1e-9)) + 1
    text = format(float(x), f".{decimals}f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def state_text(sig, *, symbol: str, position, tick_size: float | None = None) -> str:
    """The state line of one SIGNAL_CTX record (``numpy.void`` of ``SIGNAL_CTX_DTYPE``) and ``position``
    (see ``as_position``); the mid with ``tick_size``'s decimals and one more (all its digits without it).
    Never raises for odd numbers (NaN prints as ``nan``); an unknown label prints as its number and its
    probability as ``?``."""
    f = sig["features"]
    lab = int(sig["label"])
    prob = f"{_num(100 * float(sig['probs'][lab]), '.0f')}%" if 0 <= lab < len(sig["probs"]) else "?"
    pos = as_position(position)
    if pos is None:
        where = "pos unknown"
    else:
        where = f"pos {pos.lots:+d}" + (" moves " + " ".join(f"{m:+d}" for m in pos.moves) if pos.moves else "")
    return (f"{symbol} {SIGNAL_WORDS.get(lab, str(lab))} {prob} mid {_mid(sig['ref_mid'], tick_size)} "
            f"spread {_num(f[F.F_SPREAD_TICKS], '.3g')} imb {_num(100 * f[F.F_IMBALANCE_5], '+.0f')} "
            f"vol {_num(f[F.F_VOLATILITY_FAST], '.2g')} {where}")


def example_signal(seed: int = 0, *, instrument_id: int = 1, feature_seq: int = 1):
    """A plausible SIGNAL_CTX record (``numpy.void``) drawn from ``seed``: for tests and the bench."""
    from pipeline.trading.messages import SIGNAL_CTX_DTYPE

    rng = np.random.default_rng(seed)
    r = np.zeros(1, SIGNAL_CTX_DTYPE)
    r["instrument_id"], r["feature_seq"], r["exch_ts_ns"] = instrument_id, feature_seq, 1_000 + feature_seq
    r["ref_mid"] = round(100.0 + float(rng.normal(0, 5)), 2)
    spread_t = float(rng.integers(1, 6))
    r["ref_spread"] = spread_t * 0.1
    lab = int(rng.integers(1, 4))
    p = rng.dirichlet(np.ones(4)).astype(np.float32)
    p[lab] += 1.0
    p /= p.sum()
    r["label"], r["probs"] = lab, p
    f = r["features"][0]
    for i in range(F.L):
        f[F.F_BID_DIST_0 + i] = f[F.F_ASK_DIST_0 + i] = spread_t / 2 + i
        f[F.F_BID_SIZE_0 + i], f[F.F_ASK_SIZE_0 + i] = rng.exponential(1.0, 2)
    f[F.F_IMBALANCE_1:F.F_IMBALANCE_15 + 1] = rng.uniform(-1, 1, 5)
    f[F.F_MICROPRICE_OFFSET], f[F.F_SPREAD_TICKS] = rng.uniform(-0.5, 0.5), spread_t
    f[F.F_SPREAD_BPS] = spread_t * 0.1 / float(r["ref_mid"][0]) * 1e4
    f[F.F_OFI_NORM], f[F.F_TRADE_IMBALANCE], f[F.F_VPIN] = rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(0, 1)
    f[F.F_VOLATILITY_FAST], f[F.F_VOLATILITY_SLOW] = rng.exponential(5.0, 2)
    f[F.F_N_BIDS] = f[F.F_N_ASKS] = F.L
    return r[0]
