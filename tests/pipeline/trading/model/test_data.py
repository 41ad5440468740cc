"""The fast model's data (pipeline/trading/model/data.py): moves on a market-time horizon, labels priced in
what acting on them costs (LEAN beyond the round trip, EMERGENCY as the adverse selection of an order at
the touch, with its side), the time split with its embargoes, mirror images, and which inputs change with
the update rate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pipeline.trading import features as f
from pipeline.trading.messages import Label
from pipeline.trading.model.data import (DROPPED, HELD_OUT, IC_HORIZONS_MS, MIRROR_SIDE, PACE_DEPENDENT_SLOTS, SIDE_ASK,
                                         SIDE_BID, SIDE_NONE, T0_NS, TRAIN, VALIDATION, Series, TrainParams,
                                         build_dataset, cost_ticks, forward_moves, label, market_params, mirror_rows,
                                         pace_steps, synthetic_series, time_split, touch_outcomes)
from pipeline.venue.fees import DEFAULT_EVALUATION_FEES
from pipeline.venue.synthetic import CALIBRATED, SyntheticParams

MS = 1_000_000
H, B, S, E = (int(lb) for lb in (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.EMERGENCY))


def test_the_move_is_the_mid_one_horizon_of_market_time_later_whatever_the_row_spacing():
    t = np.array([0, 10, 20, 35, 50]) * MS
    mid = np.array([0.0, 1.0, 3.0, 6.0, 10.0])
    move, ok = forward_moves(t, mid, 20 * MS)
    # t=0 -> the last row at or before 20 ms (mid 3); t=10 -> 30 ms: still the row at 20; t=20 -> 40: the row at 35
    assert move[:3].tolist() == [3.0, 2.0, 3.0]
    assert ok.tolist() == [True, True, True, False, False]  # 35 + 20 and 50 + 20 lie past the last row (50)
    assert forward_moves(np.zeros(0, np.int64), np.zeros(0), MS)[0].shape == (0,)


def test_a_lean_move_must_pay_the_spread_and_the_fee_on_both_sides():
    """Round trip at a row: the spread plus twice the fee in ticks at its mid. Tick 0.5 bps, fee 2 bps a
    side: 4 ticks of fees each way, so a 2-tick spread costs 2 + 8 = 10 ticks."""
    cost = cost_ticks(np.array([2.0, 2.0, 2.0, 2.0, 6.0]), np.full(5, 0.5), 2.0)
    assert cost.tolist() == [10.0, 10.0, 10.0, 10.0, 14.0]
    moves = np.array([10.0, 10.5, -10.5, 9.0, 12.0])
    none = np.zeros((5, 2), bool)
    y, side = label(moves, cost, none, np.zeros((5, 2)), TrainParams())
    assert y.tolist() == [H, B, S, H, H]  # at the cost is not beyond it; 12 ticks do not pay a 6-tick spread's 14
    assert side.tolist() == [SIDE_NONE] * 5
    assert cost_ticks(np.array([2.0]), np.array([0.5]), 0.0).tolist() == [2.0]  # no fee: the spread alone


def test_the_default_fee_is_the_maker_rate_of_the_evaluation_s_schedule():
    assert TrainParams().fee_bps == DEFAULT_EVALUATION_FEES.maker_bps == 10.0


def _path(bid, ask, lo=None, hi=None, step_ms=100):
    """A hand-made market: one row every ``step_ms``, touch ``bid`` / ``ask`` (ticks), trades between rows."""
    n = len(bid)
    bid, ask = np.asarray(bid, float), np.asarray(ask, float)
    lo = np.full(n, np.inf) if lo is None else np.asarray(lo, float)
    hi = np.full(n, -np.inf) if hi is None else np.asarray(hi, float)
    return np.arange(n) * step_ms * MS, (bid + ask) / 2, bid, ask, lo, hi


def test_a_bid_at_the_touch_is_filled_when_the_price_trades_to_or_through_it_within_the_horizon():
    #        row:   0      1      2      3      4
    t, mid, bid, ask, lo, hi = _path(bid=[100, 100, 99, 95, 95], ask=[104, 104, 103, 99, 99],
                                     lo=[np.inf, 101, 100, np.inf, np.inf])
    filled, markout = touch_outcomes(t, mid, bid, ask, lo, hi, 200 * MS)
    # row 0: rows 1-2 within 200 ms; the trade at 100 at row 2 reaches the bid at 100: filled, mid 101 then
    # row 1: rows 2-3; row 3's best ask 99 is below the bid 100 (the book came through it): filled, mid 97
    # row 2: rows 3-4; ask 99 at the bid 99: filled; row 3: the ask 99 never falls to 95; row 4: no row after it
    assert filled[:, 0].tolist() == [True, True, True, False, False]
    assert markout[:, 0].tolist() == [101 - 100, 97 - 100, 97 - 99, 97 - 95, 97 - 95]
    assert not filled[:, 1].any()  # nothing traded up to an ask
    assert markout[:, 1].tolist() == [104 - 101, 104 - 97, 103 - 97, 99 - 97, 99 - 97]


def test_an_ask_is_filled_by_a_trade_at_or_above_it_or_a_bid_through_it():
    t, mid, bid, ask, lo, hi = _path(bid=[100, 100, 100, 106], ask=[104, 104, 104, 110],
                                     hi=[-np.inf, 103, 104, -np.inf])
    filled, markout = touch_outcomes(t, mid, bid, ask, lo, hi, 100 * MS)  # one row ahead
    # row 0: the trade at 103 stays under 104; row 1: a trade at 104; row 2: the next bid 106 is through 104
    assert filled[:, 1].tolist() == [False, True, True, False]
    assert markout[2, 1] == 104 - 108
    assert touch_outcomes(np.zeros(0, np.int64), *([np.zeros(0)] * 5), MS)[0].shape == (0, 2)


def test_an_emergency_is_a_filled_order_at_the_touch_that_loses_more_than_x_and_has_a_side():
    """``label`` takes the markouts net of the fill's fee (``build_dataset`` subtracts it)."""
    filled = np.array([[True, False], [True, False], [False, True], [False, False], [True, True], [False, True]])
    markout = np.array([[-2.5, 9.0], [-1.5, 9.0], [9.0, -3.0], [-50.0, -50.0], [4.0, 1.0], [9.0, -2.0]])
    p = TrainParams(emergency_loss_ticks=2.0)
    moves = np.array([20.0, -20.0, 0.0, 0.0, 0.0, 0.0])
    y, side = label(moves, np.full(6, 10.0), filled, markout, p)
    # row 0: the bid lost 2.5 > 2 (it overrides the LEAN_BUY); row 1: 1.5 is not more than 2 (LEAN_SELL stays);
    # row 2: the ask lost 3; row 3: big losses, but nothing was filled; row 4: both filled, both gained;
    # row 5: the ask lost exactly 2: not more than X
    assert y.tolist() == [E, S, E, H, H, H]
    assert side.tolist() == [SIDE_BID, SIDE_NONE, SIDE_ASK, SIDE_NONE, SIDE_NONE, SIDE_NONE]
    assert TrainParams().emergency_loss_ticks == 0.0  # by default: any loss at the horizon's mid


def test_a_dataset_labels_a_hand_made_path_end_to_end():
    """A falling market: the bid at the touch is taken and the mid ends below it (EMERGENCY, bid side);
    then the ask lifts away (the spread widens) and the mid rises more than its round trip without
    filling anything (LEAN_BUY); the rows whose horizon passes the end are left out."""
    t, mid, bid, ask, lo, hi = _path(bid=[100, 100, 97, 97, 97, 97, 98, 98, 98],
                                     ask=[102] * 2 + [99] * 4 + [130] * 3,
                                     lo=[np.inf, np.inf, 99] + [np.inf] * 6)
    s = Series("hand", np.zeros((9, 128), np.float32), t, mid, np.full(9, 1.0), "g", 1.0, bid, ask, lo, hi)
    p = TrainParams(horizon_ms=200, fee_bps=1.0, emergency_loss_ticks=0.0, validation=0.0, holdout=0.0)
    ds = build_dataset([s], p)
    assert len(ds.y) == 7  # rows 7 and 8: their 200 ms pass the last row
    assert ds.y.tolist() == [E, E, H, H, B, B, H]
    assert ds.side.tolist() == [SIDE_BID, SIDE_BID, 0, 0, 0, 0, 0]
    # a 2-tick spread and 1 bps a side at 1 bps a tick: 2 + 2
    assert ds.cost_ticks.tolist() == [4.0] * 2 + [4.0] * 4 + [34.0]  # the wide spread costs too
    assert ds.filled[0].tolist() == [True, False] and ds.markout_ticks[0].tolist() == [98.0 - 100.0, 102.0 - 98.0]
    thin = _path(bid=[100, 100, 100], ask=[102, 102, 102], lo=[np.inf, 100, np.inf])  # filled; the mid ends 1 above
    mk = build_dataset([Series("thin", np.zeros((3, 128), np.float32), thin[0], thin[1], np.ones(3), "g", 1.0,
                               *thin[2:])], p)
    assert mk.markout_ticks[0, 0] == 1.0 and mk.y[0] == H  # 1 tick earned, a 1-tick fee paid: not a loss
    mk = build_dataset([Series("thin", np.zeros((3, 128), np.float32), thin[0], thin[1], np.ones(3), "g", 1.0,
                               *thin[2:])], dataclasses.replace(p, fee_bps=1.5))
    assert mk.y[0] == E and mk.side[0] == SIDE_BID  # a 1.5-tick fee: the fill loses after its fee
    up = _path(bid=[97, 97, 120, 120], ask=[99, 99, 122, 122])  # a jump through the ask: it is run over
    ds = build_dataset([Series("up", np.zeros((4, 128), np.float32), up[0], up[1], np.ones(4), "g", 1.0, *up[2:])], p)
    assert ds.y.tolist() == [E, E] and ds.side.tolist() == [SIDE_ASK, SIDE_ASK]


def test_the_training_market_is_the_calibrated_one_unless_told():
    assert TrainParams().market == "calibrated" and market_params("calibrated") is CALIBRATED
    assert market_params("default") == SyntheticParams()
    with pytest.raises(ValueError, match="market must be one of"):
        market_params("real")


def test_the_time_split_leaves_one_horizon_after_each_cut():
    t = np.arange(100) * MS
    part = time_split(t[::-1], 5 * MS, 0.2, 0.2)[::-1]  # any order
    assert (part[:60] == TRAIN).all() and (part[60:65] == DROPPED).all()
    assert (part[65:80] == VALIDATION).all() and (part[80:85] == DROPPED).all() and (part[85:] == HELD_OUT).all()
    with pytest.raises(ValueError, match="summing below 1"):
        time_split(t, MS, 0.5, 0.5)
    assert time_split(np.zeros(0, np.int64), MS, 0.2, 0.2).shape == (0,)


def test_one_capture_s_instruments_share_one_cut_each_synthetic_pace_has_its_own():
    p = TrainParams(horizon_ms=50, validation=0.2, holdout=0.2)

    def series(name, group, start_ms, n):
        t = (start_ms + np.arange(n) * 10) * MS
        return Series(name, np.zeros((n, 128), np.float32), t, np.arange(n, dtype=float), np.full(n, 0.02), group)

    ds = build_dataset([series("a", "cap", 0, 200), series("b", "cap", 5, 200), series("c", "syn", 50_000, 100)], p)
    for part in (TRAIN, VALIDATION, HELD_OUT):
        cap = ds.t_ns[(ds.part == part) & (ds.series < 2)]
        if part == TRAIN:
            last_train = cap.max()
        else:
            assert cap.min() > last_train + p.horizon_ms * MS - MS  # one cut for both instruments, then the embargo
        assert set(ds.series[(ds.part == part) & (ds.series < 2)]) == {0, 1}
    c = ds.part[ds.series == 2]
    assert (c == TRAIN).sum() > 0 and (c == HELD_OUT).sum() > 0  # its own clock, its own cuts
    assert ds.fwd_ticks.shape == (len(ds.y), len(IC_HORIZONS_MS))
    assert np.isnan(ds.fwd_ticks[ds.series == 2][-1, -1])  # 20 s past the last row of a 1 s series: unknown


def test_the_mirror_image_swaps_bids_and_asks_and_the_lean_labels():
    X = np.zeros((1, 128), np.float32)
    X[0, f.F_BID_DIST_0], X[0, f.F_ASK_DIST_0 + 2] = 0.5, 2.5
    X[0, f.F_BID_SIZE_0 + 1], X[0, f.F_ASK_SIZE_0] = 3.0, 7.0
    X[0, f.F_IMBALANCE_5], X[0, f.F_OFI], X[0, f.F_RETURN_BPS] = 0.25, -4.0, 1.5
    X[0, f.F_DEPTH_BID], X[0, f.F_DEPTH_ASK], X[0, f.F_VPIN], X[0, f.F_SPREAD_TICKS] = 10.0, 20.0, 0.4, 1.0
    X[0, f.F_BASIS_BPS], X[0, f.F_BASIS_Z], X[0, f.F_HIDDEN_SHARE], X[0, f.F_BASIS_AGE_MS] = 3.0, -1.25, 0.3, 40.0
    Xm, ym = mirror_rows(X, np.array([H, B, S, E])[:1])
    assert (Xm[0, f.F_BASIS_BPS], Xm[0, f.F_BASIS_Z], Xm[0, f.F_HIDDEN_SHARE], Xm[0, f.F_BASIS_AGE_MS]) == (
        -3.0, 1.25, np.float32(0.3), 40.0)
    assert Xm[0, f.F_ASK_DIST_0] == 0.5 and Xm[0, f.F_BID_DIST_0 + 2] == 2.5
    assert Xm[0, f.F_ASK_SIZE_0 + 1] == 3.0 and Xm[0, f.F_BID_SIZE_0] == 7.0
    assert (Xm[0, f.F_IMBALANCE_5], Xm[0, f.F_OFI], Xm[0, f.F_RETURN_BPS]) == (-0.25, 4.0, -1.5)
    assert (Xm[0, f.F_DEPTH_BID], Xm[0, f.F_DEPTH_ASK], Xm[0, f.F_VPIN], Xm[0, f.F_SPREAD_TICKS]) == (20.0, 10.0, 0.4, 1.0)
    assert mirror_rows(X, np.array([H, B, S, E]))[1].tolist() == [H, S, B, E]
    assert MIRROR_SIDE[[SIDE_NONE, SIDE_BID, SIDE_ASK]].tolist() == [SIDE_NONE, SIDE_ASK, SIDE_BID]
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(5, 128)).astype(np.float32)
    assert np.array_equal(mirror_rows(*mirror_rows(Y, np.arange(5) % 4))[0], Y)  # twice: the identity


def test_the_same_market_stepped_at_1_ms_and_20_ms_differs_only_in_the_pace_dependent_slots():
    """Which inputs are rate-invariant: one seed, so one sequence of books and trades, stepped at two paces
    (the default market: a trade nearly every other step)."""
    p = TrainParams(market="default")
    fast = synthetic_series(p, 1, 1_500, seed=5, warmup_ms=0)
    slow = synthetic_series(p, 20, 1_500, seed=5, warmup_ms=0)
    differ = {k for k in range(128) if not np.array_equal(fast.X[:, k], slow.X[:, k])}
    # the synthetic market has no non-displayed executions and no perpetual: those two stay 0 at every pace
    assert differ == set(PACE_DEPENDENT_SLOTS) - {f.F_HIDDEN_VOLUME_RATE, f.F_BASIS_AGE_MS}
    assert not fast.X[:, f.F_HIDDEN_AVAILABLE:f.F_RESERVED_0].any()
    assert np.array_equal(fast.mid_ticks, slow.mid_ticks)
    assert (fast.X[:, f.F_BOOK_INTERVAL_MS] == 1.0).all() and (slow.X[:, f.F_BOOK_INTERVAL_MS] == 20.0).all()
    ratio = fast.X[500:, f.F_TRADE_INTENSITY].mean() / slow.X[500:, f.F_TRADE_INTENSITY].mean()
    assert 8 < ratio < 20, ratio  # trades per second: the same trades in 1/20 of the time
    assert np.array_equal(np.diff(fast.t_ns), np.full(len(fast.t_ns) - 1, MS))
    assert np.array_equal(np.diff(slow.t_ns), np.full(len(slow.t_ns) - 1, 20 * MS))


def test_steps_are_shared_over_the_paces_and_each_pace_is_its_own_market():
    p = TrainParams(steps=9_000, paces_ms=(1, 20), pace_shares=(2, 1))
    assert pace_steps(p) == [6_000, 3_000]
    with pytest.raises(ValueError, match="one positive share per pace"):
        pace_steps(dataclasses.replace(p, pace_shares=(1,)))
    a = synthetic_series(p, 1, 200, warmup_ms=0)
    b = synthetic_series(p, 20, 200, warmup_ms=0)
    assert not np.array_equal(a.mid_ticks, b.mid_ticks)  # pace_seed: other seeds
    assert b.t_ns[0] == T0_NS + 2 * 20 * MS and len(b.t_ns) == 199  # the market's first BOOK has no previous one
    warm = synthetic_series(p, 20, 200, warmup_ms=1_000)
    assert warm.t_ns[0] == T0_NS + 51 * 20 * MS and len(warm.t_ns) == 200  # 1 s of warm-up: 50 steps, no rows
    with pytest.raises(ValueError, match="pace_ms must be >= 1"):
        synthetic_series(p, 0, 10)
