"""The fast model itself: a 1-hidden-layer MLP trained with numpy, its forward pass, and its ONNX
export (steps 3 and 4 of ``pipeline.trading.model``).

Two heads on one hidden layer: ``probs`` (softmax over the four labels) and ``at_risk`` (softmax over
two: P(our bid at the touch is the order at risk), P(our ask is)), the EMERGENCY's side. The side head
is fitted after the label head, on the hidden layer's activations of the EMERGENCY training rows (and
their mirror images, whose side is the other one), by weighted logistic regression with the two sides
balanced; with fewer than ``MIN_LABEL_ROWS`` rows of either side it stays at 0.5 / 0.5 (no side is
ever named: ``m.report["side_head"]`` says so)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from pipeline.trading.features import N_FEATURES
from pipeline.trading.messages import Label
from pipeline.trading.model.card import META_KEY
from pipeline.trading.model.data import (DROPPED, HELD_OUT, MIRROR_SIDE, SIDE_ASK, SIDE_BID, TRAIN, VALIDATION, Dataset,
                                         TrainParams, mirror_rows)

N_LABELS = len(Label)
INPUT_NAME = "features"
OUTPUT_NAME = "probs"
SIDE_OUTPUT_NAME = "at_risk"  # pipeline.trading.model.decide.AT_RISK_OUTPUT
SIDE_EPOCHS = 300  # full-batch Adam steps of the side head
MIN_LABEL_ROWS = 20  # training needs two labels with at least this many rows each


@dataclass
class Model:
    """Weights with the standardization folded in: h = relu(x @ w1 + b1), probs = softmax(h @ w2 + b2),
    at_risk = softmax(h @ w3 + b3) (no ``at_risk`` output when ``w3`` is None)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    report: dict
    card: dict | None = None  # the model card, once built (pipeline.trading.model.build)
    w3: np.ndarray | None = None  # [hidden, 2]: the side head (bid at risk, ask at risk)
    b3: np.ndarray | None = None


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def hidden(m: Model, X: np.ndarray) -> np.ndarray:
    """The hidden layer's activations (float64)."""
    return np.maximum(np.asarray(X).astype(np.float64) @ m.w1 + m.b1, 0.0)


def forward(m: Model, X: np.ndarray) -> np.ndarray:
    """The numpy forward pass (float64) of the exported graph's ``probs``."""
    return _softmax(hidden(m, X) @ m.w2 + m.b2)


def forward_side(m: Model, X: np.ndarray) -> np.ndarray | None:
    """The numpy forward pass (float64) of the exported graph's ``at_risk``; None without a side head."""
    if m.w3 is None:
        return None
    return _softmax(hidden(m, X) @ m.w3 + m.b3)


def fit_side(H: np.ndarray, side: np.ndarray, p: TrainParams) -> tuple[np.ndarray, np.ndarray, dict]:
    """The side head (w3 [hidden, 2], b3 [2], what was fitted) on hidden activations ``H`` of rows whose
    ``side`` is SIDE_BID or SIDE_ASK (others ignored): softmax regression by full-batch Adam, each side
    weighing half, L2 ``p.l2``. Fewer than ``MIN_LABEL_ROWS`` of either side: zeros (0.5 / 0.5)."""
    keep = (side == SIDE_BID) | (side == SIDE_ASK)
    Hs, ys = np.asarray(H, np.float64)[keep], (side[keep] == SIDE_ASK).astype(np.int64)
    counts = np.bincount(ys, minlength=2)
    w3, b3 = np.zeros((H.shape[1], 2)), np.zeros(2)
    info = {"rows_bid": int(counts[0]), "rows_ask": int(counts[1])}
    if counts.min() < MIN_LABEL_ROWS:
        return w3, b3, {**info, "fitted": False}
    sd = Hs.std(axis=0)
    sd[sd < 1e-9] = 1.0
    Z = Hs / sd
    wt = (0.5 / counts)[ys]
    params, mom, vel = [np.zeros((H.shape[1], 2)), np.zeros(2)], [0.0, 0.0], [0.0, 0.0]
    onehot = np.eye(2)[ys]
    for t in range(1, SIDE_EPOCHS + 1):
        g = (_softmax(Z @ params[0] + params[1]) - onehot) * wt[:, None]
        grads = (Z.T @ g + p.l2 * params[0], g.sum(0))
        for k, gr in enumerate(grads):
            mom[k] = 0.9 * mom[k] + 0.1 * gr
            vel[k] = 0.999 * vel[k] + 0.001 * gr * gr
            params[k] = params[k] - 0.05 * (mom[k] / (1 - 0.9**t)) / (np.sqrt(vel[k] / (1 - 0.999**t)) + 1e-8)
    pred = (_softmax(Z @ params[0] + params[1])[:, 1] >= 0.5).astype(np.int64)
    acc = float(((pred == ys) * wt).sum())
    return params[0] / sd[:, None], params[1], {**info, "fitted": True, "balanced_accuracy_train": round(acc, 4)}


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
    side = ds.side[itr]
    em = np.flatnonzero(side != 0)
    Xs, ss = ds.X[itr][em], side[em]
    if p.mirror and len(em):
        Xs, ss = np.concatenate([Xs, mirror_rows(Xs, ds.y[itr][em])[0]]), np.concatenate([ss, MIRROR_SIDE[ss]])
    m.w3, m.b3, side_info = fit_side(hidden(m, Xs), ss, p)
    freq = np.bincount(ytr, minlength=N_LABELS) / len(ytr)  # unweighted, mirror images included
    m.report = {"n_train": int(len(itr)), "mirrored": bool(p.mirror), "n_validation": int(len(ds.rows(VALIDATION))),
                "n_held_out": int(len(ds.rows(HELD_OUT))), "n_embargo": int((ds.part == DROPPED).sum()),
                "class_freq_train": {Label(c).name: round(float(f), 4) for c, f in enumerate(freq)},
                "side_head": side_info}
    return m


def to_onnx(m: Model, p: TrainParams | None = None, card: dict | None = None):
    """The ONNX graph (opset 17) of ``m``: input ``features`` float32 [N, 128], outputs ``probs`` float32
    [N, 4] and, with a side head, ``at_risk`` float32 [N, 2]; metadata props: the label names, ``m.report``, ``p`` (when
    given) and ``card`` (when given, as JSON under ``pipeline.trading.model.card.META_KEY``). Without
    a card the fast stage refuses the model (``card.check_card``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [("w1", m.w1), ("b1", m.b1), ("w2", m.w2), ("b2", m.b2)]
    nodes = [helper.make_node("MatMul", [INPUT_NAME, "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["z0"]),
             helper.make_node("Add", ["z0", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], [OUTPUT_NAME], axis=-1)]
    outputs = [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", N_LABELS])]
    if m.w3 is not None:
        weights += [("w3", m.w3), ("b3", m.b3)]
        nodes += [helper.make_node("MatMul", ["h2", "w3"], ["s0"]), helper.make_node("Add", ["s0", "b3"], ["s1"]),
                  helper.make_node("Softmax", ["s1"], [SIDE_OUTPUT_NAME], axis=-1)]
        outputs.append(helper.make_tensor_value_info(SIDE_OUTPUT_NAME, TensorProto.FLOAT, ["N", 2]))
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), name) for name, a in weights]
    graph = helper.make_graph(nodes, "fast_classifier",
                              [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", N_FEATURES])],
                              outputs, inits)
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
