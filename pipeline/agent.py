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

The runner (``pipeline.runner``) owns the duty cycle, the idle strategy, the heartbeat, the
counters, SIGTERM and the error handler.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from pipeline.config import Config, ProcessConfig
from pipeline.log import EventLog

LATENCY_WINDOW = 4096  # most recent output latencies kept for the status percentiles


class Agent:
    """Base class of a stage. Subclasses override ``do_work`` and usually ``on_start``."""

    def on_start(self, ctx: "AgentContext") -> None:
        """Prepare to work. Raising here fails the start (the supervisor applies its restart policy)."""

    def do_work(self) -> int:
        """Do a bounded amount of work; return how much (0 = found nothing to do). Must not block."""
        raise NotImplementedError

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

    def emit(self, port, kind: int, payload, ts_origin_ns: int) -> bool:
        """Write one message to an output port (full policy applied) and account for it.

        Returns what the port's ``write`` returned (False: dropped on a ``drop`` ring, counted there).
        """
        ok = port.write(kind, payload, ts_origin_ns)
        if ok:
            self.msgs_out += 1
            self._lat[self._lat_n & (LATENCY_WINDOW - 1)] = self.clock() - ts_origin_ns
            self._lat_n += 1
        return ok

    def received(self, n: int = 1) -> None:
        """Count ``n`` messages taken from inputs."""
        self.msgs_in += n

    def latency_percentiles_ns(self) -> tuple[int, int]:
        """(p50, p99) of the latest output latencies since origin, (0, 0) before any output."""
        n = min(self._lat_n, LATENCY_WINDOW)
        if n == 0:
            return 0, 0
        p50, p99 = np.percentile(self._lat[:n], (50, 99))
        return int(p50), int(p99)
