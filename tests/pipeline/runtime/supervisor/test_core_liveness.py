"""Liveness with real processes (pipeline/runtime/supervisor/liveness.py under core.py's tick): a
stage whose do_work holds its main thread in a CPU-bound call three times as long as its heartbeat
timeout keeps its pid (it is late, and logged so, not restarted); the same stage SIGSTOPped is
replaced; one that blocks as long without using the CPU (a hang) is replaced. How soon a stopped
process is found is a time: ``make chaos``'s sigstop_10s measures and judges it."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.configtext import BACK_OFF, process
from tests.support.processes import pid_gone
from tests.support.wait import wait_until

TIMEOUT_MS, BEAT_MS, POLL_MS = 500, 100, 10
SUPERVISOR = f"poll_interval_ms = {POLL_MS}\nheartbeat_interval_ms = {BEAT_MS}\n"
BUSY = "tests.support.busy:Busy"


def stage(name: str, mode: str, ms: int, calls: int) -> str:
    return process(name, BUSY, extra=BACK_OFF + f"heartbeat_timeout_ms = {TIMEOUT_MS}\n",
                   params=f'mode = "{mode}", ms = {ms}, calls = {calls}')


def events(pipe, event: str, pid: int) -> list[dict]:
    return [e for e in pipe.log("supervisor") if e["event"] == event and e.get("pid") == pid]


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_stage_busy_past_its_heartbeat_timeout_is_left_alone_and_the_same_stage_stopped_is_replaced(pipe):
    busy_ms, calls = 3 * TIMEOUT_MS, 2
    pipe.write_config(stage("busy", "spin", busy_ms, calls) + process("bystander", "Idle", extra=BACK_OFF),
                      supervisor=SUPERVISOR)
    pid = {p["name"]: p["pid"] for p in pipe.up()["processes"]}["busy"]
    st = wait_until(lambda: (s := pipe.procs())["busy"]["stage"].get("busy_calls") == calls and s, 60, 0.02,
                    f"{calls} busy calls of {busy_ms} ms")
    assert st["busy"]["pid"] == pid and st["busy"]["restarts"] == 0 and st["busy"]["state"] == "RUNNING"
    late = events(pipe, "heartbeat_late", pid)
    assert late and "but busy" in late[0]["why"], "the heartbeat never went past its timeout: the test proves nothing"
    assert events(pipe, "heartbeat_lost", pid) == []

    os.kill(pid, signal.SIGSTOP)
    try:
        now = wait_until(lambda: (s := pipe.procs())["busy"]["pid"] not in (0, pid) and s["busy"]["state"] == "RUNNING"
                         and s, 30, 0.02, "the stopped stage replaced")
        assert now["busy"]["restarts"] == 1 and now["bystander"]["restarts"] == 0
        assert pid_gone(pid)
        lost = events(pipe, "heartbeat_lost", pid)
        assert len(lost) == 1 and lost[0]["why"].startswith("stopped (state T)"), lost
    finally:
        if not pid_gone(pid):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_stage_blocked_past_its_heartbeat_timeout_without_cpu_time_is_replaced(pipe):
    pipe.write_config(stage("stuck", "sleep", 3 * TIMEOUT_MS, 1), supervisor=SUPERVISOR)
    pid = pipe.up()["processes"][0]["pid"]
    now = wait_until(lambda: (s := pipe.procs())["stuck"]["pid"] not in (0, pid) and s, 30, 0.02,
                     "the blocked stage replaced")
    assert now["stuck"]["restarts"] >= 1 and pid_gone(pid)
    lost = events(pipe, "heartbeat_lost", pid)
    assert len(lost) == 1 and lost[0]["why"].startswith("no heartbeat, no CPU time"), lost
