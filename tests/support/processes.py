"""Processes in tests: child Python processes (``Children``), a per-test pipeline under a real
supervisor (``Pipeline``), and the checks that nothing of them is left running or in /dev/shm.

Every ``Pipeline`` cleans up after itself (``cleanup``): it asks a live supervisor to go down,
SIGKILLs whatever is left that runs with one of its config files (supervisors, runners), then
removes every segment, semaphore, socket and pid file of its configs through
``pipeline.runtime.supervisor.clean_stale``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from string import Template

import orjson
import pytest

from pipeline.runtime.config import Config, load_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ControlError
from pipeline.runtime.runepoch import EPOCH_FILE
from pipeline.runtime.supervisor import RUNNER_ENV, clean_stale
from tests.support.paths import REPO_ROOT
from tests.support.shm import shm_entries
from tests.support.wait import wait_until

#: the script of the ring roles child processes play (see that file for the roles)
RING_CHILD = REPO_ROOT / "tests" / "ringbuf" / "ring_child.py"


# ------------------------------------------------------------------------------------- processes
def pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (no such process, or a zombie waiting for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    state = stat.rsplit(")", 1)[1].split()[0]
    return state in ("Z", "X")


def pids_running_with(arg: str) -> list[int]:
    """Pids (other than ours) whose command line contains ``arg`` as one argument, or runners started
    as multiprocessing processes (transport mp-queue) for the config file ``arg`` (they carry
    ``PIPELINE_RUNNER_CONFIG=<config>`` in their environment, their command line is multiprocessing's)."""
    want = arg.encode()
    marker = RUNNER_ENV.encode() + b"=" + want
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            if want not in argv and b"--multiprocessing-fork" in argv:
                argv = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
                argv = [want] if marker in argv else []
        except OSError:
            continue
        if want in argv and not pid_gone(int(d)):
            found.append(int(d))
    return found


def child_env() -> dict[str, str]:
    """Our environment, with the repository first on ``PYTHONPATH`` and unbuffered output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def read_log(path: Path) -> list[dict]:
    """The JSON lines of a log file (every line must parse)."""
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


class Children:
    """Starts child Python processes (``sys.executable <script>`` or ``-c CODE``, never a fork of
    pytest) and guarantees they are killed and reaped."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def _popen(self, argv: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def role(self, role: str, *args: object) -> subprocess.Popen:
        """Run ``tests/ringbuf/ring_child.py ROLE ARGS...`` (see that file for the roles)."""
        return self._popen([sys.executable, str(RING_CHILD), role, *map(str, args)])

    def python(self, code: str, *args: object) -> subprocess.Popen:
        """Run ``sys.executable -c CODE ARGS...``."""
        return self._popen([sys.executable, "-c", code, *map(str, args)])

    @staticmethod
    def finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, str]:
        """Wait for a child to exit by itself; return (returncode, stdout, stderr)."""
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err

    @staticmethod
    def sigkill(proc: subprocess.Popen) -> int:
        """SIGKILL a child and reap it; return its status (-9 unless it had already exited)."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        return proc.returncode

    def kill_all(self) -> None:
        """SIGKILL every child still running, reap every child and close its pipes."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGKILL)
                except ProcessLookupError:  # pragma: no cover - exited between poll and kill
                    pass
        for proc in self.procs:
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


# ------------------------------------------------------------------------------------- the pipeline under test
class Pipeline:
    """One test's pipeline: its prefix, directories, config files, supervisors, and cleanup."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.prefix = "t" + uuid.uuid4().hex[:8]
        self.run_dir = tmp_path / "run"
        self.log_dir = tmp_path / "logs"
        self.paths: list[Path] = []
        self.cfg_path: Path | None = None
        self.cfg: Config | None = None
        self.supervisors: list[subprocess.Popen] = []
        self.sup: subprocess.Popen | None = None

    # --- config
    def config_text(self, body: str, supervisor: str = "") -> str:
        head = (f'[supervisor]\nshm_prefix = "{self.prefix}"\nrun_dir = "{self.run_dir}"\n'
                f'log_dir = "{self.log_dir}"\n{supervisor}\n')
        return Template(head + body).substitute(tmp=str(self.tmp), prefix=self.prefix)

    def write_config(self, body: str, supervisor: str = "", name: str = "pipeline.toml") -> Path:
        """Write a config (``[supervisor]`` prefix/dirs filled in, ``$tmp`` expanded) and load it."""
        path = self.tmp / name
        path.write_text(self.config_text(body, supervisor))
        self.paths.append(path)
        self.cfg_path = path
        self.cfg = load_config(path)
        return path

    def log(self, proc: str) -> list[dict]:
        return read_log(self.log_dir / f"{proc}.log")

    # --- CLI
    def cli(self, *args: str, timeout: float = 30, config: Path | None = None) -> subprocess.CompletedProcess:
        """``python -m pipeline --config FILE ARGS...`` in the repository root."""
        argv = [sys.executable, "-m", "pipeline", "--config", str(config or self.cfg_path), *args]
        return subprocess.run(argv, cwd=REPO_ROOT, env=child_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, run_for: float = 120) -> subprocess.Popen:
        """Start ``up`` in the background (foreground supervisor, bounded by ``--run-for``)."""
        out = open(self.tmp / f"supervisor-{len(self.supervisors)}.out", "ab")
        try:
            sup = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "--config", str(self.cfg_path), "up",
                 "--run-for", str(run_for), "--status-every", "0"],
                cwd=REPO_ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()
        self.supervisors.append(sup)
        self.sup = sup
        return sup

    def sup_output(self, sup: subprocess.Popen | None = None) -> str:
        i = self.supervisors.index(sup or self.sup)
        p = self.tmp / f"supervisor-{i}.out"
        return p.read_text() if p.exists() else ""

    def up(self, run_for: float = 120, timeout: float = 30) -> dict:
        """Start ``up`` and wait until every process is RUNNING; returns that status."""
        sup = self.start(run_for)

        def all_running():
            if sup.poll() is not None:
                pytest.fail(f"supervisor exited with {sup.returncode} during start:\n{self.sup_output(sup)}")
            st = self.try_status()
            if st and st["processes"] and all(p["state"] == "RUNNING" for p in st["processes"]):
                return st
            return None

        return wait_until(all_running, timeout, 0.02, "every process RUNNING")

    # --- control plane
    def request(self, req: dict, timeout_ms: int = 3_000) -> dict:
        return request(self.cfg, req, timeout_ms)

    def status(self) -> dict:
        resp = self.request({"cmd": "status"})
        assert resp["ok"], resp
        return resp["status"]

    def try_status(self, timeout_ms: int = 500) -> dict | None:
        try:
            resp = request(self.cfg, {"cmd": "status"}, timeout_ms)
        except ControlError:
            return None
        return resp["status"] if resp.get("ok") else None

    def procs(self) -> dict[str, dict]:
        return {p["name"]: p for p in self.status()["processes"]}

    def pids(self) -> dict[str, int]:
        return {n: p["pid"] for n, p in self.procs().items()}

    def down(self, timeout: float = 15) -> int:
        """Ask the supervisor to go down; wait for it to exit; return its exit status."""
        resp = self.request({"cmd": "down"})
        assert resp["ok"], resp
        return self.sup.wait(timeout)

    # --- cleanup
    def cleanup(self) -> list[str]:
        """Stop and remove everything; return the /dev/shm entries of the prefix that remain."""
        self._stop_supervisors()
        self._kill_leftovers()
        for sup in self.supervisors:
            if sup.poll() is None:
                sup.kill()
            sup.wait()
        for path in self.paths:
            try:
                clean_stale(load_config(path))
            except Exception:  # a deliberately bad config: nothing of it was ever created
                pass
        return shm_entries(self.prefix)

    def _stop_supervisors(self) -> None:
        """Ask every supervisor still running to go down (through its control socket)."""
        for sup in self.supervisors:
            if sup.poll() is None:
                try:
                    request(self.cfg, {"cmd": "down"}, 1_000)
                    sup.wait(10)
                except (ControlError, subprocess.TimeoutExpired):
                    pass

    def _kill_leftovers(self) -> None:
        """SIGKILL the supervisors and runners started with one of our configs; wait (5 s at most)
        until they are gone."""
        killed = []
        for path in self.paths:
            for pid in set(pids_running_with(str(path)) + pids_running_with(str(path.resolve()))):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        while not all(pid_gone(p) for p in killed) and time.monotonic() < deadline:
            time.sleep(0.01)


def assert_nothing_left(pipe: Pipeline) -> None:
    """No segment, semaphore, pid file, control socket or run epoch of ``pipe`` is left."""
    assert shm_entries(pipe.prefix) == []
    for name in ("supervisor.pid", "control.sock", EPOCH_FILE):
        assert not (pipe.run_dir / name).exists(), name
