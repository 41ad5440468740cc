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
from pipeline.trading.messages import (SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE,
                                       Label)
from pipeline.trading.model.capture import REPO
from pipeline.trading.model.data import IC_HORIZONS_MS, Dataset, TrainParams, market_params, synthetic_series
from pipeline.trading.model.decide import InputBounds, deployed_decisions
from pipeline.trading.model.mlp import Model, forward, forward_side
from pipeline.trading.model.thresholds import NEVER, deployed_labels, pull_value_bps, signal_edge_bps

__all__ = ["DEFAULT_CONFIG", "PACE_CHECK", "deployed_labels", "deployed_thresholds", "evaluate", "fit_imbalance",
           "imbalance_predict", "macro_f1_3class", "market_evaluation", "model_decisions", "pace_check", "scores",
           "spearman", "trading"]

DEFAULT_CONFIG = REPO / "configs" / "default.toml"
FAST_MODULE = "procs.fast:FastAgent"
THREE_CLASSES = (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL)
#: the paces the pipeline runs: the paper venue's step (``make up``: the market's ``step_ms``) and the
#: pipeline bench's 1,000 updates a second on one instrument; each checked for this many steps after the
#: warm-up
PACE_CHECK = {"paper venue (the market's own step)": (0, 4_000),  # 0: the market's step_ms
              "pipeline bench, 1,000 updates/s (1 ms)": (1, 3_000)}
PACE_CHECK_SEED = 1  # the paper venue's seed in configs/default.toml (its markets, see pace_check)
PACE_CHECK_SYMBOLS = ("BTCUSDT", "ETHUSDT")  # TrainParams.instruments' names in configs/default.toml
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
    return {"buy": float(t.buy), "sell": float(t.sell), "emergency": float(t.emergency), "side": float(t.side),
            "source": source}


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


def model_decisions(m: Model, X: np.ndarray, th: dict, bounds: InputBounds | None) -> tuple[np.ndarray, np.ndarray]:
    """(labels, flags) the fast stage writes for rows ``X`` under thresholds ``th`` (``buy``, ``sell``,
    ``emergency``, ``side``) and the input-range guard ``bounds`` (``decide.deployed_decisions``)."""
    probs = forward(m, X).astype(np.float32)
    side = forward_side(m, X)
    return deployed_decisions(probs, None if side is None else side.astype(np.float32), X, bounds, th["buy"],
                              th["sell"], th["emergency"], th.get("side", NEVER))


def _named(flags: np.ndarray | None, n: int) -> np.ndarray:
    """0 / 1 (bid) / 2 (ask) per row from SIGNAL flags (None: no side named)."""
    if flags is None:
        return np.zeros(n, np.int64)
    f = np.asarray(flags)
    return np.where(f & SIGNAL_FLAG_AT_RISK_BID, 1, np.where(f & SIGNAL_FLAG_AT_RISK_ASK, 2, 0)).astype(np.int64)


def trading(labels: np.ndarray, probs: np.ndarray, ds: Dataset, rows: np.ndarray, fee_bps: float,
            flags: np.ndarray | None = None) -> dict:
    """The trading figures (module docstring) of ``labels`` (one per row of ``rows``), their
    probabilities ``probs`` (None for a rule without any: no IC) and SIGNAL ``flags`` (the EMERGENCY's
    side; None: no side named)."""
    lab = np.asarray(labels)
    n = max(1, len(lab))
    edge = signal_edge_bps(lab, ds.move_ticks[rows], ds.X[rows, F_SPREAD_TICKS], ds.tick_bps[rows], fee_bps)
    lean = (lab == Label.LEAN_BUY) | (lab == Label.LEAN_SELL)
    em = lab == Label.EMERGENCY
    pull = pull_value_bps(em, _named(flags, len(lab)), ds.filled[rows], ds.markout_ticks[rows], ds.tick_bps[rows],
                          fee_bps)
    out = {"rate": {c.name: float((lab == c).sum() / n) for c in Label},
           "pull_value_bps_per_update": float(pull.sum() / n),
           "out_of_range_rate": float(((np.asarray(flags) & SIGNAL_FLAG_OUT_OF_RANGE) > 0).mean())
           if flags is not None and len(lab) else 0.0,
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


def random_like(labels: np.ndarray, seed: int) -> np.ndarray:
    """A random labeler with the label frequencies of ``labels``: the same labels, shuffled (seeded)."""
    return np.random.default_rng(seed).permutation(np.asarray(labels, np.int64))


def evaluate(m: Model, ds: Dataset, rows: np.ndarray, th: dict, imb: tuple[int, float], fee_bps: float,
             bounds: InputBounds | None = None, seed: int = 0) -> dict:
    """``rows`` of ``ds`` scored five ways: ``model`` (the labels and flags the stage writes under
    ``th`` and the input-range guard ``bounds``), ``model_argmax`` (not deployed; for comparison),
    ``always_hold``, ``imbalance_sign`` (slot and eps ``imb``), ``random_model_rates`` (the model's
    labels shuffled: its label frequencies, no information; seeded by ``seed``); each with ``scores``
    and ``trading``."""
    X, y = ds.X[rows], ds.y[rows]
    probs = forward(m, X).astype(np.float32)  # the stage's probabilities are float32
    lab, flags = model_decisions(m, X, th, bounds)
    preds = {"model": (lab.astype(np.int64), probs, flags),
             "model_argmax": (probs.argmax(axis=1), probs, None),
             "always_hold": (np.full(len(y), int(Label.HOLD), np.int64), None, None),
             "imbalance_sign": (imbalance_predict(X, *imb), None, None),
             "random_model_rates": (random_like(lab, seed), None, None)}
    return {name: {**scores(y, lb), **trading(lb, pr, ds, rows, fee_bps, fl)} for name, (lb, pr, fl) in preds.items()}


def pace_check(m: Model, th: dict, p: TrainParams, paces: dict | None = None,
               bounds: InputBounds | None = None) -> dict:
    """The model's label rates under ``th`` and the guard ``bounds`` on fresh synthetic markets (never
    trained on: the markets the paper venue runs with seed ``PACE_CHECK_SEED`` for the instruments of
    ``p.instruments``, named ``PACE_CHECK_SYMBOLS``), one per entry of ``paces`` (default
    ``pace_check_paces(p)``: name -> (pace in ms, steps after the warm-up)) and instrument (the key
    ``"<name>, <symbol>"``, or the name alone for one instrument); with the share of updates the guard
    held (``OUT_OF_RANGE``)."""
    from pipeline.venue.sources import InstrumentSpec, SyntheticSource

    syms = [PACE_CHECK_SYMBOLS[k] if k < len(PACE_CHECK_SYMBOLS) else f"SYN{k:02d}USDT"
            for k in range(len(p.instruments))]
    specs = [InstrumentSpec(sym, tick, lot) for sym, (tick, lot) in zip(syms, p.instruments)]
    source = SyntheticSource(specs, seed=PACE_CHECK_SEED)
    out = {}
    for name, (pace, steps) in (pace_check_paces(p) if paces is None else paces).items():
        for k, spec in enumerate(specs):
            s = synthetic_series(p, pace, steps, seed=source.market_seed(spec.symbol), instrument=k)
            lab, flags = model_decisions(m, s.X, th, bounds)
            n = max(1, len(lab))
            rate = {c.name: float((lab == c).sum() / n) for c in Label}
            rate["OUT_OF_RANGE"] = float(((flags & SIGNAL_FLAG_OUT_OF_RANGE) > 0).sum() / n)
            key = name if len(specs) == 1 else f"{name}, {spec.symbol}"
            out[key] = {"pace_ms": pace, "updates": int(len(lab)), "market_s": steps * pace / 1000, "rate": rate}
    return out


def pace_check_paces(p: TrainParams) -> dict:
    """``PACE_CHECK`` with the market's own step (``market_params(p.market).step_ms``) in place of 0."""
    step = market_params(p.market).step_ms
    return {name: (pace or step, steps) for name, (pace, steps) in PACE_CHECK.items()}


#: the rows of the offline evaluation shown in the card: (variant, what it is)
MARKET_ROWS = (("quote-model", "quoting, fast path on (the model's EMERGENCYs pull quotes)"),
               ("quote-off", "quoting, fast path off (always HOLD)"),
               ("quote-imbalance", "quoting, the imbalance rule's EMERGENCYs"),
               ("quote-random", "quoting, a random labeler with the model's label rates"),
               ("model", "directional: the model's LEAN signals"), ("hold", "directional: always HOLD"),
               ("imbalance", "directional: the imbalance rule"),
               ("random", "directional: a random labeler with the model's label rates"))


def _market_row(name: str, what: str, rows: list[dict]) -> dict:
    """One variant's figures summed (P&L, fees, fills) or averaged (fill rate, 1 s markout) over seeds."""
    def mean(vals):
        vals = [v for v in vals if v is not None]
        return round(float(np.mean(vals)), 4) if vals else None

    mk = [((r.get("markouts") or {}).get(1000) or (r.get("markouts") or {}).get("1000") or {}) for r in rows]
    return {"variant": name, "what": what, "net_pnl": round(sum(float(r["net_pnl"]) for r in rows), 4),
            "fees": round(sum(float(r.get("fees", 0.0)) for r in rows), 4),
            "fills": int(sum(int(r.get("trades", 0)) for r in rows)),
            "fill_rate": mean([r.get("fill_rate") for r in rows]),
            "markout_1s_mean_bps": mean([m.get("mean_bps") for m in mk]),
            "markout_1s_count": int(sum(int(m.get("count", 0)) for m in mk)),
            "emergency_cancelled": int(sum(int(r.get("emergency_cancelled") or 0) for r in rows))}


def market_evaluation(model_path: Path, th: dict, p: TrainParams) -> dict | None:
    """The offline evaluation's P&L and markouts (``pipeline.trading.evaluation.harness.model_pnl``) of
    the model at ``model_path`` with thresholds ``th``, on fresh seeds ``p.market_eval_seeds`` of the
    training market, ``p.market_eval_seconds`` of market time each, Bitget spot's fees: one row per
    ``MARKET_ROWS`` variant, summed over the seeds; None without seeds. An evaluation that fails is
    recorded (``error``), not raised: the model and its card stand without it."""
    if not p.market_eval_seeds:
        return None
    from pipeline.trading.evaluation.harness import model_pnl  # the evaluation imports this package: lazily

    try:
        runs = [model_pnl(model_path, seed=seed, market=p.market, seconds=p.market_eval_seconds,
                          thresholds={k: th[k] for k in ("buy", "sell", "emergency", "side")})
                for seed in p.market_eval_seeds]
    except Exception as exc:  # the evaluation's own errors name the cause; the card says it
        return {"error": f"{type(exc).__name__}: {exc}"[:500], "seeds": list(p.market_eval_seeds)}
    rows = [_market_row(name, what, [r["variants"][name] for r in runs]) for name, what in MARKET_ROWS
            if all(name in r["variants"] for r in runs)]
    first = runs[0]
    return {"seeds": list(p.market_eval_seeds), "market": p.market, "seconds_each": p.market_eval_seconds,
            "maker_fee_bps": first["maker_fee_bps"], "taker_fee_bps": first["taker_fee_bps"],
            "latency_us": first["latency_us"], "rows": rows,
            "summary": (f"The offline evaluation (pipeline.trading.evaluation) on {len(runs)} fresh seed(s) of the "
                        f"{p.market} market, {p.market_eval_seconds} s of market time each, maker / taker fees "
                        f"{first['maker_fee_bps']:g} / {first['taker_fee_bps']:g} bps: net P&L, fees and fills summed "
                        "over the seeds (quote currency), fill rate and the 1 s markout of every fill averaged "
                        "(bps, signed: positive = the mid moved the fill's way).")}
