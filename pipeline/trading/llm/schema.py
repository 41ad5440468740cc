"""What the LLM may answer, as a JSON schema, a GBNF grammar and a msgspec type, and the INSTRUCTION
built from a validated answer. Pure: no model, no I/O.

The answer is one compact JSON object, keys in this order, every value an enum or a bounded integer
(no free floats: a small model's numbers stay short, and every complete answer is at most
``max_answer_bytes`` bytes, so ``max_tokens`` can be set to hold it and no answer is ever truncated)::

    {"act":"buy","pos":3,"off":2,"conf":75}

- ``act``: what to do, one of ``ACTION_WORDS`` (hold, buy, sell, flatten, cancel: the ``Action`` names in
  lower case, one token each for the usual tokenizers); flatten requires ``pos`` 0.
- ``pos``: the wanted position in lots, signed, ``-max_position_lots..max_position_lots``.
- ``off``: extra passive offset from the mid, ticks, ``0..max_offset_ticks``.
- ``conf``: confidence, integer percent ``0..100``; the INSTRUCTION's f32 ``confidence`` is ``conf / 100``.

Not asked of the model (each token costs a forward pass): the instrument (the signal's; the prompt
names it) and the ttl (``LlmParams.ttl_ms``). The validated ``Decision`` carries both.

The hub writes ``ANSWER_PREFIX`` (``{"act":"``) at the end of the prompt, so the model's first generated
token is already the action; the grammars below describe what follows it, and ``validate`` reads the
whole object (prefix included).

``grammar_text(bounds)`` is the production grammar: the action an enum, every integer bounded digit by
digit (no leading zeros), flatten with ``pos`` 0, so every complete output validates.
``grammar_text(bounds, loose=True)`` is a deliberately loose variant used by the tests to prove that
invalid output is rejected: each field its tight form or something that need not validate (1-3
lower-case letters, integers with leading zeros and up to five digits, decimals), and an optional
free-text ``note`` field (an unknown field; long enough to run out of tokens).
``validate`` is the gate: nothing becomes an INSTRUCTION without passing it, whatever the grammar.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

import msgspec
import numpy as np

from pipeline.trading.messages import INSTRUCTION_DTYPE, Action

ACTION_WORDS: tuple[str, ...] = tuple(a.name.lower() for a in Action)  # hold, buy, sell, flatten, cancel
KEYS = ("act", "pos", "off", "conf")
#: the answer's opening, written by the hub at the end of the prompt
ANSWER_PREFIX = '{"act":"'
DEFAULT_TTL_MS = 2_000

#: rejection reasons, in the order the gate checks them
REASONS = ("timeout", "aborted", "error", "truncated", "invalid_json", "missing_field", "unknown_field",
           "wrong_type", "bad_action", "out_of_bounds", "inconsistent")


class Bounds(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The limits an answer must respect (from the hub's config)."""

    max_position_lots: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 10
    max_offset_ticks: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 20


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """A validated answer as the INSTRUCTION needs it: the signal's instrument, the ``Action`` name
    (upper case), the target position in lots, the offset in ticks, the confidence in integer percent,
    and the ttl in ms (the hub's ``ttl_ms``)."""

    inst: int
    act: str
    lots: int
    off: int
    conf: int
    ttl: int


@lru_cache(maxsize=32)
def answer_type(bounds: Bounds) -> type:
    """The frozen msgspec Struct type ``Answer`` of the JSON object, with ``bounds`` as ``msgspec.Meta``
    ge/le constraints (unknown fields forbidden, every field required; ``pos`` is the attribute ``lots``)."""
    b = bounds
    return msgspec.defstruct("Answer", [
        ("act", Literal[ACTION_WORDS]),  # type: ignore[valid-type]
        ("lots", Annotated[int, msgspec.Meta(ge=-b.max_position_lots, le=b.max_position_lots)], msgspec.field(name="pos")),
        ("off", Annotated[int, msgspec.Meta(ge=0, le=b.max_offset_ticks)]),
        ("conf", Annotated[int, msgspec.Meta(ge=0, le=100)]),
    ], frozen=True, forbid_unknown_fields=True)


def json_schema(bounds: Bounds) -> dict:
    """The JSON schema of an answer (what the grammar enforces)."""
    b = bounds
    return {
        "type": "object", "additionalProperties": False, "required": list(KEYS),
        "properties": {
            "act": {"enum": list(ACTION_WORDS)},
            "pos": {"type": "integer", "minimum": -b.max_position_lots, "maximum": b.max_position_lots},
            "off": {"type": "integer", "minimum": 0, "maximum": b.max_offset_ticks},
            "conf": {"type": "integer", "minimum": 0, "maximum": 100},
        },
    }


def max_answer_bytes(bounds: Bounds) -> int:
    """The longest answer the tight grammar allows, in bytes after ``ANSWER_PREFIX`` (a bound on its
    tokens: no token is shorter than a byte)."""
    b = bounds
    head = max(len(w) + len(str(0 if w == "flatten" else -b.max_position_lots)) for w in ACTION_WORDS)
    return head + len('","pos":,"off":,"conf":}') + len(str(b.max_offset_ticks)) + len("100")


# ------------------------------------------------------------------------------------- grammar
def _same_length_range(lo: str, hi: str) -> list[str]:
    """GBNF sequences matching the decimal strings of equal length between ``lo`` and ``hi``."""
    if lo == hi:
        return [f'"{lo}"'] if lo else ['""']
    n = len(lo) - 1
    if lo[0] == hi[0]:
        return [f'"{lo[0]}" ( {" | ".join(_same_length_range(lo[1:], hi[1:]))} )']
    out = []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * n:
        out.append(f'"{lo[0]}" ( {" | ".join(_same_length_range(lo[1:], "9" * n))} )')
        first += 1
    tail_hi = hi[1:] != "9" * n
    if tail_hi:
        last -= 1
    if first <= last:
        head = f'"{first}"' if first == last else f"[{first}-{last}]"
        out.append(" ".join([head] + ["[0-9]"] * n))
    if tail_hi:
        out.append(f'"{hi[0]}" ( {" | ".join(_same_length_range("0" * n, hi[1:]))} )')
    return out


def int_range_gbnf(lo: int, hi: int) -> str:
    """A GBNF expression matching exactly the canonical decimal integers in ``lo..hi`` (``-`` sign for
    negatives, no leading zeros, no ``-0``).

    Raises:
        ValueError: ``lo > hi``.
    """
    if lo > hi:
        raise ValueError(f"empty range {lo}..{hi}")
    alts: list[str] = []
    if lo < 0:
        nlo, nhi = max(1, -hi), -lo  # the magnitudes of the negative part
        alts.append(f'"-" ( {int_range_gbnf(nlo, nhi)} )')
        lo = 0
    if hi >= 0:
        for d in range(len(str(lo)), len(str(hi)) + 1):
            a = max(lo, 10 ** (d - 1) if d > 1 else 0)
            b = min(hi, 10 ** d - 1)
            if a <= b:
                alts += _same_length_range(str(a), str(b))
    return " | ".join(f"( {a} )" for a in alts)


def grammar_text(bounds: Bounds, *, loose: bool = False) -> str:
    """The GBNF grammar of what follows ``ANSWER_PREFIX``: tight (production) or loose (tests; see the
    module docstring)."""
    b = bounds
    ranges = [
        f"lots ::= {int_range_gbnf(-b.max_position_lots, b.max_position_lots)}",
        f"off ::= {int_range_gbnf(0, b.max_offset_ticks)}",
        f"conf ::= {int_range_gbnf(0, 100)}",
    ]
    tail = r'",\"off\":" off ",\"conf\":" conf "}"'
    if loose:
        return "\n".join([
            r'root ::= act "\",\"pos\":" ( lots | int ) ",\"off\":" ( off | int ) ",\"conf\":" ( conf | num ) extra "}"',
            "act ::= " + " | ".join(f'"{w}"' for w in ACTION_WORDS) + " | [a-z] [a-z]? [a-z]?",
            'int ::= "-"? [0-9] [0-9]? [0-9]? [0-9]? [0-9]?',
            'num ::= "-"? [0-9] [0-9]? ( "." [0-9] [0-9]? )?',
            r'extra ::= "" | ",\"note\":\"" [a-z ]* "\""',
        ] + ranges) + "\n"
    others = " | ".join(f'"{w}"' for w in ACTION_WORDS if w != "flatten")
    return "\n".join([
        r'root ::= "flatten\",\"pos\":0,\"off\":" off ",\"conf\":" conf "}" | ( ' + others
        + r' ) "\",\"pos\":" lots ' + tail,
    ] + ranges) + "\n"


# ------------------------------------------------------------------------------------- forced text
def _literals(word: str) -> tuple[str, list[tuple[str, str]]]:
    """The literal after action ``word``, then (field, the literal after it) for the fields that follow."""
    if word == "flatten":
        return '","pos":0,"off":', [("off", ',"conf":'), ("conf", "}")]
    return '","pos":', [("pos", ',"off":'), ("off", ',"conf":'), ("conf", "}")]


def _int_done(text: str, lo: int, hi: int) -> bool:
    """``text`` is a canonical integer in ``lo..hi`` that no further digit keeps in range and canonical."""
    try:
        v = int(text)
    except ValueError:
        return False
    if str(v) != text or not lo <= v <= hi:
        return False
    if v == 0:
        return True  # no leading zero
    return not any(lo <= int(text + d) <= hi for d in "0123456789")


def forced_text(text: str, bounds: Bounds) -> str:
    """What the tight grammar forces after the answer text ``text`` (after ``ANSWER_PREFIX``): the rest
    of a key literal once an action word or a number is complete (``","pos":``, ``,"off":``,
    ``,"conf":``, the closing ``}``), or ``""`` where the model has a choice to make (or ``text`` is not
    a prefix of a tight answer). The hub evaluates forced text without sampling it: those tokens cost
    one batched forward pass instead of one pass each."""
    word = next((w for w in ACTION_WORDS if text.startswith(w)), None)
    if word is None:
        return ""
    lit, fields = _literals(word)
    rest = text[len(word):]
    if not lit.startswith(rest[:len(lit)]):
        return ""
    if len(rest) < len(lit):
        return lit[len(rest):]
    rest = rest[len(lit):]
    b = bounds
    ranges = {"pos": (-b.max_position_lots, b.max_position_lots), "off": (0, b.max_offset_ticks), "conf": (0, 100)}
    for name, after in fields:
        n = len(rest) - len(rest.lstrip("-0123456789"))
        num, tail = rest[:n], rest[n:]
        if not tail:
            return after if num and _int_done(num, *ranges[name]) else ""
        if tail.startswith(after):
            rest = tail[len(after):]
        elif after.startswith(tail):
            return after[len(tail):]
        else:
            return ""
    return ""


# ------------------------------------------------------------------------------------- the gate
class Rejected(msgspec.Struct, frozen=True):
    """An answer that did not validate: ``reason`` (one of ``REASONS``) and a short ``detail``."""

    reason: str
    detail: str = ""


def _classify(err: msgspec.ValidationError) -> str:
    msg = str(err)
    if "missing required field" in msg:
        return "missing_field"
    if "unknown field" in msg:
        return "unknown_field"
    if "Invalid enum value" in msg:
        return "bad_action"
    if ">=" in msg or "<=" in msg:
        return "out_of_bounds"
    return "wrong_type"


def validate(text: str | bytes, *, instrument_id: int, bounds: Bounds, ttl_ms: int = DEFAULT_TTL_MS,
             finished: bool = True):
    """Decode and check one whole answer (``ANSWER_PREFIX`` included). Returns the ``Decision`` for the
    signal's ``instrument_id`` with ``ttl_ms``, or a ``Rejected``.

    ``finished`` is False when generation stopped on ``max_tokens``: output that then fails to decode is
    ``truncated`` rather than ``invalid_json``. Never raises for bad input.
    """
    raw = text.encode("utf-8", "replace") if isinstance(text, str) else bytes(text)
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return Rejected("invalid_json" if finished else "truncated", str(exc)[:120])
    if not isinstance(obj, dict):
        return Rejected("wrong_type", "not an object")
    try:
        a = msgspec.convert(obj, answer_type(bounds))
    except msgspec.ValidationError as exc:
        return Rejected(_classify(exc), str(exc)[:120])
    if a.act == "flatten" and a.lots != 0:
        return Rejected("inconsistent", f"flatten with pos {a.lots}")
    return Decision(inst=instrument_id, act=a.act.upper(), lots=a.lots, off=a.off, conf=a.conf, ttl=ttl_ms)


def instruction_bytes(decision, *, signal_seq: int, issued_ns: int, instruction_id: int) -> bytes:
    """The INSTRUCTION payload (``INSTRUCTION_DTYPE``, 48 bytes) of a validated ``Decision``: confidence
    = ``conf / 100``."""
    r = np.zeros(1, INSTRUCTION_DTYPE)
    r["instrument_id"] = decision.inst
    r["action"] = int(Action[decision.act.upper()])
    r["limit_offset_ticks"] = decision.off
    r["target_lots"] = decision.lots
    r["signal_seq"] = signal_seq
    r["issued_ns"] = issued_ns
    r["ttl_ms"] = decision.ttl
    r["confidence"] = decision.conf / 100.0
    r["instruction_id"] = instruction_id
    return r.tobytes()
