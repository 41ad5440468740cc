"""The circuit breaker, driven by an injected clock: score, trip after 3 s below threshold, cooldown,
one probe at a time, closing after consecutive good probes."""

from __future__ import annotations

import pytest

from pipeline.trading.llm.breaker import BreakerConfig, BreakerState, CircuitBreaker
from tests.support.clock import ManualClock

S = 1_000_000_000


def make(**kw):
    clk = ManualClock(1_000 * S)
    return CircuitBreaker(BreakerConfig(**kw), clk), clk


def test_score_weights_success_on_time_and_anomalies_over_the_window():
    b, clk = make(min_samples=1)
    assert b.score() == 1.0
    for ok in (True, True, True, False):
        b.record(success=ok, on_time=True, anomaly=not ok)
    assert b.score() == pytest.approx(0.6 * 0.75 + 0.3 * 1.0 + 0.1 / 2)
    clk.advance_s(61)  # the window forgets
    assert b.score() == 1.0 and b.counts()["samples"] == 0


def test_fewer_than_min_samples_never_trip():
    b, clk = make(min_samples=5)
    for _ in range(4):
        assert b.record(success=False, on_time=False, anomaly=True) is None
    clk.advance_s(10)
    assert b.poll() is None and b.state is BreakerState.CLOSED


def test_opens_only_after_three_consecutive_seconds_below_threshold_then_half_opens_after_cooldown():
    b, clk = make(min_samples=1, cooldown_s=10)
    assert b.record(success=False, on_time=False, anomaly=True) is None  # below from now
    clk.advance_s(2.9)
    assert b.poll() is None and b.allow()
    clk.advance_s(0.1)
    t = b.poll()
    assert t.old is BreakerState.CLOSED and t.new is BreakerState.OPEN and t.score < 0.72 and "3 s" in t.why
    assert not b.allow()
    clk.advance_s(9.9)
    assert b.poll() is None and not b.allow()
    clk.advance_s(0.1)
    assert b.poll().new is BreakerState.HALF_OPEN


def test_recovering_above_threshold_resets_the_three_seconds():
    b, clk = make(min_samples=2)
    b.record(success=False, on_time=True, anomaly=False)
    b.record(success=False, on_time=True, anomaly=False)  # 0.3 + 0.1 = 0.4
    clk.advance_s(2)
    for _ in range(20):
        b.record(success=True, on_time=True, anomaly=False)
    assert b.score() >= 0.72
    clk.advance_s(2)
    assert b.poll() is None and b.state is BreakerState.CLOSED


def test_half_open_grants_one_probe_and_closes_after_consecutive_good_probes():
    b, clk = make(min_samples=1, cooldown_s=1, close_after_probes=2)
    b.record(success=False, on_time=False, anomaly=False)
    clk.advance_s(3)
    assert b.poll().new is BreakerState.OPEN
    clk.advance_s(1)
    assert b.poll().new is BreakerState.HALF_OPEN
    assert b.allow() and not b.allow()  # one probe in flight
    assert b.record(success=True, on_time=True, anomaly=False) is None
    assert b.allow()
    t = b.record(success=True, on_time=True, anomaly=False)
    assert t.new is BreakerState.CLOSED and b.counts()["samples"] == 0 and b.allow()


def test_a_bad_probe_reopens_and_restarts_the_cooldown():
    b, clk = make(min_samples=1, cooldown_s=5)
    b.record(success=False, on_time=False, anomaly=False)
    clk.advance_s(3)
    b.poll()
    clk.advance_s(5)
    b.poll()
    assert b.allow()
    t = b.record(success=True, on_time=False, anomaly=False)  # late is not good
    assert t.new is BreakerState.OPEN and t.why == "probe failed"
    clk.advance_s(4.9)
    assert b.poll() is None and b.state is BreakerState.OPEN
