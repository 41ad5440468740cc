"""The trading state machine (pipeline/trading/risk/state.py): HALT, KILL_SWITCH (latched), REDUCE_ONLY, RESUME,
and cancels that pass while halted."""

from __future__ import annotations

import pytest

from pipeline.trading.messages import Action, ControlCmd, ControlReason, ExecType, Side, pack_control
from pipeline.trading.risk import (CancelAllSent, CancelSent, MessageRejected, RiskLimits, StateChanged, TradingState,
                                   resolve_limits)
from pipeline.trading.risk.ledger import Working
from pipeline.trading.risk.state import TradingStateMachine
from tests.support.clock import ManualClock
from tests.support.risk import BASE, INSTRUMENTS, ctl, ex, gateway, instr, of


def test_state_machine_halt_kill_switch_reduce_only_resume():
    gw, clock = gateway()
    events = gw.on_control(ctl(ControlCmd.HALT))
    assert [(e.old, e.new, e.latched) for e in of(events, StateChanged)] == [("ACTIVE", "HALTED", False)]
    assert sorted(e.instrument_id for e in of(events, CancelAllSent)) == [1, 2]
    gw.on_control(ctl(ControlCmd.REDUCE_ONLY))  # a plain halt can be relaxed to reduce-only
    assert gw.state.name == "REDUCING"
    gw.on_control(ctl(ControlCmd.KILL_SWITCH))
    assert gw.state.name == "HALTED" and gw.latched
    gw.on_control(ctl(ControlCmd.REDUCE_ONLY))  # latched: ignored
    assert gw.state.name == "HALTED"
    gw.on_control(ctl(ControlCmd.RESUME))
    assert gw.state.name == "ACTIVE" and not gw.latched
    assert of(gw.on_control(b"\x01"), MessageRejected)


def test_cancels_pass_when_halted():
    gw, clock = gateway()
    gw.on_exec(ex(ExecType.ACKED, oid=8, side=Side.BUY, price=99.0, size=2.0, leaves=2.0))
    gw.on_control(ctl(ControlCmd.HALT))
    assert [c.order_id for c in of(gw.on_instruction(instr(clock, action=Action.CANCEL)), CancelSent)] == []  # halt already cancelling
    gw.on_exec(ex(ExecType.ACKED, oid=9, side=Side.BUY, price=99.0, size=2.0, leaves=2.0))
    assert [c.order_id for c in of(gw.on_instruction(instr(clock, action=Action.CANCEL, seq=2)), CancelSent)] == [9]


def test_the_state_machine_halts_over_the_ledger_alone():
    """``TradingStateMachine`` stands without the planner and the gateway: a halt marks every working
    order cancelling and sends one CANCEL_ALL an instrument; a daily-loss breach halts, latched."""
    clock = ManualClock()
    sm = TradingStateMachine(resolve_limits(INSTRUMENTS, RiskLimits(**BASE)), RiskLimits(**BASE), clock)
    sm.add_working(sm.books[1], Working(5, Side.BUY, 99.0, 1.0, 0.0, None, "acked"))
    out = sm.halt("halt", False)
    assert [type(e) for e in out] == [StateChanged, CancelAllSent, CancelAllSent]
    assert sm.books[1].working[5].cancelling and sm.state == TradingState.HALTED and not sm.latched
    assert {e.ts_ns for e in out} == {clock()}
    sm.on_control(ctl(ControlCmd.RESUME))
    sm.apply_fill(sm.books[1], Side.BUY, 100.0, 10.0)
    sm.books[1].mid = 49.0  # 10 x -51
    out = []
    sm._check_daily_loss(out)
    assert of(out, StateChanged)[0].cause == "daily_loss" and sm.state == TradingState.HALTED and sm.latched


# (id, commands (cmd, reason) in order, the last StateChanged's cause)
CAUSES = [
    ("an operator's command says only the command", [(ControlCmd.HALT, ControlReason.OPERATOR)], "halt"),
    ("the latency guard's REDUCE_ONLY names its reason", [(ControlCmd.REDUCE_ONLY, ControlReason.LATENCY_BUDGET)],
     "reduce_only:latency_budget"),
    ("the latency guard's HALT", [(ControlCmd.HALT, ControlReason.LATENCY_BUDGET)], "halt:latency_budget"),
    ("a FATAL stage's HALT", [(ControlCmd.HALT, ControlReason.STAGE_FATAL)], "halt:stage_fatal"),
    ("REDUCE_ONLY ignored while latched, with its reason",
     [(ControlCmd.KILL_SWITCH, ControlReason.OPERATOR), (ControlCmd.REDUCE_ONLY, ControlReason.LATENCY_BUDGET)],
     "reduce_only_ignored_latched:latency_budget"),
    ("the operator's resume", [(ControlCmd.HALT, ControlReason.LATENCY_BUDGET), (ControlCmd.RESUME, ControlReason.OPERATOR)],
     "resume"),
]


@pytest.mark.parametrize("commands,cause", [r[1:] for r in CAUSES], ids=[r[0] for r in CAUSES])
def test_a_state_change_names_the_command_and_a_reason_other_than_the_operator(commands, cause):
    gw, clock = gateway()
    for cmd, reason in commands:
        out = gw.on_control(pack_control(cmd, reason, 1))
    assert of(out, StateChanged)[-1].cause == cause
