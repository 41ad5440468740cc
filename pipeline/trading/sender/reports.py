"""EXEC_REPORTs out of the sender, in the order they are decided, never waiting for room.

``ExecReporter.report`` fills one ``EXEC_DTYPE`` record and writes it with ``emit_nowait``
(``AgentContext.emit_nowait``). The sender never waits for room in the exec ring: the risk gateway
may be waiting for room in the orders ring, which only the sender drains (a wait on both sides would
deadlock). A report that finds a ``drop`` ring full is dropped and counted (``out_drops``); one that
finds a backpressure ring full is held (``held``), and every report after it too, until
``flush_held`` writes them, oldest first (``held_max``: the most held at once).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pipeline.trading.journal import OrderEntry
from pipeline.trading.messages import EXEC_DTYPE, ExecReason, ExecType, Kind


@dataclass(slots=True)
class HeldReport:
    """A report that found the exec ring full: its bytes and its ``ts_origin_ns``."""

    payload: bytes
    ts_origin_ns: int


class ExecReporter:
    """Writes EXEC_REPORTs on ``out`` through ``emit_nowait`` (see the module docstring)."""

    def __init__(self, emit_nowait: Callable, out, out_drop: bool, stats: dict):
        self.emit_nowait = emit_nowait
        self.out = out
        self.out_drop = out_drop  # the exec ring's full policy is "drop"
        self.stats = stats
        self.held: collections.deque[HeldReport] = collections.deque()  # waiting for room in exec, in order
        self.rep = np.zeros(1, EXEC_DTYPE)
        self.rep_bytes = memoryview(self.rep).cast("B")

    def report(self, ts: int, etype: ExecType, o: OrderEntry | None, *, reason: ExecReason = ExecReason.NONE,
               price: float | None = None, size: float | None = None, leaves: float | None = None,
               venue_ts_ns: int = 0, fill_id: int = 0, iid: int = 0, side: int = 0, order_id: int = 0) -> None:
        """Write one EXEC_REPORT with origin time ``ts`` about order ``o`` (its instrument, side, id,
        price, size and leaves unless given; without an order: ``iid``, ``side``, ``order_id`` and 0)."""
        r = self.rep[0]
        r["instrument_id"] = o.iid if o is not None else iid
        r["exec_type"] = etype
        r["side"] = o.side if o is not None else side
        r["reason"] = reason
        r["order_id"] = o.oid if o is not None else order_id
        r["price"] = price if price is not None else (o.px if o is not None else 0.0)
        r["size"] = size if size is not None else (o.sz if o is not None else 0.0)
        r["leaves"] = leaves if leaves is not None else (o.leaves if o is not None else 0.0)
        r["venue_ts_ns"] = venue_ts_ns
        r["fill_id"] = fill_id
        if self.held or not self.emit_nowait(self.out, Kind.EXEC_REPORT, self.rep_bytes, ts):
            if self.out_drop:
                self.stats["out_drops"] += 1
            else:  # a full backpressure ring: held here, in order, never waited for (see flush_held)
                self.held.append(HeldReport(bytes(self.rep_bytes), ts))
                self.stats["held_max"] = max(self.stats.get("held_max", 0), len(self.held))

    def flush_held(self) -> int:
        """Write the reports held back by a full exec ring, oldest first, as room comes; returns how
        many were written."""
        held, n = self.held, 0
        while held and self.emit_nowait(self.out, Kind.EXEC_REPORT, held[0].payload, held[0].ts_origin_ns):
            held.popleft()
            n += 1
        return n
