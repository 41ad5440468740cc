"""The fast stage's decision, as pure numpy: a model's outputs and the feature rows in, the SIGNAL's label
and flags out (``deployed_decisions``); the input-range guard (``InputBounds``, ``out_of_range``); the
feature slots' names (``slot_name``). ``procs/fast.py`` computes the same in its own hot-path code and
a test holds the two together; the offline evaluation calls this module.

The rule, in order:

1. Labels from the probabilities (``thresholds.deployed_labels``): LEAN_BUY / LEAN_SELL / EMERGENCY by
   their thresholds, else HOLD.
2. The side of an EMERGENCY: a model with the ``at_risk`` output (``AT_RISK_OUTPUT``: float32 [N, 2],
   P(our bid at the touch is the order at risk), P(our ask is), given an EMERGENCY) names the side
   whose probability reaches ``side``: ``SIGNAL_FLAG_AT_RISK_BID`` or ``SIGNAL_FLAG_AT_RISK_ASK``.
   ``side`` is above 0.5, so at most one side; ``NEVER`` (above any probability) or no ``at_risk``
   output: no side bit, and the risk gateway pulls both sides (CANCEL_ALL).
3. The input-range guard, last: a row with a feature outside the model card's training bounds (or a
   NaN) is HOLD with ``SIGNAL_FLAG_OUT_OF_RANGE`` and no side bit, whatever the model said: a network
   fed inputs far from anything it was trained on saturates (on the shared capture's books, whose
   depth is 4 to 10 orders of magnitude beyond the synthetic market's, P(LEAN_BUY) = 1.000), and a
   saturated output is not evidence.

The bounds (``InputBounds``, the card's ``input_bounds``; ``bounds_from_rows`` makes them): per slot,
over the training rows (and their mirror images, which the model was also trained on), the
``BOUNDS_QUANTILES`` quantiles widened on each side by ``BOUNDS_MARGIN`` times the distance between
them; a slot whose two quantiles coincide gets the rows' exact minimum and maximum instead (a
constant slot: exactly its value). So the rarest training rows of a heavy-tailed slot lie outside too:
the model barely saw them. Stored and compared in float32, as the stage compares its float32 inputs
(rounding to the nearest float32 keeps order: a float32 row within the bounds stays within them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.trading import features as _f
from pipeline.trading.features import N_FEATURES
from pipeline.trading.messages import (SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE,
                                       Label)
from pipeline.trading.model.thresholds import NEVER, deployed_labels

AT_RISK_OUTPUT = "at_risk"  # the second ONNX output's name: float32 [N, 2], (P(bid at risk), P(ask at risk))
BOUNDS_QUANTILES = (0.001, 0.999)
BOUNDS_MARGIN = 0.25  # each side widened by this share of the distance between the two quantiles
BOUNDS_RULE = (f"per slot over the training rows and their mirror images: [q{BOUNDS_QUANTILES[0]:g} - "
               f"{BOUNDS_MARGIN:g} w, q{BOUNDS_QUANTILES[1]:g} + {BOUNDS_MARGIN:g} w], w = q{BOUNDS_QUANTILES[1]:g} - "
               f"q{BOUNDS_QUANTILES[0]:g}; where w = 0, the rows' exact [min, max]; in float32")
F32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class InputBounds:
    """Per-slot bounds of the inputs a model was trained on: ``lo`` / ``hi`` float32 [128], lo <= hi."""

    lo: np.ndarray
    hi: np.ndarray

    @staticmethod
    def unbounded() -> "InputBounds":
        """Bounds every finite float32 lies within (a hand-set model's: only NaN is refused)."""
        return InputBounds(np.full(N_FEATURES, -F32_MAX, np.float32), np.full(N_FEATURES, F32_MAX, np.float32))

    def to_card(self, rule: str) -> dict:
        """The card's ``input_bounds`` entry (each bound its float32 value, exactly, as a JSON number)."""
        return {"rule": rule, "lo": [float(v) for v in self.lo], "hi": [float(v) for v in self.hi]}


def bounds_from_rows(X: np.ndarray) -> InputBounds:
    """The bounds of the module docstring over feature rows ``X`` ([n, 128], n >= 1).

    Raises:
        ValueError: no rows, or a non-finite value among them.
    """
    X = np.asarray(X, np.float64)
    if X.ndim != 2 or X.shape[1] != N_FEATURES or not len(X):
        raise ValueError(f"bounds need feature rows [n >= 1, {N_FEATURES}], not {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("bounds need finite feature rows")
    q_lo, q_hi = np.quantile(X, BOUNDS_QUANTILES, axis=0)
    w = q_hi - q_lo
    lo = np.where(w > 0, q_lo - BOUNDS_MARGIN * w, X.min(axis=0))
    hi = np.where(w > 0, q_hi + BOUNDS_MARGIN * w, X.max(axis=0))
    return InputBounds(lo.astype(np.float32), hi.astype(np.float32))


def out_of_range(X: np.ndarray, bounds: InputBounds) -> tuple[np.ndarray, np.ndarray]:
    """(bool [n]: a row with a slot outside ``bounds`` or a NaN; int64 [n]: that row's worst slot, the one
    furthest outside in units of its bounds' width (1 where the width is 0; a NaN counts as furthest),
    -1 for rows within)."""
    X = np.asarray(X, np.float32).reshape(-1, N_FEATURES)
    inside = (X >= bounds.lo) & (X <= bounds.hi)  # False for NaN
    bad = ~inside.all(axis=1)
    worst = np.full(len(X), -1, np.int64)
    if bad.any():
        rows = X[bad].astype(np.float64)
        lo, hi = bounds.lo.astype(np.float64), bounds.hi.astype(np.float64)
        width = np.where(hi > lo, hi - lo, 1.0)
        excess = np.maximum(lo - rows, rows - hi) / width
        worst[bad] = excess.argmax(axis=1)  # a NaN propagates and argmax takes the first NaN
    return bad, worst


def side_flags(labels: np.ndarray, at_risk: np.ndarray | None, side: float) -> np.ndarray:
    """uint8 [n]: the at-risk side bit of each EMERGENCY row (step 2 of the module docstring).

    Raises:
        ValueError: ``side`` not above 0.5 (two sides could both reach it).
    """
    if not side > 0.5:
        raise ValueError(f"the side threshold must be above 0.5 (at most one side), not {side!r}")
    lab = np.asarray(labels)
    flags = np.zeros(len(lab), np.uint8)
    if at_risk is None:
        return flags
    ar = np.asarray(at_risk, np.float32).reshape(len(lab), 2)
    s = np.float32(side)
    em = lab == Label.EMERGENCY
    flags[em & (ar[:, 1] >= s)] = SIGNAL_FLAG_AT_RISK_ASK
    flags[em & (ar[:, 0] >= s)] = SIGNAL_FLAG_AT_RISK_BID  # the bid first, should both reach it (not a softmax)
    return flags


def deployed_decisions(probs: np.ndarray, at_risk: np.ndarray | None, X: np.ndarray, bounds: InputBounds | None,
                       buy: float, sell: float, emergency: float, side: float = NEVER) -> tuple[np.ndarray, np.ndarray]:
    """(labels uint8 [n], flags uint8 [n]) the fast stage writes for these rows (the module docstring's
    rule; ``bounds`` None: no guard). ``SIGNAL_FLAG_WARMUP`` is not set here: it comes from the FEATURES.

    Raises:
        ValueError: ``side`` not above 0.5.
    """
    lab = deployed_labels(probs, buy, sell, emergency).astype(np.uint8)
    flags = side_flags(lab, at_risk, side)
    if bounds is not None:
        bad, _ = out_of_range(X, bounds)
        lab[bad] = Label.HOLD
        flags[bad] = SIGNAL_FLAG_OUT_OF_RANGE
    return lab, flags


def _slot_names() -> list[str]:
    names = [""] * N_FEATURES
    bases = {"F_BID_DIST_0": _f.L, "F_ASK_DIST_0": _f.L, "F_BID_SIZE_0": _f.L, "F_ASK_SIZE_0": _f.L,
             "F_RESERVED_0": N_FEATURES - _f.F_RESERVED_0}
    for base, n in bases.items():
        stem, k0 = base[:-2], getattr(_f, base)
        for i in range(n):
            names[k0 + i] = f"{stem}_{i}"
    for name in sorted(n for n in dir(_f) if n.startswith("F_") and n not in bases):
        k = getattr(_f, name)
        if isinstance(k, int) and 0 <= k < N_FEATURES and not names[k]:
            names[k] = name
    return [n or f"slot_{k}" for k, n in enumerate(names)]


SLOT_NAMES = tuple(_slot_names())


def slot_name(k: int) -> str:
    """The feature slot's constant name in ``pipeline.trading.features`` (``F_DEPTH_BID``, ``F_BID_SIZE_3``)."""
    return SLOT_NAMES[k] if 0 <= k < N_FEATURES else f"slot_{k}"
