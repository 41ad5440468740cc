"""The venue's number strings and unsigned integers, validated. Pure functions over decoded values,
shared by the depth and trade decoding (``depth``, ``trades``), and the price / size grid a capture's
own strings imply (``snapshot_grids``: the evaluation's replay and the venue's calibration read
captures of instruments the config does not know)."""

from __future__ import annotations

import orjson

from pipeline.trading.bitget.frames import Reject

_NUMERIC_CHARS = b"0123456789.:"  # what a joined "price:size:..." string may contain


def parse_decimals(flat: str, count: int) -> list | None:
    """The ``count`` numbers of a ``"n:n:..."`` string of plain decimals, or None if it is not
    exactly that: only ASCII digits and ``.`` between the colons, each a JSON number (so no
    ``""``, ``"."``, ``"1."``, ``".5"``, ``"01"``, ``"1.2.3"``, sign, exponent, NaN or inf), each
    finite. Integers come back as ints, the rest as floats (the same value ``float()`` gives).
    One C pass each: bytes.translate for the alphabet, orjson for the numbers."""
    if flat.encode("utf-8", "surrogatepass").translate(None, _NUMERIC_CHARS):
        return None
    try:
        vals = orjson.loads("[" + flat.replace(":", ",") + "]")
    except orjson.JSONDecodeError:
        return None
    if len(vals) != count:  # a ":" inside a field (orjson itself refuses a double overflow)
        return None
    return vals


def parse_uint(value, maximum: int):
    """(OK, int) for an int or an ASCII digit string (no leading zero) in 0..maximum; else a
    reject code."""
    if type(value) is int:
        if 0 <= value <= maximum:
            return Reject.OK, value
        return Reject.OUT_OF_RANGE, 0
    if type(value) is str:
        if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):
            if len(value) <= 20:
                v = int(value)
                if v <= maximum:
                    return Reject.OK, v
            return Reject.OUT_OF_RANGE, 0
        return Reject.BAD_NUMBER, 0
    return Reject.WRONG_TYPE, 0


def decimals_written(text: str) -> int:
    """Decimals written in a number string (``"0.5000"`` -> 4, ``"12"`` -> 0)."""
    _, dot, frac = text.partition(".")
    return len(frac) if dot else 0


def snapshot_grids(decoded) -> dict[str, tuple[float, float]]:
    """Each instrument's (tick, lot) from decoded pushes (``decoder`` results with ``inst_id``,
    ``books`` and ``snapshot``): the most decimals written in its snapshots' level prices and sizes
    (the first 50 levels a side), as ``10 ** -decimals``; an instrument seen only without a snapshot
    gets (1.0, 1.0). Keys in sorted order."""
    pdec: dict[str, int] = {}
    sdec: dict[str, int] = {}
    for d in decoded:
        sym = d.inst_id
        pdec.setdefault(sym, 0)
        sdec.setdefault(sym, 0)
        if d.books is not None and d.snapshot:
            for lv in d.books:
                for text in lv.bid_lv[:50] + lv.ask_lv[:50]:
                    p, _, sz = text.partition(":")
                    pdec[sym] = max(pdec[sym], decimals_written(p))
                    sdec[sym] = max(sdec[sym], decimals_written(sz))
    return {sym: (10.0 ** -pdec[sym], 10.0 ** -sdec[sym]) for sym in sorted(pdec)}
