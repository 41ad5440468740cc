"""`up` start-up: the run lock (two `up` at once: one runs, the other fails fast naming it), start-up
errors that retrying cannot fix (fail at once, the stage and the cause on the console), files that
cannot be created (one line, no traceback), the control endpoint (ipc:// only), and the run epoch.

Real supervisor processes against a private config (own shm prefix, run and log dirs under
tmp_path); the ``pipe`` fixture kills and removes everything even when a test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from pipeline.runtime.config import Config, SupervisorConfig, parse_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ConfigError, ControlError, StartupError
from pipeline.runtime.runepoch import EPOCH_FILE, read_run_epoch
from pipeline.runtime.supervisor import EXIT_START_PERMANENT, RunLock, RunLockHeld
from tests.pipeline._support import (
    BACK_OFF, REPO_ROOT, child_env, control, pid_gone, process, ring, shm_entries, wait_until,
)

FAST_MODEL = REPO_ROOT / "models" / "generated" / "fast.onnx"
PAPER_INSTRUMENT = '[[instruments]]\nid = 1\nsymbol = "BTCUSDT"\nvenue = "paper"\ntick_size = 0.1\nlot_size = 0.0001\n\n'


def _expected_entries(prefix: str, rings: list[str]) -> list[str]:
    return sorted([f"{prefix}.procs"] + [f"{prefix}.{r}" for r in rings] + [f"sem.{prefix}.{r}.wake" for r in rings])


def _assert_nothing_left(pipe) -> None:
    assert shm_entries(pipe.prefix) == []
    for name in ("supervisor.pid", "control.sock", EPOCH_FILE):
        assert not (pipe.run_dir / name).exists(), name


def _fast_stage(model_path) -> str:
    """The real fast-path stage (procs.fast) on the CPU, reading ``feat``, writing ``sig_risk``."""
    return (ring("feat", payload=1024, capacity=64) + ring("sig_risk", payload=64, capacity=64)
            + process("fast", "procs.fast:FastAgent", inputs=["feat"], outputs=["sig_risk"], extra=BACK_OFF,
                      params=f'model_path = "{model_path}", providers = "cpu"'))


def test_the_supervisor_knows_the_runners_permanent_exit_code():
    from pipeline.runtime.runner import EXIT_START_FAILED, EXIT_START_PERMANENT as RUNNER_CODE

    assert EXIT_START_PERMANENT == RUNNER_CODE == 78 and EXIT_START_FAILED == 1


# ------------------------------------------------------------------------------------------ item 7: the run lock
def test_run_lock_is_exclusive_and_names_the_holder(tmp_path):
    a, b = RunLock(tmp_path / "run"), RunLock(tmp_path / "run")
    a.acquire()
    assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(a.path).st_mode) == 0o600
    assert a.path.read_text() == f"{os.getpid()}\n"
    with pytest.raises(RunLockHeld, match=rf"a supervisor \(pid {os.getpid()}\) is already running") as ei:
        b.acquire()
    assert ei.value.pid == os.getpid() and isinstance(ei.value, StartupError)
    assert not b.held
    assert a.release(unlink=True) is True
    assert not a.path.exists()
    b.acquire()  # free again
    assert b.held
    b.release()
    assert b.path.exists()  # without unlink the pid file stays


def test_run_lock_holder_found_when_the_pid_file_is_still_empty(tmp_path):
    """The holder locked but has not written its pid yet: the pid comes from /proc/locks."""
    a = RunLock(tmp_path)
    a.acquire(write_pid=False)
    t0 = time.monotonic()
    with pytest.raises(RunLockHeld) as ei:
        RunLock(tmp_path).acquire()
    assert ei.value.pid == os.getpid()
    assert time.monotonic() - t0 < 3
    a.release()


def test_run_lock_pid_file_that_cannot_be_written_is_one_clear_error(tmp_path, monkeypatch):
    import pipeline.runtime.supervisor as S

    def full(fd, data, offset):
        raise OSError(28, os.strerror(28))

    monkeypatch.setattr(S.os, "pwrite", full)
    lock = RunLock(tmp_path)
    with pytest.raises(StartupError, match=r"cannot write the pid file .*supervisor\.pid: No space left on device"):
        lock.acquire()
    monkeypatch.undo()
    assert not lock.held and not lock.path.exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_refused_at_once_while_another_process_holds_the_run_lock(pipe):
    """A holder that has not written its pid yet (the instant after it locked): the old pid-file
    check let a second `up` through; the lock stops it before it touches anything."""
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF), supervisor='control_ring = "control"\n')
    lock = RunLock(pipe.run_dir)
    lock.acquire(write_pid=False)
    try:
        t0 = time.monotonic()
        r = pipe.cli("up", "--run-for", "20", "--status-every", "0", timeout=30)
        took = time.monotonic() - t0
        assert r.returncode == 2, r
        assert f"error: a supervisor (pid {os.getpid()}) is already running for {pipe.run_dir}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert took < 10, took
        assert shm_entries(pipe.prefix) == []
        assert not (pipe.run_dir / "control.sock").exists() and not (pipe.run_dir / EPOCH_FILE).exists()
        assert lock.path.read_text() == ""  # the holder's file untouched
    finally:
        lock.release()


#: `python -c SYNC_UP T CONFIG`: import everything `up` needs, wait for the wall-clock instant T, run `up`
SYNC_UP = """
import sys, time
import pipeline.__main__ as cli
t = float(sys.argv[1])
while time.time() < t:
    time.sleep(0.0002)
sys.exit(cli.main(["--config", sys.argv[2], "up", "--run-for", "60", "--status-every", "0"]))
"""


def _start_at(pipe, instant: float) -> subprocess.Popen:
    """An `up` of the pipe's config that starts at ``instant`` (time.time()), registered with the
    pipe (its output in supervisor-N.out, killed by the cleanup: its argv holds the config path)."""
    out = open(pipe.tmp / f"supervisor-{len(pipe.supervisors)}.out", "ab")
    try:
        sup = subprocess.Popen([sys.executable, "-c", SYNC_UP, repr(instant), str(pipe.cfg_path)], cwd=REPO_ROOT,
                               env=child_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()
    pipe.supervisors.append(sup)
    return sup


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_three_up_at_the_same_instant_one_runs_the_others_fail_fast_naming_it(pipe):
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF), supervisor='control_ring = "control"\n')
    instant = time.time() + 5  # every one has imported its code by then
    sups = [_start_at(pipe, instant) for _ in range(3)]

    def two_exited():
        done = [s for s in sups if s.poll() is not None]
        return done if len(done) >= 2 else None

    done = wait_until(two_exited, instant - time.time() + 15, 0.01, "two of the three `up` to give up")
    took = time.time() - instant
    assert len(done) == 2, [s.returncode for s in sups]
    (winner,) = [s for s in sups if s not in done]
    for loser in done:
        out = pipe.sup_output(loser)
        assert loser.returncode == 2, out
        assert out.strip() == (f"error: a supervisor (pid {winner.pid}) is already running for {pipe.run_dir} "
                               f"(it holds the lock on {pipe.run_dir / 'supervisor.pid'}); `make down` first"), out
    assert took < 5, took  # at once: no 30 s wait, no crash

    # the winner is unharmed: it comes up, keeps its stages, owns every resource
    pipe.sup = winner
    st = wait_until(lambda: (s := pipe.try_status()) and all(p["state"] == "RUNNING" for p in s["processes"]) and s,
                    30, 0.05, "the winner's stages RUNNING")
    assert st["supervisor_pid"] == winner.pid
    first = {p["name"]: p["pid"] for p in st["processes"]}
    time.sleep(0.5)
    assert pipe.pids() == first and all(p["restarts"] == 0 for p in pipe.status()["processes"])
    assert winner.poll() is None
    assert int((pipe.run_dir / "supervisor.pid").read_text()) == winner.pid
    assert shm_entries(pipe.prefix) == _expected_entries(pipe.prefix, ["control"])
    assert stat.S_IMODE(os.stat(pipe.run_dir / "control.sock").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(pipe.run_dir).st_mode) == 0o700
    assert not [e for e in pipe.log("supervisor") if e["event"] == "stale_run_cleaned"]
    assert pipe.down() == 0
    _assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_down_without_an_answer_touches_nothing_while_a_live_process_holds_the_lock(pipe):
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    lock = RunLock(pipe.run_dir)
    lock.acquire()  # a supervisor that does not answer (hung), as far as `down` can tell
    try:
        r = pipe.cli("down")
        assert r.returncode == 1, r
        assert f"a supervisor (pid {os.getpid()}) holds the run lock" in r.stderr and "nothing was cleaned" in r.stderr, r
        assert lock.path.read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()
    r = pipe.cli("down")  # the lock free: a killed supervisor's leftovers are cleaned, pid file among them
    assert r.returncode == 0 and "no supervisor running; cleaned:" in r.stdout, r
    assert str(lock.path) in r.stdout
    assert not lock.path.exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_down_during_start_up_is_answered_and_stops_the_start(pipe):
    """A stage stuck in back-off while `up` waits for it: `down` reaches the supervisor (the old one
    did not answer during start-up, so `down` "cleaned" a live run under it)."""
    pipe.write_config(control() + process(
        "crasher", "CrashAtStart",
        extra="ready_timeout_ms = 20000\nrestart = { backoff_initial_ms = 60000, backoff_max_ms = 60000 }\n"),
        supervisor='control_ring = "control"\n')
    sup = pipe.start(run_for=60)
    wait_until(lambda: any(e["event"] == "state" and e["stage"] == "crasher" and e["to"] == "BACKOFF"
                           for e in pipe.log("supervisor")), 20, 0.05, "the crasher in back-off")
    t0 = time.monotonic()
    r = pipe.cli("down", timeout=20)
    assert r.returncode == 0, r
    assert "down: every process stopped, every segment removed" in r.stdout, r
    assert sup.wait(10) == 2
    assert time.monotonic() - t0 < 10
    assert "start-up stopped" in pipe.sup_output(sup)
    _assert_nothing_left(pipe)


# ------------------------------------------------------------------------------------------ item 8: start-up errors
@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_missing_model_fails_up_at_once_naming_the_stage_and_the_path(pipe):
    missing = pipe.tmp / "models" / "nosuch-fast.onnx"
    pipe.write_config(control() + _fast_stage(missing), supervisor='control_ring = "control"\n')
    t0 = time.monotonic()
    r = pipe.cli("up", "--run-for", "30", "--status-every", "0", timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err.startswith("error: process fast cannot start: StartupError:"), err
    assert str(missing) in err and "does not exist" in err and "not retried" in err, err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert took < 20, took  # the fork server's preload (onnxruntime) included; no 30 retries
    assert len([e for e in pipe.log("fast") if e["event"] == "start_failed"]) == 1  # started once, not retried
    sup_log = pipe.log("supervisor")
    assert [e["stage"] for e in sup_log if e["event"] == "start_failed_permanently"] == ["fast"]
    assert any(e["event"] == "control_sent" and e["reason"] == "STAGE_FATAL" for e in sup_log)
    _assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_key_file_readable_by_others_fails_up_at_once_naming_the_file_and_the_mode(pipe):
    key = pipe.tmp / "paper-key.json"
    key.write_text(json.dumps({"api_key": "paper-k", "secret": "s" * 32, "passphrase": "p" * 12}))
    os.chmod(key, 0o644)
    pipe.write_config(PAPER_INSTRUMENT + process("venue", "procs.venue:VenueAgent", extra=BACK_OFF,
                                                 params=f'port = 0, seed = 1, key_file = "{key}"'))
    t0 = time.monotonic()
    r = pipe.cli("up", "--run-for", "30", "--status-every", "0", timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err.startswith("error: process venue cannot start: ConfigError:"), err
    assert f"credentials file {key} has mode 0644" in err and "0600" in err, err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert took < 20, took  # was: 30 s, then "did not report ready"
    assert len([e for e in pipe.log("venue") if e["event"] == "start_failed"]) == 1
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o644  # reported, not "fixed" behind the user's back
    _assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_restart_that_cannot_succeed_goes_fatal_at_once_and_halts(pipe):
    """Up with a good model; the model is then removed and the stage restarted: one failed start,
    FATAL with the path as its last error, trading halted, the others untouched."""
    if not FAST_MODEL.is_file():
        pytest.skip(f"{FAST_MODEL} missing (`make model`)")
    model = pipe.tmp / "fast.onnx"
    shutil.copyfile(FAST_MODEL, model)
    out = pipe.tmp / "control.txt"
    pipe.write_config(control(str(out)) + _fast_stage(model), supervisor='control_ring = "control"\n')
    first = {p["name"]: p["pid"] for p in pipe.up(timeout=60)["processes"]}
    model.unlink()
    r = pipe.cli("restart", "fast")
    assert r.returncode == 0, r

    def fast_fatal():
        p = pipe.procs()["fast"]
        return p if p["state"] == "FATAL" else None

    fatal = wait_until(fast_fatal, 20, 0.05, "fast FATAL")
    assert fatal["restarts"] == 1, fatal  # not retried
    assert "does not exist" in fatal["last_error"], fatal
    assert pipe.status()["halted"] is True
    wait_until(lambda: out.exists() and out.read_text() == "HALT STAGE_FATAL\n", 5, 0.02, "HALT STAGE_FATAL at the sink")
    assert len([e for e in pipe.log("fast") if e["event"] == "start_failed"]) == 1
    assert pipe.procs()["ctl"]["pid"] == first["ctl"]
    time.sleep(0.3)
    assert pipe.procs()["fast"]["state"] == "FATAL" and pipe.procs()["fast"]["restarts"] == 1
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_run_dir_that_cannot_be_created_is_one_line_naming_the_path(pipe):
    blocker = pipe.tmp / "afile"
    blocker.write_text("not a directory\n")
    pipe.run_dir = blocker / "run"
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0")
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err == f"error: cannot create the run directory {pipe.run_dir}: Not a directory", err
    assert shm_entries(pipe.prefix) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_log_dir_that_cannot_be_created_is_one_line_naming_the_path(pipe):
    blocker = pipe.tmp / "afile"
    blocker.write_text("not a directory\n")
    pipe.log_dir = blocker / "logs"
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0")
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err.startswith(f"error: cannot open the supervisor log in {pipe.log_dir}:") and "Not a directory" in err, err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert shm_entries(pipe.prefix) == []


# ------------------------------------------------------------------------------------------ item 9: the control endpoint
@pytest.mark.parametrize("ep", ["tcp://127.0.0.1:5555", "tcp://0.0.0.0:5555", "tcp://*:5555", "ws://127.0.0.1:1"])
def test_a_non_ipc_control_endpoint_is_rejected_naming_the_field(ep):
    with pytest.raises(ConfigError, match=r"\$\.supervisor\.control_endpoint: must be ipc://PATH"):
        parse_config(f'[supervisor]\ncontrol_endpoint = "{ep}"\n', "x.toml")


def test_an_ipc_control_endpoint_is_accepted():
    cfg = parse_config('[supervisor]\ncontrol_endpoint = "ipc:///tmp/x/control.sock"\n')
    assert cfg.control_endpoint() == "ipc:///tmp/x/control.sock"


def test_the_client_refuses_a_tcp_endpoint_that_bypassed_validation():
    cfg = Config(supervisor=SupervisorConfig(control_endpoint="tcp://127.0.0.1:5555"))  # no _check
    with pytest.raises(ControlError, match="only ipc://"):
        request(cfg, {"cmd": "status"}, 100)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_with_a_tcp_control_endpoint_is_refused_before_anything_exists(pipe):
    path = pipe.tmp / "tcp.toml"
    path.write_text(pipe.config_text(control(), supervisor='control_ring = "control"\ncontrol_endpoint = "tcp://127.0.0.1:5555"\n'))
    pipe.paths.append(path)
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0", config=path)
    assert r.returncode == 2, r
    assert "$.supervisor.control_endpoint: must be ipc://PATH" in r.stderr, r.stderr
    assert shm_entries(pipe.prefix) == [] and not pipe.run_dir.exists()


# ------------------------------------------------------------------------------------------ the run epoch
@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_up_writes_a_fresh_run_epoch_before_any_stage_kept_across_restarts(pipe):
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF), supervisor='control_ring = "control"\n')
    st = pipe.up()
    path = pipe.run_dir / EPOCH_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    epoch = read_run_epoch(pipe.run_dir)
    assert path.read_text() == f"{epoch}\n" and 0 < epoch < 1 << 64
    assert st["run_epoch"] == epoch
    log = pipe.log("supervisor")
    i_epoch = next(i for i, e in enumerate(log) if e["event"] == "run_epoch")
    i_lock = next(i for i, e in enumerate(log) if e["event"] == "run_lock_taken")
    i_first_start = next(i for i, e in enumerate(log) if e["event"] == "state" and e["to"] == "STARTING")
    assert i_lock < i_epoch < i_first_start
    assert log[i_epoch]["epoch"] == epoch

    old = {p["name"]: p["pid"] for p in st["processes"]}["bystander"]
    r = pipe.cli("restart", "bystander")
    assert r.returncode == 0, r
    wait_until(lambda: (p := pipe.procs()["bystander"])["state"] == "RUNNING" and p["pid"] != old, 10, 0.02,
               "bystander restarted")
    assert pid_gone(old)
    assert read_run_epoch(pipe.run_dir) == epoch  # a stage restart keeps it
    assert pipe.status()["run_epoch"] == epoch
    assert pipe.down() == 0
    assert not path.exists()

    st2 = pipe.up()
    assert read_run_epoch(pipe.run_dir) == st2["run_epoch"] != epoch  # a new `up`: a new epoch
    assert pipe.down() == 0
    _assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_killed_supervisors_stale_epoch_and_pid_are_replaced_by_the_next_up(pipe):
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    st = pipe.up()
    epoch = st["run_epoch"]
    pipe.sup.kill()
    assert pipe.sup.wait(5) == -9
    wait_until(lambda: all(pid_gone(p["pid"]) for p in st["processes"]), 5, 0.02, "the runners to die")
    assert read_run_epoch(pipe.run_dir) == epoch  # left behind by the killed one
    st2 = pipe.up()  # the kernel dropped the dead one's lock: this one takes it at once
    assert st2["run_epoch"] != epoch and read_run_epoch(pipe.run_dir) == st2["run_epoch"]
    assert int((pipe.run_dir / "supervisor.pid").read_text()) == pipe.sup.pid
    stale = [e for e in pipe.log("supervisor") if e["event"] == "stale_run_cleaned"]
    assert len(stale) == 1 and str(pipe.run_dir / EPOCH_FILE) in stale[0]["removed"]
    assert pipe.down() == 0
    _assert_nothing_left(pipe)
