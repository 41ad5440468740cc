"""Order books for the Bitget depth channels; BOOK and TRADE payloads. Sans-I/O.

Two kinds of book, one per (channel, instId) seen in pushes of a configured instrument:

- ``IncrementalBook`` for ``books``: a snapshot, then updates merged into it. A level is keyed by
  its numeric price; an update with size 0 deletes the level, any other size replaces it (and its
  original strings), a new price is inserted in order. Every level keeps its original
  ``"price:size"`` text for the checksum.
- ``SnapshotBook`` for ``books1`` / ``books5`` / ``books15``: every push replaces the book.

Checksum (venue rule; IEEE CRC-32 as ``zlib.crc32``, NOT CRC-32C): take the top 25 bids and top
25 asks, best first, and join ``bid1:ask1:bid2:ask2:...`` where each level is its ORIGINAL
``price:size`` strings (``"0.5000"`` stays ``"0.5000"``); when one side has fewer levels its
missing entries are skipped (``bid1:ask1:ask2:ask3``). The venue sends the CRC as a signed 32-bit
int: ``v - 2**32 if v >= 2**31``. A checksum of 0 means "none" (v2 snapshots) and is not checked.

Integrity rules, applied per push, in this order:

1. An ``update`` on a book that is not VALID is dropped (``AWAITING_SNAPSHOT`` / ``INVALID``). An
   update before any snapshot also asks for a resync, once.
2. Sequence (``books`` updates, where the venue sends them): with ``pseq``, it must equal the
   previous push's ``seq``; without ``pseq``, ``seq`` must not go backwards (it may jump: the venue
   only promises that it increases). Failing either -> ``SEQ_GAP``. A ``books15`` push whose ``seq``
   is below the last one is dropped as ``STALE`` (the next push is a fresh snapshot anyway).
3. The update is merged (or the snapshot installed), then every non-zero checksum is verified
   against the book's top 25 -> ``CHECKSUM_MISMATCH`` on a difference.

On ``SEQ_GAP`` or ``CHECKSUM_MISMATCH`` the book turns INVALID, drops its levels, and (for
``books``) queues its ``Subscription`` once in ``take_resyncs()``: the feed process then
unsubscribes and subscribes again, and the venue answers with a fresh snapshot, which makes the book
VALID again. No BOOK payload comes out of a book that is not VALID. (A ``books15`` book recovers on
its next push, which is a full snapshot; it queues no resync.)

Output: ``BitgetBooks.apply`` packs a BOOK payload (``pipeline.trading.messages.BOOK_DTYPE``, 504 bytes) in
one ``struct.pack_into`` (``BOOK_STRUCTS[n_bids][n_asks]``: ``BOOK_STRUCT``, the same layout,
pinned against the dtype by a test, with pad bytes where fewer than 15 levels leave zeros): the
instrument id from the ``{instId: id}`` map given at construction, the top 15 levels a side best
first as floats (zeros past ``n_bids`` / ``n_asks``), ``seq`` (0 when the venue sends none),
``exch_ts_ns`` = the entry's ``ts`` in ms * 1_000_000, and ``BOOK_FLAG_SNAPSHOT`` when the push was
a snapshot. ``fill_trades`` packs TRADE payloads (``TRADE_STRUCT`` == ``TRADE_DTYPE``), oldest first.

Costs: the BOOK fill is list slicing plus that one ``pack_into`` (no Python loop over levels); a
snapshot is installed by slicing the decoder's lists, which the book then owns (and mutates); an
update is merged with one ``bisect`` per update level, the only per-level Python loop. A
books1/5/15 push (one entry, no checksum) takes an inlined branch of ``BitgetBooks.apply``: the book
just keeps the push (``SnapshotBook`` derives its lists from it only when asked), the payload is
packed from the decoder's lists (``itertools.compress`` only when a size is 0), and the
``"price:size"`` strings are built only when asked for (``SnapshotBook.bid_lv``, checksums).
Measured figures: ``python -m bench.feed`` (``make bench-feed``).
"""

from __future__ import annotations

import enum
import struct
from bisect import bisect_left
from itertools import compress
from collections.abc import Mapping, Sequence
from zlib import crc32

import numpy as np

from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.frames import (
    CHANNEL_BOOKS,
    INST_TYPES,
    MAX_TRADES_PER_FRAME,
    BookLevels,
    Decoded,
    FrameKind,
    Subscription,
)
from pipeline.trading.messages import BOOK_FLAG_SNAPSHOT, BOOK_LEVELS, TRADE_DTYPE

CHECKSUM_LEVELS = 25

#: BOOK payload as one struct: instrument_id, flags, n_bids, n_asks, seq, exch_ts_ns,
#: bid_px[15], bid_sz[15], ask_px[15], ask_sz[15]. Same bytes as BOOK_DTYPE (see its diagram).
BOOK_STRUCT = struct.Struct(f"<HHHHQQ{BOOK_LEVELS}d{BOOK_LEVELS}d{BOOK_LEVELS}d{BOOK_LEVELS}d")
assert BOOK_STRUCT.size == 504

#: TRADE payload: instrument_id, side, 5 zero bytes, trade_id, exch_ts_ns, price, size (== TRADE_DTYPE).
TRADE_STRUCT = struct.Struct("<HB5xQQdd")
assert TRADE_STRUCT.size == 40


def _book_struct(nb: int, na: int) -> struct.Struct:
    """BOOK_STRUCT for ``nb`` bids and ``na`` asks: the same layout, with pad bytes (packed as zero
    bytes, i.e. 0.0) in place of the levels past ``n_bids`` / ``n_asks``."""
    pb = f"{8 * (BOOK_LEVELS - nb)}x" if nb < BOOK_LEVELS else ""
    pa = f"{8 * (BOOK_LEVELS - na)}x" if na < BOOK_LEVELS else ""
    return struct.Struct(f"<HHHHQQ{nb}d{pb}{nb}d{pb}{na}d{pa}{na}d{pa}")


#: BOOK_STRUCTS[nb][na]: ``_book_struct(nb, na)``; a payload is always one pack_into, zeros included
BOOK_STRUCTS = [[_book_struct(nb, na) for na in range(BOOK_LEVELS + 1)] for nb in range(BOOK_LEVELS + 1)]
assert all(st.size == BOOK_STRUCT.size for row in BOOK_STRUCTS for st in row)

_NS_PER_MS = 1_000_000


def _checksum_lv(bid_lv: list, ask_lv: list) -> int:
    """Signed CRC-32 of best-first ``"price:size"`` lists, each already cut to 25 entries."""
    m = min(len(bid_lv), len(ask_lv))
    parts = [None] * (2 * m)
    parts[0::2] = bid_lv[:m]
    parts[1::2] = ask_lv[:m]
    parts += bid_lv[m:]
    parts += ask_lv[m:]
    c = crc32(":".join(parts).encode())
    return c - 0x100000000 if c & 0x80000000 else c


def checksum_string(bids: Sequence[Sequence[str]], asks: Sequence[Sequence[str]]) -> str:
    """The string the venue's checksum covers, from best-first ``[price, size]`` string pairs."""
    b = [f"{p}:{s}" for p, s in bids[:CHECKSUM_LEVELS]]
    a = [f"{p}:{s}" for p, s in asks[:CHECKSUM_LEVELS]]
    m = min(len(b), len(a))
    out = []
    for i in range(m):
        out += (b[i], a[i])
    return ":".join(out + b[m:] + a[m:])


def bitget_checksum(bids: Sequence[Sequence[str]], asks: Sequence[Sequence[str]]) -> int:
    """The venue's checksum (signed 32-bit IEEE CRC-32) of a book given as best-first
    ``[price, size]`` pairs of the ORIGINAL strings; only the top 25 of each side count."""
    c = crc32(checksum_string(bids, asks).encode())
    return c - 0x100000000 if c & 0x80000000 else c


class BookState(enum.IntEnum):
    """Whether a book may produce BOOK payloads."""

    AWAITING_SNAPSHOT = 0  # never synced (or reset after a reconnect)
    VALID = 1
    INVALID = 2  # checksum mismatch or seq gap; waiting for a fresh snapshot


class Applied(enum.IntEnum):
    """What ``BitgetBooks.apply`` did with a depth push."""

    EMITTED = 0  # the BOOK payload was written
    AWAITING_SNAPSHOT = 1  # an update before any snapshot: dropped
    INVALID = 2  # the book is invalid, waiting for a fresh snapshot: dropped
    CHECKSUM_MISMATCH = 3  # the book just turned INVALID; a resync is queued (books)
    SEQ_GAP = 4  # the book just turned INVALID; a resync is queued (books)
    STALE = 5  # a books1/5/15 push older (seq) than the last one: dropped
    UNKNOWN_INSTRUMENT = 6  # instId not in the instrument map: dropped
    NOT_A_BOOK = 7  # the Decoded is not a SNAPSHOT / UPDATE


# enum members as module globals: a global lookup is cheaper than an Enum class attribute
_EMITTED = Applied.EMITTED
_EMITTED_I = int(_EMITTED)
_STALE = Applied.STALE
_VALID = BookState.VALID
_SNAPSHOT_KIND = FrameKind.SNAPSHOT
_UPDATE_KIND = FrameKind.UPDATE


class _Book:
    """What both kinds of book hold: their instrument and subscription, state, last seq and counters;
    a new book is as ``reset`` leaves it."""

    __slots__ = (
        "instrument_id", "subscription", "state", "last_seq",
        "checksums_verified", "checksum_mismatches", "seq_gaps",
    )

    def __init__(self, instrument_id: int, subscription: Subscription) -> None:
        self.instrument_id = instrument_id
        self.subscription = subscription
        self.checksums_verified = 0
        self.checksum_mismatches = 0
        self.seq_gaps = 0
        self.reset()

    def reset(self) -> None:  # pragma: no cover - each kind has its own
        raise NotImplementedError


class IncrementalBook(_Book):
    """The ``books`` channel's book. Both sides are kept ascending by price (so the best bid is
    the LAST bid entry, the best ask the first ask entry), as parallel lists: float price, float
    size and original ``"price:size"`` text."""

    __slots__ = ("resync_queued", "bid_px", "bid_sz", "bid_lv", "ask_px", "ask_sz", "ask_lv")

    def _clear(self) -> None:
        self.bid_px, self.bid_sz, self.bid_lv = [], [], []
        self.ask_px, self.ask_sz, self.ask_lv = [], [], []

    def invalidate(self) -> None:
        """Turn INVALID and drop the levels (a fresh snapshot restores the book)."""
        self.state = BookState.INVALID
        self._clear()

    def reset(self) -> None:
        """Forget everything (after a reconnect): AWAITING_SNAPSHOT, no seq, no resync queued."""
        self.state = BookState.AWAITING_SNAPSHOT
        self.last_seq = -1
        self.resync_queued = False
        self._clear()

    def apply(self, lv: BookLevels, snapshot: bool) -> Applied:
        """Install a snapshot or merge an update, then check seq and checksum (module docstring)."""
        if snapshot:
            bp, bs, bl = lv.bid_px, lv.bid_sz, lv.bid_lv
            ap, az, al = lv.ask_px, lv.ask_sz, lv.ask_lv
            if 0.0 in bs:
                bp, bs, bl = _without_empty(bp, bs, bl)
            if 0.0 in az:
                ap, az, al = _without_empty(ap, az, al)
            self.bid_px, self.bid_sz, self.bid_lv = bp[::-1], bs[::-1], bl[::-1]
            self.ask_px, self.ask_sz, self.ask_lv = ap, az, al  # the decoder's fresh lists: ours now
            self.last_seq = lv.seq
            self.state = BookState.VALID
            self.resync_queued = False
        else:
            state = self.state
            if state != BookState.VALID:
                return Applied.AWAITING_SNAPSHOT if state == BookState.AWAITING_SNAPSHOT else Applied.INVALID
            last = self.last_seq
            if last >= 0:
                if lv.pseq >= 0:
                    if lv.pseq != last:
                        self.seq_gaps += 1
                        self.invalidate()
                        return Applied.SEQ_GAP
                elif 0 <= lv.seq < last:
                    self.seq_gaps += 1
                    self.invalidate()
                    return Applied.SEQ_GAP
            _merge(self.bid_px, self.bid_sz, self.bid_lv, lv.bid_px, lv.bid_sz, lv.bid_lv)
            _merge(self.ask_px, self.ask_sz, self.ask_lv, lv.ask_px, lv.ask_sz, lv.ask_lv)
            if lv.seq >= 0:
                self.last_seq = lv.seq
        if lv.checksum:
            if _checksum_lv(self.bid_lv[: -CHECKSUM_LEVELS - 1 : -1], self.ask_lv[:CHECKSUM_LEVELS]) != lv.checksum:
                self.checksum_mismatches += 1
                self.invalidate()
                return Applied.CHECKSUM_MISMATCH
            self.checksums_verified += 1
        return Applied.EMITTED

    def top(self) -> tuple[list, list, list, list]:
        """(bid_px, bid_sz, ask_px, ask_sz), best first, at most 15 each."""
        return (
            self.bid_px[: -BOOK_LEVELS - 1 : -1],
            self.bid_sz[: -BOOK_LEVELS - 1 : -1],
            self.ask_px[:BOOK_LEVELS],
            self.ask_sz[:BOOK_LEVELS],
        )

    def bids(self) -> list[tuple[str, str]]:
        """All bids best first as original (price, size) strings (control path: tests, tools)."""
        return [tuple(s.split(":")) for s in reversed(self.bid_lv)]

    def asks(self) -> list[tuple[str, str]]:
        """All asks best first as original (price, size) strings (control path)."""
        return [tuple(s.split(":")) for s in self.ask_lv]


def _without_empty(px: list, sz: list, lv: list) -> tuple[list, list, list]:
    keep = [i for i, s in enumerate(sz) if s]
    return [px[i] for i in keep], [sz[i] for i in keep], [lv[i] for i in keep]


def _merge(px: list, sz: list, lv: list, upx: list, usz: list, ulv: list) -> None:
    """Merge update levels into one ascending side: size 0 deletes, else replace or insert."""
    for p, s, text in zip(upx, usz, ulv):
        i = bisect_left(px, p)
        if i < len(px) and px[i] == p:
            if s:
                sz[i] = s
                lv[i] = text
            else:
                del px[i], sz[i], lv[i]
        elif s:
            px.insert(i, p)
            sz.insert(i, s)
            lv.insert(i, text)


def _side_view(bid: bool, field: str, doc: str) -> property:
    """A ``SnapshotBook`` property: ``field`` of the last push without its empty levels."""
    return property(lambda self: self._side(bid, field), doc=doc)


class SnapshotBook(_Book):
    """The ``books1`` / ``books5`` / ``books15`` book: each push replaces it (lists best first).

    The book keeps the last accepted push (``BookLevels``) as it is; ``bid_px`` / ``bid_sz`` /
    ``ask_px`` / ``ask_sz`` and ``bid_lv`` / ``ask_lv`` (the original ``"price:size"`` strings) are
    derived from it when asked for (control path, checksum), without the empty (size 0) levels, so
    installing a push copies nothing: the hot path (``BitgetBooks.apply``) packs the BOOK payload
    straight from the push's lists."""

    __slots__ = ("_levels",)

    resync_queued = True  # never asks for a resync: the next push is a full snapshot

    def reset(self) -> None:
        """Forget everything (after a reconnect)."""
        self.state = BookState.AWAITING_SNAPSHOT
        self.last_seq = -1
        self._levels = None

    def _side(self, bid: bool, field: str) -> list:
        lv = self._levels
        if lv is None:
            return []
        values = getattr(lv, field)
        sizes = lv.bid_sz if bid else lv.ask_sz
        return values if all(sizes) else list(compress(values, sizes))

    bid_px = _side_view(True, "bid_px", """Bid prices of the last push, best first, empty levels left out (a list
        the caller may not mutate: it can be the push's own).""")
    bid_sz = _side_view(True, "bid_sz", "Bid sizes, as ``bid_px``.")
    ask_px = _side_view(False, "ask_px", "Ask prices, as ``bid_px``.")
    ask_sz = _side_view(False, "ask_sz", "Ask sizes, as ``bid_px``.")
    bid_lv = _side_view(True, "bid_lv", "The bids' original ``price:size`` strings, best first (no empty level).")
    ask_lv = _side_view(False, "ask_lv", "The asks' original ``price:size`` strings, best first (no empty level).")

    def apply(self, lv: BookLevels, snapshot: bool = True) -> Applied:
        """Replace the book with this push unless it is stale (``STALE``) or fails its non-zero
        checksum (``CHECKSUM_MISMATCH``: the book turns INVALID until the next push)."""
        seq = lv.seq
        if 0 <= seq < self.last_seq:
            return _STALE
        if lv.checksum:
            if _checksum_lv(lv.bid_lv[:CHECKSUM_LEVELS], lv.ask_lv[:CHECKSUM_LEVELS]) != lv.checksum:
                self.checksum_mismatches += 1
                self.state = BookState.INVALID
                return Applied.CHECKSUM_MISMATCH
            self.checksums_verified += 1
        self._levels = lv
        if seq >= 0:
            self.last_seq = seq
        self.state = _VALID
        return _EMITTED

    def top(self) -> tuple[list, list, list, list]:
        """(bid_px, bid_sz, ask_px, ask_sz), best first, at most 15 each."""
        return self.bid_px[:BOOK_LEVELS], self.bid_sz[:BOOK_LEVELS], self.ask_px[:BOOK_LEVELS], self.ask_sz[:BOOK_LEVELS]

    def bids(self) -> list[tuple[str, str]]:
        """All bids best first as original (price, size) strings (control path)."""
        return [tuple(s.split(":")) for s in self.bid_lv]

    def asks(self) -> list[tuple[str, str]]:
        """All asks best first as original (price, size) strings (control path)."""
        return [tuple(s.split(":")) for s in self.ask_lv]


class BitgetBooks:
    """Every book of one feed connection, and the BOOK / TRADE payload writers.

    ``instruments`` maps the venue's instId (e.g. ``"BTCUSDT"``) to the config's instrument id
    (0..65535). Pushes for other instIds are counted (``Applied.UNKNOWN_INSTRUMENT``) and dropped.
    Trade pushes with action ``snapshot`` (the venue's replay of recent, old trades) are skipped
    unless ``emit_trade_snapshots``.

    Counters: ``applied[code]`` per ``Applied`` code, ``trades_emitted``,
    ``trade_snapshots_skipped``, ``trades_truncated``, ``resyncs_requested``; and, summed over the
    books, ``checksums_verified`` / ``checksum_mismatches`` / ``seq_gaps``.
    """

    def __init__(self, instruments: Mapping[str, int], *, emit_trade_snapshots: bool = False) -> None:
        """Raises:
        BitgetError: an instId that is not a non-empty string, or an id outside 0..65535.
        """
        ids = {}
        for inst_id, iid in dict(instruments).items():
            if not isinstance(inst_id, str) or not inst_id:
                raise BitgetError(f"instrument names must be non-empty strings, got {inst_id!r}")
            if not isinstance(iid, int) or isinstance(iid, bool) or not 0 <= iid <= 0xFFFF:
                raise BitgetError(f"instrument id of {inst_id!r} must be an int in 0..65535, got {iid!r}")
            ids[inst_id] = iid
        self._ids = ids
        self._books: dict[tuple[str, str], IncrementalBook | SnapshotBook] = {}
        self._resyncs: list[Subscription] = []
        self.emit_trade_snapshots = emit_trade_snapshots
        self.applied = [0] * len(Applied)
        self.trades_emitted = 0
        self.trade_snapshots_skipped = 0
        self.trades_truncated = 0
        self.resyncs_requested = 0
        self.trade_records = np.zeros(MAX_TRADES_PER_FRAME, TRADE_DTYPE)

    # -- control path -------------------------------------------------------------------------

    def book(self, channel: str, inst_id: str) -> IncrementalBook | SnapshotBook | None:
        """The book of ``channel`` / ``inst_id``, if a push created it."""
        return self._books.get((channel, inst_id))

    def books(self) -> list[IncrementalBook | SnapshotBook]:
        """Every book created so far."""
        return list(self._books.values())

    def take_resyncs(self) -> list[Subscription]:
        """The subscriptions to renew (unsubscribe, subscribe) for a fresh snapshot; emptied."""
        out, self._resyncs = self._resyncs, []
        return out

    def reset(self) -> None:
        """After a reconnect: every book back to AWAITING_SNAPSHOT, no resync pending."""
        for b in self._books.values():
            b.reset()
        self._resyncs = []

    @property
    def checksums_verified(self) -> int:
        return sum(b.checksums_verified for b in self._books.values())

    @property
    def checksum_mismatches(self) -> int:
        return sum(b.checksum_mismatches for b in self._books.values())

    @property
    def seq_gaps(self) -> int:
        return sum(b.seq_gaps for b in self._books.values())

    # -- hot path -----------------------------------------------------------------------------

    def apply(self, decoded: Decoded, out) -> Applied:
        """Apply a SNAPSHOT / UPDATE and, when the book is VALID after it, write its BOOK payload
        into ``out`` (a writable buffer of at least 504 bytes: the feed's ``bytearray(504)``,
        ``np.zeros(1, BOOK_DTYPE)``, a claimed ring slot...). ``out`` is untouched unless the result is ``Applied.EMITTED``.
        Never raises on any ``Decoded`` the decoder produced."""
        entries = decoded.books
        kind = decoded.kind
        if entries is None or (kind != _SNAPSHOT_KIND and kind != _UPDATE_KIND):
            self.applied[Applied.NOT_A_BOOK] += 1
            return Applied.NOT_A_BOOK
        channel = decoded.channel
        book = self._books.get((channel, decoded.inst_id))
        if book is None:
            book = self._new_book(decoded)
            if book is None:
                self.applied[Applied.UNKNOWN_INSTRUMENT] += 1
                return Applied.UNKNOWN_INSTRUMENT
        snapshot = decoded.snapshot
        if type(book) is SnapshotBook and len(entries) == 1:
            # books1/5/15: one snapshot, packed straight from the push's lists
            lv = entries[0]
            seq = lv.seq
            if lv.checksum or 0 <= seq < book.last_seq:  # to verify, or stale: the full method
                code = book.apply(lv)
                if code is not _EMITTED:
                    self.applied[code] += 1
                    return code
            else:  # SnapshotBook.apply without a checksum, inlined (the books15 hot path)
                book._levels = lv
                if seq >= 0:
                    book.last_seq = seq
                book.state = _VALID
            bp, bs, ap, az = lv.bid_px, lv.bid_sz, lv.ask_px, lv.ask_sz
            if not all(bs):  # leave the empty levels out (sizes are numbers: all() is the cheap "0 in")
                bp = list(compress(bp, bs))
                bs = list(compress(bs, bs))
            if not all(az):
                ap = list(compress(ap, az))
                az = list(compress(az, az))
        else:
            for lv in entries:
                code = book.apply(lv, snapshot)
                if code:
                    if not book.resync_queued and code != Applied.INVALID:
                        book.resync_queued = True
                        self._resyncs.append(book.subscription)
                        self.resyncs_requested += 1
                    self.applied[code] += 1
                    return code
            bp, bs, ap, az = book.top()
        nb = len(bp)
        na = len(ap)
        if nb > BOOK_LEVELS:
            bp, bs, nb = bp[:BOOK_LEVELS], bs[:BOOK_LEVELS], BOOK_LEVELS
        if na > BOOK_LEVELS:
            ap, az, na = ap[:BOOK_LEVELS], az[:BOOK_LEVELS], BOOK_LEVELS
        seq = lv.seq
        BOOK_STRUCTS[nb][na].pack_into(
            out, 0,
            book.instrument_id, BOOK_FLAG_SNAPSHOT if snapshot else 0, nb, na,
            seq if seq >= 0 else 0, lv.ts_ms * _NS_PER_MS, *bp, *bs, *ap, *az,
        )
        self.applied[_EMITTED_I] += 1
        return _EMITTED

    def mirror(self, source: BitgetBooks, decoded: Decoded) -> None:
        """Keep-warm's private books: make this object's ``books`` book of ``decoded``'s instrument a copy
        of ``source``'s (its levels and state, no last seq), so that an update ``source`` has applied
        applies here again with the same outcome (merging an update into the book it made changes
        nothing, so its checksum holds; no seq to check). Nothing for a book ``source`` lacks or a
        books1/5/15 book (a snapshot needs no history)."""
        key = (decoded.channel, decoded.inst_id)
        src = source._books.get(key)
        if type(src) is not IncrementalBook:
            return
        mine = self._books.get(key)
        if mine is None:
            mine = self._books[key] = IncrementalBook(src.instrument_id, src.subscription)
        mine.bid_px, mine.bid_sz, mine.bid_lv = src.bid_px[:], src.bid_sz[:], src.bid_lv[:]
        mine.ask_px, mine.ask_sz, mine.ask_lv = src.ask_px[:], src.ask_sz[:], src.ask_lv[:]
        mine.state = src.state
        mine.last_seq = -1
        mine.resync_queued = True  # a private book never asks for a resync

    def _new_book(self, decoded: Decoded) -> IncrementalBook | SnapshotBook | None:
        """The book of a first push for (channel, instId); None for an unknown instrument."""
        iid = self._ids.get(decoded.inst_id)
        if iid is None:
            return None
        channel = decoded.channel
        inst_type = decoded.inst_type.upper()  # echoed as sent, but some venues echo lower case
        sub = Subscription(inst_type if inst_type in INST_TYPES else decoded.inst_type, channel, decoded.inst_id)
        book = IncrementalBook(iid, sub) if channel == CHANNEL_BOOKS else SnapshotBook(iid, sub)
        self._books[(channel, decoded.inst_id)] = book
        return book

    def fill_trades(self, decoded: Decoded, out: np.ndarray | None = None) -> int:
        """Write the TRADE payloads of a TRADE push, oldest first, into ``out`` (a TRADE_DTYPE
        array; default ``self.trade_records``) and return how many. 0 for an unknown instrument,
        a skipped trade snapshot, or a Decoded that is not a TRADE. Trades beyond ``len(out)`` are
        counted in ``trades_truncated`` and dropped. Never raises on a decoder's Decoded."""
        trades = decoded.trades
        if trades is None or decoded.kind != FrameKind.TRADE:
            return 0
        iid = self._ids.get(decoded.inst_id)
        if iid is None:
            self.applied[Applied.UNKNOWN_INSTRUMENT] += 1
            return 0
        if decoded.snapshot and not self.emit_trade_snapshots:
            self.trade_snapshots_skipped += len(trades.price)
            return 0
        if out is None:
            out = self.trade_records
        n = len(trades.price)
        cap = len(out)
        if n > cap:
            self.trades_truncated += n - cap
            n = cap
        pack = TRADE_STRUCT.pack_into
        off = 0
        for side, tid, ts_ms, px, sz in zip(trades.side[:n], trades.trade_id, trades.ts_ms, trades.price, trades.size):
            pack(out, off, iid, side, tid, ts_ms * _NS_PER_MS, px, sz)
            off += 40
        self.trades_emitted += n
        return n
