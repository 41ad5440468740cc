"""The runner: SIGTERM means a clean exit 0 (which the supervisor, not having asked for it, treats
as a death and restarts); every log line is a JSON object with ts, mono_ns, proc, level, event."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time

import pytest

from tests.support.configtext import BACK_OFF, process, ring
from tests.support.processes import pid_gone, read_log
from tests.support.wait import wait_until

LEVELS = {"debug", "info", "warning", "error"}


def _check_lines(lines: list[dict], proc: str) -> None:
    assert lines, f"{proc}: empty log"
    last = 0
    for doc in lines:
        assert {"ts", "mono_ns", "proc", "level", "event"} <= doc.keys(), doc
        assert doc["proc"] == proc, doc
        assert doc["level"] in LEVELS, doc
        assert isinstance(doc["event"], str) and doc["event"], doc
        ts = dt.datetime.fromisoformat(doc["ts"])
        assert ts.utcoffset() == dt.timedelta(0), doc
        assert isinstance(doc["mono_ns"], int) and doc["mono_ns"] >= last, doc
        last = doc["mono_ns"]


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_sigterm_makes_a_stage_exit_0_and_the_supervisor_restarts_it(pipe):
    pipe.write_config(process("idle", "Idle", extra=BACK_OFF) + process("other", "Idle", extra=BACK_OFF))
    first = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    old = first["idle"]
    os.kill(old, signal.SIGTERM)

    def restarted():
        p = pipe.procs()
        return p if p["idle"]["state"] == "RUNNING" and p["idle"]["pid"] not in (0, old) else None

    now = wait_until(restarted, 10, 0.01, "the SIGTERMed stage to be restarted")
    assert now["idle"]["restarts"] == 1
    assert now["other"]["pid"] == first["other"] and now["other"]["restarts"] == 0
    assert pid_gone(old)

    # the runner stopped cleanly: 'ready' (old pid) ... 'stopped' ... 'ready' (new pid)
    events = pipe.log("idle")
    i_old = next(i for i, e in enumerate(events) if e["event"] == "ready" and e["pid"] == old)
    i_new = next(i for i, e in enumerate(events) if e["event"] == "ready" and e["pid"] == now["idle"]["pid"])
    between = [e["event"] for e in events[i_old + 1 : i_new]]
    assert "stopped" in between and "agent_error" not in between, between
    # the supervisor saw exit code 0 from a process it had not asked to stop: EXITED, then a restart
    trans = [(e["frm"], e["to"], e.get("why")) for e in pipe.log("supervisor") if e["event"] == "state" and e["pid"] == old]
    assert ("RUNNING", "EXITED", "exit code 0") in trans, trans
    assert trans[-1][:2] == ("EXITED", "BACKOFF"), trans
    assert pipe.down() == 0

    for proc in ("idle", "other", "supervisor"):
        _check_lines(read_log(pipe.log_dir / f"{proc}.log"), proc)
    assert pipe.log("idle")[-1]["event"] == "stopped"


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_supervisor_state_events_name_the_process(pipe):
    """Each supervisor 'state' line names the process that changed state (field ``stage``; ``proc``
    is the process that wrote the line, here the supervisor)."""
    pipe.write_config(process("alpha", "Idle", extra=BACK_OFF) + process("beta", "Idle", extra=BACK_OFF))
    pipe.up()
    assert pipe.down() == 0
    states = [e for e in pipe.log("supervisor") if e["event"] == "state"]
    assert states
    named = {v for e in states for k, v in e.items() if k != "proc" and v in ("alpha", "beta")}
    assert named == {"alpha", "beta"}, f"no field of the 'state' events names the process: {states[0]}"


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_sigterm_stops_a_stage_blocked_on_a_full_backpressure_ring(pipe):
    """A producer waiting for room in a full ``backpressure`` ring keeps its heartbeat going (held
    back by its consumer is not hung: the supervisor leaves it alone) and stops promptly on SIGTERM."""
    pipe.write_config(ring("a", capacity=64)
                      + process("src", "SeqSource", outputs=["a"], params="rate_per_s = 100000, total = 1000000",
                                extra=BACK_OFF + "heartbeat_timeout_ms = 300\n")
                      + process("stalled", "Idle", inputs=["a"], extra=BACK_OFF),
                      supervisor="stop_grace_ms = 500\n")
    first = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    wait_until(lambda: next(r for r in pipe.status()["rings"] if r["name"] == "a")["depth"] == 64, 5, 0.02,
               "ring a to fill up")
    time.sleep(1.0)  # over three heartbeat timeouts spent blocked on the full ring
    src = next(p for p in pipe.status()["processes"] if p["name"] == "src")
    assert (src["pid"], src["restarts"], src["state"]) == (first["src"], 0, "RUNNING"), "a backpressured producer was taken for hung"
    os.kill(first["src"], signal.SIGTERM)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not pid_gone(first["src"]):
        time.sleep(0.02)
    assert pid_gone(first["src"]), "the source blocked on the full ring ignored SIGTERM for 2 s"


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_keep_warm_runs_while_idle_whatever_the_wait_and_a_failing_one_is_dropped(pipe):
    """keep_warm_us: a stage's keep_warm is called while it idles, at most that often, whether it
    busy-spins or parks (a blocking stage is woken for it); an agent without keep_warm has the setting
    ignored with a logged reason; a keep_warm that raises is counted as an error, logged, and never
    called again, and the stage keeps running."""
    spin = 'wait = "busy-spin"\nkeep_warm_us = 20000\n'
    pipe.write_config(process("warm", "Warmable", extra=spin)
                      + process("parked", "Warmable", extra='wait = "blocking"\nkeep_warm_us = 20000\n')
                      + process("plain", "ThreadedIdle", extra='keep_warm_us = 20000\n')
                      + process("broken", "Warmable", extra=spin, params="fail = true"))
    pipe.up()
    t0 = time.monotonic()
    calls = wait_until(lambda: all(pipe.procs()[n]["stage"].get("warm", 0) >= 10 for n in ("warm", "parked"))
                       and [pipe.procs()[n]["stage"]["warm"] for n in ("warm", "parked")],
                       20, 0.05, "keep_warm calls of the busy-spin and the blocking stage")
    elapsed = time.monotonic() - t0
    time.sleep(0.3)  # more heartbeats: the counters of the other two are published by now
    procs = pipe.procs()
    for n in calls:  # at most one per keep_warm_us (20 ms) since it started
        assert n <= (elapsed + 1.0) / 0.020 + 1
    assert procs["broken"]["stage"]["warm"] == 1 and procs["broken"]["state"] == "RUNNING"
    assert procs["broken"]["errors"] == 1
    ignored = [e for e in pipe.log("plain") if e["event"] == "keep_warm_ignored"]
    assert ignored and ignored[0]["why"] == "the agent has no keep_warm"
    assert not [e for e in pipe.log("parked") if e["event"] == "keep_warm_ignored"]
    assert [e["error"] for e in pipe.log("broken") if e["event"] == "keep_warm_disabled"] == ["RuntimeError: warm-up broke"]
    assert pipe.down() == 0


def _nice_of(pid: int, tid: int | None = None) -> int:
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    with open(path) as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_nice_lowers_the_whole_process_priority_threads_included(pipe):
    pipe.write_config(process("slow", "ThreadedIdle", extra=BACK_OFF + "nice = 7\n")
                      + process("fast", "ThreadedIdle", extra=BACK_OFF))
    pipe.up()
    procs = wait_until(lambda: (p := pipe.procs()) and all(p[n]["stage"].get("thread_tid") for n in p) and p,
                       10, 0.05, "the agents' threads")
    slow, fast = procs["slow"], procs["fast"]
    assert _nice_of(slow["pid"]) == 7 and _nice_of(slow["pid"], slow["stage"]["thread_tid"]) == 7
    assert _nice_of(fast["pid"]) == 0 and _nice_of(fast["pid"], fast["stage"]["thread_tid"]) == 0
    ready = [e for e in pipe.log("slow") if e["event"] == "ready"]
    assert ready and ready[-1]["nice"] == 7
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_sched_fifo_puts_the_whole_process_under_sched_fifo_at_its_priority_threads_included(pipe):
    pipe.write_config(process("rt", "ThreadedIdle", extra=BACK_OFF + 'sched = "fifo"\nsched_priority = 7\n')
                      + process("plain", "ThreadedIdle", extra=BACK_OFF))
    pipe.up()
    procs = wait_until(lambda: (p := pipe.procs()) and all(p[n]["stage"].get("thread_tid") for n in p) and p,
                       10, 0.05, "the agents' threads")
    rt, plain = procs["rt"], procs["plain"]
    for tid in (rt["pid"], rt["stage"]["thread_tid"]):  # the thread made in on_start inherits it
        assert os.sched_getscheduler(tid) == os.SCHED_FIFO and os.sched_getparam(tid).sched_priority == 7
    for tid in (plain["pid"], plain["stage"]["thread_tid"]):
        assert os.sched_getscheduler(tid) == os.SCHED_OTHER and os.sched_getparam(tid).sched_priority == 0
    ready = [e for e in pipe.log("rt") if e["event"] == "ready"]
    assert ready and (ready[-1]["sched"], ready[-1]["sched_priority"]) == ("fifo", 7)
    assert pipe.down() == 0


def _fifo_proc(priority: int = 7):
    from pipeline.runtime.config import parse_config

    return parse_config(process("rt", "Idle", extra=f'sched = "fifo"\nsched_priority = {priority}\n')).process("rt")


def test_a_refused_sched_fifo_is_a_startup_error_naming_the_process_never_a_fallback():
    from pipeline.runtime.errors import StartupError
    from pipeline.runtime.runner import apply_sched

    calls = []

    def refuse(tid, policy, param):
        calls.append((tid, policy, param.sched_priority))
        raise PermissionError(1, "Operation not permitted")

    with pytest.raises(StartupError) as info:
        apply_sched(_fifo_proc(), setscheduler=refuse)
    msg = str(info.value)
    assert msg.startswith("rt: ") and 'sched = "fifo" (sched_priority 7) refused: Operation not permitted' in msg
    assert "CAP_SYS_NICE" in msg and calls[0][1:] == (os.SCHED_FIFO, 7)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this process was left as it was


def test_without_cap_sys_nice_the_kernel_refuses_and_the_runner_says_so():
    """A real refusal: a child that is not root, with RLIMIT_RTPRIO 0, asks for SCHED_FIFO."""
    import resource

    from pipeline.runtime.errors import StartupError
    from pipeline.runtime.runner import apply_sched

    proc = _fifo_proc()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return into pytest
        code = 3
        try:
            os.close(r)
            resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)  # nobody: no CAP_SYS_NICE
            try:
                apply_sched(proc)
                os.write(w, b"accepted")
            except StartupError as exc:
                os.write(w, str(exc).encode()[:4000])
                code = 0 if os.sched_getscheduler(0) == os.SCHED_OTHER else 4
        finally:
            os._exit(code)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            said = f.read().decode()
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said
    assert said.startswith('rt: sched = "fifo" (sched_priority 7) refused: Operation not permitted'), said


class _Parks:
    """An agent that knows how to park (as the feed and the venue do)."""

    def wait_for_work(self, timeout_ns: int) -> bool:
        return False


def test_busy_spin_idles_with_the_spin_that_yields_the_gil_even_for_an_agent_that_can_park():
    from pipeline.runtime.runner import choose_wait
    from ringbuf.idle import YieldSpin

    for agent in (object(), _Parks()):
        park, idle = choose_wait("busy-spin", agent, [], 100_000_000)
        assert park is None and type(idle) is YieldSpin
    park, idle = choose_wait("blocking", _Parks(), [], 100_000_000)  # any other wait: the agent's own park
    assert idle is None and park is not None
