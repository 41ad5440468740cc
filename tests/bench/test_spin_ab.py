"""The busy-spin A/B bench (``bench.spin_ab``): windows that rotate through every order, the rule fixed
before the run (median of window p50s, a bootstrap interval over windows, the A/A control d must
clear, the ring's non-inferiority margin), each BOOK matched to the venue's send of its frame, and a quick run through the
real processes whose report has every section and which leaves no segment behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.spin_ab import MIN_WINDOWS, judge, match_sends
from bench.spin_hops import ARMS, window_order, window_p50s

ROOT = Path(__file__).resolve().parents[2]


def test_windows_start_with_a_warm_up_and_give_every_arm_every_place_equally():
    order = window_order(ARMS, 6)
    assert order[0] == "warm-up" and len(order) == 1 + 6 * 3
    rounds = [order[1 + 3 * r: 4 + 3 * r] for r in range(6)]
    assert all(sorted(r) == sorted(ARMS) for r in rounds)
    for place in range(3):  # over 6 rounds each arm is first, second and last twice
        assert sorted(r[place] for r in rounds) == sorted(ARMS * 2)
    assert window_order(("spin", "yield"), 4)[1:] == ["spin", "yield", "yield", "spin", "yield", "spin", "spin", "yield"]


def test_a_window_p50_is_of_the_samples_inside_it_and_a_thin_window_is_left_out():
    at = np.arange(100, dtype=np.int64) * 10
    lat = np.where(at < 500, 10_000, 50_000).astype(np.int64)  # 10 µs in the first half, 50 µs after
    assert window_p50s(lat, at, [(0, 500), (500, 1000), (990, 1000)]) == [pytest.approx(10.0, rel=1e-3),
                                                                           pytest.approx(50.0, rel=1e-3)]


def _p50s(levels: dict[str, float], windows: int = 8, drift_us: float = 0.0) -> dict[str, list[float]]:
    """Windows' p50s around each arm's level; ``drift_us`` added to every other spin window (a machine
    that changes under the A/A halves)."""
    rng = np.random.default_rng(5)
    out = {k: list(rng.normal(v, 2.0, windows)) for k, v in levels.items()}
    out["spin"] = [v + (drift_us if i % 2 else 0.0) for i, v in enumerate(out["spin"])]
    return out


@pytest.mark.parametrize("spin, yld, drift, verdict", [
    (200.0, 50.0, 0.0, "YIELD FASTER"),
    (50.0, 200.0, 0.0, "YIELD SLOWER"),
    (100.0, 100.0, 0.0, "INCONCLUSIVE"),
    (200.0, 50.0, 40.0, "YIELD FASTER"),  # the A/A halves differ by 40 µs, d (~170) clears that (amended 2026-12-07)
    (200.0, 50.0, 300.0, "INCONCLUSIVE"),  # they differ by 300 µs: the machine cannot resolve it
])
def test_the_feed_verdict_follows_the_rule_fixed_before_the_run(spin, yld, drift, verdict):
    j = judge(_p50s({"park": 150.0, "spin": spin, "yield": yld}, drift_us=drift), "spin", "yield")
    assert j["verdict"] == verdict, j
    assert j["windows"] == {"park": 8, "spin": 8, "yield": 8}
    if drift == 0.0:
        assert j["ci_us"][0] <= j["d_us"] <= j["ci_us"][1] and j["aa_ci_us"][0] <= 0 <= j["aa_ci_us"][1]


def test_a_verdict_only_when_d_clears_the_a_a_interval_both_ways_round():
    # (amended 2026-12-07) spin's windows 100 / 160 µs in turn: its A/A halves hold the same values, so
    # the A/A interval holds 0 but spans about +-60 µs; d(spin, yield) ~40 µs lies above 0 yet within it
    p50s = {"park": [150.0] * 8, "spin": [100.0, 160.0, 160.0, 100.0] * 2, "yield": [90.0 + 0.1 * i for i in range(8)]}
    j = judge(p50s, "spin", "yield")
    assert j["ci_us"][0] > 0 and j["aa_ci_us"][0] <= 0 <= j["aa_ci_us"][1], j
    assert j["verdict"] == "INCONCLUSIVE" and "A/A" in j["why"], j


def test_the_ring_is_not_judged_not_worse_when_the_a_a_interval_passes_the_margin():
    # spin's windows 10 / 12 µs in turn (margin 1.1 µs, the A/A interval about +-2 µs): yield at 10.2 µs
    p50s = {"spin": [10.0, 12.0, 12.0, 10.0] * 2, "yield": [10.2] * 8}
    j = judge(p50s, "spin", "yield", margin_share=0.10)
    assert j["ci_us"][0] > -j["margin_us"] and j["verdict"] == "INCONCLUSIVE" and "A/A" in j["why"], j


def test_too_few_windows_is_inconclusive_whatever_the_difference():
    j = judge(_p50s({"park": 1.0, "spin": 900.0, "yield": 10.0}, windows=MIN_WINDOWS - 1), "spin", "yield")
    assert j["verdict"] == "INCONCLUSIVE" and "fewer than" in j["why"]


@pytest.mark.parametrize("spin, yld, verdict", [
    (10.0, 10.2, "NOT WORSE"),  # 0.2 µs slower: inside a margin of 1 µs
    (10.0, 14.0, "WORSE"),  # 4 µs slower: beyond it
    (10.0, 5.0, "NOT WORSE"),  # faster
])
def test_the_ring_hop_is_judged_against_a_margin_of_a_tenth_of_the_spin_hop(spin, yld, verdict):
    p50s = {"spin": [spin + 0.05 * (i % 3) for i in range(8)], "yield": [yld + 0.05 * (i % 3) for i in range(8)]}
    j = judge(p50s, "spin", "yield", margin_share=0.10)
    assert j["verdict"] == verdict, j
    assert j["margin_us"] == pytest.approx(0.1 * np.median(p50s["spin"]), abs=0.01)


def test_each_book_is_matched_to_the_latest_send_of_its_frame_before_the_feed_stamped_it():
    send_ts_ms = np.array([7, 8, 7, 9])  # frame 7 sent twice (a snapshot to a new subscriber, then the push)
    send_ns = np.array([1_000, 2_000, 3_000, 4_000])
    books_ts_ms = np.array([7, 8, 9, 5])
    origin_ns = np.array([3_500, 2_100, 3_900, 9_000])  # frame 9 stamped before its send: no match; 5 never sent
    assert match_sends(books_ts_ms, origin_ns, send_ts_ms, send_ns).tolist() == [3_000, 2_000, -1, -1]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_quick_run_reports_every_measurement_and_leaves_nothing_behind(tmp_path: Path):
    proc = subprocess.Popen([sys.executable, "-m", "bench.spin_ab", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=110)
    assert proc.returncode == 3, out  # quick mode: INCONCLUSIVE by rule
    doc = json.loads((tmp_path / "results.json").read_text())
    feed = doc["feed"]
    assert feed["books"] > 500 and feed["matched"] > 0.9 * feed["books"], feed
    for arm in ARMS:
        pooled = feed["pooled"][arm]
        assert pooled["n"] > 100 and 0 < pooled["full_p50_us"] <= pooled["full_p99_us"], (arm, pooled)
        assert 0 < pooled["stamp_p50_us"] < pooled["full_p99_us"]
    venue = doc["venue"]
    assert venue["frames"] > 500 and all(venue["window_p50_us"][arm] for arm in ARMS), venue
    assert set(doc["ring"]["median_us"]) == {"spin", "yield", "always"} and "verdict" in doc["ring"]["always"]
    assert set(doc["thread"]) == {"100 µs", "5000 µs"}
    judged = [feed["spin_vs_yield"], feed["park_vs_yield"], venue["spin_vs_yield"], venue["park_vs_yield"], doc["ring"],
              doc["ring"]["always"], *doc["thread"].values()]
    assert all(j["verdict"] == "INCONCLUSIVE" for j in judged)
    report = (tmp_path / "report.md").read_text()
    for head in ("## Feed: venue send -> BOOK read by the sink", "## Venue: a depth frame's timestamp -> its send",
                 "## Ring hop, one thread",
                 "## Thread hop: a thread blocked in recv", "d(spin, yield), judged"):
        assert head in report
    pid = proc.pid % 100000
    assert not [e for e in os.listdir("/dev/shm") if e.startswith((f"sa{pid}.", f"sem.sa{pid}.", f"spinab{pid}.",
                                                                   f"sem.spinab{pid}."))]
