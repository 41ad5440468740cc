"""The agent protocol every stage implements, and the context the runner hands it.

An agent does no looping, sleeping or signal handling of its own::

    class Relay(Agent):
        def on_start(self, ctx):            # attach state; raise to fail the start
            self.ctx = ctx
            self.src, self.dst = ctx.inputs["a"], ctx.outputs["b"]
        def do_work(self) -> int:           # drain a bounded batch, return the work count
            return self.src.poll(self._on_msg, self.ctx.batch)
        def _on_msg(self, seq, ts_origin_ns, kind, payload):
            self.ctx.emit(self.dst, kind, payload, ts_origin_ns)
        def on_close(self):                 # release resources; cursors are committed by the runner
            ...

The runner (``pipeline.runtime.runner``) owns the duty cycle, the idle strategy, the heartbeat, the
counters, SIGTERM and the error handler.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from pipeline.runtime.errors import ConfigError
from pipeline.runtime.config import Config, ProcessConfig
from pipeline.runtime.log import EventLog
from pipeline.runtime.proctable import LAT_BOUNDS_NS, LAT_BUCKETS

LATENCY_WINDOW = 4096  # most recent output latencies kept for the status percentiles

#: environment variable naming a folder: when set (by the bench harness), every runner records each
#: output's latency since origin, and each ``mark``, in a ``LatencyTap`` dumped there on close
LATENCY_DIR_ENV = "SHMPIPE_LATENCY_DIR"

# Tap codes: a message kind (``pipeline.trading.messages.Kind``, 1..99) for ``emit``; a mark is
# ``mark_code(event, origin)`` = 100 + 10 x origin (``OrderOrigin``) + event.
MARK_ORDER_SENT = 1  # the sender wrote an order request to the venue's socket
MARK_VENUE_ACK = 2  # the sender read the venue's answer to an order request
MARK_CANCEL_SENT = 3  # the sender wrote a cancel / cancel-all request
MARK_DECIDED = 4  # the risk gateway wrote an ORDER (new or cancel) of this origin
MARK_ORDER_READ = 5  # the sender read a NEW order from its ring (it starts the duplicate check)
MARK_INTENT_SYNCED = 6  # the sender's journal intent of a NEW order is written and fsync'd
MARK_NAMES = {MARK_ORDER_SENT: "order_sent", MARK_VENUE_ACK: "venue_ack", MARK_CANCEL_SENT: "cancel_sent",
              MARK_DECIDED: "decided", MARK_ORDER_READ: "order_read", MARK_INTENT_SYNCED: "intent_synced"}


def mark_code(event: int, origin: int = 0) -> int:
    """The tap code of ``event`` (``MARK_*``) for an order of ``origin`` (``OrderOrigin`` value)."""
    return 100 + 10 * origin + event


class LatencyTap:
    """Every (code, latency_ns, at_ns) of one process, for the bench: a preallocated numpy record
    array (no allocation per record; records past ``capacity`` are counted in ``overflow``), written
    with ``dump`` as ``<folder>/<process>.lat.npy`` (fields ``code`` u2, ``lat_ns`` i8, ``at_ns`` i8)."""

    DTYPE = np.dtype([("code", "<u2"), ("lat_ns", "<i8"), ("at_ns", "<i8")])

    def __init__(self, path: str, capacity: int = 1 << 21):
        self.path = path
        self.rec = np.zeros(capacity, self.DTYPE)
        self._code, self._lat, self._at = self.rec["code"], self.rec["lat_ns"], self.rec["at_ns"]
        self.n = 0
        self.overflow = 0

    def record(self, code: int, lat_ns: int, at_ns: int) -> None:
        i = self.n
        if i < len(self.rec):
            self._code[i] = code
            self._lat[i] = lat_ns
            self._at[i] = at_ns
            self.n = i + 1
        else:
            self.overflow += 1

    def dump(self) -> None:
        tmp = self.path + ".tmp.npy"
        np.save(tmp, self.rec[: self.n])
        os.replace(tmp, self.path)


class Agent:
    """Base class of a stage. Subclasses override ``do_work`` and usually ``on_start``."""

    def on_start(self, ctx: "AgentContext") -> None:
        """Prepare to work. Raising here fails the start (the supervisor applies its restart policy)."""

    def do_work(self) -> int:
        """Do a bounded amount of work; return how much (0 = found nothing to do). Must not block."""
        raise NotImplementedError

    # Optional: ``keep_warm(self) -> None``. Run the hot path on canned input so its code and data stay in
    # the CPU caches between rare messages (a message after 20 ms of idling costs 10-20x its hot-loop time
    # here). It must have no effect outside the agent's own scratch objects: no output, no I/O, no
    # change to the state real messages are decided on. The runner calls it only for a busy-spin
    # process with ``keep_warm_us`` > 0, when a do_work found nothing, at most every keep_warm_us.

    def on_close(self) -> None:
        """Called once when the runner stops (SIGTERM or error); release resources."""

    # Optional: ``wait_for_work(timeout_ns) -> bool``. An agent whose work arrives from somewhere the
    # runner cannot see (a socket thread) may define it; unless the process busy-spins, the runner
    # then parks in it when ``do_work`` found nothing, instead of in its idle strategy.


class AgentContext:
    """What an agent gets: its config, ports, log, clock and counters.

    ``inputs`` map ring names to readers (``poll``, ``try_read``, ``commit``...), ``outputs`` map ring
    names to writers (``write``, ``try_write``...): ``ringbuf`` objects, or the same API over
    another transport when the bench compares transports.
    """

    def __init__(self, *, config: Config, process: ProcessConfig, inputs: dict, outputs: dict, log: EventLog,
                 clock: Callable[[], int] = time.monotonic_ns):
        self.config = config
        self.process = process
        self.name = process.name
        self.params: dict[str, Any] = process.params
        self.batch = process.batch
        self.inputs = inputs
        self.outputs = outputs
        self.log = log
        self.clock = clock
        self.msgs_in = 0
        self.msgs_out = 0
        #: the stage's own counters (name -> int), shown in status; published with each heartbeat
        self.stats: dict[str, int] = {}
        self._lat = np.zeros(LATENCY_WINDOW, dtype=np.int64)
        self._lat_n = 0
        self._hist = np.zeros(LAT_BUCKETS, dtype=np.uint64)  # latency_histogram_ns: counts so far
        self._hist_sum_ns = 0
        self._hist_n = 0  # outputs folded into it
        #: the bench's full record of latencies (None unless ``LATENCY_DIR_ENV`` is set for the runner)
        self.tap: LatencyTap | None = None

    def input(self, name: str | None = None):
        """The reader of input ring ``name``; ``None``: the process's only input.

        Raises:
            ConfigError: no such input (or ``None`` with other than one input); the message names the
                process and the inputs it has.
        """
        return _port(self.name, "input", self.inputs, name)

    def output(self, name: str | None = None, *, required: bool = True):
        """The writer of output ring ``name``; ``None``: the process's only output. With
        ``required=False`` a missing ``name`` gives ``None`` (an optional output).

        Raises:
            ConfigError: a required output is missing; the message names the process and its outputs.
        """
        if not required and name not in self.outputs:
            return None
        return _port(self.name, "output", self.outputs, name)

    def emit(self, port, kind: int, payload, ts_origin_ns: int) -> bool:
        """Write one message to an output port (full policy applied) and account for it.

        Returns what the port's ``write`` returned (False: dropped on a ``drop`` ring, counted there).
        """
        ok = port.write(kind, payload, ts_origin_ns)
        if ok:
            self.msgs_out += 1
            now = self.clock()
            self._lat[self._lat_n & (LATENCY_WINDOW - 1)] = now - ts_origin_ns
            self._lat_n += 1
            if self.tap is not None:
                self.tap.record(kind, now - ts_origin_ns, now)
        return ok

    def emit_nowait(self, port, kind: int, payload, ts_origin_ns: int) -> bool:
        """``emit`` that never waits for room: False when the port is full now (nothing written; on a
        ``drop`` ring also counted there). For a stage that must not block on a consumer that may be
        waiting on it (the sender's reports to risk, while risk waits for room in the orders ring)."""
        # hot path: the accounting below is ``emit``'s, written out again on purpose: a shared private
        # method would cost every message of every stage one more Python call (~70 ns measured per emit)
        ok = port.try_write(kind, payload, ts_origin_ns)
        if ok:
            self.msgs_out += 1
            now = self.clock()
            self._lat[self._lat_n & (LATENCY_WINDOW - 1)] = now - ts_origin_ns
            self._lat_n += 1
            if self.tap is not None:
                self.tap.record(kind, now - ts_origin_ns, now)
        return ok

    def mark(self, code: int, ts_origin_ns: int) -> None:
        """Record a point of the stage's own work (``MARK_*``) for the bench: its latency since origin.
        Free when no tap is set."""
        if self.tap is not None:
            now = self.clock()
            self.tap.record(code, now - ts_origin_ns, now)

    def received(self, n: int = 1) -> None:
        """Count ``n`` messages taken from inputs."""
        self.msgs_in += n

    def latency_histogram_ns(self) -> tuple[np.ndarray, int]:
        """The histogram of every output's latency since origin so far (counts per bucket of
        ``proctable.LAT_BOUNDS_NS``, then the sum in ns), first folding in the outputs since the last
        call (the runner calls it once per heartbeat, never per message). Outputs that left the
        ``LATENCY_WINDOW`` ring before a call (more than 4096 in one heartbeat interval) are not counted."""
        _, add_sum = _fold_latencies(self._hist, self._lat, self._lat_n, self._hist_n)
        self._hist_n = self._lat_n
        self._hist_sum_ns += add_sum
        return self._hist, self._hist_sum_ns

    def latency_percentiles_ns(self) -> tuple[int, int]:
        """(p50, p99) of the latest output latencies since origin, (0, 0) before any output."""
        n = min(self._lat_n, LATENCY_WINDOW)
        if n == 0:
            return 0, 0
        p50, p99 = np.percentile(self._lat[:n], (50, 99))
        return int(p50), int(p99)


_BOUNDS_NS = np.array(LAT_BOUNDS_NS, dtype=np.int64)


def _fold_latencies(hist: np.ndarray, lat: np.ndarray, total: int, folded: int) -> tuple[int, int]:
    """Add the latencies of outputs ``folded`` .. ``total`` still in the ring window ``lat`` to ``hist``
    (buckets of ``LAT_BOUNDS_NS``); returns (their count, their sum in ns; a negative one counts 0)."""
    take = min(total - folded, len(lat))
    if take <= 0:
        return 0, 0
    sample = np.maximum(lat[np.arange(total - take, total) & (len(lat) - 1)], 0)
    hist += np.bincount(np.searchsorted(_BOUNDS_NS, sample, side="left"), minlength=LAT_BUCKETS).astype(np.uint64)
    return take, int(sample.sum())


def _port(process: str, what: str, ports: dict, name: str | None):
    """``ports[name]``, or the only port when ``name`` is None (see ``AgentContext.input``)."""
    if name is None:
        if len(ports) != 1:
            raise ConfigError(f"process {process}: name the {what} ring (params.{what}); it has {sorted(ports)}")
        return next(iter(ports.values()))
    if name not in ports:
        raise ConfigError(f"process {process}: {what} ring {name!r} is not among its {what}s {sorted(ports)}")
    return ports[name]
