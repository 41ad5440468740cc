"""The fast model's data (pipeline/trading/model/data.py): moves on a market-time horizon, labels scaled
by the market's own recent moves, the time split with its embargoes, mirror images, and which inputs
change with the update rate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pipeline.trading import features as f
from pipeline.trading.messages import Label
from pipeline.trading.model.data import (DROPPED, HELD_OUT, IC_HORIZONS_MS, PACE_DEPENDENT_SLOTS, T0_NS, TRAIN, VALIDATION,
                                         Series, TrainParams, build_dataset, forward_moves, label, mirror_rows,
                                         pace_steps, synthetic_series, time_split, trailing_quantiles)

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


def test_the_label_scale_is_a_quantile_of_moves_that_ended_before_the_row_s_block():
    t = np.arange(8) * 10 * MS  # a row every 10 ms; blocks of one horizon (20 ms): rows (0,1) (2,3) (4,5) (6,7)
    moves = np.arange(1.0, 9.0)
    got = trailing_quantiles(t, moves, np.ones(8, bool), 20 * MS, 40 * MS, 2, (0.5,))[:, 0]
    # block at 40 ms: moves that started in [0, 20] and ended by 40: rows 0..2 -> median of 1, 2, 3
    # block at 60 ms: started in [20, 40]: rows 2..4 -> median of 3, 4, 5; earlier blocks: fewer than 2 moves
    assert np.isnan(got[:4]).all() and got[4:].tolist() == [2.0, 2.0, 4.0, 4.0]
    not_ok = np.ones(8, bool)
    not_ok[1] = False  # a move that never completed does not count
    assert trailing_quantiles(t, moves, not_ok, 20 * MS, 40 * MS, 2, (0.5,))[4, 0] == 2.0  # median of 1, 3


def test_labels_use_the_scaled_band_the_dead_band_floor_and_emergency():
    p = TrainParams(dead_band_ticks=2.0, emergency_min_ticks=5.0, toxic_vpin=0.9)
    scale = np.array([[10.0, 20.0, 40.0]] * 7 + [[1.0, 3.0, 4.0]] * 3)  # (lean, toxic, emergency) quantiles
    moves = np.array([10.0, 10.5, -10.5, 39.0, -40.0, 25.0, 25.0, 1.5, 2.5, 4.5])
    vpin = np.array([0, 0, 0, 0, 0, 0.95, 0.5, 0, 0, 0])
    assert label(moves, scale, vpin, p).tolist() == [H, B, S, B, E, E, B, H, B, B]
    # row 7: band max(2, 1) = 2 > 1.5; rows 8-9: above 2 but under max(5, 4) = 5, so not EMERGENCY


def test_the_time_split_leaves_one_horizon_after_each_cut():
    t = np.arange(100) * MS
    part = time_split(t[::-1], 5 * MS, 0.2, 0.2)[::-1]  # any order
    assert (part[:60] == TRAIN).all() and (part[60:65] == DROPPED).all()
    assert (part[65:80] == VALIDATION).all() and (part[80:85] == DROPPED).all() and (part[85:] == HELD_OUT).all()
    with pytest.raises(ValueError, match="summing below 1"):
        time_split(t, MS, 0.5, 0.5)
    assert time_split(np.zeros(0, np.int64), MS, 0.2, 0.2).shape == (0,)


def test_one_capture_s_instruments_share_one_cut_each_synthetic_pace_has_its_own():
    p = TrainParams(horizon_ms=50, scale_window_ms=1_000, scale_min_moves=1, validation=0.2, holdout=0.2)

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
    assert np.isnan(ds.fwd_ticks[ds.series == 2][-1, -1])  # 2 s past the last row of a 1 s series: unknown


def test_the_mirror_image_swaps_bids_and_asks_and_the_lean_labels():
    X = np.zeros((1, 128), np.float32)
    X[0, f.F_BID_DIST_0], X[0, f.F_ASK_DIST_0 + 2] = 0.5, 2.5
    X[0, f.F_BID_SIZE_0 + 1], X[0, f.F_ASK_SIZE_0] = 3.0, 7.0
    X[0, f.F_IMBALANCE_5], X[0, f.F_OFI], X[0, f.F_RETURN_BPS] = 0.25, -4.0, 1.5
    X[0, f.F_DEPTH_BID], X[0, f.F_DEPTH_ASK], X[0, f.F_VPIN], X[0, f.F_SPREAD_TICKS] = 10.0, 20.0, 0.4, 1.0
    Xm, ym = mirror_rows(X, np.array([H, B, S, E])[:1])
    assert Xm[0, f.F_ASK_DIST_0] == 0.5 and Xm[0, f.F_BID_DIST_0 + 2] == 2.5
    assert Xm[0, f.F_ASK_SIZE_0 + 1] == 3.0 and Xm[0, f.F_BID_SIZE_0] == 7.0
    assert (Xm[0, f.F_IMBALANCE_5], Xm[0, f.F_OFI], Xm[0, f.F_RETURN_BPS]) == (-0.25, 4.0, -1.5)
    assert (Xm[0, f.F_DEPTH_BID], Xm[0, f.F_DEPTH_ASK], Xm[0, f.F_VPIN], Xm[0, f.F_SPREAD_TICKS]) == (20.0, 10.0, 0.4, 1.0)
    assert mirror_rows(X, np.array([H, B, S, E]))[1].tolist() == [H, S, B, E]
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(5, 128)).astype(np.float32)
    assert np.array_equal(mirror_rows(*mirror_rows(Y, np.arange(5) % 4))[0], Y)  # twice: the identity


def test_the_same_market_stepped_at_1_ms_and_20_ms_differs_only_in_the_pace_dependent_slots():
    """Which inputs are rate-invariant: one seed, so one sequence of books and trades, stepped at two paces."""
    p = TrainParams()
    fast = synthetic_series(p, 1, 1_500, seed=5, warmup_ms=0)
    slow = synthetic_series(p, 20, 1_500, seed=5, warmup_ms=0)
    differ = {k for k in range(128) if not np.array_equal(fast.X[:, k], slow.X[:, k])}
    assert differ == set(PACE_DEPENDENT_SLOTS)
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
