"""Which orders the planner makes reduce-only (pipeline/trading/risk/planner.py): a USDT-FUTURES
instrument's FLATTEN children (reprices included) and every order planned while REDUCING; never a spot
order, never a BUY / SELL / LEAN order outside REDUCING; an EMERGENCY only cancels. A flagged order is
checked as reduce-only and carries ORDER_FLAG_REDUCE_ONLY in its ORDER."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.messages import (ORDER_DTYPE, ORDER_FLAG_REDUCE_ONLY, SIGNAL_FLAG_AT_RISK_BID, Action, ControlCmd,
                                       ExecType, Label, Side)
from pipeline.trading.risk import CancelSent, OrderApproved, OrderDenied, RiskGateway, RiskLimits, encode_order
from tests.support.clock import ManualClock
from tests.support.risk import BASE, ctl, ex, instr, of, sig

SPOT, PERP = 1, 2
# one base on both products: the spot and its perpetual (a lot is one contract of 1 base unit)
LEGS = [InstrumentConfig(id=SPOT, symbol="AAAUSDT", tick_size=0.5, lot_size=1.0),
        InstrumentConfig(id=PERP, symbol="AAAUSDT", tick_size=0.5, lot_size=1.0, product_type="USDT-FUTURES",
                         contract_size=1.0)]


def gateway(**over):
    clock = ManualClock()
    gw = RiskGateway(LEGS, RiskLimits(**{**BASE, **over}), clock)
    gw.start()
    gw.on_exec(ex(ExecType.SYNC_DONE))
    for iid in (SPOT, PERP):
        gw.on_signal(sig(iid), clock())
    return gw, clock


def hold(gw, iid: int, lots: float) -> None:
    """A position of ``lots`` (signed) in ``iid``, from a fill of an order not tracked."""
    if lots:
        gw.on_exec(ex(ExecType.FILLED, iid=iid, oid=900 + iid, side=Side.BUY if lots > 0 else Side.SELL,
                      price=100.0, size=abs(lots)))


def planned(events):
    """(side, size, reduce_only, the ORDER's flags) of each approval; the reason of each denial."""
    out = []
    for e in events:
        if isinstance(e, OrderApproved):
            flags = int(np.frombuffer(encode_order(e), ORDER_DTYPE, 1)[0]["flags"])
            out.append((Side(e.side).name, e.size, e.reduce_only, flags))
        elif isinstance(e, OrderDenied):
            out.append(e.reason.name)
    return out


RO = ORDER_FLAG_REDUCE_ONLY
# (instrument, position in lots, REDUCING?, action, target lots) -> what the planner plans
TABLE = [
    (PERP, 4, False, Action.FLATTEN, 0, [("SELL", 4.0, True, RO)]),
    (PERP, -3, False, Action.FLATTEN, 0, [("BUY", 3.0, True, RO)]),
    (SPOT, 4, False, Action.FLATTEN, 0, [("SELL", 4.0, False, 0)]),  # spot has no reduce-only
    (PERP, 0, False, Action.BUY, 3, [("BUY", 3.0, False, 0)]),  # opens: not reduce-only
    (PERP, 4, False, Action.SELL, 0, [("SELL", 4.0, False, 0)]),  # a SELL may reduce, but it is no FLATTEN
    (PERP, 4, False, Action.SELL, -2, [("SELL", 5.0, False, 0), ("SELL", 1.0, False, 0)]),  # flips: allowed
    (PERP, 4, True, Action.SELL, 0, [("SELL", 4.0, True, RO)]),  # REDUCING: every order is reduce-only
    (PERP, -2, True, Action.BUY, 0, [("BUY", 2.0, True, RO)]),
    (PERP, 4, True, Action.SELL, -2, ["REDUCING"]),  # would flip: REDUCING denies it first
    (SPOT, 4, True, Action.SELL, 0, [("SELL", 4.0, False, 0)]),  # spot: the REDUCING check alone
]


@pytest.mark.parametrize("iid, position, reducing, action, target, want", TABLE)
def test_which_orders_are_reduce_only(iid, position, reducing, action, target, want):
    gw, clock = gateway()
    hold(gw, iid, position)
    if reducing:
        gw.on_control(ctl(ControlCmd.REDUCE_ONLY))
    assert planned(gw.on_instruction(instr(clock, iid=iid, action=action, target=target))) == want


def test_a_reduce_only_order_is_checked_as_one():
    gw, clock = gateway()
    hold(gw, PERP, 4)
    gw.on_exec(ex(ExecType.ACKED, iid=PERP, oid=77, side=Side.SELL, price=101.0, size=3.0, leaves=3.0))
    out = []
    gw.submit(gw.books[PERP], 5001, Side.SELL, 100.5, 2.0, None, 0, out)  # 4 long, 3 selling: 2 more would flip
    assert planned(out) == [("SELL", 2.0, False, 0)], "outside REDUCING and FLATTEN the order is not reduce-only"
    flat = gw.on_instruction(instr(clock, iid=PERP, action=Action.FLATTEN, target=0))
    # the FLATTEN cancels the 5 working sells (they overshoot) and sells 4 anew; the sells being cancelled
    # still count, so the 4 could flip the position: denied as a reduce-only order
    assert [c.order_id for c in of(flat, CancelSent)] == [77, 5001]
    assert [(d.side, d.reason.name, d.detail) for d in of(flat, OrderDenied)] == [
        (Side.SELL, "REDUCE_ONLY", "would not reduce position 4 lots")]


def test_a_flatten_repriced_after_a_move_stays_reduce_only():
    gw, clock = gateway(collar_bps=500.0)
    hold(gw, PERP, 4)
    first = of(gw.on_instruction(instr(clock, iid=PERP, action=Action.FLATTEN, target=0, ttl_ms=5000)), OrderApproved)
    assert [o.reduce_only for o in first] == [True]
    moved = gw.on_signal(sig(PERP, mid=103.0, seq=2), clock())
    assert [c.why for c in of(moved, CancelSent)] == ["reprice"]
    # the order being cancelled still counts (conservative): selling 4 more now could flip the position
    assert planned(moved) == ["REDUCE_ONLY"]
    again = gw.on_exec(ex(ExecType.CANCELLED, iid=PERP, oid=first[0].order_id))  # gone: the plan is topped up
    assert planned(again) == [("SELL", 4.0, True, RO)]


def test_an_emergency_places_nothing_so_flags_nothing():
    gw, clock = gateway()
    hold(gw, PERP, 4)
    gw.on_exec(ex(ExecType.ACKED, iid=PERP, oid=78, side=Side.BUY, price=99.0, size=1.0, leaves=1.0))
    for flags in (0, SIGNAL_FLAG_AT_RISK_BID):
        r = np.frombuffer(sig(PERP, label=Label.EMERGENCY, seq=3 + flags), dtype=np.uint8).copy()
        r[3] = flags
        events = gw.on_signal(r.tobytes(), clock())
        assert not of(events, OrderApproved) and not of(events, OrderDenied)
