"""Idle strategies: what a loop does when a poll found no work.

An idle strategy is called with the work count of the last duty cycle; it returns at once after
work and otherwise waits in its own way. It never sleeps when there was work.

- ``YieldSpin`` (what ``wait = "busy-spin"`` runs): never sleeps. While the process has another
  Python thread, each idle pass is one ``os.sched_yield()``, which CPython makes with the GIL released:
  that thread (the feed's network thread, the sender's journal thread, the venue's server thread),
  waiting for the GIL, takes it there, and when it shares the core (a pinned process's threads all do)
  the yield hands it the CPU at once. A bare spin holds the GIL until the waiter's switch interval runs
  out (``sys.setswitchinterval``: 5 ms by default) and CPython forces a hand-over, every time such a
  thread comes back from a blocking call. Alone in its process it is the bare spin (a yield is a
  system call a pass, and no thread would take the GIL).
- ``BusySpin``: returns at once: the bare spin, whatever else the process runs.
- ``BackOff``: spins ``spins`` times, then ``os.sched_yield()`` ``yields`` times, then sleeps with
  exponential growth from ``min_sleep_ns`` to ``max_sleep_ns``. (A zero-length ``time.sleep`` costs ~55 us on
  Linux and is not a yield; ``os.sched_yield()`` costs ~0.7 us.)
- Blocking waits on a semaphore are not a plain idle strategy: they need the ring, so they live in
  ``ringbuf.reader.Reader.wait`` and the runner composes them.
"""

from __future__ import annotations

import os
import threading
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


class YieldSpin(IdleStrategy):
    """Busy-spin that lets the process's other threads run: while ``threads()`` (the process's Python
    threads, ``threading.active_count``; looked at on the first idle pass and then every
    ``check_every`` idle passes) is above 1, each idle pass is one ``sched_yield()`` (``os.sched_yield``:
    the GIL released around it); otherwise the bare spin. Never sleeps; after work it returns at once.
    A thread started between two looks waits at most ``check_every`` bare passes (or its switch
    interval) for its first turn.

    Raises:
        ValueError: ``check_every`` < 1.
    """

    name = "busy-spin"

    def __init__(self, check_every: int = 256, *, sched_yield=os.sched_yield, threads=threading.active_count):
        if check_every < 1:
            raise ValueError("YieldSpin needs check_every >= 1")
        self._yield, self._threads, self._every = sched_yield, threads, check_every
        self._left = 0  # idle passes until the next look at the thread count
        self._shared = False

    def idle(self, work_count: int) -> None:
        if work_count > 0:
            return
        left = self._left
        if left <= 0:
            self._shared = self._threads() > 1
            left = self._every
        self._left = left - 1
        if self._shared:
            self._yield()

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
    """Build an idle strategy by its config name: 'busy-spin' (``YieldSpin``) or 'back-off'.

    Raises:
        ValueError: unknown name.
    """
    if name == "busy-spin":
        return YieldSpin()
    if name == "back-off":
        return BackOff()
    raise ValueError(f"unknown idle strategy {name!r} (expected 'busy-spin' or 'back-off')")
