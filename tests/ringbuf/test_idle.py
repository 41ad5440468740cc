"""Idle strategies: what a loop does after a duty cycle that found no work.

``BusySpin`` never waits; ``BackOff`` spins, then yields, then sleeps with exponential growth capped
at ``max_sleep_ns``, and forgets all of it as soon as there is work again.
"""

from __future__ import annotations

import time

import pytest

from ringbuf import BackOff, BusySpin, IdleStrategy, make_idle


def test_make_idle_builds_the_configured_strategy():
    assert isinstance(make_idle("busy-spin"), BusySpin)
    assert isinstance(make_idle("back-off"), BackOff)
    assert make_idle("busy-spin").name == "busy-spin" and make_idle("back-off").name == "back-off"
    with pytest.raises(ValueError, match="blocking"):
        make_idle("blocking")


def test_base_strategy_is_abstract():
    with pytest.raises(NotImplementedError):
        IdleStrategy().idle(0)


def test_busy_spin_returns_at_once():
    idle = BusySpin()
    t0 = time.perf_counter()
    for _ in range(10_000):
        idle.idle(0)
    assert time.perf_counter() - t0 < 0.5


@pytest.mark.parametrize(
    "kwargs",
    [{"spins": -1}, {"yields": -1}, {"min_sleep_ns": 0}, {"min_sleep_ns": 10, "max_sleep_ns": 5}],
)
def test_back_off_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        BackOff(**kwargs)


def test_back_off_spins_then_yields_then_sleeps_doubling_up_to_the_cap(monkeypatch):
    calls = []
    monkeypatch.setattr("ringbuf.idle.os.sched_yield", lambda: calls.append("yield"))
    monkeypatch.setattr("ringbuf.idle.time.sleep", lambda s: calls.append(round(s * 1e9)))
    idle = BackOff(spins=3, yields=2, min_sleep_ns=1_000, max_sleep_ns=5_000)
    for _ in range(10):
        idle.idle(0)
    assert calls == ["yield", "yield", 1_000, 2_000, 4_000, 5_000, 5_000]


def test_back_off_forgets_after_work_and_on_reset(monkeypatch):
    calls = []
    monkeypatch.setattr("ringbuf.idle.os.sched_yield", lambda: calls.append("yield"))
    monkeypatch.setattr("ringbuf.idle.time.sleep", lambda s: calls.append(round(s * 1e9)))
    idle = BackOff(spins=0, yields=1, min_sleep_ns=1_000, max_sleep_ns=8_000)
    for _ in range(3):
        idle.idle(0)
    idle.idle(5)  # work: never waits, and starts over
    idle.idle(0)
    idle.idle(0)
    idle.reset()
    idle.idle(0)
    assert calls == ["yield", 1_000, 2_000, "yield", 1_000, "yield"]
