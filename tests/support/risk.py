"""What the risk core's tests share: two instruments, base limits, payload builders (SIGNAL,
INSTRUCTION, EXEC_REPORT, CONTROL), a started and synced gateway on a ``ManualClock``, and event
filters."""

from __future__ import annotations

import numpy as np

from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.messages import (EXEC_DTYPE, INSTRUCTION_DTYPE, SIGNAL_DTYPE, Action, ControlReason, ExecType,
                                       Label, Side, pack_control)
from pipeline.trading.risk import OrderApproved, OrderDenied, RiskGateway, RiskLimits
from tests.support.clock import DEFAULT_START_NS, ManualClock


# AAA: tick 0.5, lot 1 (one lot at 100 is 100 of notional); BBB: tick 0.01, lot 0.1
INSTRUMENTS = [InstrumentConfig(id=1, symbol="AAA", tick_size=0.5, lot_size=1.0),
               InstrumentConfig(id=2, symbol="BBB", tick_size=0.01, lot_size=0.1)]
T0 = DEFAULT_START_NS  # where every ManualClock starts
MS = 1_000_000

BASE = dict(max_position_lots=20.0, max_order_lots=10.0, max_child_lots=5.0, collar_bps=100.0, stale_ref_ms=1000,
            min_notional=10.0, max_notional=2000.0, max_gross_notional=100_000.0, max_open_orders=10,
            max_orders_per_s=10, max_notional_per_min=1_000_000.0, daily_loss_limit=500.0,
            emergency_cooldown_ms=1000, sigma_alpha=1.0)


# ------------------------------------------------------------------------------------- message builders
def sig(iid=1, mid=100.0, spread=1.0, label=Label.HOLD, seq=1) -> bytes:
    r = np.zeros(1, SIGNAL_DTYPE)
    r["instrument_id"], r["label"], r["feature_seq"], r["ref_mid"], r["ref_spread"] = iid, label, seq, mid, spread
    return r.tobytes()


def instr(clock, *, iid=1, action=Action.BUY, target=5, seq=7, ttl_ms=1000, offset_ticks=0, issued=None, iid_seq=1):
    r = np.zeros(1, INSTRUCTION_DTYPE)
    r["instrument_id"], r["action"], r["target_lots"], r["signal_seq"] = iid, action, target, seq
    r["issued_ns"] = clock() if issued is None else issued
    r["ttl_ms"], r["limit_offset_ticks"], r["instruction_id"], r["confidence"] = ttl_ms, offset_ticks, iid_seq, 0.9
    return r.tobytes()


def ex(et, *, iid=1, oid=0, side=0, price=0.0, size=0.0, leaves=0.0, reason=0) -> bytes:
    r = np.zeros(1, EXEC_DTYPE)
    r["instrument_id"], r["exec_type"], r["side"], r["order_id"], r["reason"] = iid, et, side, oid, reason
    r["price"], r["size"], r["leaves"] = price, size, leaves
    return r.tobytes()


def ctl(cmd) -> bytes:
    return pack_control(cmd, ControlReason.OPERATOR, 1)


def gateway(clock=None, **over):
    """A started, synced gateway with a fresh reference (mid 100, spread 1) for both instruments."""
    clock = clock or ManualClock()
    gw = RiskGateway(INSTRUMENTS, RiskLimits(**{**BASE, **over}), clock)
    gw.start()
    gw.on_exec(ex(ExecType.SYNC_DONE))
    gw.on_signal(sig(1), clock())
    gw.on_signal(sig(2), clock())
    return gw, clock


def fill(gw, *, iid=1, side=Side.BUY, price=100.0, size=1.0, oid=999):
    return gw.on_exec(ex(ExecType.FILLED, iid=iid, oid=oid, side=side, price=price, size=size))


def order(gw, *, iid=1, side=Side.BUY, price=99.5, size=1.0, oid=None):
    """Submit one new order through the checks; the OrderApproved / OrderDenied event."""
    out = []
    gw._oid = getattr(gw, "_oid", 0) + 1
    gw.submit(gw.books[iid], oid or 10_000 + gw._oid, side, price, size, None, 0, out)
    return [e for e in out if isinstance(e, (OrderApproved, OrderDenied))][0]


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def reason(ev):
    return ev.reason if isinstance(ev, OrderDenied) else "APPROVED"
