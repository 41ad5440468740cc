"""The fast model itself: a 1-hidden-layer MLP trained with numpy, its forward pass, and its ONNX
export (steps 3 and 4 of ``pipeline.trading.model``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from pipeline.trading.features import N_FEATURES
from pipeline.trading.messages import Label
from pipeline.trading.model.data import Dataset, TrainParams, synthetic_split

N_LABELS = len(Label)
INPUT_NAME = "features"
OUTPUT_NAME = "probs"

@dataclass
class Model:
    """Weights with the standardization folded in: probs = softmax(relu(x @ w1 + b1) @ w2 + b2)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    report: dict
    eval: dict | None = None


def forward(m: Model, X: np.ndarray) -> np.ndarray:
    """The numpy forward pass (float64) of the exported graph."""
    h = np.maximum(X.astype(np.float64) @ m.w1 + m.b1, 0.0)
    z = h @ m.w2 + m.b2
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def train(ds: Dataset, p: TrainParams, extra: tuple[np.ndarray, np.ndarray] | None = None) -> Model:
    """Fit on the synthetic training split, plus ``extra`` rows (the training part of a capture
    replay) when given; the held-out scores in ``m.report`` are the synthetic split's."""
    itr, ite = synthetic_split(ds, p)
    Xtr, ytr, Xte, yte = ds.X[itr].astype(np.float64), ds.y[itr], ds.X[ite].astype(np.float64), ds.y[ite]
    cut = len(itr)
    n_extra = 0
    if extra is not None and len(extra[1]):
        n_extra = len(extra[1])
        Xtr = np.concatenate([Xtr, extra[0].astype(np.float64)])
        ytr = np.concatenate([ytr, extra[1]])
        cut += n_extra
    mu = Xtr.mean(axis=0)
    sd = Xtr.std(axis=0)
    sd[sd < 1e-9] = 1.0
    Ztr = (Xtr - mu) / sd
    rng = np.random.default_rng(p.seed)
    freq = np.bincount(ytr, minlength=N_LABELS) / len(ytr)
    cw = np.where(freq > 0, np.maximum(freq, 1e-6) ** -0.5, 0.0)
    cw /= (cw * freq).sum()
    params = [rng.normal(0, (2 / N_FEATURES) ** 0.5, (N_FEATURES, p.hidden)), np.zeros(p.hidden),
              rng.normal(0, (1 / p.hidden) ** 0.5, (p.hidden, N_LABELS)), np.zeros(N_LABELS)]
    mom = [np.zeros_like(q) for q in params]
    vel = [np.zeros_like(q) for q in params]
    b1_, b2_, eps, t = 0.9, 0.999, 1e-8, 0
    for _ in range(p.epochs):
        order = rng.permutation(cut)
        for s in range(0, cut, p.batch):
            idx = order[s : s + p.batch]
            x, yb = Ztr[idx], ytr[idx]
            w1, b1, w2, b2 = params
            hpre = x @ w1 + b1
            hh = np.maximum(hpre, 0)
            z = hh @ w2 + b2
            z -= z.max(axis=1, keepdims=True)
            pr = np.exp(z)
            pr /= pr.sum(axis=1, keepdims=True)
            wts = cw[yb]
            g = pr.copy()
            g[np.arange(len(yb)), yb] -= 1
            g *= (wts / wts.sum())[:, None]
            gw2 = hh.T @ g + p.l2 * w2
            gb2 = g.sum(0)
            gh = (g @ w2.T) * (hpre > 0)
            gw1 = x.T @ gh + p.l2 * w1
            gb1 = gh.sum(0)
            t += 1
            for k, gr in enumerate((gw1, gb1, gw2, gb2)):
                mom[k] = b1_ * mom[k] + (1 - b1_) * gr
                vel[k] = b2_ * vel[k] + (1 - b2_) * gr * gr
                params[k] -= p.lr * (mom[k] / (1 - b1_**t)) / (np.sqrt(vel[k] / (1 - b2_**t)) + eps)
    w1, b1, w2, b2 = params
    m = Model(w1 / sd[:, None], b1 - (mu / sd) @ w1, w2, b2, {})
    pred = forward(m, Xte).argmax(axis=1)
    majority = int(np.bincount(ytr, minlength=N_LABELS).argmax())
    recall = [float((pred[yte == c] == c).mean()) if (yte == c).any() else None for c in range(N_LABELS)]
    m.report = {
        "n_train": int(cut), "n_train_capture": int(n_extra), "n_holdout": int(len(ite)),
        "n_embargo": int(len(ds.y) - len(itr) - len(ite)), "embargo_steps": int(ds.horizon_steps),
        "holdout_scored_by": "argmax (the evaluation report also scores the deployed thresholds)",
        "class_freq_train": [round(float(f), 4) for f in freq],
        "holdout_accuracy": float((pred == yte).mean()),
        "majority_label": Label(majority).name,
        "majority_baseline": float((yte == majority).mean()),
        "holdout_balanced_accuracy": float(np.mean([r for r in recall if r is not None])),
        "holdout_recall": recall,
    }
    return m


def to_onnx(m: Model, p: TrainParams | None = None):
    """The ONNX graph (opset 17) of ``m``."""
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
    for k, v in meta.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = k, v
    onnx.checker.check_model(model)
    return model
