"""ITCH executions as TRADE payloads, beside the Level-3 book. Pure, no I/O.

``ExecutionBook`` is an ``L3Book`` that also reports, through an injected ``on_trade(payload)``, a
TRADE payload (``pipeline.trading.messages.TRADE_DTYPE``, 40 bytes) for every execution of a
configured symbol, before ``apply_raw`` returns (so a feed writes it ahead of the BOOK the same
message changes):

=====  =====================================================================================
E      a displayed order executed: price the order's, size the executed shares, side the
       aggressor's (the other side from the resting order: a bid executed is a sell)
C      the same at the message's execution price; only when printable ('Y': a non-printable
       execution is reported again elsewhere and would be counted twice)
P      a non-displayed order executed (no book effect): ``flags = TRADE_FLAG_HIDDEN``, price and
       shares the message's, side its buy/sell indicator as given (the hidden order's side, not an
       aggressor's; NASDAQ sends 'B' throughout), and nothing for an indicator other than B/S
=====  =====================================================================================

``trade_id`` is the match number; ``exch_ts_ns`` as the BOOK's (``midnight_epoch_ns`` + the ITCH
timestamp, 0 without a midnight). Only an execution the book accepted is reported (a rejected E / C
gives no TRADE). Every BOOK payload carries ``BOOK_FLAG_HIDDEN_REPORTED``: this venue reports its
non-displayed executions, so the features' hidden-order slots are meaningful for it; also
``BOOK_FLAG_CROSSED`` when the stock's best bid >= best ask, and the bits its feed put in
``stale_flags[instrument_id]`` (``BOOK_FLAG_REBUILDING`` / ``BOOK_FLAG_INVALID``: gap recovery).

Trades are reported from ``apply_raw`` (the feed's path: ``pipeline.trading.itch.ingest``); ``apply``
and the batch ``apply_decoded`` build the book only. Counters: ``trades_reported``,
``hidden_reported``.
"""

from __future__ import annotations

import struct
from typing import Callable, Mapping

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.book import NO_BOOK, L3Book
from pipeline.trading.messages import (BOOK_FLAG_CROSSED, BOOK_FLAG_HIDDEN_REPORTED, OFF_TRADE_FLAGS, TRADE_FLAG_HIDDEN,
                                       TRADE_SIDE_BUY,
                                       TRADE_SIDE_SELL, TRADE_STRUCT)

_P4 = 10_000.0
_U16 = struct.Struct("<H")
_BOOK_FLAGS_OFF = 2
_E, _C, _P = ord("E"), ord("C"), ord("P")


class ExecutionBook(L3Book):
    """An ``L3Book`` reporting executions as TRADE payloads (the module docstring).

    ``on_trade(payload)`` gets a 40-byte buffer it must copy before it returns (the next trade reuses
    it). Other arguments as ``L3Book``'s.

    Raises (constructor):
        BookError: as ``L3Book``.
    """

    def __init__(self, symbols: Mapping[str, int], *, on_trade: Callable[[bytearray], object], **kw) -> None:
        super().__init__(symbols, **kw)
        self.on_trade = on_trade
        self.trades_reported = 0
        self.hidden_reported = 0
        self._trade = bytearray(TRADE_STRUCT.size)
        #: instrument id -> BOOK flag bits the feed adds to its payloads (gap recovery's)
        self.stale_flags: dict[int, int] = {}

    def write_payload(self, instrument_id: int, buf, offset: int = 0) -> int:
        """``L3Book.write_payload`` with ``BOOK_FLAG_HIDDEN_REPORTED``, ``BOOK_FLAG_CROSSED`` (best bid >=
        best ask) and ``stale_flags[instrument_id]`` in the flags. Raises as it."""
        n = super().write_payload(instrument_id, buf, offset)
        flags = BOOK_FLAG_HIDDEN_REPORTED | self.stale_flags.get(instrument_id, 0)
        st = self._by_iid.get(instrument_id)
        if st is not None and st.is_crossed():
            flags |= BOOK_FLAG_CROSSED
        _U16.pack_into(buf, offset + _BOOK_FLAGS_OFF, flags)
        return n

    def apply_raw(self, buf, offset: int = 0, length: int | None = None, seq: int = 0) -> int:
        """``L3Book.apply_raw``, and the TRADE of an execution (the module docstring). Never raises."""
        try:
            code = buf[offset]
        except Exception:
            code = -1
        if code != _E and code != _C and code != _P:
            return super().apply_raw(buf, offset, length, seq)
        record, _reason = M.try_decode(buf, offset, length)
        if record is None:
            return super().apply_raw(buf, offset, length, seq)  # counted there
        if code == _P:
            self._hidden(record)
            return self.apply(record, seq)
        resting = self.order(record.order_ref)
        iid = self.apply(record, seq)
        if iid != NO_BOOK and resting is not None and (code == _E or record.printable == b"Y"):
            price = resting[3] if code == _E else record.exec_price_p4
            side = TRADE_SIDE_SELL if resting[1] == b"B" else TRADE_SIDE_BUY
            self._report(iid, side, 0, record.match_no, record.timestamp_ns, price, record.executed_shares)
        return iid

    def _hidden(self, r) -> None:
        st = self.stock(r.stock_locate)
        if st is None or st.instrument_id == NO_BOOK or r.shares <= 0 or r.price_p4 <= 0:
            return
        side = TRADE_SIDE_BUY if r.side == b"B" else TRADE_SIDE_SELL if r.side == b"S" else 0
        if side:
            self.hidden_reported += 1
            self._report(st.instrument_id, side, TRADE_FLAG_HIDDEN, r.match_no, r.timestamp_ns, r.price_p4, r.shares)

    def _report(self, iid: int, side: int, flags: int, match_no: int, ts_ns: int, price_p4: int, shares: int) -> None:
        ts = 0 if self.midnight_epoch_ns is None else self.midnight_epoch_ns + ts_ns
        buf = self._trade
        TRADE_STRUCT.pack_into(buf, 0, iid, side, match_no, ts, price_p4 / _P4, float(shares))
        buf[OFF_TRADE_FLAGS] = flags
        self.trades_reported += 1
        self.on_trade(buf)
