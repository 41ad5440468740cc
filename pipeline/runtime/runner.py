"""The runner: the one loop every stage process runs.

``python -m pipeline.runtime.runner --config FILE --name PROCESS [--core N] [--wait W]`` (the supervisor
forks a stage from its fork server, which calls ``main`` with these arguments, or with
``launcher = "exec"`` starts it so; with ``supervisor.transport = "mp-queue"`` it starts a
``multiprocessing`` spawn process running ``run_spawned`` with the same arguments and the queues of
the process's rings instead). It applies the process's ``nice`` and ``sched`` (SCHED_FIFO on every
thread for ``sched = "fifo"``, ``apply_sched``; refused: a start-up error naming the process, exit 78,
never a fallback to the default policy), pins the core, attaches the process table and the rings (or queues), builds the agent
named by ``module`` in the config, then runs the duty cycle::

    while not stopping:
        n = agent.do_work()            # errors: logged, counted, last_error set; too many in a row: exit 70
        every heartbeat_interval_ms:   heartbeat in the process table and in every ring end it holds,
                                       counters and latency percentiles published
        if n == 0: idle                # busy-spin (yielding the GIL and the core to the process's other
                                       # threads each pass, if it has any) | back-off |
                                       # blocking: the agent's wait_for_work if it
                                       # has one, else park on the input ring, or on all of several
                                       # inputs at once (transport.wait_all: the doorbell of several
                                       # rings, ringbuf.ring.wait_any; one zmq.Poller; one
                                       # multiprocessing.connection.wait); with
                                       # keep_warm_us > 0, any wait: at most that often, two messages
                                       # through a private ring (Ring.private), then
                                       # agent.keep_warm() (a parked stage wakes up for it)

With ``SHMPIPE_LATENCY_DIR`` set, the context gets a ``LatencyTap`` dumped there on close (the bench).

SIGTERM or SIGINT: finish the current batch, commit input cursors, ``on_close``, exit 0. A write
waiting for room in a full ``backpressure`` ring keeps the heartbeat going and gives up on SIGTERM
(StopRequested; the message being handled is not committed, so it is seen again after a restart).
Exit codes: 0 clean stop, 1 start failed (the supervisor may retry), 78 start failed for good (a
``ConfigError`` or ``StartupError`` from loading the config or the agent's ``on_start``: a restart
cannot fix it; the supervisor stops retrying and reports the cause, the last line
``NAME: start failed: TYPE: MESSAGE`` of the stage's ``.out`` file), 70 too many consecutive errors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time
import traceback

from pipeline.runtime import proctable as PT
from pipeline.runtime.agent import LATENCY_DIR_ENV, Agent, AgentContext, LatencyTap
from pipeline.runtime.config import Config, ProcessConfig, load_config, parse_stage_params
from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.runtime.linux import die_with_parent, set_fifo
from pipeline.runtime.log import EventLog, open_event_log, open_private_append
from pipeline.runtime.transport import open_ports, wait_all
from ringbuf import BackOff, IdleStrategy, YieldSpin
from ringbuf.ring import Ring

EXIT_OK = 0
EXIT_START_FAILED = 1
EXIT_START_PERMANENT = 78  # sysexits EX_CONFIG: a ConfigError / StartupError at start; retrying cannot help
EXIT_TOO_MANY_ERRORS = 70
MAX_CONSECUTIVE_ERRORS = 100


class StopRequested(BaseException):
    """Raised out of a blocked write when SIGTERM arrives, so the runner can stop cleanly.

    A BaseException (like SystemExit) so that an agent's ``except Exception`` does not swallow it.
    The message being handled when it is raised is not committed: it is seen again after a restart.
    """


class _StallIdle(IdleStrategy):
    """The idle strategy of a writer that waits for room in a full ``backpressure`` ring: back off,
    keep the heartbeat going (a producer held back by its consumer is not hung), and give up with
    StopRequested when the runner is asked to stop."""

    name = "stall"

    def __init__(self, runner: "Runner"):
        self._runner = runner
        self._backoff = BackOff(max_sleep_ns=1_000_000)

    def idle(self, work_count: int) -> None:
        r = self._runner
        if r._stop:
            raise StopRequested()
        now = r.clock()
        if now >= r.next_beat_ns:
            r.beat(now)
        self._backoff.idle(work_count)

    def reset(self) -> None:
        self._backoff.reset()


def choose_wait(wait: str, agent, inputs: list, beat_ns: int):
    """What a duty cycle that found no work does: ``(park, idle)``, exactly one of them not None.

    ``park(timeout_ns)`` blocks until work may be there (``wait`` other than busy-spin: the agent's
    ``wait_for_work`` if it has one; ``blocking``: the one input's ``wait``, or for several inputs
    the transport's wait over all of them, ``transport.wait_all``: the doorbell of several rings,
    one ``zmq.Poller``, one ``multiprocessing.connection.wait``); otherwise the idle strategy
    ``idle``: for busy-spin ``ringbuf.idle.YieldSpin`` (never sleeps; while the process has another
    Python thread, a feed's network thread or a sender's journal thread, each idle pass yields the GIL
    and the core to it, so it is not held off until its switch interval forces a hand-over), else a
    back-off sleeping at most 1 ms. ``inputs`` are the input ports in the config's order (the first ring is the doorbell of several).
    """
    if wait != "busy-spin" and callable(getattr(agent, "wait_for_work", None)):
        return agent.wait_for_work, None  # the agent knows best what it waits on (e.g. a socket thread)
    if wait == "blocking" and len(inputs) == 1 and hasattr(inputs[0], "wait"):
        return inputs[0].wait, None
    if wait == "blocking" and len(inputs) > 1:
        park = wait_all(inputs)
        if park is not None:
            return park, None
    return None, (YieldSpin() if wait == "busy-spin" else BackOff(max_sleep_ns=min(beat_ns, 1_000_000)))


def _ignore(seq: int, ts_origin_ns: int, kind: int, payload) -> None:
    return None


def load_agent_class(spec: str) -> type[Agent]:
    """Import ``package.module:Class``.

    Raises:
        StartupError: the module or class cannot be found, or it is not an Agent.
    """
    mod_name, _, cls_name = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise StartupError(f"cannot import agent module {mod_name!r}: {exc}") from None
    cls = getattr(mod, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise StartupError(f"{spec!r} is not an Agent subclass")
    return cls


def load_stage_params(proc: ProcessConfig):
    """The ``params`` of process ``proc`` converted to its agent class's ``params_type`` (a frozen
    struct); None when the class has no ``params_type`` (it takes its params as they are).

    Raises:
        StartupError: the agent module or class cannot be loaded (``load_agent_class``).
        ConfigError: an unknown or ill-typed param, naming the process and the field
            (``parse_stage_params``).
    """
    kind = getattr(load_agent_class(proc.module), "params_type", None)
    return None if kind is None else parse_stage_params(proc.name, proc.params, kind)


def apply_sched(proc: ProcessConfig, setscheduler=os.sched_setscheduler) -> None:
    """The process's ``sched`` policy (config ``sched`` / ``sched_priority``): nothing for "other";
    SCHED_FIFO on every thread for "fifo" (``linux.set_fifo``; ``setscheduler`` injected in tests).

    Raises:
        StartupError: the kernel refused fifo; the message names the process, the priority and the
            cause (a start-up error: the supervisor does not retry it; never a fallback to "other").
    """
    if proc.sched != "fifo":
        return
    try:
        set_fifo(proc.sched_priority, setscheduler=setscheduler)
    except OSError as exc:
        raise StartupError(f"{proc.name}: sched = \"fifo\" (sched_priority {proc.sched_priority}) refused: "
                           f"{exc.strerror}; it needs CAP_SYS_NICE or an RLIMIT_RTPRIO >= {proc.sched_priority}, "
                           f"or sched = \"other\"") from None


class Runner:
    """Owns one agent's duty cycle. Tests may drive ``run`` with an injected clock."""

    def __init__(self, cfg: Config, name: str, *, core: int | None, wait: str, log: EventLog, clock=time.monotonic_ns,
                 queues: dict | None = None):
        self.cfg = cfg
        self.queues = queues  # ring name -> multiprocessing.Queue (transport mp-queue)
        self.proc = cfg.process(name)
        self.index = [p.name for p in cfg.processes].index(name)
        self.core = core
        self.wait = wait
        self.log = log
        self.clock = clock
        self._stop = False
        self.beat_ns = cfg.supervisor.heartbeat_interval_ms * 1_000_000
        self.next_beat_ns = 0
        self.table: PT.ProcTable | None = None
        self.rec: PT.ProcRecord | None = None
        self.ctx: AgentContext | None = None
        self.agent: Agent | None = None
        self.ports = None
        self._warm_ring: Ring | None = None  # keep-warm's private ring (keep_warm_us > 0)

    def request_stop(self, *_args) -> None:
        self._stop = True

    def start(self) -> None:
        """Pin, attach, build and start the agent. Raises on any failure (the caller exits 1)."""
        self.table = PT.ProcTable.attach(self.cfg.supervisor.shm_prefix)
        rec = self.rec = self.table.record(self.index)
        now = self.clock()
        rec.set(PT.OFF_READY_NS, 0)
        rec.set(PT.OFF_STATS_LEN, 0)
        rec.set(PT.OFF_PID, os.getpid())
        rec.set(PT.OFF_STARTED_NS, now)
        rec.set(PT.OFF_HEARTBEAT_NS, now)
        rec.set(PT.OFF_PHASE, PT.PHASE_STARTING)
        if self.proc.nice:
            try:  # before the agent starts any thread: its threads inherit it
                os.setpriority(os.PRIO_PROCESS, 0, self.proc.nice)
            except OSError as exc:
                raise StartupError(f"cannot set nice {self.proc.nice}: {exc.strerror}") from None
        apply_sched(self.proc)
        if self.core is not None:
            os.sched_setaffinity(0, {self.core})
            rec.set(PT.OFF_CORE_PLUS_ONE, self.core + 1)
        else:
            rec.set(PT.OFF_CORE_PLUS_ONE, 0)
        self.ports = open_ports(self.cfg, self.proc, writer_idle=_StallIdle(self), queues=self.queues)
        self.ctx = AgentContext(config=self.cfg, process=self.proc, inputs=self.ports.inputs,
                                outputs=self.ports.outputs, log=self.log, clock=self.clock)
        tap_dir = os.environ.get(LATENCY_DIR_ENV)
        if tap_dir:
            self.ctx.tap = LatencyTap(os.path.join(tap_dir, f"{self.proc.name}.lat.npy"))
        self.agent = load_agent_class(self.proc.module)()
        self.agent.on_start(self.ctx)
        rec.set(PT.OFF_READY_NS, self.clock())
        rec.set(PT.OFF_PHASE, PT.PHASE_READY)
        self.log.info("ready", pid=os.getpid(), core=self.core, wait=self.wait, nice=os.getpriority(os.PRIO_PROCESS, 0),
                      sched=self.proc.sched, sched_priority=os.sched_getparam(0).sched_priority,
                      inputs=list(self.proc.inputs), outputs=list(self.proc.outputs))

    def beat(self, now: int) -> None:
        """Heartbeat and publish counters (process table and every ring end held)."""
        self.next_beat_ns = now + self.beat_ns
        rec, ctx = self.rec, self.ctx
        rec.set(PT.OFF_HEARTBEAT_NS, now)
        rec.set(PT.OFF_MSGS_IN, ctx.msgs_in)
        rec.set(PT.OFF_MSGS_OUT, ctx.msgs_out)
        p50, p99 = ctx.latency_percentiles_ns()
        rec.set(PT.OFF_LAT_P50_NS, p50)
        rec.set(PT.OFF_LAT_P99_NS, p99)
        rec.set_latency_histogram(*ctx.latency_histogram_ns())
        if ctx.stats:
            rec.set_stage_stats(ctx.stats)
        self.ports.heartbeat(now)

    def _error(self, exc: BaseException) -> None:
        rec = self.rec
        rec.add(PT.OFF_ERRORS, 1)
        rec.set_last_error(f"{type(exc).__name__}: {exc}")
        self.log.error("agent_error", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc(limit=8))

    def run(self) -> int:
        """The duty cycle, until a stop request. Returns the exit code."""
        agent, clock = self.agent, self.clock
        beat_ns = self.beat_ns
        park, idle = choose_wait(self.wait, agent, [self.ports.inputs[n] for n in self.proc.inputs], beat_ns)
        errors_in_row = 0
        do_work = agent.do_work
        warm, warm_ns, next_warm = self._keep_warm(agent), self.proc.keep_warm_us * 1_000, 0
        while not self._stop:
            try:
                n = do_work()
                errors_in_row = 0
            except StopRequested:
                break
            except Exception as exc:  # the error handler: log, count, go on
                n = 0
                errors_in_row += 1
                self._error(exc)
                if errors_in_row >= MAX_CONSECUTIVE_ERRORS:
                    self.log.error("too_many_errors", count=errors_in_row)
                    self.close()
                    return EXIT_TOO_MANY_ERRORS
            now = clock()
            if now >= self.next_beat_ns:
                self.beat(now)
            if n == 0:
                if warm is not None and now >= next_warm:
                    try:
                        warm()
                    except Exception as exc:  # a broken warm-up is reported once and not called again
                        self._error(exc)
                        self.log.error("keep_warm_disabled", error=f"{type(exc).__name__}: {exc}")
                        warm = None
                    next_warm = clock() + warm_ns
                if park is not None:  # a parked stage that keeps warm wakes for its next warm-up
                    until = self.next_beat_ns if warm is None else min(self.next_beat_ns, next_warm)
                    park(max(until - now, 0))
                else:
                    idle.idle(0)
            else:
                if warm is not None:  # work keeps the code warm too: the next warm-up is due after idling
                    next_warm = now + warm_ns
                if idle is not None:
                    idle.reset()
        self.close()
        return EXIT_OK

    def _keep_warm(self, agent):
        """The agent's ``keep_warm`` (wrapped with the ring's own warm-up) when the config asks for it
        and the agent has one, else None; a request that cannot apply is logged (warning) with the
        reason. Any wait: a busy-spin stage warms between polls; a parked one (blocking, back-off, its
        own ``wait_for_work``) parks no longer than until its next warm-up."""
        if self.proc.keep_warm_us <= 0:
            return None
        warm = getattr(agent, "keep_warm", None)
        if not callable(warm):
            self.log.warning("keep_warm_ignored", keep_warm_us=self.proc.keep_warm_us, why="the agent has no keep_warm")
            return None
        # the ring's own code too: messages written and read (poll, then batch) through a private
        # ring of this process (no segment, nothing another process sees), then the agent's hot path
        self._warm_ring = ring = Ring.private(slot_size=128, capacity=2)
        writer, reader, payload, clock = ring.writer(), ring.reader(), bytes(64), self.clock

        def warm_all() -> None:
            writer.try_write(0, payload, clock())
            reader.poll(_ignore, 1)
            writer.try_write(0, payload, clock())
            reader.try_read_batch(1)
            reader.commit()
            warm()

        return warm_all

    def close(self) -> None:
        """Commit inputs, close the agent, mark the record stopping, close the ports."""
        if self._warm_ring is not None:
            self._warm_ring.close()
            self._warm_ring = None
        if self.rec is not None:
            self.rec.set(PT.OFF_PHASE, PT.PHASE_STOPPING)
        if self.ports is not None:
            self.ports.commit()
        if self.agent is not None:
            try:
                self.agent.on_close()
            except Exception as exc:
                self._error(exc)
        if self.ctx is not None and self.rec is not None:
            self.beat(self.clock())
        if self.ctx is not None and self.ctx.tap is not None:
            try:
                self.ctx.tap.dump()
            except OSError as exc:
                self.log.warning("latency_tap_dump_failed", error=f"{type(exc).__name__}: {exc}")
        if self.ports is not None:
            try:
                self.ports.close()  # mp-queue: lets the feeder thread flush (bounded)
            except Exception as exc:
                self.log.warning("ports_close_failed", error=f"{type(exc).__name__}: {exc}")
        self.log.info("stopped", msgs_in=self.ctx.msgs_in if self.ctx else 0, msgs_out=self.ctx.msgs_out if self.ctx else 0)


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies (prctl PR_SET_PDEATHSIG); exit 1 when it
    already has."""
    if not die_with_parent(parent_pid):
        sys.exit(EXIT_START_FAILED)


def main(argv: list[str] | None = None, queues: dict | None = None) -> int:
    """Run one stage. ``queues``: the ring name -> ``multiprocessing.Queue`` map of transport
    ``mp-queue`` (given by ``run_spawned``)."""
    ap = argparse.ArgumentParser(prog="python -m pipeline.runtime.runner", description="Run one pipeline stage (started by the supervisor).")
    ap.add_argument("--config", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--core", type=int, default=None)
    ap.add_argument("--wait", default="back-off", choices=["busy-spin", "back-off", "blocking"])
    ap.add_argument("--supervisor-pid", type=int, default=0, help="exit when this process dies")
    args = ap.parse_args(argv)
    if args.supervisor_pid:
        _die_with_parent(args.supervisor_pid)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:  # the file was changed to something invalid after `up`
        print(f"{args.name}: start failed: ConfigError: {exc}", file=sys.stderr)
        return EXIT_START_PERMANENT
    sup = cfg.supervisor
    log = open_event_log(args.name, sup.log_dir, sup.log_max_bytes, sup.log_backups)
    runner = Runner(cfg, args.name, core=args.core, wait=args.wait, log=log, queues=queues)
    signal.signal(signal.SIGTERM, runner.request_stop)
    signal.signal(signal.SIGINT, runner.request_stop)
    try:
        runner.start()
    except Exception as exc:
        log.error("start_failed", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc(limit=8))
        if runner.rec is not None:
            runner.rec.set_last_error(f"start failed: {type(exc).__name__}: {exc}")
        print(f"{args.name}: start failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_START_PERMANENT if isinstance(exc, (ConfigError, StartupError)) else EXIT_START_FAILED
    return runner.run()


def run_spawned(argv: list[str], queues: dict, out_path: str) -> None:
    """The target of a stage process under ``supervisor.transport = "mp-queue"``.

    The supervisor starts it with ``multiprocessing.get_context("spawn").Process`` (queue handles
    reach a process only by inheritance), ``argv`` being the command line ``main`` takes and
    ``queues`` the queues of the process's rings. Like a ``python -m pipeline.runtime.runner`` child it
    reads /dev/null and writes stdout and stderr to ``out_path`` (``logs/<name>.out``); the exit
    status is ``main``'s.
    """
    for f in (sys.stdout, sys.stderr):
        if f is not None:
            f.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = open_private_append(out_path)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.exit(main(argv, queues=queues))


if __name__ == "__main__":
    sys.exit(main())
