"""In-process doubles of what the runner hands an agent: ring ports and the event log.

- ``ListInput``: an input port over a list of ``(kind, payload, ts_origin_ns)``; append to ``msgs``
  to feed more.
- ``RecordingPort``: an output port that keeps every message written (or refuses all of them).
- ``ListLog``: an ``EventLog`` stand-in that keeps ``(level, event, fields)``.
"""

from __future__ import annotations

import time

import numpy as np

from pipeline.trading.messages import BOOK_DTYPE, TRADE_DTYPE, Kind


class ListInput:
    """An input port over a list of (kind, payload, ts_origin_ns); ``pos`` is the next one ``poll`` reads."""

    def __init__(self, msgs):
        self.msgs = list(msgs)
        self.pos = 0

    def poll(self, handler, limit):
        n = 0
        while self.pos < len(self.msgs) and n < limit:
            kind, payload, ts = self.msgs[self.pos]
            handler(self.pos, ts, kind, memoryview(payload))
            self.pos += 1
            n += 1
        return n


class RecordingPort:
    """An output port that keeps every message: (kind, payload bytes, ts_origin_ns, written_ns).
    ``accept=False``: every write is refused (returns False), as on a full ``drop`` ring."""

    def __init__(self, accept: bool = True):
        self.msgs: list[tuple[int, bytes, int, int]] = []
        self.accept = accept

    def write(self, kind, payload, ts_origin_ns, timeout_ns=None) -> bool:
        if not self.accept:
            return False
        self.msgs.append((int(kind), bytes(payload), ts_origin_ns, time.monotonic_ns()))
        return True

    try_write = write

    def books(self) -> list[np.void]:
        return [np.frombuffer(p, BOOK_DTYPE, 1)[0] for k, p, _, _ in self.msgs if k == Kind.BOOK]

    def trades(self) -> list[np.void]:
        return [np.frombuffer(p, TRADE_DTYPE, 1)[0] for k, p, _, _ in self.msgs if k == Kind.TRADE]

    def count(self, kind) -> int:
        return sum(1 for m in self.msgs if m[0] == kind)


class ListLog:
    """``EventLog`` stand-in: keeps (level, event, fields); safe from several threads (list.append)."""

    def __init__(self):
        self.events: list[tuple[str, str, dict]] = []

    def _add(self, level, event, fields):
        self.events.append((level, event, fields))

    def debug(self, event, **f):
        self._add("debug", event, f)

    def info(self, event, **f):
        self._add("info", event, f)

    def warning(self, event, **f):
        self._add("warning", event, f)

    def error(self, event, exc_info=None, **f):
        self._add("error", event, f)

    def named(self, event) -> list[dict]:
        return [f for _, e, f in list(self.events) if e == event]
