"""The model card's contents (``make_card``) and its readable twin, ``<stem>.eval.md`` (``card_markdown``).

Card keys: ``card_version``, ``kind`` ("trained"), ``feature_layout_version``, ``features`` (the slots'
names, the share of training rows on which the optional inputs were available, the slots constant over
every training row), ``labels``, ``io`` (the graph's input and its two outputs), ``input_bounds`` (the
input-range guard's per-feature bounds and their rule, ``decide``), ``training_data`` (the synthetic
markets and the captures, the rows of each part, the SHA-256 of every labelled row), ``horizon_ms``,
``labelling``, ``split``, ``training``, ``thresholds`` (the chosen ones, ``side`` among them, the
objectives and their bounds, the validation figures),
``held_out`` (per group: each predictor's scores and trading figures), ``evaluation`` (the summary:
the deployed model's rate per label and IC on the synthetic held-out rows, its rates per series, and
``pace_check``: its rates, the guard's among them, at the paper venue's pace and at the pipeline
bench's 1 ms; ``market``: the offline evaluation's P&L and markouts when it offers them),
``deployed_config`` (the thresholds configs/default.toml gives the fast stage, and whether they are
the card's), ``train_params``. Deterministic: no clock, no host name.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from pipeline.trading.features import FEATURE_LAYOUT_VERSION, N_FEATURES
from pipeline.trading.messages import Label
from pipeline.trading.model.card import BOUNDS_KEY, CARD_VERSION, LABEL_NAMES
from pipeline.trading.model.data import PART_NAMES, TRAIN, Dataset, TrainParams, market_params, pace_steps
from pipeline.trading.model.decide import AT_RISK_OUTPUT, BOUNDS_RULE, InputBounds
from pipeline.trading.model.thresholds import EMERGENCY_GRID, LEAN_GRID, NEVER, SIDE_GRID

OBJECTIVE = ("net edge of acting on each LEAN signal, per update (bps): buy at the ask (mid + half the spread) "
             "or sell at the bid, pay fee_bps, marked at the mid horizon_ms later; the mean over series")
EMERGENCY_OBJECTIVE = ("value of the EMERGENCY pulls, per update (bps): minus the net P&L (markout at the mid "
                       "horizon_ms later, less the maker fee_bps) of every order at the touch they pull (the named "
                       "side's, or both) that would have been filled within horizon_ms: losing fills avoided minus "
                       "paying fills given up; the mean over series")
ROW_TITLES = {"model": "model (as deployed: thresholds, side, guard)", "model_argmax": "argmax (not deployed)",
              "always_hold": "always_hold", "imbalance_sign": "imbalance_sign",
              "random_model_rates": "random (the model's label rates)"}


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
        gen = "CALIBRATED" if p.market == "calibrated" else "default SyntheticParams"
        out["synthetic"] = {"generator": f"pipeline.venue.synthetic.SyntheticMarket ({gen})", "market": p.market,
                            "market_step_ms": market_params(p.market).step_ms,
                            "seed": p.seed, "paces_ms": list(p.paces_ms),
                            "steps_by_pace": {f"{pace}ms": n for pace, n in zip(p.paces_ms, steps)},
                            "warmup_ms": p.warmup_ms,
                            "instruments": [{"tick_size": t, "lot_size": lt} for t, lt in p.instruments],
                            "rows": _rows_by_part(ds, syn_rows)}
    for info in captures:
        mine = np.array([n.startswith(f"capture:{info['name']}:") for n in ds.names], bool)
        out["captures"].append({**info, "labelled_rows": _rows_by_part(ds, mine[ds.series])})
    return out


def thresholds_entry(th: dict, p: TrainParams, names: list[str]) -> dict:
    """The card's ``thresholds``: the three numbers, then how and on what they were chosen."""
    return {"buy": th["buy"], "sell": th["sell"], "emergency": th["emergency"], "side": th["side"],
            "chosen_on": "validation",
            "objective": {"what": OBJECTIVE, "fee_bps": p.fee_bps,
                          "value_on_validation": th["objective_bps_per_update"]},
            "emergency_objective": {"what": EMERGENCY_OBJECTIVE,
                                    "value_on_validation": th["emergency_choice"]["value_bps_per_update"]},
            "bounds": {"lean_rate_max_per_series": p.lean_rate_max, "lean_rate_min_pooled": p.lean_rate_min,
                       "emergency_rate_max_per_series": p.emergency_rate_max},
            "grids": {"lean": [LEAN_GRID[0], LEAN_GRID[-1], 0.01],
                      "emergency": [EMERGENCY_GRID[0], EMERGENCY_GRID[-1], 0.01], "side": list(SIDE_GRID),
                      "never": f"a threshold of {NEVER}: no probability reaches it"},
            "lean_bounds_met": th["lean_bounds_met"], "lean_rate_on_validation": th["lean_rate"],
            "lean_rate_by_series": {names[k]: r for k, r in th["lean_rate_by_series"].items()},
            "emergency_rate_by_series": {names[k]: r for k, r in th["emergency_rate_by_series"].items()},
            "emergency_on_validation": th["emergency_choice"]}


def _summary(held: dict | None, by_series: dict, pace: dict, market: dict | None) -> dict:
    model = held["predictors"]["model"] if held else None
    rates = {k: v for k, v in model["rate"].items() if k != "HOLD"} if model else None
    return {"non_hold_rate_held_out": rates,
            "macro_f1_held_out": model["macro_f1"] if model else None,
            "ic_held_out": model["ic"] if model else None,
            "net_edge_bps_per_update_held_out": model["net_edge_bps_per_update"] if model else None,
            "pull_value_bps_per_update_held_out": model["pull_value_bps_per_update"] if model else None,
            "out_of_range_rate_held_out": model["out_of_range_rate"] if model else None,
            "rate_by_series_held_out": by_series, "pace_check": pace, "market": market}


def _label_freq(ds: Dataset) -> dict:
    """Each part's label shares and the EMERGENCY rows' sides."""
    out = {}
    for k, name in PART_NAMES.items():
        rows = ds.part == k
        n = max(1, int(rows.sum()))
        out[name] = {lb: round(float((ds.y[rows] == c).sum() / n), 5) for c, lb in enumerate(LABEL_NAMES)}
        out[name]["emergency_bid_side"] = int(((ds.side == 1) & rows).sum())
        out[name]["emergency_ask_side"] = int(((ds.side == 2) & rows).sum())
    return out


def features_entry(ds: Dataset) -> dict:
    """The card's ``features``: the layout's slot names (``pipeline.trading.features.feature_names``), the
    share of training rows on which the optional inputs were available (hidden-order strength: a venue
    that reports non-displayed executions; the spot-perpetual basis: a configured pair with both books),
    and the slots constant over every training row: the model learnt nothing from them, and the
    input-range guard HOLDs a row whose value differs there."""
    from pipeline.trading import features as f

    names = f.feature_names()
    X = ds.X[ds.part == TRAIN]
    n = max(1, len(X))
    const = [names[k] for k in range(N_FEATURES) if len(X) and X[:, k].min() == X[:, k].max()]
    return {"names": names,
            "available_share_train": {"hidden_orders": round(float((X[:, f.F_HIDDEN_AVAILABLE] > 0).sum() / n), 5),
                                      "basis": round(float((X[:, f.F_BASIS_AVAILABLE] > 0).sum() / n), 5)},
            "constant_in_training": const}


def make_card(*, p: TrainParams, ds: Dataset, m_report: dict, th: dict, held: dict, by_series: dict, pace: dict,
              imb: dict, captures: list[dict], deployed: dict, bounds: InputBounds, market: dict | None = None) -> dict:
    """The whole card (module docstring) from the build's pieces: ``held`` (group -> evaluation or
    None), ``by_series`` (series name -> the model's held-out rates), ``pace`` (``pace_check``),
    ``imb`` (the imbalance baseline's slot and eps), ``deployed`` (``deployed_thresholds()``),
    ``bounds`` (the guard's), ``market`` (``evaluation.market_evaluation`` or None)."""
    same = all(abs(deployed[k] - th[k]) < 1e-9 for k in ("buy", "sell", "emergency", "side"))
    return {
        "card_version": CARD_VERSION, "kind": "trained", "feature_layout_version": FEATURE_LAYOUT_VERSION,
        "features": features_entry(ds), "labels": list(LABEL_NAMES),
        "io": {"input": {"name": "features", "shape": ["N", N_FEATURES], "dtype": "float32"},
               "output": {"name": "probs", "shape": ["N", len(Label)], "dtype": "float32", "index": "Label"},
               "side_output": {"name": AT_RISK_OUTPUT, "shape": ["N", 2], "dtype": "float32",
                               "index": ["bid at risk", "ask at risk"], "fitted": m_report["side_head"]}},
        BOUNDS_KEY: bounds.to_card(BOUNDS_RULE),
        "training_data": training_data(ds, p, captures),
        "horizon_ms": p.horizon_ms,
        "labelling": {"move": "mid horizon_ms of market time later minus mid now, ticks",
                      "lean": "move beyond the round trip: spread_ticks + 2 * fee_bps in ticks at the row's mid",
                      "emergency": "an order at the touch (bid at the best bid / ask at the best ask) that the price "
                                   "trades to or through within horizon_ms and whose markout at its end (mid - bid, "
                                   "ask - mid) less its fee_bps is below -emergency_loss_ticks; its side",
                      "fee_bps": p.fee_bps, "fee_source": "pipeline.venue.fees.DEFAULT_EVALUATION_FEES.maker_bps "
                                                          "(the planner's orders rest: maker fills)",
                      "emergency_loss_ticks": p.emergency_loss_ticks,
                      "label_freq": _label_freq(ds), "class_freq_train": m_report.get("class_freq_train")},
        "split": {"validation": p.validation, "holdout": p.holdout, "embargo_ms": p.horizon_ms,
                  "how": "per clock (each synthetic pace; each capture): train, embargo, validation, embargo, "
                         "held-out"},
        "training": {"hidden": p.hidden, "epochs": p.epochs, "batch": p.batch, "lr": p.lr, "l2": p.l2,
                     "mirror": p.mirror, "rows": m_report.get("n_train")},
        "thresholds": thresholds_entry(th, p, ds.names),
        "held_out": {"imbalance_baseline": imb, "groups": held},
        "evaluation": _summary(held.get("synthetic"), by_series, pace, market),
        "deployed_config": {**deployed, "matches_card": same},
        "train_params": dataclasses.asdict(p),
    }


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def _group_md(name: str, g: dict) -> list[str]:
    hz = g["ic_horizons_ms"]
    md = [f"### {name}", "", f"{g['rows']} held-out rows.", "",
          "| predictor | macro-F1 (4) | macro-F1 (3) | LEAN rate | EMERGENCY rate | out of range | "
          "EMERGENCY pull value bps / update | LEAN net edge bps / update | IC "
          + " / ".join(f"{h} ms" for h in hz) + " |",
          "|---|---|---|---|---|---|---|---|---|"]
    for key, r in g["predictors"].items():
        lean = r["rate"]["LEAN_BUY"] + r["rate"]["LEAN_SELL"]
        ic = " / ".join(_fmt(r["ic"].get(str(h)), ".3f") for h in hz) if r["ic"] else "-"
        md.append(f"| {ROW_TITLES.get(key, key)} | {r['macro_f1']:.3f} | {r['macro_f1_3class']:.3f} | {lean:.2%} | "
                  f"{r['rate']['EMERGENCY']:.2%} | {r.get('out_of_range_rate', 0.0):.2%} | "
                  f"{r.get('pull_value_bps_per_update', 0.0):.5f} | {r['net_edge_bps_per_update']:.5f} | {ic} |")
    return md + [""]


def _market_md(market: dict | None) -> list[str]:
    """The offline evaluation's P&L and markouts (``evaluation.market_evaluation``), or why they are absent."""
    md = ["## Trading the market (the offline evaluation)", ""]
    if not market:
        return md + ["Not computed in this build (no evaluation seeds); `make evaluate` reports them.", ""]
    if "error" in market:
        return md + [f"Not computed: the evaluation failed on seeds {market['seeds']}: {market['error']}", ""]
    md += [market["summary"], "",
           "| variant | what | net P&L | fees | fills | fill rate | 1 s markout mean bps (fills) | EMERGENCY cancels |",
           "|---|---|---|---|---|---|---|---|"]
    for r in market["rows"]:
        md.append(f"| {r['variant']} | {r['what']} | {r['net_pnl']:.2f} | {r['fees']:.2f} | {r['fills']} | "
                  f"{_fmt(r['fill_rate'], '.3f')} | {_fmt(r['markout_1s_mean_bps'], '.2f')} "
                  f"({r['markout_1s_count']}) | "
                  f"{r['emergency_cancelled']} |")
    return md + [""]


def _features_md(feat: dict | None) -> list[str]:
    """The optional inputs' availability in training and the slots the model never saw vary."""
    if not feat:
        return []
    share = feat["available_share_train"]
    const = feat["constant_in_training"]
    named = [c for c in const if not c.startswith("RESERVED_")]
    return [f"Optional inputs on the training rows: hidden-order strength available on {share['hidden_orders']:.1%}, "
            f"the spot-perpetual basis on {share['basis']:.1%}. Constant on every training row (nothing learnt; "
            f"a row that differs there is out of range, HOLD): {', '.join(named) or 'none'}"
            f"{f' and the {len(const) - len(named)} reserved slots' if len(const) > len(named) else ''}.", ""]


def card_markdown(card: dict) -> str:
    """The card as a short markdown report (``<stem>.eval.md``)."""
    th, ev, lab = card["thresholds"], card["evaluation"], card["labelling"]
    em = th["emergency_on_validation"]
    md = ["# Fast model card", "",
          f"Feature layout version {card['feature_layout_version']}; labels on a {card['horizon_ms']} ms horizon of "
          f"market time; training rows' sha256 {card['training_data']['sha256'][:16]}.", "",
          f"Labels: LEAN when the move pays its round trip (the spread plus {lab['fee_bps']:g} bps a side); "
          f"EMERGENCY when an order at the touch would be filled and then lose more than "
          f"{lab['emergency_loss_ticks']:g} ticks by the horizon's end, its {lab['fee_bps']:g} bps fee counted "
          "(its side).", "",
          "| part | HOLD | LEAN_BUY | LEAN_SELL | EMERGENCY | EMERGENCY bid / ask side |", "|---|---|---|---|---|---|"]
    for part, f in lab["label_freq"].items():
        md.append(f"| {part} | {f['HOLD']:.3%} | {f['LEAN_BUY']:.3%} | {f['LEAN_SELL']:.3%} | {f['EMERGENCY']:.3%} | "
                  f"{f['emergency_bid_side']} / {f['emergency_ask_side']} |")
    md += ["", f"Thresholds (chosen on the validation split): buy {th['buy']:g}, sell {th['sell']:g}, emergency "
           f"{th['emergency']:g}, side {th['side']:g} (a threshold above 1: never). EMERGENCY objective: "
           f"{th['emergency_objective']['what']}; {th['emergency_objective']['value_on_validation']:.5f} bps per "
           f"update on validation (EMERGENCY on {em['rate']:.2%} of its updates, precision "
           f"{_fmt(em['precision'], '.3f')}, recall {_fmt(em['recall'], '.3f')}, a side named on "
           f"{_fmt(em['named_side_rate'], '.1%')} of them, the right one on {_fmt(em['named_side_correct'], '.1%')}). "
           f"LEAN objective: {th['objective']['what']} (fee_bps {th['objective']['fee_bps']:g}); "
           f"{th['objective']['value_on_validation']:.5f} bps per update on validation, LEAN on "
           f"{th['lean_rate_on_validation']:.2%} of its updates. Bounds: LEAN at most "
           f"{th['bounds']['lean_rate_max_per_series']:.0%} of any series' updates"
           f"{'' if th['lean_bounds_met'] else ' (NOT met: the closest threshold taken)'}, EMERGENCY at most "
           f"{th['bounds']['emergency_rate_max_per_series']:.1%}.", "",
           f"Input-range guard: {card['input_bounds']['rule']}.", "",
           *_features_md(card.get("features")),
           f"configs/default.toml gives the fast stage buy {card['deployed_config']['buy']:g}, sell "
           f"{card['deployed_config']['sell']:g}, emergency {card['deployed_config']['emergency']:g}, side "
           f"{card['deployed_config']['side']:g}: "
           f"{'the card' if card['deployed_config']['matches_card'] else 'NOT the card'}'s.",
           "", "## Rates at the pipeline's paces (fresh synthetic markets)", "",
           "| pace | updates | LEAN_BUY | LEAN_SELL | EMERGENCY | out of range (HOLD) |", "|---|---|---|---|---|---|"]
    for name, r in ev["pace_check"].items():
        md.append(f"| {name} ({r['pace_ms']} ms) | {r['updates']} | {r['rate']['LEAN_BUY']:.2%} | "
                  f"{r['rate']['LEAN_SELL']:.2%} | {r['rate']['EMERGENCY']:.2%} | {r['rate']['OUT_OF_RANGE']:.2%} |")
    md += ["", "## Held-out", ""]
    for name, g in card["held_out"]["groups"].items():
        md += _group_md(name, g) if g else [f"### {name}", "", "No held-out rows.", ""]
    md += _market_md(ev.get("market"))
    return "\n".join(md) + "\n"
