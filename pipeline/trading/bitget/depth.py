"""Depth pushes (``books``, ``books1/5/15``): the validation of one ``data[]`` entry into a
``BookLevels`` (``book_levels``), and the check of the books1/5/15 fast path (``fast_snapshot``),
which accepts exactly what ``book_levels`` accepts for a canonical snapshot, or declines.
Pure functions over decoded values."""

from __future__ import annotations

from operator import gt, lt

import orjson

from pipeline.trading.bitget.frames import (
    INT32_MAX,
    INT32_MIN,
    MAX_LEVELS_PER_SIDE,
    MAX_TS_MS,
    U64_MAX,
    BookLevels,
    Decoded,
    FrameKind,
    Reject,
)
from pipeline.trading.bitget.values import parse_decimals, parse_uint


def book_levels(bids, asks, checksum, seq, pseq, ts, snapshot: bool):
    """Validate one depth entry whose level shapes are already known to be string pairs:
    ``(Reject.OK, BookLevels)``, or ``(reason, None)``. Raises TypeError on a level holding a
    non-string (the orjson decoder's caller turns it into WRONG_TYPE)."""
    nb = len(bids)
    na = len(asks)
    if nb > MAX_LEVELS_PER_SIDE or na > MAX_LEVELS_PER_SIDE:
        return Reject.TOO_LARGE, None
    bid_lv = list(map(":".join, bids))
    ask_lv = list(map(":".join, asks))
    if nb or na:
        vals = parse_decimals(":".join(bid_lv + ask_lv), 2 * (nb + na))
        if vals is None:
            return Reject.BAD_NUMBER, None
        split = 2 * nb
        bid_px = vals[0:split:2]
        bid_sz = vals[1:split:2]
        ask_px = vals[split::2]
        ask_sz = vals[split + 1 :: 2]
        if snapshot:
            if (nb > 1 and not all(map(gt, bid_px, bid_px[1:]))) or (na > 1 and not all(map(lt, ask_px, ask_px[1:]))):
                return Reject.UNSORTED, None
            if (nb and bid_px[-1] <= 0) or (na and ask_px[0] <= 0):  # sorted: the extreme is enough
                return Reject.BAD_NUMBER, None
        elif 0 in bid_px or 0 in ask_px:  # no sign is possible, so 0 is the only bad price
            return Reject.BAD_NUMBER, None
    else:
        bid_px, bid_sz, ask_px, ask_sz = [], [], [], []
    if type(checksum) is not int:
        return Reject.WRONG_TYPE, None
    if not INT32_MIN <= checksum <= INT32_MAX:
        return Reject.OUT_OF_RANGE, None
    seq_v = pseq_v = -1  # absent
    r = _OK
    if seq is not None:
        r, seq_v = parse_uint(seq, U64_MAX)
    if pseq is not None and not r:
        r, pseq_v = parse_uint(pseq, U64_MAX)
    if r:  # the first of seq, pseq that is bad
        return r, None
    if ts is None:
        return Reject.MISSING_FIELD, None
    r, ts_ms = parse_uint(ts, MAX_TS_MS)
    if r:
        return r, None
    return Reject.OK, BookLevels(bid_px, bid_sz, bid_lv, ask_px, ask_sz, ask_lv, checksum, seq_v, pseq_v, ts_ms)


#: The skeleton (digits and dots deleted) of ``bids + b"," + asks`` when both sides are in the venue's
#: canonical form ``[["p","s"],["p","s"],...]``, with nb and na levels -> nb, for
#: 1 <= nb, na <= MAX_FAST_LEVELS (books1/5/15 send at most 15).
MAX_FAST_LEVELS = 25
_SKELETONS = {
    b"[" + b",".join([b'["",""]'] * nb) + b"],[" + b",".join([b'["",""]'] * na) + b"]": nb
    for nb in range(1, MAX_FAST_LEVELS + 1)
    for na in range(1, MAX_FAST_LEVELS + 1)
}
_DIGITS_DOT = b"0123456789."
_QUOTES_BRACKETS = b'"[]'
_SNAPSHOT_KIND = FrameKind.SNAPSHOT
_OK = Reject.OK
_TS_DIGITS = 19  # a ts digit string this long or shorter is < 10**19 (MAX_TS_MS has 13 digits)


def fast_snapshot(e, channel: str, inst_type: str, inst_id: str):
    """The SNAPSHOT ``Decoded`` of a books1/5/15 entry in the venue's exact canonical form, or None
    when anything is unusual (the caller then runs the full typed decode, which gives the reason).
    ``e`` is the msgspec decoder's ``_FastData``: its sides kept as raw JSON.

    Soundness: msgspec has checked that each side is valid JSON. A side whose skeleton (digits and
    dots deleted) is ``[["",""],...]`` therefore is exactly ``[["D","D"],...]`` with D runs of
    digits and dots (a digit outside the quotes would not be valid JSON there); orjson then parses
    the D as JSON numbers, which is the same grammar and finiteness check ``parse_decimals`` makes, and
    the sortedness, price, checksum, seq and ts checks are those of ``book_levels``."""
    bids = e.bids
    asks = e.asks
    cat = b",".join((bids, asks))
    shape = _SKELETONS.get(cat.translate(None, _DIGITS_DOT))
    if shape is None:
        return None
    try:
        vals = orjson.loads(b"[%b]" % cat.translate(None, _QUOTES_BRACKETS))
    except orjson.JSONDecodeError:
        return None
    split = shape + shape
    ask_px = vals[split::2]
    # bids ascending then asks: strictly ascending iff both sides are strictly sorted best first
    # and the book is not crossed (a crossed one goes the full way); then the lowest bid > 0 is
    # the whole "price > 0" check
    c = vals[split - 2 :: -2] + ask_px
    if not (c[0] > 0 and all(map(lt, c, c[1:]))):
        return None
    checksum = e.checksum
    if not INT32_MIN <= checksum <= INT32_MAX:
        return None
    seq = e.seq
    if seq is None:
        seq = -1
    elif type(seq) is not int or not 0 <= seq <= U64_MAX:
        r, seq = parse_uint(seq, U64_MAX)
        if r:
            return None
    pseq = e.pseq
    if pseq is None:
        pseq = -1
    else:
        r, pseq = parse_uint(pseq, U64_MAX)
        if r:
            return None
    ts = e.ts
    if type(ts) is str and len(ts) <= _TS_DIGITS and ts.isascii() and ts.isdigit() and ts[0] != "0":
        ts = int(ts)
        if ts > MAX_TS_MS:
            return None
    else:
        if ts is None:
            return None
        r, ts = parse_uint(ts, MAX_TS_MS)
        if r:
            return None
    lv = BookLevels(vals[0:split:2], vals[1:split:2], None, ask_px, vals[split + 1 :: 2], None, checksum, seq, pseq, ts, (bids, asks))
    return Decoded(_SNAPSHOT_KIND, _OK, channel, inst_type, inst_id, [lv], None, True)

