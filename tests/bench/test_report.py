"""What the benches share (bench/report.py): percentiles come from HdrHistogram, not numpy; the A/B rule
(``ab_judged``): intervals over windows, a verdict only clear of 0 and of the A/A interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench import report


def test_percentiles_are_recorded_values_from_an_hdr_histogram_not_interpolated():
    got = report.percentiles_us([1_000, 2_000])
    # numpy's percentile would interpolate 1.5 µs; a histogram answers a recorded value (3 significant digits)
    assert got["p50_us"] == pytest.approx(1.0, rel=1e-3) and got["p99_us"] == pytest.approx(2.0, rel=1e-3)
    assert got["n"] == 2 and got["percentiles"] == "HdrHistogram"


def test_no_timing_gives_nan_and_out_of_range_values_are_clipped():
    assert all(math.isnan(v) for v in report.hdr_us([], (50.0, 99.0)))
    assert report.hdr_us([0, 0, 0], (50.0,)) == [pytest.approx(0.001)]  # under 1 ns counts as 1 ns


def test_the_summary_percentiles_come_from_hdrhistogram():
    ns = list(range(1_000, 1_001_000, 1_000))  # 1 .. 1000 µs
    h = report.hdr_summary(ns)
    assert h["percentiles"] == "HdrHistogram" and h["n"] == 1000
    assert abs(h["p50_us"] - 500) <= 0.5 and abs(h["p99_us"] - 990) <= 1 and abs(h["max_us"] - 1000) <= 1
    two = report.hdr_summary([1_000, 2_000])  # a recorded value, not numpy's interpolation (1.5 / 1.99)
    assert (two["p50_us"], two["p99_us"], two["p999_us"]) == (1.0, 2.0, 2.0)
    assert report.hdr_summary([]) == {"n": 0}


# ------------------------------------------------------------------- the A/B rule (amended 2026-12-07, #36)
@pytest.mark.parametrize("ci, aa_ci, verdict", [
    ((5.0, 10.0), (-1.0, 1.0), "A FASTER"),
    ((-10.0, -5.0), (-1.0, 1.0), "B FASTER"),
    ((5.0, 10.0), (1.0, 3.0), "A FASTER"),  # the A/A interval excludes 0, but the effect clears it
    ((-1.0, 5.0), (-1.0, 1.0), "INCONCLUSIVE"),  # holds 0
    ((2.0, 10.0), (-1.0, 3.0), "INCONCLUSIVE"),  # above 0, but overlaps the A/A interval
    ((2.0, 10.0), (-3.0, -1.0), "INCONCLUSIVE"),  # clear of it only because its halves came the other way round
    ((-10.0, -2.5), (-1.0, 3.0), "INCONCLUSIVE"),
    ((5.0, 10.0), (float("nan"), 1.0), "INCONCLUSIVE"),
])
def test_a_verdict_only_when_the_effects_interval_clears_0_and_the_a_a_interval_both_ways_round(ci, aa_ci, verdict):
    got, why = report.ab_verdict(ci, aa_ci, ("A FASTER", "B FASTER"), "d")
    assert got == verdict, why


def _windows(offsets_us, level_us: float, per: int = 400, seed: int = 0) -> list:
    """One window per offset: ``per`` latencies (ns) around ``level_us`` + the offset, 2 µs apart at most:
    a window's samples move together, as a window of one machine state does."""
    rng = np.random.default_rng(seed)
    return [((level_us + o + rng.uniform(-1.0, 1.0, per)) * 1e3).astype(np.int64) for o in offsets_us]


def test_the_interval_resamples_windows_not_the_samples_inside_them():
    # ten windows an arm spread by the machine's state (-40 .. +40 µs); b 8 µs faster in its middle window only
    spread = [-40, -20, 0, 20, 40, -40, -20, 0, 20, 40]
    a, b = _windows(spread, 100.0, seed=1), _windows([o - 8 * (o == 0) for o in spread], 100.0, seed=2)
    d, lo, hi = report.window_diff_ci(a, b)
    assert d == pytest.approx(8e3, abs=1e3) and lo < 0 < hi, (d, lo, hi)  # the windows' spread: it holds 0
    # resampling the samples as independent ones resolves the same 8 µs (what the rule did before)
    assert report.median_diff_ci(np.concatenate(a), np.concatenate(b))[1] > 0
    aa = (a[0::2], a[1::2])  # the same states in each half: the A/A interval holds 0
    got = report.ab_judged(a, b, aa, ("A SLOWER", "A FASTER"), "p50(a) - p50(b)")
    assert got["verdict"] == "INCONCLUSIVE" and got["ci_us"][0] < 0 < got["ci_us"][1], got


def test_a_window_of_one_value_each_is_the_median_of_the_windows_resampled():
    d, lo, hi = report.window_diff_ci([[v] for v in (10.0, 12.0, 14.0)], [[v] for v in (1.0, 2.0, 3.0)])
    assert d == 10.0 and 7.0 <= lo <= d <= hi <= 13.0
    nan = report.window_diff_ci([], [[1.0]])
    assert all(x != x for x in nan)


def test_ab_judged_gives_a_verdict_in_microseconds_and_none_on_one_window():
    a, b = _windows([0, 1, 0, 1, 0, 1], 150.0, seed=3), _windows([0, 1, 0, 1, 0, 1], 100.0, seed=4)
    got = report.ab_judged(a, b, (a[0::2], a[1::2]), ("A SLOWER", "A FASTER"), "d")
    assert got["verdict"] == "A SLOWER" and got["d_us"] == pytest.approx(50.0, abs=1.0), got
    assert got["aa_ci_us"][1] < got["ci_us"][0]
    one = report.ab_judged(a[:1], b, (a[0::2], a[1::2]), ("A SLOWER", "A FASTER"), "d")
    assert one["verdict"] == "INCONCLUSIVE" and "fewer than 2 windows" in one["why"]
