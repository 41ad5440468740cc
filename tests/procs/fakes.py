"""In-process doubles for driving a feed agent without the runner: a recording output port, a
list logger, a context built from params, and a pump that calls ``do_work`` until a condition."""

from __future__ import annotations

import time

import numpy as np

from pipeline.runtime.agent import AgentContext
from pipeline.runtime.config import ProcessConfig, parse_config
from pipeline.trading.messages import BOOK_DTYPE, TRADE_DTYPE, Kind

INSTRUMENTS = """
[[instruments]]
id = 1
symbol = "BTCUSDT"
tick_size = 0.1
lot_size = 0.0001

[[instruments]]
id = 2
symbol = "ETHUSDT"
tick_size = 0.01
lot_size = 0.001
"""


class RecordingPort:
    """An output port that keeps every message: (kind, payload bytes, ts_origin_ns, written_ns)."""

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


def make_ctx(params: dict, *, batch: int = 256, clock=time.monotonic_ns, port: RecordingPort | None = None,
             module: str = "procs.feed:BitgetFeedAgent") -> AgentContext:
    cfg = parse_config('[[rings]]\nname = "md"\nmax_payload_bytes = 512\ncapacity = 1024\nfull_policy = "drop"\n'
                       + INSTRUMENTS)
    proc = ProcessConfig(name="feed", module=module, outputs=["md"], batch=batch, params=params)
    return AgentContext(config=cfg, process=proc, inputs={}, outputs={"md": port or RecordingPort()}, log=ListLog(),
                        clock=clock)


def pump(agent, until, timeout: float = 5.0, what: str = "condition"):
    """Call ``agent.do_work()`` until ``until()`` is truthy (returned); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        n = agent.do_work()
        v = until()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; stats {agent.ctx.stats}")
        if n == 0:
            time.sleep(0.0005)


def settle(agent, seconds: float) -> None:
    """Keep the agent working for ``seconds`` (to show that something does NOT happen)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if agent.do_work() == 0:
            time.sleep(0.0005)
