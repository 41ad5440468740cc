"""Waiting with a deadline: poll a condition, or keep an agent working until one holds.

Every helper fails the test when its deadline passes, naming what it waited for.
"""

from __future__ import annotations

import time

import pytest

#: how long ``pump`` / ``settle`` sleep after a ``do_work`` that found nothing to do
IDLE_SLEEP_S = 0.0005


def wait_until(predicate, timeout: float, interval: float = 0.01, what: str = "condition"):
    """Poll ``predicate`` every ``interval`` s until it returns something truthy (returned).

    Raises:
        pytest.fail.Exception: ``timeout`` s passed first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


def pump(agent, until, timeout: float = 5.0, what: str = "condition"):
    """Call ``agent.do_work()`` until ``until()`` is truthy (returned).

    Raises:
        AssertionError: ``timeout`` s passed first (the message carries the agent's stats).
    """
    deadline = time.monotonic() + timeout
    while True:
        n = agent.do_work()
        v = until()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; stats {agent.ctx.stats}")
        if n == 0:
            time.sleep(IDLE_SLEEP_S)


def settle(agent, seconds: float) -> None:
    """Keep the agent working for ``seconds`` (to show that something does NOT happen)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if agent.do_work() == 0:
            time.sleep(IDLE_SLEEP_S)
