"""The latency-budget guard, sans I/O: whether each budgeted stage's p99 has stayed above a budget for
a whole window, the guard's level, and the CONTROL command it calls for.

Where the latencies come from: every stage's runner publishes, with each heartbeat, the p50 and p99
of its latest outputs' latency since origin (``AgentContext.latency_percentiles_ns``: a sliding window
of its last ``LATENCY_WINDOW`` = 4096 outputs; ``lat_p99_ns`` in the process table, the ``p99us``
column of ``status``). The supervisor hands each budgeted RUNNING stage's record to
``LatencyGuard.update`` as a ``Reading``; a reading is a sample when it is a new heartbeat in which
the stage wrote output (``msgs_out`` grew), since only then is its p99 fresh.

Breach: per stage and budget (``reduce_p99_us``, ``halt_p99_us``) a ``Run`` counts the consecutive
samples above it; a sample at or under it ends the run. A stage breaches a budget (``sustained``) when
its run holds at least ``min_samples`` samples and its first and latest were seen at least
``window_ms`` apart: the p99 stayed above the budget at every sample through the whole window, not in
one slow heartbeat. Runs are timed by when the samples were seen, not counted, so a stage slowed so
much that it beats less often is judged over the same window. Because the published p99 covers the
stage's latest 4096 outputs, it rises once about 41 of them are slow and falls only as newer outputs
replace them.

Arming: a stage's readings are samples only once it is armed, that is once its published p99 has been
at or under its reduce budget, or it has written ``LATENCY_WINDOW`` outputs since it started or since
the resume (its p99 then covers only those). Every process starts unarmed (a new pid: started or
restarted) and every stage is disarmed by a resume, so the slow outputs of a start (cold caches, a
backlog after a restart, a loaded machine) or those that tripped the guard do not trip it (again);
a stage slow from its start is judged after ``LATENCY_WINDOW`` outputs.

Levels (``Level``): OK, REDUCING (the risk gateway lets only position-reducing orders pass), HALTED (no
new order; working ones cancelled). ``next_level``: the level only rises, to the worst breach of any
stage; nothing lowers it but the operator's ``resume`` (``LatencyGuard.resume``: back to OK, every run
ended, every stage disarmed). ``command``: the CONTROL for a new level at once (REDUCE_ONLY, HALT),
never one that would loosen a risk gateway already stricter (an operator's halt); a gateway that
reports itself less strict than the level (restarted, so ACTIVE) is told again at most every
``resend_ms``.

Nothing here reads a clock, a file or shared memory: the supervisor passes the time and the readings
in, sends the command it gets back (reason LATENCY_BUDGET) and shows ``snapshot`` in its status.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from pipeline.runtime.agent import LATENCY_WINDOW
from pipeline.runtime.config import LatencyGuardConfig, StageBudget
from pipeline.trading.messages import ControlCmd


class Level(enum.IntEnum):
    """How strict the guard wants the risk gateway; also how strict a gateway state is (``STRICTNESS``)."""

    OK = 0
    REDUCING = 1
    HALTED = 2


#: the risk gateway's published state (its stage stats' ``state``) as a level
STRICTNESS = {"ACTIVE": Level.OK, "REDUCING": Level.REDUCING, "HALTED": Level.HALTED}

#: the CONTROL command that puts the gateway at a level
COMMAND = {Level.REDUCING: ControlCmd.REDUCE_ONLY, Level.HALTED: ControlCmd.HALT}


class Reading(NamedTuple):
    """What the supervisor read of one stage's process-table record."""

    pid: int
    beat_ns: int  # its runner's last heartbeat
    msgs_out: int  # outputs written since it started
    p99_ns: int  # p99 of its latest outputs' latency since origin (0: none yet)


class Run:
    """Consecutive samples above one budget: how many, when the first and the latest were seen, the
    lowest p99 among them (all 0: no run)."""

    __slots__ = ("n", "first_ns", "last_ns", "lowest_ns")

    def __init__(self) -> None:
        self.end()

    def end(self) -> None:
        self.n = self.first_ns = self.last_ns = self.lowest_ns = 0

    def add(self, now_ns: int, p99_ns: int, limit_ns: int) -> None:
        """A sample seen at ``now_ns``: above ``limit_ns`` it extends the run (or starts one), else
        it ends it."""
        if p99_ns <= limit_ns:
            self.end()
            return
        if self.n == 0:
            self.first_ns, self.lowest_ns = now_ns, p99_ns
        self.n += 1
        self.last_ns = now_ns
        self.lowest_ns = min(self.lowest_ns, p99_ns)

    @property
    def span_ns(self) -> int:
        return self.last_ns - self.first_ns


def sustained(n: int, span_ns: int, window_ns: int, min_samples: int) -> bool:
    """Whether a run of ``n`` samples whose first and latest were seen ``span_ns`` apart is a breach:
    at least ``min_samples`` samples over at least ``window_ns``."""
    return n >= min_samples and span_ns >= window_ns


class StageWatch:
    """One budgeted stage: the baseline of its readings, whether it is armed (``arm_at_out`` None; else
    armed when its output count reaches that, or a p99 comes within its reduce budget), its runs above
    each budget and its latest sample's p99."""

    def __init__(self, budget: StageBudget) -> None:
        self.budget = budget
        self.reduce_ns = budget.reduce_p99_us * 1_000
        self.halt_ns = budget.halt_p99_us * 1_000  # 0: never
        self.pid = self.beat_ns = self.msgs_out = 0
        self.arm_at_out: int | None = LATENCY_WINDOW
        self.latest_ns = 0
        self.over_reduce, self.over_halt = Run(), Run()

    def disarm(self) -> None:
        """The operator's resume: runs ended, unarmed until a p99 within budget or ``LATENCY_WINDOW``
        outputs from now."""
        self.over_reduce.end()
        self.over_halt.end()
        self.arm_at_out = self.msgs_out + LATENCY_WINDOW

    def observe(self, now_ns: int, r: Reading) -> None:
        """Take ``r`` seen at ``now_ns``: a sample when it is a new heartbeat with new output and the stage
        is armed. The first reading of a process (a new pid: started or restarted) only sets the baseline,
        ends the runs and leaves it unarmed (its counters and latencies began again)."""
        if r.pid != self.pid:
            self.pid, self.beat_ns, self.msgs_out = r.pid, r.beat_ns, r.msgs_out
            self.over_reduce.end()
            self.over_halt.end()
            self.arm_at_out = LATENCY_WINDOW
            return
        if r.beat_ns == self.beat_ns:
            return
        if self.arm_at_out is not None and (0 < r.p99_ns <= self.reduce_ns or r.msgs_out >= self.arm_at_out):
            self.arm_at_out = None
        if r.msgs_out > self.msgs_out and r.p99_ns > 0 and self.arm_at_out is None:
            self.latest_ns = r.p99_ns
            self.over_reduce.add(now_ns, r.p99_ns, self.reduce_ns)
            if self.halt_ns:
                self.over_halt.add(now_ns, r.p99_ns, self.halt_ns)
        self.beat_ns, self.msgs_out = r.beat_ns, r.msgs_out

    def breach(self, window_ns: int, min_samples: int) -> Level:
        """HALTED when the run above the halt budget is sustained, else REDUCING when the run above the
        reduce budget is, else OK."""
        if sustained(self.over_halt.n, self.over_halt.span_ns, window_ns, min_samples):
            return Level.HALTED
        if sustained(self.over_reduce.n, self.over_reduce.span_ns, window_ns, min_samples):
            return Level.REDUCING
        return Level.OK


def next_level(level: Level, breaches: list[Level]) -> Level:
    """The guard's level after this look: the worst of its level and every stage's breach (it never
    falls: only ``LatencyGuard.resume`` lowers it)."""
    return max([level, *breaches])


def command(level: Level, sent: Level, risk_state: str | None, now_ns: int, sent_ns: int,
            resend_ns: int) -> ControlCmd | None:
    """The CONTROL to send now, if any. ``sent``: the level last acted on (at ``sent_ns``);
    ``risk_state``: the gateway's published state (None: not known).

    A level above ``sent``: its command, unless the gateway is known to be stricter already (sending it
    would loosen an operator's halt). The same level: its command again when the gateway says it is less
    strict and ``resend_ns`` has passed since the last time. Otherwise None."""
    if level == Level.OK:
        return None
    have = STRICTNESS.get(risk_state) if risk_state is not None else None
    if level > sent:
        return None if have is not None and have > level else COMMAND[level]
    if have is not None and have < level and now_ns - sent_ns >= resend_ns:
        return COMMAND[level]
    return None


class LatencyGuard:
    """The guard's state over the budgeted stages (``cfg.budgets``); ``update`` once per supervisor
    loop, ``resume`` on the operator's resume, ``snapshot`` for the status."""

    def __init__(self, cfg: LatencyGuardConfig):
        self.cfg = cfg
        self.window_ns = cfg.window_ms * 1_000_000
        self.watches = {name: StageWatch(b) for name, b in cfg.budgets.items()}
        self.level = Level.OK
        self.sent = Level.OK  # the level last acted on
        self.sent_ns = 0
        self.since_ns = 0  # when the level last rose
        self.reason = ""  # why, in words (the stage, how long above which budget)
        self.trips = 0  # times the level rose since the supervisor started

    @property
    def stages(self) -> frozenset[str]:
        return frozenset(self.cfg.budgets)

    def update(self, now_ns: int, readings: dict[str, Reading], risk_state: str | None) -> ControlCmd | None:
        """Take one reading per budgeted stage that runs (a stage missing from ``readings`` keeps its
        runs), raise the level to the worst breach, and return the CONTROL to send now."""
        worst, why = Level.OK, ""
        for name, w in self.watches.items():
            if name in readings:
                w.observe(now_ns, readings[name])
            breach = w.breach(self.window_ns, self.cfg.min_samples)
            if breach > worst:
                run, limit = ((w.over_halt, w.budget.halt_p99_us) if breach == Level.HALTED
                              else (w.over_reduce, w.budget.reduce_p99_us))
                worst, why = breach, (f"{name} p99 above {limit:,} us for {run.span_ns / 1e9:.1f} s "
                                      f"({run.n} samples, lowest {run.lowest_ns / 1e3:,.0f} us)")
        new = next_level(self.level, [worst])
        if new > self.level:
            self.level, self.since_ns, self.reason = new, now_ns, why
            self.trips += 1
        cmd = command(self.level, self.sent, risk_state, now_ns, self.sent_ns, self.cfg.resend_ms * 1_000_000)
        if self.level > self.sent or cmd is not None:
            self.sent, self.sent_ns = self.level, now_ns
        return cmd

    def resume(self) -> None:
        """The operator's resume: back to OK, every run ended, every stage disarmed."""
        self.level = self.sent = Level.OK
        self.reason = ""
        self.since_ns = 0
        for w in self.watches.values():
            w.disarm()

    def snapshot(self, now_ns: int) -> dict:
        """The guard in the status: ``level`` (0 OK, 1 REDUCING, 2 HALTED), ``state`` (its name),
        ``reason``, ``for_ms`` (since the level rose; 0 at OK), ``trips``, ``window_ms``, ``min_samples``,
        and per stage its budgets, ``p99_us`` (its latest sample), ``above_ms`` / ``samples`` /
        ``lowest_p99_us`` (its run above the reduce budget so far), ``breach`` and ``armed``."""
        stages = {}
        for name, w in self.watches.items():
            run = w.over_reduce
            stages[name] = {"reduce_p99_us": w.budget.reduce_p99_us, "halt_p99_us": w.budget.halt_p99_us,
                            "p99_us": round(w.latest_ns / 1e3, 1), "above_ms": run.span_ns // 1_000_000,
                            "samples": run.n, "lowest_p99_us": round(run.lowest_ns / 1e3, 1),
                            "breach": w.breach(self.window_ns, self.cfg.min_samples).name,
                            "armed": w.arm_at_out is None}
        return {"level": int(self.level), "state": self.level.name, "reason": self.reason,
                "for_ms": (now_ns - self.since_ns) // 1_000_000 if self.level else 0, "trips": self.trips,
                "window_ms": self.cfg.window_ms, "min_samples": self.cfg.min_samples, "stages": stages}
