"""Idle strategies: what a loop does after a duty cycle that found no work.

``YieldSpin`` (busy-spin) never sleeps; while its process has another thread it yields the GIL and the
core on each idle pass, so that thread is never held off by the spinner, and alone it is the bare spin.
``BusySpin`` (the bare spin) never waits; ``BackOff`` spins, then yields, then sleeps with exponential
growth capped at ``max_sleep_ns``, and forgets all of it as soon as there is work again.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from ringbuf import BackOff, BusySpin, IdleStrategy, make_idle
from ringbuf.idle import YieldSpin


def test_make_idle_builds_the_configured_strategy():
    assert isinstance(make_idle("busy-spin"), YieldSpin)
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


def test_yield_spin_yields_on_every_idle_pass_while_the_process_has_another_thread_and_never_after_work():
    calls = []
    idle = YieldSpin(sched_yield=lambda: calls.append(1), threads=lambda: 2)
    for _ in range(5):
        idle.idle(0)
    idle.idle(3)
    idle.reset()
    assert len(calls) == 5


def test_yield_spin_alone_in_its_process_is_the_bare_spin_and_sees_a_new_thread_within_check_every():
    calls, threads = [], [1]
    idle = YieldSpin(check_every=4, sched_yield=lambda: calls.append(1), threads=lambda: threads[0])

    def passes(n: int) -> int:
        before = len(calls)
        for _ in range(n):
            idle.idle(0)
        return len(calls) - before

    assert passes(6) == 0  # one thread (looked at on passes 1 and 5): no system call a pass
    threads[0] = 2  # a thread starts: passes 7 and 8 are bare, the look on pass 9 sees it
    assert passes(8) == 6
    threads[0] = 1  # it ends: passes 15 and 16 still yield, the look on pass 17 sees it
    assert passes(8) == 2
    with pytest.raises(ValueError):
        YieldSpin(check_every=0)


def _progress_of_a_gil_waiter(strategy: IdleStrategy, passes: int) -> int:
    """How many steps a second thread of this process makes while this thread runs ``passes`` idle
    passes of ``strategy``. Both threads share one core and the switch interval is 100 s, so the
    second thread (which gives the GIL back after each step) runs only when an idle pass releases it."""
    core = min(os.sched_getaffinity(0))
    old_aff, old_switch = os.sched_getaffinity(0), sys.getswitchinterval()
    state = {"steps": 0, "stop": False}

    def waiter():
        while not state["stop"]:
            state["steps"] += 1
            os.sched_yield()  # the GIL released: the idle loop goes on

    os.sched_setaffinity(0, {core})  # this thread; the waiter inherits it
    sys.setswitchinterval(100.0)
    t = threading.Thread(target=waiter, daemon=True)
    try:
        t.start()
        before = state["steps"]
        for _ in range(passes):
            strategy.idle(0)
        made = state["steps"] - before  # read with the GIL held: the waiter is not running
    finally:
        state["stop"] = True
        sys.setswitchinterval(old_switch)
        t.join(10)  # blocks with the GIL released: the waiter sees stop
        os.sched_setaffinity(0, old_aff)
    return made


def test_yield_spin_lets_a_thread_waiting_for_the_gil_run():
    # the bare BusySpin holds the GIL through all its passes: the waiter makes no step at all
    assert _progress_of_a_gil_waiter(BusySpin(), 2_000) == 0
    assert _progress_of_a_gil_waiter(YieldSpin(), 2_000) >= 200
