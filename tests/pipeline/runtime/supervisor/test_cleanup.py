"""`up` / `down` and stale runs (pipeline/runtime/supervisor/cleanup.py): nothing left behind, modes
0600, a killed supervisor's leftovers cleaned by the next `up` or by `down`."""

from __future__ import annotations

import os
import stat
import time

import pytest

from tests.support.agents import count_lines
from tests.support.configtext import chain, control
from tests.support.processes import pid_gone, pids_running_with
from tests.support.shm import expected_entries, shm_entries
from tests.support.wait import wait_until


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_then_down_leaves_nothing_behind_and_resources_are_0600(pipe):
    pipe.write_config(chain(100_000, 2_000) + control(), supervisor='control_ring = "control"\n')
    st = pipe.up()
    runners = [p["pid"] for p in st["processes"]]
    assert all(runners) and len(set(runners)) == 4
    wait_until(lambda: count_lines(pipe.tmp / "sink.txt") > 0, 10, what="flow")

    # while up: the segments, semaphores, table, socket and pid file exist, all 0600
    entries = shm_entries(pipe.prefix)
    assert entries == expected_entries(pipe.prefix, ["a", "b", "control"])
    for e in entries:
        mode = os.stat(f"/dev/shm/{e}").st_mode
        assert stat.S_IMODE(mode) == 0o600, (e, oct(mode))
    sock = pipe.run_dir / "control.sock"
    sst = os.stat(sock)
    assert stat.S_ISSOCK(sst.st_mode) and stat.S_IMODE(sst.st_mode) == 0o600, oct(sst.st_mode)
    pid_file = pipe.run_dir / "supervisor.pid"
    assert int(pid_file.read_text()) == pipe.sup.pid
    assert stat.S_IMODE(os.stat(pid_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(pipe.run_dir).st_mode) & 0o077 == 0
    assert st["supervisor_pid"] == pipe.sup.pid

    r = pipe.cli("down")
    assert r.returncode == 0, r
    assert "every segment removed" in r.stdout
    assert pipe.sup.wait(10) == 0

    assert shm_entries(pipe.prefix) == []
    assert not sock.exists()
    assert not pid_file.exists()
    assert all(pid_gone(p) for p in runners), "a runner outlived `down`"
    assert pids_running_with(str(pipe.cfg_path)) == []
    down = [e for e in pipe.log("supervisor") if e["event"] == "down"]
    assert len(down) == 1 and f"{pipe.prefix}.a" in down[0]["removed"]
    for name in ("src", "relay", "sink", "ctl"):  # every stage stopped cleanly on SIGTERM
        assert pipe.log(name)[-1]["event"] == "stopped", (name, pipe.log(name)[-1])


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_killed_supervisor_runners_die_next_up_cleans_stale_and_down_cleans_leftovers(pipe):
    pipe.write_config(chain(1_000_000, 1_000) + control(), supervisor='control_ring = "control"\n')
    st = pipe.up()
    runners = [p["pid"] for p in st["processes"]]
    pipe.sup.kill()
    assert pipe.sup.wait(5) == -9

    # the segments stay; the runners die with their parent (PR_SET_PDEATHSIG)
    assert shm_entries(pipe.prefix) == expected_entries(pipe.prefix, ["a", "b", "control"])
    assert (pipe.run_dir / "supervisor.pid").exists()
    t0 = time.monotonic()
    wait_until(lambda: all(pid_gone(p) for p in runners), 5, 0.02, "the runners to die with the supervisor")
    print(f"\n[pdeathsig] runners gone {1000 * (time.monotonic() - t0):.0f} ms after the supervisor was SIGKILLed")
    for name in ("src", "relay", "sink", "ctl"):
        assert any(e["event"] == "stopped" for e in pipe.log(name)), f"{name} did not stop on its own"

    # the next `up` finds the stale run, cleans it, and starts
    mark = time.monotonic_ns()
    st2 = pipe.up()
    assert all(p["state"] == "RUNNING" for p in st2["processes"])
    assert not set(runners) & {p["pid"] for p in st2["processes"]}
    stale = [e for e in pipe.log("supervisor") if e["event"] == "stale_run_cleaned" and e["mono_ns"] > mark]
    assert len(stale) == 1, stale
    removed = stale[0]["removed"]
    for want in (f"{pipe.prefix}.a", f"{pipe.prefix}.b", f"{pipe.prefix}.control", f"/{pipe.prefix}.procs",
                 str(pipe.run_dir / "supervisor.pid")):
        assert want in removed, (want, removed)
    assert "cleaned a stale run" in pipe.sup_output()

    # kill that one too: `down` with no supervisor answering cleans what it left
    runners2 = [p["pid"] for p in st2["processes"]]
    pipe.sup.kill()
    pipe.sup.wait(5)
    wait_until(lambda: all(pid_gone(p) for p in runners2), 5, 0.02, "the second run's runners to die")
    assert shm_entries(pipe.prefix)
    r = pipe.cli("down")
    assert r.returncode == 0, r
    assert "no supervisor running; cleaned:" in r.stdout and f"{pipe.prefix}.a" in r.stdout, r.stdout
    assert shm_entries(pipe.prefix) == []
    assert not (pipe.run_dir / "supervisor.pid").exists()
    assert not (pipe.run_dir / "control.sock").exists()
    r = pipe.cli("down")  # idempotent
    assert r.returncode == 0 and "nothing to clean" in r.stdout, r


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_second_up_refused_while_a_supervisor_runs(pipe):
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    st = pipe.up()
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0")
    assert r.returncode != 0
    assert f"a supervisor (pid {pipe.sup.pid}) is already running" in r.stderr, r.stderr
    # the running one is untouched
    assert pipe.pids() == {p["name"]: p["pid"] for p in st["processes"]}
    assert shm_entries(pipe.prefix) == expected_entries(pipe.prefix, ["control"])
    assert pipe.down() == 0
