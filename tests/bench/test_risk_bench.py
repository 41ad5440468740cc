"""Smoke test of the risk benchmark: ``python -m bench.risk --quick`` times the pure decision and the
EMERGENCY -> cancel-all path through real venue, risk and sender processes, and reports each figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_quick_run_reports_the_decision_and_the_emergency_path(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.risk", "--quick", "--iterations", "2000", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=140)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    for key in ("approved", "denied", "signal", "emergency", "emergency_spin", "journal"):
        assert 0 < doc[key]["p50_us"] <= doc[key]["p99_us"], (key, doc[key])
    for key in ("emergency", "emergency_spin"):  # default placement, then risk + sender spinning
        assert doc[key]["n"] >= 50, "one cancel-all request per EMERGENCY signal, stamped by the sender"
    assert doc["emergency_spin"]["spin"] is True and doc["emergency"]["spin"] is False
    assert isinstance(doc["target_met"], bool) and isinstance(doc["emergency_target_met"], bool)
    assert (tmp_path / "report.md").read_text().count("target") >= 2
