"""Starting stage processes: forked by the fork server, exec'd, or spawned (transport mp-queue).

- ``fork-server`` (default): each stage is forked from a fork server that imported the stages'
  code once (pipeline/runtime/forkserver.py). The supervisor is a child subreaper, so the stages
  are its children all the same; ``ForkedProcess`` gives them the ``subprocess.Popen`` calls. A
  fork server that cannot start, or stops answering, is logged (``forkserver_unavailable`` /
  ``forkserver_lost``), shown, and the stages are exec'd from then on.
- ``exec``: each stage is ``python -m pipeline.runtime.runner`` (its output in ``logs/NAME.out``).
- transport ``mp-queue`` (comparison only): one spawn-context ``multiprocessing.Queue`` per ring
  (not the control ring, a shared-memory ring in every transport) and each stage a
  ``multiprocessing`` process running ``pipeline.runtime.runner.run_spawned`` with the queues of
  its rings; restarts reuse the same queues. ``SpawnedProcess`` gives it the Popen calls.

Every stage gets ``OPENBLAS_NUM_THREADS=1`` (and the rest of ``SINGLE_THREAD_ENV``) unless set:
each is one pinned core.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from pipeline.runtime.config import Config, ProcessConfig
from pipeline.runtime.log import open_private_append
from pipeline.runtime.forkserver import SINGLE_THREAD_ENV, ForkedProcess, ForkServer, ForkServerError, become_subreaper
from pipeline.runtime.log import EventLog
from pipeline.runtime.transport import port_transport

#: set in the environment of a runner started as a multiprocessing process (its command line is
#: multiprocessing's, not ``pipeline.runtime.runner``'s); the value is the config file's path
RUNNER_ENV = "PIPELINE_RUNNER_CONFIG"


class SpawnedProcess:
    """A ``multiprocessing.Process`` seen through the ``subprocess.Popen`` calls the supervisor
    uses: ``pid``, ``returncode``, ``poll`` (negative signal numbers, like Popen), ``kill``,
    ``terminate``, ``wait`` (raising ``subprocess.TimeoutExpired``)."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self._p = process
        self.pid = process.pid
        self.args = process.name

    @property
    def returncode(self) -> int | None:
        return self._p.exitcode

    def poll(self) -> int | None:
        return self._p.exitcode  # waitpid(WNOHANG) under the hood

    def kill(self) -> None:
        self._p.kill()

    def terminate(self) -> None:
        self._p.terminate()

    def wait(self, timeout: float | None = None) -> int:
        self._p.join(timeout)
        rc = self._p.exitcode
        if rc is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return rc


@contextlib.contextmanager
def _environ(name: str, value: str):
    """``os.environ[name] = value`` for the duration (a spawned child inherits the environment)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old



class Launcher:
    """Starts the stage processes of one configuration; ``description`` says what starts them now
    (with why when it is not the configured launcher), for the status header."""

    def __init__(self, cfg: Config, config_path: str, log: EventLog, say: Callable[[str], None]):
        self.cfg = cfg
        self.config_path = config_path
        self.log = log
        self._say = say  # a line for the console
        self.log_dir = Path(cfg.supervisor.log_dir)
        self.forkserver: ForkServer | None = None
        self.mp_ctx = None  # transport mp-queue: the spawn context and one queue per ring
        self.mp_queues: dict[str, object] = {}
        self.description = "exec"

    def create_queues(self) -> None:
        """Transport mp-queue: the spawn context and one queue per ring carried by mp-queue."""
        if self.cfg.supervisor.transport == "mp-queue":
            self.mp_ctx = multiprocessing.get_context("spawn")
            self.mp_queues = {rc.name: self.mp_ctx.Queue(maxsize=rc.capacity) for rc in self.cfg.rings
                              if port_transport(self.cfg, rc.name) == "mp-queue"}

    def start(self) -> None:
        """Set every stage's single-thread environment and, with ``launcher = "fork-server"`` (not
        under mp-queue), become a child subreaper and start the fork server. A fork server that
        cannot start is logged and shown; the stages are then exec'd."""
        for k, v in SINGLE_THREAD_ENV.items():
            os.environ.setdefault(k, v)
        sup = self.cfg.supervisor
        if sup.transport == "mp-queue" or self.mp_ctx is not None:
            self.description = "spawn (mp-queue)"
            return
        if sup.launcher == "exec":
            self.description = "exec"
            return
        modules = ["pipeline.runtime.runner"]
        for p in self.cfg.processes:
            mod = p.module.split(":", 1)[0]
            if mod not in modules:
                modules.append(mod)
        t0 = time.monotonic_ns()
        try:
            become_subreaper()
            self.forkserver = ForkServer.start(self.config_path, modules, str(self.log_dir / "forkserver.out"))
        except (ForkServerError, OSError) as exc:
            self.description = f"exec (fork server unavailable: {exc})"
            self.log.warning("forkserver_unavailable", error=str(exc))
            self._say(f"fork server unavailable, stages are exec'd: {exc}")
            return
        self.description = f"fork-server (pid {self.forkserver.pid})"
        self.log.info("forkserver_ready", pid=self.forkserver.pid, preloaded=self.forkserver.preloaded,
                      failed=self.forkserver.failed, ms=(time.monotonic_ns() - t0) // 1_000_000)

    def spawn(self, proc: ProcessConfig, argv: list[str]) -> subprocess.Popen | SpawnedProcess | ForkedProcess:
        """Start one stage with the runner's ``argv``: spawned (mp-queue), forked by the fork server
        (a lost fork server is dropped and the stage exec'd), else exec'd.

        Raises:
            OSError: the stage's ``.out`` file cannot be opened, or the interpreter cannot be started.
        """
        if self.mp_ctx is not None:
            return self._spawn_mp(proc, argv)
        out_path = self.log_dir / f"{proc.name}.out"
        if self.forkserver is not None:
            try:
                return self.forkserver.spawn(argv, str(out_path), proc.name)
            except ForkServerError as exc:
                self._drop_forkserver(str(exc))
        out = open(open_private_append(out_path), "ab")
        try:
            return subprocess.Popen([sys.executable, "-m", "pipeline.runtime.runner", *argv],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True)
        finally:
            out.close()

    def close(self) -> None:
        """Stop the fork server and close the mp-queue queues (idempotent)."""
        if self.forkserver is not None:
            self.forkserver.close()
            self.forkserver = None
        for q in self.mp_queues.values():
            q.close()
        self.mp_queues = {}  # their semaphores are unlinked as they are collected (or at exit)

    def _drop_forkserver(self, why: str) -> None:
        self.log.warning("forkserver_lost", error=why)
        self._say(f"fork server lost, stages are exec'd from now on: {why}")
        self.description = f"exec (fork server lost: {why})"
        server, self.forkserver = self.forkserver, None
        if server is not None:
            server.close(timeout_s=0.5)

    def _spawn_mp(self, proc: ProcessConfig, argv: list[str]) -> SpawnedProcess:
        """Transport mp-queue: a spawn process running ``run_spawned`` with the queues of its rings."""
        from pipeline.runtime.runner import run_spawned  # (numpy and the agent protocol: not for every CLI call)

        queues = {rn: self.mp_queues[rn] for rn in (*proc.inputs, *proc.outputs) if rn in self.mp_queues}
        process = self.mp_ctx.Process(target=run_spawned, args=(argv, queues, str(self.log_dir / f"{proc.name}.out")),
                                      name=f"pipeline.runtime.runner:{proc.name}")
        with _environ(RUNNER_ENV, self.config_path):
            process.start()
        return SpawnedProcess(process)
