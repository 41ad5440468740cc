"""``/health`` (pipeline/runtime/ops/health.py): 200 while every stage is RUNNING and trading is not
halted, else 503, and the body says why."""

from __future__ import annotations

import pytest

from pipeline.runtime.ops.health import health
from tests.support.ops import latency_guard, snapshot


def test_every_stage_running_and_trading_is_200():
    status, body = health(snapshot())
    assert status == 200
    assert body["ok"] is True and body["why"] == []
    assert set(body["stages"].values()) == {"RUNNING"} and body["risk"] == {"risk": "ACTIVE"}
    assert body["latency_guard"] == "OK"


@pytest.mark.parametrize("state", ["STARTING", "BACKOFF", "STOPPING", "EXITED", "FATAL", "STOPPED"])
def test_a_stage_not_running_is_503_naming_it(state):
    snap = snapshot()
    snap["processes"][2]["state"] = state
    status, body = health(snap)
    assert status == 503 and body["why"] == [f"stage features is {state}, not RUNNING"]


def test_a_supervisor_halt_is_503():
    snap = snapshot()
    snap["halted"] = True
    status, body = health(snap)
    assert status == 503 and "halted by the supervisor" in body["why"][0] and body["halted"] is True


def test_a_risk_gateway_that_halted_itself_is_503():
    snap = snapshot()
    snap["processes"][5]["stage"]["state"] = "HALTED"
    status, body = health(snap)
    assert status == 503 and body["why"] == ["risk gateway risk is HALTED"]


def test_reducing_is_still_trading_and_says_so():
    snap = snapshot()
    snap["processes"][5]["stage"]["state"] = "REDUCING"
    status, body = health(snap)
    assert status == 200 and body["risk"] == {"risk": "REDUCING"}


def test_every_reason_is_listed():
    snap = snapshot()
    snap["halted"] = True
    snap["processes"][0]["state"] = "BACKOFF"
    snap["processes"][5]["stage"]["state"] = "HALTED"
    assert len(health(snap)[1]["why"]) == 3


def test_no_stage_is_503():
    snap = snapshot()
    snap["processes"] = []
    snap["latency_guard"] = None
    assert health(snap) == (503, {"ok": False, "why": ["no stage is configured"], "stages": {}, "risk": {},
                                  "halted": False})


@pytest.mark.parametrize("level, state", [(1, "REDUCING"), (2, "HALTED")])
def test_the_latency_guard_above_ok_is_503_with_its_reason(level, state):
    snap = snapshot()
    snap["latency_guard"] = latency_guard(level)
    status, body = health(snap)
    assert status == 503 and body["latency_guard"] == state
    assert body["why"] == [f"latency guard {state}: fast p99 above 50,000 us for 5.0 s"]
