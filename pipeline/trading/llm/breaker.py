"""The LLM hub's circuit breaker: pure, driven by an injected monotonic clock (ns).

Every finished generation is recorded as an ``Outcome`` sample: ``success`` (a validated INSTRUCTION
came out), ``on_time`` (it finished before its deadline) and ``anomaly`` (the model answered something
that did not validate: invalid JSON, out of bounds, wrong instrument...). Over the samples of the last
``window_s`` seconds::

    score = 0.6 * success_rate + 0.3 * on_time_rate + 0.1 / (1 + anomalies)

(1.0 with fewer than ``min_samples`` samples: too little evidence to judge).

States:

- CLOSED: generations run. When the score stays below ``threshold`` for ``trip_after_s`` consecutive
  seconds, the breaker OPENs.
- OPEN: nothing runs (the hub drops signals; the system is fast-path only). After ``cooldown_s`` it goes
  HALF_OPEN.
- HALF_OPEN: ``allow()`` grants one probe at a time. A good probe (success and on time) counts; after
  ``close_after_probes`` consecutive good probes the breaker CLOSEs with a fresh window. A bad probe
  OPENs it again (the cooldown restarts).

``record`` and ``poll`` return the ``Transition`` they caused (or None) so the caller can log it.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Annotated, Callable

import msgspec


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    window_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    threshold: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.72
    trip_after_s: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 3.0
    cooldown_s: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 10.0
    close_after_probes: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 3
    min_samples: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 5


class Transition(msgspec.Struct, frozen=True):
    """A state change: ``old`` -> ``new`` at ``at_ns``, with the score then and why."""

    old: BreakerState
    new: BreakerState
    at_ns: int
    score: float
    why: str


class CircuitBreaker:
    """See the module docstring. Not thread-safe: call it from one thread."""

    def __init__(self, config: BreakerConfig = BreakerConfig(), clock: Callable[[], int] | None = None):
        import time

        self.cfg = config
        self.clock = clock or time.monotonic_ns
        self.state = BreakerState.CLOSED
        self._samples: deque[tuple[int, bool, bool, bool]] = deque()
        self._n_ok = self._n_on_time = self._n_anom = 0
        self._below_since: int | None = None
        self._opened_at = 0
        self._probe_out = False
        self._good_probes = 0
        self.transitions = 0

    # -------------------------------------------------------------------------------- window
    def _expire(self, now: int) -> None:
        horizon = now - int(self.cfg.window_s * 1e9)
        s = self._samples
        while s and s[0][0] <= horizon:
            _, ok, on_time, anom = s.popleft()
            self._n_ok -= ok
            self._n_on_time -= on_time
            self._n_anom -= anom

    def score(self, now: int | None = None) -> float:
        """The window's score now (1.0 with fewer than ``min_samples`` samples)."""
        self._expire(self.clock() if now is None else now)
        n = len(self._samples)
        if n < self.cfg.min_samples:
            return 1.0
        return 0.6 * self._n_ok / n + 0.3 * self._n_on_time / n + 0.1 / (1 + self._n_anom)

    def counts(self) -> dict[str, int]:
        """Samples in the window: total, successes, on time, anomalies."""
        return {"samples": len(self._samples), "ok": self._n_ok, "on_time": self._n_on_time, "anomalies": self._n_anom}

    # -------------------------------------------------------------------------------- transitions
    def _go(self, new: BreakerState, now: int, score: float, why: str) -> Transition:
        t = Transition(self.state, new, now, round(score, 4), why)
        self.state = new
        self.transitions += 1
        self._probe_out = False
        if new is BreakerState.OPEN:
            self._opened_at = now
            self._good_probes = 0
        elif new is BreakerState.CLOSED:
            self._samples.clear()
            self._n_ok = self._n_on_time = self._n_anom = 0
            self._good_probes = 0
        self._below_since = None
        return t

    def poll(self) -> Transition | None:
        """Advance on time alone: trip after ``trip_after_s`` below threshold, half-open after cooldown."""
        now = self.clock()
        if self.state is BreakerState.CLOSED:
            sc = self.score(now)
            if sc >= self.cfg.threshold:
                self._below_since = None
                return None
            if self._below_since is None:
                self._below_since = now
            if now - self._below_since >= int(self.cfg.trip_after_s * 1e9):
                return self._go(BreakerState.OPEN, now, sc,
                                f"score {sc:.3f} below {self.cfg.threshold} for {self.cfg.trip_after_s:g} s")
            return None
        if self.state is BreakerState.OPEN and now - self._opened_at >= int(self.cfg.cooldown_s * 1e9):
            return self._go(BreakerState.HALF_OPEN, now, self.score(now), f"cooldown {self.cfg.cooldown_s:g} s over")
        return None

    def allow(self) -> bool:
        """May a generation start now? CLOSED: yes. OPEN: no. HALF_OPEN: yes for one probe at a time
        (the caller must ``record`` its outcome). Call ``poll`` first to apply time-driven changes."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.HALF_OPEN and not self._probe_out:
            self._probe_out = True
            return True
        return False

    def record(self, *, success: bool, on_time: bool, anomaly: bool) -> Transition | None:
        """Add one finished generation's outcome; returns the transition it caused, if any."""
        now = self.clock()
        self._expire(now)
        self._samples.append((now, bool(success), bool(on_time), bool(anomaly)))
        self._n_ok += bool(success)
        self._n_on_time += bool(on_time)
        self._n_anom += bool(anomaly)
        if self.state is BreakerState.HALF_OPEN:
            self._probe_out = False
            if success and on_time:
                self._good_probes += 1
                if self._good_probes >= self.cfg.close_after_probes:
                    return self._go(BreakerState.CLOSED, now, self.score(now),
                                    f"{self._good_probes} consecutive good probes")
                return None
            return self._go(BreakerState.OPEN, now, self.score(now), "probe failed")
        if self.state is BreakerState.CLOSED:
            return self.poll()
        return None
