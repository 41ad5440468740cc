"""The simulator's order latency drawn per order (``SimParams.order_latency_table_ns``): each order its
own draw, the same seed the same draws, another seed others, orders reaching the exchange in the order
they were decided, and the draws summed up in the result."""

from __future__ import annotations

from pipeline.trading.evaluation.decisions import marks_of
from pipeline.trading.evaluation.simulator import SimParams, VariantRun, latency_summary
from tests.pipeline.trading.evaluation.test_simulator import LIMITS, T0, crossing_tape, one_buy

TABLE_NS = (100_000, 400_000, 2_000_000, 9_000_000)


def _run(seed: int, table: tuple[int, ...] = TABLE_NS) -> VariantRun:
    tape = crossing_tape()
    table_f, d = one_buy(tape, 0)
    p = SimParams(order_latency_ns=1_000_000, exec_latency_ns=100_000, fees=None, queue_model=False, capital=1000.0,
                  order_latency_table_ns=table, latency_seed=seed)
    return VariantRun(tape, table_f, marks_of(table_f), d, LIMITS, p)


def _dues(run: VariantRun, n: int) -> list[int]:
    run.now = T0
    return [run._order_due() for _ in range(n)]


def test_each_order_draws_its_own_latency_and_the_seed_reproduces_the_draws():
    a, b, c = _run(3), _run(3), _run(4)
    da, db, dc = _dues(a, 200), _dues(b, 200), _dues(c, 200)
    assert set(a.latencies_ns) == set(TABLE_NS)  # every value drawn: the latency varies per order
    assert a.latencies_ns == b.latencies_ns and da == db
    assert a.latencies_ns != c.latencies_ns


def test_orders_reach_the_exchange_in_the_order_decided():
    """A short draw after a long one waits for the order before it (decided at the same time here)."""
    run = _run(3)
    dues = _dues(run, 200)
    assert dues == sorted(dues)
    k = next(i for i in range(1, 200) if run.latencies_ns[i] < run.latencies_ns[i - 1])
    assert dues[k] == dues[k - 1] > T0 + run.latencies_ns[k]


def test_without_a_table_every_order_has_the_one_latency():
    run = _run(3, table=())
    assert _dues(run, 5) == [T0 + 1_000_000] * 5 and run.latencies_ns == [1_000_000] * 5


def test_the_result_sums_up_the_latencies_drawn():
    run = _run(3)
    res = run.run()
    s = res.metrics["order_latency_us"]
    assert s["n"] == len(run.latencies_ns) >= 1
    assert s == latency_summary(run.latencies_ns)
    assert latency_summary([100_000, 9_000_000, 400_000]) == {"n": 3, "min": 100.0, "p50": 400.0, "p99": 9000.0,
                                                              "max": 9000.0}
    assert latency_summary([])["n"] == 0
