"""Realized volatility of the mid as design document 000 section 3.3 defines it, sans I/O: 5-minute
realized, annualized, from mids sampled on a time grid (not one return per SIGNAL). No clock of its
own: every observation carries its timestamp (the caller's ``ts_ns``, e.g. a SIGNAL's ``ts_origin_ns``).

Grid. Grid points are the multiples of ``grid_ns``; the mid *at* a grid point ``g`` is the latest mid
observed at a time ``<= g`` (a point with no new observation repeats the previous mid: a zero return).
The first grid point after the first observation starts the series; each later one gives one log
return ``r_k = ln(m_k / m_(k-1))``. The estimate uses the last ``n`` returns, ``n`` at most
``window_ns / grid_ns`` (300 at the defaults: 5 minutes of 1 s returns)::

    vol_annualized = sqrt( sum_k r_k^2 * SECONDS_PER_YEAR / (n * grid_s) )

(the variance per second of the window, scaled to a year of ``SECONDS_PER_YEAR`` = 365 x 86,400 s:
the venues trade every day of the year). Until ``min_returns`` returns exist it is 0.0 (not known).

Unit conversion to price units (what the planner's offset and its reprice threshold use): over a
horizon of ``h`` seconds a mid ``m`` moves by one standard deviation of::

    sigma_price(m, h) = m * vol_annualized * sqrt(h / SECONDS_PER_YEAR)

Time running backwards (an observation older than the latest) is ignored, counted in ``stale``.
A non-finite or non-positive mid is ignored, counted in ``rejected``. Nothing here raises after
construction; the constructor raises ``ValueError`` for a grid or window that is not positive or a
window shorter than one grid step.
"""

from __future__ import annotations

import math
from collections import deque

SECONDS_PER_YEAR = 365 * 86_400
NS_PER_S = 1_000_000_000
#: the document's window and this module's default grid step
WINDOW_NS = 300 * NS_PER_S
GRID_NS = NS_PER_S


class RealizedVol:
    """One instrument's grid-sampled realized volatility (module docstring)."""

    __slots__ = ("grid_ns", "n_max", "min_returns", "next_grid_ns", "last_mid", "grid_mid", "r2", "sum_r2",
                 "appended", "stale", "rejected", "latest_ns", "annualized", "_scale")

    def __init__(self, window_ns: int = WINDOW_NS, grid_ns: int = GRID_NS, min_returns: int = 30):
        if grid_ns <= 0 or window_ns < grid_ns:
            raise ValueError(f"grid_ns must be > 0 and window_ns >= grid_ns, got {grid_ns} and {window_ns}")
        self.grid_ns = int(grid_ns)
        self.n_max = int(window_ns // grid_ns)
        self.min_returns = max(1, min(int(min_returns), self.n_max))
        self.next_grid_ns = -1  # -1: no observation yet
        self.last_mid = 0.0
        self.grid_mid = 0.0  # the mid at the latest grid point (0.0: none yet)
        self.r2: deque[float] = deque()
        self.sum_r2 = 0.0
        self.appended = 0
        self.stale = 0
        self.rejected = 0
        self.latest_ns = -1
        self.annualized = 0.0  # ``vol()`` as of the latest grid point (read on the hot path without a call)
        self._scale = SECONDS_PER_YEAR / (self.grid_ns / NS_PER_S)  # a year over one grid step

    # hot path: one call per SIGNAL; between grid points it is two comparisons and two stores
    def update(self, ts_ns: int, mid: float) -> None:
        """Observe ``mid`` at ``ts_ns`` (see the module docstring)."""
        if not (mid > 0.0 and mid < math.inf):
            self.rejected += 1
            return
        if ts_ns < self.latest_ns:
            self.stale += 1
            return
        self.latest_ns = ts_ns
        nxt = self.next_grid_ns
        if nxt < 0:  # the first observation: the first grid point is the next multiple at or after it
            self.next_grid_ns = -(-ts_ns // self.grid_ns) * self.grid_ns
            self.last_mid = mid
            if ts_ns == self.next_grid_ns:
                self._close_points(1, mid)
            return
        if ts_ns < nxt:
            self.last_mid = mid
            return
        # the points strictly before ts_ns take the previous mid; a point exactly at ts_ns takes this one
        before = -(-(ts_ns - nxt) // self.grid_ns)
        if before:
            self._close_points(before, self.last_mid)
        self.last_mid = mid
        if ts_ns == self.next_grid_ns:
            self._close_points(1, mid)

    def _close_points(self, count: int, mid: float) -> None:
        """``count`` consecutive grid points, each with ``mid`` at it."""
        self.next_grid_ns += count * self.grid_ns
        if self.grid_mid <= 0.0:
            self.grid_mid = mid
            count -= 1
            if count == 0:
                return
        r = math.log(mid / self.grid_mid)
        self.grid_mid = mid
        self._append(r * r)
        count -= 1
        for _ in range(min(count, self.n_max)):  # the rest repeat the mid: zero returns
            self._append(0.0)
        n = len(self.r2)
        self.annualized = math.sqrt(max(self.sum_r2, 0.0) * self._scale / n) if n >= self.min_returns else 0.0

    def _append(self, r2: float) -> None:
        q = self.r2
        q.append(r2)
        self.sum_r2 += r2
        if len(q) > self.n_max:
            self.sum_r2 -= q.popleft()
        self.appended += 1
        if self.appended % self.n_max == 0:  # an exact sum now and then: no drift from the running one
            self.sum_r2 = math.fsum(q)

    @property
    def returns(self) -> int:
        """Returns in the window now."""
        return len(self.r2)

    def vol(self) -> float:
        """Annualized realized volatility (a fraction: 0.5 = 50 %); 0.0 before ``min_returns`` returns
        (``annualized``: the same number, kept up to date at each grid point)."""
        return self.annualized

    def sigma_price(self, mid: float, horizon_s: float) -> float:
        """One standard deviation of the mid's move over ``horizon_s`` seconds, price units (module docstring)."""
        return mid * self.vol() * math.sqrt(horizon_s / SECONDS_PER_YEAR)
