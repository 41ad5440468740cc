"""The model card's contents (``make_card``) and its readable twin, ``<stem>.eval.md`` (``card_markdown``).

Card keys: ``card_version``, ``kind`` ("trained"), ``feature_layout_version``, ``labels``, ``io`` (the
graph's input / output), ``training_data`` (the synthetic markets and the captures, the rows of each
part, the SHA-256 of every labelled row), ``horizon_ms``, ``labelling``, ``split``, ``training``,
``thresholds`` (the chosen ones, the objective and its bounds, the validation figures),
``held_out`` (per group: each predictor's scores and trading figures), ``evaluation`` (the summary:
the deployed model's rate per label and IC on the synthetic held-out rows, its rates per series, and
``pace_check``: its rates at the paper venue's default pace and at the pipeline bench's 1 ms),
``deployed_config`` (the thresholds configs/default.toml gives the fast stage, and whether they are
the card's), ``train_params``. Deterministic: no clock, no host name.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from pipeline.trading.features import FEATURE_LAYOUT_VERSION, N_FEATURES
from pipeline.trading.messages import Label
from pipeline.trading.model.card import CARD_VERSION, LABEL_NAMES
from pipeline.trading.model.data import PART_NAMES, Dataset, TrainParams, pace_steps
from pipeline.trading.model.thresholds import EMERGENCY_GRID, LEAN_GRID, NEVER

OBJECTIVE = ("net edge of acting on each LEAN signal, per update (bps): buy at the ask (mid + half the spread) "
             "or sell at the bid, pay fee_bps, marked at the mid horizon_ms later; the mean over series")
ROW_TITLES = {"model": "model (deployed thresholds)", "model_argmax": "argmax (not deployed)",
              "always_hold": "always_hold", "imbalance_sign": "imbalance_sign"}


def dataset_sha256(ds: Dataset) -> str:
    """SHA-256 of every labelled row: features, labels, moves, times and series, in order."""
    h = hashlib.sha256()
    for a in (ds.X, ds.y, ds.move_ticks, ds.t_ns, ds.series, ds.part):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _rows_by_part(ds: Dataset, mask: np.ndarray) -> dict:
    return {name: int((mask & (ds.part == k)).sum()) for k, name in PART_NAMES.items()} | {
        "embargo": int((mask & (ds.part < 0)).sum())}


def training_data(ds: Dataset, p: TrainParams, captures: list[dict]) -> dict:
    """The card's ``training_data``: the synthetic markets (generator, seed, paces, steps) and each
    capture (path, SHA-256, what its replay counted), the rows of each part, the rows' SHA-256."""
    syn = np.array([n.startswith("synthetic@") for n in ds.names], bool)
    syn_rows = syn[ds.series] if len(ds.series) else np.zeros(0, bool)
    steps = pace_steps(p)
    out = {"sha256": dataset_sha256(ds), "rows": _rows_by_part(ds, np.ones(len(ds.y), bool)),
           "synthetic": None, "captures": []}
    if syn.any():
        out["synthetic"] = {"generator": "pipeline.venue.synthetic.SyntheticMarket (default SyntheticParams)",
                            "seed": p.seed, "paces_ms": list(p.paces_ms),
                            "steps_by_pace": {f"{pace}ms": n for pace, n in zip(p.paces_ms, steps)},
                            "warmup_ms": p.warmup_ms, "tick_size": p.tick_size, "lot_size": p.lot_size,
                            "rows": _rows_by_part(ds, syn_rows)}
    for info in captures:
        mine = np.array([n.startswith(f"capture:{info['name']}:") for n in ds.names], bool)
        out["captures"].append({**info, "labelled_rows": _rows_by_part(ds, mine[ds.series])})
    return out


def thresholds_entry(th: dict, p: TrainParams, names: list[str]) -> dict:
    """The card's ``thresholds``: the three numbers, then how and on what they were chosen."""
    return {"buy": th["buy"], "sell": th["sell"], "emergency": th["emergency"], "chosen_on": "validation",
            "objective": {"what": OBJECTIVE, "fee_bps": p.fee_bps,
                          "value_on_validation": th["objective_bps_per_update"]},
            "bounds": {"lean_rate_max_per_series": p.lean_rate_max, "lean_rate_min_pooled": p.lean_rate_min,
                       "emergency_rate_max_per_series": p.emergency_rate_max},
            "grids": {"lean": [LEAN_GRID[0], LEAN_GRID[-1], 0.01],
                      "emergency": [EMERGENCY_GRID[0], EMERGENCY_GRID[-1], 0.01],
                      "never": f"a threshold of {NEVER}: no probability reaches it"},
            "lean_bounds_met": th["lean_bounds_met"], "lean_rate_on_validation": th["lean_rate"],
            "lean_rate_by_series": {names[k]: r for k, r in th["lean_rate_by_series"].items()},
            "emergency_rate_by_series": {names[k]: r for k, r in th["emergency_rate_by_series"].items()},
            "emergency_on_validation": th["emergency_choice"]}


def _summary(held: dict | None, by_series: dict, pace: dict) -> dict:
    model = held["predictors"]["model"] if held else None
    rates = {k: v for k, v in model["rate"].items() if k != "HOLD"} if model else None
    return {"non_hold_rate_held_out": rates,
            "ic_held_out": model["ic"] if model else None,
            "net_edge_bps_per_update_held_out": model["net_edge_bps_per_update"] if model else None,
            "rate_by_series_held_out": by_series, "pace_check": pace}


def make_card(*, p: TrainParams, ds: Dataset, m_report: dict, th: dict, held: dict, by_series: dict, pace: dict,
              imb: dict, captures: list[dict], deployed: dict) -> dict:
    """The whole card (module docstring) from the build's pieces: ``held`` (group -> evaluation or
    None), ``by_series`` (series name -> the model's held-out rates), ``pace`` (``pace_check``),
    ``imb`` (the imbalance baseline's slot and eps), ``deployed`` (``deployed_thresholds()``)."""
    same = all(abs(deployed[k] - th[k]) < 1e-9 for k in ("buy", "sell", "emergency"))
    return {
        "card_version": CARD_VERSION, "kind": "trained", "feature_layout_version": FEATURE_LAYOUT_VERSION,
        "labels": list(LABEL_NAMES),
        "io": {"input": {"name": "features", "shape": ["N", N_FEATURES], "dtype": "float32"},
               "output": {"name": "probs", "shape": ["N", len(Label)], "dtype": "float32", "index": "Label"}},
        "training_data": training_data(ds, p, captures),
        "horizon_ms": p.horizon_ms,
        "labelling": {"move": "mid horizon_ms of market time later minus mid now, ticks",
                      "scale": f"quantiles of the absolute moves that completed in the last {p.scale_window_ms} ms",
                      "dead_band_ticks": p.dead_band_ticks, "lean_quantile": p.lean_quantile,
                      "toxic_quantile": p.toxic_quantile, "emergency_quantile": p.emergency_quantile,
                      "emergency_min_ticks": p.emergency_min_ticks, "toxic_vpin": p.toxic_vpin,
                      "class_freq_train": m_report.get("class_freq_train")},
        "split": {"validation": p.validation, "holdout": p.holdout, "embargo_ms": p.horizon_ms,
                  "how": "per clock (each synthetic pace; each capture): train, embargo, validation, embargo, "
                         "held-out"},
        "training": {"hidden": p.hidden, "epochs": p.epochs, "batch": p.batch, "lr": p.lr, "l2": p.l2,
                     "mirror": p.mirror, "rows": m_report.get("n_train")},
        "thresholds": thresholds_entry(th, p, ds.names),
        "held_out": {"imbalance_baseline": imb, "groups": held},
        "evaluation": _summary(held.get("synthetic"), by_series, pace),
        "deployed_config": {**deployed, "matches_card": same},
        "train_params": dataclasses.asdict(p),
    }


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def _group_md(name: str, g: dict) -> list[str]:
    md = [f"### {name}", "", f"{g['rows']} held-out rows.", "",
          "| predictor | macro-F1 (4) | macro-F1 (3) | LEAN rate | EMERGENCY rate | net edge bps / update | "
          "bps / signal | signals that paid | IC " + " / ".join(f"{h} ms" for h in (g["ic_horizons_ms"])) + " |",
          "|---|---|---|---|---|---|---|---|---|"]
    for key, r in g["predictors"].items():
        lean = r["rate"]["LEAN_BUY"] + r["rate"]["LEAN_SELL"]
        ic = " / ".join(_fmt(r["ic"].get(str(h)), ".3f") for h in g["ic_horizons_ms"]) if r["ic"] else "-"
        md.append(f"| {ROW_TITLES.get(key, key)} | {r['macro_f1']:.3f} | {r['macro_f1_3class']:.3f} | {lean:.2%} | "
                  f"{r['rate']['EMERGENCY']:.2%} | {r['net_edge_bps_per_update']:.5f} | "
                  f"{_fmt(r['net_edge_bps_per_signal'], '.4f')} | {_fmt(r['signals_that_paid'], '.1%')} | {ic} |")
    return md + [""]


def card_markdown(card: dict) -> str:
    """The card as a short markdown report (``<stem>.eval.md``)."""
    th, ev = card["thresholds"], card["evaluation"]
    md = ["# Fast model card", "",
          f"Feature layout version {card['feature_layout_version']}; labels on a {card['horizon_ms']} ms horizon of "
          f"market time; training rows' sha256 {card['training_data']['sha256'][:16]}.", "",
          f"Thresholds (chosen on the validation split): buy {th['buy']:g}, sell {th['sell']:g}, emergency "
          f"{th['emergency']:g}. Objective: {th['objective']['what']} (fee_bps {th['objective']['fee_bps']:g}); "
          f"{th['objective']['value_on_validation']:.5f} bps per update on validation, LEAN on "
          f"{th['lean_rate_on_validation']:.2%} of its updates. Bounds: LEAN at most "
          f"{th['bounds']['lean_rate_max_per_series']:.0%} of any series' updates"
          f"{'' if th['lean_bounds_met'] else ' (NOT met: the closest threshold taken)'}, EMERGENCY at most "
          f"{th['bounds']['emergency_rate_max_per_series']:.1%}.", "",
          f"configs/default.toml gives the fast stage buy {card['deployed_config']['buy']:g}, sell "
          f"{card['deployed_config']['sell']:g}, emergency {card['deployed_config']['emergency']:g}: "
          f"{'the card' if card['deployed_config']['matches_card'] else 'NOT the card'}'s.",
          "", "## Rates at the pipeline's paces (fresh synthetic markets)", "",
          "| pace | updates | LEAN_BUY | LEAN_SELL | EMERGENCY |", "|---|---|---|---|---|"]
    for name, r in ev["pace_check"].items():
        md.append(f"| {name} | {r['updates']} | {r['rate']['LEAN_BUY']:.2%} | {r['rate']['LEAN_SELL']:.2%} | "
                  f"{r['rate']['EMERGENCY']:.2%} |")
    model = (card["held_out"]["groups"].get("synthetic") or {}).get("predictors", {}).get("model")
    if model and model["net_edge_bps_per_signal"] is not None:
        md += ["", "Each LEAN signal of the model on the synthetic held-out rows: "
               f"{model['net_edge_bps_per_signal']:.4f} bps after half the spread and fee_bps; as if it paid "
               "Bitget's spot fee (10 bps): "
               f"{model['net_edge_bps_per_signal_at_reference_fee']:.4f} bps."]
    md += ["", "## Held-out", ""]
    for name, g in card["held_out"]["groups"].items():
        md += _group_md(name, g) if g else [f"### {name}", "", "No held-out rows.", ""]
    return "\n".join(md) + "\n"

