"""One variant's simulation: the order latency (an order decided at t meets the book of t + latency),
the queue position and fees of the matching engine, the gateway's view, and P&L on a hand-computed
path."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.bitget.book import BOOK_STRUCT
from pipeline.trading.evaluation.decisions import Decisions, compute_features, marks_of
from pipeline.trading.evaluation.replay import EvaluationError, MarketEvent, Tape, TapeInstrument
from pipeline.trading.evaluation.simulator import SimParams, VariantRun, eval_limits, run_variant
from pipeline.trading.messages import EXEC_STRUCT, TRADE_SIDE_SELL, TRADE_STRUCT, ExecType, Kind, Label
from pipeline.venue.fees import FeeSchedule

INS = TapeInstrument(id=1, symbol="ABCUSDT", tick_size=0.1, lot_size=1.0)
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def book(t_ns: int, bid: float, bid_sz: float, ask: float, ask_sz: float, seq: int) -> MarketEvent:
    z = [0.0] * 14
    payload = BOOK_STRUCT.pack(1, 0, 1, 1, seq, t_ns, bid, *z, bid_sz, *z, ask, *z, ask_sz, *z)
    return MarketEvent(t_ns, Kind.BOOK, 1, payload)


def trade(t_ns: int, price: float, size: float, tid: int) -> MarketEvent:
    return MarketEvent(t_ns, Kind.TRADE, 1, TRADE_STRUCT.pack(1, TRADE_SIDE_SELL, tid, t_ns, price, size))


def one_buy(tape: Tape, at_row: int):
    """Features of ``tape``, and decisions that say LEAN_BUY at row ``at_row`` only."""
    table = compute_features(tape)
    labels = np.zeros(len(table), np.uint8)
    labels[at_row] = Label.LEAN_BUY
    return table, Decisions(labels, np.zeros((len(table), 4), np.float32), labels.astype(np.float64), "one buy")


def params(latency_us: float, fees=None) -> SimParams:
    return SimParams(order_latency_ns=int(latency_us * 1000), exec_latency_ns=int(latency_us * 1000), fees=fees,
                     queue_model=True, capital=1000.0)


LIMITS = eval_limits({"min_notional": 0.1, "max_orders_per_s": 100}, [INS], 1)


def crossing_tape() -> Tape:
    """A book at T0 (bid 100.0 / ask 100.2), at T0 + 0.5 ms a locked one (ask 100.0: the features reject
    it, so no SIGNAL moves the gateway), at T0 + 3 ms the first one again."""
    return Tape((INS,), [book(T0, 100.0, 5, 100.2, 5, 1), book(T0 + MS // 2, 100.0, 5, 100.0, 5, 2),
                         book(T0 + 3 * MS, 100.0, 5, 100.2, 5, 3)])


@pytest.mark.parametrize("latency_us, placed, rejected, fills", [(100, 1, 0, 1), (1000, 0, 1, 0)])
def test_an_order_meets_the_book_of_its_arrival_time(latency_us, placed, rejected, fills):
    """The gateway decides a passive buy at 100.0 (the best bid) at T0. After 100 µs it reaches the
    first book and rests, and the locked book at 0.5 ms crosses it: a maker fill at 100.0. After 1 ms
    it meets the locked book itself, whose ask it would take: the post-only order is refused (REJECTED
    back to the gateway, which then holds nothing)."""
    tape = crossing_tape()
    table, d = one_buy(tape, 0)
    assert table.rejected == {"book_crossed_book": 1}
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, params(latency_us))
    res = run.run()
    assert res.counts["gateway"]["OrderApproved"] == 1
    ex = res.counts["exchange"]
    assert (ex["placed"], ex["rejected"], ex["fills"]) == (placed, rejected, fills)
    if placed:
        (order,) = run.ex.engine.orders.values()
        assert order.price == 100
        assert [(f.ts_ns, f.price, f.liquidity) for f in run.ex.fills] == [(T0 + MS // 2, 100.0, "maker")]
    assert res.positions == {1: float(fills)}
    assert not run.gw.books[1].working  # filled, or refused: nothing works at the gateway


def test_order_arrival_time_is_decision_plus_latency():
    """The engine's clock at the arrival is the decision time + the latency (5 ms here: ms resolution)."""
    tape = Tape((INS,), [book(T0, 100.0, 5, 100.2, 5, 1), book(T0 + 20 * MS, 100.0, 5, 100.2, 5, 2)])
    table, d = one_buy(tape, 0)
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, params(5000))
    run.run()
    (order,) = run.ex.engine.orders.values()
    assert order.c_ms == T0 // MS + 5


def queue_tape() -> Tape:
    """Our buy rests at 100.0 behind 5 displayed; a trade of 3 at 100.0 (queue 5 -> 2), then one of 4
    (2 more ahead, then 1 fills us, the last 1 is nobody's), then the mid rises to 100.15."""
    return Tape((INS,), [
        book(T0, 100.0, 5, 100.2, 5, 1),
        trade(T0 + 10 * MS, 100.0, 3, 1), book(T0 + 10 * MS, 100.0, 2, 100.2, 5, 2),
        trade(T0 + 20 * MS, 100.0, 4, 2), book(T0 + 20 * MS, 99.9, 5, 100.2, 5, 3),
        book(T0 + 30 * MS, 100.1, 5, 100.2, 5, 4),
    ])


def test_queue_fees_and_pnl_on_a_hand_computed_path():
    tape = queue_tape()
    table, d = one_buy(tape, 0)
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, params(100, FeeSchedule(maker_bps=10, taker_bps=20)))
    seen, on_exec = [], run.gw.on_exec
    run.gw.on_exec = lambda payload: (seen.append((run.now, EXEC_STRUCT.unpack(payload)[1])), on_exec(payload))[1]
    res = run.run()
    # the ACK 100 µs after the order reached the exchange (itself 100 µs after the decision), the FILL
    # 100 µs after the trade that filled it
    assert seen == [(T0 + 200_000, ExecType.ACKED), (T0 + 20 * MS + 100_000, ExecType.FILLED)]
    fills = run.ex.fills
    assert len(fills) == 1
    f = fills[0]
    # filled by the second trade (the first only ate the queue), as a maker, at our price
    assert (f.ts_ns, f.side, f.price, f.size, f.liquidity) == (T0 + 20 * MS, 1, 100.0, 1.0, "maker")
    assert f.fee == pytest.approx(100.0 * 1.0 * 10 / 10_000)  # 0.1, the maker rate
    m = res.metrics
    # marked at the last mid (100.1 + 100.2) / 2 = 100.15: gross 0.15, fees 0.1, net 0.05
    assert m["gross_pnl"] == pytest.approx(0.15) and m["fees"] == pytest.approx(0.1)
    assert m["net_pnl"] == pytest.approx(0.05) and m["trades"] == 1 and m["round_trips"] == 0
    # the gateway learned of the fill (100 µs later) and holds the lot
    assert res.positions == {1: 1.0}
    assert res.counts["gateway"]["FillApplied"] == 1


def test_without_queue_the_first_trade_fills():
    tape = queue_tape()
    table, d = one_buy(tape, 0)
    p = SimParams(order_latency_ns=100_000, exec_latency_ns=100_000, fees=None, queue_model=False, capital=1000.0)
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, p)
    run.run()
    assert [f.ts_ns for f in run.ex.fills] == [T0 + 10 * MS]


def test_hold_never_trades_and_counts_its_labels():
    tape = queue_tape()
    table = compute_features(tape)
    d = Decisions(np.zeros(len(table), np.uint8), np.zeros((len(table), 4), np.float32), np.zeros(len(table)), "")
    res = run_variant(tape, table, marks_of(table), d, LIMITS, params(100))
    assert res.metrics["trades"] == 0 and res.metrics["net_pnl"] == 0.0
    assert res.counts["labels"] == {"HOLD": 4, "LEAN_BUY": 0, "LEAN_SELL": 0, "EMERGENCY": 0}
    assert res.counts["gateway"] == {}


def test_limits_cover_instruments_the_config_does_not_name():
    lim = eval_limits({"max_position_lots": {"BTCUSDT": 10, "ETHUSDT": 4}, "lean_lots": 0}, [INS], 2)
    assert lim.max_position_lots == {"*": 4} and lim.lean_lots == 2
    with pytest.raises(EvaluationError, match="collar_bps"):
        eval_limits({"collar_bps": -1}, [INS], 1)
    table, _ = one_buy(queue_tape(), 0)
    with pytest.raises(EvaluationError, match="3 decisions for 4"):
        VariantRun(queue_tape(), table, marks_of(table), Decisions(np.zeros(3, np.uint8), np.zeros((3, 4), np.float32),
                                                                   np.zeros(3)), LIMITS, params(1))


def test_the_signal_carries_the_variant_s_flags_and_the_warmup_bit():
    """The gateway reads each row's flags as the fast stage writes them: the variant's at-risk / range
    bits, and SIGNAL_FLAG_WARMUP where the FEATURES say warm-up (the first book of an instrument)."""
    from pipeline.trading.messages import SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE, SIGNAL_FLAG_WARMUP

    tape = queue_tape()
    table = compute_features(tape)
    n = len(table)
    flags = np.array([0, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE, 0], np.uint8)
    d = Decisions(np.zeros(n, np.uint8), np.zeros((n, 4), np.float32), np.zeros(n), "flags", flags)
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, params(100))
    seen, on_signal = [], run.gw.on_signal
    run.gw.on_signal = lambda payload, t: (seen.append(payload[3]), on_signal(payload, t))[1]
    run.run()
    assert seen == [SIGNAL_FLAG_WARMUP, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE, 0]


def emergency_tape() -> Tape:
    """Quotes rest at 100.0 / 100.2 from T0; at 10 ms a book whose row says EMERGENCY (bid at risk);
    at 20 ms sellers trade 10 through the bid (at 99.9) and the book falls to 99.8 / 100.0, where it
    still is at 1.5 s."""
    return Tape((INS,), [book(T0, 100.0, 5, 100.2, 5, 1), book(T0 + 10 * MS, 100.0, 5, 100.2, 5, 2),
                         trade(T0 + 20 * MS, 99.9, 10, 1), book(T0 + 20 * MS, 99.8, 5, 100.0, 5, 3),
                         book(T0 + 1500 * MS, 99.8, 5, 100.0, 5, 4)])


def test_quoting_with_the_fast_path_on_and_off_differ_when_an_emergency_comes():
    """Off: the resting bid is filled by the sweep and loses 1 tick at 1 s (mid 99.9, 1 s later still
    99.9). On: the EMERGENCY (bid at risk) pulls the bid alone 100 µs later, before the sweep; the
    cancelled bid is counted as a fill avoided (the sweep traded through it) with that markout."""
    from pipeline.trading.messages import SIGNAL_FLAG_AT_RISK_BID

    tape = emergency_tape()
    table = compute_features(tape)
    n = len(table)
    on_labels = np.zeros(n, np.uint8)
    on_labels[1] = Label.EMERGENCY
    flags = np.zeros(n, np.uint8)
    flags[1] = SIGNAL_FLAG_AT_RISK_BID
    on = Decisions(on_labels, np.zeros((n, 4), np.float32), np.zeros(n), "on", flags)
    off = Decisions(np.zeros(n, np.uint8), np.zeros((n, 4), np.float32), np.zeros(n), "off")
    res = {k: run_variant(tape, table, marks_of(table), d, LIMITS, params(100), quote_lots=1)
           for k, d in (("on", on), ("off", off))}
    m_off, m_on = res["off"].metrics, res["on"].metrics
    assert res["off"].counts["quoter"]["quotes_placed"] >= 2 and m_off["trades"] == 1
    assert m_off["markouts"][1000]["mean_ticks"] == pytest.approx(-1.0)  # bought 100.0, mid 1 s later 99.9
    assert m_off["emergency_cancelled"] == 0 and m_off["avoided"]["cancelled"] == 0
    assert m_on["trades"] == 0 and m_on["net_pnl"] != m_off["net_pnl"]
    assert res["on"].counts["gateway"]["EmergencyReceived"] == 1
    # the bid was the side at risk: only it is pulled (the ask keeps working; the later reprice is not an EMERGENCY)
    assert m_on["emergency_cancelled"] == 1 and "CancelAllSent" not in res["on"].counts["gateway"]
    through = m_on["avoided"]["rules"]["through"]
    assert through["would_fill"] == 1 and through["markouts"][1000]["sum_ticks"] == pytest.approx(-1.0)
    assert through["markouts"][1000]["adverse_quote"] == pytest.approx(0.1)
    assert m_on["fill_rate"] == 0.0 and m_off["fill_rate"] > 0


@pytest.mark.parametrize("ask_sz, placed", [(5.0, 1), (1.0, 0)])
def test_the_depth_aware_planner_sees_the_books_depth_and_slippage_is_taken_against_the_arrival_mid(ask_sz, placed):
    """A LEAN_BUY of 1 lot at T0 (bid 100.0 / ask 100.2, mid 100.1): the buy would rest at 100.0, one tick
    under the mid, so the asks within one tick above it count: 5 > 1.2 opens the gate at once, 1 does
    not (and no later book shows more: the parent waits, then expires). The fill at 100.0 is one tick,
    0.1 / 100.1 = 9.99 bps, better than the arrival mid: slippage -1 tick."""
    from pipeline.trading.risk.execution import ExecutionParams

    tape = Tape((INS,), [book(T0, 100.0, 5, 100.2, ask_sz, 1), trade(T0 + 10 * MS, 100.0, 3, 1),
                         book(T0 + 2000 * MS, 100.0, 5, 100.2, ask_sz, 2)])
    table, d = one_buy(tape, 0)
    p = SimParams(order_latency_ns=100_000, exec_latency_ns=100_000, fees=None, queue_model=False, capital=1000.0)
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, p, execution=ExecutionParams(planner="depth"))
    res = run.run()
    assert res.metrics["planner"] == "depth" and run.ex.counts["placed"] == placed
    parents = res.counts["parents"]
    if placed:
        assert parents == {"FILLED": 1, "SUBMITTED": 1, "WAIT_LIQUIDITY": 1}
        s = res.metrics["slippage"]
        assert s["fills"] == 1 and s["mean_ticks"] == pytest.approx(-1.0)
        assert s["mean_bps"] == pytest.approx(-0.1 / 100.1 * 1e4)
    else:
        assert parents == {"EXPIRED": 1, "WAIT_LIQUIDITY": 1} and res.metrics["slippage"]["fills"] == 0


def test_the_simple_planner_ignores_depth_and_is_the_default():
    tape = Tape((INS,), [book(T0, 100.0, 5, 100.2, 1.0, 1), trade(T0 + 10 * MS, 100.0, 3, 1)])
    table, d = one_buy(tape, 0)
    p = SimParams(order_latency_ns=100_000, exec_latency_ns=100_000, fees=None, queue_model=False, capital=1000.0)
    run = VariantRun(tape, table, marks_of(table), d, LIMITS, p)
    res = run.run()
    assert res.metrics["planner"] == "simple" and run.ex.counts["placed"] == 1 and "parents" not in res.counts
    assert res.metrics["slippage"]["mean_ticks"] == pytest.approx(-1.0)
