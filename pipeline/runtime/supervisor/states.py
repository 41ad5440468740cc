"""The process state machine as a pure function: ``transition(life, event, policy, now_ns) -> Step``.

States (one ``Lifecycle`` per process)::

    STOPPED --spawned--> STARTING --ready--> RUNNING --exited--> EXITED --policy--> BACKOFF --(elapsed: spawn)--> STARTING
                            |                   |                   |
                            +------exited-------+                   +--flapping--> FATAL (halt trading)
    STARTING --start_failed--> FATAL (halt trading; retrying cannot help)
    STARTING / RUNNING --stop / restart--> STOPPING --exited--> STOPPED (--restart: spawn--> STARTING)

The restart policy (``pipeline.runtime.config.RestartPolicy``, declared per process in the config) is
applied here: the n-th consecutive restart waits ``min(backoff_initial_ms * backoff_multiplier**(n-1),
backoff_max_ms)``; a process up ``stable_after_ms`` before it died starts again at n = 1; a death
after ``max_restarts`` restarts within ``window_ms`` is flapping: FATAL.

Nothing here does I/O or reads a clock: the supervisor (``core.Supervisor``) observes deaths, ready
flags and heartbeats, feeds them in as events with the time, logs every state entered and carries
out the actions (start a process, SIGTERM it, halt trading).
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, replace

from pipeline.runtime.config import RestartPolicy

#: the runner's exit code for a start that failed with ConfigError / StartupError (retrying cannot
#: help); ``pipeline.runtime.runner.EXIT_START_PERMANENT`` (not imported: the runner pulls in numpy)
EXIT_START_PERMANENT = 78


class State(str, enum.Enum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    BACKOFF = "BACKOFF"
    STOPPING = "STOPPING"
    EXITED = "EXITED"
    FATAL = "FATAL"


class Event(str, enum.Enum):
    """What happened to a process (past tense), or what it is told to do (imperative)."""

    SPAWNED = "spawned"  # a new process was started for it
    READY = "ready"  # it reported ready in the process table
    EXITED = "exited"  # it died, or was SIGKILLed (hung, not ready in time, not stopped in time)
    START_FAILED = "start_failed"  # it exited EXIT_START_PERMANENT while STARTING (ConfigError / StartupError)
    BACKOFF_ELAPSED = "backoff_elapsed"  # its back-off delay is over
    STOP = "stop"  # stop it (SIGTERM; SIGKILL after the grace period)
    RESTART = "restart"  # stop it, then start it again; or start it again at once when it is not running


class Action(str, enum.Enum):
    """What the supervisor must do after a transition, in order."""

    SPAWN = "spawn"  # start a new process for it (then feed SPAWNED)
    TERMINATE = "terminate"  # SIGTERM it now; SIGKILL it once stop_grace_ms has passed
    HALT = "halt"  # write CONTROL HALT to the control ring: the process is FATAL


#: states in which a RESTART starts the process again at once (nothing runs to stop first)
IDLE_STATES = frozenset({State.FATAL, State.EXITED, State.BACKOFF, State.STOPPED})


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """The state of one process and the restart history its policy is applied to."""

    state: State = State.STOPPED
    restarts: int = 0  # restarts since the supervisor started
    consecutive: int = 0  # restarts since the process was last stable
    restart_times_ns: tuple[int, ...] = ()  # when each restart within the policy's window was decided
    started_ns: int = 0  # when the latest process was started (0: never)
    backoff_until_ns: int = 0  # BACKOFF: when to start again
    then_start: bool = False  # STOPPING: start again once stopped (a RESTART)


@dataclass(frozen=True, slots=True)
class Entered:
    """A state a process entered, with what its log line says about it."""

    state: State
    why: str = ""  # EXITED / STOPPED / FATAL: the reason
    delay_ms: int = 0  # BACKOFF: the delay before the next start

    def log_fields(self) -> dict:
        """The fields of the state's log line beyond the process, the states and the pid."""
        if self.state is State.BACKOFF:
            return {"delay_ms": self.delay_ms}
        if self.state in (State.EXITED, State.STOPPED, State.FATAL):
            return {"why": self.why}
        return {}


@dataclass(frozen=True, slots=True)
class Step:
    """The outcome of one event: the new lifecycle, the states entered on the way (in order, each
    to be logged; empty when the state did not change) and the actions to carry out, in order."""

    life: Lifecycle
    entered: tuple[Entered, ...] = ()
    actions: tuple[Action, ...] = ()


def transition(life: Lifecycle, event: Event, policy: RestartPolicy, now_ns: int, *, why: str = "",
               down: bool = False) -> Step:
    """Apply ``event`` (observed at ``now_ns``) to ``life`` under ``policy``.

    ``why`` describes an EXITED or START_FAILED event (``"exit code 1"``, ``"killed by SIGKILL"``;
    for START_FAILED the whole reason, ``"start failed: ..."``). ``down``: the supervisor is going
    down, so a process that exits is STOPPED, whatever its state, and not started again. An event
    that does not apply to the state (READY while not STARTING, STOP while not running...) changes
    nothing. Raises nothing.
    """
    state = life.state
    if event is Event.SPAWNED:
        return _enter(replace(life, started_ns=now_ns), State.STARTING)
    if event is Event.READY:
        return _enter(life, State.RUNNING) if state is State.STARTING else Step(life)
    if event is Event.EXITED or event is Event.START_FAILED:
        if state is State.STOPPING or down:
            return _stopped(life, why, down)
        if event is Event.START_FAILED:
            return _enter(life, State.FATAL, actions=(Action.HALT,), why=why)
        return _exited(life, policy, now_ns, why)
    if event is Event.BACKOFF_ELAPSED:
        if state is not State.BACKOFF:
            return Step(life)
        return Step(replace(life, restarts=life.restarts + 1), actions=(Action.SPAWN,))
    if event is Event.STOP or event is Event.RESTART:
        if state is State.STARTING or state is State.RUNNING:
            return _enter(replace(life, then_start=event is Event.RESTART), State.STOPPING, actions=(Action.TERMINATE,))
        if event is Event.RESTART and state in IDLE_STATES:
            return Step(replace(life, consecutive=0, restart_times_ns=(), restarts=life.restarts + 1),
                        actions=(Action.SPAWN,))
        return Step(life)
    raise AssertionError(f"unknown event {event!r}")  # pragma: no cover - Event is closed


def restart_delay_ms(policy: RestartPolicy, consecutive: int) -> float:
    """The back-off before the restart that follows ``consecutive`` restarts since the last stable run."""
    return min(policy.backoff_initial_ms * policy.backoff_multiplier ** consecutive, policy.backoff_max_ms)


def describe_exit(rc: int) -> str:
    """A ``Popen.returncode`` in words: ``"exit code 1"``, ``"killed by SIGKILL"``."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def _enter(life: Lifecycle, state: State, *, actions: tuple[Action, ...] = (), why: str = "") -> Step:
    entered = () if life.state is state else (Entered(state, why),)
    return Step(replace(life, state=state), entered, actions)


def _stopped(life: Lifecycle, why: str, down: bool) -> Step:
    """An exit while stopping (or while the supervisor goes down): STOPPED, and started again when
    a RESTART asked for it (never while going down)."""
    step = _enter(replace(life, then_start=False), State.STOPPED, why=why)
    if life.then_start and not down:
        return replace(step, life=replace(step.life, restarts=life.restarts + 1), actions=(Action.SPAWN,))
    return step


def _exited(life: Lifecycle, policy: RestartPolicy, now_ns: int, why: str) -> Step:
    """A death nobody asked for: EXITED, then BACKOFF under the policy, or FATAL when flapping."""
    consecutive = life.consecutive
    if life.started_ns and now_ns - life.started_ns >= policy.stable_after_ms * 1_000_000:
        consecutive = 0
    window_ns = policy.window_ms * 1_000_000
    times = life.restart_times_ns
    first = 0
    while first < len(times) and now_ns - times[first] > window_ns:
        first += 1
    times = times[first:]
    life = replace(life, consecutive=consecutive, restart_times_ns=times)
    if len(times) >= policy.max_restarts:
        fatal = f"{len(times)} restarts within {policy.window_ms} ms; last: {why}"
        return Step(replace(life, state=State.FATAL), (Entered(State.EXITED, why), Entered(State.FATAL, fatal)),
                    (Action.HALT,))
    delay_ms = restart_delay_ms(policy, consecutive)
    life = replace(life, state=State.BACKOFF, consecutive=consecutive + 1, restart_times_ns=times + (now_ns,),
                   backoff_until_ns=now_ns + int(delay_ms * 1_000_000))
    return Step(life, (Entered(State.EXITED, why), Entered(State.BACKOFF, delay_ms=int(delay_ms))))
