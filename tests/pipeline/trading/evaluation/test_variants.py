"""Variants: ``NAME=key=value,...`` parsed with the config's defaults, every bad key or value named."""

from __future__ import annotations

import pytest

from pipeline.trading.evaluation.replay import EvaluationError
from pipeline.trading.evaluation.variants import (DEFAULT_CONFIG, DEFAULT_VARIANTS, EVAL_LEAN_LOTS, NEVER_SIDE,
                                                  PipelineConfig, parse_variant, synthetic_params, variant_list)

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
    assert cfg.thresholds == {"buy": 0.55, "sell": 0.6, "emergency": 0.9, "side": NEVER_SIDE}
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
    assert names == list(DEFAULT_VARIANTS) + ["extra"]
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
    ("a=kind=rule,rule=magic", "variant 'a': rule='magic' is not one of hold, imbalance, imbalance_emergency"),
    ("a=kind=onnx,side=0.5", "variant 'a': side=0.5 must be above 0.5"),
    ("a=kind=onnx,quote=2", "variant 'a': quote='2' must be 0 or 1"),
    ("a=kind=onnx,quote=1,quote_lots=0", "variant 'a': quote_lots must be >= 1"),
    ("a=kind=onnx,fast=maybe", "variant 'a': fast='maybe' must be on or off"),
    ("a=kind=random,seed=x", "variant 'a': seed='x' is not a int"),
    ("a=kind=random,llm=1", "variant 'a': unknown key 'llm' for kind=random"),
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


def test_the_quoting_scenario_and_the_controls(cfg):
    """The defaults: the directional model and its three controls, then the quoting scenario with the
    fast path on and off and its two controls; quoting keeps the risk process's lean_lots as it is."""
    assert DEFAULT_VARIANTS == ("model", "hold", "imbalance", "random", "quote-model", "quote-off", "quote-imbalance",
                                "quote-random", "model-depth", "imbalance-depth")
    on, off = parse_variant("quote-model", cfg), parse_variant("quote-off", cfg)
    assert (on.kind, on.quote, on.fast, on.quote_lots, on.lean_lots) == ("onnx", True, True, 1, 3)
    assert (off.kind, off.quote, off.fast) == ("onnx", True, False)
    imb = parse_variant("quote-imbalance", cfg)
    assert (imb.rule, imb.eps, imb.quote) == ("imbalance_emergency", 0.6, True)
    rnd = parse_variant("r=kind=random,quote=1,seed=4,quote_lots=2,side=0.7", cfg)
    assert (rnd.kind, rnd.seed, rnd.quote_lots, rnd.side, rnd.path, rnd.buy) == ("random", 4, 2, 0.7, "m.onnx", 0.55)
    assert parse_variant("random", cfg).seed is None  # the market's seed
    z = parse_variant("z=kind=onnx,quote=1,lean_lots=0", cfg)
    assert z.lean_lots == 0


def test_the_quote_scenario_keeps_a_zero_lean_lots(tmp_path):
    p = tmp_path / "z.toml"
    p.write_text(CONFIG.replace("lean_lots = 3", "lean_lots = 0"))
    cfg = PipelineConfig.load(p)
    assert cfg.lean_lots() == EVAL_LEAN_LOTS and cfg.lean_lots(quote=True) == 0
    assert parse_variant("quote-model", cfg).lean_lots == 0 and parse_variant("model", cfg).lean_lots == 1


def test_the_synthetic_market_comes_from_the_venue_s_param(tmp_path):
    from pipeline.venue.synthetic import CALIBRATED, SyntheticParams

    p = tmp_path / "v.toml"
    p.write_text(CONFIG + '\n[[processes]]\nname = "venue"\nmodule = "procs.venue:VenueAgent"\n'
                          'params = { market = "calibrated" }\n')
    assert PipelineConfig.load(p).market == "calibrated"
    p.write_text(CONFIG)
    assert PipelineConfig.load(p).market == "default"
    assert synthetic_params("calibrated") == CALIBRATED and synthetic_params("default") == SyntheticParams()
    with pytest.raises(EvaluationError, match="market 'real' is not one of calibrated, default"):
        synthetic_params("real")


def test_the_planner_key_picks_the_risk_gateways_planner_and_defaults_to_the_risk_processs(cfg, tmp_path):
    assert cfg.planner == "simple" and parse_variant("m=kind=onnx", cfg).planner == "simple"
    assert parse_variant("m=kind=onnx,planner=depth", cfg).planner == "depth"
    assert parse_variant("model-depth", cfg).planner == "depth" and parse_variant("imbalance-depth", cfg).rule == \
        "imbalance"
    with pytest.raises(EvaluationError, match="'m': planner='fast' must be simple or depth"):
        parse_variant("m=kind=rule,rule=hold,planner=fast", cfg)
    p = tmp_path / "d.toml"
    p.write_text(CONFIG.replace("lean_lots = 3", "lean_lots = 3\n[processes.params.execution]\nplanner = \"depth\""))
    depth_cfg = PipelineConfig.load(p)
    assert depth_cfg.risk_execution == {"planner": "depth"} and parse_variant("hold", depth_cfg).planner == "depth"
