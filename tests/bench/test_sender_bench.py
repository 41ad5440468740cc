"""The order sender's journal A/B bench (bench/sender.py): marks matched per ORDER, the bootstrap
interval and its three-valued verdict, and a quick run through the real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.sender import matched, median_diff_ci, verdict
from pipeline.runtime.agent import LatencyTap

ROOT = Path(__file__).resolve().parents[2]


def _tap(rows: list[tuple[int, int, int]]) -> np.ndarray:
    return np.array(rows, dtype=LatencyTap.DTYPE)


def test_marks_are_matched_per_order_by_its_origin_stamp() -> None:
    # (code, lat_ns, at_ns): read marks of origins 1,000 and 2,000; sent marks of 2,000, 1,000 and 9,000
    rec = _tap([(155, 50, 1_050), (155, 70, 2_070), (151, 400, 2_400), (151, 300, 1_300), (151, 10, 9_010)])
    assert matched(rec, 155, 151).tolist() == [330, 250]  # in the order sent; 9,000 was never read


def test_the_verdict_needs_the_whole_interval_on_one_side_of_zero() -> None:
    assert verdict(0.5, 9.0) == "AFTER FASTER"
    assert verdict(-9.0, -0.5) == "AFTER SLOWER"
    assert verdict(-1.0, 1.0) == "INCONCLUSIVE"


def test_the_interval_covers_a_clear_difference_and_straddles_none() -> None:
    rng = np.random.default_rng(7)
    after = rng.normal(100_000, 5_000, 400).astype(np.int64)
    d, lo, hi = median_diff_ci(after + 50_000, after)
    assert 40 < lo <= d <= hi < 60  # µs
    d, lo, hi = median_diff_ci(rng.permutation(after), after)
    assert lo < 0 < hi and verdict(lo, hi) == "INCONCLUSIVE"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_quick_run_reports_both_orderings_and_a_verdict(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.sender", "--quick", "--journal-dir", str(tmp_path / "j"),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=190)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    for arm in ("after_send", "before_send"):
        for key in ("read_to_sent", "written_to_sent"):
            r = doc[arm][key]
            assert r["n"] >= 100 and 0 < r["p50_us"] <= r["p99_us"], (arm, key, r)
    assert doc["after_send"]["sent_to_synced"]["n"] >= 100
    lo, hi = doc["p50_diff_ci95_us"]
    assert lo <= doc["p50_diff_us"] <= hi and doc["verdict"] == verdict(lo, hi)
    assert not list((tmp_path / "j").iterdir())  # the two journals are removed
