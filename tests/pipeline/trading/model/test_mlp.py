"""The fast model's network (pipeline/trading/model/mlp.py): training on the TRAIN rows and their mirror
images, the side head on the EMERGENCY rows, and the ONNX export that computes what numpy computes (both
outputs), with the card in its metadata."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.trading.messages import Label
from pipeline.trading.model.card import META_KEY, hand_made_card
from pipeline.trading.model.data import SIDE_ASK, SIDE_BID, TRAIN, TrainParams, generate
from pipeline.trading.model.mlp import (INPUT_NAME, OUTPUT_NAME, SIDE_OUTPUT_NAME, Model, fit_side, forward,
                                        forward_side, to_onnx, train)

#: the default market (a one-tick spread, a trade nearly every step): many EMERGENCY rows of both sides
SMALL = TrainParams(market="default", steps=4_000, paces_ms=(20, 50), pace_shares=(1, 1), warmup_ms=1_000,
                    horizon_ms=500, fee_bps=0.0, emergency_loss_ticks=3.0, epochs=2, seed=3)


@pytest.fixture(scope="module")
def small():
    ds = generate(SMALL)
    return ds, train(ds, SMALL)


def test_training_uses_the_training_rows_and_their_mirror_images(small):
    ds, m = small
    r = m.report
    assert r["n_train"] == int((ds.part == TRAIN).sum()) > 1_000 and r["mirrored"] is True
    f = r["class_freq_train"]
    assert f["LEAN_BUY"] == f["LEAN_SELL"] and sum(f.values()) == pytest.approx(1.0, abs=1e-3)
    ytr = ds.y[ds.part == TRAIN]
    want_hold = float((ytr == Label.HOLD).mean())
    assert f["HOLD"] == pytest.approx(want_hold, abs=1e-4)  # mirroring keeps HOLD's share


def test_the_onnx_file_computes_what_numpy_computes_and_carries_its_card(small, tmp_path):
    import onnxruntime as ort

    ds, m = small
    card = hand_made_card("test", "mlp test")
    path = tmp_path / "m.onnx"
    path.write_bytes(to_onnx(m, SMALL, card).SerializeToString())
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == [INPUT_NAME] and sess.get_inputs()[0].shape == ["N", 128]
    X = ds.X[:500]
    assert [o.name for o in sess.get_outputs()] == [OUTPUT_NAME, SIDE_OUTPUT_NAME] == ["probs", "at_risk"]
    got, side = sess.run([OUTPUT_NAME, SIDE_OUTPUT_NAME], {INPUT_NAME: X})
    assert got.dtype == np.float32 and got.shape == (500, 4) and side.dtype == np.float32 and side.shape == (500, 2)
    np.testing.assert_allclose(got, forward(m, X), atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(side, forward_side(m, X), atol=1e-5)
    assert m.report["side_head"]["fitted"] and 0.05 < float(side[:, 0].std())  # it does say something
    meta = sess.get_modelmeta().custom_metadata_map
    assert json.loads(meta[META_KEY]) == card and json.loads(meta["train_params"])["paces_ms"] == [20, 50]
    bare = tmp_path / "bare.onnx"
    bare.write_bytes(to_onnx(m).SerializeToString())
    assert META_KEY not in ort.InferenceSession(str(bare), providers=["CPUExecutionProvider"]).get_modelmeta()\
        .custom_metadata_map


def test_training_needs_two_labels(small):
    ds, _ = small
    one = ds.__class__(**{**ds.__dict__, "y": np.zeros_like(ds.y)})
    with pytest.raises(ValueError, match=r"too little to train on: \d+ training rows, labels \{'HOLD': \d+\}; at least "
                                         "two labels with 20 rows each"):
        train(one, SMALL)
    y = np.zeros_like(ds.y)
    y[np.flatnonzero(ds.part == TRAIN)[:19]] = Label.LEAN_BUY  # 19 rows of a second label: still too few
    few = ds.__class__(**{**ds.__dict__, "y": y})
    with pytest.raises(ValueError, match="'LEAN_BUY': 19"):
        train(few, SMALL)


def test_the_forward_pass_of_a_hand_made_model():
    m = Model(np.eye(128, 2), np.array([0.0, -1.0]), np.array([[1.0, 0, 0, 0], [0, 2.0, 0, 0]]), np.zeros(4), {})
    x = np.zeros((1, 128), np.float32)
    x[0, 0], x[0, 1] = 2.0, 3.0  # hidden relu(2), relu(3 - 1) = 2, 2: logits 2, 4, 0, 0
    z = np.array([2.0, 4.0, 0.0, 0.0])
    np.testing.assert_allclose(forward(m, x)[0], np.exp(z) / np.exp(z).sum())


def test_the_side_head_learns_which_side_an_emergency_hits_and_stays_silent_without_enough_rows():
    rng = np.random.default_rng(1)
    H = rng.normal(size=(400, 8))
    side = np.where(H[:, 2] > 0, SIDE_BID, SIDE_ASK)  # the third hidden unit tells the side
    side[:100] = 0  # rows that are not EMERGENCY: ignored
    w3, b3, info = fit_side(H, side, SMALL)
    z = H @ w3 + b3
    p_bid = np.exp(z[:, 0]) / np.exp(z).sum(axis=1)
    em = side != 0
    assert info["fitted"] and info["rows_bid"] + info["rows_ask"] == 300
    assert ((p_bid[em] >= 0.5) == (side[em] == SIDE_BID)).mean() > 0.95
    w3, b3, info = fit_side(H[90:130], side[90:130], SMALL)  # 30 EMERGENCY rows: one side has fewer than 20
    assert info["rows_bid"] + info["rows_ask"] == 30 and min(info["rows_bid"], info["rows_ask"]) < 20
    assert not info["fitted"] and not w3.any() and not b3.any()  # 0.5 / 0.5: no side is ever named


def test_a_model_without_a_side_head_exports_one_output(tmp_path):
    import onnxruntime as ort

    m = Model(np.eye(128, 2), np.zeros(2), np.zeros((2, 4)), np.zeros(4), {})
    path = tmp_path / "one.onnx"
    path.write_bytes(to_onnx(m).SerializeToString())
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == [OUTPUT_NAME] and forward_side(m, np.zeros((1, 128))) is None
