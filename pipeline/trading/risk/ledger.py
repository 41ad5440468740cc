"""The risk gateway's ledger, sans I/O: per instrument the position (base units, signed; ``position_lots``
in lots), the average entry price, the open orders, and the realized PnL over all of them.

Open orders count from the moment they are added (approved, pending) until they are removed (a
terminal EXEC_REPORT, or ``forget_order`` for one that could not be written); orders being cancelled
still count (conservative). ``apply_fill`` keeps the average entry price (average-price accounting:
closing realizes against it, a flip opens the rest at the fill price). ``replace_state`` replaces every
position and open order by a collected ``StateReport`` (realized PnL is kept). Nothing here raises
except ``position_lots`` (KeyError: an unconfigured instrument).

``Book`` also carries what the other layers keep per instrument (the reference mid and spread, the
volatility, the EMERGENCY cool-down, the live plan); the ledger only reads the mid for PnL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipeline.trading.messages import Side
from pipeline.trading.risk.limits import EPS, InstrumentSpec


class Working:
    """One open order as the gateway sees it. ``status``: "pending" (sent, no report yet), "acked",
    "unknown"; ``cancelling``: a CANCEL / CANCEL_ALL was sent for it; ``plan``: the planner's ``Plan``
    that placed it (None: reported by the sender)."""

    __slots__ = ("order_id", "side", "price", "size", "planned_mid", "plan", "status", "cancelling")

    def __init__(self, order_id, side, price, size, planned_mid, plan, status):
        self.order_id, self.side, self.price, self.size = order_id, side, price, size
        self.planned_mid, self.plan, self.status, self.cancelling = planned_mid, plan, status, False


class Book:
    """Per-instrument state: reference, volatility, position, open orders, the live plan
    (``planner.Plan`` or None)."""

    __slots__ = ("spec", "mid", "spread", "ref_ns", "var", "position", "avg_px", "working", "cooldown_until_ns",
                 "plan")

    def __init__(self, spec: InstrumentSpec):
        self.spec = spec
        self.mid = 0.0
        self.spread = 0.0
        self.ref_ns = -1  # ts_origin_ns of the latest SIGNAL; -1: none
        self.var = 0.0
        self.position = 0.0  # base units, signed
        self.avg_px = 0.0
        self.working: dict[int, Working] = {}
        self.cooldown_until_ns = -1
        self.plan = None

    @property
    def sigma(self) -> float:
        return math.sqrt(self.var)

    def unrealized_pnl(self) -> float:
        """``position * (mid - avg_px)`` in quote currency at the latest ref_mid; 0 while the position,
        the mid or the entry price is unknown (a position set to the venue's counts from the first mid)."""
        if self.position and self.mid > 0 and self.avg_px > 0:
            return self.position * (self.mid - self.avg_px)
        return 0.0

    def open_sizes(self) -> tuple[float, float]:
        """(open buy size, open sell size), base units, every open order (cancelling included)."""
        b = s = 0.0
        for w in self.working.values():
            if w.side == Side.BUY:
                b += w.size
            else:
                s += w.size
        return b, s


@dataclass(slots=True)
class StateReport:
    """A state report being collected (the sender's POSITION / OPEN_ORDER / POSITION_MISMATCH reports
    until its SYNC_DONE); ``solicited``: the answer to our SYNC (else the sender restarted)."""

    solicited: bool
    positions: dict[int, tuple[float, float]] = field(default_factory=dict)  # instrument -> (size, avg price)
    orders: dict[int, tuple[int, int, float, float]] = field(default_factory=dict)  # id -> (instrument, side, px, size)
    mismatch: dict[int, tuple[float, float]] = field(default_factory=dict)  # instrument -> (journal's, venue's size)


class Ledger:
    """Positions, open orders and PnL of the configured instruments (``specs``: id -> ``InstrumentSpec``).

    Attributes: ``books`` (id -> ``Book``), ``open_count`` (open orders, all instruments), ``seen_ids``
    (every order id approved or reported: the duplicate check's), ``realized_pnl`` (quote currency).
    """

    def __init__(self, specs: dict[int, InstrumentSpec]):
        self.specs = specs
        self.books: dict[int, Book] = {i: Book(s) for i, s in specs.items()}
        self.seen_ids: set[int] = set()
        self.realized_pnl = 0.0
        self.open_count = 0

    def add_working(self, bk: Book, w: Working) -> None:
        bk.working[w.order_id] = w
        self.open_count += 1

    def remove_working(self, bk: Book, oid: int) -> None:
        if bk.working.pop(oid, None) is not None:
            self.open_count -= 1

    def forget_order(self, instrument_id: int, order_id: int) -> None:
        """An approved order that could not be written: no longer open."""
        bk = self.books.get(instrument_id)
        if bk is not None:
            self.remove_working(bk, order_id)

    def apply_fill(self, bk: Book, side: int, price: float, size: float) -> None:
        """Move ``bk``'s position by one fill (``size`` > 0, ``side`` BUY / SELL); realize what it closes."""
        signed = size if side == Side.BUY else -size
        pos = bk.position
        if pos == 0 or (pos > 0) == (signed > 0):  # opening / adding
            new = pos + signed
            bk.avg_px = (bk.avg_px * abs(pos) + price * size) / abs(new)
            bk.position = new
            return
        closed = min(abs(pos), size)
        self.realized_pnl += closed * (price - bk.avg_px) * (1.0 if pos > 0 else -1.0)
        new = pos + signed
        if abs(new) <= bk.spec.lot * EPS:
            bk.position, bk.avg_px = 0.0, 0.0
        else:
            if (new > 0) != (pos > 0):  # flipped: the rest opens at the fill price
                bk.avg_px = price
            bk.position = new

    def replace_state(self, report: StateReport) -> None:
        """Every position and open order from ``report`` (an instrument it does not name is flat, an
        order for an unconfigured instrument is left out); realized PnL is kept."""
        for iid, bk in self.books.items():
            bk.working.clear()
            bk.position, bk.avg_px = report.positions.get(iid, (0.0, 0.0))
            if not bk.position:
                bk.avg_px = 0.0
        self.open_count = 0
        for oid, (iid, side, price, size) in report.orders.items():
            bk = self.books.get(iid)
            if bk is not None:
                self.add_working(bk, Working(oid, side, price, size, bk.mid, None, "acked"))
                self.seen_ids.add(oid)

    def pnl(self) -> float:
        """Realized + unrealized PnL (quote currency); unrealized at the latest ref_mid (entry price
        if no mid yet; a position whose entry is not known, one set to the venue's, counts from the
        first mid after it)."""
        return self.realized_pnl + sum(bk.unrealized_pnl() for bk in self.books.values())

    def reset_daily_pnl(self) -> None:
        """Start a new trading day: realized PnL back to 0."""
        self.realized_pnl = 0.0

    def position_lots(self, instrument_id: int) -> float:
        bk = self.books[instrument_id]
        return bk.position / bk.spec.lot
