"""The keep-warm A/B of the pipeline bench (``bench.pipeline_keepwarm``): its plan and the rule fixed
before any run."""

from __future__ import annotations

import numpy as np
import pytest

from bench.pipeline_keepwarm import MIN_SIGNALS, judge, pipeline_cpu_pct, plan


def test_each_rate_runs_warm_cold_cold_warm():
    names = [(s.name, s.rate, s.warm) for s in plan([50, 1000], 4.0, "shipped")]
    assert names == [("kw-50-warm-1", 50, True), ("kw-50-cold-1", 50, False), ("kw-50-cold-2", 50, False),
                     ("kw-50-warm-2", 50, True), ("kw-1000-warm-1", 1000, True), ("kw-1000-cold-1", 1000, False),
                     ("kw-1000-cold-2", 1000, False), ("kw-1000-warm-2", 1000, True)]


def _runs(warm_us, cold_us, n=300, warm2_shift_us=0.0):
    rng = np.random.default_rng(5)
    def lat(level):
        return (rng.normal(level, 10.0, n).clip(1.0) * 1e3).astype(np.int64)
    return {"warm": [lat(warm_us), lat(warm_us + warm2_shift_us)], "cold": [lat(cold_us), lat(cold_us)]}


@pytest.mark.parametrize("warm_us, cold_us, shift, verdict", [
    (100.0, 140.0, 0.0, "KEEP-WARM HELPS"),
    (140.0, 100.0, 0.0, "KEEP-WARM HURTS"),
    (100.0, 140.0, 30.0, "INCONCLUSIVE"),  # the two warm runs differ: drift larger than the effect
])
def test_the_verdict_follows_the_rule_fixed_before_the_run(warm_us, cold_us, shift, verdict):
    f = judge(_runs(warm_us, cold_us, warm2_shift_us=shift))
    assert f["verdict"] == verdict, f
    assert f["n"] == {"warm": 600, "cold": 600}


def test_the_same_latencies_in_both_arms_are_inconclusive():
    runs = _runs(100.0, 100.0)
    runs["cold"] = list(runs["warm"])
    f = judge(runs)
    assert f["verdict"] == "INCONCLUSIVE" and f["d_us"] == 0.0 and f["ci_us"][0] <= 0 <= f["ci_us"][1]


def test_a_run_with_too_few_signals_is_inconclusive():
    runs = _runs(100.0, 300.0)
    runs["cold"][1] = runs["cold"][1][: MIN_SIGNALS - 1]
    assert judge(runs)["verdict"] == "INCONCLUSIVE"


def test_the_pipelines_cpu_leaves_the_venue_out():
    res = {"processes": {"venue": {"cpu_pct": 30.0}, "feed": {"cpu_pct": 10.0}, "fast": {"cpu_pct": 5.5}}}
    assert pipeline_cpu_pct(res) == 15.5
