"""The verdict rule over seeds, on hand-made numbers: its three outcomes, what it cannot judge, and the
fast path's verdicts read from results.json market entries."""

from __future__ import annotations

import math

import pytest

from pipeline.trading.evaluation.judgement import (A_BETTER, B_BETTER, INCONCLUSIVE, T_975, fast_path_verdicts,
                                                   paired_verdict, t_975)


def test_t_quantiles_are_the_table_s():
    assert t_975(4) == 2.776 and t_975(1) == 12.706 and t_975(30) == 2.042 and t_975(200) == T_975[-1]
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_975(0)


def test_a_better_when_the_interval_is_above_zero():
    # differences 1, 2, 3, 4, 5: mean 3, sd sqrt(2.5) = 1.5811; half width 2.776 * 1.5811 / sqrt(5) = 1.963
    v = paired_verdict([11, 12, 13, 14, 15], [10, 10, 10, 10, 10])
    assert v["outcome"] == A_BETTER and v["n"] == 5 and v["diffs"] == [1, 2, 3, 4, 5]
    assert v["mean"] == 3 and v["sd"] == pytest.approx(math.sqrt(2.5))
    assert v["ci95"] == pytest.approx([3 - 1.96300, 3 + 1.96300], abs=1e-4)


def test_b_better_when_the_interval_is_below_zero():
    v = paired_verdict([10, 10, 10, 10, 10], [11, 12, 13, 14, 15])
    assert v["outcome"] == B_BETTER and v["ci95"][1] < 0


def test_inconclusive_when_the_interval_holds_zero():
    # differences 3, -1, 2, -2, 1: mean 0.6, sd 2.074; half width 2.575 > 0.6
    v = paired_verdict([3, -1, 2, -2, 1], [0, 0, 0, 0, 0])
    assert v["outcome"] == INCONCLUSIVE and v["ci95"][0] < 0 < v["ci95"][1]
    assert "holds 0" in v["why"]
    # a positive mean alone is not enough: every seed positive but one large outlier widens it
    assert paired_verdict([0.1, 0.1, 0.1, 0.1, 50], [0, 0, 0, 0, 0])["outcome"] == INCONCLUSIVE


def test_what_the_rule_cannot_judge_is_inconclusive_never_a_pass():
    assert paired_verdict([1.0], [0.0])["outcome"] == INCONCLUSIVE  # one seed
    none = paired_verdict([None, 2.0, float("nan")], [1.0, None, 0.0])  # no complete pair
    assert none["n"] == 0 and none["outcome"] == INCONCLUSIVE and none["mean"] is None
    same = paired_verdict([0.5, 0.7, 0.1], [0.5, 0.7, 0.1])
    assert same["outcome"] == INCONCLUSIVE and "never differed" in same["why"]
    with pytest.raises(ValueError, match="a has 2 values but b has 1"):
        paired_verdict([1, 2], [1])


def _market(seed: int, rows: dict) -> dict:
    return {"seed": seed, "variants": [{"name": n, "net_pnl": pnl, "markouts": {1000: {"mean_bps": mk}}}
                                       for n, (pnl, mk) in rows.items()]}


def test_fast_path_verdicts_read_results_and_say_it_in_words():
    markets = [_market(s, {"on": (1.0 + s, -1.0), "off": (0.5 + s, -2.0 - s / 10), "ctl": (5.0, 0.0),
                           "model": (0.1, None), "hold": (0.0, None)}) for s in range(5)]
    v = fast_path_verdicts(markets, on="on", off="off", controls=["ctl"], directional="model",
                           directional_controls=["hold"])
    assert v["net_pnl"]["outcome"] == A_BETTER and v["net_pnl"]["diffs"] == pytest.approx([0.5] * 5)
    assert v["markout_1s_bps"]["outcome"] == A_BETTER
    assert v["statement"].startswith("The fast path EARNS its place") and "reduces adverse selection" in v["statement"]
    assert v["controls"][0]["outcome"] == B_BETTER and v["controls"][0]["b"] == "ctl"
    assert v["directional"][0]["outcome"] == A_BETTER and v["directional"][0]["a_values"] == [0.1] * 5
    assert "risk_adjusted_lift" in v["judged_on"] and "net P&L after fees" in v["judged_on"]
    missing = fast_path_verdicts([_market(1, {"on": (1.0, 1.0)})], on="on", off="off")
    assert missing["net_pnl"]["n"] == 0 and missing["statement"].startswith("The fast path is INCONCLUSIVE")


def test_planner_verdicts_judge_each_depth_variant_against_its_simple_twin_higher_is_better():
    from pipeline.trading.evaluation.judgement import planner_verdicts

    def market(s):
        rows = {"d": {"net_pnl": 1.0 + s, "fill_rate": 0.2, "slippage": {"mean_bps": -5.0 - s}},
                "s": {"net_pnl": 0.5 + s, "fill_rate": 0.4 + s / 100, "slippage": {"mean_bps": -1.0}}}
        return {"seed": s, "variants": [{"name": n, **r} for n, r in rows.items()]}

    markets = [market(s) for s in range(5)]
    v = planner_verdicts(markets, [("d", "s"), ("x", "s")])  # x is in no market: left out
    assert [(c["a"], c["b"], c["measure"].split(" (")[0], c["outcome"]) for c in v] == [
        ("d", "s", "net P&L after fees", A_BETTER), ("d", "s", "fill rate", B_BETTER),
        ("d", "s", "price improvement against the arrival mid", A_BETTER)]  # -5 - s bps costs less than -1
    assert planner_verdicts(markets[:1], [("d", "s")])[0]["outcome"] == INCONCLUSIVE  # one seed cannot judge
