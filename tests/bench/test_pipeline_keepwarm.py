"""The keep-warm A/B of the pipeline bench (``bench.pipeline_keepwarm``): its plan and the rule fixed
before any run (amended 2026-12-07: intervals over windows, a verdict only clear of the A/A interval)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.pipeline_keepwarm import MIN_SIGNALS, judge, pipeline_cpu_pct, plan, split_windows


def test_each_rate_runs_warm_cold_cold_warm():
    names = [(s.name, s.rate, s.warm) for s in plan([50, 1000], 4.0, "shipped")]
    assert names == [("kw-50-warm-1", 50, True), ("kw-50-cold-1", 50, False), ("kw-50-cold-2", 50, False),
                     ("kw-50-warm-2", 50, True), ("kw-1000-warm-1", 1000, True), ("kw-1000-cold-1", 1000, False),
                     ("kw-1000-cold-2", 1000, False), ("kw-1000-warm-2", 1000, True)]


def _runs(warm_us, cold_us, n=300, warm2_shift_us=0.0, offsets_us=(0.0,) * 6, sd_us=10.0):
    """Two runs an arm, each of ``len(offsets_us)`` windows of n / that many SIGNALs around the arm's
    level, the k-th window moved by ``offsets_us[k]`` (the machine's state over a run)."""
    rng = np.random.default_rng(5)
    def run(level):
        per = n // len(offsets_us)
        return [(rng.normal(level + o, sd_us, per).clip(1.0) * 1e3).astype(np.int64) for o in offsets_us]
    return {"warm": [run(warm_us), run(warm_us + warm2_shift_us)], "cold": [run(cold_us), run(cold_us)]}


@pytest.mark.parametrize("warm_us, cold_us, shift, verdict", [
    (100.0, 140.0, 0.0, "KEEP-WARM HELPS"),
    (140.0, 100.0, 0.0, "KEEP-WARM HURTS"),
    (100.0, 140.0, 30.0, "INCONCLUSIVE"),  # the two warm runs differ: drift larger than the effect
    (100.0, 160.0, 12.0, "KEEP-WARM HELPS"),  # they differ, but by much less than the effect (amended 2026-12-07)
])
def test_the_verdict_follows_the_rule_fixed_before_the_run(warm_us, cold_us, shift, verdict):
    f = judge(_runs(warm_us, cold_us, warm2_shift_us=shift))
    assert f["verdict"] == verdict, f
    assert f["n"] == {"warm": 600, "cold": 600} and f["windows"] == {"warm": [6, 6], "cold": [6, 6]}


def test_windows_whose_states_spread_more_than_the_effect_are_inconclusive():
    # within each run the machine's state moves whole windows by -40 .. +40 µs, both warm runs alike (the
    # A/A control holds 0); cold 8 µs slower: resampling samples as independent resolved it, windows do not
    f = judge(_runs(100.0, 108.0, offsets_us=(-40.0, -20.0, 0.0, 0.0, 20.0, 40.0), sd_us=1.0))
    assert f["verdict"] == "INCONCLUSIVE" and f["ci_us"][0] < 0 < f["ci_us"][1], f


def test_the_same_latencies_in_both_arms_are_inconclusive():
    runs = _runs(100.0, 100.0)
    runs["cold"] = list(runs["warm"])
    f = judge(runs)
    assert f["verdict"] == "INCONCLUSIVE" and f["d_us"] == 0.0 and f["ci_us"][0] <= 0 <= f["ci_us"][1]


def test_a_run_with_too_few_signals_is_inconclusive():
    runs = _runs(100.0, 300.0)
    runs["cold"][1] = [runs["cold"][1][0][: MIN_SIGNALS - 1]]
    assert judge(runs)["verdict"] == "INCONCLUSIVE"


def test_a_run_is_cut_into_windows_of_its_stamps():
    at = np.array([5, 6, 1_000_000_010, 2_500_000_000, 2_600_000_000], np.int64)
    lat = np.arange(5, dtype=np.int64)
    got = split_windows(lat, at, 1.0)
    assert [w.tolist() for w in got] == [[0, 1], [2], [3, 4]]  # from the first stamp; none empty
    assert split_windows(lat[:0], at[:0]) == []


def test_the_pipelines_cpu_leaves_the_venue_out():
    res = {"processes": {"venue": {"cpu_pct": 30.0}, "feed": {"cpu_pct": 10.0}, "fast": {"cpu_pct": 5.5}}}
    assert pipeline_cpu_pct(res) == 15.5
