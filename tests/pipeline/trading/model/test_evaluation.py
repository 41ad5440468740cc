"""The fast model's evaluation (pipeline/trading/model/evaluation.py): scores of the labels as deployed
(thresholds, side, input-range guard) against the controls, the trading figures (rates, LEAN net edge,
EMERGENCY pull value, information coefficient), the fast stage's configured thresholds, and the rates at
the pipeline's paces with the guard's share."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.features import F_SPREAD_TICKS
from pipeline.trading.messages import Label
from pipeline.trading.model.data import Dataset, TrainParams
from pipeline.trading.model.decide import InputBounds
from pipeline.trading.model.evaluation import (DEFAULT_CONFIG, evaluate, macro_f1_3class, pace_check, random_like,
                                               scores, spearman, trading)
from pipeline.trading.model.mlp import Model

H, B, S, E = (int(lb) for lb in (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.EMERGENCY))


def test_macro_f1_of_hand_made_predictions():
    y = np.array([0, 0, 1, 2])
    r = scores(y, np.array([0, 0, 1, 1]))
    # HOLD f1 1, LEAN_BUY 2*1/(2+1), LEAN_SELL 0; EMERGENCY absent from both: not averaged
    assert r["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert r["per_class"]["LEAN_BUY"]["precision"] == 0.5 and r["per_class"]["LEAN_SELL"]["recall"] == 0.0
    assert r["per_class"]["EMERGENCY"]["precision"] is None
    assert scores(y, np.zeros(4, np.int64))["macro_f1"] == pytest.approx((2 * 2 / 6) / 3)


def test_3class_macro_f1_of_a_hand_made_example():
    y = np.array([H, H, B, S, E, E])
    pred = np.array([H, E, B, B, E, H])
    # the two EMERGENCY rows are left out; on the others: HOLD tp 1 (1 predicted, 2 true) F1 2/3,
    # LEAN_BUY tp 1 (2 predicted, 1 true) 2/3, LEAN_SELL 0; the predicted EMERGENCY on row 2 is a miss
    assert macro_f1_3class(y, pred) == (pytest.approx((2 / 3 + 2 / 3 + 0) / 3), 4)
    r = scores(y, pred)
    assert r["macro_f1_3class"] == pytest.approx(4 / 9) and r["n_3class"] == 4
    assert r["macro_f1"] == pytest.approx((2 / 4 + 2 / 3 + 0 + 2 / 4) / 4)  # 4-class: EMERGENCY F1 2/4
    assert macro_f1_3class(np.array([E, E]), np.array([E, H])) == (0.0, 0)


def test_spearman_of_hand_made_pairs():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take the average rank: ranks (0.5, 0.5, 2) against (0, 1, 2): 1.5 / sqrt(1.5 * 2)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(1.5 / np.sqrt(3.0))
    assert spearman([1, 2, np.nan, 3], [1, 2, 5, np.nan]) is None  # two finite pairs only
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def _dataset(n: int) -> Dataset:
    X = np.zeros((n, 128), np.float32)
    X[:, F_SPREAD_TICKS] = 2.0
    return Dataset(X=X, y=np.zeros(n, np.int64), move_ticks=np.zeros(n), cost_ticks=np.full(n, 2.0),
                   side=np.zeros(n, np.int64), filled=np.zeros((n, 2), bool), markout_ticks=np.zeros((n, 2)),
                   fwd_ticks=np.zeros((n, 3)), tick_bps=np.full(n, 0.02), t_ns=np.arange(n, dtype=np.int64),
                   series=np.zeros(n, np.int64), part=np.zeros(n, np.int64), names=["s"], weights=np.ones(1),
                   horizon_ms=500)


def test_trading_figures_of_hand_made_labels():
    ds = _dataset(5)
    ds.move_ticks[:] = [5.0, -5.0, 1.0, 0.0, 3.0]
    ds.fwd_ticks[:, 1] = [5.0, -5.0, 1.0, 0.0, 3.0]
    ds.fwd_ticks[:, 0] = [1.0, 2.0, 3.0, 4.0, 5.0]
    lab = np.array([B, S, B, H, E])
    probs = np.zeros((5, 4), np.float32)
    probs[:, B] = [0.9, 0.1, 0.6, 0.4, 0.5]
    t = trading(lab, probs, ds, np.arange(5), fee_bps=0.05)
    # buy +5: (5 - 1) * 0.02 - 0.05 = 0.03; sell -5: 0.03; buy +1: 0 * 0.02 - 0.05 = -0.05
    assert t["net_edge_bps_per_signal"] == pytest.approx(0.01 / 3)
    assert t["net_edge_bps_per_signal_at_reference_fee"] == pytest.approx(0.01 / 3 + 0.05 - 10.0)  # Bitget spot
    assert t["net_edge_bps_per_update"] == pytest.approx(0.01 / 5) and t["signals_that_paid"] == pytest.approx(2 / 3)
    assert t["rate"] == {"HOLD": 0.2, "LEAN_BUY": 0.4, "LEAN_SELL": 0.2, "EMERGENCY": 0.2}
    assert t["ic"]["5000"] == pytest.approx(spearman(probs[:, B], ds.fwd_ticks[:, 1]))
    assert t["ic"]["1000"] == pytest.approx(spearman(probs[:, B], ds.fwd_ticks[:, 0]))
    assert trading(lab, None, ds, np.arange(5), 0.0)["ic"] is None


def test_the_model_row_scores_the_deployed_labels_and_the_argmax_row_the_argmax():
    """A hand-made model with constant probabilities: HOLD most probable, LEAN_BUY over its threshold."""
    probs = np.array([0.45, 0.41, 0.10, 0.04])
    m = Model(np.zeros((128, 2)), np.zeros(2), np.zeros((2, 4)), np.log(probs), {})
    ds = _dataset(10)
    ds.y[:] = B
    rows = evaluate(m, ds, np.arange(10), {"buy": 0.4, "sell": 0.4, "emergency": 0.5}, (60, 0.0), 0.0)
    assert rows["model"]["accuracy"] == 1.0 and rows["model"]["per_class"]["LEAN_BUY"]["recall"] == 1.0
    assert rows["model"]["rate"]["LEAN_BUY"] == 1.0 and rows["model_argmax"]["rate"]["HOLD"] == 1.0
    assert rows["model_argmax"]["accuracy"] == 0.0 and rows["always_hold"]["ic"] is None
    assert set(rows) == {"model", "model_argmax", "always_hold", "imbalance_sign", "random_model_rates"}
    assert rows["random_model_rates"]["rate"] == rows["model"]["rate"]  # the control: the model's label rates
    ds.X[:3, 0] = 5.0  # three rows outside bounds [0, 1]: HOLD with a reason
    guarded = evaluate(m, ds, np.arange(10), {"buy": 0.4, "sell": 0.4, "emergency": 0.5}, (60, 0.0), 0.0,
                       InputBounds(np.zeros(128, np.float32), np.full(128, 2.0, np.float32)))
    assert guarded["model"]["rate"]["LEAN_BUY"] == 0.7 and guarded["model"]["out_of_range_rate"] == 0.3
    assert guarded["model_argmax"]["rate"]["HOLD"] == 1.0  # the argmax row is the model unguarded


def test_the_random_control_keeps_the_label_frequencies_and_is_seeded():
    lab = np.array([H] * 90 + [B] * 6 + [E] * 4)
    a, b = random_like(lab, 3), random_like(lab, 3)
    assert np.array_equal(a, b) and not np.array_equal(a, lab) and np.array_equal(np.sort(a), np.sort(lab))


def test_the_value_of_the_emergency_pulls_counts_the_named_side_only():
    ds = _dataset(4)
    ds.filled[:] = True
    ds.markout_ticks[:] = [[-10.0, 5.0], [-10.0, 5.0], [3.0, 3.0], [0.0, 0.0]]
    lab = np.array([E, E, E, H])
    flags = np.array([2, 0, 4, 0], np.uint8)  # the bid named; none (both pulled); the ask named
    t = trading(lab, None, ds, np.arange(4), 0.0, flags)
    # +10 (the bid's loss avoided), +10 - 5 (both), -3 (the ask's gain given up): 12 ticks * 0.02 bps over 4 rows
    assert t["pull_value_bps_per_update"] == pytest.approx(12 * 0.02 / 4) and t["out_of_range_rate"] == 0.0
    # without flags both sides are pulled every time: 5 + 5 - 6 ticks
    assert trading(lab, None, ds, np.arange(4), 0.0)["pull_value_bps_per_update"] == pytest.approx(4 * 0.02 / 4)


def test_the_configured_thresholds_are_the_fast_stage_s():
    from pipeline.trading.model.evaluation import deployed_thresholds
    from procs.fast import parse_params

    import tomllib

    th = deployed_thresholds()
    fast = [p for p in tomllib.loads(DEFAULT_CONFIG.read_text())["processes"] if p["module"] == "procs.fast:FastAgent"]
    want = parse_params("fast", fast[0]["params"]).thresholds
    assert (th["buy"], th["sell"], th["emergency"], th["side"]) == (want.buy, want.sell, want.emergency, want.side)
    assert "configs/default.toml, process 'fast'" in th["source"]
    assert deployed_thresholds(None) == {"buy": 0.4, "sell": 0.4, "emergency": 0.5, "side": 1.01,
                                         "source": "FastParams defaults"}


def test_the_pace_check_runs_the_paper_venue_s_market_at_each_pace():
    """A model that always says LEAN_BUY: every update of every pace is a LEAN_BUY, and each pace ran
    its steps of market time."""
    m = Model(np.zeros((128, 1)), np.zeros(1), np.zeros((1, 4)), np.log([0.1, 0.8, 0.05, 0.05]), {})
    one = TrainParams(warmup_ms=100, instruments=((0.1, 0.0001),))
    got = pace_check(m, {"buy": 0.5, "sell": 0.5, "emergency": 0.5}, one, {"a": (20, 50), "b": (1, 200)})
    assert got["a"]["updates"] == 50 and got["a"]["market_s"] == 1.0 and got["a"]["rate"]["LEAN_BUY"] == 1.0
    assert got["b"]["pace_ms"] == 1 and got["b"]["updates"] == 200 and got["b"]["rate"]["HOLD"] == 0.0
    assert got["a"]["rate"]["OUT_OF_RANGE"] == 0.0  # no bounds: no guard
    none = InputBounds(np.zeros(128, np.float32), np.zeros(128, np.float32))  # every real book lies outside
    held = pace_check(m, {"buy": 0.5, "sell": 0.5, "emergency": 0.5}, one, {"a": (20, 50)}, none)
    assert held["a"]["rate"]["OUT_OF_RANGE"] == 1.0 and held["a"]["rate"]["HOLD"] == 1.0
    both = pace_check(m, {"buy": 0.5, "sell": 0.5, "emergency": 0.5}, TrainParams(warmup_ms=100), {"a": (20, 50)})
    assert set(both) == {"a, BTCUSDT", "a, ETHUSDT"}  # every instrument trained on: the config's two
