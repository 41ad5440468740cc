"""Slippage against the arrival mid, sans I/O: what each fill cost against the reference mid at the
moment its decision arrived (the parent plan's ``arrival_mid``: the mid of the SIGNAL that made the
LEAN plan, or the latest mid when an INSTRUCTION made it; an order without a plan, a quote, takes the
mid at its submission).

Per fill, in the direction that makes a cost positive (buying above the arrival mid, selling below)::

    slippage_bps   = side * (price - arrival_mid) / arrival_mid * 1e4      side: +1 bought, -1 sold
    slippage_ticks = side * (price - arrival_mid) / tick

``summarize_slippage`` gives their size-weighted means (a passive fill inside the spread is negative:
it earned part of the half-spread), the fills and base size counted; None means with no fill.
"""

from __future__ import annotations

from typing import NamedTuple


class ArrivalFill(NamedTuple):
    """One fill and its parent's arrival mid."""

    instrument_id: int
    side: int  # +1 bought, -1 sold
    price: float
    size: float  # base units, > 0
    arrival_mid: float


def summarize_slippage(fills: list[ArrivalFill], ticks: dict[int, float]) -> dict:
    """``{"fills", "size", "mean_bps", "mean_ticks"}`` over ``fills`` (module docstring); a fill whose
    arrival mid is not positive or whose instrument has no tick is left out (counted in ``unmeasured``)."""
    n = 0
    size = bps = tk = 0.0
    unmeasured = 0
    for f in fills:
        tick = ticks.get(f.instrument_id, 0.0)
        if not (f.arrival_mid > 0 and tick > 0 and f.size > 0):
            unmeasured += 1
            continue
        d = f.side * (f.price - f.arrival_mid)
        n += 1
        size += f.size
        bps += f.size * d / f.arrival_mid * 1e4
        tk += f.size * d / tick
    return {"fills": n, "size": size, "mean_bps": bps / size if size else None,
            "mean_ticks": tk / size if size else None, "unmeasured": unmeasured}
