"""The fast model's network (pipeline/trading/model/mlp.py): training on the TRAIN rows and their mirror
images, and the ONNX export that computes what numpy computes, with the card in its metadata."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.trading.messages import Label
from pipeline.trading.model.card import META_KEY, hand_made_card
from pipeline.trading.model.data import TRAIN, TrainParams, generate
from pipeline.trading.model.mlp import INPUT_NAME, OUTPUT_NAME, Model, forward, to_onnx, train

SMALL = TrainParams(steps=4_000, paces_ms=(1, 20), pace_shares=(1, 1), warmup_ms=1_000, epochs=2, seed=3)


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
    got = sess.run([OUTPUT_NAME], {INPUT_NAME: X})[0]
    assert got.dtype == np.float32 and got.shape == (500, 4)
    np.testing.assert_allclose(got, forward(m, X), atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
    meta = sess.get_modelmeta().custom_metadata_map
    assert json.loads(meta[META_KEY]) == card and json.loads(meta["train_params"])["paces_ms"] == [1, 20]
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
