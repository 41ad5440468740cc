"""The liveness judgement (pipeline/runtime/supervisor/liveness.py) on readings given to it, and
``read_threads`` on a real process: a stopped process is hung at the heartbeat timeout, an idle
one (no CPU time, no thread running) too, a busy one is late but left alone up to busy_timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from pipeline.runtime.supervisor.liveness import HUNG, LATE, OK, Liveness, Threads, read_threads
from tests.support.wait import wait_until

MS = 1_000_000
TIMEOUT, BUSY = 2_000 * MS, 10_000 * MS


class Readings:
    """A stand-in for ``read_threads``: returns ``now`` (set by the test)."""

    def __init__(self, threads: Threads | None):
        self.now = threads

    def __call__(self, pid):
        return self.now


def judge_over(live: Liveness, readings: Readings, script, beat_ns: int = 0):
    """[(t_ms, verdict)] for each (t_ms, Threads) of ``script``, judged at t_ms after the beat."""
    out = []
    for t_ms, threads in script:
        readings.now = threads
        out.append((t_ms, live.judge(4242, beat_ns, beat_ns + t_ms * MS, TIMEOUT, BUSY)[0]))
    return out


def ticks(states: str, cpu: int) -> Threads:
    return Threads(states, cpu)


@pytest.mark.parametrize("what, script, expected", [
    ("stopped: hung at the timeout, not before",
     [(100, ticks("S", 5)), (1_100, ticks("T", 5)), (1_990, ticks("T", 5)), (2_010, ticks("T", 5))],
     [OK, OK, OK, HUNG]),
    ("asleep with no CPU time (a deadlock): hung at the timeout",
     [(1_100, ticks("SS", 5)), (1_500, ticks("SS", 5)), (2_010, ticks("SS", 5))], [OK, OK, HUNG]),
    ("the main thread running: late, not hung, until busy_timeout",
     [(1_100, ticks("R", 5)), (2_010, ticks("R", 90)), (6_000, ticks("R", 500)), (9_990, ticks("R", 900)),
      (10_010, ticks("R", 910))], [OK, LATE, LATE, LATE, HUNG]),
    ("another thread runnable while the main one waits (the GIL held by a generation): late",
     [(1_100, ticks("SR", 5)), (2_500, ticks("SR", 5)), (3_000, ticks("SD", 5))], [OK, LATE, LATE]),
    ("the main thread's CPU time growing though it is seen asleep: late",
     [(1_100, ticks("S", 5)), (2_100, ticks("S", 7)), (3_000, ticks("S", 9))], [OK, LATE, LATE]),
    ("busy, then asleep with no CPU time: hung a timeout after the last sign of life",
     [(1_100, ticks("R", 5)), (2_100, ticks("S", 60)), (3_000, ticks("S", 60)), (4_000, ticks("S", 60)),
      (4_200, ticks("S", 60))], [OK, LATE, LATE, LATE, HUNG]),
    ("busy, then stopped: hung at once",
     [(1_100, ticks("R", 5)), (2_100, ticks("R", 60)), (2_200, ticks("T", 61))], [OK, LATE, HUNG]),
    ("gone or a zombie: left to waitpid", [(5_000, None), (5_100, ticks("Z", 5))], [OK, OK]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_late_heartbeat_is_judged_by_what_the_process_does(what, script, expected):
    readings = Readings(None)
    assert [v for _, v in judge_over(Liveness(readings), readings, script)] == expected


def test_a_fresh_heartbeat_is_ok_without_reading_proc_and_resets_the_watch():
    calls = []

    def read(pid):
        calls.append(pid)
        return Threads("R", 1)

    live = Liveness(read)
    assert live.judge(1, 0, 900 * MS, TIMEOUT, BUSY) == (OK, "")
    assert calls == []
    assert live.judge(1, 0, 2_100 * MS, TIMEOUT, BUSY)[0] == LATE
    assert live.judge(1, 2_000 * MS, 2_200 * MS, TIMEOUT, BUSY) == (OK, "")  # a new beat
    # the next late spell starts from that beat: said again, once
    assert live.judge(1, 2_000 * MS, 4_100 * MS, TIMEOUT, BUSY)[1].startswith("no heartbeat for 2100 ms, but busy")
    assert live.judge(1, 2_000 * MS, 4_200 * MS, TIMEOUT, BUSY) == (LATE, "")


def test_busy_timeout_at_the_heartbeat_timeout_judges_by_the_beat_alone():
    readings = Readings(ticks("R", 5))
    live = Liveness(readings)
    assert live.judge(1, 0, 1_500 * MS, TIMEOUT, TIMEOUT)[0] == OK
    assert live.judge(1, 0, 2_001 * MS, TIMEOUT, TIMEOUT)[0] == HUNG


@pytest.mark.multiprocess
def test_read_threads_sees_a_busy_thread_running_and_a_stopped_process():
    code = ("import threading, time\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "print('go', flush=True)\n"
            "while True: pass\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"go\n"
        first = wait_until(lambda: (t := read_threads(p.pid)) and len(t.states) == 2 and t, 10, 0.01, "two threads")
        later = wait_until(lambda: (t := read_threads(p.pid)).main_cpu_ticks > first.main_cpu_ticks and t, 10, 0.01,
                           "the main thread's CPU time to grow")
        assert later.states[1] == "S"
        os.kill(p.pid, signal.SIGSTOP)
        wait_until(lambda: read_threads(p.pid).states == "TT", 10, 0.01, "both threads stopped")
    finally:
        p.kill()
        p.wait()
    assert read_threads(p.pid) is None
