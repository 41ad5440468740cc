"""Smoke test of the ring benchmark: ``python -m bench.ring --quick`` runs end to end and reports
every transport with a positive latency p50 (where it measures latency) and a positive throughput
(where it measures throughput: the floor rows measure latency only, the batch row throughput only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_quick_run_reports_every_transport(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ring", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())

    from bench.ring import TRANSPORTS

    assert set(doc["transports"]) == {t.name for t in TRANSPORTS}
    for t in TRANSPORTS:
        got = doc["transports"][t.name]
        assert got["errors"] == [], (t.name, got["errors"])
        if t.burst:
            assert got["msg_per_s"] > 0, t.name
        if t.latency:
            assert got["p50_us"] > 0, t.name
            assert got["p50_us"] <= got["p99_us"] <= got["max_us"], t.name
    assert {t["target"] for t in doc["targets"]} and all(isinstance(t["met"], bool) for t in doc["targets"])
    assert (tmp_path / "report.md").read_text().count("|") > 20
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert "MET" in proc.stdout or "MISSED" in proc.stdout
