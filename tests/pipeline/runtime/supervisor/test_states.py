"""The process state machine (pipeline/runtime/supervisor/states.py) as a table: each row is a
lifecycle, an event at a time, and the states entered, the actions and the new lifecycle expected."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.runtime.config import RestartPolicy
from pipeline.runtime.supervisor.states import (
    EXIT_START_PERMANENT, Action, Event, Lifecycle, State, describe_exit, restart_delay_ms, transition,
)

MS = 1_000_000
NOW = 1_000 * MS
POLICY = RestartPolicy(backoff_initial_ms=100, backoff_multiplier=2.0, backoff_max_ms=1_000, stable_after_ms=5_000,
                       max_restarts=3, window_ms=10_000)
S = State
STARTED = Lifecycle(state=S.STARTING, started_ns=NOW - 10 * MS)
RUNNING = replace(STARTED, state=S.RUNNING)
RESTARTED = replace(RUNNING, restarts=2, consecutive=2, restart_times_ns=(NOW - 2_000 * MS, NOW - 1_000 * MS))
FLAPPING = replace(RESTARTED, restarts=3, consecutive=3, restart_times_ns=(NOW - 3 * MS, NOW - 2 * MS, NOW - MS))

# (id, lifecycle, event, keywords, states entered, actions, what the new lifecycle must hold)
TABLE = [
    ("first start", Lifecycle(), Event.SPAWNED, {}, [S.STARTING], [], dict(state=S.STARTING, started_ns=NOW)),
    ("ready", STARTED, Event.READY, {}, [S.RUNNING], [], dict(state=S.RUNNING)),
    ("ready while running is nothing", RUNNING, Event.READY, {}, [], [], dict(state=S.RUNNING)),
    ("first death backs off the initial delay", RUNNING, Event.EXITED, {"why": "exit code 1"},
     [S.EXITED, S.BACKOFF], [], dict(state=S.BACKOFF, consecutive=1, restart_times_ns=(NOW,),
                                     backoff_until_ns=NOW + 100 * MS)),
    ("third death backs off 4x", RESTARTED, Event.EXITED, {"why": "exit code 1"},
     [S.EXITED, S.BACKOFF], [], dict(consecutive=3, backoff_until_ns=NOW + 400 * MS)),
    ("back-off capped", replace(RESTARTED, consecutive=9, restart_times_ns=()), Event.EXITED, {},
     [S.EXITED, S.BACKOFF], [], dict(consecutive=10, backoff_until_ns=NOW + 1_000 * MS)),
    ("stable for stable_after_ms: the back-off starts again", replace(RESTARTED, started_ns=NOW - 5_000 * MS),
     Event.EXITED, {}, [S.EXITED, S.BACKOFF], [], dict(consecutive=1, backoff_until_ns=NOW + 100 * MS)),
    ("restarts older than the window are forgotten", replace(FLAPPING, restart_times_ns=(NOW - 10_001 * MS,) * 3),
     Event.EXITED, {}, [S.EXITED, S.BACKOFF], [], dict(restart_times_ns=(NOW,))),
    ("max_restarts within the window: FATAL, halt", FLAPPING, Event.EXITED, {"why": "exit code 1"},
     [S.EXITED, S.FATAL], [Action.HALT], dict(state=S.FATAL, restarts=3)),
    ("start failed for good: FATAL at once, halt", STARTED, Event.START_FAILED, {"why": "start failed: ConfigError"},
     [S.FATAL], [Action.HALT], dict(state=S.FATAL, consecutive=0, restart_times_ns=())),
    ("back-off over: start again", replace(RESTARTED, state=S.BACKOFF), Event.BACKOFF_ELAPSED, {},
     [], [Action.SPAWN], dict(state=S.BACKOFF, restarts=3)),
    ("back-off over while running is nothing", RUNNING, Event.BACKOFF_ELAPSED, {}, [], [], dict(restarts=0)),
    ("stop a running process", RUNNING, Event.STOP, {}, [S.STOPPING], [Action.TERMINATE],
     dict(state=S.STOPPING, then_start=False)),
    ("stop a starting process", STARTED, Event.STOP, {}, [S.STOPPING], [Action.TERMINATE], dict(state=S.STOPPING)),
    ("stop a stopped process is nothing", Lifecycle(), Event.STOP, {}, [], [], dict(state=S.STOPPED)),
    ("exit after stop: STOPPED", replace(RUNNING, state=S.STOPPING), Event.EXITED, {"why": "exit code 0"},
     [S.STOPPED], [], dict(state=S.STOPPED, restarts=0)),
    ("restart a running process: stop first", RUNNING, Event.RESTART, {}, [S.STOPPING], [Action.TERMINATE],
     dict(state=S.STOPPING, then_start=True)),
    ("exit after restart: STOPPED, start again", replace(RESTARTED, state=S.STOPPING, then_start=True), Event.EXITED, {},
     [S.STOPPED], [Action.SPAWN], dict(state=S.STOPPED, restarts=3, then_start=False, consecutive=2)),
    ("restart a FATAL process: start at once, history reset", replace(FLAPPING, state=S.FATAL), Event.RESTART, {},
     [], [Action.SPAWN], dict(state=S.FATAL, restarts=4, consecutive=0, restart_times_ns=())),
    ("restart a stopping process is nothing", replace(RUNNING, state=S.STOPPING), Event.RESTART, {}, [], [],
     dict(state=S.STOPPING, then_start=False)),
    ("going down: a death is STOPPED, no policy", RUNNING, Event.EXITED, {"down": True}, [S.STOPPED], [],
     dict(state=S.STOPPED, consecutive=0, restart_times_ns=())),
    ("going down: no start again after a restart", replace(RUNNING, state=S.STOPPING, then_start=True), Event.EXITED,
     {"down": True}, [S.STOPPED], [], dict(state=S.STOPPED, restarts=0)),
    ("going down: a failed start is STOPPED, no halt", STARTED, Event.START_FAILED, {"down": True}, [S.STOPPED], [],
     dict(state=S.STOPPED)),
]


@pytest.mark.parametrize("life, event, kw, entered, actions, holds", [row[1:] for row in TABLE],
                         ids=[row[0] for row in TABLE])
def test_transition(life, event, kw, entered, actions, holds):
    step = transition(life, event, POLICY, NOW, **kw)
    assert [e.state for e in step.entered] == entered
    assert list(step.actions) == actions
    assert {k: getattr(step.life, k) for k in holds} == holds
    assert step.life.state is (entered[-1] if entered else life.state)


def test_what_the_log_says_of_each_state_entered():
    backoff = transition(RUNNING, Event.EXITED, POLICY, NOW, why="killed by SIGKILL")
    assert [e.log_fields() for e in backoff.entered] == [{"why": "killed by SIGKILL"}, {"delay_ms": 100}]
    fatal = transition(FLAPPING, Event.EXITED, POLICY, NOW, why="exit code 1")
    assert [e.log_fields() for e in fatal.entered] == [
        {"why": "exit code 1"}, {"why": "3 restarts within 10000 ms; last: exit code 1"}]
    assert transition(Lifecycle(), Event.SPAWNED, POLICY, NOW).entered[0].log_fields() == {}


def test_restart_delay_follows_the_documented_formula():
    assert [restart_delay_ms(POLICY, n) for n in range(6)] == [100, 200, 400, 800, 1_000, 1_000]


def test_exits_in_words():
    assert [describe_exit(rc) for rc in (0, 1, -9, -15, -99)] == [
        "exit code 0", "exit code 1", "killed by SIGKILL", "killed by SIGTERM", "killed by signal 99"]


def test_the_supervisor_knows_the_runners_permanent_exit_code():
    from pipeline.runtime.runner import EXIT_START_FAILED, EXIT_START_PERMANENT as RUNNER_CODE

    assert EXIT_START_PERMANENT == RUNNER_CODE == 78 and EXIT_START_FAILED == 1
