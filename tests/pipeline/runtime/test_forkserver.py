"""The fork server: stages forked from a process that imported their code once, children of the
supervisor all the same; what happens when it cannot start, refuses, or is lost; its protocol."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.runtime.forkserver import ForkedProcess, ForkServer, ForkServerError, preload
from tests.support.agents import count_lines
from tests.support.configtext import chain, process, ring
from tests.support.paths import REPO_ROOT
from tests.support.processes import child_env, pid_gone, pids_running_with
from tests.support.wait import wait_until


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def _events(pipe, event: str) -> list[dict]:
    return [e for e in pipe.log("supervisor") if e["event"] == event]


# ------------------------------------------------------------------------------------ through the supervisor
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_stages_are_forked_children_of_the_supervisor_named_after_their_stage_and_restart_forked(pipe):
    pipe.write_config(chain(1_000_000, 2_000))
    st = pipe.up()
    ready = _events(pipe, "forkserver_ready")
    assert len(ready) == 1 and ready[0]["failed"] == {}
    assert st["launcher"] == f"fork-server (pid {ready[0]['pid']})"
    assert {"pipeline.runtime.runner", "tests.support.agents"} <= set(ready[0]["preloaded"])
    server = ready[0]["pid"]
    assert _ppid(server) == pipe.sup.pid and b"pipeline.runtime.forkserver" in _cmdline(server)
    for p in st["processes"]:
        assert _ppid(p["pid"]) == pipe.sup.pid, p  # reparented to the subreaper, not the server's
        assert _comm(p["pid"]) == p["name"]
        assert b"pipeline.runtime.forkserver" in _cmdline(p["pid"])  # forked, not exec'd
    wait_until(lambda: count_lines(pipe.tmp / "sink.txt") > 0, 10, what="flow")

    old = next(p["pid"] for p in st["processes"] if p["name"] == "relay")
    os.kill(old, signal.SIGKILL)
    relay = wait_until(lambda: (r := pipe.procs()["relay"])["state"] == "RUNNING" and r["pid"] != old and r, 10,
                       what="relay RUNNING again")
    assert _ppid(relay["pid"]) == pipe.sup.pid and _comm(relay["pid"]) == "relay"
    deaths = [e for e in _events(pipe, "state") if e["stage"] == "relay" and e["to"] == "EXITED"]
    assert deaths[-1]["why"] == "killed by SIGKILL"  # the exit status reaches the supervisor (waitpid)
    assert len(relay["recoveries_ms"]) == 1
    print(f"\n[forkserver] relay back to RUNNING {relay['recoveries_ms'][0]} ms after its SIGKILL was seen")
    n = count_lines(pipe.tmp / "sink.txt")
    wait_until(lambda: count_lines(pipe.tmp / "sink.txt") > n, 10, what="flow after the restart")

    assert pipe.down() == 0
    assert pid_gone(server), "the fork server outlived `down`"
    assert pids_running_with(str(pipe.cfg_path)) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_a_lost_fork_server_is_logged_shown_and_later_stages_are_execd(pipe):
    pipe.write_config(chain(1_000_000, 2_000))
    pipe.up()
    server = _events(pipe, "forkserver_ready")[0]["pid"]
    os.kill(server, signal.SIGKILL)
    old = pipe.pids()["relay"]
    os.kill(old, signal.SIGKILL)
    relay = wait_until(lambda: (r := pipe.procs()["relay"])["state"] == "RUNNING" and r["pid"] != old and r, 15,
                       what="relay RUNNING again")
    assert b"pipeline.runtime.runner" in _cmdline(relay["pid"])  # exec'd
    lost = _events(pipe, "forkserver_lost")
    assert len(lost) == 1 and "fork server" in lost[0]["error"]
    st = pipe.status()
    assert st["launcher"].startswith("exec (fork server lost:"), st["launcher"]
    assert "launcher: exec (fork server lost:" in pipe.cli("status").stdout
    assert pid_gone(server)  # reaped, not a zombie left behind
    n = count_lines(pipe.tmp / "sink.txt")
    wait_until(lambda: count_lines(pipe.tmp / "sink.txt") > n, 10, what="flow after the restart")
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_a_fork_server_left_with_threads_refuses_and_every_stage_is_execd(pipe):
    body = (ring("a") + ring("b")
            + process("src", "SeqSource", outputs=["a"], params="rate_per_s = 2000, total = 1000000")
            + process("relay", "tests.pipeline.threaded_import:ThreadedImportRelay", inputs=["a"], outputs=["b"])
            + process("sink", "SeqSink", inputs=["b"], params='out = "$tmp/sink.txt"'))
    pipe.write_config(body)
    st = pipe.up()
    unavailable = _events(pipe, "forkserver_unavailable")
    assert len(unavailable) == 1, unavailable
    assert "2 threads after preloading" in unavailable[0]["error"] and "Python threads: started-at-import" in unavailable[0]["error"]
    assert "fork server unavailable" in pipe.sup_output()
    assert st["launcher"].startswith("exec (fork server unavailable:")
    for p in st["processes"]:
        assert b"pipeline.runtime.runner" in _cmdline(p["pid"]) and _ppid(p["pid"]) == pipe.sup.pid
    wait_until(lambda: count_lines(pipe.tmp / "sink.txt") > 0, 10, what="flow")
    assert pipe.down() == 0
    assert pids_running_with(str(pipe.cfg_path)) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_launcher_exec_starts_each_stage_as_its_own_interpreter(pipe):
    pipe.write_config(chain(1_000_000, 2_000), supervisor='launcher = "exec"\n')
    st = pipe.up()
    assert st["launcher"] == "exec"
    assert _events(pipe, "forkserver_ready") == [] and not (pipe.log_dir / "forkserver.out").exists()
    for p in st["processes"]:
        assert b"pipeline.runtime.runner" in _cmdline(p["pid"]) and _ppid(p["pid"]) == pipe.sup.pid
    assert pipe.down() == 0


# ------------------------------------------------------------------------------------ the server and its protocol
def test_preload_follows_fork_preload_and_reports_failures_without_raising(tmp_path, monkeypatch):
    pkg = tmp_path / "fsprobe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text('FORK_PRELOAD = ("fsprobe.dep", "fsprobe.missing")\n')
    (pkg / "dep.py").write_text("VALUE = 1\n")
    (pkg / "broken.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        done, failed = preload(["fsprobe.top", "fsprobe.broken", "fsprobe.top"])
    finally:
        for m in [m for m in sys.modules if m.startswith("fsprobe")]:
            del sys.modules[m]
    assert done == ["fsprobe.top", "fsprobe.dep"]
    assert set(failed) == {"fsprobe.broken", "fsprobe.missing"}
    assert failed["fsprobe.broken"] == "RuntimeError: broken at import"
    assert failed["fsprobe.missing"].startswith("ModuleNotFoundError:")


def test_the_server_answers_bad_requests_with_an_error_and_keeps_serving(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    server = ForkServer.start(str(tmp_path / "x.toml"), ["json", "no_such_module_here"], str(tmp_path / "fs.out"),
                              timeout_s=30)
    try:
        assert server.preloaded == ["json"] and list(server.failed) == ["no_such_module_here"]
        for bad, why in ((b"not json\n", "JSONDecodeError"), (b'{"argv": "x", "out": "y"}\n', "argv (a list)"),
                         (b'{"argv": [1], "out": "y"}\n', "argv must be strings"), (b"[1, 2]\n", "a request needs")):
            os.write(server._req, bad)
            doc = server._reply(5)
            assert why in doc["error"], (bad, doc)
        assert server.popen.poll() is None  # still serving
    finally:
        server.close()
    assert server.popen.returncode == 0  # end of file: a clean exit


def test_a_module_that_starts_a_native_thread_at_import_is_refused(tmp_path, monkeypatch):
    # as onnxruntime does (so the fast stage imports it itself, after the fork)
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ForkServerError, match=r"refused: 2 threads after preloading \['tests.pipeline.native_thread_import'\]"
                                              r".*Python threads: none, so native ones"):
        ForkServer.start(str(tmp_path / "x.toml"), ["tests.pipeline.native_thread_import"], str(tmp_path / "fs.out"),
                         timeout_s=30)


def test_a_server_that_dies_before_ready_is_a_start_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ForkServerError, match="closed its pipe"):
        ForkServer.start(str(tmp_path / "x.toml"), ["tests.pipeline.exits_at_import"], str(tmp_path / "fs.out"),
                         timeout_s=30)


def test_forked_process_reports_signals_like_popen_and_never_signals_a_reaped_pid():
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"], os.environ)
    proc = ForkedProcess(pid, "sleeper")
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.05)
    proc.terminate()
    assert proc.wait(5) == -signal.SIGTERM and proc.returncode == -signal.SIGTERM
    proc.kill()  # reaped: no signal goes to whatever has this pid now
    assert proc.poll() == -signal.SIGTERM
    seven = ForkedProcess(os.posix_spawn(sys.executable, [sys.executable, "-c", "raise SystemExit(7)"], os.environ), "seven")
    assert seven.wait(10) == 7
