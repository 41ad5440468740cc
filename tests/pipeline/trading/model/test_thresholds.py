"""The fast stage's thresholds (pipeline/trading/model/thresholds.py): the stage's own rule, the net edge of
a signal, and the choice on validation rows for that objective within the rate bounds."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.trading.features import F_SPREAD_TICKS
from pipeline.trading.messages import Label
from pipeline.trading.model.data import TrainParams
from pipeline.trading.model.thresholds import (MIN_EMERGENCY_HITS, NEVER, choose_thresholds, deployed_labels,
                                               signal_edge_bps)

H, B, S, E = (int(lb) for lb in (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.EMERGENCY))


def test_deployed_labels_are_the_fast_stage_s_labels():
    """``deployed_labels`` is the rule of ``FastAgent.classify`` (procs/fast.py), called here on the
    stage's own method: random probability rows, ties and exact thresholds."""
    from procs.fast import FastAgent

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(4, 0.7), size=20_000).astype(np.float32)
    grid = np.float32([0.0, 0.1, 0.3, 0.4, 0.45, 0.5, 0.6])  # exact thresholds, and buy == sell ties
    probs = np.concatenate([probs, rng.choice(grid, size=(5_000, 4)).astype(np.float32)])
    for t in ({"buy": 0.4, "sell": 0.4, "emergency": 0.5}, {"buy": 0.3, "sell": 0.45, "emergency": 0.1},
              {"buy": 0.6, "sell": 0.6, "emergency": 0.9}, {"buy": 0.7, "sell": 0.7, "emergency": NEVER}):
        stage = SimpleNamespace(th_buy=t["buy"], th_sell=t["sell"], th_emergency=t["emergency"])
        want = FastAgent.classify(stage, probs).astype(np.int64)
        got = deployed_labels(probs, t["buy"], t["sell"], t["emergency"])
        assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]
    assert (deployed_labels(probs, 0.4, 0.4, 0.5) != probs.argmax(axis=1)).mean() > 0.1  # not argmax
    assert not (deployed_labels(probs, 0.4, 0.4, NEVER) == E).any()


def test_the_edge_of_a_signal_pays_half_the_spread_and_the_fee():
    lab = np.array([B, S, H, E, B])
    move = np.array([10.0, -10.0, 5.0, 5.0, -3.0])
    spread = np.array([2.0, 4.0, 2.0, 2.0, 2.0])
    got = signal_edge_bps(lab, move, spread, np.full(5, 0.02), 0.1)
    # buy: (10 - 1) * 0.02 - 0.1; sell: (10 - 2) * 0.02 - 0.1; HOLD / EMERGENCY: no position; buy into a fall
    assert got == pytest.approx([0.08, 0.06, 0.0, 0.0, (-3 - 1) * 0.02 - 0.1])


def _validation(n=1_000):
    """One series of ``n`` rows: HOLD-sure except for three groups of LEAN_BUY calls."""
    probs = np.tile(np.float32([0.97, 0.01, 0.01, 0.01]), (n, 1))
    move = np.zeros(n)
    groups = ((0, 20, 0.9, 10.0), (20, 50, 0.8, -10.0), (50, 150, 0.5, 10.0))  # rows, P(buy), the move after
    for a, b, pb, mv in groups:
        probs[a:b] = [1 - pb - 0.02, pb, 0.01, 0.01]
        move[a:b] = mv
    X = np.zeros((n, 128), np.float32)
    X[:, F_SPREAD_TICKS] = 2.0
    return probs, np.full(n, H), move, X, np.full(n, 0.02), np.zeros(n, np.int64)


def test_the_lean_threshold_is_the_best_objective_within_the_rate_bounds():
    """P(buy) 0.9 on 2 % of the rows (they pay), 0.8 on 3 % (they lose), 0.5 on 10 % (they pay): under
    0.5 LEAN is called on 15 % (> 5 %: out of bounds); 0.51-0.80 on 5 %, losing in sum; 0.81-0.90 on
    2 %, paying: the best, and of those equal ones the highest threshold."""
    p = TrainParams(fee_bps=0.0, lean_rate_min=0.01, lean_rate_max=0.05, emergency_rate_max=0.005)
    th = choose_thresholds(*_validation(), p)
    assert (th["buy"], th["sell"], th["emergency"]) == (0.9, 0.9, NEVER)  # nothing to catch: EMERGENCY never
    assert th["lean_bounds_met"] and th["lean_rate"] == pytest.approx(0.02)
    assert th["objective_bps_per_update"] == pytest.approx(20 * (10 - 1) * 0.02 / 1000)
    assert th["lean_rate_by_series"] == {0: pytest.approx(0.02)}
    wide = choose_thresholds(*_validation(), dataclasses.replace(p, lean_rate_max=0.2))
    # now 0.30-0.50 (15 %: 20 and 100 rows pay, 30 lose) is allowed and the best
    assert wide["buy"] == 0.5 and wide["objective_bps_per_update"] == pytest.approx((120 * 9 - 30 * 11) * 0.02 / 1000)


def test_when_no_lean_threshold_meets_the_bounds_the_closest_is_taken_and_flagged():
    probs, y, move, X, tb, ser = _validation()
    p = TrainParams(lean_rate_min=0.3, lean_rate_max=0.4)  # at least 30 %: never reached (15 % at most)
    th = choose_thresholds(probs, y, move, X, tb, ser, p)
    assert not th["lean_bounds_met"] and th["buy"] == 0.5 and th["lean_rate"] == pytest.approx(0.15)


def test_the_emergency_threshold_needs_its_rate_bound_and_enough_hits():
    probs, y, move, X, tb, ser = _validation()
    probs[900:905, E], y[900:905] = 0.6, E  # 5 true emergencies at P 0.6
    probs[905:910, E] = 0.3  # 5 false alarms at P 0.3
    p = TrainParams(emergency_rate_max=0.005)
    th = choose_thresholds(probs, y, move, X, tb, ser, p)
    # <= 0.30 fires on 10 rows (1 % > 0.5 %); 0.31-0.60 on the 5 true ones (F1 1): the highest of them
    assert th["emergency"] == 0.6 and th["emergency_choice"]["f1"] == 1.0 and th["emergency_choice"]["precision"] == 1.0
    y[900] = H  # now only 4 hits: not enough evidence for a rule
    assert MIN_EMERGENCY_HITS == 5 and choose_thresholds(probs, y, move, X, tb, ser, p)["emergency"] == NEVER


def test_no_validation_rows_is_an_error():
    with pytest.raises(ValueError, match="no validation rows"):
        choose_thresholds(np.zeros((0, 4), np.float32), np.zeros(0, np.int64), np.zeros(0), np.zeros((0, 128)),
                          np.zeros(0), np.zeros(0, np.int64), TrainParams())
