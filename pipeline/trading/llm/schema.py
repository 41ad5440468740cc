"""What the LLM may answer, as a JSON schema, a GBNF grammar and a msgspec type, and the INSTRUCTION
built from a validated answer. Pure: no model, no I/O.

The answer is one compact JSON object, keys in this order (short keys: fewer generated tokens)::

    {"inst":1,"act":"BUY","lots":3,"off":2,"conf":0.75,"ttl":2000}

- ``inst``: the instrument id; must be the signal's.
- ``act``: an ``Action`` name (HOLD, BUY, SELL, FLATTEN, CANCEL); FLATTEN requires ``lots`` 0.
- ``lots``: the wanted position in lots, signed, ``-max_position_lots..max_position_lots``.
- ``off``: extra passive offset from the mid, ticks, ``0..max_offset_ticks``.
- ``conf``: confidence, ``0.00..1.00`` with at most two decimals.
- ``ttl``: ms the instruction stays valid, ``min_ttl_ms..max_ttl_ms``.

``grammar_text(bounds, instrument_id)`` is the production grammar: the instrument fixed, the action an
enum, every integer bounded digit by digit (no leading zeros), the confidence ``0.dd`` or ``1.00``, so
every complete output validates. ``grammar_text(bounds, loose=True)`` is a deliberately loose variant
(each field its tight form or a short integer, 1-3 capital letters, a decimal) used by the tests to prove that invalid output is rejected.
``validate`` is the gate: nothing becomes an INSTRUCTION without passing it, whatever the grammar.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Literal

import msgspec
import numpy as np

from pipeline.trading.messages import INSTRUCTION_DTYPE, Action

ACTION_NAMES: tuple[str, ...] = tuple(a.name for a in Action)  # HOLD, BUY, SELL, FLATTEN, CANCEL
KEYS = ("inst", "act", "lots", "off", "conf", "ttl")

#: rejection reasons, in the order the gate checks them
REASONS = ("timeout", "aborted", "error", "truncated", "invalid_json", "missing_field", "unknown_field",
           "wrong_type", "bad_action", "out_of_bounds", "bad_precision", "inconsistent", "wrong_instrument")


class Bounds(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The limits an answer must respect (from the hub's config)."""

    max_position_lots: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 10
    max_offset_ticks: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 20
    min_ttl_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 100
    max_ttl_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 10_000


@lru_cache(maxsize=32)
def decision_type(bounds: Bounds) -> type:
    """The frozen msgspec Struct type ``Decision`` with ``bounds`` as ``msgspec.Meta`` ge/le constraints
    (unknown fields forbidden, every field required)."""
    b = bounds
    return msgspec.defstruct("Decision", [
        ("inst", Annotated[int, msgspec.Meta(ge=1, le=65_535)]),
        ("act", Literal[ACTION_NAMES]),  # type: ignore[valid-type]
        ("lots", Annotated[int, msgspec.Meta(ge=-b.max_position_lots, le=b.max_position_lots)]),
        ("off", Annotated[int, msgspec.Meta(ge=0, le=b.max_offset_ticks)]),
        ("conf", Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]),
        ("ttl", Annotated[int, msgspec.Meta(ge=b.min_ttl_ms, le=b.max_ttl_ms)]),
    ], frozen=True, forbid_unknown_fields=True)


def json_schema(bounds: Bounds, instrument_id: int | None = None) -> dict:
    """The JSON schema of an answer (what the prompt shows and the grammar enforces)."""
    b = bounds
    inst = {"const": instrument_id} if instrument_id is not None else {"type": "integer", "minimum": 1, "maximum": 65535}
    return {
        "type": "object", "additionalProperties": False, "required": list(KEYS),
        "properties": {
            "inst": inst,
            "act": {"enum": list(ACTION_NAMES)},
            "lots": {"type": "integer", "minimum": -b.max_position_lots, "maximum": b.max_position_lots},
            "off": {"type": "integer", "minimum": 0, "maximum": b.max_offset_ticks},
            "conf": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.01},
            "ttl": {"type": "integer", "minimum": b.min_ttl_ms, "maximum": b.max_ttl_ms},
        },
    }


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


def grammar_text(bounds: Bounds, instrument_id: int | None = None, *, loose: bool = False) -> str:
    """The GBNF grammar of an answer: tight (production; ``instrument_id`` fixed when given) or loose
    (tests: each field either its tight form or
    something that need not validate: short integers with leading zeros, 1-3 capital letters, decimals)."""
    b = bounds
    ranges = [
        f"lots ::= {int_range_gbnf(-b.max_position_lots, b.max_position_lots)}",
        f"off ::= {int_range_gbnf(0, b.max_offset_ticks)}",
        f"ttl ::= {int_range_gbnf(b.min_ttl_ms, b.max_ttl_ms)}",
        'conf ::= "0." [0-9] [0-9] | "1.00"',
    ]
    inst = f'"{instrument_id}"' if instrument_id is not None else "instid"
    if loose:  # every field: the tight form or something that need not validate
        return "\n".join([
            r'root ::= "{\"inst\":" ( ' + inst + r' | int ) ",\"act\":\"" act "\",\"lots\":" ( lots | int ) '
            r'",\"off\":" ( off | int ) ",\"conf\":" ( conf | num ) ",\"ttl\":" ( ttl | int ) "}"',
            'act ::= "HOLD" | "BUY" | "SELL" | "FLATTEN" | "CANCEL" | [A-Z] [A-Z]? [A-Z]?',
            'int ::= "-"? [0-9] [0-9]? [0-9]? [0-9]? [0-9]?',
            'num ::= "-"? [0-9] ( "." [0-9] [0-9]? [0-9]? )?',
            f"instid ::= {int_range_gbnf(1, 65535)}",
        ] + ranges) + "\n"
    lines = [
        r'root ::= "{\"inst\":" ' + inst + r' ",\"act\":" body ",\"off\":" off ",\"conf\":" conf ",\"ttl\":" ttl "}"',
        r'body ::= "\"FLATTEN\",\"lots\":0" | "\"" ( "HOLD" | "BUY" | "SELL" | "CANCEL" ) "\",\"lots\":" lots',
    ] + ranges
    if instrument_id is None:
        lines.append(f"instid ::= {int_range_gbnf(1, 65535)}")
    return "\n".join(lines) + "\n"


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


def validate(text: str | bytes, *, instrument_id: int, bounds: Bounds, finished: bool = True):
    """Decode and check one answer. Returns the ``Decision`` (see ``decision_type``) or a ``Rejected``.

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
        d = msgspec.convert(obj, decision_type(bounds))
    except msgspec.ValidationError as exc:
        return Rejected(_classify(exc), str(exc)[:120])
    scaled = d.conf * 100.0
    if not math.isfinite(scaled) or abs(scaled - round(scaled)) > 1e-6:
        return Rejected("bad_precision", f"conf {d.conf!r} has more than two decimals")
    if d.act == "FLATTEN" and d.lots != 0:
        return Rejected("inconsistent", f"FLATTEN with lots {d.lots}")
    if d.inst != instrument_id:
        return Rejected("wrong_instrument", f"inst {d.inst} answers a signal of instrument {instrument_id}")
    return d


def instruction_bytes(decision, *, signal_seq: int, issued_ns: int, instruction_id: int) -> bytes:
    """The INSTRUCTION payload (``INSTRUCTION_DTYPE``, 48 bytes) of a validated decision."""
    r = np.zeros(1, INSTRUCTION_DTYPE)
    r["instrument_id"] = decision.inst
    r["action"] = int(Action[decision.act])
    r["limit_offset_ticks"] = decision.off
    r["target_lots"] = decision.lots
    r["signal_seq"] = signal_seq
    r["issued_ns"] = issued_ns
    r["ttl_ms"] = decision.ttl
    r["confidence"] = decision.conf
    r["instruction_id"] = instruction_id
    return r.tobytes()
