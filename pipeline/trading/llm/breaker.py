"""The LLM hub's circuit breaker (design document 000, section 2.5): pure, driven by an injected
monotonic clock (ns); every threshold is a ``BreakerConfig`` field whose default is the document's.

Outcomes. Every finished generation is one outcome: ``success`` (its answer validated), ``on_time``
(it finished before its deadline) and ``anomaly`` (the model answered something that did not
validate: invalid JSON, out of bounds, wrong instrument...).

Score. Once every ``sample_ms`` (1 s) of the clock, counted from the breaker's first use (its first
``poll``, ``live`` or ``record``), and not per generation, the breaker takes a sample: the score of
the outcomes of the last ``window_samples`` (60) sample periods, a 60 s window::

    score = 0.6 * success_rate + 0.3 * on_time_rate + 0.1 / (1 + anomalies)

An outcome counts from the first sample after it was recorded and leaves the window 60 samples
later, whether or not anything is generated meanwhile. A window holding fewer than ``min_outcomes``
(5) outcomes has no score (``None``: no evidence; the document names no minimum: 5 keeps a single
early failure, such as a first generation that evaluates the whole prompt, from judging the model on
its own). A sample without evidence is neither below ``trip_below`` nor at ``half_open_at``: it
ends a run of either. So when nothing is generated for a while, a CLOSED breaker stays CLOSED (a
quiet market never trips it) and an OPEN one stays OPEN (it cannot recover without evidence).

States (``live``: may an answer reach risk now?):

- CLOSED (live): ``trip_samples`` (3) consecutive samples below ``trip_below`` (0.72) -> OPEN.
- OPEN (not live): generations still run, as probes on incoming signals; their answers are validated
  and scored (they feed the window like any other), then dropped by the caller. ``half_open_samples``
  (30) consecutive samples at or above ``half_open_at`` (0.85) -> HALF_OPEN.
- HALF_OPEN (live): each finished generation is a probe of a round of ``half_open_round`` (5); a probe
  fails unless it succeeded on time. When more than ``reopen_fail_pct`` (40) % of the round's probes
  have failed (3 of 5; decided as soon as it is certain) -> OPEN; a round of 5 with no failure ->
  CLOSED; a round that ends with 1 or 2 failures starts a new round, still HALF_OPEN.

How the document's words were read where they cannot be taken literally:

- "closed again after the first 5 requests all succeed" and "back to open when more than 40 % of
  probes fail" are judged per round of 5 half-open requests: literally, one failure among the first 5
  would leave the breaker HALF_OPEN for ever, and a 40 % judged after every probe would reopen it at
  the first failure (1 of 1), leaving the 40 % rule nothing to decide.
- HALF_OPEN answers reach risk (the half-open trial runs on real traffic; the probes that earned it
  ran while OPEN). Whether an answer may reach risk is the state when the answer comes back, not when
  its generation started.
- The window describes the model, not the state: it is kept across transitions; the runs of samples
  and the half-open round restart at every transition.
- A sample with no evidence: see above.

Time is applied by every call (``poll``, ``live``, ``record``): samples that fell due since the last
call are taken in order, each over the window as it was at its own tick (an outcome recorded now
counts from the next tick); once the window holds no outcome at all, the rest are alike and skipped.
``poll`` and ``record`` return the transitions that happened since the previous such call (each
exactly once), so the caller can log them.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from typing import Annotated, Callable

import msgspec

#: the score's weights (document 000 section 2.5)
W_SUCCESS, W_ON_TIME, W_ANOMALY = 0.6, 0.3, 0.1


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The breaker's thresholds (see the module docstring); the defaults are document 000's."""

    sample_ms: Annotated[int, msgspec.Meta(ge=1, le=60_000)] = 1000  # one score sample per period
    window_samples: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 60  # the window: 60 periods (60 s)
    min_outcomes: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 5  # fewer in the window: no score
    trip_below: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.72
    trip_samples: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 3  # consecutive samples below: OPEN
    half_open_at: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.85
    half_open_samples: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 30  # consecutive samples at or above
    half_open_round: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5  # requests judged together
    reopen_fail_pct: Annotated[int, msgspec.Meta(ge=0, le=99)] = 40  # more than this % failed: OPEN


class Transition(msgspec.Struct, frozen=True):
    """A state change: ``old`` -> ``new`` at ``at_ns``, with the latest sample's score (None: no
    evidence) and why."""

    old: BreakerState
    new: BreakerState
    at_ns: int
    score: float | None
    why: str


class CircuitBreaker:
    """See the module docstring. Not thread-safe: call it from one thread."""

    def __init__(self, config: BreakerConfig = BreakerConfig(), clock: Callable[[], int] | None = None):
        self.cfg = config
        self.clock = clock or time.monotonic_ns
        self.period_ns = config.sample_ms * 1_000_000
        self.state = BreakerState.CLOSED
        self.why = "start"  # the reason for the current state
        self.since_ns: int | None = None  # when the current state began (None: not used yet)
        self._next_tick: int | None = None  # set by the first use: the clock may not run before
        self._periods: deque[tuple[int, int, int, int]] = deque()  # (n, ok, on_time, anomalies), oldest first
        self._sums = [0, 0, 0, 0]  # over _periods
        self._cur = [0, 0, 0, 0]  # outcomes since the last tick
        self._score: float | None = None  # the latest sample
        self.run = 0  # consecutive samples counting toward the state's rule (CLOSED: below; OPEN: at or above)
        self.round_n = self.round_failed = 0  # HALF_OPEN: the current round
        self.samples = 0
        self.transitions = 0
        self._new: list[Transition] = []

    # -------------------------------------------------------------------------------- window
    def score(self) -> float | None:
        """The latest sample's score; None before the first sample and when it had no evidence."""
        return self._score

    def counts(self) -> dict[str, int]:
        """The latest sample's window: outcomes, successes, on time, anomalies."""
        n, ok, on_time, anom = self._sums
        return {"outcomes": n, "ok": ok, "on_time": on_time, "anomalies": anom}

    def _window_score(self) -> float | None:
        n, ok, on_time, anom = self._sums
        if n < self.cfg.min_outcomes:
            return None
        return W_SUCCESS * ok / n + W_ON_TIME * on_time / n + W_ANOMALY / (1 + anom)

    def _advance(self, now: int) -> None:
        """Take every sample due by ``now``, in order (see the module docstring)."""
        if self._next_tick is None:
            self.since_ns, self._next_tick = now, now + self.period_ns
        while self._next_tick <= now:
            tick = self._next_tick
            self._sample(tick)
            self._next_tick = tick + self.period_ns
            if self._sums[0] == 0 and self._next_tick <= now:  # nothing left to expire: the rest are alike
                skipped = (now - self._next_tick) // self.period_ns + 1
                self._periods.clear()
                self.samples += skipped
                self._next_tick += skipped * self.period_ns

    def _sample(self, tick: int) -> None:
        cur, sums = self._cur, self._sums
        self._periods.append(tuple(cur))
        for i in range(4):
            sums[i] += cur[i]
            cur[i] = 0
        if len(self._periods) > self.cfg.window_samples:
            for i, v in enumerate(self._periods.popleft()):
                sums[i] -= v
        self._score = sc = self._window_score()
        self.samples += 1
        c = self.cfg
        if self.state is BreakerState.CLOSED:
            self.run = self.run + 1 if sc is not None and sc < c.trip_below else 0
            if self.run >= c.trip_samples:
                self._go(BreakerState.OPEN, tick, f"score below {c.trip_below:g} for {self._span(c.trip_samples)}")
        elif self.state is BreakerState.OPEN:
            self.run = self.run + 1 if sc is not None and sc >= c.half_open_at else 0
            if self.run >= c.half_open_samples:
                self._go(BreakerState.HALF_OPEN, tick,
                         f"score at or above {c.half_open_at:g} for {self._span(c.half_open_samples)}")

    def _span(self, samples: int) -> str:
        return f"{samples * self.cfg.sample_ms / 1000:g} s ({samples} samples)"

    # -------------------------------------------------------------------------------- transitions
    def _go(self, new: BreakerState, at_ns: int, why: str) -> None:
        sc = None if self._score is None else round(self._score, 4)
        self._new.append(Transition(self.state, new, at_ns, sc, why))
        self.state, self.why, self.since_ns = new, why, at_ns
        self.run = self.round_n = self.round_failed = 0
        self.transitions += 1

    def _take(self) -> list[Transition]:
        out, self._new = self._new, []
        return out

    def poll(self) -> list[Transition]:
        """Apply the time passed; the transitions since the previous ``poll`` or ``record`` (oldest first)."""
        self._advance(self.clock())
        return self._take()

    def live(self) -> bool:
        """May an answer that comes back now reach risk? True unless OPEN (time applied first; a
        transition that caused waits for the next ``poll`` or ``record``)."""
        self._advance(self.clock())
        return self.state is not BreakerState.OPEN


    def record(self, *, success: bool, on_time: bool, anomaly: bool) -> list[Transition]:
        """Add one finished generation's outcome (it counts from the next sample; in HALF_OPEN it is
        also a probe of the round); the transitions since the previous ``poll`` or ``record``."""
        now = self.clock()
        self._advance(now)
        cur = self._cur
        cur[0] += 1
        cur[1] += bool(success)
        cur[2] += bool(on_time)
        cur[3] += bool(anomaly)
        if self.state is BreakerState.HALF_OPEN:
            self._probe(now, bool(success and on_time))
        return self._take()

    def _probe(self, now: int, good: bool) -> None:
        c = self.cfg
        self.round_n += 1
        self.round_failed += not good
        if self.round_failed * 100 > c.reopen_fail_pct * c.half_open_round:
            self._go(BreakerState.OPEN, now, f"{self.round_failed} of {c.half_open_round} half-open requests "
                                              f"failed (more than {c.reopen_fail_pct} %)")
        elif self.round_n >= c.half_open_round:
            if self.round_failed == 0:
                self._go(BreakerState.CLOSED, now, f"a round of {c.half_open_round} half-open requests all succeeded")
            else:  # not enough failures to reopen, too many to close: another round
                self.round_n = self.round_failed = 0
