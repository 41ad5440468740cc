"""The pipeline bench's scenario config (``bench.pipeline_config``): the whole pipeline, paced to the
offered rate, running the shipped model unless a scenario asks for the hand-set one."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bench.pipeline_config import MODEL, Scenario, config_text, venue_pacing
from pipeline.runtime.config import parse_config


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
