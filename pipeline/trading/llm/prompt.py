"""The hub's prompt: a fixed system part, then a compact state block. Pure text, no model.

The system part (role, rules, the answer's schema and bounds) is the same bytes on every call, so its
tokens form a common prefix whose evaluated KV state llama.cpp keeps between calls: the hub tokenizes
it once and appends the state block's tokens (tokenized separately, so no token can straddle the
boundary and break the prefix). Only the state block and the answer are evaluated per call.

Templates (``chat_format``): ``"plain"`` (base or stand-in models) and ``"chatml"`` (Qwen2.5 and other
ChatML-instructed models: ``<|im_start|>system ... <|im_end|>`` then a user turn with the state and an
open assistant turn; tokenize with ``special=True``).

The state block (``state_block``) reads the SIGNAL_CTX record and the instrument's tick and lot size::

    inst 1 BTCUSDT tick 0.1 lot 0.0001 mid 100.05 spread 1.0t 0.9bps
    bids 0.5t:1.2 1.5t:0.8 2.5t:3.0
    asks 0.5t:0.9 1.5t:2.1 2.5t:0.4
    imb l1 +0.12 l5 -0.03 micro +0.10t ofi +0.05 tflow -0.20 vpin 0.31 vol 4.2/3.9
    fast LEAN_BUY hold 0.10 buy 0.60 sell 0.20 emerg 0.10
    pos unknown limit 10 lots
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from pipeline.trading import features as F
from pipeline.trading.llm.schema import ACTION_NAMES, Bounds
from pipeline.trading.messages import Label

ChatFormat = Literal["plain", "chatml"]

SYSTEM_RULES = """You are the slow judgement of a market-making system. The fast classifier flagged the order \
book state below. Answer with one JSON object and nothing else.
Rules: keep the position within +-{L} lots; prefer HOLD when unsure; FLATTEN when the flow looks toxic \
(EMERGENCY, high vpin); BUY or SELL move the position to lots; CANCEL pulls working orders; off is an \
extra passive offset in ticks (0..{O}); ttl is how long the instruction stays valid in ms ({T0}..{T1}); \
conf is 0.00..1.00.
Schema: {{"inst":<instrument id>,"act":"{ACTS}","lots":<target position, -{L}..{L}>,"off":<0..{O}>,\
"conf":<0.00..1.00>,"ttl":<{T0}..{T1}>}}"""


def system_text(bounds: Bounds) -> str:
    """The fixed rules and schema (the same for every call of one configuration)."""
    b = bounds
    return SYSTEM_RULES.format(L=b.max_position_lots, O=b.max_offset_ticks, T0=b.min_ttl_ms, T1=b.max_ttl_ms,
                               ACTS="|".join(ACTION_NAMES))


def system_part(bounds: Bounds, chat_format: ChatFormat = "plain") -> str:
    """The prefix of every prompt, up to where the state block starts."""
    if chat_format == "chatml":
        return f"<|im_start|>system\n{system_text(bounds)}<|im_end|>\n<|im_start|>user\n"
    return system_text(bounds) + "\nSTATE\n"


def _num(x: float, fmt: str) -> str:
    return format(float(x), fmt) if math.isfinite(float(x)) else "nan"


def state_block(sig, *, symbol: str, tick_size: float, lot_size: float, position_lots: int | None,
                bounds: Bounds, levels: int = 3, chat_format: ChatFormat = "plain") -> str:
    """The per-call part of the prompt from one SIGNAL_CTX record (``numpy.void`` of
    ``SIGNAL_CTX_DTYPE``), ending where the answer starts. Never raises for odd numbers (NaN prints
    as ``nan``); an unknown label prints as its number."""
    f = sig["features"]
    iid = int(sig["instrument_id"])
    levels = max(0, min(int(levels), F.L))

    def side(dist0: int, size0: int, n: float) -> str:
        k = min(levels, int(n)) if math.isfinite(float(n)) else levels
        return " ".join(f"{_num(f[dist0 + i], '.1f')}t:{_num(f[size0 + i], '.4g')}" for i in range(max(k, 0))) or "-"

    lab = int(sig["label"])
    lab_name = Label(lab).name if lab in Label._value2member_map_ else str(lab)
    p = sig["probs"]
    pos = "unknown" if position_lots is None else f"{int(position_lots):+d}"
    lines = [
        f"inst {iid} {symbol} tick {tick_size:g} lot {lot_size:g} mid {_num(sig['ref_mid'], '.10g')} "
        f"spread {_num(f[F.F_SPREAD_TICKS], '.1f')}t {_num(f[F.F_SPREAD_BPS], '.1f')}bps",
        "bids " + side(F.F_BID_DIST_0, F.F_BID_SIZE_0, f[F.F_N_BIDS]),
        "asks " + side(F.F_ASK_DIST_0, F.F_ASK_SIZE_0, f[F.F_N_ASKS]),
        f"imb l1 {_num(f[F.F_IMBALANCE_1], '+.2f')} l5 {_num(f[F.F_IMBALANCE_5], '+.2f')} "
        f"micro {_num(f[F.F_MICROPRICE_OFFSET], '+.2f')}t ofi {_num(f[F.F_OFI_NORM], '+.2f')} "
        f"tflow {_num(f[F.F_TRADE_IMBALANCE], '+.2f')} vpin {_num(f[F.F_VPIN], '.2f')} "
        f"vol {_num(f[F.F_VOLATILITY_FAST], '.1f')}/{_num(f[F.F_VOLATILITY_SLOW], '.1f')}",
        f"fast {lab_name} hold {_num(p[0], '.2f')} buy {_num(p[1], '.2f')} sell {_num(p[2], '.2f')} "
        f"emerg {_num(p[3], '.2f')}",
        f"pos {pos} limit {bounds.max_position_lots} lots",
    ]
    body = "\n".join(lines)
    if chat_format == "chatml":
        return body + "<|im_end|>\n<|im_start|>assistant\n"
    return body + "\nANSWER "


def example_signal(seed: int = 0, *, instrument_id: int = 1, feature_seq: int = 1):
    """A plausible SIGNAL_CTX record (``numpy.void``) drawn from ``seed``: for tests and the bench."""
    from pipeline.trading.messages import SIGNAL_CTX_DTYPE

    rng = np.random.default_rng(seed)
    r = np.zeros(1, SIGNAL_CTX_DTYPE)
    r["instrument_id"], r["feature_seq"], r["exch_ts_ns"] = instrument_id, feature_seq, 1_000 + feature_seq
    r["ref_mid"] = 100.0 + float(rng.normal(0, 5))
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
