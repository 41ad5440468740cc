"""The fast path's default model: trained by the project from its own synthetic order flow, exported to ONNX.

Pure apart from writing the model file: no clock, no ring, no network. Steps:

1. Data: ``SyntheticMarket`` (the paper venue's generator, seeded; its planted relation is that book
   imbalance now leads the mid over ~``lag_steps`` steps) is stepped ``steps`` times; after each step
   its top 15 levels become a BOOK record and its trades TRADE records, which go through
   ``pipeline.trading.features`` exactly as the feature stage does, giving one 128-dim row per step.
2. Labels from the future mid move ``d`` (ticks) over ``horizon_ms``: ``|d| <= dead_band_ticks`` HOLD,
   ``d`` above it LEAN_BUY, below it LEAN_SELL; EMERGENCY when ``|d| >= emergency_ticks`` (a large
   adverse move for a quoting book) or when the flow is toxic (``F_VPIN >= toxic_vpin``) and
   ``|d| >= toxic_move_ticks``.
3. A chronological split (``synthetic_split``; overlapping horizons make a random split leak): the
   steps before the row at the ``1 - holdout`` share train, the next ``horizon_steps`` steps (one label
   horizon: ``horizon_ms / step_ms``) are dropped (the embargo: every training label ends before the
   first held-out row's time), the rest is held out. Standardization from the training part, then a
   1-hidden-layer MLP (ReLU, softmax)
   trained with numpy: minibatch Adam on class-weighted cross-entropy (weights ``freq ** -0.5``,
   tempered so that accuracy still counts).
4. Export with ``onnx.helper``: input ``features`` float32 [N, 128], standardization folded into the
   first layer, ``MatMul, Add, Relu, MatMul, Add, Softmax``, output ``probs`` float32 [N, 4] (index =
   ``pipeline.trading.messages.Label``). Metadata props record the labelling parameters and held-out scores.

5. Evaluation (``evaluate``): on the held-out split, macro-F1 (over the 4 labels, and over the 3
   labels HOLD / LEAN_BUY / LEAN_SELL: ``scores``), accuracy and per-class precision / recall of
   - ``model``: the labels the fast stage emits (``deployed_labels``: ``procs/fast.py``'s threshold
     rule, with the thresholds of the fast process in ``configs/default.toml``, which sets none: the
     ``FastParams`` defaults buy 0.4, sell 0.4, emergency 0.5), on the float32 probabilities;
   - ``model_argmax``: the same probabilities' argmax (not deployed; for comparison);
   - two baselines: always-HOLD, and the sign of the book imbalance (``F_IMBALANCE_1`` or
     ``F_IMBALANCE_5``, > +eps LEAN_BUY, < -eps LEAN_SELL, else HOLD; the slot and eps chosen for the
     best 4-class macro-F1 on the training split). It cannot say EMERGENCY, hence the 3-class figure.
   When the real Bitget capture is there (``<repo>/../shared/data/bitget/BITGET.ws.1.0``), it is
   replayed into rows too: books rebuilt with ``pipeline.trading.bitget``, features from ``pipeline.trading.features``,
   labels from the future mid at the capture's receive time + ``horizon_ms``, in ticks of each
   instrument's price grid. It is split in time across instruments (``split_capture``): one cut time
   for all of them, at the 70 % quantile of the labelled rows' receive times; rows before it join the
   training data, rows in the next ``horizon_ms`` are dropped (the embargo), the same metrics are
   reported on the rows after. Written next to the model as ``<stem>.eval.json`` and ``<stem>.eval.md``.

``python -m pipeline.trading.model --out models/generated/fast.onnx`` (``make model``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.trading.features import F_IMBALANCE_1, F_IMBALANCE_5, F_VPIN, N_FEATURES, FeatureParams, FeatureState, compute, update_from_trade
from pipeline.trading.messages import BOOK_DTYPE, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL, Label
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
    step: np.ndarray  # int64 [n]: the market step of each row (increasing; rows without features are absent)
    horizon_steps: int  # the label's look-ahead in steps


@dataclass
class Model:
    """Weights with the standardization folded in: probs = softmax(relu(x @ w1 + b1) @ w2 + b2)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    report: dict
    eval: dict | None = None


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
    return Dataset(X, label(d, X[:, F_VPIN], p), d, np.flatnonzero(keep).astype(np.int64), h)


def synthetic_split(ds: Dataset, p: TrainParams) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (training, held-out) of ``ds``: a time cut at the step ``c`` of the row at the
    ``1 - p.holdout`` share; rows with step < ``c`` train, steps ``c`` .. ``c + horizon_steps - 1`` are
    dropped (the embargo: one label horizon, so no training label, which looks ``horizon_steps``
    ahead, reaches a held-out row's time), rows with step >= ``c + horizon_steps`` are held out."""
    n = len(ds.y)
    k = min(max(int(n * (1 - p.holdout)), 0), n)
    if k >= n:
        return np.arange(n), np.zeros(0, np.int64)
    c = int(ds.step[k])
    return np.flatnonzero(ds.step < c), np.flatnonzero(ds.step >= c + ds.horizon_steps)


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


REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO.parent / "shared" / "data" / "bitget" / "BITGET.ws.1.0"
MIN_CAPTURE_ROWS = 200  # fewer labelled rows than this: the capture's figures are flagged as too few


DEFAULT_CONFIG = REPO / "configs" / "default.toml"
FAST_MODULE = "procs.fast:FastAgent"
THREE_CLASSES = (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL)
ROW_TITLES = {"model": "model (deployed thresholds)", "model_argmax": "argmax (not deployed)",
              "always_hold": "always_hold", "imbalance_sign": "imbalance_sign"}


# ------------------------------------------------------------------------------------- evaluation
def macro_f1_3class(y: np.ndarray, pred: np.ndarray) -> tuple[float, int]:
    """(macro-F1 over HOLD / LEAN_BUY / LEAN_SELL, rows scored). Rows whose true label is EMERGENCY
    are left out; on the others a predicted EMERGENCY is a miss (it lowers the recall of the row's
    true class and adds to no class's precision). Classes absent from both ``y`` and ``pred`` (on the
    rows kept) are not averaged, as in ``scores``."""
    keep = y != Label.EMERGENCY
    y3, p3 = y[keep], pred[keep]
    f1s = []
    for c in THREE_CLASSES:
        tp = int(((p3 == c) & (y3 == c)).sum())
        npred, ntrue = int((p3 == c).sum()), int((y3 == c).sum())
        if npred + ntrue:
            f1s.append(2 * tp / (npred + ntrue))
    return (float(np.mean(f1s)) if f1s else 0.0), int(keep.sum())


def scores(y: np.ndarray, pred: np.ndarray) -> dict:
    """Macro-F1 (mean F1 over the classes present in ``y`` or ``pred``), the 3-class macro-F1
    (``macro_f1_3class``), accuracy, and per class precision / recall / F1 / support (precision None
    for a class never predicted, recall None for a class absent from ``y``; such a class's F1 counts
    as 0 when the other side has it)."""
    per, f1s = {}, []
    for c in Label:
        tp = int(((pred == c) & (y == c)).sum())
        npred, ntrue = int((pred == c).sum()), int((y == c).sum())
        f1 = 2 * tp / (npred + ntrue) if npred + ntrue else None
        if f1 is not None:
            f1s.append(f1)
        per[c.name] = {"precision": tp / npred if npred else None, "recall": tp / ntrue if ntrue else None,
                       "f1": f1, "support": ntrue}
    f3, n3 = macro_f1_3class(y, pred)
    return {"macro_f1": float(np.mean(f1s)) if f1s else 0.0, "macro_f1_3class": f3, "n_3class": n3,
            "accuracy": float((pred == y).mean()) if len(y) else 0.0, "n": int(len(y)), "per_class": per}


def deployed_thresholds(config: Path | None = DEFAULT_CONFIG) -> dict:
    """The thresholds the fast stage applies: the params of the ``procs.fast:FastAgent`` process in
    ``config`` (validated by the stage's own ``parse_params``), or the ``FastParams`` defaults when
    ``config`` is None, missing, or has no such process."""
    import tomllib

    from procs.fast import FastParams, parse_params

    fp, source = FastParams(), "FastParams defaults"
    if config is not None and Path(config).is_file():
        for pr in tomllib.loads(Path(config).read_text()).get("processes", []):
            if pr.get("module") == FAST_MODULE:
                fp = parse_params(pr.get("name", "fast"), pr.get("params", {}))
                given = "thresholds" in pr.get("params", {})
                where = Path(config).resolve()
                where = where.relative_to(REPO) if where.is_relative_to(REPO) else where
                source = f"{where}, process {pr.get('name')!r}"
                if not given:
                    source += ", which sets none: FastParams defaults"
                break
    t = fp.thresholds
    return {"buy": float(t.buy), "sell": float(t.sell), "emergency": float(t.emergency), "source": source}


def deployed_labels(probs: np.ndarray, buy: float, sell: float, emergency: float) -> np.ndarray:
    """The labels the fast stage emits for probability rows (``procs/fast.py``, ``FastAgent.classify``
    and its scalar twin): LEAN_BUY when P(buy) >= ``buy`` and P(buy) >= P(sell); LEAN_SELL when
    P(sell) >= ``sell`` and P(sell) > P(buy); EMERGENCY, over both, when P(emergency) >= ``emergency``;
    else HOLD. Compared in float32, as the stage compares its float32 outputs (a test holds this to
    the stage's own function)."""
    pr = np.asarray(probs, np.float32)
    b, s, e = np.float32(buy), np.float32(sell), np.float32(emergency)
    lab = np.full(len(pr), int(Label.HOLD), np.int64)
    pb, ps = pr[:, Label.LEAN_BUY], pr[:, Label.LEAN_SELL]
    lab[(pb >= b) & (pb >= ps)] = Label.LEAN_BUY
    lab[(ps >= s) & (ps > pb)] = Label.LEAN_SELL
    lab[pr[:, Label.EMERGENCY] >= e] = Label.EMERGENCY
    return lab


def imbalance_predict(X: np.ndarray, slot: int, eps: float) -> np.ndarray:
    """The imbalance-sign baseline: > +eps LEAN_BUY, < -eps LEAN_SELL, else HOLD."""
    v = X[:, slot]
    pred = np.full(len(X), int(Label.HOLD), np.int64)
    pred[v > eps] = Label.LEAN_BUY
    pred[v < -eps] = Label.LEAN_SELL
    return pred


def fit_imbalance(X: np.ndarray, y: np.ndarray) -> tuple[int, float]:
    """The slot (``F_IMBALANCE_1`` / ``F_IMBALANCE_5``) and eps with the best training macro-F1."""
    best = (-1.0, F_IMBALANCE_1, 0.0)
    for slot in (F_IMBALANCE_1, F_IMBALANCE_5):
        grid = np.unique(np.concatenate([[0.0], np.quantile(np.abs(X[:, slot]), np.linspace(0.02, 0.98, 49))]))
        for eps in grid:
            f = scores(y, imbalance_predict(X, slot, float(eps)))["macro_f1"]
            if f > best[0]:
                best = (f, slot, float(eps))
    return best[1], best[2]


def evaluate(m: Model, X: np.ndarray, y: np.ndarray, slot: int, eps: float, th: dict | None = None) -> dict:
    """The four rows on ``X`` / ``y``: the model as deployed (``deployed_labels`` with ``th``, default
    ``deployed_thresholds()``), its argmax (not deployed), always-HOLD, the imbalance sign. The
    ``model_beats_*`` flags compare the deployed model's macro-F1 (4 classes; ``..._3class``: 3)."""
    th = deployed_thresholds() if th is None else th
    probs = forward(m, X).astype(np.float32)  # the stage's probabilities are float32
    rows = {"model": scores(y, deployed_labels(probs, th["buy"], th["sell"], th["emergency"])),
            "model_argmax": scores(y, probs.argmax(axis=1)),
            "always_hold": scores(y, np.full(len(y), int(Label.HOLD), np.int64)),
            "imbalance_sign": scores(y, imbalance_predict(X, slot, eps))}
    out: dict = {"rows": rows}
    for key, sfx in (("macro_f1", ""), ("macro_f1_3class", "_3class")):
        f = {k: v[key] for k, v in rows.items()}
        out.update({f"model_beats_always_hold{sfx}": f["model"] > f["always_hold"],
                    f"model_beats_imbalance_sign{sfx}": f["model"] > f["imbalance_sign"],
                    f"model_beats_both{sfx}": f["model"] > max(f["always_hold"], f["imbalance_sign"])})
    return out


def _grid_tick(prices: list[float]) -> float:
    """The price grid of one instrument, from the smallest gap between distinct levels seen."""
    u = np.unique(np.round(np.asarray(prices), 12))
    gaps = np.diff(u)
    gaps = gaps[gaps > 1e-12]
    return float(gaps.min()) if gaps.size else 1.0


@dataclass
class CaptureData:
    """A capture's labelled rows, in time order across instruments (``capture_dataset``)."""

    X: np.ndarray  # float32 [n, 128]
    y: np.ndarray  # int64 [n]
    t_ns: np.ndarray  # int64 [n]: receive time of the row's BOOK (non-decreasing)
    inst: np.ndarray  # int64 [n]: instrument id
    info: dict


def capture_dataset(path: Path, p: TrainParams) -> CaptureData:
    """Feature rows and labels from a Bitget capture: every received frame decoded, books rebuilt
    (``BitgetBooks``), trades folded in, one row per emitted BOOK (the first of each instrument, the
    warm-up, dropped); the label is the mid move (ticks of that instrument's price grid) from this
    BOOK's receive time to the last BOOK received at or before receive time + ``horizon_ms``; rows
    whose horizon runs past the capture's last BOOK of the instrument are unlabelled (dropped). The
    rows of all instruments are merged in receive-time order (stable: ties keep instrument order)."""
    import orjson

    from pipeline.trading.bitget.book import Applied, BitgetBooks
    from pipeline.trading.bitget.capture import RECV, read_capture
    from pipeline.trading.bitget.protocol import make_decoder

    lines = [ln for ln in read_capture(path) if ln.direction == RECV]
    prices: dict[str, list[float]] = {}
    for ln in lines:  # each instrument's price grid, from its snapshots' top 50 levels
        if '"snapshot"' in ln.text and '"books' in ln.text:
            d = orjson.loads(ln.text)
            e = d["data"][0]
            prices.setdefault(d["arg"]["instId"], []).extend(float(px) for px, _ in e["bids"][:50] + e["asks"][:50])
    ticks = {s: _grid_tick(v) for s, v in sorted(prices.items())}
    ids = {s: i + 1 for i, s in enumerate(ticks)}
    dec, books, out = make_decoder(), BitgetBooks(ids), np.zeros(1, BOOK_DTYPE)
    states = {iid: FeatureState(iid, ticks[s]) for s, iid in ids.items()}
    per: dict[int, list] = {iid: [] for iid in ids.values()}  # (recv_ns, row, mid in ticks, warm)
    for ln in lines:
        d = dec.decode(ln.text)
        iid = ids.get(d.inst_id)
        if iid is None:
            continue
        t_ns = int(round(ln.receive_time_s * 1e9))
        n = books.fill_trades(d)
        for k in range(n):
            update_from_trade(states[iid], books.trade_records[k : k + 1].tobytes(), t_ns)
        if n == 0 and books.apply(d, out) is Applied.EMITTED:
            row = np.zeros(N_FEATURES, np.float32)
            st = states[iid]
            if compute(st, out.tobytes(), row, t_ns) == 0:
                mid = 0.5 * (float(out["bid_px"][0, 0]) + float(out["ask_px"][0, 0]))
                per[iid].append((t_ns, row, mid / st.tick_size, st.books > 1))
    Xs, ds, tl, il = [], [], [], []
    h_ns = p.horizon_ms * 1_000_000
    for iid, rows in per.items():
        if not rows:
            continue
        ts = np.array([r[0] for r in rows], np.int64)
        for t, row, mid, warm in rows:
            if not warm or ts[-1] < t + h_ns:
                continue
            j = int(np.searchsorted(ts, t + h_ns, side="right")) - 1
            Xs.append(row)
            ds.append(rows[j][2] - mid)
            tl.append(t)
            il.append(iid)
    order = np.argsort(np.array(tl, np.int64), kind="stable")
    X = np.array(Xs, np.float32).reshape(-1, N_FEATURES)[order]
    d = np.array(ds, np.float64)[order]
    info = {"instruments": len(ids), "books": int(sum(len(r) for r in per.values())), "labelled_rows": int(len(d)),
            "labelled_non_hold": int((np.abs(d) > p.dead_band_ticks).sum()), "ticks": ticks}
    return CaptureData(X, label(d, X[:, F_VPIN], p), np.array(tl, np.int64)[order], np.array(il, np.int64)[order], info)


CAPTURE_TRAIN_SHARE = 0.7  # rows before the 70 % quantile of a capture's receive times train, the rest is held out


def split_capture(t_ns: np.ndarray, horizon_ms: int) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(training row indices, held-out row indices, cut time in ns) of a capture's rows, whatever
    their order and instrument: one cut time for all instruments, the receive time of the row at the
    ``CAPTURE_TRAIN_SHARE`` share in time order; rows received before it train, rows in the next
    ``horizon_ms`` are dropped (the embargo: no training label reaches a held-out row's time), rows
    received at or after cut + ``horizon_ms`` are held out. No rows: both empty, cut None."""
    t = np.asarray(t_ns, np.int64)
    if not len(t):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    k = min(int(len(t) * CAPTURE_TRAIN_SHARE), len(t) - 1)
    cut = int(np.sort(t, kind="stable")[k])
    return np.flatnonzero(t < cut), np.flatnonzero(t >= cut + horizon_ms * 1_000_000), cut


def eval_report(m: Model, ds: Dataset, p: TrainParams, capture: Path | None = CAPTURE,
                capture_data: CaptureData | None = None, config: Path | None = DEFAULT_CONFIG) -> dict:
    """Held-out evaluation, and the capture's when ``capture`` exists: on the held-out part of the
    capture (``split_capture``) when its first part was used in training (``capture_data`` =
    ``capture_dataset``'s result), else on all of it. The model row uses the thresholds of the fast
    process in ``config`` (``deployed_thresholds``)."""
    itr, ite = synthetic_split(ds, p)
    th = deployed_thresholds(config)
    slot, eps = fit_imbalance(ds.X[itr], ds.y[itr])
    syn = {"train_rows": int(len(itr)), "embargo_rows": int(len(ds.y) - len(itr) - len(ite)),
           "held_out_rows": int(len(ite)), "embargo_steps": int(ds.horizon_steps), "horizon_ms": p.horizon_ms,
           "last_train_step": int(ds.step[itr[-1]]) if len(itr) else None,
           "first_held_out_step": int(ds.step[ite[0]]) if len(ite) else None}
    rep = {"imbalance_baseline": {"slot": "F_IMBALANCE_1" if slot == F_IMBALANCE_1 else "F_IMBALANCE_5", "eps": eps},
           "thresholds": th,
           "synthetic_holdout": {**syn, **evaluate(m, ds.X[ite], ds.y[ite], slot, eps, th)}, "capture": None}
    if capture is not None and capture.exists():
        trained_on = capture_data is not None
        cd = capture_data if trained_on else capture_dataset(capture, p)
        info, Xc, yc = cd.info, cd.X, cd.y
        if trained_on:
            ctr, cho, cut = split_capture(cd.t_ns, p.horizon_ms)
            Xc, yc = cd.X[cho], cd.y[cho]
            info = {**info, "cut_ns": cut, "embargo_ms": p.horizon_ms, "train_rows": int(len(ctr)),
                    "embargo_rows": int(len(cd.y) - len(ctr) - len(cho)), "held_out_rows": int(len(cho)),
                    "held_out_non_hold": int((yc != Label.HOLD).sum()),
                    "instruments_in_train": int(len(np.unique(cd.inst[ctr]))),
                    "instruments_in_held_out": int(len(np.unique(cd.inst[cho])))}
        cap = {"path": str(capture), **info, "trained_on_first_part": trained_on,
               "too_few_rows": len(yc) < MIN_CAPTURE_ROWS or int((yc != Label.HOLD).sum()) < MIN_CAPTURE_ROWS // 4}
        if len(yc):
            cap.update(evaluate(m, Xc, yc, slot, eps, th))
        rep["capture"] = cap
    return rep


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def eval_markdown(rep: dict) -> str:
    b, th = rep["imbalance_baseline"], rep["thresholds"]
    md = ["# Fast classifier evaluation", "",
          f"Model row: the labels procs/fast.py emits, its threshold rule with buy {th['buy']:g}, sell {th['sell']:g}, "
          f"emergency {th['emergency']:g} ({th['source']}): EMERGENCY when P(EMERGENCY) >= emergency, else LEAN_BUY "
          "when P(LEAN_BUY) >= buy and >= P(LEAN_SELL), LEAN_SELL when P(LEAN_SELL) >= sell and > P(LEAN_BUY), "
          "else HOLD. The argmax row (the most probable label) is not what the pipeline emits.",
          "",
          f"Imbalance baseline: sign of {b['slot']} with eps = {b['eps']:.4f} (chosen on the training split). "
          "It never says EMERGENCY.",
          "",
          "macro-F1 (4): mean F1 over the four labels (those present in the truth or the predictions). "
          "macro-F1 (3): mean F1 over HOLD, LEAN_BUY, LEAN_SELL on the rows whose true label is not EMERGENCY "
          "(those rows are left out); there a predicted EMERGENCY counts as a miss for the row's true label.",
          ""]
    for key, title in (("synthetic_holdout", "Synthetic held-out split"), ("capture", "Real Bitget capture")):
        sec = rep.get(key)
        md += [f"## {title}", ""]
        if sec is None:
            md += ["Not evaluated (capture absent).", ""]
            continue
        if key == "synthetic_holdout":
            md += [f"Chronological split with an embargo of one label horizon: the first {sec['train_rows']} rows "
                   f"(steps up to {sec['last_train_step']}) train; the next {sec['embargo_steps']} steps "
                   f"({sec['horizon_ms']} ms, the label's look-ahead; {sec['embargo_rows']} rows) are dropped, so no "
                   f"training label reaches a held-out row; the figures below are on the {sec['held_out_rows']} rows "
                   f"from step {sec['first_held_out_step']} on.", ""]
        if key == "capture":
            md.append(f"{sec['instruments']} instruments, {sec['books']} books, {sec['labelled_rows']} labelled rows, "
                      f"{sec['labelled_non_hold']} of them outside the dead band (not HOLD).")
            if sec.get("trained_on_first_part"):
                md.append(f"One time cut for all instruments (receive time {sec['cut_ns']} ns, the "
                          f"{CAPTURE_TRAIN_SHARE:.0%} point of the rows in time): the {sec['train_rows']} rows "
                          f"received before it ({sec['instruments_in_train']} instruments) were part of the "
                          "training data; the "
                          f"{sec['embargo_rows']} rows in the next {sec['embargo_ms']} ms (embargo, one label horizon) "
                          f"are dropped; the figures below are on the {sec['held_out_rows']} rows after "
                          f"({sec['instruments_in_held_out']} instruments, {sec['held_out_non_hold']} not HOLD).")
            if sec["too_few_rows"]:
                md.append(f"**Too few labelled rows (< {MIN_CAPTURE_ROWS}, or < {MIN_CAPTURE_ROWS // 4} not HOLD) for these "
                          "figures to mean much: macro-F1 here rests on a handful of moves.**")
            md.append("")
            if "rows" not in sec:
                continue
        md += ["| predictor | macro-F1 (4) | macro-F1 (3) | accuracy | "
               + " | ".join(f"{c.name} P / R" for c in Label) + " |",
               "|---|---|---|---|" + "---|" * len(Label)]
        for name, r in sec["rows"].items():
            pc = r["per_class"]
            md.append(f"| {ROW_TITLES.get(name, name)} | {r['macro_f1']:.3f} | {r['macro_f1_3class']:.3f} | "
                      f"{r['accuracy']:.3f} | "
                      + " | ".join(f"{_fmt(pc[c.name]['precision'])} / {_fmt(pc[c.name]['recall'])}" for c in Label)
                      + " |")
        yn = {True: "yes", False: "NO"}
        md += ["", "The model as deployed, on macro-F1 (4 / 3 classes): beats always-HOLD "
               f"{yn[sec['model_beats_always_hold']]} / {yn[sec['model_beats_always_hold_3class']]}; beats the "
               f"imbalance sign {yn[sec['model_beats_imbalance_sign']]} / "
               f"{yn[sec['model_beats_imbalance_sign_3class']]}; "
               f"beats both {yn[sec['model_beats_both']]} / {yn[sec['model_beats_both_3class']]}.", ""]
    return "\n".join(md)


def build(out: Path, p: TrainParams = TrainParams(), capture: Path | None = CAPTURE) -> Model:
    """Generate, train and write ``out`` (atomically: a temporary file, then a rename), and the
    evaluation report ``<stem>.eval.json`` / ``<stem>.eval.md`` beside it (also ``m.eval``)."""
    ds = generate(p)
    cap_data = capture_dataset(capture, p) if capture is not None and capture.exists() else None
    extra = None
    if cap_data is not None:
        ctr = split_capture(cap_data.t_ns, p.horizon_ms)[0]
        extra = (cap_data.X[ctr], cap_data.y[ctr])
    m = train(ds, p, extra)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(to_onnx(m, p).SerializeToString())
    tmp.replace(out)
    m.eval = eval_report(m, ds, p, capture, cap_data)
    out.with_suffix(".eval.json").write_text(json.dumps(m.eval, indent=2))
    out.with_suffix(".eval.md").write_text(eval_markdown(m.eval))
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.trading.model", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="models/generated/fast.onnx")
    ap.add_argument("--steps", type=int, default=TrainParams.steps)
    ap.add_argument("--seed", type=int, default=TrainParams.seed)
    ap.add_argument("--horizon-ms", type=int, default=TrainParams.horizon_ms)
    ap.add_argument("--dead-band-ticks", type=float, default=TrainParams.dead_band_ticks)
    args = ap.parse_args(argv)
    p = TrainParams(seed=args.seed, steps=args.steps, horizon_ms=args.horizon_ms, dead_band_ticks=args.dead_band_ticks)
    m = build(Path(args.out), p)
    f = {k: {n: round(r["macro_f1"], 4) for n, r in v["rows"].items()}
         for k, v in m.eval.items() if isinstance(v, dict) and "rows" in v}
    f3 = {k: {n: round(r["macro_f1_3class"], 4) for n, r in v["rows"].items()}
          for k, v in m.eval.items() if isinstance(v, dict) and "rows" in v}
    print(json.dumps({"out": args.out, **m.report, "macro_f1": f, "macro_f1_3class": f3}), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
