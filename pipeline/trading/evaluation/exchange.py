"""The simulated exchange of the evaluation, sans-I/O: the paper venue's matching engine
(``pipeline.venue.orders.OrderEngine``) behind the pipeline's own ORDER / EXEC_REPORT payloads, matched
against the replayed book, on simulated time.

- ``ReplayedBook``: the latest BOOK payload of each instrument, shown to the engine as the venue's
  ``[price, size]`` strings (the instrument's decimals), best first, top 15 a side (what a BOOK holds);
  rendered only when the engine asks (it asks only while we have orders or place one), and then only
  the levels it reads.
- ``SimulatedExchange``: ``on_book`` / ``on_trade`` (a market event reaches the engine: queue
  positions move, resting orders fill), ``on_order`` (an ORDER reaches the engine: NEW through the
  order sender's own place body, ``pipeline.trading.bitget.rest.place_body``; CANCEL / CANCEL_ALL;
  SYNC is answered by the simulator). Each returns the EXEC_REPORT payloads it caused, in order, as the
  order sender reports them: ACKED when a NEW is accepted (leaves = its size), REJECTED with
  VENUE_REJECTED when the engine refuses it (a post-only order that would cross, ...) or MALFORMED when
  its price or size is off the grid, FILLED per fill (leaves = what still works), CANCELLED when a cancel
  succeeds; a cancel of an order no longer open reports nothing (its fill or cancel was reported).
  Every fill is also kept as a ``metrics.Fill`` (``fills``) with its fee and liquidity from the engine,
  every order a cancel removed as a ``markouts.CancelledOrder`` (``cancelled``: its working size and
  the ``why`` the ORDER came with), and ``counts`` has the orders placed and those that filled at
  least once (``filled_orders``: the fill rate's numerator).

The engine's clock is the simulated time in ms (``clock_ns() // 1e6``); its ids start from it, so a
run is the same every time.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from decimal import Decimal

import numpy as np
import orjson

from pipeline.trading.bitget import rest
from pipeline.trading.evaluation.markouts import CancelledOrder
from pipeline.trading.evaluation.metrics import Fill
from pipeline.trading.evaluation.replay import TapeInstrument, tick_decimals
from pipeline.trading.messages import (BOOK_DTYPE, BOOK_LEVELS, EXEC_STRUCT, TRADE_STRUCT, ExecReason, ExecType,
                                       OrderCmd, Side, client_oid, decode_order, order_id_from_client_oid)
from pipeline.venue.fees import FeeSchedule
from pipeline.venue.order_fields import InstrumentRules, OrderRejected
from pipeline.venue.orders import OrderEngine

_LEVELS = struct.Struct(f"<{4 * BOOK_LEVELS}d")  # bid_px, bid_sz, ask_px, ask_sz after the 24-byte head
_HEAD = struct.Struct("<HHHH")
_NS_PER_MS = 1_000_000
_SIDE_TEXT = {"buy": Side.BUY, "sell": Side.SELL}


class _RenderedSide(Sequence):
    """One side of a BOOK payload as the venue's ``[price, size]`` strings, best first; a level is
    rendered the first time it is read (the engine mostly reads the few levels near our orders)."""

    __slots__ = ("_values", "_px_at", "_sz_at", "_n", "_pf", "_sf", "_done")

    def __init__(self, values: tuple, px_at: int, sz_at: int, n: int, pf: Callable, sf: Callable):
        self._values, self._px_at, self._sz_at, self._n, self._pf, self._sf = values, px_at, sz_at, n, pf, sf
        self._done: list[list[str]] = []

    def _render(self, k: int) -> None:
        """Render the levels up to ``k`` (< len)."""
        done, v, px_at, sz_at, pf, sf = self._done, self._values, self._px_at, self._sz_at, self._pf, self._sf
        for i in range(len(done), k + 1):
            done.append([pf(v[px_at + i]), sf(v[sz_at + i])])

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._n))]
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(k)
        if k >= len(self._done):
            self._render(k)
        return self._done[k]

    def __iter__(self):
        done = self._done
        for i in range(self._n):
            if i == len(done):
                self._render(i)
            yield done[i]


class ReplayedBook:
    """The replayed public book per symbol (see the module docstring); ``set`` takes a BOOK payload."""

    def __init__(self, instruments: Sequence[TapeInstrument]):
        self.symbol_of = {i.id: i.symbol for i in instruments}
        self._fmt = {i.symbol: (f"{{:.{tick_decimals(i.tick_size)}f}}".format,
                                f"{{:.{tick_decimals(i.lot_size)}f}}".format) for i in instruments}
        self._payload: dict[str, bytes] = {}
        self._levels: dict[str, tuple[_RenderedSide, _RenderedSide]] = {}

    def set(self, instrument_id: int, payload: bytes) -> str:
        """The BOOK ``payload`` is now ``instrument_id``'s book; returns its symbol."""
        sym = self.symbol_of[instrument_id]
        self._payload[sym] = payload
        self._levels.pop(sym, None)
        return sym

    def rendered(self, symbol: str, n: int | None = None) -> tuple[Sequence, Sequence]:
        """(bids, asks) best first as ``[price, size]`` strings, at most ``n`` a side (the engine's
        ``book`` callable): sequences that render a level when it is first read (lists when ``n``
        is given); empty before the symbol's first BOOK."""
        lv = self._levels.get(symbol)
        if lv is None:
            payload = self._payload.get(symbol)
            if payload is None:
                return [], []
            _iid, _flags, nb, na = _HEAD.unpack_from(payload, 0)
            v = _LEVELS.unpack_from(payload, 24)
            L = BOOK_LEVELS
            pf, sf = self._fmt[symbol]
            lv = self._levels[symbol] = (_RenderedSide(v, 0, L, min(nb, L), pf, sf),
                                         _RenderedSide(v, 2 * L, 3 * L, min(na, L), pf, sf))
        if n is None:
            return lv
        return lv[0][:n], lv[1][:n]

    def levels(self, symbol: str, n: int | None = None) -> tuple[list, list]:
        """(bids, asks) best first as ``[price, size]`` string lists, at most ``n`` a side; empty
        sides before the symbol's first BOOK."""
        bids, asks = self.rendered(symbol, n)
        return list(bids), list(asks)

    def mid(self, symbol: str) -> float | None:
        """The mid of the symbol's latest book; None before one or with an empty side."""
        payload = self._payload.get(symbol)
        if payload is None:
            return None
        rec = np.frombuffer(payload, BOOK_DTYPE, 1)[0]
        if not (rec["n_bids"] and rec["n_asks"]):
            return None
        return 0.5 * (float(rec["bid_px"][0]) + float(rec["ask_px"][0]))


class SimulatedExchange:
    """The engine behind ORDER / EXEC_REPORT payloads (see the module docstring).

    ``clock_ns``: the simulated time; ``fees``: the maker / taker schedule (None: no fees);
    ``queue_model``: resting orders wait behind the displayed size at their price.
    """

    def __init__(self, instruments: Sequence[TapeInstrument], clock_ns: Callable[[], int], *,
                 fees: FeeSchedule | None, queue_model: bool):
        self.instruments = {i.id: i for i in instruments}
        self.id_of = {i.symbol: i.id for i in instruments}
        self.book = ReplayedBook(instruments)
        self.clock_ns = clock_ns
        rules = {i.symbol: InstrumentRules(i.symbol, Decimal(repr(float(i.tick_size))),
                                           Decimal(repr(float(i.lot_size)))) for i in instruments}
        self.engine = OrderEngine(rules, self.book.rendered, lambda: clock_ns() // _NS_PER_MS, fees=fees,
                                  queue_model=queue_model)
        self.fills: list[Fill] = []
        self.cancelled: list[CancelledOrder] = []
        self.counts = {"placed": 0, "rejected": 0, "malformed": 0, "cancelled": 0, "fills": 0, "maker_fills": 0,
                       "taker_fills": 0, "filled_orders": 0}
        self._seen_fills = 0
        self._filled: dict[int, Decimal] = {}  # venue order id -> filled so far (reported)
        self._open: dict[str, set[int]] = {i.symbol: set() for i in instruments}  # venue ids of our open orders
        self._touched: set[str] = set()  # symbols whose displayed size an order took in this book state

    # ------------------------------------------------------------------------------- market events
    def on_book(self, instrument_id: int, payload: bytes) -> list[bytes]:
        """A BOOK of ``instrument_id`` at the current time: the engine's book changes (queue
        positions, crossing fills). Returns the EXEC_REPORT payloads."""
        sym = self.book.set(instrument_id, payload)
        if not self._open[sym] and sym not in self._touched:
            return []
        self._touched.discard(sym)
        self.engine.book_changed(sym)
        return self._new_fill_reports()

    def on_trade(self, instrument_id: int, payload: bytes) -> list[bytes]:
        """A public TRADE of ``instrument_id``: fills our resting orders at or through its price."""
        sym = self.book.symbol_of[instrument_id]
        if not self._open[sym]:
            return []
        _iid, _side, _tid, _ts, px, sz = TRADE_STRUCT.unpack_from(payload, 0)
        pf, sf = self.book._fmt[sym]
        self.engine.traded(sym, ({"price": pf(px), "size": sf(sz)},))
        return self._new_fill_reports()

    # ------------------------------------------------------------------------------- orders
    def on_order(self, payload: bytes, why: str = "") -> list[bytes]:
        """An ORDER payload reaching the engine now; ``why``: the gateway's reason for a cancel (kept
        with the orders it removes). Returns the EXEC_REPORT payloads."""
        o = decode_order(payload)
        ins = self.instruments.get(o.instrument_id)
        if ins is None:
            return [self._report(o.instrument_id, ExecType.REJECTED, o.side, o.order_id, o.price, o.size, 0.0,
                                 ExecReason.VENUE_REJECTED)]
        if o.cmd == OrderCmd.NEW:
            return self._new(o, ins)
        if o.cmd == OrderCmd.CANCEL:
            return self._cancel(ins.symbol, [o.order_id], why)
        if o.cmd == OrderCmd.CANCEL_ALL:
            return self._cancel(ins.symbol, None, why)
        return []  # SYNC: the simulator's

    def _new(self, o, ins: TapeInstrument) -> list[bytes]:
        try:
            body = rest.place_body(ins.symbol, o.side, o.tif, o.price, o.size, client_oid(o.order_id), ins.tick_size,
                                   ins.lot_size)
        except ValueError:
            self.counts["malformed"] += 1
            return [self._report(ins.id, ExecType.REJECTED, o.side, o.order_id, o.price, o.size, 0.0,
                                 ExecReason.MALFORMED)]
        try:
            order = self.engine.place(orjson.loads(body))
        except OrderRejected:
            self.counts["rejected"] += 1
            return [self._report(ins.id, ExecType.REJECTED, o.side, o.order_id, o.price, o.size, 0.0,
                                 ExecReason.VENUE_REJECTED)]
        self.counts["placed"] += 1
        self._touched.add(ins.symbol)
        out = [self._report(ins.id, ExecType.ACKED, o.side, o.order_id, o.price, o.size, o.size)]
        out += self._new_fill_reports()
        if order.is_open:
            self._open[ins.symbol].add(order.order_id)
        elif order.remaining > 0:  # an ioc remainder or a killed fok
            out.append(self._report(ins.id, ExecType.CANCELLED, o.side, o.order_id, o.price, o.size, 0.0))
        return out

    def _cancel(self, symbol: str, order_ids: list[int] | None, why: str = "") -> list[bytes]:
        """Cancel our open orders of ``symbol`` (those of ``order_ids``; all when None)."""
        eng = self.engine
        if order_ids is None:
            targets = [eng.orders[v] for v in sorted(self._open[symbol])]
        else:
            targets = []
            for oid in order_ids:
                found = eng.account.find(None, client_oid(oid))
                if found is not None and found.is_open and found.symbol == symbol:
                    targets.append(found)
        out = []
        iid = self.id_of[symbol]
        now = self.clock_ns()
        for order in targets:
            working = order.remaining
            eng.cancel(symbol, order_id=order.order_id)
            self._open[symbol].discard(order.order_id)
            self.counts["cancelled"] += 1
            self.cancelled.append(CancelledOrder(ts_ns=now, instrument_id=iid, side=1 if order.side == "buy" else -1,
                                                 price=float(order.price), size=float(working), why=why))
            out.append(self._report(iid, ExecType.CANCELLED, _SIDE_TEXT[order.side],
                                    order_id_from_client_oid(order.client_oid) or 0, float(order.price),
                                    float(order.size), 0.0))
        return out

    # ------------------------------------------------------------------------------- reports
    def _new_fill_reports(self) -> list[bytes]:
        """FILLED reports (and ``metrics.Fill`` records) for the engine's fills since the last call."""
        fills = self.engine.fills
        if len(fills) == self._seen_fills:
            return []
        out = []
        now = self.clock_ns()
        for f in fills[self._seen_fills:]:
            order = self.engine.orders[f.order_id]
            before = self._filled.get(f.order_id, Decimal(0))
            if not before:
                self.counts["filled_orders"] += 1
            done = before + f.size
            self._filled[f.order_id] = done
            side = _SIDE_TEXT[f.side]
            iid = self.id_of[f.symbol]
            leaves = order.size - done
            if leaves <= 0:
                self._open[f.symbol].discard(f.order_id)
            out.append(self._report(iid, ExecType.FILLED, side, order_id_from_client_oid(f.client_oid) or 0,
                                    float(f.price), float(f.size), float(leaves), fill_id=f.trade_id))
            self.fills.append(Fill(ts_ns=now, instrument_id=iid, side=1 if side == Side.BUY else -1,
                                   price=float(f.price), size=float(f.size), fee=float(f.fee),
                                   liquidity=f.liquidity))
            self.counts["fills"] += 1
            self.counts[f.liquidity + "_fills"] += 1
        self._seen_fills = len(fills)
        return out

    def _report(self, iid: int, etype: int, side: int, order_id: int, price: float, size: float, leaves: float,
                reason: int = ExecReason.NONE, fill_id: int = 0) -> bytes:
        return EXEC_STRUCT.pack(iid, etype, side, reason, order_id, price, size, leaves, self.clock_ns(), fill_id)
