"""The venue's number strings and unsigned integers, validated. Pure functions over decoded values,
shared by the depth and trade decoding (``depth``, ``trades``)."""

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
