"""The depth-aware planner through the gateway (pipeline/trading/risk/depth.py): a parent waits for
displayed liquidity, holds a partial fill within 2 sigma and reprices beyond, expires, fills, is cancelled;
sigma is the grid-sampled realized volatility in price units; the simple planner ignores depth."""

from __future__ import annotations

import math

import pytest

from pipeline.trading.messages import Action, ControlCmd, ExecType, Label, OrderOrigin, Side
from pipeline.trading.risk import CancelSent, OrderApproved, OrderDenied, RiskGateway, RiskLimits
from pipeline.trading.risk.events import ParentChanged
from pipeline.trading.risk.execution import ExecutionParams, ParentState
from tests.support.clock import ManualClock
from tests.support.depth import depth_sig
from tests.support.risk import BASE, INSTRUMENTS, ctl, ex, instr, of, sig

S = 1_000_000_000
DEEP = [(1.0, 100.0)]  # 100 lots one tick (0.5) above / below the mid: any size here passes the gate
THIN = [(1.0, 3.0)]


def dgw(planner="depth", **over):
    """A started, synced gateway running ``planner``, with a first SIGNAL (mid 100, spread 1, no depth)."""
    clock = ManualClock()
    ex_params = ExecutionParams(planner=planner, vol_min_returns=1)
    gw = RiskGateway(INSTRUMENTS, RiskLimits(**{**BASE, **over}), clock, execution=ex_params)
    gw.start()
    gw.on_exec(ex(ExecType.SYNC_DONE))
    gw.on_signal(depth_sig(1), clock())
    return gw, clock


def changes(events):
    return [(e.old, e.new, e.trigger, e.why) for e in of(events, ParentChanged)]


def test_a_parent_waits_until_the_opposite_side_shows_more_than_1_2_times_its_size():
    gw, clock = dgw()
    events = gw.on_instruction(instr(clock, target=5, seq=7))
    assert changes(events) == [("", "WAIT_LIQUIDITY", "NEW", "")] and not of(events, OrderApproved)
    # buy at 99.5: one tick under the mid; the asks within one tick above it hold 3 < 1.2 x 5
    events = gw.on_signal(depth_sig(1, asks=THIN, bids=DEEP), clock())  # the bids do not count for a buy
    assert not of(events, OrderApproved) and gw.books[1].plan.state == ParentState.WAIT_LIQUIDITY
    events = gw.on_signal(depth_sig(1, asks=[(1.0, 6.0), (2.0, 50.0)]), clock())  # 6 is not > 6; 2 ticks is too far
    assert not of(events, OrderApproved)
    events = gw.on_signal(depth_sig(1, asks=[(1.0, 6.5)]), clock())
    assert changes(events) == [("WAIT_LIQUIDITY", "SUBMITTED", "LIQUIDITY_OK", "")]
    ok = of(events, OrderApproved)
    assert [(o.side, o.price, o.size, o.origin) for o in ok] == [(Side.BUY, 99.5, 5.0, OrderOrigin.LLM)]


def test_a_signal_without_depth_never_opens_the_gate():
    gw, clock = dgw()
    gw.on_instruction(instr(clock, target=1))
    assert not of(gw.on_signal(sig(1), clock()), OrderApproved)
    assert gw.books[1].plan.state == ParentState.WAIT_LIQUIDITY


def _submitted(gw, clock, target=5, ttl_ms=10_000, mid=100.0):
    """A BUY parent of ``target`` lots, submitted (at once when the latest SIGNAL's depth allows, else at
    the next SIGNAL, deep at ``mid``); its child orders."""
    events = gw.on_instruction(instr(clock, target=target, seq=9, ttl_ms=ttl_ms))
    if not of(events, OrderApproved):
        events = gw.on_signal(depth_sig(1, mid=mid, asks=DEEP), clock())
    return of(events, OrderApproved)


def test_a_partial_fill_holds_within_two_sigma_and_is_cancelled_and_repriced_beyond():
    gw, clock = dgw()
    clock.advance(S)
    gw.on_signal(depth_sig(1, mid=101.0, asks=DEEP), clock())  # one 1 s return: ln(1.01)
    # sigma over the 1 s horizon = mid * |ln 1.01| (about 1.0): 2 sigma is about 2.0
    assert gw.sigma_price(gw.books[1]) == pytest.approx(101.0 * math.log(1.01))
    [child] = _submitted(gw, clock)
    assert child.price == 100.5 and child.size == 5.0
    events = gw.on_exec(ex(ExecType.FILLED, oid=child.order_id, side=Side.BUY, price=100.5, size=2.0, leaves=3.0))
    assert changes(events) == [("SUBMITTED", "PARTIAL_FILLED", "PART_FILL", "")]
    clock.advance(S // 2)
    events = gw.on_signal(depth_sig(1, mid=102.5, asks=DEEP), clock())  # moved 1.5 (under 2 sigma): hold
    assert not of(events, CancelSent) and gw.books[1].plan.state == ParentState.PARTIAL_FILLED
    clock.advance(S // 10)
    events = gw.on_signal(depth_sig(1, mid=103.5, asks=DEEP), clock())  # moved 2.5 since submission: reprice
    assert [(c.order_id, c.why) for c in of(events, CancelSent)] == [(child.order_id, "reprice")]
    assert changes(events) == [("PARTIAL_FILLED", "WAIT_LIQUIDITY", "MOVED", ""),
                               ("WAIT_LIQUIDITY", "SUBMITTED", "LIQUIDITY_OK", "")]
    new = of(events, OrderApproved)
    assert [(o.price, o.size, o.origin) for o in new] == [(103.0, 3.0, OrderOrigin.RISK)]  # the 3 still wanted


def test_the_parent_is_filled_when_the_position_reaches_the_target():
    gw, clock = dgw()
    [child] = _submitted(gw, clock, target=3)
    events = gw.on_exec(ex(ExecType.FILLED, oid=child.order_id, side=Side.BUY, price=99.5, size=3.0))
    assert changes(events) == [("SUBMITTED", "FILLED", "ALL_FILLED", "")]


def test_the_ttl_expires_the_parent_and_cancels_its_working_children():
    gw, clock = dgw()
    [child] = _submitted(gw, clock, ttl_ms=1000)
    clock.advance(S + 1)
    events = gw.on_signal(depth_sig(1, asks=DEEP), clock())
    assert changes(events) == [("SUBMITTED", "EXPIRED", "TTL_PASSED", "")]
    assert [(c.order_id, c.why) for c in of(events, CancelSent)] == [(child.order_id, "expired")]
    assert not of(events, OrderApproved)


def test_a_waiting_parent_expires_with_nothing_to_cancel():
    gw, clock = dgw()
    gw.on_instruction(instr(clock, target=1, ttl_ms=500))
    clock.advance(S)
    events = gw.on_signal(depth_sig(1), clock())
    assert changes(events) == [("WAIT_LIQUIDITY", "EXPIRED", "TTL_PASSED", "")] and not of(events, CancelSent)


def test_children_gone_at_the_venue_cancel_the_parent():
    gw, clock = dgw()
    [child] = _submitted(gw, clock)
    events = gw.on_exec(ex(ExecType.REJECTED, oid=child.order_id))
    assert changes(events) == [("SUBMITTED", "CANCELLED", "CHILDREN_GONE", "venue")]


@pytest.mark.parametrize("how, why", [("instruction", "instruction"), ("halt", "halt"), ("newer", "replaced")])
def test_a_parent_dropped_from_outside_is_cancelled_with_who_dropped_it(how, why):
    gw, clock = dgw()
    _submitted(gw, clock)
    if how == "instruction":
        events = gw.on_instruction(instr(clock, action=Action.CANCEL, seq=10))
    elif how == "halt":
        events = gw.on_control(ctl(ControlCmd.HALT))
    else:
        events = gw.on_instruction(instr(clock, target=8, seq=11))
    assert changes(events)[0] == ("SUBMITTED", "CANCELLED", "CANCEL", why)


def test_a_child_the_checks_deny_cancels_the_parent():
    gw, clock = dgw()
    gw.on_control(ctl(ControlCmd.REDUCE_ONLY))  # a buy from flat would add exposure
    gw.on_instruction(instr(clock, target=2))
    events = gw.on_signal(depth_sig(1, asks=DEEP), clock())
    assert of(events, OrderDenied)
    assert changes(events) == [("WAIT_LIQUIDITY", "SUBMITTED", "LIQUIDITY_OK", ""),
                               ("SUBMITTED", "CANCELLED", "CANCEL", "denied")]


def test_the_offset_uses_the_realized_volatility_in_price_units_and_the_simple_planner_its_ewma():
    prices = {}
    for planner in ("depth", "simple"):
        gw, clock = dgw(planner)
        clock.advance(S)
        gw.on_signal(depth_sig(1, mid=110.0, asks=DEEP), clock())
        prices[planner] = gw.limit_price(gw.books[1], Side.BUY, 0)
    # depth: sigma = 110 * ln(1.1) = 10.48 over 1 s -> offset 0.3 x 10.48 = 3.15 -> floor(106.85 / 0.5) * 0.5
    # simple: the EWMA (alpha 1) of the 10.0 move -> offset 3.0 -> 107.0
    assert prices == {"depth": 106.5, "simple": 107.0}


def test_the_simple_planner_takes_a_signal_with_depth_and_submits_without_waiting():
    gw, clock = dgw("simple")
    events = gw.on_instruction(instr(clock, target=5))
    assert [o.size for o in of(events, OrderApproved)] == [5.0] and not of(events, ParentChanged)
    assert gw.books[1].plan.state == 0


def test_a_lean_repeating_the_live_lean_parent_renews_its_ttl_instead_of_replacing_it():
    gw, clock = dgw(lean_lots=2, lean_ttl_ms=1000)
    first = gw.on_signal(depth_sig(1, label=Label.LEAN_BUY), clock())
    assert changes(first) == [("", "WAIT_LIQUIDITY", "NEW", "")]
    plan = gw.books[1].plan
    clock.advance(S // 2)
    again = gw.on_signal(depth_sig(1, label=Label.LEAN_BUY), clock())
    assert gw.books[1].plan is plan and plan.expires_ns == clock() + S and not changes(again)
    other = gw.on_signal(depth_sig(1, label=Label.LEAN_SELL, bids=DEEP), clock())
    assert changes(other)[:2] == [("WAIT_LIQUIDITY", "CANCELLED", "CANCEL", "replaced"),
                                  ("", "WAIT_LIQUIDITY", "NEW", "")]
    assert [(o.side, o.size, o.origin) for o in of(other, OrderApproved)] == [(Side.SELL, 2.0, OrderOrigin.FAST)]
