"""The execution planner (pipeline/trading/risk/planner.py): limit prices, child orders and their ids, the
wanted delta, reprice / cancel on a move, the ttl, and the fast path's lean quoting."""

from __future__ import annotations

import math

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import Action, ExecType, Label, OrderOrigin, Side, TimeInForce, order_id_for
from pipeline.trading.risk import (CancelSent, DenyReason, InstructionExpired, InstructionPlanned, OrderApproved,
                                   OrderDenied, RiskGateway, RiskLimits, decode_limits)
from tests.support.clock import ManualClock
from tests.support.risk import BASE, INSTRUMENTS, ex, fill, gateway, instr, of, sig


def test_limit_offset_is_half_the_spread_rounded_away_from_crossing():
    gw, clock = gateway()
    gw.on_signal(sig(1, mid=100.3, spread=0.2), clock())  # sigma = 0.3 (alpha 1) -> 0.09 < 0.1
    assert gw.limit_price(gw.books[1], Side.BUY, 0) == 100.0  # floor(100.2 / 0.5) * 0.5
    assert gw.limit_price(gw.books[1], Side.SELL, 0) == 100.5  # ceil(100.4 / 0.5) * 0.5
    assert gw.limit_price(gw.books[1], Side.BUY, 2) == 99.0  # two more ticks


def test_limit_offset_grows_with_volatility():
    gw, clock = gateway(risk_aversion=1.0)
    gw.on_signal(sig(1, mid=110.0, spread=1.0), clock())  # sigma 10 -> offset 3 > 0.5
    assert gw.books[1].sigma == pytest.approx(10.0)
    assert gw.limit_price(gw.books[1], Side.BUY, 0) == 107.0
    assert gw.limit_price(gw.books[1], Side.SELL, 0) == 113.0


def test_an_instruction_is_split_into_child_orders_with_deterministic_ids():
    gw, clock = gateway()
    events = gw.on_instruction(instr(clock, target=12, seq=77))
    plan = of(events, InstructionPlanned)[0]
    assert (plan.delta, plan.children) == (12.0, 3)
    ok = of(events, OrderApproved)
    assert [o.size for o in ok] == [5.0, 5.0, 2.0] and {o.price for o in ok} == {99.5}
    assert [o.order_id for o in ok] == [order_id_for(1, 77, leg) for leg in range(3)]
    assert all(o.side == Side.BUY and o.origin_seq == 77 and o.tif == TimeInForce.POST_ONLY for o in ok)
    # the same instruction again wants nothing more: the open orders count
    again = gw.on_instruction(instr(clock, target=12, seq=77))
    assert of(again, InstructionPlanned)[0].delta == 0 and not of(again, OrderApproved)


def test_replaying_an_instruction_after_a_restart_yields_the_same_ids_which_are_denied():
    gw, clock = gateway()
    first = of(gw.on_instruction(instr(clock, target=3, seq=5)), OrderApproved)
    # restart: a new gateway, the sender reports the order as open
    gw2, _ = gateway(clock)
    gw2.start()
    gw2.on_exec(ex(ExecType.OPEN_ORDER, oid=first[0].order_id, side=Side.BUY, price=99.5, size=3.0, leaves=3.0))
    gw2.on_exec(ex(ExecType.SYNC_DONE))
    out = []
    gw2.submit(gw2.books[1], order_id_for(1, 5, 0), Side.BUY, 99.5, 1.0, None, 0, out)
    assert of(out, OrderDenied)[0].reason == DenyReason.DUPLICATE
    assert not of(gw2.on_instruction(instr(clock, target=3, seq=5)), OrderApproved)  # already open


def test_wanted_delta_counts_position_and_open_orders():
    gw, clock = gateway()
    fill(gw, size=3.0)
    gw.on_exec(ex(ExecType.ACKED, oid=8, side=Side.BUY, price=99.0, size=4.0, leaves=4.0))
    events = gw.on_instruction(instr(clock, target=12))
    assert of(events, InstructionPlanned)[0].delta == 5.0
    assert [o.size for o in of(events, OrderApproved)] == [5.0]


def test_sell_down_flatten_hold_and_cancel():
    gw, clock = gateway()
    fill(gw, size=3.0)
    sell = gw.on_instruction(instr(clock, action=Action.SELL, target=-2))
    assert [(o.side, o.size, o.price) for o in of(sell, OrderApproved)] == [(Side.SELL, 5.0, 100.5)]
    assert not of(gw.on_instruction(instr(clock, action=Action.BUY, target=-4, seq=8)), OrderApproved)  # BUY never sells
    hold = gw.on_instruction(instr(clock, action=Action.HOLD, target=50, seq=9))
    assert [type(e) for e in hold] == [InstructionPlanned]
    cancel = gw.on_instruction(instr(clock, action=Action.CANCEL, seq=10))
    assert [c.order_id for c in of(cancel, CancelSent)] == [of(sell, OrderApproved)[0].order_id]
    gw2, clock2 = gateway()
    fill(gw2, side=Side.SELL, size=4.0, price=100.0)
    flat = gw2.on_instruction(instr(clock2, action=Action.FLATTEN, target=99))
    assert [(o.side, o.size) for o in of(flat, OrderApproved)] == [(Side.BUY, 4.0)]


def test_working_orders_on_the_other_side_are_cancelled_first():
    gw, clock = gateway()
    gw.on_exec(ex(ExecType.ACKED, oid=8, side=Side.SELL, price=101.0, size=2.0, leaves=2.0))
    events = gw.on_instruction(instr(clock, target=3))
    assert [(c.order_id, c.why) for c in of(events, CancelSent)] == [(8, "other_side")]
    assert [o.size for o in of(events, OrderApproved)] == [3.0]


def test_an_instruction_past_its_ttl_is_discarded_and_counted():
    gw, clock = gateway()
    issued = clock()
    clock.advance_ms(1001)
    events = gw.on_instruction(instr(clock, issued=issued, ttl_ms=1000))
    assert [type(e) for e in events] == [InstructionExpired] and events[0].age_ms == pytest.approx(1001)
    clock2 = ManualClock()
    gw2, _ = gateway(clock2)
    issued = clock2()
    clock2.advance_ms(1000)
    gw2.on_signal(sig(1), clock2())
    assert of(gw2.on_instruction(instr(clock2, issued=issued, ttl_ms=1000)), OrderApproved)  # exactly at the ttl


def test_a_move_beyond_two_sigma_reprices_working_orders_of_a_live_instruction():
    gw, clock = gateway(sigma_alpha=0.5, collar_bps=300.0)
    gw.on_signal(sig(1, mid=100.0), clock())  # no move: var halves to 0
    gw.on_signal(sig(1, mid=102.0), clock())
    gw.on_signal(sig(1, mid=100.0), clock())  # var = 0.5*(0.5*4) + 0.5*4 = 3 -> sigma 1.732
    sigma = gw.books[1].sigma
    assert sigma == pytest.approx(math.sqrt(3.0))
    placed = of(gw.on_instruction(instr(clock, target=6, seq=30)), OrderApproved)
    assert [o.size for o in placed] == [5.0, 1.0] and placed[0].price == 99.0  # offset max(0.5, 0.52)
    small = gw.on_signal(sig(1, mid=100.0 + 1.9 * sigma), clock())  # within 2 sigma: stays
    assert not of(small, CancelSent)
    gw.books[1].var = 1.0  # pin sigma at 1: a move of more than 2 from the planned mid reprices
    moved = gw.on_signal(sig(1, mid=102.5, spread=1.0), clock())
    assert {c.order_id for c in of(moved, CancelSent)} == {o.order_id for o in placed}
    assert {c.why for c in of(moved, CancelSent)} == {"reprice"}
    new = of(moved, OrderApproved)
    assert {o.origin for o in placed} == {OrderOrigin.LLM} and {o.origin for o in new} == {OrderOrigin.RISK}
    assert [o.size for o in new] == [5.0, 1.0] and [o.order_id for o in new] == [order_id_for(1, 30, 2),
                                                                                 order_id_for(1, 30, 3)]
    assert all(o.price == gw.limit_price(gw.books[1], Side.BUY, 0) and 100.0 < o.price < 102.5 for o in new)


def test_after_the_ttl_a_moved_order_is_only_cancelled():
    gw, clock = gateway()
    placed = of(gw.on_instruction(instr(clock, target=2, ttl_ms=100)), OrderApproved)
    clock.advance_ms(200)
    moved = gw.on_signal(sig(1, mid=105.0), clock())
    assert [(c.order_id, c.why) for c in of(moved, CancelSent)] == [(placed[0].order_id, "moved")]
    assert not of(moved, OrderApproved)


def test_order_ids_carry_the_run_epoch():
    clock = ManualClock()
    ids = []
    for epoch in (1, 2):
        gw = RiskGateway(INSTRUMENTS, RiskLimits(**BASE), clock, epoch=epoch)
        gw.start()
        gw.on_exec(ex(ExecType.SYNC_DONE))
        gw.on_signal(sig(1), clock())
        out = gw.on_instruction(instr(clock, target=1, seq=77))
        ids.append([e.order_id for e in of(out, OrderApproved)])
    assert ids[0] == [order_id_for(1, 77, 0, 1)] and ids[1] == [order_id_for(1, 77, 0, 2)] and ids[0] != ids[1]


# ------------------------------------------------------------------------------------- fast-path quoting
def test_lean_signals_quote_on_the_fast_path_only_when_enabled():
    gw, clock = gateway()
    assert not of(gw.on_signal(sig(1, label=Label.LEAN_BUY, seq=2), clock()), OrderApproved), "lean_lots = 0: off"
    gw, clock = gateway(lean_lots=3)
    ev = gw.on_signal(sig(1, label=Label.LEAN_BUY, seq=2), clock())
    (ok,) = of(ev, OrderApproved)
    assert ok.side == Side.BUY and ok.origin == OrderOrigin.FAST and ok.price < 100.0
    assert ok.order_id == order_id_for(1, 2, 0) and math.isclose(ok.size, 3 * INSTRUMENTS[0].lot_size)
    assert not of(gw.on_signal(sig(1, label=Label.LEAN_BUY, seq=3), clock()), OrderApproved), "already working"
    ev = gw.on_signal(sig(1, label=Label.LEAN_SELL, seq=4), clock())
    assert [c.why for c in of(ev, CancelSent)] == ["other_side"], "the buy no longer serves the target"


def test_a_live_llm_plan_wins_over_lean_signals():
    gw, clock = gateway(lean_lots=3)
    assert of(gw.on_instruction(instr(clock, action=Action.SELL, target=-2, seq=9)), OrderApproved)
    ev = gw.on_signal(sig(1, label=Label.LEAN_BUY, seq=10), clock())
    assert not of(ev, OrderApproved) and not of(ev, CancelSent)
    clock.advance_ms(1001)  # the instruction's ttl is over: the fast path may quote again
    gw.on_signal(sig(1, seq=11), clock())
    ev = gw.on_signal(sig(1, label=Label.LEAN_BUY, seq=12), clock())
    assert [c.why for c in of(ev, CancelSent)] == ["other_side"]


@pytest.mark.parametrize("label, offset_ticks, price", [
    (Label.LEAN_BUY, 0, 100.0),  # half the spread, floored to the tick (0.5): as an instruction's
    (Label.LEAN_BUY, 1, 99.5),
    (Label.LEAN_BUY, 4, 98.0),
    (Label.LEAN_SELL, 0, 100.5),
    (Label.LEAN_SELL, 1, 101.0),
    (Label.LEAN_SELL, 4, 102.5),
])
def test_lean_offset_ticks_moves_a_lean_orders_limit_price_that_many_ticks_further_from_the_mid(
        label, offset_ticks, price):
    gw, clock = gateway(lean_lots=3, lean_offset_ticks=offset_ticks, collar_bps=500.0)
    (ok,) = of(gw.on_signal(sig(1, mid=100.3, spread=0.2, label=label, seq=2), clock()), OrderApproved)
    assert ok.price == price and ok.origin == OrderOrigin.FAST


@pytest.mark.parametrize("bad", [-1, 1.5, "2"])
def test_lean_offset_ticks_must_be_a_whole_number_of_ticks_not_below_zero(bad):
    with pytest.raises(ConfigError, match="params.limits.lean_offset_ticks"):
        decode_limits({"lean_offset_ticks": bad})
