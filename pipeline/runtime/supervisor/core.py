"""The supervisor loop: creates the rings, starts, watches, pins and restarts every process.

One ``tick`` every ``poll_interval_ms`` observes each process and feeds what it saw to the pure
state machine (``states.transition``), then carries out the actions it returns:

- death is seen through ``waitpid``; a hang (e.g. SIGSTOP) through the heartbeat age in the process
  table, with the process's threads read from /proc once it is late (``liveness``: a stopped or idle
  one is hung, a busy one is not, up to ``busy_timeout_ms``), after which the process is SIGKILLed
  and treated as dead; a process that does not report ready within ``ready_timeout_ms`` likewise;
- restarts follow the process's declarative ``RestartPolicy`` (back-off with a cap, a flapping
  limit); a FATAL process makes the supervisor write CONTROL HALT to the ``control_ring``;
- a stage whose start fails with ``ConfigError`` or ``StartupError`` (runner exit code 78) is not
  retried: it goes FATAL at once (trading is halted as for flapping) and, during ``up``, ``up``
  fails naming the stage and the cause (the runner's ``NAME: start failed: ...`` line of
  ``logs/NAME.out``). Other start failures (exit code 1) follow the restart policy.

``up``, in order: every stage's params are checked against its agent class's ``params_type``
(``preflight``: a typo in a param stops ``up`` here, touching nothing); the run lock is taken
(``runlock``: a second ``up`` of the same run dir fails at once naming the running supervisor);
the GPU budget is checked; a stale run (a supervisor that was killed) is cleaned (``cleanup``); the
run epoch (a fresh random 64-bit number in ``<run_dir>/run.epoch``, 0600,
pipeline/runtime/runepoch.py; a stage restart keeps it), the process table and the rings are
created; the control socket is bound (``controlplane``; served during start-up too: ``down``
aborts a start); the stages start consumers first (``launcher``), each waited for until ready.

``down``: SIGTERM to every process, ``stop_grace_ms``, then SIGKILL; then every segment, the
semaphores, the control socket, the run epoch and the pid file are removed, and the lock let go.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from pipeline.runtime import proctable as PT
from pipeline.runtime.config import Config, ProcessConfig
from pipeline.runtime.errors import StartupError
from pipeline.runtime.log import EventLog
from pipeline.runtime.ops.server import start_ops_server
from pipeline.runtime.pinning import available_cores, plan_cores
from pipeline.runtime.runepoch import EPOCH_FILE, write_run_epoch
from pipeline.runtime.supervisor.cleanup import clean_stale
from pipeline.runtime.supervisor.controlplane import ControlServer
from pipeline.runtime.supervisor.launcher import Launcher
from pipeline.runtime.supervisor.liveness import HUNG, Liveness
from pipeline.runtime.supervisor.preflight import check_gpu_budget, check_stage_params
from pipeline.runtime.supervisor.runlock import PID_FILE, RunLock
from pipeline.runtime.supervisor.states import (
    EXIT_START_PERMANENT, Action, Event, Lifecycle, State, describe_exit, transition,
)
from pipeline.runtime.supervisor.budget import LatencyGuard, Reading
from pipeline.runtime.supervisor.status import process_row, ring_row
from pipeline.runtime.supervisor.termview import make_view
from pipeline.runtime.transport import doorbell_ring
from pipeline.trading.messages import ControlCmd, ControlReason, Kind, pack_control
from ringbuf import Ring, layout as L
from ringbuf.ring import open_doorbell


class Proc:
    """The supervisor's view of one process: its ``Lifecycle`` (the state machine's part) and the
    process it runs now."""

    def __init__(self, cfg: ProcessConfig, index: int, core: int, wait: str):
        self.cfg = cfg
        self.name = cfg.name
        self.index = index
        self.core = core
        self.wait = wait
        self.life = Lifecycle()
        self.popen = None  # subprocess.Popen | launcher.SpawnedProcess | forkserver.ForkedProcess
        self.pid = 0
        self.stop_deadline_ns = 0  # STOPPING: when SIGTERM turns into SIGKILL
        self.last_exit: str = ""
        self.down_ns = 0  # when it was last seen dead (for time-to-RUNNING)
        self.recoveries_ns: list[int] = []  # death seen -> RUNNING again, per restart
        self.permanent = ""  # why its last start failed for good (ConfigError / StartupError), else ""

    @property
    def state(self) -> State:
        return self.life.state

    @property
    def restarts(self) -> int:
        """Restarts since the supervisor started."""
        return self.life.restarts


class Supervisor:
    """Owns the rings and processes of one configuration."""

    def __init__(self, cfg: Config, config_path: str | os.PathLike, log: EventLog, *, clock=time.monotonic_ns,
                 out=None):
        self.cfg = cfg
        self.config_path = str(Path(config_path).resolve())
        self.log = log
        self.clock = clock
        self.view = make_view(out) if out is not None else None  # the status view of `up` (None: none)
        self.guard = LatencyGuard(cfg.latency_guard)  # the latency-budget guard (budget.py)
        self.liveness = Liveness()  # late heartbeats: hung or busy (liveness.py)
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
        self.control = ControlServer(log)
        self.ops = None  # the ops server (/metrics, /health, dashboard; pipeline/runtime/ops/), when ops_port is set
        self.launcher = Launcher(cfg, self.config_path, log, self._say)
        self.halted = False
        self.stopping = False
        self._last_status: dict[str, tuple[int, int]] = {}
        self.plan_note = ""

    # ------------------------------------------------------------------------------ start-up
    def acquire_lock(self) -> None:
        """Take the run lock (``RunLock``: flock on the pid file, which then holds our pid); before
        anything is created, so that two ``up`` at the same instant cannot both go on.

        Raises:
            StartupError: another supervisor holds it (the message names its pid), or the run dir
                or pid file cannot be created or written (the path and the OS's reason).
        """
        self.lock.acquire()
        self.log.info("run_lock_taken", path=str(self.lock.path), pid=os.getpid())

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
        ring (mode 0600), the mp-queue queues, and the core plan.

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
        self.launcher.create_queues()
        plan = plan_cores([(p.name, p.core, p.wait) for p in self.cfg.processes], available_cores())
        self.plan_note = plan.note
        self.log.info("core_plan", note=plan.note, cores=plan.cores, wait=plan.wait)
        for i, p in enumerate(self.cfg.processes):
            self.procs[p.name] = Proc(p, i, plan.cores[p.name], plan.wait[p.name])

    def open_control(self) -> str:
        """Bind the control socket (``ControlServer.open``). Returns its endpoint.

        Raises:
            StartupError: the endpoint is not ``ipc://``, or it cannot be bound (the endpoint and why).
        """
        return self.control.open(self.cfg.control_endpoint())

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
        """Start the launcher, then every process in dependency order, waiting for each to report
        ready; control requests are answered meanwhile (``status``; ``down`` aborts the start).

        Raises:
            StartupError: a process did not become RUNNING: it failed with a ConfigError or
                StartupError (not retried; the message names the process and the cause), went FATAL
                after its restarts, or timed out; or ``down``, SIGTERM or SIGINT came first.
        """
        self.launcher.start()
        for name in self.start_order():
            p = self.procs[name]
            self._spawn(p)
            deadline = self.clock() + p.cfg.ready_timeout_ms * 1_000_000
            while p.state not in (State.RUNNING, State.FATAL):
                self.tick()
                if self.control.is_open:
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

    # ------------------------------------------------------------------------------ processes
    def _apply(self, p: Proc, event: Event, why: str = "") -> None:
        """Feed ``event`` to the state machine; log every state entered; carry out the actions."""
        step = transition(p.life, event, p.cfg.restart, self.clock(), why=why, down=self.stopping)
        frm = p.life.state
        p.life = step.life
        for entered in step.entered:
            self.log.info("state", stage=p.name, frm=frm.value, to=entered.state.value, pid=p.pid, **entered.log_fields())
            frm = entered.state
        for action in step.actions:
            if action is Action.SPAWN:
                self._spawn(p)
            elif action is Action.TERMINATE:
                p.stop_deadline_ns = self.clock() + self.cfg.supervisor.stop_grace_ms * 1_000_000
                try:
                    p.popen.terminate()
                except ProcessLookupError:
                    pass
            elif action is Action.HALT:
                what = f"cannot start: {p.permanent}" if p.permanent else "is FATAL"
                self.halt(ControlReason.STAGE_FATAL, f"process {p.name} {what}")

    def _spawn(self, p: Proc) -> None:
        rec = self.table.record(p.index)
        rec.set(PT.OFF_PHASE, PT.PHASE_NONE)
        rec.set(PT.OFF_READY_NS, 0)
        argv = ["--config", self.config_path, "--name", p.name, "--core", str(p.core), "--wait", p.wait,
                "--supervisor-pid", str(os.getpid())]
        p.popen = None
        p.permanent = ""
        p.popen = self.launcher.spawn(p.cfg, argv)
        p.pid = p.popen.pid
        self._apply(p, Event.SPAWNED)

    def _on_death(self, p: Proc, why: str) -> None:
        p.last_exit = why
        p.popen = None
        p.down_ns = self.clock()
        self._apply(p, Event.EXITED, why)

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
        self._apply(p, Event.START_FAILED, p.last_exit)

    def tick(self) -> None:
        """One pass of the state machine over every process: deaths, ready flags, start timeouts,
        lost heartbeats, back-offs over, stop grace periods over."""
        now = self.clock()
        for p in self.procs.values():
            rec = self.table.record(p.index)
            if p.state in (State.STARTING, State.RUNNING, State.STOPPING):
                rc = p.popen.poll() if p.popen is not None else None  # reaps it when it exited
                if rc is not None:
                    if rc == EXIT_START_PERMANENT and p.state is State.STARTING and not self.stopping:
                        self._start_failed_for_good(p)
                    else:
                        self._on_death(p, describe_exit(rc))
                    continue
            if p.state is State.STARTING:
                if rec.get(PT.OFF_PHASE) == PT.PHASE_READY and rec.get(PT.OFF_PID) == p.pid:
                    self._apply(p, Event.READY)
                    if p.down_ns:
                        p.recoveries_ns.append(self.clock() - p.down_ns)
                        p.down_ns = 0
                elif now - p.life.started_ns > p.cfg.ready_timeout_ms * 1_000_000:
                    self.log.warning("start_timeout", stage=p.name, pid=p.pid)
                    self._kill_and_reap(p)
                    self._on_death(p, "did not report ready in time")
            elif p.state is State.RUNNING:
                beat = rec.get(PT.OFF_HEARTBEAT_NS)
                verdict, why = self.liveness.judge(p.pid, beat, now, p.cfg.heartbeat_timeout_ms * 1_000_000,
                                                   p.cfg.busy_timeout_ms * 1_000_000)
                if verdict == HUNG:
                    age_ms = (now - beat) // 1_000_000
                    self.log.warning("heartbeat_lost", stage=p.name, pid=p.pid, age_ms=age_ms, why=why)
                    self.liveness.forget(p.pid)
                    self._kill_and_reap(p)
                    self._on_death(p, f"no heartbeat for {age_ms} ms")
                elif why:
                    self.log.warning("heartbeat_late", stage=p.name, pid=p.pid, why=why)
            elif p.state is State.BACKOFF:
                if now >= p.life.backoff_until_ns:
                    self._apply(p, Event.BACKOFF_ELAPSED)
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
        """SIGTERM now; SIGKILL after stop_grace_ms (driven by tick). With ``then_start``, start it
        again once stopped, or at once when it is not running (FATAL, EXITED, BACKOFF, STOPPED;
        its restart history is reset)."""
        self._apply(p, Event.RESTART if then_start else Event.STOP)

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
        self.guard.resume()  # only an operator's resume lowers the latency guard
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
        """The answer to one control request (``controlplane``)."""
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
        self.control.serve(self.handle_request)

    # ------------------------------------------------------------------------------ status
    def status(self) -> dict:
        now = self.clock()
        procs = [process_row(p, self.table.record(p.index), [self.rings[r] for r in p.cfg.inputs], now)
                 for p in self.procs.values()]
        return {"supervisor_pid": os.getpid(), "halted": self.halted, "plan": self.plan_note,
                "launcher": self.launcher.description, "run_epoch": self.run_epoch, "processes": procs,
                "rings": [ring_row(n, r) for n, r in self.rings.items()], "latency_guard": self.guard.snapshot(now)}

    def _show_status(self, interval_s: float) -> None:
        """The status view, with message rates since the last one."""
        st = self.status()
        self.view.show(st, self._last_status, interval_s, symbols={i.id: i.symbol for i in self.cfg.instruments})
        self._last_status = {r["name"]: (r["msgs_in"], r["msgs_out"]) for r in st["processes"]}

    def _guard_tick(self) -> None:
        """The latency guard's look (``budget.LatencyGuard``): each budgeted RUNNING stage's published p99
        in; the CONTROL it calls for out, with reason LATENCY_BUDGET, logged (``latency_guard``)."""
        recs = {n: self.table.record(p.index) for n, p in self.procs.items()
                if n in self.guard.stages and p.state is State.RUNNING}
        readings = {n: Reading(r.get(PT.OFF_PID), r.get(PT.OFF_HEARTBEAT_NS), r.get(PT.OFF_MSGS_OUT),
                               r.get(PT.OFF_LAT_P99_NS)) for n, r in recs.items()}
        ctl = next((p for p in self.procs.values() if self.cfg.supervisor.control_ring in p.cfg.inputs), None)
        live = ctl is not None and ctl.state is State.RUNNING  # the gateway's published state, when it runs
        risk_state = self.table.record(ctl.index).stage_stats().get("state") if live else None
        cmd = self.guard.update(self.clock(), readings, risk_state)
        if cmd is not None:
            self.halted = self.halted or cmd is ControlCmd.HALT
            self.log.warning("latency_guard", cmd=cmd.name, guard=self.guard.level.name, reason=self.guard.reason,
                             risk_state=risk_state)
            self._control(cmd, ControlReason.LATENCY_BUDGET, self.guard.reason)

    # ------------------------------------------------------------------------------ lifecycle
    def up(self, *, status_every_s: float = 1.0, run_for_s: float | None = None) -> int:
        """Check every stage's params, lock, check the GPU budget, clean, create (a fresh run epoch
        among it), start, then supervise until `down`, SIGTERM/SIGINT or ``run_for_s``. Returns 0.
        Whatever fails after the lock is taken, everything created is removed and the lock let go
        (``down``) before the exception leaves.

        Raises:
            ConfigError: a process's params do not convert to its agent class's ``params_type``
                (the process and the field; nothing is touched, nothing started).
            StartupError: an agent class cannot be loaded (nothing is touched); another supervisor
                runs for this run dir (nothing is touched; the message names its pid); the run dir,
                pid file, run epoch, a segment or the control socket cannot be created (the path and
                the OS's reason); the GPU budget fails; a process cannot start (its name and the
                cause: at once for a ConfigError / StartupError of its own, after its restart policy
                gives up for anything else).
        """
        check_stage_params(self.cfg)  # touches nothing: before the lock, like the config's own checks
        self.acquire_lock()  # before anything is created: a second `up` stops here
        try:
            check_gpu_budget(self.cfg, self.log)
            removed = self.clean_stale()
            if removed:
                self.log.warning("stale_run_cleaned", removed=removed)
                self._say(f"cleaned a stale run: {', '.join(removed)}")
            self.create()
            self.open_control()
            self.ops = start_ops_server(self.cfg, self.log, self, self._say)  # its own thread; None when off
            self._say(self.plan_note)
            signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
            signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
            self.start_all()
            self.all_started = True
            self.log.info("all_running", processes=list(self.procs))
            self._supervise(status_every_s, run_for_s)
        finally:
            self.down()
            if self.view is not None:
                self.view.close()
        return 0

    def _supervise(self, status_every_s: float, run_for_s: float | None) -> None:
        """Tick, answer control requests and show the status every ``status_every_s`` until `down`,
        SIGTERM/SIGINT or ``run_for_s``."""
        poll_s = self.cfg.supervisor.poll_interval_ms / 1000
        t0 = time.monotonic()
        next_status = t0
        while not self.stopping:
            self.tick()
            if self.guard.stages:
                self._guard_tick()
            self.serve_control()
            now = time.monotonic()
            if self.view is not None and status_every_s and now >= next_status:
                self._show_status(status_every_s)
                next_status = now + status_every_s
            if run_for_s is not None and now - t0 >= run_for_s:
                break
            time.sleep(poll_s)

    def _say(self, text: str) -> None:
        if self.view is not None:
            self.view.say(text)

    def down(self) -> None:
        """Stop every process (SIGTERM, grace, SIGKILL), remove every resource (the run epoch and,
        last, the pid file), then let go of the run lock. Idempotent; copes with a partial start."""
        if self.ops is not None:  # first: it reads the rings and the process table closed below
            self.ops.stop()
            self.ops = None
        self.stopping = True
        for name in reversed(self.start_order()):  # producers first, so consumers drain
            if name in self.procs:
                self.stop_proc(self.procs[name])
        deadline = self.clock() + self.cfg.supervisor.stop_grace_ms * 1_000_000
        while any(p.popen is not None for p in self.procs.values()):
            for p in self.procs.values():
                if p.popen is not None and p.popen.poll() is not None:
                    self._on_death(p, describe_exit(p.popen.returncode))
            if self.clock() > deadline:
                for p in self.procs.values():
                    if p.popen is not None:
                        self.log.warning("stop_grace_expired", stage=p.name, pid=p.pid)
                        self._kill_and_reap(p)
                        self._on_death(p, "SIGKILL after the grace period")
                break
            time.sleep(0.01)
        self.launcher.close()
        self.control.close()
        self.control_writer = None
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
