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
``emergency_rate_max``; over all of them together at least ``lean_rate_min`` LEAN (so the stage
trades). One LEAN threshold for both sides (``buy == sell``: the market has no preferred direction;
training mirrored it).

Steps: the EMERGENCY threshold first, the one with the best EMERGENCY F1 on validation among those
within its rate bound that catch at least ``MIN_EMERGENCY_HITS`` (``NEVER``, above any probability,
when none does: an EMERGENCY rule resting on a couple of events is noise); then the
LEAN threshold, the best objective within the LEAN bounds under that EMERGENCY threshold. Ties go to
the higher threshold (fewer signals). When no LEAN threshold meets the bounds, the one closest to
them is taken and ``lean_bounds_met`` says False.
"""

from __future__ import annotations

import numpy as np

from pipeline.trading.features import F_SPREAD_TICKS
from pipeline.trading.messages import Label

LEAN_GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(66))  # 0.30 .. 0.95
EMERGENCY_GRID = tuple(round(0.05 + 0.01 * i, 2) for i in range(95))  # 0.05 .. 0.99
NEVER = 1.01  # a threshold no probability reaches
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


def _choose_emergency(probs, y, series, judged, rate_max) -> tuple[float, dict]:
    """The EMERGENCY threshold (step 1 of the module docstring) and its validation figures."""
    pe = np.asarray(probs, np.float32)[:, Label.EMERGENCY]
    truth = y == Label.EMERGENCY
    best = (0.0, NEVER)
    for e in EMERGENCY_GRID:
        fire = pe >= np.float32(e)
        if judged and _per_series(fire.astype(np.float64), series, judged).max() > rate_max:
            continue
        if int((fire & truth).sum()) < MIN_EMERGENCY_HITS:
            continue
        f = _f1(fire, truth)
        if f > best[0] or (f == best[0] and f > 0 and e > best[1]):
            best = (f, e)
    e = best[1]
    fire = pe >= np.float32(e)
    return e, {"f1": best[0], "rate": float(fire.mean()) if len(fire) else 0.0,
               "precision": float(truth[fire].mean()) if fire.any() else None}


def choose_thresholds(probs: np.ndarray, y: np.ndarray, move_ticks: np.ndarray, X: np.ndarray, tick_bps: np.ndarray,
                      series: np.ndarray, p) -> dict:
    """The thresholds for validation rows (probabilities, true labels, moves, features, tick size in
    bps, series index of each row) under ``p`` (``TrainParams``), as the module docstring chooses
    them: ``{"buy", "sell", "emergency", "objective_bps_per_update", "lean_rate", "lean_rate_by_series",
    "emergency_rate_by_series", "lean_bounds_met", "emergency": {...}}``.

    Raises:
        ValueError: no validation rows.
    """
    if not len(y):
        raise ValueError("no validation rows to choose the thresholds on")
    ids = sorted(int(k) for k in np.unique(series))
    judged = [k for k in ids if (series == k).sum() >= MIN_SERIES_ROWS]
    e, em = _choose_emergency(probs, y, series, judged, p.emergency_rate_max)
    spread = np.asarray(X)[:, F_SPREAD_TICKS]
    best, closest = None, None
    for t in LEAN_GRID:
        lab = deployed_labels(probs, t, t, e)
        edge = signal_edge_bps(lab, move_ticks, spread, tick_bps, p.fee_bps)
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
    obj, t, rates, pooled = best if met else closest[1]
    lab = deployed_labels(probs, t, t, e)
    return {"buy": t, "sell": t, "emergency": e, "objective_bps_per_update": obj, "lean_rate": pooled,
            "lean_rate_by_series": {int(k): float(r) for k, r in zip(ids, rates)},
            "emergency_rate_by_series": {int(k): float(r) for k, r in
                                         zip(ids, rates_by_series(lab, series, ids)["emergency"])},
            "lean_bounds_met": met, "emergency_choice": em}
