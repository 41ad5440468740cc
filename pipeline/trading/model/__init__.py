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

Modules: ``data`` (``TrainParams``, steps 1 to 3's rows, labels and split), ``mlp`` (the network:
training, forward pass, ONNX export), ``capture`` (the capture's rows and time split),
``evaluation`` (step 5); this package runs them in order (``build``, ``main``).

``python -m pipeline.trading.model --out models/generated/fast.onnx`` (``make model``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.trading.model.capture import CAPTURE, capture_dataset, split_capture
from pipeline.trading.model.data import TrainParams, generate
from pipeline.trading.model.evaluation import eval_markdown, eval_report
from pipeline.trading.model.mlp import Model, to_onnx, train

__all__ = ["Model", "TrainParams", "build", "main", "to_onnx"]


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
