"""The fast path's default model (pipeline/trading/model/): trained on the project's synthetic flow, it beats
the majority class on held-out data, and the exported ONNX graph computes what numpy computes. The
evaluation scores the labels the fast stage emits (its thresholds), reports a 3-class macro-F1 beside
the 4-class one, leaves an embargo of one label horizon before the held-out rows, and cuts the capture
at one time for all instruments."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.messages import Label
from pipeline.trading.model import build
from pipeline.trading.model.data import TrainParams, generate, label
from pipeline.trading.model.mlp import INPUT_NAME, OUTPUT_NAME, forward


def test_labels_use_the_dead_band_and_emergency_thresholds():
    p = TrainParams(dead_band_ticks=2.0, emergency_ticks=40.0, toxic_vpin=0.9, toxic_move_ticks=20.0)
    moves = np.array([0.0, 2.0, 2.5, -2.5, -2.0, 40.0, -45.0, 25.0, 25.0])
    vpin = np.array([0, 0, 0, 0, 0, 0, 0, 0.95, 0.5])
    assert label(moves, vpin, p).tolist() == [Label.HOLD, Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.HOLD,
                                              Label.EMERGENCY, Label.EMERGENCY, Label.EMERGENCY, Label.LEAN_BUY]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    p = TrainParams(steps=30_000, seed=3)
    out = tmp_path_factory.mktemp("model") / "fast.onnx"
    return p, build(out, p), out


def test_training_beats_the_majority_baseline_on_held_out_data(trained):
    _, m, _ = trained
    r = m.report
    assert r["n_holdout"] > 4000 and set(r) >= {"holdout_accuracy", "majority_baseline", "holdout_balanced_accuracy"}
    assert r["holdout_accuracy"] > r["majority_baseline"] + 0.01, r
    assert r["holdout_balanced_accuracy"] > 0.25 + 0.05, r  # chance is 1/4


def test_the_onnx_file_runs_in_onnxruntime_and_matches_numpy(trained):
    import onnxruntime as ort

    p, m, out = trained
    X = generate(TrainParams(steps=600, seed=11)).X
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == [INPUT_NAME] and sess.get_inputs()[0].shape == ["N", 128]
    assert [o.name for o in sess.get_outputs()] == [OUTPUT_NAME]
    got = sess.run([OUTPUT_NAME], {INPUT_NAME: X})[0]
    assert got.dtype == np.float32 and got.shape == (len(X), 4)
    np.testing.assert_allclose(got, forward(m, X), atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
    one = sess.run([OUTPUT_NAME], {INPUT_NAME: X[:1]})[0]
    np.testing.assert_allclose(one[0], got[0], atol=1e-6)
    meta = sess.get_modelmeta().custom_metadata_map
    assert "report" in meta and '"LEAN_BUY"' in meta["labels"]


def test_the_evaluation_report_is_written_beside_the_model_with_three_rows(trained):
    import json

    _, m, out = trained
    js, md = out.with_suffix(".eval.json"), out.with_suffix(".eval.md")
    assert js.exists() and md.exists()
    rep = json.loads(js.read_text())
    assert rep == json.loads(json.dumps(m.eval))
    rows = rep["synthetic_holdout"]["rows"]
    assert set(rows) == {"model", "model_argmax", "always_hold", "imbalance_sign"}
    for r in rows.values():
        assert 0.0 <= r["macro_f1"] <= 1.0 and set(r["per_class"]) == {lb.name for lb in Label}
        assert 0.0 <= r["macro_f1_3class"] <= 1.0 and 0 < r["n_3class"] <= r["n"]
        for c in r["per_class"].values():
            assert all(v is None or 0.0 <= v <= 1.0 for v in (c["precision"], c["recall"], c["f1"]))
    assert rows["model"]["macro_f1"] > rows["always_hold"]["macro_f1"], rows
    assert rep["synthetic_holdout"]["model_beats_always_hold"] is True
    # what the README claims: it beats the imbalance-sign baseline too (on the synthetic held-out split)
    assert rows["model"]["macro_f1"] > rows["imbalance_sign"]["macro_f1"], rows
    assert rep["synthetic_holdout"]["model_beats_imbalance_sign"] is True
    assert rep["imbalance_baseline"]["slot"] in ("F_IMBALANCE_1", "F_IMBALANCE_5")
    text = md.read_text()
    from pipeline.trading.model.evaluation import ROW_TITLES

    assert ROW_TITLES["model_argmax"] == "argmax (not deployed)"
    assert all(f"| {ROW_TITLES[name]} |" in text for name in rows)
    assert "| macro-F1 (4) | macro-F1 (3) |" in text and "embargo" in text
    syn = rep["synthetic_holdout"]
    assert syn["embargo_steps"] == 25 and syn["first_held_out_step"] - syn["last_train_step"] == 25 + 1, syn
    assert syn["train_rows"] == m.report["n_train"] - m.report["n_train_capture"]
    assert syn["held_out_rows"] == m.report["n_holdout"] and syn["embargo_rows"] == m.report["n_embargo"] == 25
    assert rep["thresholds"]["buy"] == 0.4 and rep["thresholds"]["emergency"] == 0.5
    if rep["capture"] is not None:  # the real capture was there: replayed into training, its later part held out
        cap = rep["capture"]
        assert cap["trained_on_first_part"] and "Real Bitget capture" in text
        assert cap["train_rows"] + cap["embargo_rows"] + cap["held_out_rows"] == cap["labelled_rows"] > 0
        assert m.report["n_train_capture"] == cap["train_rows"]
        assert cap["train_rows"] == int(cap["labelled_rows"] * 0.7)
        assert cap["instruments_in_train"] == cap["instruments_in_held_out"] == cap["instruments"], cap


def test_macro_f1_of_hand_made_predictions():
    from pipeline.trading.model.evaluation import scores

    y = np.array([0, 0, 1, 2])
    r = scores(y, np.array([0, 0, 1, 1]))
    # HOLD f1 1, LEAN_BUY 2*1/(2+1), LEAN_SELL 0; EMERGENCY absent from both: not averaged
    assert r["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert r["per_class"]["LEAN_BUY"]["precision"] == 0.5 and r["per_class"]["LEAN_SELL"]["recall"] == 0.0
    assert r["per_class"]["EMERGENCY"]["precision"] is None
    assert scores(y, np.zeros(4, np.int64))["macro_f1"] == pytest.approx((2 * 2 / 6) / 3)


def test_extra_training_rows_change_the_fit_and_are_counted():
    from pipeline.trading.model.mlp import train

    p = TrainParams(steps=3_000, seed=5, epochs=2)
    ds = generate(p)
    base = train(ds, p)
    rng = np.random.default_rng(1)
    extra = (rng.normal(size=(200, ds.X.shape[1])).astype(np.float32), np.full(200, Label.LEAN_BUY))
    more = train(ds, p, extra)
    assert more.report["n_train_capture"] == 200 and base.report["n_train_capture"] == 0
    assert more.report["n_train"] == base.report["n_train"] + 200
    assert not np.allclose(more.w1, base.w1), "the extra rows took part in the fit"


# ------------------------------------------------------------------ issue #19: evaluation as deployed
def test_deployed_labels_are_the_fast_stage_s_labels():
    """``deployed_labels`` (pipeline/trading/model/evaluation.py) is the rule of ``FastAgent.classify`` (procs/fast.py),
    called here on the stage's own method: random probability rows, ties and exact thresholds."""
    from types import SimpleNamespace

    from pipeline.trading.model.evaluation import DEFAULT_CONFIG, deployed_labels, deployed_thresholds
    from procs.fast import FastAgent, FastParams

    th = deployed_thresholds()
    d = FastParams().thresholds  # configs/default.toml sets no thresholds: the stage runs on these
    assert (th["buy"], th["sell"], th["emergency"]) == (d.buy, d.sell, d.emergency) == (0.4, 0.4, 0.5)
    assert "default.toml" in th["source"] and deployed_thresholds(None)["source"] == "FastParams defaults"
    assert DEFAULT_CONFIG.is_file()
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(4, 0.7), size=20_000).astype(np.float32)
    grid = np.float32([0.0, 0.1, 0.3, 0.4, 0.45, 0.5, 0.6])  # exact thresholds, and buy == sell ties
    probs = np.concatenate([probs, rng.choice(grid, size=(5_000, 4)).astype(np.float32)])
    for t in (th, {"buy": 0.3, "sell": 0.45, "emergency": 0.1}, {"buy": 0.6, "sell": 0.6, "emergency": 0.9}):
        stage = SimpleNamespace(th_buy=t["buy"], th_sell=t["sell"], th_emergency=t["emergency"])
        want = FastAgent.classify(stage, probs).astype(np.int64)
        got = deployed_labels(probs, t["buy"], t["sell"], t["emergency"])
        assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]
        assert len(np.unique(want)) == 4
    assert (deployed_labels(probs, 0.4, 0.4, 0.5) != probs.argmax(axis=1)).mean() > 0.1  # not argmax


def test_the_model_row_scores_the_deployed_labels_and_the_argmax_row_the_argmax():
    """A hand-made model with constant probabilities: HOLD most probable, LEAN_BUY over its threshold."""
    from pipeline.trading.model.evaluation import evaluate
    from pipeline.trading.model.mlp import Model

    probs = np.array([0.45, 0.41, 0.10, 0.04])
    m = Model(np.zeros((128, 2)), np.zeros(2), np.zeros((2, 4)), np.log(probs), {})
    X = np.zeros((10, 128), np.float32)
    y = np.full(10, int(Label.LEAN_BUY))
    rows = evaluate(m, X, y, 0, 0.0, {"buy": 0.4, "sell": 0.4, "emergency": 0.5})["rows"]
    assert rows["model"]["accuracy"] == 1.0 and rows["model"]["per_class"]["LEAN_BUY"]["recall"] == 1.0
    assert rows["model_argmax"]["accuracy"] == 0.0 and rows["model_argmax"]["per_class"]["HOLD"]["support"] == 0


def test_3class_macro_f1_of_a_hand_made_example():
    from pipeline.trading.model.evaluation import macro_f1_3class, scores

    H, B, S, E = (int(lb) for lb in (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.EMERGENCY))
    y = np.array([H, H, B, S, E, E])
    pred = np.array([H, E, B, B, E, H])
    # the two EMERGENCY rows are left out; on the others: HOLD tp 1 (1 predicted, 2 true) F1 2/3,
    # LEAN_BUY tp 1 (2 predicted, 1 true) 2/3, LEAN_SELL 0; the predicted EMERGENCY on row 2 is a miss
    assert macro_f1_3class(y, pred) == (pytest.approx((2 / 3 + 2 / 3 + 0) / 3), 4)
    r = scores(y, pred)
    assert r["macro_f1_3class"] == pytest.approx(4 / 9) and r["n_3class"] == 4
    assert r["macro_f1"] == pytest.approx((2 / 4 + 2 / 3 + 0 + 2 / 4) / 4)  # 4-class: EMERGENCY F1 2/4
    never_emergency = np.array([H, H, B, S, H, H])  # perfect on the 3 classes, blind to EMERGENCY
    assert scores(y, never_emergency)["macro_f1_3class"] == pytest.approx(1.0)
    assert scores(y, never_emergency)["macro_f1"] == pytest.approx((2 * 2 / 6 + 1 + 1 + 0) / 4)
    assert macro_f1_3class(np.array([E, E]), np.array([E, H])) == (0.0, 0)


@pytest.mark.parametrize("horizon_ms", [500, 200])
def test_the_synthetic_split_leaves_an_embargo_of_exactly_one_label_horizon(horizon_ms):
    from pipeline.trading.model.data import synthetic_split

    p = TrainParams(steps=2_000, seed=5, horizon_ms=horizon_ms)
    ds = generate(p)
    h = ds.horizon_steps
    assert h == horizon_ms // 20 and np.all(np.diff(ds.step) > 0)
    itr, ite = synthetic_split(ds, p)
    assert len(itr) == int(len(ds.y) * (1 - p.holdout)) and np.array_equal(itr, np.arange(len(itr)))
    last, first = int(ds.step[itr[-1]]), int(ds.step[ite[0]])
    assert first - last - 1 == h, (last, first, h)  # the gap: exactly h steps, none of them scored
    assert len(ds.y) - len(itr) - len(ite) == h  # every step has a row here: h rows dropped
    assert ds.step[itr].max() + h < ds.step[ite].min()  # no training label (look-ahead h) reaches a held-out row
    assert np.array_equal(ite, np.arange(ite[0], len(ds.y)))


def test_the_capture_split_is_one_time_cut_across_instruments():
    """Two instruments whose receive times interleave, their rows listed one instrument after the
    other: the cut is one time for both, the rows within one horizon after it are dropped."""
    from pipeline.trading.model.capture import CAPTURE_TRAIN_SHARE, split_capture

    ms = 1_000_000
    ta = np.arange(0, 1000, 10) * ms  # instrument 1: every 10 ms
    tb = np.arange(5, 1005, 10) * ms  # instrument 2: between them
    t = np.concatenate([ta, tb])
    inst = np.repeat([1, 2], 100)
    itr, iho, cut = split_capture(t, horizon_ms=50)
    assert cut == np.sort(t)[int(len(t) * CAPTURE_TRAIN_SHARE)] == 700 * ms
    assert t[itr].max() < cut and t[iho].min() >= cut + 50 * ms  # one cut in time, then the embargo
    assert set(inst[itr]) == set(inst[iho]) == {1, 2}  # both instruments on both sides
    assert len(itr) == int(len(t) * CAPTURE_TRAIN_SHARE) == 140
    dropped = np.setdiff1d(np.arange(len(t)), np.concatenate([itr, iho]))
    assert np.array_equal(np.sort(t[dropped]), np.arange(700, 750, 5) * ms)  # [cut, cut + 50 ms)
    assert split_capture(np.zeros(0, np.int64), 50)[2] is None
