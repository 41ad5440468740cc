"""The fast path's default model: trained by the project from its own synthetic order flow, exported to ONNX.

Pure apart from writing the model file: no clock, no ring, no network. Steps:

1. Data: ``SyntheticMarket`` (the paper venue's generator, seeded; its planted relation is that book
   imbalance now leads the mid over ~``lag_steps`` steps) is stepped ``steps`` times; after each step
   its top 15 levels become a BOOK record and its trades TRADE records, which go through
   ``pipeline.features`` exactly as the feature stage does, giving one 128-dim row per step.
2. Labels from the future mid move ``d`` (ticks) over ``horizon_ms``: ``|d| <= dead_band_ticks`` HOLD,
   ``d`` above it LEAN_BUY, below it LEAN_SELL; EMERGENCY when ``|d| >= emergency_ticks`` (a large
   adverse move for a quoting book) or when the flow is toxic (``F_VPIN >= toxic_vpin``) and
   ``|d| >= toxic_move_ticks``.
3. A chronological split (the last ``holdout`` share is held out: overlapping horizons make a random
   split leak), standardization from the training part, then a 1-hidden-layer MLP (ReLU, softmax)
   trained with numpy: minibatch Adam on class-weighted cross-entropy (weights ``freq ** -0.5``,
   tempered so that accuracy still counts).
4. Export with ``onnx.helper``: input ``features`` float32 [N, 128], standardization folded into the
   first layer, ``MatMul, Add, Relu, MatMul, Add, Softmax``, output ``probs`` float32 [N, 4] (index =
   ``pipeline.messages.Label``). Metadata props record the labelling parameters and held-out scores.

``python -m pipeline.model --out models/generated/fast.onnx`` (``make model``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.features import F_VPIN, N_FEATURES, FeatureParams, FeatureState, compute, update_from_trade
from pipeline.messages import BOOK_DTYPE, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL, Label
from pipeline.venue.synthetic import SyntheticMarket, SyntheticParams

N_LABELS = len(Label)
INPUT_NAME = "features"
OUTPUT_NAME = "probs"


@dataclass(frozen=True)
class TrainParams:
    seed: int = 7
    steps: int = 60_000  # synthetic steps (20 ms each: 20 minutes of market time)
    tick_size: float = 0.1
    lot_size: float = 0.0001
    horizon_ms: int = 500
    dead_band_ticks: float = 2.0
    emergency_ticks: float = 40.0
    toxic_vpin: float = 0.9
    toxic_move_ticks: float = 20.0
    hidden: int = 32
    epochs: int = 8
    batch: int = 256
    lr: float = 3e-3
    l2: float = 1e-4
    holdout: float = 0.2


@dataclass
class Dataset:
    X: np.ndarray  # float32 [n, 128]
    y: np.ndarray  # int64 [n]
    move_ticks: np.ndarray  # float64 [n]


@dataclass
class Model:
    """Weights with the standardization folded in: probs = softmax(relu(x @ w1 + b1) @ w2 + b2)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    report: dict


def generate(p: TrainParams) -> Dataset:
    """Feature rows and labels from ``p.steps`` steps of the seeded synthetic market."""
    sp = SyntheticParams()
    market = SyntheticMarket(p.seed, p.tick_size, p.lot_size, sp)
    state = FeatureState(1, p.tick_size, FeatureParams(vpin_bucket_volume=1000 * p.lot_size))
    book = np.zeros(1, BOOK_DTYPE)
    book["instrument_id"], book["n_bids"], book["n_asks"] = 1, BOOK_LEVELS, BOOK_LEVELS
    trade = np.zeros(1, TRADE_DTYPE)
    trade["instrument_id"] = 1
    X = np.zeros((p.steps, N_FEATURES), np.float32)
    mids = np.zeros(p.steps)
    ok = np.zeros(p.steps, bool)
    t0 = 1_700_000_000_000_000_000
    for i in range(p.steps):
        res = market.step()
        ts = t0 + (i + 1) * sp.step_ms * 1_000_000
        for tr in res.trades:
            trade["side"] = TRADE_SIDE_BUY if tr.side == "buy" else TRADE_SIDE_SELL
            trade["trade_id"], trade["exch_ts_ns"] = tr.trade_id, ts
            trade["price"], trade["size"] = tr.price_ticks * p.tick_size, tr.lots * p.lot_size
            update_from_trade(state, trade.tobytes())
        bids = sorted(market.bids.items(), key=lambda kv: -kv[0])[:BOOK_LEVELS]
        asks = sorted(market.asks.items())[:BOOK_LEVELS]
        book["n_bids"], book["n_asks"] = len(bids), len(asks)
        book["bid_px"], book["bid_sz"], book["ask_px"], book["ask_sz"] = 0.0, 0.0, 0.0, 0.0
        book["bid_px"][0, : len(bids)] = [px * p.tick_size for px, _ in bids]
        book["bid_sz"][0, : len(bids)] = [sz * p.lot_size for _, sz in bids]
        book["ask_px"][0, : len(asks)] = [px * p.tick_size for px, _ in asks]
        book["ask_sz"][0, : len(asks)] = [sz * p.lot_size for _, sz in asks]
        book["seq"], book["exch_ts_ns"] = i + 1, ts
        ok[i] = compute(state, book.tobytes(), X[i]) == 0
        mids[i] = market.mid_ticks()
    h = max(1, round(p.horizon_ms / sp.step_ms))
    n = p.steps - h
    keep = ok[:n].copy()
    keep[0] = False  # the warm-up row (no previous book)
    d = mids[h:] - mids[:n]
    X, d = X[:n][keep], d[keep]
    return Dataset(X, label(d, X[:, F_VPIN], p), d)


def label(move_ticks: np.ndarray, vpin: np.ndarray, p: TrainParams) -> np.ndarray:
    """Labels of future mid moves (ticks) with the dead band, EMERGENCY for large or toxic moves."""
    y = np.full(move_ticks.shape, int(Label.HOLD), np.int64)
    y[move_ticks > p.dead_band_ticks] = Label.LEAN_BUY
    y[move_ticks < -p.dead_band_ticks] = Label.LEAN_SELL
    big = np.abs(move_ticks) >= p.emergency_ticks
    toxic = (vpin >= p.toxic_vpin) & (np.abs(move_ticks) >= p.toxic_move_ticks)
    y[big | toxic] = Label.EMERGENCY
    return y


def forward(m: Model, X: np.ndarray) -> np.ndarray:
    """The numpy forward pass (float64) of the exported graph."""
    h = np.maximum(X.astype(np.float64) @ m.w1 + m.b1, 0.0)
    z = h @ m.w2 + m.b2
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def train(ds: Dataset, p: TrainParams) -> Model:
    n = len(ds.y)
    cut = int(n * (1 - p.holdout))
    Xtr, ytr, Xte, yte = ds.X[:cut].astype(np.float64), ds.y[:cut], ds.X[cut:].astype(np.float64), ds.y[cut:]
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
        "n_train": int(cut), "n_holdout": int(n - cut),
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


def build(out: Path, p: TrainParams = TrainParams()) -> Model:
    """Generate, train and write ``out`` (atomically: a temporary file, then a rename)."""
    m = train(generate(p), p)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(to_onnx(m, p).SerializeToString())
    tmp.replace(out)
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.model", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="models/generated/fast.onnx")
    ap.add_argument("--steps", type=int, default=TrainParams.steps)
    ap.add_argument("--seed", type=int, default=TrainParams.seed)
    ap.add_argument("--horizon-ms", type=int, default=TrainParams.horizon_ms)
    ap.add_argument("--dead-band-ticks", type=float, default=TrainParams.dead_band_ticks)
    args = ap.parse_args(argv)
    p = TrainParams(seed=args.seed, steps=args.steps, horizon_ms=args.horizon_ms, dead_band_ticks=args.dead_band_ticks)
    m = build(Path(args.out), p)
    print(json.dumps({"out": args.out, **m.report}), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
