"""Smoke test of the risk benchmark: ``python -m bench.risk --quick`` times the pure decision and the
EMERGENCY -> cancel-all path through real venue, risk and sender processes, and reports each figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.risk import from_ring
from pipeline.runtime.agent import LatencyTap

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_quick_run_reports_the_decision_and_the_emergency_path(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.risk", "--quick", "--iterations", "2000", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=190)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    for key in ("approved", "denied", "signal", "emergency", "emergency_spin", "emergency_cold", "journal"):
        assert 0 < doc[key]["p50_us"] <= doc[key]["p99_us"], (key, doc[key])
    for key in ("emergency", "emergency_spin", "emergency_cold"):  # default placement, spinning, no keep-warm
        assert doc[key]["n"] >= 50, "one cancel-all request per EMERGENCY signal, stamped by the sender"
        # from the SIGNAL in the ring: each sample at most its latency from origin, the write in between
        assert doc[key]["in_ring"]["n"] == doc[key]["n"]
        assert 0 < doc[key]["in_ring"]["p50_us"] <= doc[key]["p50_us"]
        assert doc[key]["source_write"]["p50_us"] > 0
    assert doc["emergency_spin"]["spin"] is True and doc["emergency"]["spin"] is False
    assert doc["emergency"]["warm"] is True and doc["emergency_cold"]["warm"] is False
    assert doc["emergency_cold_over_warm_p50"] > 0
    assert isinstance(doc["target_met"], bool) and isinstance(doc["emergency_target_met"], bool)
    assert (tmp_path / "report.md").read_text().count("target") >= 2


def _tap(rows: list[tuple[int, int, int]]) -> np.ndarray:
    return np.array(rows, dtype=LatencyTap.DTYPE)


def test_from_ring_matches_each_request_to_its_signal_by_origin() -> None:
    # (code, lat_ns, at_ns): origins 1,000 and 2,000; the second SIGNAL's write ended after its
    # request left (its source descheduled in between): that one keeps its latency from origin
    written = _tap([(199, 30, 1_030), (199, 5_000, 7_000), (199, 20, 9_020)])
    sent = _tap([(113, 100, 1_100), (113, 400, 2_400), (113, 50, 50_050)])  # origin 50,000: no SIGNAL
    lat, in_ring, write = from_ring(sent, written)
    assert lat.tolist() == [100, 400]
    assert in_ring.tolist() == [70, 400]
    assert write.tolist() == [30, 5_000]


def test_from_ring_of_nothing_is_empty() -> None:
    lat, in_ring, write = from_ring(_tap([]), _tap([]))
    assert len(lat) == len(in_ring) == len(write) == 0
