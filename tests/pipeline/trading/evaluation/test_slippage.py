"""Slippage against the arrival mid (pipeline/trading/evaluation/slippage.py): signs, size weights, units."""

from __future__ import annotations

import pytest

from pipeline.trading.evaluation.slippage import ArrivalFill, summarize_slippage


def test_a_cost_is_positive_each_way_and_the_mean_is_weighted_by_size():
    fills = [ArrivalFill(1, +1, 100.5, 1.0, 100.0),  # bought 0.5 above the arrival mid: +50 bps, +5 ticks
             ArrivalFill(1, -1, 99.0, 3.0, 100.0),  # sold 1.0 below it: +100 bps, +10 ticks
             ArrivalFill(1, +1, 99.9, 4.0, 100.0)]  # bought 0.1 below it (passive): -10 bps, -1 tick
    s = summarize_slippage(fills, {1: 0.1})
    assert (s["fills"], s["size"], s["unmeasured"]) == (3, 8.0, 0)
    assert s["mean_bps"] == pytest.approx((1 * 50 + 3 * 100 + 4 * -10) / 8)
    assert s["mean_ticks"] == pytest.approx((1 * 5 + 3 * 10 + 4 * -1) / 8)


def test_no_fill_gives_none_and_an_unknown_arrival_is_left_out():
    assert summarize_slippage([], {1: 0.1})["mean_bps"] is None
    s = summarize_slippage([ArrivalFill(1, 1, 100.0, 1.0, 0.0), ArrivalFill(2, 1, 100.0, 1.0, 100.0)], {1: 0.1})
    assert (s["fills"], s["unmeasured"], s["mean_bps"]) == (0, 2, None)
