"""The fast path's default model, trained from market data and exported to ONNX with its model card.

Pure apart from reading captures and writing the model, its card and its report. Steps (``build``):

1. Data (``data``): the paper venue's synthetic market calibrated to real captures (``TrainParams.market``,
   ``CALIBRATED`` by default), one market per pace of ``TrainParams.paces_ms`` (around the calibrated
   book pace: the features that count or decay per unit of time take other values at another update
   rate, and the model must have seen them), and the instruments of any capture given (``capture``);
   every row from ``pipeline.trading.features`` as the feature stage computes it.
2. Labels on a horizon of MARKET time (``horizon_ms``), priced in costs (``data``'s docstring): LEAN
   only beyond the round trip (the spread and the fee twice), EMERGENCY when an order at the touch
   would be filled and then lose after its fee (adverse selection), with its side.
3. A time split per clock: train, embargo, validation, embargo, held-out (``data.time_split``).
4. A 1-hidden-layer MLP (``mlp``) trained with numpy on the training rows and their mirror images,
   the synthetic paces weighted equally, and its side head on the EMERGENCY rows; exported to ONNX
   (input ``features`` float32 [N, 128]; outputs ``probs`` float32 [N, 4], index =
   ``pipeline.trading.messages.Label``, and ``at_risk`` float32 [N, 2], bid / ask at risk).
5. The input-range guard's bounds from the training rows (``decide.bounds_from_rows``).
6. Thresholds chosen on the validation rows (``thresholds``): EMERGENCY and its side for the net P&L of
   the fills its pulls avoid, LEAN for its net edge, within a trader's rate bounds.
7. Held-out evaluation as deployed (thresholds, side, guard) against always-HOLD, the imbalance sign
   and a random labeler with the model's label rates; rates and the guard's share at the pipeline's
   paces on fresh markets (``evaluation``).
8. Written: ``<stem>.onnx`` (the card in its metadata), ``<stem>.card.json`` (``card``, ``report``)
   and ``<stem>.eval.md``, each atomically; then the offline evaluation's P&L and markouts of the
   written model on fresh seeds of the market (``evaluation.market_evaluation``, through
   ``pipeline.trading.evaluation``) join the card and the three are written again.

``python -m pipeline.trading.model --out models/generated/fast.onnx`` (``make model``); ``--capture
FILE`` (repeatable) adds a recorded Bitget capture; ``--steps 0`` trains on captures alone;
``--market default`` trains on the uncalibrated synthetic market.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from pipeline.trading.messages import SIGNAL_FLAG_OUT_OF_RANGE
from pipeline.trading.model.capture import capture_series
from pipeline.trading.model.card import card_path, write_card
from pipeline.trading.model.data import (HELD_OUT, IC_HORIZONS_MS, MARKETS, TRAIN, VALIDATION, TrainParams,
                                         build_dataset, mirror_rows, synthetic_all)
from pipeline.trading.model.decide import InputBounds, bounds_from_rows
from pipeline.trading.model.evaluation import (deployed_thresholds, evaluate, fit_imbalance, market_evaluation,
                                               model_decisions, pace_check)
from pipeline.trading.model.mlp import Model, forward, forward_side, to_onnx, train
from pipeline.trading.model.report import card_markdown, make_card
from pipeline.trading.model.thresholds import choose_thresholds, validation_rows

__all__ = ["Model", "TrainParams", "build", "main", "to_onnx"]


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _held_out(m: Model, ds, th: dict, imb: tuple[int, float], p: TrainParams,
              bounds: InputBounds) -> tuple[dict, dict]:
    """(group -> held-out evaluation or None, series name -> the deployed model's held-out rates, the
    input-range guard's among them)."""
    groups: dict[str, list[int]] = {}
    for k, name in enumerate(ds.names):
        groups.setdefault("synthetic" if name.startswith("synthetic@") else name.rsplit(":", 1)[0], []).append(k)
    held, by_series = {}, {}
    for g, ks in groups.items():
        rows = np.flatnonzero((ds.part == HELD_OUT) & np.isin(ds.series, ks))
        held[g] = ({"rows": int(len(rows)), "ic_horizons_ms": list(IC_HORIZONS_MS),
                    "predictors": evaluate(m, ds, rows, th, imb, p.fee_bps, bounds)} if len(rows) else None)
    ho = ds.rows(HELD_OUT)
    lab, flags = model_decisions(m, ds.X[ho], th, bounds)
    for k, name in enumerate(ds.names):
        mine = ds.series[ho] == k
        if mine.any():
            shares = np.bincount(lab[mine], minlength=4)[1:] / mine.sum()
            by_series[name] = {c: float(v) for c, v in zip(("LEAN_BUY", "LEAN_SELL", "EMERGENCY"), shares)}
            by_series[name]["OUT_OF_RANGE"] = float((flags[mine] & SIGNAL_FLAG_OUT_OF_RANGE > 0).mean())
    return held, by_series


def build(out: Path, p: TrainParams = TrainParams(), captures: tuple[Path, ...] = (),
          paces: dict | None = None) -> Model:
    """Steps 1 to 8 of the module docstring; the model, its card in ``m.card``. ``paces``: the pace
    check's markets (``evaluation.pace_check``; default ``evaluation.pace_check_paces(p)``; none without
    synthetic data, and no offline evaluation either).

    Raises:
        ValueError: no data (``p.steps`` 0 and no capture), too little to train on, or no
            validation rows. CaptureError / OSError: a capture that cannot be read.
    """
    series = synthetic_all(p)
    infos = []
    for path in captures:
        s, info = capture_series(Path(path))
        series += s
        infos.append({**info, "name": Path(path).name})
    if not series:
        raise ValueError("no training data: --steps 0 and no --capture")
    ds = build_dataset(series, p)
    m = train(ds, p)
    tr = ds.rows(TRAIN)
    Xb = np.concatenate([ds.X[tr], mirror_rows(ds.X[tr], ds.y[tr])[0]]) if p.mirror else ds.X[tr]
    bounds = bounds_from_rows(Xb)
    va = ds.rows(VALIDATION)
    th = choose_thresholds(forward(m, ds.X[va]).astype(np.float32), validation_rows(ds, va), ds.series[va], p,
                           at_risk=forward_side(m, ds.X[va]).astype(np.float32))
    slot, eps = fit_imbalance(ds.X[tr], ds.y[tr])
    held, by_series = _held_out(m, ds, th, (slot, eps), p, bounds)
    pace = pace_check(m, th, p, paces, bounds) if p.steps else {}
    from pipeline.trading import features as f

    imb = {"slot": "F_IMBALANCE_1" if slot == f.F_IMBALANCE_1 else "F_IMBALANCE_5", "eps": eps}
    m.card = make_card(p=p, ds=ds, m_report=m.report, th=th, held=held, by_series=by_series, pace=pace, imb=imb,
                       captures=infos, deployed=deployed_thresholds(), bounds=bounds)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_model(out, m, p)
    if p.steps and p.market_eval_seeds:  # the evaluation loads the written model as the fast stage would
        m.card["evaluation"]["market"] = market_evaluation(out, th, p)
        _write_model(out, m, p)
    return m


def _write_model(out: Path, m: Model, p: TrainParams) -> None:
    """The ONNX file (its card inside), the card beside it and ``<stem>.eval.md``."""
    _write_atomic(out, to_onnx(m, p, m.card).SerializeToString())
    write_card(out, m.card)
    _write_atomic(out.with_suffix(".eval.md"), card_markdown(m.card).encode())


def _params(args) -> TrainParams:
    return dataclasses.replace(TrainParams(), seed=args.seed, steps=args.steps, horizon_ms=args.horizon_ms,
                               fee_bps=args.fee_bps, emergency_loss_ticks=args.emergency_loss_ticks,
                               market=args.market)


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); prints a JSON summary. Exit 0, or 2 with a message on
    bad input (a capture that cannot be read, too little data)."""
    from pipeline.trading.bitget.errors import CaptureError

    d = TrainParams()
    ap = argparse.ArgumentParser(prog="python -m pipeline.trading.model", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="models/generated/fast.onnx")
    ap.add_argument("--steps", type=int, default=d.steps, help="synthetic steps, all paces together (0: none)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--horizon-ms", type=int, default=d.horizon_ms)
    ap.add_argument("--market", choices=MARKETS, default=d.market, help="the synthetic market's parameters")
    ap.add_argument("--fee-bps", type=float, default=d.fee_bps,
                    help="fee per side (bps): in the labels' round-trip cost and the LEAN objective")
    ap.add_argument("--emergency-loss-ticks", type=float, default=d.emergency_loss_ticks,
                    help="an EMERGENCY: a filled order at the touch loses more than this by the horizon's end")
    ap.add_argument("--capture", action="append", default=[], type=Path, metavar="FILE",
                    help="a Bitget capture (cryptofeed line format) to train and evaluate on too; repeatable")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        m = build(Path(args.out), _params(args), tuple(args.capture))
    except (ValueError, CaptureError, OSError) as exc:
        print(f"python -m pipeline.trading.model: {exc}", file=sys.stderr)
        return 2
    c = m.card
    th = c["thresholds"]
    secs = round(time.perf_counter() - t0, 1)
    print(json.dumps({"out": args.out, "card": str(card_path(args.out)), "train_seconds": secs,
                      "thresholds": {k: th[k] for k in ("buy", "sell", "emergency", "side")},
                      "label_freq_train": c["labelling"]["class_freq_train"],
                      "deployed_config_matches_card": c["deployed_config"]["matches_card"],
                      "held_out_rates": c["evaluation"]["non_hold_rate_held_out"],
                      "pace_check": {k: v["rate"] for k, v in c["evaluation"]["pace_check"].items()}}), file=sys.stdout)
    return 0
