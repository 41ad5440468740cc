"""Whether a process whose heartbeat is late is hung, or busy: the supervisor's liveness judgement.

A stage's runner beats from its duty cycle (the process table, every ``heartbeat_interval_ms``). A
duty cycle can beat late without being hung: a long call in ``do_work``, a thread of the stage
holding the GIL (the LLM's generation), a box so loaded that the process waits for a core. Killing
it then restarts a healthy stage. So the heartbeat is not judged alone: once a process's beat is
older than half its ``heartbeat_timeout_ms``, every tick also reads its threads from ``/proc``
(``read_threads``: each thread's state, the main thread's CPU time), and a heartbeat older than
``heartbeat_timeout_ms`` is judged so:

- the process is stopped (SIGSTOP, or a tracer: its main thread in state T / t): hung, at once;
- its heartbeat is older than ``busy_timeout_ms``: hung, whatever it does (an endless loop);
- it showed a sign of life within the last ``heartbeat_timeout_ms``: its main thread (the duty
  cycle's) used CPU time, or a thread was running or runnable (R: it has work and waits for a
  core) or in an uninterruptible wait (D: the kernel works for it): late, left alone (logged once
  per late spell as ``heartbeat_late``);
- otherwise (asleep, no CPU time, for ``heartbeat_timeout_ms``: a deadlock, a wait with no
  timeout): hung.

A process that is gone or a zombie is left to ``waitpid``. The price: a main thread that deadlocks
while another thread of the process keeps running is only found at ``busy_timeout_ms``.

Why the supervisor reads /proc rather than each stage beating from a thread of its own: such a
thread needs the GIL, which the stage's own work can hold (the very case); it would add a thread to
every busy-spinning stage (which then hands the GIL over on every idle pass); and from outside the
process a SIGSTOP looks the same as before (no beat, state T).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

OK, LATE, HUNG = "ok", "late", "hung"
_ALIVE_STATES = frozenset("RD")


@dataclass(frozen=True)
class Threads:
    """What ``/proc`` shows of a process: one state letter a thread (``states[0]`` the main
    thread's) and the main thread's CPU time (user + system, clock ticks)."""

    states: str
    main_cpu_ticks: int


def read_threads(pid: int, proc: str = "/proc") -> Threads | None:
    """The threads of ``pid`` from ``<proc>/<pid>/task/*/stat``; None when the process is gone (or its
    main thread cannot be read)."""
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return None
    main, others = None, []
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/stat", "rb") as f:
                text = f.read()
        except OSError:  # a thread that has just ended
            continue
        fields = text[text.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        state = fields[0][:1].decode("ascii", "replace")
        if tid == str(pid):
            main = (state, int(fields[11]) + int(fields[12]))  # utime, stime: fields 14 and 15 of stat(5)
        else:
            others.append(state)
    if main is None:
        return None
    return Threads(main[0] + "".join(others), main[1])


@dataclass
class _Watch:
    beat_ns: int  # the beat this watch is about
    cpu_ticks: int  # the main thread's CPU time at the last look
    life_ns: int  # the last sign of life: the beat, then CPU time used or a thread running seen
    late_said: bool = False


class Liveness:
    """The judgement of the module docstring, one process at a time (``judge``); ``read`` is
    ``read_threads`` (injected in tests)."""

    def __init__(self, read=read_threads):
        self.read = read
        self._watch: dict[int, _Watch] = {}

    def forget(self, pid: int) -> None:
        self._watch.pop(pid, None)

    def judge(self, pid: int, beat_ns: int, now_ns: int, timeout_ns: int, busy_timeout_ns: int) -> tuple[str, str]:
        """(``OK`` / ``LATE`` / ``HUNG``, why) for process ``pid`` whose last heartbeat was at
        ``beat_ns``. ``LATE`` is returned with its reason once per late spell, then ("late", "")."""
        age = now_ns - beat_ns
        if age <= timeout_ns // 2:
            self._watch.pop(pid, None)
            return OK, ""
        t = self.read(pid)
        if t is None or t.states[0] in "ZX":
            return OK, ""  # gone: waitpid reports it
        w = self._watch.get(pid)
        if w is None or w.beat_ns != beat_ns:
            w = self._watch[pid] = _Watch(beat_ns, t.main_cpu_ticks, beat_ns)
        elif t.main_cpu_ticks != w.cpu_ticks:
            w.cpu_ticks, w.life_ns = t.main_cpu_ticks, now_ns
        running = [s for s in t.states if s in _ALIVE_STATES]
        if running:
            w.life_ns = now_ns
        if age <= timeout_ns:
            return OK, ""
        age_ms = age // 1_000_000
        if t.states[0] in "Tt":
            return HUNG, f"stopped (state {t.states[0]}), no heartbeat for {age_ms} ms"
        if age > busy_timeout_ns:
            return HUNG, f"no heartbeat for {age_ms} ms, over busy_timeout_ms though it runs"
        if now_ns - w.life_ns > timeout_ns:
            return HUNG, f"no heartbeat, no CPU time and no thread running for {age_ms} ms"
        if w.late_said:
            return LATE, ""
        w.late_said = True
        return LATE, (f"no heartbeat for {age_ms} ms, but busy: threads {t.states} "
                      f"({len(running)} running or in the kernel), main thread CPU {t.main_cpu_ticks} ticks")
