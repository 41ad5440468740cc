"""The fast path's default model (pipeline/model.py): trained on the project's synthetic flow, it beats
the majority class on held-out data, and the exported ONNX graph computes what numpy computes."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.messages import Label
from pipeline.model import INPUT_NAME, OUTPUT_NAME, TrainParams, build, forward, generate, label


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
    assert set(rows) == {"model", "always_hold", "imbalance_sign"}
    for r in rows.values():
        assert 0.0 <= r["macro_f1"] <= 1.0 and set(r["per_class"]) == {lb.name for lb in Label}
        for c in r["per_class"].values():
            assert all(v is None or 0.0 <= v <= 1.0 for v in (c["precision"], c["recall"], c["f1"]))
    assert rows["model"]["macro_f1"] > rows["always_hold"]["macro_f1"], rows
    assert rep["synthetic_holdout"]["model_beats_always_hold"] is True
    # what the README claims: it beats the imbalance-sign baseline too (on the synthetic held-out split)
    assert rows["model"]["macro_f1"] > rows["imbalance_sign"]["macro_f1"], rows
    assert rep["synthetic_holdout"]["model_beats_imbalance_sign"] is True
    assert rep["imbalance_baseline"]["slot"] in ("F_IMBALANCE_1", "F_IMBALANCE_5")
    text = md.read_text()
    assert all(f"| {name} |" in text for name in rows)
    if rep["capture"] is not None:  # the real capture was there: replayed into training, its later part held out
        cap = rep["capture"]
        assert cap["trained_on_first_part"] and "Real Bitget capture" in text
        assert cap["train_rows"] + cap["held_out_rows"] == cap["labelled_rows"] > 0
        assert m.report["n_train_capture"] == cap["train_rows"]
        assert cap["train_rows"] == int(cap["labelled_rows"] * 0.7)


def test_macro_f1_of_hand_made_predictions():
    from pipeline.model import scores

    y = np.array([0, 0, 1, 2])
    r = scores(y, np.array([0, 0, 1, 1]))
    # HOLD f1 1, LEAN_BUY 2*1/(2+1), LEAN_SELL 0; EMERGENCY absent from both: not averaged
    assert r["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert r["per_class"]["LEAN_BUY"]["precision"] == 0.5 and r["per_class"]["LEAN_SELL"]["recall"] == 0.0
    assert r["per_class"]["EMERGENCY"]["precision"] is None
    assert scores(y, np.zeros(4, np.int64))["macro_f1"] == pytest.approx((2 * 2 / 6) / 3)


def test_extra_training_rows_change_the_fit_and_are_counted():
    from pipeline.model import train

    p = TrainParams(steps=3_000, seed=5, epochs=2)
    ds = generate(p)
    base = train(ds, p)
    rng = np.random.default_rng(1)
    extra = (rng.normal(size=(200, ds.X.shape[1])).astype(np.float32), np.full(200, Label.LEAN_BUY))
    more = train(ds, p, extra)
    assert more.report["n_train_capture"] == 200 and base.report["n_train_capture"] == 0
    assert more.report["n_train"] == base.report["n_train"] + 200
    assert not np.allclose(more.w1, base.w1), "the extra rows took part in the fit"
