"""The fast stage's thresholds (pipeline/trading/model/thresholds.py): the stage's own rule, the net edge of
a LEAN signal, the value of an EMERGENCY pull (adverse selection avoided minus good fills given up), and
the choice on validation rows for those objectives within the rate bounds."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.trading.messages import Label
from pipeline.trading.model.data import TrainParams
from pipeline.trading.model.thresholds import (MIN_EMERGENCY_HITS, NEVER, choose_thresholds, deployed_labels,
                                               pull_value_bps, signal_edge_bps)

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


def test_a_pull_is_worth_the_losses_it_avoids_minus_the_gains_it_gives_up():
    fire = np.array([True, True, True, True, False])
    named = np.array([0, 1, 2, 1, 0])  # both sides, the bid, the ask, the bid
    filled = np.array([[True, True], [True, True], [True, False], [False, True], [True, True]])
    markout = np.array([[-5.0, 3.0], [-5.0, 3.0], [-5.0, 3.0], [4.0, -6.0], [-9.0, -9.0]])
    got = pull_value_bps(fire, named, filled, markout, np.full(5, 0.5))
    # both pulled: avoids -5, gives up +3 -> +2 ticks; bid only: +5; the ask was not filled: 0; the bid not filled: 0
    assert got.tolist() == [1.0, 2.5, 0.0, 0.0, 0.0]
    # with a 1 bps maker fee every fill avoided also saves its fee: (2.5 + 1) - (1.5 - 1); 2.5 + 1; 0; 0
    assert pull_value_bps(fire, named, filled, markout, np.full(5, 0.5), 1.0).tolist() == [3.0, 3.5, 0.0, 0.0, 0.0]


def _validation(n=1_000):
    """One series of ``n`` rows: HOLD-sure except for three groups of LEAN_BUY calls; the touch never filled."""
    probs = np.tile(np.float32([0.97, 0.01, 0.01, 0.01]), (n, 1))
    move = np.zeros(n)
    groups = ((0, 20, 0.9, 10.0), (20, 50, 0.8, -10.0), (50, 150, 0.5, 10.0))  # rows, P(buy), the move after
    for a, b, pb, mv in groups:
        probs[a:b] = [1 - pb - 0.02, pb, 0.01, 0.01]
        move[a:b] = mv
    v = {"y": np.full(n, H), "move_ticks": move, "spread": np.full(n, 2.0), "tick_bps": np.full(n, 0.02),
         "side": np.zeros(n, np.int64), "filled": np.zeros((n, 2), bool), "markout_ticks": np.zeros((n, 2))}
    return probs, v, np.zeros(n, np.int64)


def test_the_lean_threshold_is_the_best_objective_within_the_rate_bounds():
    """P(buy) 0.9 on 2 % of the rows (they pay), 0.8 on 3 % (they lose), 0.5 on 10 % (they pay): under
    0.5 LEAN is called on 15 % (> 5 %: out of bounds); 0.51-0.80 on 5 %, losing in sum; 0.81-0.90 on
    2 %, paying: the best, and of those equal ones the highest threshold."""
    p = TrainParams(fee_bps=0.0, lean_rate_min=0.01, lean_rate_max=0.05, emergency_rate_max=0.005)
    th = choose_thresholds(*_validation(), p)
    assert (th["buy"], th["sell"], th["emergency"], th["side"]) == (0.9, 0.9, NEVER, NEVER)  # nothing to catch
    assert th["lean_bounds_met"] and th["lean_rate"] == pytest.approx(0.02)
    assert th["objective_bps_per_update"] == pytest.approx(20 * (10 - 1) * 0.02 / 1000)
    assert th["lean_rate_by_series"] == {0: pytest.approx(0.02)}
    wide = choose_thresholds(*_validation(), dataclasses.replace(p, lean_rate_max=0.2))
    # now 0.30-0.50 (15 %: 20 and 100 rows pay, 30 lose) is allowed and the best
    assert wide["buy"] == 0.5 and wide["objective_bps_per_update"] == pytest.approx((120 * 9 - 30 * 11) * 0.02 / 1000)


def test_when_no_lean_signal_pays_its_costs_lean_is_off():
    """The same rows with a 10 bps fee: each LEAN costs 10 bps and earns at most 0.18: no threshold
    pays, so LEAN is never called (unless a minimum rate asks for signals)."""
    p = TrainParams(fee_bps=10.0, lean_rate_min=0.0)
    th = choose_thresholds(*_validation(), p)
    assert th["buy"] == th["sell"] == NEVER and th["lean_rate"] == 0.0 and th["objective_bps_per_update"] == 0.0
    forced = choose_thresholds(*_validation(), dataclasses.replace(p, lean_rate_min=0.01))
    assert forced["buy"] == 0.9 and forced["objective_bps_per_update"] < 0  # the least bad that meets the bounds


def test_when_no_lean_threshold_meets_the_bounds_the_closest_is_taken_and_flagged():
    probs, v, ser = _validation()
    p = TrainParams(fee_bps=0.0, lean_rate_min=0.3, lean_rate_max=0.4)  # at least 30 %: never reached (15 % at most)
    th = choose_thresholds(probs, v, ser, p)
    assert not th["lean_bounds_met"] and th["buy"] == 0.5 and th["lean_rate"] == pytest.approx(0.15)


def _emergencies(probs, v):
    """Rows 900-904: true bid-side emergencies at P 0.6 (the bid filled, then 8 ticks lost); rows 905-909:
    false alarms at P 0.3 where the bid filled and earned 2 ticks."""
    probs[900:905, E], v["y"][900:905], v["side"][900:905] = 0.6, E, 1
    v["filled"][900:910, 0] = True
    v["markout_ticks"][900:905, 0], v["markout_ticks"][905:910, 0] = -8.0, 2.0
    probs[905:910, E] = 0.3
    v["filled"][900:910, 1], v["markout_ticks"][900:910, 1] = True, 1.0  # the ask filled too and earned 1
    at_risk = np.tile(np.float32([0.5, 0.5]), (len(probs), 1))
    at_risk[900:905] = [0.9, 0.1]  # the side head is sure it is the bid
    return at_risk


def test_the_emergency_thresholds_are_worth_most_within_the_rate_bound_and_name_the_side_when_sure():
    probs, v, ser = _validation()
    at_risk = _emergencies(probs, v)
    p = TrainParams(fee_bps=0.0, emergency_rate_max=0.02)
    th = choose_thresholds(probs, v, ser, p, at_risk=at_risk)
    # at 0.31-0.60 the 5 true ones fire: pulling the bid avoids 8 ticks each; pulling both would give up the
    # ask's 1 tick too, so naming the bid (P 0.9: the side grid up to 0.9) is worth more; <= 0.30 adds the
    # 5 false alarms, each giving up 2 (+1) ticks
    assert (th["emergency"], th["side"]) == (0.6, 0.9)
    em = th["emergency_choice"]
    assert em["value_bps_per_update"] == pytest.approx(5 * 8 * 0.02 / 1000)
    assert em["precision"] == 1.0 and em["recall"] == 1.0 and em["named_side_correct"] == 1.0
    blind = choose_thresholds(probs, v, ser, p)  # no side output: both sides pulled
    assert (blind["emergency"], blind["side"]) == (0.6, NEVER)
    assert blind["emergency_choice"]["value_bps_per_update"] == pytest.approx(5 * (8 - 1) * 0.02 / 1000)


def test_an_emergency_rule_needs_its_rate_bound_enough_hits_and_a_positive_value():
    probs, v, ser = _validation()
    at_risk = _emergencies(probs, v)
    p = TrainParams(fee_bps=0.0)
    bound = dataclasses.replace(p, emergency_rate_max=0.004)
    assert choose_thresholds(probs, v, ser, bound, at_risk=at_risk)["emergency"] == NEVER
    v["y"][900] = H  # now only 4 hits: not enough evidence for a rule
    assert MIN_EMERGENCY_HITS == 5 and choose_thresholds(probs, v, ser, p, at_risk=at_risk)["emergency"] == NEVER
    v["y"][900] = E
    v["markout_ticks"][900:905, 0] = 3.0  # the "emergencies" now earn: pulling them is worth less than nothing
    assert choose_thresholds(probs, v, ser, p, at_risk=at_risk)["emergency"] == NEVER
    # ... unless the fee eats what they earn: 3 ticks at 0.02 bps are 0.06 bps, a 0.1 bps fee more
    assert choose_thresholds(probs, v, ser, dataclasses.replace(p, fee_bps=0.1), at_risk=at_risk)["emergency"] != NEVER


def test_no_validation_rows_is_an_error():
    empty = {k: np.zeros(0) for k in ("y", "move_ticks", "spread", "tick_bps", "side")}
    with pytest.raises(ValueError, match="no validation rows"):
        choose_thresholds(np.zeros((0, 4), np.float32), empty, np.zeros(0, np.int64), TrainParams())
