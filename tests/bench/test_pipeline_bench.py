"""Smoke test of the pipeline benchmark: one short scenario of ``python -m bench.pipeline`` runs the
whole pipeline as processes and reports every stage from the processes' latency taps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pipeline import Scenario, config_text, venue_pacing
from pipeline.config import parse_config

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


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_one_scenario_reports_every_stage_of_the_fast_path(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.pipeline", "--quick", "--only", "ring-1k-no-llm", "--seconds",
                           "3", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=140)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    (res,) = doc["results"]
    assert "error" not in res, res
    st = res["stages"]
    for key in ("book", "features", "signal"):
        assert st[key]["n"] > 500 and 0 < st[key]["p50_us"] <= st[key]["p99_us"], (key, st[key])
    assert st["book"]["p50_us"] < st["features"]["p50_us"] < st["signal"]["p50_us"], "each stage adds latency"
    assert res["books_per_s"] > 200 and res["drops_total"] == 0
    assert set(res["processes"]) == {"venue", "feed", "features", "fast", "risk", "sender"}
    assert "Verdicts" in (tmp_path / "report.md").read_text()
