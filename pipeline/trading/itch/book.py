"""Level-3 order book from ITCH 5.0 messages, and the BOOK payload it produces. Pure, no I/O.

One ``L3Book`` follows a whole feed. Orders are keyed by order reference (unique across the feed,
as in ITCH); each order is ``[stock, is_bid, shares, price_p4]``. Per stock_locate, each side keeps
its aggregated price levels incrementally: ``size`` (dict price_p4 -> shares) and ``prices`` (the
distinct prices, ascending, kept sorted with bisect), so the best N levels are a slice.

Messages and what they do:

=====  =====================================================================================
A, F   add an order (F's attribution is not kept)
E, C   execute shares of a resting order (C's execution price does not move the book: the
       order rests at its own price); the order leaves the book when none remain
X      cancel part of an order; cancelling all that remains removes it
D      delete an order
U      replace: the original order leaves the book, the new reference enters at the new shares
       and price, same side and stock (so it loses time priority; the book keeps no queue
       order inside a level, since the BOOK payload is aggregated by price)
R      directory: stock_locate -> symbol; a configured symbol gets its instrument id
H      trading state per stock_locate (``trading_state``), no book change
S      system event (``system_event``); 'C' (end of messages) sets ``ended``
other  P (order_ref 0, side always 'B'), Q, B and the rest do not touch the book
=====  =====================================================================================

Which stocks are tracked: only those whose R message named a configured symbol, unless
``track_all`` (then every stock_locate seen). Order messages for untracked stocks are counted as
IGNORED. Since references are feed-wide, a message for a tracked stock that names an order of
another stock is a LOCATE_MISMATCH.

Bad input never raises out of ``apply`` / ``apply_raw`` / ``apply_decoded``: it is rejected, the
book left unchanged, and counted in ``counts[BookEvent.X]``: an unknown or duplicate reference,
executing or cancelling more shares than remain (never a negative size), a side other than B/S, a
0-share add or replace, a message that does not decode, or anything else that raises inside
(MALFORMED; e.g. a record built by hand with a wrong field type).

Locked / crossed books: the book mirrors the feed; it never matches orders itself. A consistent
session (``synth``) never locks or crosses, but real ITCH can briefly (auctions, halts, a gap in
the feed). When an add or replace leaves best bid >= best ask, the update is kept, counted as
CROSSED, and ``StockBook.is_crossed()`` says so; the BOOK payload carries the levels as they are
(``executions.ExecutionBook``, the feed's book, also sets ``BOOK_FLAG_CROSSED`` in its flags).

BOOK payload (``pipeline.trading.messages.BOOK_DTYPE``, 504 bytes) of a configured symbol: instrument_id
from the ``{symbol: instrument_id}`` mapping, flags 0, n_bids/n_asks (<= 15), ``seq`` the sequence
number given with the latest update of that stock, ``exch_ts_ns`` = ``midnight_epoch_ns`` +
the ITCH timestamp of that update (0 when ``midnight_epoch_ns`` is None: ITCH timestamps count
from midnight, Eastern time, and only the caller knows the date), prices p4 / 10000 as float,
sizes in shares as float, best first; levels past n are 0.
"""

from __future__ import annotations

import enum
import struct
from bisect import bisect_left, insort
from typing import Mapping

import numpy as np

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.errors import BookError
from pipeline.trading.messages import BOOK_DTYPE, BOOK_LEVELS

NO_BOOK = -1  # what apply returns when no configured book changed


class BookEvent(enum.IntEnum):
    """What happened to one message (index of ``L3Book.counts``)."""

    APPLIED = 0  # changed a book
    NO_BOOK_EFFECT = 1  # a valid message that does not touch a book (R, H, S, P, Q, ...)
    IGNORED = 2  # an order message of an untracked stock
    UNKNOWN_REF = 3  # rejected: no such order
    DUPLICATE_REF = 4  # rejected: add / replace with a reference already live
    OVER_EXECUTION = 5  # rejected: E/C for more shares than remain
    OVER_CANCEL = 6  # rejected: X for more shares than remain
    INVALID_SIDE = 7  # rejected: side not B or S
    INVALID_SHARES = 8  # rejected: add or replace of 0 shares
    LOCATE_MISMATCH = 9  # rejected: the order belongs to another stock_locate
    DECODE_ERROR = 10  # rejected: the bytes did not decode (apply_raw / apply_decoded)
    MALFORMED = 11  # rejected: not a record, or a field of the wrong type (caught exception)
    CROSSED = 12  # not a rejection: an update left the book locked or crossed


#: The rejections among ``BookEvent`` (the book was left unchanged).
REJECTIONS = frozenset(BookEvent(i) for i in range(BookEvent.UNKNOWN_REF, BookEvent.MALFORMED + 1))

_APPLIED = BookEvent.APPLIED
_NO_EFFECT = BookEvent.NO_BOOK_EFFECT
_IGNORED = BookEvent.IGNORED
_UNKNOWN_REF = BookEvent.UNKNOWN_REF
_DUP_REF = BookEvent.DUPLICATE_REF
_OVER_EXEC = BookEvent.OVER_EXECUTION
_OVER_CANCEL = BookEvent.OVER_CANCEL
_BAD_SIDE = BookEvent.INVALID_SIDE
_BAD_SHARES = BookEvent.INVALID_SHARES
_MISMATCH = BookEvent.LOCATE_MISMATCH
_DECODE = BookEvent.DECODE_ERROR
_MALFORMED = BookEvent.MALFORMED
_CROSSED = BookEvent.CROSSED

#: BOOK payload as one struct: instrument_id, flags, n_bids, n_asks, seq, exch_ts_ns, then
#: bid_px[15], bid_sz[15], ask_px[15], ask_sz[15]; the same bytes as BOOK_DTYPE.
BOOK_STRUCT = struct.Struct(f"<HHHHQQ{4 * BOOK_LEVELS}d")
assert BOOK_STRUCT.size == BOOK_DTYPE.itemsize
_ZEROS = (0.0,) * BOOK_LEVELS
_P4 = 10_000.0


class Side:
    """Aggregated levels of one side: ``size[price_p4] -> shares`` and ``prices`` ascending."""

    __slots__ = ("size", "prices")

    def __init__(self) -> None:
        self.size: dict[int, int] = {}
        self.prices: list[int] = []


class StockBook:
    """The book of one stock_locate. ``instrument_id`` is -1 unless the symbol is configured."""

    __slots__ = ("locate", "symbol", "instrument_id", "bids", "asks", "trading_state", "seq", "ts_ns")

    def __init__(self, locate: int) -> None:
        self.locate = locate
        self.symbol = ""
        self.instrument_id = NO_BOOK
        self.bids = Side()
        self.asks = Side()
        self.trading_state = b" "
        self.seq = 0
        self.ts_ns = 0

    def best_bid(self) -> int | None:
        """Best bid price (p4), None when there is no bid."""
        return self.bids.prices[-1] if self.bids.prices else None

    def best_ask(self) -> int | None:
        """Best ask price (p4), None when there is no ask."""
        return self.asks.prices[0] if self.asks.prices else None

    def is_crossed(self) -> bool:
        """True when best bid >= best ask (locked or crossed)."""
        b, a = self.bids.prices, self.asks.prices
        return bool(b and a and b[-1] >= a[0])

    def top(self, n: int = BOOK_LEVELS) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The best ``n`` levels a side, best first: ``([(bid_p4, shares)...], [(ask_p4, shares)...])``."""
        bp, bs, ap, as_ = self.bids.prices, self.bids.size, self.asks.prices, self.asks.size
        return [(p, bs[p]) for p in bp[: -n - 1: -1]] if n else [], [(p, as_[p]) for p in ap[:n]]


def _share_reduction(name: str, over_event: int, doc: str):
    """The ``L3Book`` method that takes ``shares`` off order ``ref`` (``over_event`` counted when the
    order has fewer left). Built once per message type so that the hot path makes no extra call."""

    def reduce_shares(self, locate: int, ref: int, shares: int, ts_ns: int, seq: int) -> int:
        st, o = self._find(locate, ref)
        if st is None:
            return self._reject(o)
        if shares > o[2]:
            return self._reject(over_event)
        return self._reduce(st, ref, o, shares, ts_ns, seq)

    reduce_shares.__name__ = name
    reduce_shares.__qualname__ = f"L3Book.{name}"
    reduce_shares.__doc__ = f"{doc} Returns as ``apply``."
    return reduce_shares


class L3Book:
    """The Level-3 book of a feed; see the module docstring for the rules.

    ``symbols`` maps configured symbols (as text, e.g. ``"AAPL"``) to instrument ids (0..65535).
    ``counts[BookEvent.X]`` counts each outcome; ``decode_rejects[DecodeReason.X]`` details the
    DECODE_ERRORs of ``apply_raw``.

    Raises (constructor):
        BookError: an instrument id outside 0..65535, or two symbols with the same id.
    """

    def __init__(self, symbols: Mapping[str, int], *, track_all: bool = False,
                 midnight_epoch_ns: int | None = None) -> None:
        ids = list(symbols.values())
        if any(not isinstance(i, int) or not 0 <= i <= 0xFFFF for i in ids) or len(set(ids)) != len(ids):
            raise BookError(f"instrument ids must be distinct ints in 0..65535: {dict(symbols)}")
        self.symbols = dict(symbols)
        self.track_all = track_all
        self.midnight_epoch_ns = midnight_epoch_ns
        self.counts = [0] * len(BookEvent)
        self.decode_rejects = [0] * len(M.DecodeReason)
        self.directory: dict[int, str] = {}  # stock_locate -> symbol, from R
        self.trading_state: dict[int, bytes] = {}  # stock_locate -> H trading state
        self.system_event = b" "
        self.ended = False
        self._stocks: dict[int, StockBook] = {}
        self._by_iid: dict[int, StockBook] = {}
        self._orders: dict[int, list] = {}
        self._handlers = {
            M.AddOrder: self._on_add, M.AddOrderMpid: self._on_add,
            M.OrderExecuted: self._on_execute, M.OrderExecutedWithPrice: self._on_execute,
            M.OrderCancel: self._on_cancel, M.OrderDelete: self._on_delete, M.OrderReplace: self._on_replace,
            M.StockDirectory: self._on_directory, M.StockTradingAction: self._on_trading_action,
            M.SystemEvent: self._on_system_event,
        }
        for cls in M.RECORD_TYPES:
            self._handlers.setdefault(cls, self._on_other)

    # ------------------------------------------------------------------------------ queries

    def stock(self, locate: int) -> StockBook | None:
        """The book of ``locate`` when tracked."""
        return self._stocks.get(locate)

    def stocks(self) -> list[StockBook]:
        return list(self._stocks.values())

    def order(self, ref: int) -> tuple[int, bytes, int, int] | None:
        """``(stock_locate, side b"B"/b"S", shares, price_p4)`` of a live order, else None."""
        o = self._orders.get(ref)
        return None if o is None else (o[0].locate, b"B" if o[1] else b"S", o[2], o[3])

    @property
    def n_orders(self) -> int:
        return len(self._orders)

    @property
    def rejected(self) -> int:
        """Messages rejected, all reasons together."""
        return sum(self.counts[r] for r in REJECTIONS)

    def stats(self) -> dict[str, int]:
        """``counts`` by event name."""
        return {e.name: self.counts[e] for e in BookEvent}

    def audit(self) -> list[str]:
        """Check the invariants against the orders (slow; tests and tools). Returns the problems.

        Levels must equal the sum of their orders' shares, every level > 0, every order > 0,
        price lists sorted, distinct and equal to the level keys.
        """
        problems = []
        want: dict[tuple[int, bool], dict[int, int]] = {}
        for ref, (st, is_bid, shares, price) in self._orders.items():
            if shares <= 0:
                problems.append(f"order {ref}: {shares} shares")
            lv = want.setdefault((st.locate, is_bid), {})
            lv[price] = lv.get(price, 0) + shares
        for st in self._stocks.values():
            for is_bid, side in ((True, st.bids), (False, st.asks)):
                name = f"locate {st.locate} {'bids' if is_bid else 'asks'}"
                if side.size != want.get((st.locate, is_bid), {}):
                    problems.append(f"{name}: levels differ from the orders")
                if side.prices != sorted(side.size) or len(set(side.prices)) != len(side.prices):
                    problems.append(f"{name}: price list out of step with the levels")
                if any(s <= 0 for s in side.size.values()):
                    problems.append(f"{name}: a level of <= 0 shares")
        return problems

    # ------------------------------------------------------------------------------ payload

    def write_payload(self, instrument_id: int, buf, offset: int = 0) -> int:
        """Write the BOOK payload of ``instrument_id`` into ``buf[offset:]``; return its size (504).

        A configured symbol whose R has not been seen yet gives an empty book.

        Raises:
            BookError: ``instrument_id`` is not configured.
            struct.error: ``buf`` is not writable or too small.
        """
        st = self._by_iid.get(instrument_id)
        if st is None:
            if instrument_id not in self.symbols.values():
                raise BookError(f"instrument id {instrument_id} is not configured")
            BOOK_STRUCT.pack_into(buf, offset, instrument_id, 0, 0, 0, 0, 0, *_ZEROS, *_ZEROS, *_ZEROS, *_ZEROS)
            return BOOK_STRUCT.size
        bids, asks = st.bids, st.asks
        bp = bids.prices[:-BOOK_LEVELS - 1:-1]  # best 15 bids, best first
        ap = asks.prices[:BOOK_LEVELS]
        zb, za = _ZEROS[len(bp):], _ZEROS[len(ap):]
        ts = 0 if self.midnight_epoch_ns is None else self.midnight_epoch_ns + st.ts_ns
        BOOK_STRUCT.pack_into(  # p4 -> float is p / 10000.0; struct turns the int sizes into doubles
            buf, offset, instrument_id, 0, len(bp), len(ap), st.seq, ts,
            *[p / _P4 for p in bp], *zb, *map(bids.size.__getitem__, bp), *zb,
            *[p / _P4 for p in ap], *za, *map(asks.size.__getitem__, ap), *za,
        )
        return BOOK_STRUCT.size

    def book_payload(self, instrument_id: int, out: np.ndarray | None = None) -> np.ndarray:
        """The BOOK payload of ``instrument_id`` as a ``BOOK_DTYPE`` array of shape (1,).

        ``out`` (a writable C-contiguous BOOK_DTYPE array of shape (1,)) is filled and returned
        when given.

        Raises:
            BookError: ``instrument_id`` is not configured, or ``out`` is not such an array.
        """
        if out is None:
            out = np.zeros(1, dtype=BOOK_DTYPE)
        elif out.dtype != BOOK_DTYPE or out.shape != (1,) or not out.flags.c_contiguous or not out.flags.writeable:
            raise BookError("out must be a writable C-contiguous BOOK_DTYPE array of shape (1,)")
        self.write_payload(instrument_id, out.data)
        return out

    # ------------------------------------------------------------------------------ apply

    def apply(self, record, seq: int = 0) -> int:
        """Apply one decoded record; ``seq`` is its feed sequence number (kept for the payload).

        Returns the instrument id whose BOOK changed, or NO_BOOK (-1): nothing configured changed
        (a rejection, a message without book effect, a stock not configured). Never raises.
        """
        h = self._handlers.get(type(record))
        if h is None:
            self.counts[_MALFORMED] += 1
            return NO_BOOK
        try:
            return h(record, seq)
        except Exception:  # a hand-built record with wrong field types: reject, keep going
            self.counts[_MALFORMED] += 1
            return NO_BOOK

    def apply_raw(self, buf, offset: int = 0, length: int | None = None, seq: int = 0) -> int:
        """Decode the message at ``buf[offset:]`` (``messages.try_decode``), then ``apply`` it.

        A message that does not decode is counted as DECODE_ERROR (reason in ``decode_rejects``).
        Returns as ``apply``. Never raises.
        """
        try:
            record, reason = M.try_decode(buf, offset, length)
        except Exception:  # not a buffer at all
            self.counts[_MALFORMED] += 1
            return NO_BOOK
        if record is None:
            self.counts[_DECODE] += 1
            self.decode_rejects[reason] += 1
            return NO_BOOK
        try:  # as apply, inlined: a decoded record always has a handler
            return self._handlers[type(record)](record, seq)
        except Exception:
            self.counts[_MALFORMED] += 1
            return NO_BOOK

    # -- the operations, on plain values (the streaming and the vectorized paths share them)

    def _reject(self, event: int) -> int:
        self.counts[event] += 1
        return NO_BOOK

    def add_order(self, locate: int, ref: int, side: bytes, shares: int, price_p4: int, ts_ns: int, seq: int) -> int:
        """A (or F): a new order. Returns as ``apply``."""
        st = self._stocks.get(locate)
        if st is None:
            if not self.track_all:
                return self._reject(_IGNORED)
            st = self._stocks[locate] = StockBook(locate)
        orders = self._orders
        if ref in orders:
            return self._reject(_DUP_REF)
        if side == b"B":
            is_bid, lv = True, st.bids
        elif side == b"S":
            is_bid, lv = False, st.asks
        else:
            return self._reject(_BAD_SIDE)
        if shares <= 0:
            return self._reject(_BAD_SHARES)
        orders[ref] = [st, is_bid, shares, price_p4]
        sizes = lv.size
        s = sizes.get(price_p4)
        if s is None:
            sizes[price_p4] = shares
            insort(lv.prices, price_p4)
        else:
            sizes[price_p4] = s + shares
        st.seq = seq
        st.ts_ns = ts_ns
        bp, ap = st.bids.prices, st.asks.prices
        if bp and ap and bp[-1] >= ap[0]:
            self.counts[_CROSSED] += 1
        self.counts[_APPLIED] += 1
        return st.instrument_id

    def _find(self, locate: int, ref: int):
        """(stock, order) or (None, event to count)."""
        st = self._stocks.get(locate)
        o = self._orders.get(ref)
        if st is None:
            if not self.track_all:
                return None, _IGNORED
            return None, (_UNKNOWN_REF if o is None else _MISMATCH)
        if o is None:
            return None, _UNKNOWN_REF
        if o[0] is not st:
            return None, _MISMATCH
        return st, o

    def _reduce(self, st: StockBook, ref: int, o: list, n: int, ts_ns: int, seq: int) -> int:
        lv = st.bids if o[1] else st.asks
        price = o[3]
        left = lv.size[price] - n
        if left:
            lv.size[price] = left
        else:
            del lv.size[price]
            prices = lv.prices
            del prices[bisect_left(prices, price)]
        if n == o[2]:
            del self._orders[ref]
        else:
            o[2] -= n
        st.seq = seq
        st.ts_ns = ts_ns
        self.counts[_APPLIED] += 1
        return st.instrument_id

    # E (or C) and X: the same operation, refused with their own event when it takes more than is left
    execute_order = _share_reduction("execute_order", _OVER_EXEC, "E (or C): ``shares`` of order ``ref`` executed.")
    cancel_order = _share_reduction("cancel_order", _OVER_CANCEL, "X: ``shares`` of order ``ref`` cancelled.")

    def delete_order(self, locate: int, ref: int, ts_ns: int, seq: int) -> int:
        """D: order ``ref`` removed. Returns as ``apply``."""
        st, o = self._find(locate, ref)
        if st is None:
            return self._reject(o)
        return self._reduce(st, ref, o, o[2], ts_ns, seq)

    def replace_order(self, locate: int, orig_ref: int, new_ref: int, shares: int, price_p4: int,
                      ts_ns: int, seq: int) -> int:
        """U: ``orig_ref`` leaves, ``new_ref`` enters with ``shares`` at ``price_p4``, same side."""
        st, o = self._find(locate, orig_ref)
        if st is None:
            return self._reject(o)
        if new_ref in self._orders:
            return self._reject(_DUP_REF)
        if shares <= 0:
            return self._reject(_BAD_SHARES)
        is_bid = o[1]
        self._reduce(st, orig_ref, o, o[2], ts_ns, seq)
        self.counts[_APPLIED] -= 1  # one message, counted once below
        return self.add_order(locate, new_ref, b"B" if is_bid else b"S", shares, price_p4, ts_ns, seq)

    # -- per record type

    def _on_add(self, r, seq: int) -> int:
        return self.add_order(r.stock_locate, r.order_ref, r.side, r.shares, r.price_p4, r.timestamp_ns, seq)

    def _on_execute(self, r, seq: int) -> int:
        return self.execute_order(r.stock_locate, r.order_ref, r.executed_shares, r.timestamp_ns, seq)

    def _on_cancel(self, r, seq: int) -> int:
        return self.cancel_order(r.stock_locate, r.order_ref, r.cancelled_shares, r.timestamp_ns, seq)

    def _on_delete(self, r, seq: int) -> int:
        return self.delete_order(r.stock_locate, r.order_ref, r.timestamp_ns, seq)

    def _on_replace(self, r, seq: int) -> int:
        return self.replace_order(r.stock_locate, r.orig_ref, r.new_ref, r.shares, r.price_p4, r.timestamp_ns, seq)

    def _on_directory(self, r, seq: int) -> int:
        locate = r.stock_locate
        symbol = M.alpha_text(r.stock)
        self.directory[locate] = symbol
        iid = self.symbols.get(symbol)
        st = self._stocks.get(locate)
        if st is not None and st.instrument_id >= 0 and st.instrument_id != iid:
            self._by_iid.pop(st.instrument_id, None)  # this locate now names another symbol
            st.instrument_id = NO_BOOK
        if iid is not None or self.track_all:
            if st is None:
                st = self._stocks[locate] = StockBook(locate)
            st.symbol = symbol
            if iid is not None:
                prev = self._by_iid.get(iid)
                if prev is not None and prev is not st:
                    prev.instrument_id = NO_BOOK  # the symbol moved to another locate
                st.instrument_id = iid
                self._by_iid[iid] = st
        self.counts[_NO_EFFECT] += 1
        return NO_BOOK

    def _on_trading_action(self, r, seq: int) -> int:
        self.trading_state[r.stock_locate] = r.trading_state
        st = self._stocks.get(r.stock_locate)
        if st is not None:
            st.trading_state = r.trading_state
        self.counts[_NO_EFFECT] += 1
        return NO_BOOK

    def _on_system_event(self, r, seq: int) -> int:
        self.system_event = r.event_code
        if r.event_code == b"C":
            self.ended = True
        self.counts[_NO_EFFECT] += 1
        return NO_BOOK

    def _on_other(self, r, seq: int) -> int:
        self.counts[_NO_EFFECT] += 1
        return NO_BOOK

    # ------------------------------------------------------------------------------ batch

    def apply_decoded(self, decoded, first_seq: int = 1) -> set[int]:
        """Apply a ``vectorized.decode_buffer`` result in message order; message i gets seq first_seq + i.

        Gives the same book, counts and payloads as ``apply`` of each record with the same seq
        (messages left out by the decoder, and a truncated end, count as DECODE_ERROR once each).
        Returns the instrument ids whose BOOK changed. Never raises on bad data.
        """
        from pipeline.trading.itch.vectorized import column_lists  # the book does not need numpy decode otherwise

        self.counts[_DECODE] += decoded.unknown_type + decoded.wrong_length + int(decoded.truncated)
        handlers = []
        tags = []
        rows = []
        where = []
        for char, arr in decoded.by_type.items():
            spec = M.SPECS_BY_CHAR[char]
            pos = decoded.positions[char]
            if char in "AFEXDUCRHS":
                tag = len(handlers)
                handlers.append(self._batch_handler(spec, column_lists(arr, spec)))
                tags.append(np.full(len(pos), tag, dtype=np.int64))
                rows.append(np.arange(len(pos), dtype=np.int64))
                where.append(pos)
            else:
                self.counts[_NO_EFFECT] += len(pos)  # order-independent: no book effect
        changed: set[int] = set()
        if not handlers:
            return changed
        where_all = np.concatenate(where)
        order = np.argsort(where_all, kind="stable")
        seqs = (where_all[order] + first_seq).tolist()
        for h, j, seq in zip(np.concatenate(tags)[order].tolist(), np.concatenate(rows)[order].tolist(), seqs):
            iid = handlers[h](j, seq)
            if iid >= 0:
                changed.add(iid)
        return changed

    def _batch_handler(self, spec: M.MsgSpec, cols: list[list]):
        c = spec.type_char
        loc, ts = cols[0], cols[2]
        if c in "AF":
            ref, side, shares, price = cols[3], cols[4], cols[5], cols[7]
            add = self.add_order
            return lambda j, seq: add(loc[j], ref[j], side[j], shares[j], price[j], ts[j], seq)
        if c in "EC":
            ref, n = cols[3], cols[4]
            execute = self.execute_order
            return lambda j, seq: execute(loc[j], ref[j], n[j], ts[j], seq)
        if c == "X":
            ref, n = cols[3], cols[4]
            cancel = self.cancel_order
            return lambda j, seq: cancel(loc[j], ref[j], n[j], ts[j], seq)
        if c == "D":
            ref = cols[3]
            delete = self.delete_order
            return lambda j, seq: delete(loc[j], ref[j], ts[j], seq)
        if c == "U":
            orig, new, shares, price = cols[3], cols[4], cols[5], cols[6]
            replace = self.replace_order
            return lambda j, seq: replace(loc[j], orig[j], new[j], shares[j], price[j], ts[j], seq)
        # R, H, S: rare; through the record path
        cls = spec.record
        return lambda j, seq: self.apply(cls(*(col[j] for col in cols)), seq)
