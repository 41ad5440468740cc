"""Realized volatility (pipeline/trading/risk/volatility.py): 5-minute realized, annualized, from mids on a
time grid; known series computed by hand, the grid (not one return per observation), the window, gaps,
time running backwards, and the conversion to price units."""

from __future__ import annotations

import math

import pytest

from pipeline.trading.risk.volatility import SECONDS_PER_YEAR, RealizedVol

S = 1_000_000_000


def test_a_known_series_gives_the_hand_computed_annualized_volatility():
    # mids 100, 101, 100, 102 at 0, 1, 2, 3 s on a 1 s grid: returns ln(1.01), ln(100/101), ln(1.02)
    #   = 0.00995033, -0.00995033, 0.01980263; sum of squares = 2 * 0.0000990091 + 0.000392144 = 0.000590162
    #   variance per second = 0.000590162 / 3 s = 0.000196721; x 31,536,000 s a year = 6203.78; sqrt = 78.764
    v = RealizedVol(window_ns=300 * S, grid_ns=S, min_returns=1)
    for t, mid in ((0, 100.0), (1, 101.0), (2, 100.0), (3, 102.0)):
        v.update(t * S, mid)
    assert v.returns == 3
    assert v.vol() == pytest.approx(78.764, rel=1e-4)


def test_sampling_is_on_the_grid_not_one_return_per_observation():
    # a thousand observations inside each second, jittering, give the same estimate as the grid values alone
    grid = RealizedVol(grid_ns=S, min_returns=1)
    noisy = RealizedVol(grid_ns=S, min_returns=1)
    mids = [100.0, 100.5, 99.8, 100.2, 101.0]
    for k, mid in enumerate(mids):
        grid.update(k * S, mid)
        noisy.update(k * S, mid)
        if k + 1 < len(mids):
            for j in range(1, 1000):  # inside (k, k+1): a jitter the grid never sees, back to mid before k+1
                noisy.update(k * S + j * 1_000_000, mid + (0.7 if j % 2 else -0.7) if j < 999 else mid)
    assert noisy.returns == grid.returns == 4
    assert noisy.vol() == pytest.approx(grid.vol(), rel=1e-12) and grid.vol() > 0


def test_the_mid_at_a_grid_point_is_the_latest_observed_at_or_before_it():
    v = RealizedVol(grid_ns=S, min_returns=1)
    v.update(0, 100.0)
    v.update(S // 2, 110.0)  # before the 1 s point: the mid there is 110
    v.update(S, 121.0)  # exactly at the 2nd point: this one counts there
    v.update(2 * S + 1, 121.0)  # 2 s: 121 again
    assert v.returns == 2
    expected = math.sqrt(math.log(1.21) ** 2 * SECONDS_PER_YEAR / 2)  # ln(121/100), then ln(1) = 0, over 2 s
    assert v.vol() == pytest.approx(expected, rel=1e-12)


def test_only_the_last_window_counts_and_a_quiet_gap_brings_zero_returns():
    v = RealizedVol(window_ns=5 * S, grid_ns=S, min_returns=1)
    v.update(0, 100.0)
    v.update(S, 110.0)  # one big return
    assert v.vol() > 0
    v.update(3 * S, 110.0)
    assert v.returns == 3 and v.vol() > 0  # still in the 5 s window
    v.update(20 * S, 110.0)  # 17 more points with the same mid: the big return left the window
    assert v.returns == 5 and v.vol() == 0.0


def test_no_estimate_before_the_warm_up_and_bad_input_is_counted_not_used():
    v = RealizedVol(grid_ns=S, min_returns=3)
    v.update(0, 100.0)
    v.update(S, 101.0)
    v.update(2 * S, 100.0)
    assert v.returns == 2 and v.vol() == 0.0
    v.update(S // 2, 500.0)  # older than the latest: ignored
    v.update(3 * S, float("nan"))
    v.update(3 * S, -1.0)
    assert (v.stale, v.rejected, v.returns) == (1, 2, 2)
    v.update(3 * S, 101.0)
    assert v.returns == 3 and v.vol() > 0


def test_sigma_in_price_units_is_mid_times_vol_times_root_horizon_over_a_year():
    v = RealizedVol(grid_ns=S, min_returns=1)
    v.update(0, 100.0)
    v.update(S, 101.0)
    vol = v.vol()
    assert v.sigma_price(100.0, 1.0) == pytest.approx(100.0 * vol * math.sqrt(1.0 / SECONDS_PER_YEAR))
    # over one grid step the price sigma is the step's own move size: 100 * |ln 1.01| here
    assert v.sigma_price(100.0, 1.0) == pytest.approx(100.0 * math.log(1.01), rel=1e-12)


def test_a_grid_or_window_that_cannot_work_is_refused():
    with pytest.raises(ValueError):
        RealizedVol(grid_ns=0)
    with pytest.raises(ValueError):
        RealizedVol(window_ns=S, grid_ns=2 * S)
