"""Smoke test of the feed benchmark: ``python -m bench.feed --quick`` runs end to end and reports
every figure the closing note needs, each positive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.feed", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    bg, it = doc["bitget"], doc["itch"]
    for key in ("ours_msgspec", "ours_orjson", "naive"):
        assert 0 < bg[key]["p50_us"] <= bg[key]["p99_us"]
    assert bg["books_written"] > 0
    assert it["vectorized_msg_s"] > 0 and it["baseline_msg_s"] > 0
    # a best-of-N figure is labelled as such, its median beside it
    assert 0 < it["vectorized_msg_s_median"] <= it["vectorized_msg_s"]
    assert 0 < it["stream_book"]["p50_us"] <= it["stream_book"]["p99_us"]
    report = (tmp_path / "report.md").read_text()
    assert "MET" in report or "MISSED" in report
    assert "best of 5 runs" in report and "(median " in report
