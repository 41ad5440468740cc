"""The latency-budget guard (pipeline/runtime/supervisor/budget.py) as tables: which readings are
samples, when a run above a budget is a breach, when a stage is armed, how the level moves (up only),
which CONTROL is sent when; then the guard over a run of readings on an injected clock, and its
config's checks."""

from __future__ import annotations

import pytest

from pipeline.runtime.agent import LATENCY_WINDOW
from pipeline.runtime.config import LatencyGuardConfig, StageBudget, parse_config
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.supervisor.budget import (Level, LatencyGuard, Reading, Run, StageWatch, command, next_level,
                                                sustained)
from pipeline.trading.messages import ControlCmd

MS = 1_000_000
US = 1_000
B = StageBudget(reduce_p99_us=1_000, halt_p99_us=5_000)
FAST, SLOW, SLOWER = 500 * US, 2_000 * US, 9_000 * US  # within budget, over reduce, over halt
BASE = Reading(pid=7, beat_ns=100, msgs_out=10, p99_ns=FAST)


def beat(i: int, p99_ns: int, *, out: int = 1, pid: int = 7) -> Reading:
    """BASE's process ``i`` heartbeats later, with ``out`` outputs a heartbeat."""
    return Reading(pid, BASE.beat_ns + 100 * i, BASE.msgs_out + out * i, p99_ns)


def watch_after(*steps: tuple[int, Reading], budget: StageBudget = B) -> StageWatch:
    w = StageWatch(budget)
    for now, r in steps:
        w.observe(now, r)
    return w


def run_of(w: StageWatch) -> tuple[int, int, int, int]:
    r = w.over_reduce
    return r.n, r.first_ns, r.last_ns, r.lowest_ns


# (id, readings (time, reading) after the baseline and an arming heartbeat at 5 ms, run above reduce (n, first, last, lowest))
OBSERVE = [
    ("a heartbeat within budget arms the stage and is a sample below budget: no run", [], (0, 0, 0, 0)),
    ("a new heartbeat with new output over budget starts a run", [(10 * MS, beat(2, SLOW))], (1, 10 * MS, 10 * MS, SLOW)),
    ("the same heartbeat read again is not a sample", [(10 * MS, beat(2, SLOW)), (20 * MS, beat(2, SLOWER))],
     (1, 10 * MS, 10 * MS, SLOW)),
    ("a heartbeat without output is not: its p99 is old", [(10 * MS, beat(2, SLOW, out=0)._replace(msgs_out=11))],
     (0, 0, 0, 0)),
    ("no p99 yet is not a sample", [(10 * MS, beat(2, 0))], (0, 0, 0, 0)),
    ("samples over budget extend the run; its lowest p99 kept",
     [(10 * MS, beat(2, SLOWER)), (20 * MS, beat(3, SLOW)), (30 * MS, beat(4, SLOWER))], (3, 10 * MS, 30 * MS, SLOW)),
    ("a sample at the budget ends the run", [(10 * MS, beat(2, SLOW)), (20 * MS, beat(3, 1_000 * US))], (0, 0, 0, 0)),
    ("a new pid (restarted) ends the run: its first reading is a baseline",
     [(10 * MS, beat(2, SLOW)), (20 * MS, beat(3, SLOW, pid=8))], (0, 0, 0, 0)),
]


@pytest.mark.parametrize("steps,run", [r[1:] for r in OBSERVE], ids=[r[0] for r in OBSERVE])
def test_which_readings_are_samples_and_how_they_make_a_run(steps, run):
    w = watch_after((0, BASE), (5 * MS, beat(1, FAST)), *steps)
    assert run_of(w) == run


def test_a_run_above_the_halt_budget_is_kept_beside_the_reduce_one_and_halt_0_keeps_none():
    w = watch_after((0, BASE), (5 * MS, beat(1, FAST)), (10 * MS, beat(2, SLOWER)), (20 * MS, beat(3, SLOW)),
                    (30 * MS, beat(4, SLOWER)))
    assert (w.over_reduce.n, w.over_halt.n, w.over_halt.first_ns) == (3, 1, 30 * MS)
    w = watch_after((0, BASE), (5 * MS, beat(1, FAST)), (10 * MS, beat(2, SLOWER)), budget=StageBudget(reduce_p99_us=1_000))
    assert (w.over_reduce.n, w.over_halt.n) == (1, 0)


# (id, a resume after arming?, readings (time, reading) after them, samples in the run, armed at the end)
ARMING = [
    ("a new process is unarmed: a slow p99 of its start is not a sample", False, [(10 * MS, beat(1, SLOW))], 0, False),
    ("a p99 at the reduce budget arms it", False, [(10 * MS, beat(1, 1_000 * US)), (20 * MS, beat(2, SLOW))], 1, True),
    ("LATENCY_WINDOW outputs of its own arm it, however slow",
     False, [(10 * MS, beat(1, SLOW)._replace(msgs_out=LATENCY_WINDOW))], 1, True),
    ("one output short of that, unarmed", False, [(10 * MS, beat(1, SLOW)._replace(msgs_out=LATENCY_WINDOW - 1))], 0, False),
    ("a resume disarms an armed stage", True, [(10 * MS, beat(2, SLOW))], 0, False),
    ("after a resume, LATENCY_WINDOW more outputs arm it",
     True, [(10 * MS, beat(2, SLOW)._replace(msgs_out=BASE.msgs_out + 1 + LATENCY_WINDOW))], 1, True),
    ("after a resume, one output short of that, unarmed",
     True, [(10 * MS, beat(2, SLOW)._replace(msgs_out=BASE.msgs_out + LATENCY_WINDOW))], 0, False),
    ("a restarted process is unarmed again",
     True, [(10 * MS, beat(2, FAST)), (20 * MS, beat(3, SLOW, pid=8)), (30 * MS, beat(4, SLOW, pid=8))], 0, False),
]


@pytest.mark.parametrize("resume,steps,n,armed", [r[1:] for r in ARMING], ids=[r[0] for r in ARMING])
def test_a_stage_is_judged_once_its_p99_has_been_within_budget_or_is_all_its_own(resume, steps, n, armed):
    w = watch_after((0, BASE))
    if resume:
        w.observe(5 * MS, beat(1, FAST))  # armed by a p99 within budget
        assert w.arm_at_out is None
        w.disarm()
    for now, r in steps:
        w.observe(now, r)
    assert w.over_reduce.n == n and (w.arm_at_out is None) is armed


WINDOW = 1_000 * MS
# (id, samples in the run, first to latest, min samples, breach)
SUSTAINED = [
    ("no run", 0, 0, 3, False),
    ("a whole window with enough samples", 3, WINDOW, 3, True),
    ("a window and more", 11, 2 * WINDOW, 3, True),
    ("one nanosecond short of the window", 30, WINDOW - 1, 3, False),
    ("a whole window but too few samples", 2, WINDOW, 3, False),
]


@pytest.mark.parametrize("n,span,min_samples,breach", [r[1:] for r in SUSTAINED], ids=[r[0] for r in SUSTAINED])
def test_when_a_run_is_a_breach(n, span, min_samples, breach):
    assert sustained(n, span, WINDOW, min_samples) is breach


def test_a_stage_breaches_the_worst_budget_whose_run_is_sustained():
    w = watch_after((0, BASE), (5 * MS, beat(1, FAST)), *[(t * 250 * MS, beat(1 + t, SLOWER if t > 2 else SLOW))
                                                          for t in range(1, 7)])
    # over reduce since 250 ms (6 samples, 1.25 s), over halt since 750 ms (4 samples, 0.75 s)
    assert w.breach(WINDOW, 3) is Level.REDUCING and w.breach(WINDOW // 2, 3) is Level.HALTED
    assert w.breach(WINDOW, 7) is Level.OK
    r = Run()
    r.add(1, SLOW, 1_000 * US)
    assert (r.n, r.span_ns, r.lowest_ns) == (1, 0, SLOW)


# (id, level, breaches, new level)
LEVELS = [
    ("OK stays OK without a breach", Level.OK, [Level.OK, Level.OK], Level.OK),
    ("the worst breach of any stage", Level.OK, [Level.REDUCING, Level.HALTED, Level.OK], Level.HALTED),
    ("REDUCING rises to HALTED", Level.REDUCING, [Level.HALTED], Level.HALTED),
    ("no breach does not lower REDUCING", Level.REDUCING, [Level.OK], Level.REDUCING),
    ("a lesser breach does not lower HALTED", Level.HALTED, [Level.REDUCING], Level.HALTED),
]


@pytest.mark.parametrize("level,breaches,new", [r[1:] for r in LEVELS], ids=[r[0] for r in LEVELS])
def test_the_level_only_rises(level, breaches, new):
    assert next_level(level, breaches) is new


RESEND = 1_000 * MS
R, H, O = Level.REDUCING, Level.HALTED, Level.OK
# (id, level, sent, risk state, now, sent at, command)
COMMANDS = [
    ("OK sends nothing", O, O, "ACTIVE", 5 * RESEND, 0, None),
    ("a new REDUCING: REDUCE_ONLY at once", R, O, "ACTIVE", 10, 0, ControlCmd.REDUCE_ONLY),
    ("a new REDUCING, the gateway's state unknown: REDUCE_ONLY", R, O, None, 10, 0, ControlCmd.REDUCE_ONLY),
    ("a new HALTED: HALT at once", H, R, "REDUCING", 10, 5, ControlCmd.HALT),
    ("straight to HALTED: HALT", H, O, "ACTIVE", 10, 0, ControlCmd.HALT),
    ("a new HALTED on an operator's halt: HALT again (the reason reaches the audit)", H, O, "HALTED", 10, 0,
     ControlCmd.HALT),
    ("never loosen: no REDUCE_ONLY to a halted gateway", R, O, "HALTED", 10, 0, None),
    ("told, and the gateway is there: nothing", R, R, "REDUCING", 5 * RESEND, 0, None),
    ("told, the gateway not there yet (its state is a heartbeat late): wait", R, R, "ACTIVE", RESEND - 1, 0, None),
    ("told, the gateway still ACTIVE a resend later (restarted): again", R, R, "ACTIVE", RESEND, 0,
     ControlCmd.REDUCE_ONLY),
    ("HALTED, the gateway REDUCING a resend later: HALT again", H, H, "REDUCING", 2 * RESEND, RESEND, ControlCmd.HALT),
    ("told, the gateway's state unknown: nothing", R, R, None, 5 * RESEND, 0, None),
    ("told, and the gateway stricter: nothing", R, R, "HALTED", 5 * RESEND, 0, None),
]


@pytest.mark.parametrize("level,sent,risk,now,sent_ns,cmd", [r[1:] for r in COMMANDS], ids=[r[0] for r in COMMANDS])
def test_which_control_is_sent(level, sent, risk, now, sent_ns, cmd):
    assert command(level, sent, risk, now, sent_ns, RESEND) is cmd


# ------------------------------------------------------------------------------------------ the guard over time
CFG = LatencyGuardConfig(window_ms=1_000, min_samples=5, resend_ms=1_000,
                         budgets={"features": StageBudget(reduce_p99_us=1_000, halt_p99_us=5_000),
                                  "fast": StageBudget(reduce_p99_us=2_000)})


class Stage:
    """A stage's process-table record as its runner would leave it: a heartbeat every 100 ms with output."""

    def __init__(self, pid: int = 10):
        self.pid, self.beat, self.out = pid, 0, 0

    def beat_with(self, p99_us: float) -> Reading:
        self.beat += 100 * MS
        self.out += 50
        return Reading(self.pid, self.beat, self.out, int(p99_us * US))


def run(guard, stages, p99s: dict[str, float], t0: int, seconds: float, risk="ACTIVE"):
    """Feed the guard a heartbeat of every stage every 100 ms for ``seconds`` from ``t0``; the commands
    it returned as (ms since t0, command) and the time reached."""
    out, t = [], t0
    for _ in range(round(seconds * 10)):
        t += 100 * MS
        cmd = guard.update(t, {n: s.beat_with(p99s[n]) for n, s in stages.items()}, risk(guard) if callable(risk) else risk)
        if cmd is not None:
            out.append(((t - t0) // MS, cmd))
    return out, t


def gateway_follows(guard) -> str:
    """The risk state of a gateway that obeyed the last command at once."""
    return {Level.OK: "ACTIVE", Level.REDUCING: "REDUCING", Level.HALTED: "HALTED"}[guard.sent]


def armed() -> tuple[LatencyGuard, dict[str, Stage], int]:
    """A guard whose stages have each had a heartbeat within budget (their first reading is a baseline,
    their second arms them): the guard, the stages, the time (200 ms)."""
    g = LatencyGuard(CFG)
    st = {"features": Stage(1), "fast": Stage(2)}
    cmds, t = run(g, st, {"features": 100, "fast": 100}, 0, 0.2, "ACTIVE")
    assert cmds == [] and all(s["armed"] for s in g.snapshot(t)["stages"].values())
    return g, st, t


def test_a_sustained_breach_reduces_then_halts_and_nothing_but_resume_lifts_it():
    g, st, t = armed()
    cmds, t = run(g, st, {"features": 500, "fast": 500}, t, 2.0, gateway_follows)
    assert cmds == [] and g.level is Level.OK
    # features slow (over reduce, under halt): REDUCE_ONLY once 1 s lies between its first and latest slow sample
    cmds, t = run(g, st, {"features": 3_000, "fast": 500}, t, 3.0, gateway_follows)
    assert cmds == [(1_100, ControlCmd.REDUCE_ONLY)], cmds
    assert g.level is Level.REDUCING and g.trips == 1
    assert g.reason == "features p99 above 1,000 us for 1.0 s (11 samples, lowest 3,000 us)"
    # slower still (over halt): HALT, a window later
    cmds, t = run(g, st, {"features": 9_000, "fast": 500}, t, 2.0, gateway_follows)
    assert cmds == [(1_100, ControlCmd.HALT)] and g.level is Level.HALTED and g.trips == 2
    assert g.reason == "features p99 above 5,000 us for 1.0 s (11 samples, lowest 9,000 us)"
    # fast again for a long time: still HALTED, nothing sent
    cmds, t = run(g, st, {"features": 100, "fast": 100}, t, 5.0, gateway_follows)
    assert cmds == [] and g.level is Level.HALTED
    snap = g.snapshot(t)
    assert (snap["level"], snap["state"], snap["for_ms"], snap["trips"]) == (2, "HALTED", 900 + 5_000, 2)
    assert snap["stages"]["features"] == {"reduce_p99_us": 1_000, "halt_p99_us": 5_000, "p99_us": 100.0, "above_ms": 0,
                                          "samples": 0, "lowest_p99_us": 0.0, "breach": "OK", "armed": True}
    # the operator's resume: OK, runs ended, stages disarmed; a p99 within budget arms a stage again,
    # and one that turns slow after that needs a whole window again
    g.resume()
    assert g.level is Level.OK and g.reason == ""
    assert not any(s["armed"] for s in g.snapshot(t)["stages"].values())
    cmds, t = run(g, st, {"features": 500, "fast": 100}, t, 0.3, gateway_follows)
    assert cmds == [] and all(s["armed"] for s in g.snapshot(t)["stages"].values())
    cmds, t = run(g, st, {"features": 500, "fast": 2_500}, t, 1.5, gateway_follows)
    assert cmds == [(1_100, ControlCmd.REDUCE_ONLY)], cmds
    assert g.reason.startswith("fast p99 above 2,000 us for 1.0 s")


def test_after_a_resume_the_slow_outputs_that_tripped_the_guard_do_not_trip_it_again():
    g, st, t = armed()
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 1.5, gateway_follows)
    assert [c for _, c in cmds] == [ControlCmd.REDUCE_ONLY]
    g.resume()  # features' published p99 still holds its slow outputs (the runner's last 4096)
    beats_to_arm = -(-LATENCY_WINDOW // 50)  # Stage writes 50 outputs a heartbeat
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, (beats_to_arm - 1) / 10, gateway_follows)
    assert cmds == [] and g.level is Level.OK  # not judged while its p99 covers outputs from before the resume
    assert g.snapshot(t)["stages"]["features"]["armed"] is False
    # LATENCY_WINDOW outputs after the resume its p99 is all new: armed, and still slow, so a window later
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 2.0, gateway_follows)
    assert cmds == [(1_100, ControlCmd.REDUCE_ONLY)] and g.snapshot(t)["stages"]["features"]["armed"] is True


def test_slow_heartbeats_broken_by_one_within_budget_are_not_a_sustained_breach():
    g, st, t = armed()
    for _ in range(5):  # 9 slow heartbeats, 1 within budget: no run lasts the 1 s window
        cmds, t = run(g, st, {"features": 50_000, "fast": 100}, t, 0.9, "ACTIVE")
        assert cmds == []
        cmds, t = run(g, st, {"features": 900, "fast": 100}, t, 0.1, "ACTIVE")
        assert cmds == []
    assert g.level is Level.OK and g.snapshot(t)["stages"]["features"]["samples"] == 0


def test_a_stage_that_beats_slowly_is_judged_over_the_same_window():
    g = LatencyGuard(CFG)
    st = {"features": Stage(1), "fast": Stage(2)}
    t = 0
    for i in range(8):  # features beats every 400 ms (a long do_work), fast every 100 ms
        readings = {"fast": st["fast"].beat_with(100)}
        if i % 4 == 0 or i < 2:
            readings["features"] = st["features"].beat_with(100 if i < 2 else 3_000)
        t += 100 * MS
        assert g.update(t, readings, "ACTIVE") is None
    cmds = []
    for i in range(8, 40):
        readings = {"fast": st["fast"].beat_with(100)}
        if i % 4 == 0:
            readings["features"] = st["features"].beat_with(3_000)
        t += 100 * MS
        if (cmd := g.update(t, readings, "ACTIVE")) is not None:
            cmds.append((t // MS, cmd))
    # slow samples at 500, 900, 1300, 1700 ms: 1.2 s apart at the fourth, more than the 1 s window, and
    # 5 samples needed: the fifth, at 2100 ms
    assert cmds[0] == (2_100, ControlCmd.REDUCE_ONLY), cmds


def test_a_restarted_gateway_that_comes_back_active_is_told_again_each_resend():
    g, st, t = armed()
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 3.2, "ACTIVE")  # it never goes REDUCING
    assert cmds == [(1_100, ControlCmd.REDUCE_ONLY), (2_100, ControlCmd.REDUCE_ONLY), (3_100, ControlCmd.REDUCE_ONLY)]
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 3.0, "REDUCING")
    assert cmds == []


def test_a_restarted_stage_starts_again_unarmed():
    g, st, t = armed()
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 0.4, "ACTIVE")
    assert cmds == [] and g.snapshot(t)["stages"]["features"]["samples"] == 4
    st["features"] = Stage(3)  # a new process: its first reading is a baseline, and it is unarmed
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 1.5, "ACTIVE")  # its backlog, say: not judged
    assert cmds == [] and g.snapshot(t)["stages"]["features"]["samples"] == 0
    cmds, t = run(g, st, {"features": 800, "fast": 100}, t, 0.1, "ACTIVE")  # within budget: armed
    cmds, t = run(g, st, {"features": 3_000, "fast": 100}, t, 1.5, "ACTIVE")
    assert cmds == [(1_100, ControlCmd.REDUCE_ONLY)]


def test_a_stage_no_longer_read_keeps_its_run_but_no_time_without_samples_makes_it_a_breach():
    g, st, t = armed()
    _, t = run(g, st, {"features": 3_000, "fast": 100}, t, 0.5, "ACTIVE")  # slow samples at 300..700 ms
    for later in (500 * MS, 2_000 * MS, 60_000 * MS):  # features not RUNNING: no reading of it
        assert g.update(t + later, {}, "ACTIVE") is None
    s = g.snapshot(t)["stages"]["features"]
    assert (s["samples"], s["above_ms"], s["breach"]) == (5, 400, "OK")


def test_a_guard_without_budgets_judges_nothing():
    g = LatencyGuard(LatencyGuardConfig())
    assert g.stages == frozenset() and g.update(10**12, {}, "ACTIVE") is None
    assert g.snapshot(10**12) == {"level": 0, "state": "OK", "reason": "", "for_ms": 0, "trips": 0, "window_ms": 5_000,
                                  "min_samples": 10, "stages": {}}


# ------------------------------------------------------------------------------------------ its config
HEAD = '[supervisor]\ncontrol_ring = "control"\n[[rings]]\nname = "control"\nmax_payload_bytes = 16\ncapacity = 64\n' \
       'full_policy = "backpressure"\n[[processes]]\nname = "risk"\nmodule = "m:A"\ninputs = ["control"]\n'


def test_a_budget_names_a_process_and_keeps_halt_above_reduce():
    cfg = parse_config(HEAD + "[latency_guard]\nwindow_ms = 2000\n[latency_guard.budgets]\n"
                              "risk = { reduce_p99_us = 1_000, halt_p99_us = 2_000 }\n")
    assert cfg.latency_guard.budgets == {"risk": StageBudget(reduce_p99_us=1_000, halt_p99_us=2_000)}
    assert parse_config(HEAD).latency_guard == LatencyGuardConfig()  # no table: no budgets, the guard off
    bad = [
        ("[latency_guard.budgets]\nriks = { reduce_p99_us = 1 }\n", "$.latency_guard.budgets.riks: unknown process 'riks'"),
        ("[latency_guard.budgets]\nrisk = { reduce_p99_us = 5, halt_p99_us = 4 }\n",
         "$.latency_guard.budgets.risk.halt_p99_us: must be 0 (never) or >= reduce_p99_us (5), got 4"),
        ("[latency_guard.budgets]\nrisk = { reduce_p99_us = 0 }\n", "reduce_p99_us"),
        ("[latency_guard.budgets]\nrisk = { reduce_p99_us = 5, halt_us = 9 }\n", "unknown field `halt_us`"),
        ("[latency_guard]\nwindow_ms = 50\n", "window_ms"),
        ("[latency_guard]\nwindow_ms = 1000\nmin_samples = 12\n[latency_guard.budgets]\nrisk = { reduce_p99_us = 5 }\n",
         "$.latency_guard.min_samples: 12 samples need more than window_ms (1000) at one per heartbeat (100 ms): at most 11"),
    ]
    for text, want in bad:
        with pytest.raises(ConfigError) as e:
            parse_config(HEAD + text)
        assert want in str(e.value), (text, str(e.value))
    with pytest.raises(ConfigError, match=r"\$.latency_guard.budgets: the guard acts through CONTROL"):
        parse_config(HEAD.replace('control_ring = "control"', "") + "[latency_guard.budgets]\nrisk = { reduce_p99_us = 5 }\n")
