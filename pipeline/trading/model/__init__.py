"""The fast path's default model, trained from market data and exported to ONNX with its model card.

Pure apart from reading captures and writing the model, its card and its report. Steps (``build``):

1. Data (``data``): the paper venue's synthetic market (``SyntheticMarket``, seeded), one market per
   pace of ``TrainParams.paces_ms`` (1 to 50 ms of market time a step: the features that count or
   decay per unit of time take other values at another update rate, and the model must have seen
   them), and the instruments of any capture given (``capture``); every row from
   ``pipeline.trading.features`` as the feature stage computes it.
2. Labels on a horizon of MARKET time (``horizon_ms``), scaled by the market's own recent moves over
   that horizon, so a label means the same whatever the update rate (``data``'s docstring).
3. A time split per clock: train, embargo, validation, embargo, held-out (``data.time_split``).
4. A 1-hidden-layer MLP (``mlp``) trained with numpy on the training rows and their mirror images,
   the synthetic paces weighted equally; exported to ONNX (input ``features`` float32 [N, 128],
   output ``probs`` float32 [N, 4], index = ``pipeline.trading.messages.Label``).
5. Thresholds chosen on the validation rows for a trading objective within a trader's rate bounds
   (``thresholds``).
6. Held-out evaluation as deployed (the thresholds, not argmax) against always-HOLD and the
   imbalance sign, rates at the pipeline's paces on fresh markets (``evaluation``).
7. Written: ``<stem>.onnx`` (the card in its metadata), ``<stem>.card.json`` (``card``, ``report``)
   and ``<stem>.eval.md``, each atomically.

``python -m pipeline.trading.model --out models/generated/fast.onnx`` (``make model``); ``--capture
FILE`` (repeatable) adds a recorded Bitget capture; ``--steps 0`` trains on captures alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from pipeline.trading.model.capture import capture_series
from pipeline.trading.model.card import card_path, write_card
from pipeline.trading.model.data import (HELD_OUT, IC_HORIZONS_MS, TRAIN, VALIDATION, TrainParams, build_dataset,
                                         synthetic_all)
from pipeline.trading.model.evaluation import deployed_thresholds, evaluate, fit_imbalance, pace_check
from pipeline.trading.model.mlp import Model, forward, to_onnx, train
from pipeline.trading.model.report import card_markdown, make_card
from pipeline.trading.model.thresholds import choose_thresholds, deployed_labels

__all__ = ["Model", "TrainParams", "build", "main", "to_onnx"]


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _held_out(m: Model, ds, th: dict, imb: tuple[int, float], p: TrainParams) -> tuple[dict, dict]:
    """(group -> held-out evaluation or None, series name -> the deployed model's held-out rates)."""
    groups: dict[str, list[int]] = {}
    for k, name in enumerate(ds.names):
        groups.setdefault("synthetic" if name.startswith("synthetic@") else name.rsplit(":", 1)[0], []).append(k)
    held, by_series = {}, {}
    for g, ks in groups.items():
        rows = np.flatnonzero((ds.part == HELD_OUT) & np.isin(ds.series, ks))
        held[g] = ({"rows": int(len(rows)), "ic_horizons_ms": list(IC_HORIZONS_MS),
                    "predictors": evaluate(m, ds, rows, th, imb, p.fee_bps)} if len(rows) else None)
    ho = ds.rows(HELD_OUT)
    lab = deployed_labels(forward(m, ds.X[ho]).astype(np.float32), th["buy"], th["sell"], th["emergency"])
    for k, name in enumerate(ds.names):
        mine = lab[ds.series[ho] == k]
        if len(mine):
            shares = np.bincount(mine, minlength=4)[1:] / len(mine)
            by_series[name] = {c: float(v) for c, v in zip(("LEAN_BUY", "LEAN_SELL", "EMERGENCY"), shares)}
    return held, by_series


def build(out: Path, p: TrainParams = TrainParams(), captures: tuple[Path, ...] = (),
          paces: dict | None = None) -> Model:
    """Steps 1 to 7 of the module docstring; the model, its card in ``m.card``. ``paces``: the pace
    check's markets (``evaluation.pace_check``; default ``PACE_CHECK``; none without synthetic data).

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
    va = ds.rows(VALIDATION)
    th = choose_thresholds(forward(m, ds.X[va]).astype(np.float32), ds.y[va], ds.move_ticks[va], ds.X[va],
                           ds.tick_bps[va], ds.series[va], p)
    tr = ds.rows(TRAIN)
    slot, eps = fit_imbalance(ds.X[tr], ds.y[tr])
    held, by_series = _held_out(m, ds, th, (slot, eps), p)
    pace = pace_check(m, th, p, paces) if p.steps else {}
    from pipeline.trading import features as f

    imb = {"slot": "F_IMBALANCE_1" if slot == f.F_IMBALANCE_1 else "F_IMBALANCE_5", "eps": eps}
    m.card = make_card(p=p, ds=ds, m_report=m.report, th=th, held=held, by_series=by_series, pace=pace, imb=imb,
                       captures=infos, deployed=deployed_thresholds())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(out, to_onnx(m, p, m.card).SerializeToString())
    write_card(out, m.card)
    _write_atomic(out.with_suffix(".eval.md"), card_markdown(m.card).encode())
    return m


def _params(args) -> TrainParams:
    return dataclasses.replace(TrainParams(), seed=args.seed, steps=args.steps, horizon_ms=args.horizon_ms,
                               dead_band_ticks=args.dead_band_ticks, fee_bps=args.fee_bps)


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
    ap.add_argument("--dead-band-ticks", type=float, default=d.dead_band_ticks)
    ap.add_argument("--fee-bps", type=float, default=d.fee_bps, help="fee per LEAN signal in the threshold objective")
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
                      "thresholds": {k: th[k] for k in ("buy", "sell", "emergency")},
                      "deployed_config_matches_card": c["deployed_config"]["matches_card"],
                      "held_out_rates": c["evaluation"]["non_hold_rate_held_out"],
                      "pace_check": {k: v["rate"] for k, v in c["evaluation"]["pace_check"].items()}}), file=sys.stdout)
    return 0
