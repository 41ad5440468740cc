"""The supervisor: creates the rings, starts, watches, pins and restarts every process.

Process states (a polled state machine, one ``tick`` every ``poll_interval_ms``)::

    STOPPED --start--> STARTING --ready--> RUNNING --exit/hang--> EXITED --policy--> BACKOFF --delay--> STARTING
                          |                   |                      |
                          +--exit/timeout-----+                      +--flapping--> FATAL (trading halted)
    RUNNING --restart/down--> STOPPING --exit--> STOPPED

- death is seen through ``waitpid``; a hang (e.g. SIGSTOP) through the heartbeat age in the process
  table, after which the process is SIGKILLed and treated as dead;
- restarts follow the process's declarative ``RestartPolicy`` (back-off with a cap, a flapping
  limit); a FATAL process makes the supervisor write CONTROL HALT to the ``control_ring``;
- ``down``: SIGTERM to every process, ``stop_grace_ms``, then SIGKILL; then every segment, the
  semaphores, the control socket and the pid file are removed;
- the run lock: before anything else, ``up`` takes an exclusive ``flock`` on
  ``<run_dir>/supervisor.pid`` (and writes its pid there); a second ``up`` of the same run dir fails
  at once naming the running supervisor, and touches nothing. The lock goes with the process (a
  killed supervisor leaves no lock behind); ``down`` removes the pid file, then lets go of it;
- a stale run (a supervisor that was killed) is detected from the pid file and the process table
  and cleaned before anything new is created;
- the run epoch: after taking the lock and before any stage starts, ``up`` writes a fresh random
  64-bit number to ``<run_dir>/run.epoch`` (0600, pipeline/runtime/runepoch.py); stages read it with
  ``read_run_epoch`` (ids unique across runs). A stage restart keeps it;
- a stage whose start fails with ``ConfigError`` or ``StartupError`` (runner exit code 78) is not
  retried: it goes FATAL at once (trading is halted as for flapping) and, during ``up``, ``up``
  fails naming the stage and the cause (the runner's ``NAME: start failed: ...`` line of
  ``logs/NAME.out``). Other start failures (exit code 1) follow the restart policy.

Transport ``mp-queue`` (comparison only): the supervisor creates one spawn-context
``multiprocessing.Queue`` per ring (not the control ring, a shared-memory ring in every transport)
and starts each stage as a ``multiprocessing`` process (``pipeline.runtime.runner.run_spawned``) holding the
queues of its rings; restarts reuse the same queues. ``SpawnedProcess`` gives such a process the
``subprocess.Popen`` calls the state machine uses, so nothing else differs.

Launcher (``supervisor.launcher``): ``fork-server`` (default) forks each stage from a fork server
that imported the stages' code once (pipeline/runtime/forkserver.py; the supervisor is a child subreaper,
so the stages are its children all the same and ``ForkedProcess`` gives them the Popen calls);
``exec`` starts each as ``python -m pipeline.runtime.runner``. A fork server that cannot start, or stops
answering, is logged (``forkserver_unavailable`` / ``forkserver_lost``), shown in the status header,
and the stages are exec'd from then on. Every stage gets ``OPENBLAS_NUM_THREADS=1`` unless set: each
is one pinned core.

Control plane: a zmq REP socket on ``ipc://`` only (created mode 0600, by default in the 0700 run
dir: only this user can connect; there is no TCP option, as anyone who can connect can halt, restart
or stop the pipeline) answering JSON requests ``{"cmd": "status" | "restart" | "halt" | "kill-switch"
| "resume" | "down", "name": ...}``. It is served during start-up too (``down`` aborts a start).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import orjson
import zmq

from pipeline.runtime import proctable as PT
from pipeline.runtime.config import Config, ProcessConfig
from pipeline.runtime.errors import StartupError
from pipeline.runtime.forkserver import SINGLE_THREAD_ENV, ForkedProcess, ForkServer, ForkServerError, become_subreaper
from pipeline.runtime.gpu import budget_from_config, check_budget, probe_gpu
from pipeline.runtime.log import EventLog
from pipeline.trading.messages import ControlCmd, ControlReason, Kind, pack_control
from pipeline.runtime.pinning import available_cores, plan_cores
from pipeline.runtime.runepoch import EPOCH_FILE, read_run_epoch, write_run_epoch  # noqa: F401 (read_run_epoch: re-exported)
from pipeline.runtime.transport import bind_private, doorbell_ring, port_transport
from ringbuf.ring import open_doorbell
from ringbuf import Ring, layout as L


class State(str, enum.Enum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    BACKOFF = "BACKOFF"
    STOPPING = "STOPPING"
    EXITED = "EXITED"
    FATAL = "FATAL"


class Proc:
    """The supervisor's view of one process."""

    def __init__(self, cfg: ProcessConfig, index: int, core: int, wait: str):
        self.cfg = cfg
        self.name = cfg.name
        self.index = index
        self.core = core
        self.wait = wait
        self.state = State.STOPPED
        self.popen: subprocess.Popen | SpawnedProcess | ForkedProcess | None = None
        self.pid = 0
        self.restarts = 0  # restarts since the supervisor started
        self.consecutive = 0  # restarts since the process was last stable
        self.restart_times: deque[int] = deque()
        self.state_since_ns = 0
        self.started_ns = 0
        self.backoff_until_ns = 0
        self.stop_deadline_ns = 0
        self.then_start = False  # after STOPPING, start again (a `restart` command)
        self.last_exit: str = ""
        self.down_ns = 0  # when it was last seen dead (for time-to-RUNNING)
        self.recoveries_ns: list[int] = []  # death seen -> RUNNING again, per restart
        self.permanent = ""  # why its last start failed for good (ConfigError / StartupError), else ""


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_runner(pid: int) -> bool:
    """A ``python -m pipeline.runtime.runner`` process, or a runner started as a multiprocessing process."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if b"pipeline.runtime.runner" in cmd or b"pipeline.runtime.forkserver" in cmd:  # exec'd, or forked by the fork server
        return True
    if b"--multiprocessing-fork" not in cmd:
        return False
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(e.startswith(RUNNER_ENV.encode() + b"=") for e in env)


#: the runner's exit code for a start that failed with ConfigError / StartupError (retrying cannot
#: help); ``pipeline.runtime.runner.EXIT_START_PERMANENT`` (not imported: the runner pulls in numpy)
EXIT_START_PERMANENT = 78

PID_FILE = "supervisor.pid"


def _flock_holder(fd: int) -> int:
    """The pid holding a ``flock`` on the file open as ``fd``, from /proc/locks (0: not found)."""
    st = os.fstat(fd)
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1234 08:01:567 0 EOF"
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[3] == "WRITE" and f[5].rsplit(":", 1)[-1] == str(st.st_ino):
            try:
                return int(f[4])
            except ValueError:
                return 0
    return 0


class RunLockHeld(StartupError):
    """Another process holds the run lock; ``pid`` is its pid (0: unknown)."""

    def __init__(self, message: str, pid: int):
        super().__init__(message)
        self.pid = pid


class RunLock:
    """The exclusive lock of one run dir: ``flock(LOCK_EX)`` on ``<run_dir>/supervisor.pid``.

    Held by the supervisor from the first thing ``up`` does until the end of ``down``; the kernel
    drops it when the process dies, however it dies. The descriptor is close-on-exec and the
    supervisor's children are started with ``close_fds``, so no child keeps it.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / PID_FILE
        self.fd: int | None = None
        self.previous_pid = 0  # the pid the file held when we took the lock (a killed supervisor's)
        self.was_held = False  # taken at least once

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self, *, create: bool = True, write_pid: bool = True) -> None:
        """Take the lock without waiting; with ``create``, make the run dir (0700) and the pid file
        (0600) when missing; with ``write_pid``, write this process's pid into the pid file.

        Raises:
            RunLockHeld: another process holds the lock (a StartupError naming its pid).
            StartupError: the run dir or the pid file cannot be created or written (the path and
                the OS's reason).
            FileNotFoundError: ``create`` is False and there is no pid file.
        """
        if self.fd is not None:
            return
        if create:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise StartupError(f"cannot create the run directory {self.run_dir}: {exc.strerror or exc}") from None
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        for _ in range(100):
            try:
                fd = os.open(self.path, flags, 0o600)
            except FileNotFoundError:
                if not create:
                    raise
                raise StartupError(f"cannot create the pid file {self.path}: {os.strerror(2)}") from None
            except OSError as exc:
                raise StartupError(f"cannot open the pid file {self.path}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                who = f"pid {holder}" if holder else "pid unknown"
                raise RunLockHeld(f"a supervisor ({who}) is already running for {self.run_dir} "
                                  f"(it holds the lock on {self.path}); `make down` first", holder) from None
            except OSError as exc:
                os.close(fd)
                raise StartupError(f"cannot lock the pid file {self.path}: {exc.strerror or exc}") from None
            # a supervisor going down unlinks the file it locked: ours must still be the one at the path
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
            if not create:
                raise FileNotFoundError(2, os.strerror(2), str(self.path))
        else:  # pragma: no cover - the file replaced under us 100 times in a row
            raise StartupError(f"cannot lock the pid file {self.path}: it keeps being replaced")
        self.fd = fd
        self.was_held = True
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            self.previous_pid = int(text) if text.isdigit() else 0
        except OSError:
            self.previous_pid = 0
        if write_pid:
            try:
                os.fchmod(fd, 0o600)
                os.ftruncate(fd, 0)
                data = f"{os.getpid()}\n".encode()
                if os.pwrite(fd, data, 0) != len(data):
                    raise OSError(28, os.strerror(28))
            except OSError as exc:
                self.release(unlink=True)
                raise StartupError(f"cannot write the pid file {self.path}: {exc.strerror or exc}") from None

    def _holder(self, fd: int) -> int:
        """The pid of the lock's holder: the pid file's content (it writes it right after locking,
        so wait up to 1 s for it), else /proc/locks; 0 when neither tells."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                if text.isdigit() and int(text) > 0:
                    return int(text)
            except OSError:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return _flock_holder(fd)

    def release(self, *, unlink: bool = False) -> bool:
        """Let go of the lock (idempotent); with ``unlink``, remove the pid file first (while still
        holding it, so no other process's pid file is removed). Returns whether it was removed."""
        if self.fd is None:
            return False
        removed = False
        if unlink:
            try:
                if os.path.samestat(os.fstat(self.fd), os.stat(self.path)):
                    os.unlink(self.path)
                    removed = True
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None
        return removed


class Supervisor:
    """Owns the rings and processes of one configuration."""

    def __init__(self, cfg: Config, config_path: str | os.PathLike, log: EventLog, *, clock=time.monotonic_ns,
                 out=None):
        self.cfg = cfg
        self.config_path = str(Path(config_path).resolve())
        self.log = log
        self.clock = clock
        self.out = out  # where the live status view goes (None: nowhere)
        sup = cfg.supervisor
        self.run_dir = Path(sup.run_dir)
        self.log_dir = Path(sup.log_dir)
        self.pid_file = self.run_dir / PID_FILE
        self.lock = RunLock(self.run_dir)
        self.run_epoch = 0  # written at `up` (pipeline/runtime/runepoch.py)
        self.all_started = False  # start_all has brought every process up
        self.rings: dict[str, Ring] = {}
        self.table: PT.ProcTable | None = None
        self.procs: dict[str, Proc] = {}
        self.control_writer = None
        self.mp_ctx = None  # transport mp-queue: the spawn context and one queue per ring
        self.mp_queues: dict[str, object] = {}
        self.sock = None
        self.zctx = None
        self.halted = False
        self.stopping = False
        self._last_status: dict[str, tuple[int, int]] = {}
        self.plan_note = ""
        self.forkserver: ForkServer | None = None
        self.launcher = "exec"  # what starts the stages now, with why when it is not the configured one

    # ------------------------------------------------------------------------------ start-up
    def acquire_lock(self) -> None:
        """Take the run lock (``RunLock``: flock on the pid file, which then holds our pid); the
        first thing ``up`` does, so that two ``up`` at the same instant cannot both go on.

        Raises:
            StartupError: another supervisor holds it (the message names its pid), or the run dir
                or pid file cannot be created or written (the path and the OS's reason).
        """
        self.lock.acquire()
        self.log.info("run_lock_taken", path=str(self.lock.path), pid=os.getpid())

    def preflight(self) -> None:
        """Checks that must pass before anything is created (the run lock is held).

        Raises:
            StartupError: the GPU budget fails.
        """
        info, why = probe_gpu(self.cfg.gpu.device_id)
        verdict = check_budget(budget_from_config(self.cfg), info, why)
        self.log.info("gpu_budget", verdict=verdict)

    def clean_stale(self) -> list[str]:
        """Remove what a killed supervisor left: its runners, segments, semaphores, socket, run
        epoch; its pid file is kept (it is the run lock, held by this process now, its pid in it)
        and listed when it held another pid.

        Returns what was removed (for the log).
        """
        removed = clean_stale(self.cfg, keep_pid_file=True)
        if self.lock.previous_pid and self.lock.previous_pid != os.getpid():
            removed.append(str(self.pid_file))  # a killed supervisor's pid, replaced by ours under the lock
        return removed

    def create(self) -> None:
        """Create the directories (0700), a fresh run epoch (0600), the process table and every
        ring (mode 0600).

        Raises:
            StartupError: a directory, the run epoch, the table or a ring cannot be created (the
                message names the path or segment and the OS's reason, e.g. "No space left on device").
        """
        what = f"the run directory {self.run_dir}"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            what = f"the log directory {self.log_dir}"
            self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.run_epoch = write_run_epoch(self.run_dir)  # StartupError names the file
            self.log.info("run_epoch", epoch=self.run_epoch, path=str(self.run_dir / EPOCH_FILE))
            what = f"the process table /dev/shm/{PT.segment_name(self.cfg.supervisor.shm_prefix).lstrip('/')}"
            self.table = PT.ProcTable.create(self.cfg.supervisor.shm_prefix, len(self.cfg.processes))
            for rc in self.cfg.rings:
                what = f"the ring segment /dev/shm/{self.cfg.segment_name(rc.name)}"
                self.rings[rc.name] = Ring.create(self.cfg.segment_name(rc.name), slot_size=L.slot_size_for(rc.max_payload_bytes),
                                                  capacity=rc.capacity, full_policy=rc.full_policy, replace=True)
        except OSError as exc:
            raise StartupError(f"cannot create {what}: {exc.strerror or exc}") from None
        if self.cfg.supervisor.control_ring:  # a shared-memory ring in every transport
            ctl_ring = self.cfg.supervisor.control_ring
            self.control_writer = self.rings[ctl_ring].writer()
            bell = doorbell_ring(self.cfg, ctl_ring)
            if bell is not None and bell != ctl_ring:  # its consumer parks on another of its rings
                self.control_writer.use_doorbell(open_doorbell(self.cfg.segment_name(bell)))
        if self.cfg.supervisor.transport == "mp-queue":
            self.mp_ctx = multiprocessing.get_context("spawn")
            self.mp_queues = {rc.name: self.mp_ctx.Queue(maxsize=rc.capacity) for rc in self.cfg.rings
                              if port_transport(self.cfg, rc.name) == "mp-queue"}
        plan = plan_cores([(p.name, p.core, p.wait) for p in self.cfg.processes], available_cores())
        self.plan_note = plan.note
        self.log.info("core_plan", note=plan.note, cores=plan.cores, wait=plan.wait)
        for i, p in enumerate(self.cfg.processes):
            self.procs[p.name] = Proc(p, i, plan.cores[p.name], plan.wait[p.name])

    def open_control(self) -> str:
        """Bind the control socket: ``ipc://`` only, the socket file created 0600.

        Raises:
            StartupError: the endpoint is not ``ipc://`` (a TCP control socket would let any local
                user halt, restart or stop the pipeline), or it cannot be bound (the endpoint and why).
        """
        ep = self.cfg.control_endpoint()
        if not ep.startswith("ipc://"):
            raise StartupError(f"control endpoint {ep!r}: only ipc:// is allowed (any local user could use a TCP one)")
        self.zctx = zmq.Context()
        self.sock = self.zctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            bind_private(self.sock, ep)
        except (zmq.ZMQError, OSError) as exc:
            raise StartupError(f"cannot bind the control socket {ep}: {getattr(exc, 'strerror', None) or exc}") from None
        self.log.info("control_listening", endpoint=ep)
        return ep

    def start_order(self) -> list[str]:
        """Consumers before producers: a process starts after the consumers of its outputs, so each
        stage is ready before data flows to it. Cycles (risk <-> sender) keep config order."""
        procs = self.cfg.processes
        consumer_of = {rn: p.name for p in procs for rn in p.inputs}
        deps = {p.name: {consumer_of[o] for o in p.outputs if o in consumer_of and consumer_of[o] != p.name} for p in procs}
        order: list[str] = []
        remaining = [p.name for p in procs]
        while remaining:
            ready = [n for n in remaining if deps[n] <= set(order)]
            pick = ready[0] if ready else remaining[0]
            order.append(pick)
            remaining.remove(pick)
        return order

    def start_all(self) -> None:
        """Start every process in dependency order, waiting for each to report ready; control
        requests are answered meanwhile (``status``; ``down`` aborts the start).

        Raises:
            StartupError: a process did not become RUNNING: it failed with a ConfigError or
                StartupError (not retried; the message names the process and the cause), went FATAL
                after its restarts, or timed out; or ``down``, SIGTERM or SIGINT came first.
        """
        self.start_launcher()
        for name in self.start_order():
            p = self.procs[name]
            self._spawn(p)
            deadline = self.clock() + p.cfg.ready_timeout_ms * 1_000_000
            while p.state not in (State.RUNNING, State.FATAL):
                self.tick()
                if self.sock is not None:
                    self.serve_control()
                if self.stopping:
                    raise StartupError(f"start-up stopped (down, SIGTERM or SIGINT) while process {name} was starting")
                if self.clock() > deadline:
                    raise StartupError(f"process {name} did not report ready within {p.cfg.ready_timeout_ms} ms (state {p.state.value})")
                time.sleep(self.cfg.supervisor.poll_interval_ms / 1000)
            if p.state is State.FATAL:
                if p.permanent:
                    raise StartupError(f"process {name} cannot start: {p.permanent} "
                                       f"(not retried: a restart cannot fix this); see {self.log_dir / (name + '.out')}")
                raise StartupError(f"process {name} failed to start: {p.last_exit}; see {self.log_dir / (name + '.log')}")

    def start_launcher(self) -> None:
        """Set every stage's single-thread environment and, with ``launcher = "fork-server"`` (not
        under mp-queue), become a child subreaper and start the fork server. A fork server that
        cannot start is logged and shown; the stages are then exec'd."""
        for k, v in SINGLE_THREAD_ENV.items():
            os.environ.setdefault(k, v)
        sup = self.cfg.supervisor
        if sup.transport == "mp-queue" or self.mp_ctx is not None:
            self.launcher = "spawn (mp-queue)"
            return
        if sup.launcher == "exec":
            self.launcher = "exec"
            return
        modules = ["pipeline.runtime.runner"]
        for p in self.cfg.processes:
            mod = p.module.split(":", 1)[0]
            if mod not in modules:
                modules.append(mod)
        t0 = self.clock()
        try:
            become_subreaper()
            self.forkserver = ForkServer.start(self.config_path, modules, str(self.log_dir / "forkserver.out"))
        except (ForkServerError, OSError) as exc:
            self.launcher = f"exec (fork server unavailable: {exc})"
            self.log.warning("forkserver_unavailable", error=str(exc))
            self._say(f"fork server unavailable, stages are exec'd: {exc}")
            return
        self.launcher = f"fork-server (pid {self.forkserver.pid})"
        self.log.info("forkserver_ready", pid=self.forkserver.pid, preloaded=self.forkserver.preloaded,
                      failed=self.forkserver.failed, ms=(self.clock() - t0) // 1_000_000)

    def _drop_forkserver(self, why: str) -> None:
        self.log.warning("forkserver_lost", error=why)
        self._say(f"fork server lost, stages are exec'd from now on: {why}")
        self.launcher = f"exec (fork server lost: {why})"
        server, self.forkserver = self.forkserver, None
        if server is not None:
            server.close(timeout_s=0.5)

    # ------------------------------------------------------------------------------ processes
    def _set(self, p: Proc, state: State, **fields) -> None:
        if p.state is not state:
            self.log.info("state", stage=p.name, frm=p.state.value, to=state.value, pid=p.pid, **fields)
            p.state = state
            p.state_since_ns = self.clock()

    def _spawn(self, p: Proc) -> None:
        rec = self.table.record(p.index)
        rec.set(PT.OFF_PHASE, PT.PHASE_NONE)
        rec.set(PT.OFF_READY_NS, 0)
        argv = ["--config", self.config_path, "--name", p.name, "--core", str(p.core), "--wait", p.wait,
                "--supervisor-pid", str(os.getpid())]
        out_path = self.log_dir / f"{p.name}.out"
        p.popen = None
        p.permanent = ""
        if self.mp_ctx is not None:
            p.popen = self._spawn_mp(p, argv)
        elif self.forkserver is not None:
            try:
                p.popen = self.forkserver.spawn(argv, str(out_path), p.name)
            except ForkServerError as exc:
                self._drop_forkserver(str(exc))
        if p.popen is None:
            out = open(out_path, "ab")
            try:
                p.popen = subprocess.Popen([sys.executable, "-m", "pipeline.runtime.runner", *argv],
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True)
            finally:
                out.close()
        p.pid = p.popen.pid
        p.started_ns = self.clock()
        self._set(p, State.STARTING)

    def _spawn_mp(self, p: Proc, argv: list[str]) -> SpawnedProcess:
        """Transport mp-queue: a spawn process running ``run_spawned`` with the queues of its rings."""
        from pipeline.runtime.runner import run_spawned  # (numpy and the agent protocol: not for every CLI call)

        queues = {rn: self.mp_queues[rn] for rn in (*p.cfg.inputs, *p.cfg.outputs) if rn in self.mp_queues}
        proc = self.mp_ctx.Process(target=run_spawned, args=(argv, queues, str(self.log_dir / f"{p.name}.out")),
                                   name=f"pipeline.runtime.runner:{p.name}")
        with _environ(RUNNER_ENV, self.config_path):
            proc.start()
        return SpawnedProcess(proc)

    def _reap(self, p: Proc) -> int | None:
        """Exit status if the process has exited (reaped), else None."""
        if p.popen is None:
            return None
        rc = p.popen.poll()
        return rc

    def _describe_exit(self, rc: int) -> str:
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit code {rc}"

    def _on_death(self, p: Proc, why: str) -> None:
        now = self.clock()
        p.last_exit = why
        p.popen = None
        p.down_ns = now
        if p.state is State.STOPPING or self.stopping:
            self._set(p, State.STOPPED, why=why)
            if p.then_start and not self.stopping:
                p.then_start = False
                p.restarts += 1
                self._spawn(p)
            return
        self._set(p, State.EXITED, why=why)
        pol = p.cfg.restart
        if p.started_ns and now - p.started_ns >= pol.stable_after_ms * 1_000_000:
            p.consecutive = 0
        window = pol.window_ms * 1_000_000
        while p.restart_times and now - p.restart_times[0] > window:
            p.restart_times.popleft()
        if len(p.restart_times) >= pol.max_restarts:
            self._set(p, State.FATAL, why=f"{len(p.restart_times)} restarts within {pol.window_ms} ms; last: {why}")
            self.halt(ControlReason.STAGE_FATAL, f"process {p.name} is FATAL")
            return
        delay_ms = min(pol.backoff_initial_ms * pol.backoff_multiplier ** p.consecutive, pol.backoff_max_ms)
        p.consecutive += 1
        p.restart_times.append(now)
        p.backoff_until_ns = now + int(delay_ms * 1_000_000)
        self._set(p, State.BACKOFF, delay_ms=int(delay_ms))

    def _start_failure_cause(self, p: Proc) -> str:
        """Why a start failed, as the runner told it: the last ``NAME: start failed: ...`` line of
        ``logs/NAME.out`` (complete, unlike the process table's 160 bytes), else the table's last
        error, else the exit code."""
        marker = f"{p.name}: start failed: "
        try:
            with open(self.log_dir / f"{p.name}.out", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - 16_384, 0))
                tail = f.read().decode("utf-8", "replace")
            for line in reversed(tail.splitlines()):
                if line.startswith(marker):
                    return line[len(marker):].strip()
        except OSError:
            pass
        rec = self.table.record(p.index)
        text = rec.last_error() if rec.get(PT.OFF_PID) == p.pid else ""
        if text.startswith("start failed: "):
            return text[len("start failed: "):]
        return f"exit code {EXIT_START_PERMANENT} (start failed for good)"

    def _start_failed_for_good(self, p: Proc) -> None:
        """A start that failed with ConfigError / StartupError: FATAL at once, no restart (the same
        start would fail the same way); trading is halted as for any FATAL process."""
        cause = self._start_failure_cause(p)
        p.last_exit = f"start failed: {cause}"
        p.permanent = cause
        p.popen = None
        p.down_ns = self.clock()
        self.log.error("start_failed_permanently", stage=p.name, pid=p.pid, cause=cause)
        self._set(p, State.FATAL, why=p.last_exit)
        self.halt(ControlReason.STAGE_FATAL, f"process {p.name} cannot start: {cause}")

    def tick(self) -> None:
        """One pass of the state machine over every process."""
        now = self.clock()
        for p in self.procs.values():
            rec = self.table.record(p.index)
            if p.state in (State.STARTING, State.RUNNING, State.STOPPING):
                rc = self._reap(p)
                if rc is not None:
                    if rc == EXIT_START_PERMANENT and p.state is State.STARTING and not self.stopping:
                        self._start_failed_for_good(p)
                    else:
                        self._on_death(p, self._describe_exit(rc))
                    continue
            if p.state is State.STARTING:
                if rec.get(PT.OFF_PHASE) == PT.PHASE_READY and rec.get(PT.OFF_PID) == p.pid:
                    self._set(p, State.RUNNING)
                    if p.down_ns:
                        p.recoveries_ns.append(self.clock() - p.down_ns)
                        p.down_ns = 0
                elif now - p.started_ns > p.cfg.ready_timeout_ms * 1_000_000:
                    self.log.warning("start_timeout", stage=p.name, pid=p.pid)
                    self._kill_and_reap(p)
                    self._on_death(p, "did not report ready in time")
            elif p.state is State.RUNNING:
                age = now - rec.get(PT.OFF_HEARTBEAT_NS)
                if age > p.cfg.heartbeat_timeout_ms * 1_000_000:
                    self.log.warning("heartbeat_lost", stage=p.name, pid=p.pid, age_ms=age // 1_000_000)
                    self._kill_and_reap(p)
                    self._on_death(p, f"no heartbeat for {age // 1_000_000} ms")
            elif p.state is State.BACKOFF:
                if now >= p.backoff_until_ns:
                    p.restarts += 1
                    self._spawn(p)
            elif p.state is State.STOPPING:
                if now >= p.stop_deadline_ns:
                    self.log.warning("stop_grace_expired", stage=p.name, pid=p.pid)
                    self._kill_and_reap(p)
                    self._on_death(p, "SIGKILL after the grace period")

    def _kill_and_reap(self, p: Proc) -> None:
        if p.popen is None:
            return
        try:
            p.popen.kill()
        except ProcessLookupError:
            pass
        try:
            p.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            self.log.error("unkillable", stage=p.name, pid=p.pid)

    def stop_proc(self, p: Proc, then_start: bool = False) -> None:
        """SIGTERM now; SIGKILL after stop_grace_ms (driven by tick)."""
        if p.state in (State.STARTING, State.RUNNING) and p.popen is not None:
            p.then_start = then_start
            self._set(p, State.STOPPING)
            p.stop_deadline_ns = self.clock() + self.cfg.supervisor.stop_grace_ms * 1_000_000
            try:
                p.popen.terminate()
            except ProcessLookupError:
                pass
        elif then_start and p.state in (State.FATAL, State.EXITED, State.BACKOFF, State.STOPPED):
            p.consecutive = 0
            p.restart_times.clear()
            p.restarts += 1
            self._spawn(p)

    # ------------------------------------------------------------------------------ trading control
    def halt(self, reason: ControlReason, why: str) -> bool:
        """Write CONTROL HALT to the control ring. Returns False when there is no control ring."""
        self.halted = True
        return self._control(ControlCmd.HALT, reason, why)

    def kill_switch(self) -> bool:
        """Write CONTROL KILL_SWITCH (reason OPERATOR) to the control ring: the risk gateway halts,
        cancels every working order and stays halted until a person resumes. Returns False when there
        is no control ring."""
        self.halted = True
        return self._control(ControlCmd.KILL_SWITCH, ControlReason.OPERATOR, "operator kill switch")

    def resume(self) -> bool:
        self.halted = False
        return self._control(ControlCmd.RESUME, ControlReason.OPERATOR, "operator resume")

    def _control(self, cmd: ControlCmd, reason: ControlReason, why: str) -> bool:
        if self.control_writer is None:
            self.log.error("control_unavailable", cmd=cmd.name, why=why, note="no supervisor.control_ring configured")
            return False
        now = self.clock()
        ok = self.control_writer.write(Kind.CONTROL, pack_control(cmd, reason, now), now, timeout_ns=1_000_000_000)
        self.log.warning("control_sent", cmd=cmd.name, reason=reason.name, why=why, ok=ok)
        return ok

    # ------------------------------------------------------------------------------ control plane
    def handle_request(self, req: dict) -> dict:
        cmd = req.get("cmd")
        if cmd == "status":
            return {"ok": True, "status": self.status()}
        if cmd == "restart":
            p = self.procs.get(req.get("name", ""))
            if p is None:
                return {"ok": False, "error": f"unknown process {req.get('name')!r}; known: {sorted(self.procs)}"}
            if not self.all_started:
                return {"ok": False, "error": "the supervisor is still starting its processes; try again once they run"}
            self.log.info("restart_requested", stage=p.name)
            self.stop_proc(p, then_start=True)
            return {"ok": True, "state": p.state.value}
        if cmd == "halt":
            ok = self.halt(ControlReason.OPERATOR, "operator halt")
            return {"ok": ok, **({} if ok else {"error": "no control ring configured"})}
        if cmd == "kill-switch":
            ok = self.kill_switch()
            return {"ok": ok, **({} if ok else {"error": "no control ring configured"})}
        if cmd == "resume":
            ok = self.resume()
            return {"ok": ok, **({} if ok else {"error": "no control ring configured"})}
        if cmd == "down":
            self.stopping = True
            return {"ok": True}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    def serve_control(self) -> None:
        """Answer every pending control request (non-blocking)."""
        while True:
            try:
                raw = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                req = orjson.loads(raw)
                if not isinstance(req, dict):
                    raise ValueError("request must be a JSON object")
                resp = self.handle_request(req)
            except Exception as exc:  # a bad request never stops the supervisor
                self.log.warning("bad_control_request", error=str(exc))
                resp = {"ok": False, "error": f"bad request: {exc}"}
            self.sock.send(orjson.dumps(resp))

    # ------------------------------------------------------------------------------ status
    def status(self) -> dict:
        now = self.clock()
        procs = []
        for p in self.procs.values():
            rec = self.table.record(p.index)
            ins = [self.rings[r].stats() for r in p.cfg.inputs]
            procs.append({
                "name": p.name, "state": p.state.value, "pid": p.pid if p.popen else 0, "core": p.core,
                "wait": p.wait, "restarts": p.restarts,
                "msgs_in": rec.get(PT.OFF_MSGS_IN), "msgs_out": rec.get(PT.OFF_MSGS_OUT),
                "depth": sum(s.depth for s in ins), "drops": sum(s.dropped for s in ins),
                "crc_errors": sum(s.crc_errors for s in ins),
                "p50_us": rec.get(PT.OFF_LAT_P50_NS) / 1000, "p99_us": rec.get(PT.OFF_LAT_P99_NS) / 1000,
                "heartbeat_age_ms": (now - rec.get(PT.OFF_HEARTBEAT_NS)) // 1_000_000 if rec.get(PT.OFF_HEARTBEAT_NS) else None,
                "errors": rec.get(PT.OFF_ERRORS), "last_error": rec.last_error() or p.last_exit,
                "recoveries_ms": [round(x / 1e6, 1) for x in p.recoveries_ns],
                "stage": rec.stage_stats(),
            })
        rings = [{"name": n, **{k: getattr(s, k) for k in ("write_cursor", "read_cursor", "depth", "dropped", "crc_errors", "full_events", "capacity", "full_policy")}}
                 for n, s in ((n, r.stats()) for n, r in self.rings.items())]
        return {"supervisor_pid": os.getpid(), "halted": self.halted, "plan": self.plan_note, "launcher": self.launcher,
                "run_epoch": self.run_epoch, "processes": procs, "rings": rings}

    def render_status(self, interval_s: float) -> str:
        """The live view, with message rates since the last render."""
        st = self.status()
        view = format_status(st, self._last_status, interval_s)
        self._last_status = {r["name"]: (r["msgs_in"], r["msgs_out"]) for r in st["processes"]}
        return view

    # ------------------------------------------------------------------------------ lifecycle
    def up(self, *, status_every_s: float = 1.0, run_for_s: float | None = None) -> int:
        """Lock, check, clean, create (a fresh run epoch among it), start, then supervise until
        `down`, SIGTERM/SIGINT or ``run_for_s``. Returns 0. Whatever fails after the lock is taken,
        everything created is removed and the lock let go (``down``) before the exception leaves.

        Raises:
            StartupError: another supervisor runs for this run dir (nothing is touched; the message
                names its pid); the run dir, pid file, run epoch, a segment or the control socket
                cannot be created (the path and the OS's reason); the GPU budget fails; a process
                cannot start (its name and the cause: at once for a ConfigError / StartupError of
                its own, after its restart policy gives up for anything else).
        """
        self.acquire_lock()  # before anything else: a second `up` stops here
        try:
            self.preflight()
            removed = self.clean_stale()
            if removed:
                self.log.warning("stale_run_cleaned", removed=removed)
                self._say(f"cleaned a stale run: {', '.join(removed)}")
            self.create()
            self.open_control()
            self._say(self.plan_note)
            signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
            signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
            self.start_all()
            self.all_started = True
            self.log.info("all_running", processes=list(self.procs))
            poll_s = self.cfg.supervisor.poll_interval_ms / 1000
            t0 = time.monotonic()
            next_status = t0
            while not self.stopping:
                self.tick()
                self.serve_control()
                now = time.monotonic()
                if self.out is not None and status_every_s and now >= next_status:
                    self._show(self.render_status(status_every_s))
                    next_status = now + status_every_s
                if run_for_s is not None and now - t0 >= run_for_s:
                    break
                time.sleep(poll_s)
        finally:
            self.down()
        return 0

    def _say(self, text: str) -> None:
        if self.out is not None:
            print(text, file=self.out, flush=True)

    def _show(self, view: str) -> None:
        if self.out is None:
            return
        if getattr(self.out, "isatty", lambda: False)():
            self.out.write("\x1b[H\x1b[2J" + view + "\n")
        else:
            self.out.write(view + "\n\n")
        self.out.flush()

    def down(self) -> None:
        """Stop every process (SIGTERM, grace, SIGKILL), remove every resource (the run epoch and,
        last, the pid file), then let go of the run lock. Idempotent; copes with a partial start."""
        self.stopping = True
        for name in reversed(self.start_order()):  # producers first, so consumers drain
            if name in self.procs:
                self.stop_proc(self.procs[name])
        deadline = self.clock() + self.cfg.supervisor.stop_grace_ms * 1_000_000
        while any(p.popen is not None for p in self.procs.values()):
            for p in self.procs.values():
                if p.popen is not None and p.popen.poll() is not None:
                    self._on_death(p, self._describe_exit(p.popen.returncode))
            if self.clock() > deadline:
                for p in self.procs.values():
                    if p.popen is not None:
                        self.log.warning("stop_grace_expired", stage=p.name, pid=p.pid)
                        self._kill_and_reap(p)
                        self._on_death(p, "SIGKILL after the grace period")
                break
            time.sleep(0.01)
        if self.forkserver is not None:
            self.forkserver.close()
            self.forkserver = None
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        if self.zctx is not None:
            self.zctx.term()
            self.zctx = None
        self.control_writer = None
        for q in self.mp_queues.values():
            q.close()
        self.mp_queues = {}  # their semaphores are unlinked as they are collected (or at exit)
        for r in self.rings.values():
            r.close()
        self.rings.clear()
        if self.table is not None:
            self.table.close()
            self.table = None
        # the pid file is the lock's: removed below while held; a second `down` leaves it (by then
        # it may be the next supervisor's)
        removed = clean_stale(self.cfg, kill_runners=False, keep_pid_file=self.lock.held or self.lock.was_held)
        if self.lock.release(unlink=True):  # the pid file goes while still locked; `down` (CLI) waits for that
            removed.append(str(self.lock.path))
        self.log.info("down", removed=removed)


def format_status(st: dict, prev: dict[str, tuple[int, int]] | None = None, interval_s: float = 0.0) -> str:
    """A status snapshot as a table; with ``prev`` counters and ``interval_s``, rates per second."""
    lines = [f"pipeline  supervisor pid {st['supervisor_pid']}  {'HALTED' if st['halted'] else 'trading'}  {st['plan']}  "
             f"launcher: {st['launcher']}",
             f"{'process':<10} {'state':<9} {'pid':>7} {'core':>4} {'rst':>4} {'in/s':>9} {'out/s':>9} {'depth':>6} "
             f"{'drops':>6} {'crc':>5} {'p50us':>8} {'p99us':>8}  last error"]
    for row in st["processes"]:
        pin, pout = (prev or {}).get(row["name"], (None, None))
        if interval_s and pin is not None and row["msgs_in"] >= pin and row["msgs_out"] >= pout:
            rin = f"{(row['msgs_in'] - pin) / interval_s:9.0f}"
            rout = f"{(row['msgs_out'] - pout) / interval_s:9.0f}"
        else:  # no earlier sample, or the process restarted (its counters began again)
            rin = rout = f"{'-':>9}"
        lines.append(f"{row['name']:<10} {row['state']:<9} {row['pid']:>7} {row['core']:>4} {row['restarts']:>4} {rin} {rout} "
                     f"{row['depth']:>6} {row['drops']:>6} {row['crc_errors']:>5} {row['p50_us']:>8.1f} {row['p99_us']:>8.1f}  "
                     f"{(row['last_error'] or '')[:48]}")
    if not st["processes"]:
        lines.append("(no stage processes configured yet)")
    for row in st["processes"]:
        if row.get("stage"):
            lines.append(f"{row['name']:<10} " + " ".join(f"{k}={v}" for k, v in row["stage"].items()))
    for r in st["rings"]:
        lines.append(f"ring {r['name']:<10} {r['full_policy']:<12} depth {r['depth']:>6}/{r['capacity']:<7} "
                     f"written {r['write_cursor']:>10} dropped {r['dropped']:>6} crc_errors {r['crc_errors']:>5}")
    return "\n".join(lines)


def resources_of(cfg: Config) -> tuple[list[str], str]:
    """(ring segment names, process table name) of a configuration."""
    return [cfg.segment_name(r.name) for r in cfg.rings], PT.segment_name(cfg.supervisor.shm_prefix)


def clean_stale(cfg: Config, *, kill_runners: bool = True, keep_pid_file: bool = False) -> list[str]:
    """Remove every resource of this configuration: runners still alive (from the process table),
    ring segments and semaphores, the process table, the control socket, the run epoch, the pid
    file (unless ``keep_pid_file``: the caller holds the run lock on it), and the zmq transport
    sockets. Returns what was removed. Call it only while no supervisor of the run is alive (the
    CLI's ``down`` holds the run lock while it does).
    """
    removed: list[str] = []
    if kill_runners:
        try:
            table = PT.ProcTable.attach(cfg.supervisor.shm_prefix)
        except Exception:
            table = None
        if table is not None:
            for i in range(table.n):
                pid = table.record(i).get(PT.OFF_PID)
                if pid and pid != os.getpid() and _pid_alive(pid) and _is_our_runner(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                        removed.append(f"runner pid {pid}")
                    except ProcessLookupError:
                        pass
            table.close()
    segs, table_name = resources_of(cfg)
    for s in segs:
        if Ring.unlink(s):
            removed.append(s)
    if PT.ProcTable.unlink(cfg.supervisor.shm_prefix):
        removed.append(table_name)
    run_dir = Path(cfg.supervisor.run_dir)
    ep = cfg.control_endpoint()
    paths = [run_dir / EPOCH_FILE] + ([] if keep_pid_file else [run_dir / PID_FILE])
    if ep.startswith("ipc://"):
        paths.append(Path(ep[len("ipc://"):]))
    paths += list(run_dir.glob(f"zmq-{cfg.supervisor.shm_prefix}-*.sock")) if run_dir.exists() else []
    for path in paths:
        try:
            path.unlink()
            removed.append(str(path))
        except (FileNotFoundError, NotADirectoryError):
            pass
    return removed
