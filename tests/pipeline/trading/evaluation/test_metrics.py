"""The evaluation metrics against small cases computed by hand (the arithmetic is written out beside
each expected number): drawdown of a known equity path, round trips with partial closes and a flip,
fees, mark to market on two instruments, Sharpe per hour, the information coefficient (monotone,
anti-monotone, ties) and its decay, and the design document's scores and verdicts at their edges."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.trading.evaluation.metrics import (HOUR_NS, NS_PER_S, Fill, MarkSeries, RoundTrip, alpha_decay, drawdown,
                                                 equity_curve, fee_for, information_coefficient, marks_at_fill_prices,
                                                 max_drawdown, risk_adjusted_lift, round_trips, sharpe_per_hour,
                                                 spearman, stability_score, summarize, verdicts, win_rate)

S = NS_PER_S
MIN = 60 * S


def fill(ts, side, price, size, fee=0.0, iid=1) -> Fill:
    return Fill(ts_ns=ts, instrument_id=iid, side=side, price=price, size=size, fee=fee)


# ------------------------------------------------------------------------------------------ drawdown
def test_drawdown_of_a_known_equity_path():
    net = [0.0, 100.0, 50.0, 150.0, 30.0, 60.0]
    # peak (running max from 0):   0, 100, 100, 150, 150, 150
    # (peak - net) / (1000 + peak): 0, 0, 50/1100, 0, 120/1150, 90/1150
    dd = drawdown(net, 1000.0)
    assert dd.tolist() == pytest.approx([0.0, 0.0, 50 / 1100, 0.0, 120 / 1150, 90 / 1150])
    assert max_drawdown(net, 1000.0) == pytest.approx(120 / 1150)  # 0.10435


def test_drawdown_from_the_flat_start_and_the_degenerate_curves():
    assert max_drawdown([-100.0, -50.0], 1000.0) == pytest.approx(0.1)  # peak 0: 100 / 1000
    assert max_drawdown([], 1000.0) == 0.0
    assert max_drawdown([0.0, 5.0, 7.0, 7.0], 1000.0) == 0.0
    with pytest.raises(ValueError, match="capital must be finite and > 0, got 0.0"):
        max_drawdown([1.0], 0.0)


# ------------------------------------------------------------------------------------------ round trips
TRIP_FILLS = [
    fill(1, +1, 100.0, 2.0, 0.2),  # instrument 1: opens long 2
    fill(2, -1, 103.0, 1.0, 0.1),  # partial close: long 1
    fill(3, -1, 104.0, 3.0, 0.3),  # closes 1 (trip 1) and flips: short 2 opens trip 2 at t=3
    fill(4, +1, 106.0, 2.0, 0.2),  # closes trip 2
    fill(7, +1, 100.0, 1.0, 0.1),  # opens long 1, never closed: no round trip
    fill(2, +1, 10.0, 1.0, 0.01, iid=2),  # instrument 2: a 0.005 edge that fees eat
    fill(6, -1, 10.005, 1.0, 0.01, iid=2),
]


def test_round_trips_with_partial_closes_a_flip_and_an_open_position():
    trips = round_trips(TRIP_FILLS)
    # trip 1: cash -200 + 103 + 104 (1 of the 3 sold) = 7; fees 0.2 + 0.1 + 0.3 * 1/3 = 0.4; net 6.6
    # trip 2: cash +104 * 2 (the rest of the flip) - 106 * 2 = -4; fees 0.3 * 2/3 + 0.2 = 0.4; net -4.4
    # trip 3: cash -10 + 10.005 = 0.005; fees 0.02; net -0.015
    want = [(1, 1, 3, 7.0, 0.4, 6.6), (1, 3, 4, -4.0, 0.4, -4.4), (2, 2, 6, 0.005, 0.02, -0.015)]
    assert [(r.instrument_id, r.open_ts_ns, r.close_ts_ns) for r in trips] == [w[:3] for w in want]
    for r, w in zip(trips, want):
        assert (r.gross, r.fees, r.net) == pytest.approx(w[3:], abs=1e-12)
    assert win_rate(trips) == pytest.approx(1 / 3)  # only trip 1 has net > 0


def test_win_rate_counts_net_above_zero_and_is_none_without_trips():
    trip = lambda net: RoundTrip(instrument_id=1, open_ts_ns=0, close_ts_ns=1, gross=net, fees=0.0, net=net)  # noqa: E731
    assert win_rate([trip(1.0), trip(0.0), trip(-1.0), trip(2.0)]) == 0.5  # a zero trip is not a win
    assert win_rate([]) is None
    assert round_trips([fill(1, +1, 100.0, 1.0)]) == []


def test_a_round_trip_closes_on_float_dust():
    fs = [fill(1, +1, 100.0, 0.1), fill(2, +1, 100.0, 0.2), fill(3, -1, 101.0, 0.3)]  # 0.1 + 0.2 != 0.3
    (trip,) = round_trips(fs)
    assert (trip.open_ts_ns, trip.close_ts_ns, trip.gross) == (1, 3, pytest.approx(0.3))
    eq = equity_curve(fs, MarkSeries({1: [4]}, {1: [1e9]}))  # flat is flat: a later mark does not move it
    assert eq.gross[-1] == eq.gross[-2] == pytest.approx(0.3)


# ------------------------------------------------------------------------------------------ fees and equity
def test_fee_for_a_notional_in_bps():
    assert fee_for(50_000.0, 0.0002, 10.0) == pytest.approx(0.01)  # 10 notional * 10 bps
    assert fee_for(3_000.0, 0.5, -1.0) == pytest.approx(-0.15)  # a rebate is negative


TWO = [fill(10, +1, 100.0, 2.0, 0.5, iid=1), fill(20, -1, 50.0, 1.0, 0.25, iid=2)]
TWO_MARKS = MarkSeries({1: [5, 15, 30], 2: [25, 30]}, {1: [99.0, 101.0, 104.0], 2: [48.0, 52.0]})


def test_mark_to_market_on_two_instruments():
    eq = equity_curve(TWO, TWO_MARKS)
    assert eq.ts_ns.tolist() == [5, 10, 15, 20, 25, 30]  # every mark and fill time, merged
    # t=5  nothing yet                                               gross 0
    # t=10 #1 long 2, cash -200, mark 99 (t=5):  -200 + 198 = -2      gross -2
    # t=15 #1 mark 101: -200 + 202 = 2                                gross 2
    # t=20 #2 short 1, cash +50, no mark yet: its fill price 50 -> 0   gross 2
    # t=25 #2 mark 48: 50 - 48 = 2                                    gross 4
    # t=30 #1 mark 104: 8; #2 mark 52: -2                             gross 6
    assert eq.gross.tolist() == [0.0, -2.0, 2.0, 2.0, 4.0, 6.0]
    assert eq.fees.tolist() == [0.0, 0.5, 0.5, 0.75, 0.75, 0.75]
    assert eq.net.tolist() == [0.0, -2.5, 1.5, 1.25, 3.25, 5.25]


def test_equal_times_apply_in_the_given_order_and_the_last_mark_wins():
    marks = MarkSeries({1: [10, 10]}, {1: [100.0, 90.0]})
    eq = equity_curve([fill(10, +1, 95.0, 1.0), fill(10, +1, 96.0, 1.0)], marks)
    assert eq.ts_ns.tolist() == [10] and eq.gross.tolist() == [-95.0 - 96.0 + 2 * 90.0]
    assert marks_at_fill_prices(TWO).mid[2].tolist() == [50.0] and marks_at_fill_prices(TWO).ts_ns[1].tolist() == [10]


def test_summarize_two_instruments_by_hand():
    out = summarize(TWO, TWO_MARKS, capital=100.0)
    assert (out["net_pnl"], out["gross_pnl"], out["fees"]) == (5.25, 6.0, 0.75)
    assert (out["trades"], out["round_trips"], out["turnover"]) == (2, 0, 250.0)  # 2 * 100 + 1 * 50
    assert out["max_drawdown"] == pytest.approx(2.5 / 100.0)  # -2.5 from the flat start; later only 0.25 / 101.5
    assert out["win_rate"] is None and out["ic"] == {} and out["alpha_decay"] is None
    assert out["sharpe"] is None  # 25 ns of data: one bucket
    assert out["stability_score"] is None and out["risk_adjusted_lift"] is None
    assert out["verdicts"] == {"alpha_decay": "N/A", "win_rate": "N/A", "max_drawdown": "SAFE"}


def test_results_do_not_depend_on_the_order_fills_are_given_in():
    fs = TRIP_FILLS
    marks = marks_at_fill_prices(fs)
    a = summarize(fs, marks, capital=1000.0)
    b = summarize(list(reversed(fs[5:])) + fs[:5][::-1], marks, capital=1000.0)
    assert repr(a) == repr(b)  # bit for bit (every time differs within an instrument)
    assert a["round_trips"] == 3 and a["win_rate"] == pytest.approx(1 / 3)


def test_bad_fills_and_marks_are_named():
    with pytest.raises(ValueError, match="Fill.side must be"):
        fill(1, 0, 100.0, 1.0)
    with pytest.raises(ValueError, match="Fill.size must be finite and > 0"):
        fill(1, 1, 100.0, 0.0)
    with pytest.raises(ValueError, match="Fill.price"):
        fill(1, 1, float("nan"), 1.0)
    with pytest.raises(ValueError, match=r"MarkSeries.ts_ns\[1\] must not decrease: \[0\] = 5, \[1\] = 4"):
        MarkSeries({1: [5, 4]}, {1: [1.0, 1.0]})
    with pytest.raises(ValueError, match=r"MarkSeries.mid\[1\]\[1\] must be finite and > 0"):
        MarkSeries({1: [1, 2]}, {1: [1.0, 0.0]})
    with pytest.raises(ValueError, match="ts_ns names instruments"):
        MarkSeries({1: [1]}, {2: [1.0]})


# ------------------------------------------------------------------------------------------ Sharpe
def test_sharpe_per_hour_over_hour_buckets():
    ts = np.array([0, HOUR_NS // 2, HOUR_NS * 12 // 10, HOUR_NS * 5 // 2])
    # buckets: [0, 0.5h] -> E0 = 1; [1.2h] -> E1 = 3; [2.5h] -> E2 = 2; increments 1, 2, -1
    # mean 2/3; var (1/9 + 16/9 + 25/9) / 2 = 7/3; ratio (2/3) / sqrt(7/3) = 2 / sqrt(21)
    assert sharpe_per_hour(ts, [0.0, 1.0, 3.0, 2.0]) == pytest.approx(2 / math.sqrt(21))
    # an empty bucket carries the net over: E = 1, 1, 4; increments 1, 0, 3 -> (4/3) / sqrt(7/3) = 4 / sqrt(21)
    assert sharpe_per_hour([0, HOUR_NS * 5 // 2], [1.0, 4.0]) == pytest.approx(4 / math.sqrt(21))


def test_sharpe_scales_shorter_buckets_to_an_hour_and_is_none_when_undefined():
    got = sharpe_per_hour([0, MIN, 2 * MIN], [1.0, 3.0, 2.0], bucket_ns=MIN)
    assert got == pytest.approx(2 / math.sqrt(21) * math.sqrt(60))
    assert sharpe_per_hour([0, HOUR_NS - 1], [1.0, 2.0]) is None  # one bucket
    assert sharpe_per_hour([0, HOUR_NS, 2 * HOUR_NS], [0.0, 0.0, 0.0]) is None  # std 0: never traded
    assert sharpe_per_hour([], []) is None


# ------------------------------------------------------------------------------------------ IC and decay
T = [10 * S, 20 * S, 30 * S, 40 * S]
A = [-2.0, -1.0, 1.0, 2.0]  # the mid move 1 s after each signal time


def ic_marks(a, b):
    """Mid 100 at each signal time T_k, 100 + a_k at T_k + 1 s, 100 + b_k at T_k + 5 s."""
    ts, mid = [], []
    for t, x, y in zip(T, a, b):
        ts += [t, t + S, t + 5 * S]
        mid += [100.0, 100.0 + x, 100.0 + y]
    return np.array(ts), np.array(mid)


def test_information_coefficient_monotone_anti_monotone_and_ties():
    mt, mm = ic_marks(A, A)
    assert information_coefficient(T, [1, 2, 3, 4], mt, mm, [S]) == {S: pytest.approx(1.0)}
    assert information_coefficient(T, [4, 3, 2, 1], mt, mm, [S]) == {S: pytest.approx(-1.0)}
    # ties: signal ranks 1, 2.5, 2.5, 4; returns (-2, 1, -1, 2)% ranks 1, 3, 2, 4; centred
    # (-1.5, 0, 0, 1.5) and (-1.5, 0.5, -0.5, 1.5): 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    mt, mm = ic_marks([-2.0, 1.0, -1.0, 2.0], A)
    assert information_coefficient(T, [1, 2, 2, 3], mt, mm, [S])[S] == pytest.approx(3 / math.sqrt(10))
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))


def test_ic_decay_over_horizons_and_the_mid_from_the_last_mark_at_or_before():
    # at 5 s the returns rank 2, 1, 4, 3: sum d^2 = 4, rho = 1 - 6 * 4 / (4 * 15) = 0.6
    mt, mm = ic_marks(A, [-1.0, -2.0, 2.0, 1.0])
    ic = information_coefficient(T, [1, 2, 3, 4], mt, mm, [S, 3 * S, 5 * S])
    assert ic == {S: pytest.approx(1.0), 3 * S: pytest.approx(1.0), 5 * S: pytest.approx(0.6)}  # 3 s: the 1 s mark
    assert alpha_decay(ic) == pytest.approx(0.4)  # 1 - 0.6 / 1.0
    # a signal before the first mark, or whose t + h is past the last mark (45 s), is not used
    ic2 = information_coefficient([5 * S] + T + [44_500_000_000], [9, 1, 2, 3, 4, -9], mt, mm, [S, 3 * S, 5 * S])
    assert ic2 == ic
    assert information_coefficient(T[:2], [1, 2], mt, mm, [S]) == {S: None}  # under 3 pairs


def test_alpha_decay_is_none_without_an_edge_to_decay():
    assert alpha_decay({1: 0.5, 2: 0.25, 3: 0.1}) == pytest.approx(0.8)  # longest vs shortest
    assert alpha_decay({1: 0.0, 2: 0.1}) is None
    assert alpha_decay({1: None, 2: 0.1}) is None and alpha_decay({1: 0.1, 2: None}) is None
    assert alpha_decay({1: 0.3}) is None and alpha_decay({}) is None


def test_summarize_with_signals_reports_ic_by_horizon_in_ms():
    mt, mm = ic_marks(A, [-1.0, -2.0, 2.0, 1.0])
    marks = MarkSeries({1: mt}, {1: mm})
    out = summarize([], marks, capital=1000.0, signals=(np.array(T), np.array([1.0, 2.0, 3.0, 4.0])),
                    horizons_ns=[S, 5 * S])
    assert out["ic"] == {1000: pytest.approx(1.0), 5000: pytest.approx(0.6)}
    assert out["alpha_decay"] == pytest.approx(0.4) and out["verdicts"]["alpha_decay"] == "WATCH"
    assert out["trades"] == 0 and out["net_pnl"] == 0.0 and out["max_drawdown"] == 0.0
    pooled = summarize([], MarkSeries({1: mt, 2: mt}, {1: mm, 2: mm}), capital=1.0, horizons_ns=[S],
                       signals={1: (T, [1, 2, 3, 4]), 2: (T, [4, 3, 2, 1])})
    assert pooled["ic"] == {1000: pytest.approx(0.0, abs=1e-12)}  # one instrument's edge cancels the other's
    with pytest.raises(ValueError, match="need marks of exactly one instrument"):
        summarize([], MarkSeries({1: mt, 2: mt}, {1: mm, 2: mm}), capital=1.0, signals=(T, [1, 2, 3, 4]))
    with pytest.raises(ValueError, match="whole number of ms"):
        summarize([], marks, capital=1.0, horizons_ns=[1500])


# ------------------------------------------------------------------------------------------ scores, verdicts
def test_stability_score_and_risk_adjusted_lift():
    assert stability_score(0.25, 0.6) == pytest.approx(0.54)  # 0.75 * 0.4 + 0.6 * 0.4
    assert stability_score(0.4, 0.62) == pytest.approx(0.488)  # 0.6 * 0.4 + 0.62 * 0.4
    assert risk_adjusted_lift(0.6, 0.09) == pytest.approx(1.0)  # 0.1 / 0.1
    assert risk_adjusted_lift(0.58, 0.18) == pytest.approx(0.08 / 0.19)
    assert risk_adjusted_lift(0.4, 0.0) == pytest.approx(-10.0)  # -0.1 / 0.01
    assert stability_score(None, 0.6) is None and stability_score(0.2, None) is None
    assert risk_adjusted_lift(None, 0.1) is None and risk_adjusted_lift(0.6, None) is None


@pytest.mark.parametrize("value,want", [(0.2499, "SAFE"), (0.25, "WATCH"), (0.4, "WATCH"), (0.4001, "WARN"),
                                        (None, "N/A")])
def test_alpha_decay_verdict_at_its_edges(value, want):
    assert verdicts(value, None, None)["alpha_decay"] == want


@pytest.mark.parametrize("value,want", [(0.6201, "SAFE"), (0.62, "WATCH"), (0.58, "WATCH"), (0.5799, "WARN"),
                                        (None, "N/A")])
def test_win_rate_verdict_at_its_edges(value, want):
    assert verdicts(None, value, None)["win_rate"] == want


@pytest.mark.parametrize("value,want", [(0.1199, "SAFE"), (0.12, "WATCH"), (0.18, "WATCH"), (0.1801, "WARN"),
                                        (None, "N/A")])
def test_max_drawdown_verdict_at_its_edges(value, want):
    assert verdicts(None, None, value)["max_drawdown"] == want
