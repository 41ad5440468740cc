"""Smoke test of the fast-path benchmark: ``python -m bench.fast --quick`` runs end to end (the
multi-process part included) and reports every figure, each positive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.fast", "--quick", "--out", str(tmp_path),
                           "--model", str(tmp_path / "fast.onnx")],
                          cwd=ROOT, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    for key in ("features", "classifier", "naive_loop", "naive_paced", "end_to_end", "end_to_end_spin", "end_to_end_cold"):
        assert 0 < doc[key]["p50_us"] <= doc[key]["p99_us"], (key, doc[key])
    assert doc["classifier"]["provider"] == "CPUExecutionProvider"
    for key in ("end_to_end", "end_to_end_spin", "end_to_end_cold"):  # default placement, spinning, no keep-warm
        e2e = doc[key]
        assert e2e["signals"] > 50 and 0 < e2e["feed_p50_us"] < e2e["features_p50_us"] < e2e["p50_us"], e2e
    assert doc["end_to_end_spin"]["spin"] is True and doc["e2e_over_naive_paced_p50"] > 0
    assert doc["end_to_end"]["warm"] is True and doc["end_to_end_cold"]["warm"] is False
    assert doc["e2e_cold_over_warm_p50"] > 0
    report = (tmp_path / "report.md").read_text()
    assert report.count("MET") + report.count("MISSED") >= 3
