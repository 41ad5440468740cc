"""Variants: ``NAME=key=value,...`` parsed with the config's defaults, every bad key or value named."""

from __future__ import annotations

import pytest

from pipeline.trading.evaluation.replay import EvaluationError
from pipeline.trading.evaluation.variants import (DEFAULT_CONFIG, EVAL_LEAN_LOTS, PipelineConfig, parse_variant,
                                                  variant_list)

CONFIG = """
[[processes]]
name = "quick"
module = "procs.fast:FastAgent"
params = { model_path = "m.onnx", thresholds = { buy = 0.55, sell = 0.6, emergency = 0.9 } }

[[processes]]
name = "risk"
module = "procs.risk:RiskAgent"
[processes.params.limits]
lean_lots = 3

[[instruments]]
id = 7
symbol = "XUSDT"
tick_size = 0.5
lot_size = 0.01
"""


@pytest.fixture
def cfg(tmp_path) -> PipelineConfig:
    p = tmp_path / "c.toml"
    p.write_text(CONFIG)
    return PipelineConfig.load(p)


def test_config_gives_the_fast_stage_thresholds_model_and_lean_lots(cfg):
    assert cfg.thresholds == {"buy": 0.55, "sell": 0.6, "emergency": 0.9}
    assert cfg.thresholds_source.endswith("c.toml, process 'quick'")
    assert cfg.model_path == "m.onnx" and cfg.lean_lots() == 3
    assert [(i.id, i.symbol, i.tick_size, i.lot_size) for i in cfg.instruments] == [(7, "XUSDT", 0.5, 0.01)]
    m = parse_variant("model", cfg)
    assert (m.kind, m.path, m.buy, m.sell, m.emergency, m.lean_lots, m.llm) == ("onnx", "m.onnx", 0.55, 0.6, 0.9, 3,
                                                                                False)


def test_the_shipped_config_sets_lean_lots_zero_so_the_evaluation_quotes_one_lot():
    cfg = PipelineConfig.load(DEFAULT_CONFIG)
    assert cfg.risk_limits.get("lean_lots", 0) == 0 or cfg.lean_lots() == cfg.risk_limits["lean_lots"]
    if cfg.risk_limits.get("lean_lots", 0) == 0:
        assert cfg.lean_lots() == EVAL_LEAN_LOTS == 1


def test_keys_and_presets(cfg):
    v = parse_variant("two=kind=onnx,path=x.onnx,buy=0.7,sell=0.8,emergency=1,lean_lots=2,llm=1,llm_model=t.gguf", cfg)
    assert (v.name, v.path, v.buy, v.sell, v.emergency, v.lean_lots, v.llm, v.llm_model) == (
        "two", "x.onnx", 0.7, 0.8, 1.0, 2, True, "t.gguf")
    r = parse_variant("imb=kind=rule,rule=imbalance,depth=1,eps=0.05", cfg)
    assert (r.kind, r.rule, r.depth, r.eps, r.lean_lots) == ("rule", "imbalance", 1, 0.05, 3)
    assert parse_variant("hold", cfg).rule == "hold"
    assert parse_variant("model+llm", cfg).llm is True
    assert parse_variant("off=kind=onnx,emergency=1.01", cfg).emergency == 1.01  # above 1: the label is off
    names = [v.name for v in variant_list(["hold=kind=rule,rule=hold,lean_lots=0", "extra=kind=rule,rule=hold"], cfg)]
    assert names == ["model", "hold", "imbalance", "extra"]
    assert variant_list(["hold=kind=rule,rule=hold,lean_lots=0"], cfg)[1].lean_lots == 0


@pytest.mark.parametrize("text, message", [
    ("a=kind=onnx,colour=red", "variant 'a': unknown key 'colour' for kind=onnx"),
    ("a=kind=rule,rule=hold,buy=0.5", "variant 'a': unknown key 'buy' for kind=rule"),
    ("a=kind=svm", "variant 'a': kind='svm' is not one of"),
    ("a=kind=onnx,buy=high", "variant 'a': buy='high' is not a float"),
    ("a=kind=onnx,buy=-0.5", "variant 'a': buy=-0.5 is not a threshold >= 0"),
    ("a=kind=onnx,sell=nan", "variant 'a': sell=nan is not a threshold >= 0"),
    ("a=kind=onnx,buy=0.5,buy=0.6", "variant 'a': key 'buy' given twice"),
    ("a=kind=onnx,llm=maybe", "variant 'a': llm='maybe' must be 0 or 1"),
    ("a=kind=rule,rule=magic", "variant 'a': rule='magic' is not one of hold, imbalance"),
    ("a=kind=rule,rule=imbalance,depth=4", "depth must be 1, 3, 5, 10 or 15"),
    ("a=kind=rule,rule=hold,lean_lots=-1", "lean_lots must be >= 0"),
    ("a=kind=onnx,path", "variant 'a': 'path' is not key=value"),
    ("=kind=onnx", "no name"),
    ("mystery", "variant 'mystery': no CONFIG and not a preset"),
])
def test_bad_variants_are_named(cfg, text, message):
    with pytest.raises(EvaluationError, match=message.replace("(", r"\(").replace("+", r"\+")):
        parse_variant(text, cfg)


def test_a_variant_given_twice_and_a_bad_config_are_errors(cfg, tmp_path):
    with pytest.raises(EvaluationError, match="variant 'x' given twice"):
        variant_list(["x=kind=rule,rule=hold", "x=kind=rule,rule=hold"], cfg)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[processes]]\nname = "f"\nmodule = "procs.fast:FastAgent"\nparams = { warp = 9 }\n')
    with pytest.raises(EvaluationError, match="warp"):
        PipelineConfig.load(bad)
    with pytest.raises(EvaluationError, match="missing.toml"):
        PipelineConfig.load(tmp_path / "missing.toml")
