"""The agent context (pipeline/runtime/agent.py): its ports by name (``input`` / ``output``, a
ConfigError naming the process otherwise), and the bench's latency tap: with a tap, every emit and
every mark is recorded as (code, latency since origin, when), on the injected clock; without one,
nothing is."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.runtime.agent import MARK_ORDER_SENT, AgentContext, LatencyTap, mark_code
from pipeline.runtime.config import parse_config
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import Kind, OrderOrigin
from tests.support.clock import ManualClock


class _Port:
    def __init__(self, accept=True):
        self.accept = accept

    def write(self, kind, payload, ts_origin_ns, timeout_ns=None) -> bool:
        return self.accept


def _ctx(clock, inputs=None, outputs=None):
    cfg = parse_config('[[processes]]\nname = "p"\nmodule = "tests.support.agents:SeqSource"\n')
    return AgentContext(config=cfg, process=cfg.process("p"), inputs=inputs or {}, outputs=outputs or {}, log=None,
                        clock=clock)


def test_ports_by_name_or_the_only_one():
    a, b, out = _Port(), _Port(), _Port()
    ctx = _ctx(ManualClock(0), inputs={"a": a, "b": b}, outputs={"out": out})
    assert ctx.input("a") is a and ctx.input("b") is b
    assert ctx.output() is out and ctx.output("out") is out
    assert ctx.output("audit", required=False) is None and ctx.output("out", required=False) is out
    with pytest.raises(ConfigError, match=r"^process p: name the input ring \(params.input\); it has \['a', 'b'\]$"):
        ctx.input()
    with pytest.raises(ConfigError, match=r"^process p: input ring 'c' is not among its inputs \['a', 'b'\]$"):
        ctx.input("c")
    with pytest.raises(ConfigError, match=r"^process p: output ring 'audit' is not among its outputs \['out'\]$"):
        ctx.output("audit")


def test_emits_and_marks_are_recorded_with_their_latency_since_origin(tmp_path):
    clock = ManualClock(1_000)
    ctx = _ctx(clock)
    ctx.tap = LatencyTap(str(tmp_path / "p.lat.npy"), capacity=4)
    assert ctx.emit(_Port(), Kind.BOOK, b"x", 400)
    clock.advance(1_500)
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
    ctx = _ctx(ManualClock(10))
    ctx.mark(mark_code(MARK_ORDER_SENT), 5)
    assert ctx.emit(_Port(), Kind.BOOK, b"x", 5) and ctx.tap is None and ctx.latency_percentiles_ns() == (5, 5)


def test_the_latency_histogram_counts_each_output_once_in_its_bucket():
    """Every output since the last call, bucketed by the process table's bounds (a latency on a bound
    is in that bound's bucket), summed in ns; folded at each call (the runner's heartbeat), never twice."""
    from pipeline.runtime.proctable import LAT_BUCKETS

    port = _Port()
    ctx = _ctx(ManualClock(10**12), outputs={"out": port})
    for lat_ns in (500, 1_000, 1_001, 3_000_000, 2_000_000_000):
        ctx.emit(port, 1, b"x", 10**12 - lat_ns)
    counts, sum_ns = ctx.latency_histogram_ns()
    expected = [0] * LAT_BUCKETS
    for bucket in (0, 0, 1, 11, 19):  # <=1us, <=1us, <=2us, <=5ms, above 1 s
        expected[bucket] += 1
    assert list(counts) == expected and sum_ns == 500 + 1_000 + 1_001 + 3_000_000 + 2_000_000_000
    counts, sum_ns = ctx.latency_histogram_ns()
    assert list(counts) == expected, "nothing new: nothing added"
    ctx.emit(port, 1, b"x", 10**12 - 150_000)
    counts, _ = ctx.latency_histogram_ns()
    assert counts[7] == 1 and int(counts.sum()) == 6  # 150 us: the <=200 us bucket


def test_outputs_beyond_the_window_between_two_calls_are_not_counted():
    from pipeline.runtime.agent import LATENCY_WINDOW

    port = _Port()
    ctx = _ctx(ManualClock(10**12), outputs={"out": port})
    for _ in range(LATENCY_WINDOW + 100):
        ctx.emit(port, 1, b"x", 10**12 - 1_000)
    counts, sum_ns = ctx.latency_histogram_ns()
    assert int(counts.sum()) == LATENCY_WINDOW and sum_ns == LATENCY_WINDOW * 1_000
