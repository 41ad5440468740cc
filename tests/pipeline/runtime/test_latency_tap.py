"""The bench's latency tap (pipeline/runtime/agent.py): with a tap, every emit and every mark is recorded as
(code, latency since origin, when), on the injected clock; without one, nothing is."""

from __future__ import annotations

import numpy as np

from pipeline.runtime.agent import MARK_ORDER_SENT, AgentContext, LatencyTap, mark_code
from pipeline.runtime.config import parse_config
from pipeline.trading.messages import Kind, OrderOrigin


class _Port:
    def __init__(self, accept=True):
        self.accept = accept

    def write(self, kind, payload, ts_origin_ns, timeout_ns=None) -> bool:
        return self.accept


def _ctx(now):
    cfg = parse_config('[[processes]]\nname = "p"\nmodule = "tests.agents:SeqSource"\n')
    return AgentContext(config=cfg, process=cfg.process("p"), inputs={}, outputs={}, log=None, clock=lambda: now[0])


def test_emits_and_marks_are_recorded_with_their_latency_since_origin(tmp_path):
    now = [1_000]
    ctx = _ctx(now)
    ctx.tap = LatencyTap(str(tmp_path / "p.lat.npy"), capacity=4)
    assert ctx.emit(_Port(), Kind.BOOK, b"x", 400)
    now[0] = 2_500
    ctx.mark(mark_code(MARK_ORDER_SENT, OrderOrigin.LLM), 2_000)
    assert not ctx.emit(_Port(accept=False), Kind.SIGNAL, b"x", 100), "a dropped write is not a latency"
    ctx.tap.dump()
    rec = np.load(tmp_path / "p.lat.npy")
    assert rec.dtype == LatencyTap.DTYPE
    assert [(int(r["code"]), int(r["lat_ns"]), int(r["at_ns"])) for r in rec] == [(Kind.BOOK, 600, 1_000),
                                                                                 (121, 500, 2_500)]


def test_a_full_tap_counts_its_overflow_instead_of_growing(tmp_path):
    tap = LatencyTap(str(tmp_path / "p.lat.npy"), capacity=2)
    for i in range(5):
        tap.record(1, i, i)
    assert tap.n == 2 and tap.overflow == 3
    tap.dump()
    assert len(np.load(tmp_path / "p.lat.npy")) == 2


def test_without_a_tap_marks_cost_nothing_and_record_nothing():
    now = [10]
    ctx = _ctx(now)
    ctx.mark(mark_code(MARK_ORDER_SENT), 5)
    assert ctx.emit(_Port(), Kind.BOOK, b"x", 5) and ctx.tap is None and ctx.latency_percentiles_ns() == (5, 5)
