"""The config rewrites of the chaos scenarios (``bench.chaos.rewrite``) on the bench's own config, or a
ValueError when the text lacks what they rewrite."""

from __future__ import annotations

import pytest

from bench.chaos.rewrite import sender_params


def test_sender_params_rewrites_the_bench_config(tmp_path):
    from bench.pipeline_config import Scenario, config_text
    from pipeline.runtime.config import load_config

    text = sender_params(config_text(Scenario("t", 1000, llm=True), tmp_path, "t"), account_check_ms=0,
                          journal_path=str(tmp_path / "j" / "sender.journal"))
    path = tmp_path / "c.toml"
    path.write_text(text)
    prm = load_config(path).process("sender").params
    assert prm["account_check_ms"] == 0 and prm["journal_path"] == str(tmp_path / "j" / "sender.journal")
    with pytest.raises(ValueError):
        sender_params("[supervisor]\n", account_check_ms=0)


def test_each_rewrite_applies_to_the_bench_config_and_refuses_a_text_without_its_target(tmp_path):
    from bench.chaos.rewrite import (no_emergency, replace_process, set_risk_limits, with_process_lines,
                                     with_ring_capacity)
    from bench.pipeline_config import Scenario, config_text
    from pipeline.runtime.config import parse_config

    text = config_text(Scenario("t", 1000, llm=True), tmp_path, "t")
    text = replace_process(text, "llm", '[[processes]]\nname = "llm"\nmodule = "procs.llm:LlmAgent"\n'
                                        'inputs = ["sig_llm"]\noutputs = ["instr"]\n')
    text = with_ring_capacity(with_process_lines(text, "venue", "heartbeat_timeout_ms = 300000"), "md", 1024)
    text = no_emergency(set_risk_limits(text, 'lean_lots = 0, tif = "GTC"'))
    cfg = parse_config(text)
    assert cfg.process("llm").params == {} and cfg.process("venue").heartbeat_timeout_ms == 300000
    assert next(r for r in cfg.rings if r.name == "md").capacity == 1024
    assert cfg.process("risk").params["limits"] == {"lean_lots": 0, "tif": "GTC"}
    assert cfg.process("fast").params["thresholds"]["emergency"] == 2.0
    for rewrite in (lambda t: replace_process(t, "llm", ""), lambda t: with_ring_capacity(t, "md", 2),
                    lambda t: with_process_lines(t, "venue", "x = 1"), lambda t: set_risk_limits(t, ""), no_emergency):
        with pytest.raises(ValueError):
            rewrite("[supervisor]\n")
