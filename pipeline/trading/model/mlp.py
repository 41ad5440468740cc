"""The fast model itself: a 1-hidden-layer MLP trained with numpy, its forward pass, and its ONNX
export (steps 3 and 4 of ``pipeline.trading.model``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from pipeline.trading.features import N_FEATURES
from pipeline.trading.messages import Label
from pipeline.trading.model.card import META_KEY
from pipeline.trading.model.data import DROPPED, HELD_OUT, TRAIN, VALIDATION, Dataset, TrainParams, mirror_rows

N_LABELS = len(Label)
INPUT_NAME = "features"
OUTPUT_NAME = "probs"
MIN_LABEL_ROWS = 20  # training needs two labels with at least this many rows each


@dataclass
class Model:
    """Weights with the standardization folded in: probs = softmax(relu(x @ w1 + b1) @ w2 + b2)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    report: dict
    card: dict | None = None  # the model card, once built (pipeline.trading.model.build)


def forward(m: Model, X: np.ndarray) -> np.ndarray:
    """The numpy forward pass (float64) of the exported graph."""
    h = np.maximum(X.astype(np.float64) @ m.w1 + m.b1, 0.0)
    z = h @ m.w2 + m.b2
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _adam_fit(Z: np.ndarray, y: np.ndarray, row_w: np.ndarray, p: TrainParams) -> list[np.ndarray]:
    """Minibatch Adam on weighted cross-entropy of standardized rows ``Z``: each row weighs its
    ``row_w`` times its class's weight (``freq ** -0.5`` of the weighted class shares, tempered so
    that accuracy still counts); the weights [w1, b1, w2, b2]."""
    n = len(y)
    rng = np.random.default_rng(p.seed)
    freq = np.bincount(y, weights=row_w, minlength=N_LABELS) / max(1e-300, row_w.sum())
    cw = np.where(freq > 0, np.maximum(freq, 1e-6) ** -0.5, 0.0)
    cw /= (cw * freq).sum()
    params = [rng.normal(0, (2 / N_FEATURES) ** 0.5, (N_FEATURES, p.hidden)), np.zeros(p.hidden),
              rng.normal(0, (1 / p.hidden) ** 0.5, (p.hidden, N_LABELS)), np.zeros(N_LABELS)]
    mom = [np.zeros_like(q) for q in params]
    vel = [np.zeros_like(q) for q in params]
    b1_, b2_, eps, t = 0.9, 0.999, 1e-8, 0
    for _ in range(p.epochs):
        order = rng.permutation(n)
        for s in range(0, n, p.batch):
            idx = order[s : s + p.batch]
            x, yb = Z[idx], y[idx]
            w1, b1, w2, b2 = params
            hpre = x @ w1 + b1
            hh = np.maximum(hpre, 0)
            z = hh @ w2 + b2
            z -= z.max(axis=1, keepdims=True)
            pr = np.exp(z)
            pr /= pr.sum(axis=1, keepdims=True)
            wts = cw[yb] * row_w[idx]
            g = pr.copy()
            g[np.arange(len(yb)), yb] -= 1
            g *= (wts / wts.sum())[:, None]
            gh = (g @ w2.T) * (hpre > 0)
            grads = (x.T @ gh + p.l2 * w1, gh.sum(0), hh.T @ g + p.l2 * w2, g.sum(0))
            t += 1
            for k, gr in enumerate(grads):
                mom[k] = b1_ * mom[k] + (1 - b1_) * gr
                vel[k] = b2_ * vel[k] + (1 - b2_) * gr * gr
                params[k] -= p.lr * (mom[k] / (1 - b1_**t)) / (np.sqrt(vel[k] / (1 - b2_**t)) + eps)
    return params


def train(ds: Dataset, p: TrainParams) -> Model:
    """Fit on the TRAIN rows of ``ds`` (standardization from them, folded into the first layer);
    ``m.report`` counts the rows of each part and the training class shares.

    Raises:
        ValueError: fewer than two labels with ``MIN_LABEL_ROWS`` training rows each.
    """
    itr = ds.rows(TRAIN)
    ytr = ds.y[itr]
    counts = np.bincount(ytr, minlength=N_LABELS)
    if (counts >= MIN_LABEL_ROWS).sum() < 2:
        have = {Label(c).name: int(n) for c, n in enumerate(counts) if n}
        raise ValueError(f"too little to train on: {len(itr)} training rows, labels {have}; at least two labels "
                         f"with {MIN_LABEL_ROWS} rows each are needed")
    Xtr, wtr = ds.X[itr], ds.weights[ds.series[itr]]
    if p.mirror:
        Xm, ym = mirror_rows(Xtr, ytr)
        Xtr, ytr, wtr = np.concatenate([Xtr, Xm]), np.concatenate([ytr, ym]), np.concatenate([wtr, wtr])
    Xtr = Xtr.astype(np.float64)
    mu = Xtr.mean(axis=0)
    sd = Xtr.std(axis=0)
    sd[sd < 1e-9] = 1.0
    w1, b1, w2, b2 = _adam_fit((Xtr - mu) / sd, ytr, wtr, p)
    m = Model(w1 / sd[:, None], b1 - (mu / sd) @ w1, w2, b2, {})
    freq = np.bincount(ytr, minlength=N_LABELS) / len(ytr)  # unweighted, mirror images included
    m.report = {"n_train": int(len(itr)), "mirrored": bool(p.mirror), "n_validation": int(len(ds.rows(VALIDATION))),
                "n_held_out": int(len(ds.rows(HELD_OUT))), "n_embargo": int((ds.part == DROPPED).sum()),
                "class_freq_train": {Label(c).name: round(float(f), 4) for c, f in enumerate(freq)}}
    return m


def to_onnx(m: Model, p: TrainParams | None = None, card: dict | None = None):
    """The ONNX graph (opset 17) of ``m``; metadata props: the label names, ``m.report``, ``p`` (when
    given) and ``card`` (when given, as JSON under ``pipeline.trading.model.card.META_KEY``). Without
    a card the fast stage refuses the model (``card.check_card``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.asarray(a, np.float32), name)
             for name, a in (("w1", m.w1), ("b1", m.b1), ("w2", m.w2), ("b2", m.b2))]
    nodes = [helper.make_node("MatMul", [INPUT_NAME, "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["z0"]),
             helper.make_node("Add", ["z0", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], [OUTPUT_NAME], axis=-1)]
    graph = helper.make_graph(nodes, "fast_classifier",
                              [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", N_FEATURES])],
                              [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", N_LABELS])], inits)
    model = helper.make_model(graph, producer_name="shmpipe.pipeline.model",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    meta = {"labels": json.dumps([lb.name for lb in Label]), "report": json.dumps(m.report)}
    if p is not None:
        meta["train_params"] = json.dumps(dataclasses.asdict(p))
    if card is not None:
        meta[META_KEY] = json.dumps(card)
    for k, v in meta.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = k, v
    onnx.checker.check_model(model)
    return model
