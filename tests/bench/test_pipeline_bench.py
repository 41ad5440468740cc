"""Smoke test of the pipeline benchmark: one short scenario of ``python -m bench.pipeline`` runs the
whole pipeline as processes and reports every stage from the processes' latency taps."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pipeline import (MODEL, NEARLY_ALL, VALIDITY_RULE, Scenario, config_text, hdr_summary, labels_line,
                            models_table, stress_section, venue_pacing)
from pipeline.runtime.config import parse_config
from pipeline.venue.orders import DEFAULT_MAX_AWAY_TICKS

ROOT = Path(__file__).resolve().parents[2]


def test_venue_pacing_offers_the_rate_over_the_instruments():
    assert venue_pacing(1_000, 1) == (1, 1.0)
    assert venue_pacing(200, 1) == (5, 1.0)
    assert venue_pacing(1_000, 16) == (16, 1.0)
    assert venue_pacing(20_000, 1) == (1, 20.0)


def test_the_bench_config_is_the_whole_pipeline_and_decodes(tmp_path):
    cfg = parse_config(config_text(Scenario("x", 1_000, instruments=4, transport="zmq"), tmp_path, "bx1"))
    assert [p.name for p in cfg.processes] == ["venue", "feed", "features", "fast", "risk", "sender", "llm"]
    assert cfg.supervisor.transport == "zmq" and len(cfg.instruments) == 4
    no_llm = parse_config(config_text(Scenario("y", 1_000, llm=False), tmp_path, "bx2"))
    assert "llm" not in [p.name for p in no_llm.processes] and no_llm.process("fast").outputs == ["sig_risk"]
    assert cfg.supervisor.launcher == "fork-server"  # the default's, like every placement
    execd = parse_config(config_text(Scenario("z", 1_000, launcher="exec"), tmp_path, "bx3"))
    assert execd.supervisor.launcher == "exec"


def _sha12(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def test_the_bench_runs_the_shipped_model_unless_a_scenario_asks_for_the_hand_set_one(tmp_path):
    shipped = parse_config(config_text(Scenario("s", 1_000), tmp_path / "s", "bs1")).process("fast")
    assert Path(shipped.params["model_path"]) == MODEL
    hand = parse_config(config_text(Scenario("h", 1_000, model="hand-set"), tmp_path / "h", "bs2")).process("fast")
    hand_file = Path(hand.params["model_path"])
    assert hand_file.parent == tmp_path / "h" and _sha12(hand_file) != _sha12(MODEL)
    with pytest.raises(ValueError, match="model must be one of"):
        config_text(Scenario("x", 1_000, model="nosuch"), tmp_path / "x", "bs3")


def test_the_plans_run_the_hand_set_model_beside_the_shipped_one():
    from bench.pipeline import default_plan, stress_plan

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


def test_the_venue_judges_orders_by_its_own_rule_and_the_report_says_what_valid_means(tmp_path):
    venue = parse_config(config_text(Scenario("x", 1_000), tmp_path, "bv1")).process("venue")
    assert venue.params["max_away_ticks"] == DEFAULT_MAX_AWAY_TICKS == 50  # not loosened
    assert f"max_away_ticks = {DEFAULT_MAX_AWAY_TICKS} ticks" in VALIDITY_RULE and "does not cross" in VALIDITY_RULE
    text = "\n".join(stress_section([]))
    assert VALIDITY_RULE in text and "strictly below the best ask" in text and "own side's best price" in text


def _result(name: str, kind: str, labels: dict) -> dict:
    return {"scenario": {"name": name}, "model": {"kind": kind, "path": f"{name}.onnx", "sha256": "abcdef012345"},
            "labels": labels, "stages": {"order_sent": {"n": 0}}}


def test_the_report_counts_each_label_and_says_when_emergency_is_nearly_every_update():
    flood = _result("ring-1k", "shipped", {"hold": 5, "lean_buy": 3, "lean_sell": 2, "emergency": 990})
    line = labels_line(flood)
    assert "EMERGENCY 990" in line and "HOLD 5" in line and "of 1,000 SIGNALs" in line and "99.0 %" in line
    assert "nearly every update" in line
    calm = _result("ring-1k-hand-set", "hand-set", {"hold": 700, "lean_buy": 150, "lean_sell": 150, "emergency": 0})
    assert "nearly every update" not in labels_line(calm) and NEARLY_ALL == 0.9
    rows = models_table([flood, calm])[2:]
    assert "shipped model" in rows[0] and "ring-1k.onnx (abcdef012345)" in rows[0] and "| 990 | 99.0 % |" in rows[0]
    assert "hand-set MLP" in rows[1] and "ring-1k-hand-set.onnx (abcdef012345)" in rows[1]


def test_percentiles_come_from_hdrhistogram():
    ns = list(range(1_000, 1_001_000, 1_000))  # 1 .. 1000 µs
    h = hdr_summary(ns)
    assert h["percentiles"] == "HdrHistogram" and h["n"] == 1000
    assert abs(h["p50_us"] - 500) <= 0.5 and abs(h["p99_us"] - 990) <= 1 and abs(h["max_us"] - 1000) <= 1
    two = hdr_summary([1_000, 2_000])  # a recorded value, not numpy's interpolation (1.5 / 1.99)
    assert (two["p50_us"], two["p99_us"], two["p999_us"]) == (1.0, 2.0, 2.0)
    assert hdr_summary([]) == {"n": 0}


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
    """What the smoke run must show: results.json as ``doc``, report.md as ``report``."""
    shipped, hand = doc["results"]
    for res in (shipped, hand):
        assert "error" not in res, res
        st = res["stages"]
        for key in ("book", "features", "signal"):
            assert st[key]["n"] > 500 and 0 < st[key]["p50_us"] <= st[key]["p99_us"], (key, st[key])
            assert st[key].get("percentiles") == "HdrHistogram", key
        assert st["book"]["p50_us"] < st["features"]["p50_us"] < st["signal"]["p50_us"], "each stage adds latency"
        assert res["books_per_s"] > 200 and res["drops_total"] == 0
        assert set(res["processes"]) == {"venue", "feed", "features", "fast", "risk", "sender"}
        assert sum(res["labels"].values()) > 500, res["labels"]
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
