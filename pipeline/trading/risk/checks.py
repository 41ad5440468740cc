"""The risk gateway's pre-trade checks, sans I/O: ``PreTradeChecks.check`` judges one new order against
the limits, the ledger, the trading state and the send windows.

The checks run in this order, each its own ``DenyReason``: HALTED, NOT_SYNCED, COOLDOWN, NOT_ALLOWED,
BAD_CONTRACT, STALE_REF, BAD_PRICE, BAD_SIZE, COLLAR, REDUCING, REDUCE_ONLY, MIN_NOTIONAL, MAX_NOTIONAL,
MAX_POSITION, GROSS, NET_DELTA, MAX_OPEN, RATE, NOTIONAL_RATE, DUPLICATE, SELF_TRADE, DAILY_LOSS.
Perpetuals: sizes and positions are base units, a lot is one contract (``limits``), so MAX_POSITION and
BAD_SIZE count contracts; a reduce-only order (``reduce_only=True``: a perpetual's, one-way mode) must
shrink the position without crossing zero, counting the open orders on its side, else REDUCE_ONLY
(spot has no reduce-only: REDUCE_ONLY too); NET_DELTA is the net exposure per settlement currency
(``RiskLimits.max_net_notional``), where the spot and the perpetual of one base net out. The caller turns an exception in a
check into a denial (INTERNAL_ERROR). Cancels are never checked. Open orders count from the moment they
are approved (pending) until a terminal EXEC_REPORT; orders being cancelled still count (conservative).

The trading state the checks gate on (``TradingState``, ``latched``, ``synced``) is held here; the
transitions are ``state.TradingStateMachine``'s. The send windows (orders in the last second, notional
in the last minute) are recorded by the planner's ``submit`` when it approves an order.
"""

from __future__ import annotations

import enum
import math
from collections import deque

from pipeline.trading.messages import Side
from pipeline.trading.risk.ledger import Book, Ledger
from pipeline.trading.risk.limits import EPS, NS_PER_MS, NS_PER_S, InstrumentSpec, RiskLimits


class DenyReason(enum.IntEnum):
    """Why a new order was denied (``OrderDenied.reason``); counted as ``deny_<name lower>``."""

    HALTED = 1  # kill switch, halt or daily loss: no new orders
    NOT_SYNCED = 2  # no SYNC_DONE since start / since a state report began
    COOLDOWN = 3  # the instrument had an EMERGENCY signal less than emergency_cooldown_ms ago
    NOT_ALLOWED = 4  # the instrument is not configured or not in limits.allowed
    BAD_PRICE = 5  # not finite, not positive, off tick or beyond the tick's precision
    BAD_SIZE = 6  # not finite, not positive, off the lot step, or over max_order_lots
    STALE_REF = 7  # no SIGNAL for the instrument, or the latest is older than stale_ref_ms
    COLLAR = 8  # price further than collar_bps from the reference mid
    REDUCING = 9  # REDUCING state and the order would not reduce the position
    MIN_NOTIONAL = 10
    MAX_NOTIONAL = 11
    MAX_POSITION = 12  # position + open orders on that side + this order beyond max_position_lots
    GROSS = 13  # worst-case gross exposure over instruments beyond max_gross_notional
    MAX_OPEN = 14  # open orders (all instruments) at max_open_orders
    RATE = 15  # max_orders_per_s orders already sent in the last second
    NOTIONAL_RATE = 16  # notional sent in the last minute + this beyond max_notional_per_min
    DUPLICATE = 17  # order id already used
    SELF_TRADE = 18  # would cross our own working order on the other side
    DAILY_LOSS = 19  # realized + unrealized PnL at or below -daily_loss_limit (also halts)
    INTERNAL_ERROR = 20  # a check raised: fail closed
    REDUCE_ONLY = 21  # a reduce-only order that would open, grow or flip the position (or a spot one)
    NET_DELTA = 22  # worst-case net exposure of the settlement currency beyond max_net_notional
    BAD_CONTRACT = 23  # a perpetual whose contract size is not > 0: nothing can be sized


#: ``Book.ref_ns`` after a SIGNAL with SIGNAL_FLAG_STALE_BOOK (the market data's book rebuilding, crossed
#: or invalid): no reference until the next unflagged SIGNAL, so every new order is STALE_REF
REF_STALE_BOOK = -2


class TradingState(enum.IntEnum):
    ACTIVE = 0
    REDUCING = 1
    HALTED = 2


def _only_reduces(side: int, pos: float, buys: float, sells: float, size: float, lot: float) -> bool:
    """Whether an order of ``size`` on ``side`` only reduces ``pos``: the position after every open order
    on that side (``buys`` / ``sells``) and this one neither crosses zero nor grows (to within a lot's
    ``EPS``)."""
    if side == Side.BUY:
        return pos < 0 and pos + buys + size <= lot * EPS
    return pos > 0 and pos - sells - size >= -lot * EPS


class PreTradeChecks(Ledger):
    """The ledger plus what the checks read besides it: ``limits``, the trading state (``state``,
    ``latched``, ``synced``: starts ACTIVE, not latched, not synced) and the send windows (``_rate``:
    send times of the last second; ``_notional``: (send time, notional) of the last minute, summed in
    ``_notional_sum``)."""

    def __init__(self, specs: dict[int, InstrumentSpec], limits: RiskLimits):
        super().__init__(specs)
        self.limits = limits
        self.state = TradingState.ACTIVE
        self.latched = False
        self.synced = False
        self._rate: deque[int] = deque()  # send times of the last second
        self._notional: deque[tuple[int, float]] = deque()  # (send time, notional) of the last minute
        self._notional_sum = 0.0
        self.collar = limits.collar_bps * 1e-4
        self.stale_ns = limits.stale_ref_ms * NS_PER_MS

    # hot path: one function on purpose: every new order runs these checks in order (bench/risk.py times
    # the decision per approved / denied order); split up, each order would pay one more call per part.
    # It changes nothing but dropping send times older than their window.
    def check(self, bk: Book, oid: int, side: int, price: float, size: float, now: int,
              reduce_only: bool = False) -> tuple[int, str]:
        """The pre-trade checks of one new order: (0, "") or (DenyReason, detail); may raise (INTERNAL_ERROR).
        ``reduce_only``: the order may only reduce the position (a perpetual's)."""
        lim = self.limits
        spec = bk.spec
        if self.state == TradingState.HALTED:
            return DenyReason.HALTED, "latched" if self.latched else "halted"
        if not self.synced:
            return DenyReason.NOT_SYNCED, ""
        if bk.cooldown_until_ns > now:
            return DenyReason.COOLDOWN, f"{(bk.cooldown_until_ns - now) // NS_PER_MS} ms left"
        if not spec.allowed:
            return DenyReason.NOT_ALLOWED, spec.symbol
        if spec.product != "SPOT" and not spec.contract > 0:
            return DenyReason.BAD_CONTRACT, f"{spec.symbol} contract size {spec.contract!r}"
        mid = bk.mid
        if bk.ref_ns < 0 or not mid > 0:
            return DenyReason.STALE_REF, "book stale" if bk.ref_ns == REF_STALE_BOOK else "no reference"
        age = now - bk.ref_ns
        if age > self.stale_ns:
            return DenyReason.STALE_REF, f"reference {age // NS_PER_MS} ms old"
        tick, lot = spec.tick, spec.lot
        if not (math.isfinite(price) and price > 0):
            return DenyReason.BAD_PRICE, f"price {price!r}"
        k = price / tick
        if abs(k - round(k)) > 1e-6 or round(price, lim.max_price_decimals) != price:
            return DenyReason.BAD_PRICE, f"price {price!r} off tick {tick}"
        if side not in (Side.BUY, Side.SELL):
            return DenyReason.BAD_SIZE, f"side {side}"
        if not (math.isfinite(size) and size > 0):
            return DenyReason.BAD_SIZE, f"size {size!r}"
        lots = size / lot
        if abs(lots - round(lots)) > 1e-6 or round(size, lim.max_size_decimals) != size:
            return DenyReason.BAD_SIZE, f"size {size!r} off lot {lot}"
        if lots > spec.max_order_lots * (1 + EPS):
            return DenyReason.BAD_SIZE, f"{lots:g} lots > max_order_lots {spec.max_order_lots:g}"
        if abs(price - mid) > mid * self.collar * (1 + EPS):
            return DenyReason.COLLAR, f"{abs(price - mid) / mid * 1e4:.1f} bps from mid"
        buys, sells = bk.open_sizes()
        pos = bk.position
        if self.state == TradingState.REDUCING and not _only_reduces(side, pos, buys, sells, size, lot):
            return DenyReason.REDUCING, f"position {pos:g}"
        if reduce_only:
            if spec.product == "SPOT":
                return DenyReason.REDUCE_ONLY, f"{spec.symbol} is spot: no reduce-only"
            if not _only_reduces(side, pos, buys, sells, size, lot):
                return DenyReason.REDUCE_ONLY, f"would not reduce position {pos / lot:g} lots"
        notional = price * size
        if notional < lim.min_notional * (1 - EPS):
            return DenyReason.MIN_NOTIONAL, f"{notional:g}"
        if notional > lim.max_notional * (1 + EPS):
            return DenyReason.MAX_NOTIONAL, f"{notional:g}"
        max_pos = spec.max_position_lots * lot * (1 + EPS)
        if side == Side.BUY:
            worst = pos + buys + size
            if worst > max_pos:
                return DenyReason.MAX_POSITION, f"worst long {worst / lot:g} lots"
        else:
            worst = pos - sells - size
            if worst < -max_pos:
                return DenyReason.MAX_POSITION, f"worst short {-worst / lot:g} lots"
        gross = 0.0
        for b in self.books.values():
            bb, ss = (buys, sells) if b is bk else b.open_sizes()
            if b is bk:
                if side == Side.BUY:
                    bb += size
                else:
                    ss += size
            exposure = max(abs(b.position + bb), abs(b.position - ss))
            if exposure:
                px = b.mid if b.mid > 0 else (b.avg_px if b.avg_px > 0 else price)
                gross += exposure * px
        if gross > lim.max_gross_notional * (1 + EPS):
            return DenyReason.GROSS, f"worst gross {gross:g}"
        net = self.net_notional(bk, side, size, price)
        if net > lim.max_net_notional * (1 + EPS):
            return DenyReason.NET_DELTA, f"worst net {net:g} {spec.settle}"
        if self.open_count >= lim.max_open_orders:
            return DenyReason.MAX_OPEN, f"{self.open_count} open"
        rate = self._rate
        while rate and rate[0] <= now - NS_PER_S:
            rate.popleft()
        if len(rate) >= lim.max_orders_per_s:
            return DenyReason.RATE, f"{len(rate)} in the last second"
        nq = self._notional
        while nq and nq[0][0] <= now - 60 * NS_PER_S:
            self._notional_sum -= nq.popleft()[1]
        if not nq:
            self._notional_sum = 0.0
        if self._notional_sum + notional > lim.max_notional_per_min * (1 + EPS):
            return DenyReason.NOTIONAL_RATE, f"{self._notional_sum:g} in the last minute"
        if oid in self.seen_ids:
            return DenyReason.DUPLICATE, f"order id {oid}"
        for w in bk.working.values():
            if w.side != side and (price >= w.price if side == Side.BUY else price <= w.price):
                return DenyReason.SELF_TRADE, f"crosses our order {w.order_id} at {w.price:g}"
        if self.pnl() <= -lim.daily_loss_limit:
            return DenyReason.DAILY_LOSS, f"pnl {self.pnl():g}"
        return 0, ""

    def record_approved(self, oid: int, now_ns: int, notional: float) -> None:
        """Record one approved new order (id ``oid``, sent at ``now_ns``, ``notional`` = price x size)
        where the checks read it: the seen ids (a later ``oid`` is DUPLICATE) and the send windows
        (rate of the last second, notional of the last minute)."""
        self.seen_ids.add(oid)
        self._rate.append(now_ns)
        self._notional.append((now_ns, notional))
        self._notional_sum += notional

    def net_notional(self, bk: Book, side: int, size: float, price: float) -> float:
        """The worst-case net exposure of ``bk``'s settlement currency with a new order (``side``,
        ``size``) added: per base coin (an instrument without one is its own), the net of its
        instruments' positions with every open buy (long side) or every open sell (short side),
        whichever is larger in size, times its mid (else its average entry, else ``price``); summed
        over the bases of that currency."""
        settle = bk.spec.settle
        longs: dict[str, float] = {}
        shorts: dict[str, float] = {}
        pxs: dict[str, float] = {}
        for b in self.books.values():
            spec = b.spec
            if spec.settle != settle:
                continue
            key = spec.base or spec.symbol
            bb, ss = b.open_sizes()
            if b is bk:
                if side == Side.BUY:
                    bb += size
                else:
                    ss += size
            longs[key] = longs.get(key, 0.0) + b.position + bb
            shorts[key] = shorts.get(key, 0.0) + b.position - ss
            if key not in pxs or b is bk:
                pxs[key] = b.mid if b.mid > 0 else (b.avg_px if b.avg_px > 0 else price)
        return sum(max(abs(longs[k]), abs(shorts[k])) * pxs[k] for k in longs)
