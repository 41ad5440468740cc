"""The fast stage's decision as pure numpy (pipeline/trading/model/decide.py): the labels, an EMERGENCY's
at-risk side, and the input-range guard that turns a row outside the training bounds into HOLD with a
reason; the bounds' rule; the slots' names."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading import features as f
from pipeline.trading.messages import (SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE,
                                       Label)
from pipeline.trading.model.decide import (BOUNDS_MARGIN, InputBounds, bounds_from_rows, deployed_decisions,
                                           out_of_range, side_flags, slot_name)
from pipeline.trading.model.thresholds import NEVER

H, B, S, E = (int(lb) for lb in (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.EMERGENCY))
BID, ASK, OOR = SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_OUT_OF_RANGE


def test_the_side_flag_values_are_the_documented_bits():
    assert (BID, ASK, OOR) == (2, 4, 8)


def test_bounds_are_widened_quantiles_and_a_constant_slot_is_exact():
    rng = np.random.default_rng(0)
    X = np.zeros((10_000, 128))
    X[:, 0] = rng.uniform(0.0, 100.0, len(X))  # quantiles ~0.1 and ~99.9: widened by a quarter of ~99.8
    X[:, 1] = 7.25  # constant: exactly its value
    X[:5, 2], X[5:10, 2] = 3.0, -1.0  # zero on 99.9 % of the rows: the quantiles coincide: the rows' min and max
    b = bounds_from_rows(X)
    q_lo, q_hi = np.quantile(X[:, 0], (0.001, 0.999))
    w = q_hi - q_lo
    assert b.lo[0] == pytest.approx(q_lo - BOUNDS_MARGIN * w, rel=1e-6) and b.hi[0] == pytest.approx(
        q_hi + BOUNDS_MARGIN * w, rel=1e-6)
    assert (b.lo[1], b.hi[1]) == (np.float32(7.25), np.float32(7.25)) and (b.lo[2], b.hi[2]) == (-1.0, 3.0)
    assert b.lo.dtype == b.hi.dtype == np.float32
    assert not out_of_range(X.astype(np.float32), b)[0].any()  # no training row lies outside
    with pytest.raises(ValueError, match="finite"):
        bounds_from_rows(np.full((3, 128), np.nan))
    with pytest.raises(ValueError, match="feature rows"):
        bounds_from_rows(np.zeros((0, 128)))


def test_float32_bounds_judge_float32_rows_as_the_exact_bounds_do_and_the_rarest_rows_lie_outside():
    """Heavy tails, rare huge values and a constant slot, in float32 as the training rows are."""
    rng = np.random.default_rng(5)
    X = rng.standard_t(1.5, (3_000, 128)).astype(np.float32) * np.float32(0.1)
    X[:, 10] = np.float32(0.1)
    X[:, 11] = np.float32(0.2)
    X[:2, 11] = np.float32(1e9)  # the quantiles coincide (0.2): the rows' own range, so 1e9 is in
    X[:, 12] = rng.uniform(0, 1, 3_000).astype(np.float32)
    X[:2, 12] = np.float32(1e9)  # 2 rows in 3,000: beyond the 0.999 quantile and its margin, so out
    b = bounds_from_rows(X)
    q_lo, q_hi = np.quantile(X.astype(np.float64), (0.001, 0.999), axis=0)
    w = q_hi - q_lo
    lo64 = np.where(w > 0, q_lo - BOUNDS_MARGIN * w, X.min(axis=0))
    hi64 = np.where(w > 0, q_hi + BOUNDS_MARGIN * w, X.max(axis=0))
    exact = ~((X >= lo64) & (X <= hi64)).all(axis=1)
    assert np.array_equal(out_of_range(X, b)[0], exact)
    assert b.lo[10] == b.hi[10] == np.float32(0.1) and b.hi[11] == np.float32(1e9)
    assert out_of_range(X[:2], b)[1].tolist() == [12, 12]
    assert exact.mean() < 0.5  # the guard holds the tails, not the bulk


def test_a_row_outside_the_bounds_is_named_by_its_worst_slot():
    b = InputBounds(np.zeros(128, np.float32), np.ones(128, np.float32))
    X = np.full((4, 128), 0.5, np.float32)
    X[1, f.F_DEPTH_BID] = 3.0  # 2 widths above
    X[1, f.F_SPREAD_TICKS] = -0.5  # half a width below: not the worst
    X[2, 7] = np.nan
    X[3, 0] = 1.0  # on the bound: inside
    bad, worst = out_of_range(X, b)
    assert bad.tolist() == [False, True, True, False]
    assert worst.tolist() == [-1, f.F_DEPTH_BID, 7, -1]
    assert slot_name(f.F_DEPTH_BID) == "F_DEPTH_BID" and slot_name(f.F_BID_SIZE_0 + 3) == "F_BID_SIZE_3"
    assert slot_name(127) == "F_RESERVED_33" and slot_name(500) == "slot_500"
    assert slot_name(f.F_HIDDEN_SHARE) == "F_HIDDEN_SHARE" and slot_name(f.F_BASIS_Z) == "F_BASIS_Z"


def test_unbounded_bounds_refuse_only_nan():
    b = InputBounds.unbounded()
    X = np.array([[np.float32(3e38)] * 128, [np.float32(-3e38)] * 128, [np.nan] * 128], np.float32)
    assert out_of_range(X, b)[0].tolist() == [False, False, True]


def test_an_emergency_names_the_side_whose_probability_reaches_the_side_threshold():
    lab = np.array([E, E, E, B, E])
    at_risk = np.float32([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.99, 0.01], [0.7, 0.3]])
    assert side_flags(lab, at_risk, 0.7).tolist() == [BID, ASK, 0, 0, BID]  # a LEAN never carries a side
    assert side_flags(lab, at_risk, NEVER).tolist() == [0] * 5
    assert side_flags(lab, None, 0.7).tolist() == [0] * 5  # a model without the side output
    with pytest.raises(ValueError, match="above 0.5"):
        side_flags(lab, at_risk, 0.5)


def test_the_guard_overrides_the_label_and_the_side_last():
    probs = np.float32([[0.1, 0.8, 0.05, 0.05], [0.1, 0.05, 0.05, 0.8], [0.1, 0.05, 0.05, 0.8], [0.1, 0.8, 0.05, 0.05]])
    at_risk = np.float32([[0.5, 0.5], [0.95, 0.05], [0.95, 0.05], [0.5, 0.5]])
    X = np.zeros((4, 128), np.float32)
    X[2, f.F_DEPTH_BID] = 1e9  # far outside
    X[3, f.F_DEPTH_ASK] = -1.0
    b = InputBounds(np.zeros(128, np.float32), np.ones(128, np.float32))
    lab, flags = deployed_decisions(probs, at_risk, X, b, 0.6, 0.6, 0.6, 0.9)
    assert lab.tolist() == [B, E, H, H] and flags.tolist() == [0, BID, OOR, OOR]
    assert lab.dtype == flags.dtype == np.uint8
    lab, flags = deployed_decisions(probs, at_risk, X, None, 0.6, 0.6, 0.6, 0.9)  # no guard
    assert lab.tolist() == [B, E, E, B] and flags.tolist() == [0, BID, BID, 0]
