"""The latency-guard scenario (``bench.chaos.latency_guard``; issue #26): its judge of the risk gateway's
audit log as tables (a risk-increasing order after REDUCING, an order after HALTED, HALTED lifted by
anything but the operator's resume: each must show), then the scenario once in quick mode against the whole real
pipeline: features slowed on purpose trips the guard, REDUCING then HALTED, no risk-increasing order
leaves, nothing lifts it but resume; and the run leaves no process and no /dev/shm entry."""

from __future__ import annotations

import pytest

from bench.chaos.harness import Row
from bench.chaos.latency_guard import judge_audit, latency_guard, reduces
from bench.chaos.registry import OPERATIONS, scenarios
from pipeline.trading.messages import Side
from tests.chaos._support import TrackingPipeline, left_nothing

BUY, SELL = int(Side.BUY), int(Side.SELL)

# (id, side, size, position, reduces)
REDUCES = [
    ("a sell within a long position", SELL, 0.002, 0.003, True),
    ("a sell of the whole long position", SELL, 0.003, 0.003, True),
    ("a sell past it (to short)", SELL, 0.004, 0.003, False),
    ("a buy on a long position", BUY, 0.001, 0.003, False),
    ("a buy within a short position", BUY, 0.001, -0.003, True),
    ("anything when flat", SELL, 0.001, 0.0, False),
]


@pytest.mark.parametrize("side,size,pos,ok", [r[1:] for r in REDUCES], ids=[r[0] for r in REDUCES])
def test_which_orders_only_reduce_the_position(side, size, pos, ok):
    assert reduces(side, size, pos) is ok


def ev(kind: str, **kw) -> dict:
    return {"ev": kind, "ts_ns": 1, **kw}


def approved(side: int, size: float, iid: int = 1) -> dict:
    return ev("OrderApproved", instrument_id=iid, order_id=7, side=side, size=size, price=1.0)


SYNC = ev("Synced", positions={"1": 0.0}, open_orders=0, solicited=True)
FILL = ev("FillApplied", instrument_id=1, order_id=3, side=BUY, price=1.0, size=0.003, position=0.003, realized_pnl=0.0)
REDUCE = ev("StateChanged", old="ACTIVE", new="REDUCING", cause="reduce_only:latency_budget", latched=False)
HALT = ev("StateChanged", old="REDUCING", new="HALTED", cause="halt:latency_budget", latched=False)
DENIED = ev("OrderDenied", instrument_id=1, order_id=8, side=BUY, size=0.001, reason=9, code="REDUCING")
RESUME = ev("StateChanged", old="HALTED", new="ACTIVE", cause="resume", latched=False)


def test_a_clean_run_is_judged_clean():
    facts = judge_audit([SYNC, approved(BUY, 0.003), FILL, REDUCE, DENIED, approved(SELL, 0.002), HALT, RESUME,
                         approved(BUY, 0.001)])  # trading again after the operator's resume: not judged
    assert facts == {"reduced_at": 3, "halted_at": 6, "approved_while_reducing": 1, "increasing": [],
                     "denied_reducing": 1, "approved_after_halt": 0, "lifted_without_resume": False}


# (id, audit events, the fact that must show it)
BROKEN = [
    ("a buy on a long position after REDUCING", [SYNC, FILL, REDUCE, approved(BUY, 0.001), HALT],
     lambda f: f["increasing"] == [{"order_id": 7, "side": BUY, "size": 0.001, "position": 0.003}]),
    ("a sell past the position after REDUCING", [SYNC, FILL, REDUCE, approved(SELL, 0.004), HALT],
     lambda f: len(f["increasing"]) == 1),
    ("a sell while flat after REDUCING", [SYNC, REDUCE, approved(SELL, 0.001)], lambda f: len(f["increasing"]) == 1),
    ("an order after HALTED", [SYNC, FILL, REDUCE, HALT, approved(SELL, 0.001)], lambda f: f["approved_after_halt"] == 1),
    ("REDUCING for another cause is not the guard's", [SYNC, {**REDUCE, "cause": "reduce_only"}, HALT],
     lambda f: f["reduced_at"] is None and f["halted_at"] is None),
    ("HALTED for another cause is not the guard's", [SYNC, REDUCE, {**HALT, "cause": "halt"}],
     lambda f: f["reduced_at"] == 1 and f["halted_at"] is None),
    ("no risk-increasing order was ever tried", [SYNC, FILL, REDUCE, approved(SELL, 0.001), HALT],
     lambda f: f["denied_reducing"] == 0),
    ("HALTED lifted to ACTIVE by other than the operator's resume", [SYNC, REDUCE, HALT, {**RESUME, "cause": "resume:shutdown"}],
     lambda f: f["lifted_without_resume"] is True),
    ("HALTED loosened to REDUCING", [SYNC, REDUCE, HALT, {**REDUCE, "old": "HALTED"}],
     lambda f: f["lifted_without_resume"] is True),
]


@pytest.mark.parametrize("events,shows", [r[1:] for r in BROKEN], ids=[r[0] for r in BROKEN])
def test_the_judge_sees_what_breaks_the_criterion(events, shows):
    assert shows(judge_audit(events))


def test_the_scenario_is_listed_once_and_last():
    assert [n for n, _ in OPERATIONS] == ["latency_guard"] and scenarios()[-1] == ("latency_guard", latency_guard)
    assert [n for n, _ in scenarios()].count("latency_guard") == 1


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_slowed_stage_trips_the_guard_and_no_risk_increasing_order_leaves():
    TrackingPipeline.runs = []
    row = latency_guard(TrackingPipeline, True)
    assert isinstance(row, Row) and row.scenario == "latency_guard"
    assert row.passed, (f"{row.scenario}: injected {row.injected}; did: {row.did}; measured: {row.figure}; "
                        f"checks: {row.details.get('checks')}")
    left_nothing()
