"""The fast model's evaluation, as deployed: the labels the fast stage emits under the chosen
thresholds (``thresholds.deployed_labels``), scored on held-out rows against always-HOLD and the
book-imbalance sign; the signal's rates, trading edge and information coefficient; and its rates on
fresh synthetic markets at the paces the pipeline runs (``pace_check``). Pure apart from reading the
config (``deployed_thresholds``).

Scores (``scores``): macro-F1 over the four labels and over HOLD / LEAN_BUY / LEAN_SELL (rows whose
true label is EMERGENCY left out), accuracy, per-class precision / recall. Trading figures
(``trading``): the share of rows per label, the net edge of acting on the LEAN signals
(``thresholds.signal_edge_bps``: per update and per signal, with the share of signals that paid, and
per signal again as if it paid Bitget's spot fee, ``REFERENCE_FEE_BPS``), and
the information coefficient: per series, the Spearman rank correlation of P(LEAN_BUY) -
P(LEAN_SELL) with the mid's move over each of ``IC_HORIZONS_MS``, then the mean over series.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.trading.features import F_IMBALANCE_1, F_IMBALANCE_5, F_SPREAD_TICKS
from pipeline.trading.messages import Label
from pipeline.trading.model.capture import REPO
from pipeline.trading.model.data import IC_HORIZONS_MS, Dataset, TrainParams, synthetic_series
from pipeline.trading.model.mlp import Model, forward
from pipeline.trading.model.thresholds import deployed_labels, signal_edge_bps

__all__ = ["DEFAULT_CONFIG", "PACE_CHECK", "deployed_labels", "deployed_thresholds", "evaluate", "fit_imbalance",
           "imbalance_predict", "macro_f1_3class", "pace_check", "scores", "spearman", "trading"]

DEFAULT_CONFIG = REPO / "configs" / "default.toml"
FAST_MODULE = "procs.fast:FastAgent"
THREE_CLASSES = (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL)
#: the paces the pipeline runs: the paper venue's default step (``make up``) and the pipeline bench's
#: 1,000 updates a second on one instrument; each checked for this much market time after the warm-up
PACE_CHECK = {"paper venue default (20 ms)": (20, 9_000), "pipeline bench, 1,000 updates/s (1 ms)": (1, 15_000)}
PACE_CHECK_SEED = 1  # the paper venue's seed in configs/default.toml (BTCUSDT's market, see pace_check)
#: Bitget's standard spot fee, maker and taker alike (BITGET_SPOT_STANDARD in pipeline/venue/fees.py, with its
#: source): each signal's edge is also given as if it paid this instead of ``fee_bps``
REFERENCE_FEE_BPS = 10.0


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
    """The thresholds the fast stage applies under ``config``: the params of its ``procs.fast:FastAgent``
    process (validated by the stage's own ``parse_params``), or the ``FastParams`` defaults when
    ``config`` is None, missing, or has no such process.

    Raises:
        ConfigError: the process's params are not valid ``FastParams``.
    """
    import tomllib

    from procs.fast import FastParams, parse_params

    fp, source = FastParams(), "FastParams defaults"
    if config is not None and Path(config).is_file():
        for pr in tomllib.loads(Path(config).read_text()).get("processes", []):
            if pr.get("module") == FAST_MODULE:
                fp = parse_params(pr.get("name", "fast"), pr.get("params", {}))
                where = Path(config).resolve()
                where = where.relative_to(REPO) if where.is_relative_to(REPO) else where
                source = f"{where}, process {pr.get('name')!r}"
                if "thresholds" not in pr.get("params", {}):
                    source += ", which sets none: FastParams defaults"
                break
    t = fp.thresholds
    return {"buy": float(t.buy), "sell": float(t.sell), "emergency": float(t.emergency), "source": source}


def imbalance_predict(X: np.ndarray, slot: int, eps: float) -> np.ndarray:
    """The imbalance-sign baseline: > +eps LEAN_BUY, < -eps LEAN_SELL, else HOLD."""
    v = X[:, slot]
    pred = np.full(len(X), int(Label.HOLD), np.int64)
    pred[v > eps] = Label.LEAN_BUY
    pred[v < -eps] = Label.LEAN_SELL
    return pred


def fit_imbalance(X: np.ndarray, y: np.ndarray) -> tuple[int, float]:
    """The slot (``F_IMBALANCE_1`` / ``F_IMBALANCE_5``) and eps with the best macro-F1 on ``X`` / ``y``."""
    best = (-1.0, F_IMBALANCE_1, 0.0)
    for slot in (F_IMBALANCE_1, F_IMBALANCE_5):
        grid = np.unique(np.concatenate([[0.0], np.quantile(np.abs(X[:, slot]), np.linspace(0.02, 0.98, 49))]))
        for eps in grid:
            f = scores(y, imbalance_predict(X, slot, float(eps)))["macro_f1"]
            if f > best[0]:
                best = (f, slot, float(eps))
    return best[1], best[2]


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (average ranks for ties) of the pairs where both are finite;
    None with fewer than 3 pairs or a constant side."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return None
    ra, rb = _ranks(a[ok]), _ranks(b[ok])
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return None
    return float(((ra - ra.mean()) * (rb - rb.mean())).mean() / (sa * sb))


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    sv = v[order]
    first = np.concatenate([[True], sv[1:] != sv[:-1]])
    grp = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    counts = np.diff(np.concatenate([starts, [len(v)]]))
    avg = starts + (counts - 1) / 2.0
    out = np.empty(len(v))
    out[order] = avg[grp]
    return out


def trading(labels: np.ndarray, probs: np.ndarray, ds: Dataset, rows: np.ndarray, fee_bps: float) -> dict:
    """The trading figures (module docstring) of ``labels`` (one per row of ``rows``) and their
    probabilities ``probs`` (None for a rule without any: no IC)."""
    lab = np.asarray(labels)
    n = max(1, len(lab))
    edge = signal_edge_bps(lab, ds.move_ticks[rows], ds.X[rows, F_SPREAD_TICKS], ds.tick_bps[rows], fee_bps)
    lean = (lab == Label.LEAN_BUY) | (lab == Label.LEAN_SELL)
    out = {"rate": {c.name: float((lab == c).sum() / n) for c in Label},
           "net_edge_bps_per_update": float(edge.sum() / n),
           "net_edge_bps_per_signal": float(edge[lean].mean()) if lean.any() else None,
           "net_edge_bps_per_signal_at_reference_fee": (float(edge[lean].mean()) - (REFERENCE_FEE_BPS - fee_bps)
                                                        if lean.any() else None),
           "signals_that_paid": float((edge[lean] > 0).mean()) if lean.any() else None, "ic": None}
    if probs is not None and len(lab):
        sig = probs[:, Label.LEAN_BUY].astype(np.float64) - probs[:, Label.LEAN_SELL]
        ser = ds.series[rows]
        ic = {}
        for j, hz in enumerate(IC_HORIZONS_MS):
            per = [spearman(sig[ser == k], ds.fwd_ticks[rows[ser == k], j]) for k in np.unique(ser)]
            per = [v for v in per if v is not None]
            ic[str(hz)] = float(np.mean(per)) if per else None
        out["ic"] = ic
    return out


def evaluate(m: Model, ds: Dataset, rows: np.ndarray, th: dict, imb: tuple[int, float], fee_bps: float) -> dict:
    """``rows`` of ``ds`` scored four ways: ``model`` (the deployed labels under ``th``), ``model_argmax``
    (not deployed; for comparison), ``always_hold``, ``imbalance_sign`` (slot and eps ``imb``); each
    with ``scores`` and ``trading``."""
    X, y = ds.X[rows], ds.y[rows]
    probs = forward(m, X).astype(np.float32)  # the stage's probabilities are float32
    preds = {"model": (deployed_labels(probs, th["buy"], th["sell"], th["emergency"]), probs),
             "model_argmax": (probs.argmax(axis=1), probs),
             "always_hold": (np.full(len(y), int(Label.HOLD), np.int64), None),
             "imbalance_sign": (imbalance_predict(X, *imb), None)}
    return {name: {**scores(y, lab), **trading(lab, pr, ds, rows, fee_bps)} for name, (lab, pr) in preds.items()}


def pace_check(m: Model, th: dict, p: TrainParams, paces: dict | None = None) -> dict:
    """The model's label rates under ``th`` on fresh synthetic markets (never trained on: the market
    the paper venue runs for BTCUSDT with seed ``PACE_CHECK_SEED``, tick 0.1, lot 0.0001), one per
    entry of ``paces`` (default ``PACE_CHECK``: name -> (pace in ms, steps after the warm-up))."""
    from pipeline.venue.sources import InstrumentSpec, SyntheticSource

    seed = SyntheticSource([InstrumentSpec("BTCUSDT", 0.1, 0.0001)], seed=PACE_CHECK_SEED).market_seed("BTCUSDT")
    out = {}
    for name, (pace, steps) in (PACE_CHECK if paces is None else paces).items():
        s = synthetic_series(p, pace, steps, seed=seed)
        lab = deployed_labels(forward(m, s.X).astype(np.float32), th["buy"], th["sell"], th["emergency"])
        n = max(1, len(lab))
        out[name] = {"pace_ms": pace, "updates": int(len(lab)), "market_s": steps * pace / 1000,
                     "rate": {c.name: float((lab == c).sum() / n) for c in Label}}
    return out
