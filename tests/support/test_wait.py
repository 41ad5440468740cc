"""The wait helpers: a value as soon as the condition holds, a failed test naming it otherwise."""

from __future__ import annotations

import pytest

from tests.support.wait import pump, settle, wait_until


class _Counter:
    """An agent whose ``do_work`` counts its calls (work found on every other one)."""

    def __init__(self):
        self.calls = 0
        self.ctx = type("Ctx", (), {"stats": {"calls": 0}})()

    def do_work(self) -> int:
        self.calls += 1
        self.ctx.stats["calls"] = self.calls
        return self.calls % 2


def test_wait_until_returns_the_first_truthy_value():
    seen = iter([0, None, "", "ready", "later"])
    assert wait_until(lambda: next(seen), 5, 0) == "ready"


def test_wait_until_fails_the_test_naming_what_it_waited_for():
    with pytest.raises(pytest.fail.Exception, match="timed out after 0.0 s waiting for the moon"):
        wait_until(lambda: False, 0.01, 0.001, "the moon")


def test_pump_works_until_the_condition_holds_and_fails_with_the_agents_stats():
    agent = _Counter()
    assert pump(agent, lambda: agent.calls >= 3 and agent.calls) == 3
    with pytest.raises(AssertionError, match=r"waiting for never; stats \{'calls': \d+\}"):
        pump(agent, lambda: False, 0.01, "never")


def test_settle_keeps_working_for_the_time_given():
    agent = _Counter()
    settle(agent, 0.02)
    assert agent.calls > 1
