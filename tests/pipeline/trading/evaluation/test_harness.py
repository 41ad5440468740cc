"""``harness.model_pnl``: a model's P&L and markouts on one fresh synthetic market (what the model's
report calls), the same numbers for the same arguments, every default variant in it, bad requests named."""

from __future__ import annotations

import re

import pytest

from pipeline.trading.evaluation.harness import model_pnl
from pipeline.trading.evaluation.replay import EvaluationError
from pipeline.trading.evaluation.variants import DEFAULT_VARIANTS, REPO


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A hand-set model (leaning and calling EMERGENCY with the imbalance) and configs/default.toml with
    it as the fast process's model."""
    from tests.support.handmodels import imbalance_model

    d = tmp_path_factory.mktemp("h")
    model = imbalance_model(d / "m.onnx", lean=4.0, emergency=(20.0, 12.0), side=6.0)
    text = (REPO / "configs" / "default.toml").read_text()
    line = re.search(r'^params = \{ model_path = "models/generated/fast.onnx".*$', text, re.M).group(0)
    cfg = d / "c.toml"
    cfg.write_text(text.replace(line, f'params = {{ model_path = "{model}" }}'))
    return model, cfg


def test_model_pnl_gives_every_variant_s_pnl_and_markouts_the_same_every_time(setup):
    model, cfg = setup
    th = {"buy": 0.6, "sell": 0.6, "emergency": 0.5, "side": 0.6}
    a = model_pnl(model, seed=9, seconds=120, thresholds=th, config=cfg)
    assert (a["market"], a["seed"], a["maker_fee_bps"], a["taker_fee_bps"]) == ("calibrated", 9, 10.0, 10.0)
    assert 100 < a["span_s"] <= 120 and a["books"] > 0
    assert list(a["variants"]) == list(DEFAULT_VARIANTS)
    on, off = a["variants"]["quote-model"], a["variants"]["quote-off"]
    assert on["counts"]["labels"]["EMERGENCY"] > 0 and off["counts"]["labels"]["EMERGENCY"] == 0
    assert str(model) in on["describe"] and "side 0.6" in on["describe"]
    for row in a["variants"].values():
        assert set(row["markouts"]) == {100, 1000, 5000}
        assert {"net_pnl", "gross_pnl", "fees", "trades", "fill_rate", "emergency_cancelled", "avoided"} <= set(row)
    b = model_pnl(model, seed=9, seconds=120, thresholds=th, config=cfg)
    assert b == a
    c = model_pnl(model, seed=9, seconds=120, thresholds={**th, "emergency": 1.01}, config=cfg)
    assert c["variants"]["quote-model"]["counts"]["labels"]["EMERGENCY"] == 0


def test_model_pnl_names_what_it_cannot_do(setup, tmp_path):
    model, cfg = setup
    with pytest.raises(EvaluationError, match="market 'live' is not one of"):
        model_pnl(model, seed=1, market="live", config=cfg)
    with pytest.raises(EvaluationError, match="seconds must be >= 1"):
        model_pnl(model, seed=1, seconds=0, config=cfg)
    with pytest.raises(EvaluationError, match="does not exist"):
        model_pnl(tmp_path / "none.onnx", seed=1, seconds=10, config=cfg)
