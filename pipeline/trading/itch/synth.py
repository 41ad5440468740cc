"""Deterministic synthetic ITCH 5.0 sessions: consistent order flow for tests and benches.

``generate_session(seed, n_events)`` returns a list of records:

- prelude: S 'O' (start of messages), one R per symbol (stock_locate 1, 2, ...), S 'S' (start of
  system hours), S 'Q' (start of market hours), H 'T' (trading) per symbol;
- ``n_events`` order-flow messages, a mix dominated by A/E/X/D/U/P: adds (A, some F) a few ticks
  around a per-symbol mid that random-walks, executions (E, some C) of the order first in time at
  the best level, partial cancels (X), deletes (D), replaces (U), non-displayed trades (P: order_ref
  0, side 'B'), an occasional H; with ``include_all_types`` also the other 12 types now and then;
- epilogue: S 'M', S 'E', S 'C' (end of messages).

The stream is consistent: every referenced order exists and belongs to the message's stock;
executions and cancels never exceed the remaining shares; X always leaves shares (D removes);
replacement references are fresh; a bid is always priced below the best ask and an ask above the
best bid, so the book never locks or crosses (no aggressive add is generated; aggression shows as
executions of resting orders). Timestamps never decrease. The same seed gives the same records.
"""

from __future__ import annotations

import bisect
import random
from typing import Sequence

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.framing import encode_binaryfile

TICK_P4 = 100  # $0.01
START_NS = 4 * 3600 * 10**9  # 04:00, start of system hours
DEFAULT_SYMBOLS = ("AAPL", "MSFT", "SPY", "QQQ")

#: Relative weights of the order-flow events.
EVENT_WEIGHTS = {
    "A": 34, "F": 4, "E": 12, "C": 2, "X": 8, "D": 20, "U": 11, "P": 4, "H": 0.2, "misc": 0.8,
}


class _Side:
    """Resting orders of one side of one symbol: sorted prices, FIFO of refs per price."""

    __slots__ = ("prices", "queue")

    def __init__(self) -> None:
        self.prices: list[int] = []
        self.queue: dict[int, list[int]] = {}

    def add(self, price: int, ref: int) -> None:
        q = self.queue.get(price)
        if q is None:
            self.queue[price] = [ref]
            bisect.insort(self.prices, price)
        else:
            q.append(ref)

    def remove(self, price: int, ref: int) -> None:
        q = self.queue[price]
        q.remove(ref)
        if not q:
            del self.queue[price]
            del self.prices[bisect.bisect_left(self.prices, price)]


class _Symbol:
    __slots__ = ("locate", "stock", "mid", "bids", "asks", "refs", "ref_index")

    def __init__(self, locate: int, stock: bytes, mid: int) -> None:
        self.locate = locate
        self.stock = stock
        self.mid = mid
        self.bids = _Side()
        self.asks = _Side()
        self.refs: list[int] = []
        self.ref_index: dict[int, int] = {}

    def track(self, ref: int) -> None:
        self.ref_index[ref] = len(self.refs)
        self.refs.append(ref)

    def untrack(self, ref: int) -> None:
        i = self.ref_index.pop(ref)
        last = self.refs.pop()
        if last != ref:
            self.refs[i] = last
            self.ref_index[last] = i


class _Generator:
    def __init__(self, seed: int, symbols: Sequence[str], include_all_types: bool) -> None:
        self.rng = random.Random(seed)
        self.include_all = include_all_types
        self.syms = [_Symbol(i + 1, M.pad_alpha(s, 8), 200_000 + 10_000 * self.rng.randrange(1, 500))
                     for i, s in enumerate(symbols)]
        self.orders: dict[int, list] = {}  # ref -> [symbol, is_bid, shares, price]
        self.next_ref = 1
        self.next_match = 1
        self.ts = START_NS
        self.out: list = []
        kinds = [k for k in EVENT_WEIGHTS if include_all_types or k != "misc"]
        self.kinds = kinds
        self.cum_weights = []
        acc = 0.0
        for k in kinds:
            acc += EVENT_WEIGHTS[k]
            self.cum_weights.append(acc)

    # -- helpers
    def tick_time(self) -> int:
        self.ts += self.rng.randrange(0, 20_000)
        return self.ts

    def hdr(self, locate: int) -> tuple[int, int, int]:
        return locate, self.rng.randrange(0, 8), self.tick_time()

    def emit(self, rec) -> None:
        self.out.append(rec)

    def shares(self) -> int:
        if self.rng.random() < 0.8:
            return self.rng.choice((100, 100, 100, 200, 300, 500, 1000))
        return self.rng.randrange(1, 5000)

    def price_for(self, s: _Symbol, is_bid: bool) -> int:
        k = 1 + min(int(self.rng.expovariate(0.35)), 30)
        if is_bid:
            p = s.mid - k * TICK_P4
            if s.asks.prices:
                p = min(p, s.asks.prices[0] - TICK_P4)
            return max(p, TICK_P4)
        p = s.mid + k * TICK_P4
        if s.bids.prices:
            p = max(p, s.bids.prices[-1] + TICK_P4)
        return p

    def new_ref(self) -> int:
        self.next_ref += self.rng.randrange(1, 4)
        return self.next_ref

    def new_match(self) -> int:
        self.next_match += 1
        return self.next_match

    def place(self, s: _Symbol, ref: int, is_bid: bool, shares: int, price: int) -> None:
        self.orders[ref] = [s, is_bid, shares, price]
        (s.bids if is_bid else s.asks).add(price, ref)
        s.track(ref)

    def remove(self, ref: int) -> None:
        s, is_bid, _, price = self.orders.pop(ref)
        (s.bids if is_bid else s.asks).remove(price, ref)
        s.untrack(ref)

    # -- events
    def add(self, s: _Symbol, mpid: bool) -> None:
        is_bid = self.rng.random() < 0.5
        price, shares, ref = self.price_for(s, is_bid), self.shares(), self.new_ref()
        side = b"B" if is_bid else b"S"
        if mpid:
            attribution = self.rng.choice((b"GSCO", b"MSCO", b"NITE", b"VIRT"))
            self.emit(M.AddOrderMpid(*self.hdr(s.locate), ref, side, shares, s.stock, price, attribution))
        else:
            self.emit(M.AddOrder(*self.hdr(s.locate), ref, side, shares, s.stock, price))
        self.place(s, ref, is_bid, shares, price)

    def execute(self, s: _Symbol, with_price: bool) -> bool:
        side = s.bids if self.rng.random() < 0.5 else s.asks
        if not side.prices:
            side = s.asks if side is s.bids else s.bids
            if not side.prices:
                return False
        best = side.prices[-1] if side is s.bids else side.prices[0]
        ref = side.queue[best][0]
        o = self.orders[ref]
        n = o[2] if self.rng.random() < 0.5 else self.rng.randrange(1, o[2] + 1)
        if with_price:
            self.emit(M.OrderExecutedWithPrice(*self.hdr(s.locate), ref, n, self.new_match(),
                                               self.rng.choice((b"Y", b"N")), o[3]))
        else:
            self.emit(M.OrderExecuted(*self.hdr(s.locate), ref, n, self.new_match()))
        self._reduce(ref, n)
        return True

    def _reduce(self, ref: int, n: int) -> None:
        o = self.orders[ref]
        if n == o[2]:
            self.remove(ref)
        else:
            o[2] -= n

    def pick(self, s: _Symbol) -> int | None:
        return s.refs[self.rng.randrange(len(s.refs))] if s.refs else None

    def cancel(self, s: _Symbol) -> bool:
        ref = self.pick(s)
        if ref is None or self.orders[ref][2] < 2:
            return False
        n = self.rng.randrange(1, self.orders[ref][2])
        self.emit(M.OrderCancel(*self.hdr(s.locate), ref, n))
        self._reduce(ref, n)
        return True

    def delete(self, s: _Symbol) -> bool:
        ref = self.pick(s)
        if ref is None:
            return False
        self.emit(M.OrderDelete(*self.hdr(s.locate), ref))
        self.remove(ref)
        return True

    def replace(self, s: _Symbol) -> bool:
        ref = self.pick(s)
        if ref is None:
            return False
        is_bid = self.orders[ref][1]
        self.remove(ref)
        price, shares, new = self.price_for(s, is_bid), self.shares(), self.new_ref()
        self.emit(M.OrderReplace(*self.hdr(s.locate), ref, new, shares, price))
        self.place(s, new, is_bid, shares, price)
        return True

    def trade(self, s: _Symbol) -> None:
        self.emit(M.Trade(*self.hdr(s.locate), 0, b"B", self.shares(), s.stock, s.mid, self.new_match()))

    def halt_state(self, s: _Symbol) -> None:
        self.emit(M.StockTradingAction(*self.hdr(s.locate), s.stock, b"T", b" ", b"    "))

    def misc(self, s: _Symbol) -> None:
        r = self.rng
        kind = r.choice("YLVWKJhQBINO")
        h = self.hdr(0 if kind in "VW" else s.locate)
        px = s.mid
        if kind == "Y":
            rec = M.RegShoRestriction(*h, s.stock, r.choice((b"0", b"1", b"2")))
        elif kind == "L":
            rec = M.MarketParticipantPosition(*h, b"GSCO", s.stock, b"Y", b"N", b"A")
        elif kind == "V":
            rec = M.MwcbDeclineLevel(*h, 3_500_00000000, 3_200_00000000, 2_900_00000000)
        elif kind == "W":
            rec = M.MwcbStatus(*h, r.choice((b"1", b"2", b"3")))
        elif kind == "K":
            rec = M.IpoQuotingPeriodUpdate(*h, s.stock, 34_200 + r.randrange(3600), b"A", px)
        elif kind == "J":
            rec = M.LuldAuctionCollar(*h, s.stock, px, px + 50 * TICK_P4, px - 50 * TICK_P4, r.randrange(4))
        elif kind == "h":
            rec = M.OperationalHalt(*h, s.stock, b"Q", b"T")
        elif kind == "Q":
            rec = M.CrossTrade(*h, r.choice((r.randrange(1, 10**6), (1 << 32) + r.randrange(10**6))),
                               s.stock, px, self.new_match(), r.choice((b"O", b"C", b"H", b"I")))
        elif kind == "B":
            rec = M.BrokenTrade(*h, r.randrange(1, self.next_match + 1))
        elif kind == "I":
            rec = M.Noii(*h, r.randrange(10**6), r.randrange(10**6), r.choice((b"B", b"S", b"N", b"O")),
                         s.stock, px, px, px, b"O", b"L")
        elif kind == "N":
            rec = M.Rpii(*h, s.stock, r.choice((b"B", b"S", b"A", b"N")))
        else:
            rec = M.DlcrPriceDiscovery(*h, s.stock, b"Y", px - 100 * TICK_P4, px + 100 * TICK_P4, px,
                                       self.ts, px - 50 * TICK_P4, px + 50 * TICK_P4)
        self.emit(rec)

    # -- session
    def prelude(self) -> None:
        self.emit(M.SystemEvent(*self.hdr(0), b"O"))
        for s in self.syms:
            self.emit(M.StockDirectory(*self.hdr(s.locate), s.stock, b"Q", b"N", 100, b"N", b"C", b"  ", b"P",
                                       b"N", b"N", b"1", b"N", 0, b"N"))
        self.emit(M.SystemEvent(*self.hdr(0), b"S"))
        self.emit(M.SystemEvent(*self.hdr(0), b"Q"))
        for s in self.syms:
            self.halt_state(s)

    def epilogue(self) -> None:
        for code in (b"M", b"E", b"C"):
            self.emit(M.SystemEvent(*self.hdr(0), code))

    def body(self, n_events: int) -> None:
        r = self.rng
        emitted = 0
        while emitted < n_events:
            s = self.syms[r.randrange(len(self.syms))]
            if r.random() < 0.05:
                s.mid = max(s.mid + r.choice((-TICK_P4, TICK_P4)), 2 * TICK_P4)
            kind = self.kinds[bisect.bisect(self.cum_weights, r.random() * self.cum_weights[-1])]
            if len(s.refs) < 20 and kind in "EXDU":
                kind = "A"  # keep some depth
            elif len(s.refs) > 400 and kind in ("A", "F"):
                kind = "D"  # and keep it bounded
            if kind == "A" or kind == "F":
                self.add(s, kind == "F")
                ok = True
            elif kind == "E" or kind == "C":
                ok = self.execute(s, kind == "C")
            elif kind == "X":
                ok = self.cancel(s)
            elif kind == "D":
                ok = self.delete(s)
            elif kind == "U":
                ok = self.replace(s)
            elif kind == "P":
                self.trade(s)
                ok = True
            elif kind == "H":
                self.halt_state(s)
                ok = True
            else:
                self.misc(s)
                ok = True
            emitted += ok


def generate_session(seed: int, n_events: int, *, symbols: Sequence[str] = DEFAULT_SYMBOLS,
                     include_all_types: bool = False) -> list:
    """A consistent session of ITCH records: prelude, ``n_events`` order-flow messages, epilogue.

    Symbols get stock_locate 1, 2, ... in the order given. See the module docstring for the mix
    and what consistent means.

    Raises:
        EncodeError: a symbol is longer than 8 characters or not ASCII.
    """
    g = _Generator(seed, symbols, include_all_types)
    g.prelude()
    g.body(n_events)
    g.epilogue()
    return g.out


def session_binaryfile(records) -> bytes:
    """The BinaryFILE bytes (with the end-of-session marker) of ``records``.

    Raises:
        EncodeError: a record cannot be encoded.
    """
    return encode_binaryfile([M.encode(r) for r in records])


def generate_binaryfile(seed: int, n_events: int, **kwargs) -> bytes:
    """``session_binaryfile(generate_session(seed, n_events, **kwargs))``."""
    return session_binaryfile(generate_session(seed, n_events, **kwargs))
