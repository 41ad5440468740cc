"""The run lock (pipeline/runtime/supervisor/runlock.py): exclusive, naming its holder; `up` refused
at once while another holds it (three `up` at the same instant: one runs, the others fail fast
naming it); `down` touches nothing while a live process holds it.

Real supervisor processes against a private config (own shm prefix, run and log dirs under
tmp_path); the ``pipe`` fixture kills and removes everything even when a test fails.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest

from pipeline.runtime.errors import StartupError
from pipeline.runtime.runepoch import EPOCH_FILE
from pipeline.runtime.supervisor import RunLock, RunLockHeld
from tests.support.configtext import BACK_OFF, control, process
from tests.support.paths import REPO_ROOT
from tests.support.processes import assert_nothing_left, child_env
from tests.support.shm import expected_entries, shm_entries
from tests.support.wait import wait_until


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
    with pytest.raises(RunLockHeld) as ei:
        RunLock(tmp_path).acquire()
    assert ei.value.pid == os.getpid()
    a.release()


def test_run_lock_pid_file_that_cannot_be_written_is_one_clear_error(tmp_path, monkeypatch):
    import pipeline.runtime.supervisor.runlock as S

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
        r = pipe.cli("up", "--run-for", "20", "--status-every", "0", timeout=30)
        assert r.returncode == 2, r
        assert f"error: a supervisor (pid {os.getpid()}) is already running for {pipe.run_dir}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
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

    # a hang guard, not a limit: no 30 s wait, no crash
    done = wait_until(two_exited, instant - time.time() + 15, 0.01, "two of the three `up` to give up")
    assert len(done) == 2, [s.returncode for s in sups]
    (winner,) = [s for s in sups if s not in done]
    for loser in done:
        out = pipe.sup_output(loser)
        assert loser.returncode == 2, out
        assert out.strip() == (f"error: a supervisor (pid {winner.pid}) is already running for {pipe.run_dir} "
                               f"(it holds the lock on {pipe.run_dir / 'supervisor.pid'}); `make down` first"), out

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
    assert shm_entries(pipe.prefix) == expected_entries(pipe.prefix, ["control"])
    assert stat.S_IMODE(os.stat(pipe.run_dir / "control.sock").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(pipe.run_dir).st_mode) == 0o700
    assert not [e for e in pipe.log("supervisor") if e["event"] == "stale_run_cleaned"]
    assert pipe.down() == 0
    assert_nothing_left(pipe)


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
