"""The fast stage's thresholds: the rule it applies (``deployed_labels``), the trading value of its
signals (``signal_edge_bps``), and the choice of thresholds on the validation split
(``choose_thresholds``). Pure numpy.

The objective (what a threshold is chosen for): the net edge of acting on a LEAN signal, per update,
in basis points. A LEAN_BUY at a row buys at the ask (the mid plus half the spread, ``F_SPREAD_TICKS /
2``), pays ``fee_bps``, and is marked at the mid ``horizon_ms`` later; a LEAN_SELL the mirror image::

    edge_bps = (+-move_ticks - spread_ticks / 2) * tick_bps - fee_bps

Summed over a series' LEAN signals and divided by its rows (bps per update), averaged over the series
(each synthetic pace, each instrument of a capture). It rewards acting often only while each act
still pays; acting on noise costs half the spread every time.

Constraints, a trader's budget (``TrainParams``): in every series with at least ``MIN_SERIES_ROWS``
validation rows, LEAN signals on at most ``lean_rate_max`` of the updates and EMERGENCY on at most
``emergency_rate_max``; over all of them together at least ``lean_rate_min`` LEAN. One LEAN threshold
for both sides (``buy == sell``: the market has no preferred direction; training mirrored it). When no
LEAN threshold pays (an objective above 0) LEAN is off (``NEVER``), unless ``lean_rate_min`` asks for
signals; when none meets the bounds, the one closest to them is taken and ``lean_bounds_met`` says
False.

The EMERGENCY job is adverse selection (``pipeline.trading.model.data``): a pulled quote is worth
what it would have lost, and costs what it would have earned. Its thresholds (``emergency``, and
``side``: the confidence at which the ``at_risk`` output names one side, ``decide``) are chosen for::

    value_bps = - sum over the pulled sides of filled * (markout_ticks * tick_bps - fee_bps)

per update (an EMERGENCY with a side pulls that side's order at the touch, one without pulls both;
``filled`` / ``markout_ticks``: that order's fill within the horizon and its markout at the
horizon's end; ``fee_bps`` the fill's maker fee), the mean over series: the net P&L of the fills it
avoids, losing ones counting for it and paying ones against it. Among the (emergency, side) pairs
within the EMERGENCY rate bound
that catch at least ``MIN_EMERGENCY_HITS`` true emergencies, the best value; ties go to the higher
thresholds (fewer pulls, fewer one-sided pulls); none that is worth more than 0: ``NEVER`` (no
EMERGENCY). Then the LEAN threshold, the best objective within the LEAN bounds under that EMERGENCY
threshold.
"""

from __future__ import annotations

import numpy as np

from pipeline.trading.features import F_SPREAD_TICKS
from pipeline.trading.messages import Label

LEAN_GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(66))  # 0.30 .. 0.95
EMERGENCY_GRID = tuple(round(0.05 + 0.01 * i, 2) for i in range(95))  # 0.05 .. 0.99
NEVER = 1.01  # a threshold no probability reaches
SIDE_GRID = (0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99, NEVER)  # P(one side at risk) naming it
MIN_SERIES_ROWS = 500  # a series with fewer validation rows is judged only in the pooled bounds
MIN_EMERGENCY_HITS = 5  # an EMERGENCY threshold must catch this many true emergencies on validation


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


def signal_edge_bps(labels: np.ndarray, move_ticks: np.ndarray, spread_ticks: np.ndarray, tick_bps: np.ndarray,
                    fee_bps: float) -> np.ndarray:
    """Per row, the net edge (bps) of acting on its label (the module docstring's formula); 0 for
    HOLD and EMERGENCY (no position taken)."""
    lab = np.asarray(labels)
    half = 0.5 * np.asarray(spread_ticks, np.float64)
    move = np.asarray(move_ticks, np.float64)
    tb = np.asarray(tick_bps, np.float64)
    out = np.zeros(len(lab))
    buy, sell = lab == Label.LEAN_BUY, lab == Label.LEAN_SELL
    out[buy] = (move[buy] - half[buy]) * tb[buy] - fee_bps
    out[sell] = (-move[sell] - half[sell]) * tb[sell] - fee_bps
    return out


def _per_series(values: np.ndarray, series: np.ndarray, ids: list[int]) -> np.ndarray:
    """The mean of ``values`` within each series of ``ids``."""
    return np.array([values[series == k].mean() if (series == k).any() else 0.0 for k in ids])


def rates_by_series(labels: np.ndarray, series: np.ndarray, ids: list[int]) -> dict[str, np.ndarray]:
    """Per series of ``ids``: the share of rows labelled LEAN (either side) and EMERGENCY."""
    lean = (labels == Label.LEAN_BUY) | (labels == Label.LEAN_SELL)
    return {"lean": _per_series(lean.astype(np.float64), series, ids),
            "emergency": _per_series((labels == Label.EMERGENCY).astype(np.float64), series, ids)}


def _f1(pred: np.ndarray, truth: np.ndarray) -> float:
    tp = int((pred & truth).sum())
    n = int(pred.sum()) + int(truth.sum())
    return 2 * tp / n if n else 0.0


def pull_value_bps(fire: np.ndarray, named: np.ndarray, filled: np.ndarray, markout_ticks: np.ndarray,
                   tick_bps: np.ndarray, fee_bps: float = 0.0) -> np.ndarray:
    """Per row, the value (bps) of the EMERGENCY pulls ``fire`` (bool [n]) with the named side ``named``
    (int [n]: 0 none, so both sides pulled; 1 the bid; 2 the ask): minus the sum over the pulled sides
    of ``filled * (markout_ticks * tick_bps - fee_bps)`` (``filled`` / ``markout_ticks`` [n, 2]: bid,
    ask); 0 where it does not fire."""
    net = np.asarray(markout_ticks, np.float64) * np.asarray(tick_bps, np.float64)[:, None] - fee_bps
    fm = np.where(np.asarray(filled, bool), net, 0.0)
    nm = np.asarray(named)
    lost = np.where(nm == 1, fm[:, 0], np.where(nm == 2, fm[:, 1], fm[:, 0] + fm[:, 1]))
    return np.where(np.asarray(fire, bool), -lost, 0.0)


def _named_side(at_risk: np.ndarray | None, c: float, n: int) -> np.ndarray:
    """0 / 1 (bid) / 2 (ask) per row: the side whose ``at_risk`` probability reaches ``c`` (float32)."""
    if at_risk is None or c > 1:
        return np.zeros(n, np.int64)
    ar = np.asarray(at_risk, np.float32)
    cc = np.float32(c)
    return np.where(ar[:, 0] >= cc, 1, np.where(ar[:, 1] >= cc, 2, 0)).astype(np.int64)


def _choose_emergency(probs, at_risk, v, series, ids, judged, p) -> tuple[float, float, dict]:
    """(emergency, side, validation figures): the EMERGENCY step of the module docstring. ``v``: the
    validation rows' ``y``, ``side``, ``filled``, ``markout_ticks``, ``tick_bps``."""
    pe = np.asarray(probs, np.float32)[:, Label.EMERGENCY]
    truth = v["y"] == Label.EMERGENCY
    sides = {c: _named_side(at_risk, c, len(pe)) for c in SIDE_GRID}
    best = (0.0, NEVER, NEVER)
    for e in EMERGENCY_GRID:
        fire = pe >= np.float32(e)
        if judged and _per_series(fire.astype(np.float64), series, judged).max() > p.emergency_rate_max:
            continue
        if int((fire & truth).sum()) < MIN_EMERGENCY_HITS:
            continue
        for c in SIDE_GRID:
            val = pull_value_bps(fire, sides[c], v["filled"], v["markout_ticks"], v["tick_bps"], p.fee_bps)
            obj = float(_per_series(val, series, ids).mean())
            if obj > best[0] or (obj == best[0] and obj > 0 and (e, c) > (best[1], best[2])):
                best = (obj, e, c)
    obj, e, c = best
    fire = pe >= np.float32(e)
    named = sides[c] if c in sides else np.zeros(len(pe), np.int64)
    sided = fire & truth & (named > 0)
    return e, c, {"value_bps_per_update": obj, "f1": _f1(fire, truth), "rate": float(fire.mean()) if len(fire) else 0.0,
                  "precision": float(truth[fire].mean()) if fire.any() else None,
                  "recall": float(fire[truth].mean()) if truth.any() else None,
                  "named_side_rate": float((named[fire] > 0).mean()) if fire.any() else None,
                  "named_side_correct": float((named[sided] == v["side"][sided]).mean()) if sided.any() else None}


def _choose_lean(probs, e, v, series, ids, judged, p):
    """(threshold, objective, rates by series, pooled rate, bounds met): the LEAN step."""
    best, closest = None, None
    for t in LEAN_GRID + (NEVER,):  # NEVER last: it wins when nothing pays (ties go to the later)
        lab = deployed_labels(probs, t, t, e)
        edge = signal_edge_bps(lab, v["move_ticks"], v["spread"], v["tick_bps"], p.fee_bps)
        obj = float(_per_series(edge, series, ids).mean())
        rates = rates_by_series(lab, series, ids)["lean"]
        worst = rates[[ids.index(k) for k in judged]].max() if judged else rates.max()
        pooled = float(rates.mean())
        miss = max(0.0, worst - p.lean_rate_max) + max(0.0, p.lean_rate_min - pooled)
        cand = (obj, t, rates, pooled)
        if miss == 0 and (best is None or obj >= best[0]):
            best = cand
        if closest is None or miss <= closest[0]:
            closest = (miss, cand)
    met = best is not None
    return (*(best if met else closest[1]), met)


def choose_thresholds(probs: np.ndarray, v: dict, series: np.ndarray, p, at_risk: np.ndarray | None = None) -> dict:
    """The thresholds for validation rows as the module docstring chooses them under ``p``
    (``TrainParams``): ``probs`` (float32 [n, 4]), ``at_risk`` (float32 [n, 2] or None: no side),
    ``v`` the rows' ``y``, ``move_ticks``, ``spread`` (ticks), ``tick_bps``, ``side``, ``filled``,
    ``markout_ticks`` (``validation_rows`` gives them), ``series`` each row's series. Returns
    ``{"buy", "sell", "emergency", "side", "objective_bps_per_update", "lean_rate", "lean_rate_by_series",
    "emergency_rate_by_series", "lean_bounds_met", "emergency_choice": {...}}``.

    Raises:
        ValueError: no validation rows.
    """
    if not len(v["y"]):
        raise ValueError("no validation rows to choose the thresholds on")
    ids = sorted(int(k) for k in np.unique(series))
    judged = [k for k in ids if (series == k).sum() >= MIN_SERIES_ROWS]
    e, c, em = _choose_emergency(probs, at_risk, v, series, ids, judged, p)
    obj, t, rates, pooled, met = _choose_lean(probs, e, v, series, ids, judged, p)
    lab = deployed_labels(probs, t, t, e)
    return {"buy": t, "sell": t, "emergency": e, "side": c, "objective_bps_per_update": obj, "lean_rate": pooled,
            "lean_rate_by_series": {int(k): float(r) for k, r in zip(ids, rates)},
            "emergency_rate_by_series": {int(k): float(r) for k, r in
                                         zip(ids, rates_by_series(lab, series, ids)["emergency"])},
            "lean_bounds_met": met, "emergency_choice": em}


def validation_rows(ds, rows: np.ndarray) -> dict:
    """The per-row inputs of ``choose_thresholds`` for ``rows`` of a ``data.Dataset``."""
    return {"y": ds.y[rows], "move_ticks": ds.move_ticks[rows], "spread": np.asarray(ds.X)[rows, F_SPREAD_TICKS],
            "tick_bps": ds.tick_bps[rows], "side": ds.side[rows], "filled": ds.filled[rows],
            "markout_ticks": ds.markout_ticks[rows]}
