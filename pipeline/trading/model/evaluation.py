"""The fast model's evaluation (step 5 of ``pipeline.trading.model``): the labels the fast stage
emits and the argmax, against always-HOLD and the book-imbalance sign, on the synthetic held-out
split and on the capture; the report as JSON and markdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.trading.features import F_IMBALANCE_1, F_IMBALANCE_5
from pipeline.trading.messages import Label
from pipeline.trading.model.capture import CAPTURE, CAPTURE_TRAIN_SHARE, REPO, CaptureData, capture_dataset, split_capture
from pipeline.trading.model.data import Dataset, TrainParams, synthetic_split
from pipeline.trading.model.mlp import Model, forward

MIN_CAPTURE_ROWS = 200  # fewer labelled rows than this: the capture's figures are flagged as too few

DEFAULT_CONFIG = REPO / "configs" / "default.toml"
FAST_MODULE = "procs.fast:FastAgent"
THREE_CLASSES = (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL)
ROW_TITLES = {"model": "model (deployed thresholds)", "model_argmax": "argmax (not deployed)",
              "always_hold": "always_hold", "imbalance_sign": "imbalance_sign"}


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
