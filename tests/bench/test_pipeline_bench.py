"""Smoke test of the pipeline benchmark: one short scenario of ``python -m bench.pipeline`` runs the
whole pipeline as processes and reports every stage from the processes' latency taps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pipeline import default_plan, stress_plan

ROOT = Path(__file__).resolve().parents[2]


def test_the_plans_run_the_hand_set_model_beside_the_shipped_one():
    for plan in (default_plan(True, None), default_plan(False, None)):
        models = {sc.name: sc.model for sc in plan}
        assert "hand-set" in models.values(), models
        assert sum(m == "shipped" for m in models.values()) > sum(m == "hand-set" for m in models.values())
    assert {sc.name: sc.model for sc in default_plan(False, None)}["ring-1k"] == "shipped"
    # stress judges the orders sent under each fault: the clean run with both models, every fault with the
    # hand-set one (the shipped model sends no order at this pace)
    stress = {sc.name: sc.model for sc in stress_plan(None)}
    assert stress.pop("clean") == "shipped" and stress.pop("clean-hand-set") == "hand-set"
    assert stress and set(stress.values()) == {"hand-set"}


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_one_scenario_reports_every_stage_of_the_fast_path(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.pipeline", "--quick", "--only",
                           "ring-1k-no-llm,ring-1k-no-llm-hand-set", "--seconds", "3", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=190)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_pipeline_run(json.loads((tmp_path / "results.json").read_text()), (tmp_path / "report.md").read_text())


def check_pipeline_run(doc: dict, report: str) -> None:
    """What the smoke run must show: results.json as ``doc``, report.md as ``report``. How much went
    through in its 3 s (books a second, samples per stage) is a throughput: the bench's to judge, not
    this check's (a loaded machine passes fewer); here, that every stage measured some."""
    shipped, hand = doc["results"]
    for res in (shipped, hand):
        assert "error" not in res, res
        st = res["stages"]
        for key in ("book", "features", "signal"):
            assert st[key]["n"] > 0 and 0 < st[key]["p50_us"] <= st[key]["p99_us"], (key, st[key])
            assert st[key].get("percentiles") == "HdrHistogram", key
        assert st["book"]["p50_us"] < st["features"]["p50_us"] < st["signal"]["p50_us"], "each stage adds latency"
        assert res["books_per_s"] > 0 and res["drops_total"] == 0
        assert set(res["processes"]) == {"venue", "feed", "features", "fast", "risk", "sender"}
        assert sum(res["labels"].values()) > 0, res["labels"]
        # the file the bench names is the one the fast stage loaded (its own sha256 prefix)
        assert res["model"]["sha256"].startswith(res["model"]["fast_stage_sha256_8"]), res["model"]
    # (the shipped file's sha256 as hashed when the scenario started: `make model` may rewrite it meanwhile)
    sha = shipped["model"]["sha256"]
    assert shipped["model"]["kind"] == "shipped" and shipped["model"]["path"] == "models/generated/fast.onnx"
    assert hand["model"]["kind"] == "hand-set" and hand["labels"]["emergency"] == 0 and hand["labels"]["lean_buy"] > 0
    assert "Verdicts" in report
    assert f"| ring-1k-no-llm | shipped model (make model): models/generated/fast.onnx ({sha}) |" in report
    assert f"| ring-1k-no-llm-hand-set | hand-set MLP (bench only, not shipped): <scenario temp dir>/bench-model.onnx " \
           f"({hand['model']['sha256']}) |" in report
    assert f"Model: shipped model (make model) models/generated/fast.onnx sha256 {sha} (the fast stage reported " \
           f"sha256 {sha[:8]}: the same file)." in report
    assert f"EMERGENCY {shipped['labels']['emergency']:,}" in report
    # the limit, measured in the same run, beside each fast-path figure
    compute = doc["machine"]["limit"]["compute"]
    assert set(compute) == {"feed", "features", "fast", "risk", "sender"} and doc["machine"]["limit"]["floor"]["n"] > 0
    for res in (shipped, hand):
        sig = res["limit"]["signal"]
        assert sig["limit_us"] > 0 and sig["ratio"] == pytest.approx(res["stages"]["signal"]["p50_us"] / sig["limit_us"],
                                                                     abs=0.01)
        # the venue published > 200 books a second: it used CPU, at most every core of the machine
        assert 0 < res["processes"]["venue"]["cpu_pct"] <= 100 * (os.cpu_count() or 1), res["processes"]["venue"]
    assert "## The limit" in report and "signal: p50" in report and "limit = sum of compute + hops x floor" in report
    assert "venue CPU" in report
