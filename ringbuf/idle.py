"""Idle strategies: what a loop does when a poll found no work.

An idle strategy is called with the work count of the last duty cycle; it returns at once after
work and otherwise waits in its own way. It never sleeps when there was work.

- ``BusySpin``: returns at once (the process owns its core; lowest latency, 100 % of a core).
- ``BackOff``: spins ``spins`` times, then ``os.sched_yield()`` ``yields`` times, then sleeps with
  exponential growth from ``min_sleep_ns`` to ``max_sleep_ns``. (A zero-length ``time.sleep`` costs ~55 us on
  Linux and is not a yield; ``os.sched_yield()`` costs ~0.7 us.)
- Blocking waits on a semaphore are not a plain idle strategy: they need the ring, so they live in
  ``ringbuf.reader.Reader.wait`` and the runner composes them.
"""

from __future__ import annotations

import os
import time


class IdleStrategy:
    """Base class; subclasses implement ``idle`` and ``reset``."""

    name = "base"

    def idle(self, work_count: int) -> None:
        """Wait after a duty cycle that did ``work_count`` units of work (0 means idle)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the back-off state (called after work)."""


class BusySpin(IdleStrategy):
    name = "busy-spin"

    def idle(self, work_count: int) -> None:
        return None

    def reset(self) -> None:
        return None


class BackOff(IdleStrategy):
    name = "back-off"

    def __init__(self, spins: int = 200, yields: int = 50, min_sleep_ns: int = 1_000, max_sleep_ns: int = 1_000_000):
        if spins < 0 or yields < 0 or min_sleep_ns <= 0 or max_sleep_ns < min_sleep_ns:
            raise ValueError("BackOff needs spins >= 0, yields >= 0 and 0 < min_sleep_ns <= max_sleep_ns")
        self.spins = spins
        self.yields = yields
        self.min_sleep_ns = min_sleep_ns
        self.max_sleep_ns = max_sleep_ns
        self._n = 0
        self._sleep_ns = min_sleep_ns

    def idle(self, work_count: int) -> None:
        if work_count > 0:
            self._n = 0
            self._sleep_ns = self.min_sleep_ns
            return
        n = self._n
        self._n = n + 1
        if n < self.spins:
            return
        if n < self.spins + self.yields:
            os.sched_yield()
            return
        time.sleep(self._sleep_ns / 1e9)
        self._sleep_ns = min(self._sleep_ns * 2, self.max_sleep_ns)

    def reset(self) -> None:
        self._n = 0
        self._sleep_ns = self.min_sleep_ns


def make_idle(name: str) -> IdleStrategy:
    """Build an idle strategy by its config name ('busy-spin' or 'back-off').

    Raises:
        ValueError: unknown name.
    """
    if name == "busy-spin":
        return BusySpin()
    if name == "back-off":
        return BackOff()
    raise ValueError(f"unknown idle strategy {name!r} (expected 'busy-spin' or 'back-off')")
