"""What the benches share (bench/report.py): percentiles come from HdrHistogram, not numpy."""

from __future__ import annotations

import math

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
