"""Smoke test of the fast-path benchmark: ``python -m bench.fast --quick`` runs end to end (the
multi-process part included) and reports every figure, each positive."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fast import MODEL, model_info, percentiles_us

ROOT = Path(__file__).resolve().parents[2]


def test_fast_bench_percentiles_come_from_hdrhistogram():
    r = percentiles_us(list(range(1_000, 1_001_000, 1_000)))  # 1 .. 1000 µs
    assert r.get("percentiles") == "HdrHistogram" and r["n"] == 1000
    assert abs(r["p50_us"] - 500) <= 0.5 and abs(r["p99_us"] - 990) <= 1
    two = percentiles_us([1_000, 2_000])  # a recorded value, not numpy's interpolation (1.5 / 1.99)
    assert (two["p50_us"], two["p99_us"]) == (1.0, 2.0)


def test_the_model_is_named_by_path_and_sha256(tmp_path):
    shipped = model_info(MODEL)
    assert shipped["shipped"] and shipped["path"] == "models/generated/fast.onnx"
    assert shipped["sha256"] == hashlib.sha256(MODEL.read_bytes()).hexdigest()[:12]
    assert shipped["label"] == f"shipped model models/generated/fast.onnx sha256 {shipped['sha256']}"
    other = tmp_path / "m.onnx"
    other.write_bytes(b"x")
    info = model_info(other, "trained by this run")
    assert not info["shipped"] and "model given with --model" in info["label"] and "trained by this run" in info["label"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    # the shipped model (setup makes it; training one here would be most of the test's time), 2 s runs
    proc = subprocess.run([sys.executable, "-m", "bench.fast", "--quick", "--seconds", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_fast_run(json.loads((tmp_path / "results.json").read_text()), (tmp_path / "report.md").read_text(), MODEL)


def check_fast_run(doc: dict, report: str, model: Path) -> None:
    """What the quick run must show: results.json as ``doc``, report.md as ``report``, run on ``model``."""
    for key in ("features", "classifier", "naive_loop", "naive_paced", "end_to_end", "end_to_end_spin", "end_to_end_cold"):
        assert 0 < doc[key]["p50_us"] <= doc[key]["p99_us"], (key, doc[key])
    assert doc["classifier"]["provider"] == "CPUExecutionProvider"
    for key in ("end_to_end", "end_to_end_spin", "end_to_end_cold"):  # default placement, spinning, no keep-warm
        e2e = doc[key]
        assert e2e["signals"] > 50 and 0 < e2e["feed_p50_us"] < e2e["features_p50_us"] < e2e["p50_us"], e2e
    assert doc["end_to_end_spin"]["spin"] is True and doc["e2e_over_naive_paced_p50"] > 0
    assert doc["end_to_end"]["warm"] is True and doc["end_to_end_cold"]["warm"] is False
    assert doc["e2e_cold_over_warm_p50"] > 0
    assert report.count("MET") + report.count("MISSED") >= 3
    for key in ("features", "classifier", "naive_loop", "naive_paced", "end_to_end"):
        assert doc[key].get("percentiles") == "HdrHistogram", key
    sha = hashlib.sha256(model.read_bytes()).hexdigest()[:12]
    assert doc["model"]["sha256"] == sha and doc["model"]["shipped"] and not doc["model"]["built"]
    rows = [line for line in report.splitlines() if line.startswith("| (")]
    assert len(rows) == 7 and "none (no classifier)" in rows[0]
    assert all(f"fast.onnx ({sha})" in row for row in rows[1:]), rows  # every classifier row names the file
    assert f"Model of (b)-(d'): shipped model models/generated/fast.onnx sha256 {sha}." in report
    best = min(doc["end_to_end"]["p50_us"], doc["end_to_end_spin"]["p50_us"])
    assert doc["e2e_best_of_2_p50_us"] == best and f"best of 2 ((d), (d')) p50 {best:.0f} µs (median of the 2: " in report
