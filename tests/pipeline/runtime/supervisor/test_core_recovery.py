"""Fault recovery with real processes (pipeline/runtime/supervisor/core.py, the restart policy of
states.py): SIGKILL, SIGSTOP (hang) and crash loops."""

from __future__ import annotations

import os
import signal
import statistics
import time

import pytest

from tests.support.agents import count_lines, read_seqs
from tests.support.configtext import BACK_OFF, chain, control, process
from tests.support.processes import pid_gone
from tests.support.shm import shm_entries
from tests.support.wait import wait_until

def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_sigkill_each_process_in_turn_recovers_and_loses_nothing(pipe):
    """SeqSource -> Relay -> SeqSink under a steady flow; 20 SIGKILLs in turn. Each victim is back to
    RUNNING, with one recovery counted (supervisor's recoveries_ms, printed: the 500 ms limit is judged
    by make chaos, sigkill_each in full mode), the others keep their pids, and the sink holds every
    sequence number exactly once."""
    total, rate, kills = 12_000, 2_000, 20
    sink = pipe.tmp / "sink.txt"
    pipe.write_config(chain(total, rate))
    first = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    wait_until(lambda: count_lines(sink) >= 100, 10, what="flow through the chain")

    names = ["src", "relay", "sink"]
    pids = dict(first)
    observed_ms = []  # kill -> status shows a new pid RUNNING (test-side, includes polling)
    killed = {n: 0 for n in names}
    for i in range(kills):
        victim = names[i % 3]
        before = count_lines(sink)
        os.kill(pids[victim], signal.SIGKILL)
        t_kill = time.monotonic()

        def back():
            st = pipe.procs()
            p = st[victim]
            return st if p["state"] == "RUNNING" and p["pid"] not in (0, pids[victim]) else None

        st = wait_until(back, 5, 0.01, f"{victim} RUNNING again after kill {i + 1}")
        observed_ms.append((time.monotonic() - t_kill) * 1000)
        killed[victim] += 1
        assert pid_gone(pids[victim])
        for other in names:
            if other != victim:
                assert st[other]["pid"] == pids[other], f"{other} changed pid when {victim} was killed"
                assert st[other]["state"] == "RUNNING"
        pids[victim] = st[victim]["pid"]
        if before < total:  # the flow goes on through the whole chain before the next kill
            wait_until(lambda: count_lines(sink) > before or count_lines(sink) >= total, 5, 0.005,
                       f"the sink to grow after kill {i + 1}")
    flowing_at_last_kill = count_lines(sink) < total

    wait_until(lambda: count_lines(sink) >= total, 30, 0.05, f"{total} messages in the sink")
    final = pipe.procs()
    seqs = read_seqs(sink)
    assert len(seqs) == total, f"{len(seqs)} lines, expected {total}"
    assert seqs == list(range(total)), "sink output is not exactly 0..N-1 in order"

    recoveries = []
    for n in names:
        assert final[n]["state"] == "RUNNING"
        assert final[n]["restarts"] == killed[n]
        assert len(final[n]["recoveries_ms"]) == killed[n], final[n]
        recoveries += final[n]["recoveries_ms"]
    p50, worst = statistics.median(recoveries), max(recoveries)
    print(f"\n[recovery] {kills} SIGKILLs over {total} msgs at {rate}/s (flow still running at last kill: "
          f"{flowing_at_last_kill}); supervisor recoveries_ms p50={p50:.1f} p90={_pct(recoveries, 0.9):.1f} "
          f"max={worst:.1f}; kill->RUNNING seen by the test p50={statistics.median(observed_ms):.1f} "
          f"max={max(observed_ms):.1f} ms; per process "
          + ", ".join(f"{n}={final[n]['recoveries_ms']}" for n in names))
    sink_log = pipe.log("sink")
    assert not [e for e in sink_log if e["event"] == "gap"], "the sink saw a gap"


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_sigstopped_process_detected_by_heartbeat_and_replaced(pipe):
    timeout_ms, poll_ms, beat_ms = 500, 10, 100
    pipe.write_config(process("hung", "Idle", extra=BACK_OFF + f"heartbeat_timeout_ms = {timeout_ms}\n")
                      + process("bystander", "Idle", extra=BACK_OFF + f"heartbeat_timeout_ms = {timeout_ms}\n"),
                      supervisor=f"poll_interval_ms = {poll_ms}\nheartbeat_interval_ms = {beat_ms}\n")
    st = {p["name"]: p for p in pipe.up()["processes"]}
    old, other = st["hung"]["pid"], st["bystander"]["pid"]
    t_stop_ns = time.monotonic_ns()
    os.kill(old, signal.SIGSTOP)
    try:
        def replaced():
            p = pipe.procs()
            return p if p["hung"]["state"] == "RUNNING" and p["hung"]["pid"] not in (0, old) else None

        now = wait_until(replaced, 10, 0.01, "the hung process to be replaced")
        assert now["hung"]["restarts"] == 1
        assert now["bystander"]["pid"] == other and now["bystander"]["restarts"] == 0
        assert pid_gone(old), "the hung process was not killed"
        lost = [e for e in pipe.log("supervisor") if e["event"] == "heartbeat_lost" and e["pid"] == old]
        assert len(lost) == 1, lost
        detected_after_ms = (lost[0]["mono_ns"] - t_stop_ns) / 1e6
        print(f"\n[heartbeat] SIGSTOP -> heartbeat_lost after {detected_after_ms:.0f} ms "
              f"(age {lost[0]['age_ms']} ms, timeout {timeout_ms} ms); recovery {now['hung']['recoveries_ms']} ms")
        # not before the timeout: the last beat came at most one heartbeat interval before the SIGSTOP
        # (how soon after it is a time, measured and reported by make chaos's sigstop_10s, not judged here)
        assert detected_after_ms >= timeout_ms - beat_ms and lost[0]["age_ms"] >= timeout_ms
        assert len(now["hung"]["recoveries_ms"]) == 1
    finally:
        if not pid_gone(old):
            os.kill(old, signal.SIGCONT)
            os.kill(old, signal.SIGKILL)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_crash_loop_goes_fatal_and_halts_trading(pipe):
    """A process that fails every restart goes FATAL after max_restarts; the supervisor writes
    HALT STAGE_FATAL to the control ring; the others keep running with their pids."""
    marker = pipe.tmp / "crasher.started"
    ctl_out = pipe.tmp / "control.txt"
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF)
                      + process("crasher", "CrashAtRestart", params=f'marker = "{marker}"',
                                extra="restart = { max_restarts = 3, backoff_initial_ms = 10, backoff_max_ms = 40 }\n"),
                      supervisor='control_ring = "control"\n')
    first = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    assert pipe.status()["halted"] is False
    os.kill(first["crasher"], signal.SIGKILL)  # from now on every start of it fails

    def crasher_fatal():
        st = pipe.status()
        return st if {p["name"]: p for p in st["processes"]}["crasher"]["state"] == "FATAL" else None

    fatal = wait_until(crasher_fatal, 15, 0.02, "the crasher to go FATAL")
    procs = {p["name"]: p for p in fatal["processes"]}
    assert fatal["halted"] is True
    assert procs["crasher"]["restarts"] == 3
    assert procs["crasher"]["pid"] == 0
    assert "deliberate start failure" in procs["crasher"]["last_error"] or "exit code 1" in procs["crasher"]["last_error"]
    for n in ("ctl", "bystander"):
        assert procs[n]["state"] == "RUNNING" and procs[n]["pid"] == first[n] and procs[n]["restarts"] == 0
    wait_until(lambda: ctl_out.exists() and ctl_out.read_text() == "HALT STAGE_FATAL\n", 5, 0.02,
               "HALT STAGE_FATAL at the ControlSink")
    starts = [e for e in pipe.log("crasher") if e["event"] == "start_failed"]
    assert len(starts) == 3  # the kill, then 3 restarts that fail: the 4th death within the window is FATAL
    assert "deliberate start failure" in starts[0]["error"]
    sup_log = pipe.log("supervisor")
    assert any(e["event"] == "control_sent" and e["cmd"] == "HALT" and e["reason"] == "STAGE_FATAL" for e in sup_log)
    # still FATAL and halted a little later, the others untouched
    time.sleep(0.2)
    later = pipe.procs()
    assert later["crasher"]["state"] == "FATAL"
    assert later["ctl"]["pid"] == first["ctl"] and later["bystander"]["pid"] == first["bystander"]
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_crash_at_initial_start_fails_up_and_cleans_up(pipe):
    """CrashAtStart during `up`: it goes FATAL after max_restarts, the CONTROL HALT is written, and
    `up` itself gives up (exit 2, naming the process) and removes everything it created."""
    pipe.write_config(control() + process("crasher", "CrashAtStart",
                                          extra="restart = { max_restarts = 3, backoff_initial_ms = 10, backoff_max_ms = 40 }\n"),
                      supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "30", "--status-every", "0")
    assert r.returncode == 2, r
    assert "process crasher failed to start" in r.stderr, r.stderr
    assert len([e for e in pipe.log("crasher") if e["event"] == "start_failed"]) == 4
    assert any(e["event"] == "control_sent" and e["reason"] == "STAGE_FATAL" for e in pipe.log("supervisor"))
    assert not (pipe.run_dir / "supervisor.pid").exists()
    assert not (pipe.run_dir / "control.sock").exists()
    assert shm_entries(pipe.prefix) == []
