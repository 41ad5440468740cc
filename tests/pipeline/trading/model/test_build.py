"""The fast model's build (pipeline/trading/model/__init__.py, ``python -m pipeline.trading.model``): the
ONNX file (two outputs), its card beside it and inside it (with the input bounds), the readable report;
thresholds from the validation split, held-out figures as deployed against the controls; the input-range
guard at a pace the model never saw; the command line's errors; the shipped model and its config."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from pipeline.trading.features import F_BASIS_AVAILABLE, F_HIDDEN_AVAILABLE, FEATURE_LAYOUT_VERSION, feature_names
from pipeline.trading.messages import Label
from pipeline.trading.model import build, main
from pipeline.trading.model.card import BOUNDS_KEY, META_KEY, card_path, check_card, input_bounds
from pipeline.trading.model.data import HELD_OUT, VALIDATION, TrainParams, generate, synthetic_series
from pipeline.trading.model.evaluation import model_decisions
from pipeline.trading.model.mlp import forward, forward_side
from pipeline.trading.model.thresholds import LEAN_GRID, NEVER, SIDE_GRID, choose_thresholds, validation_rows
from tests.support.paths import REPO_ROOT

#: the default market (a one-tick spread: cheap to step, LEAN and EMERGENCY rows of both kinds), no fee
SMALL = TrainParams(market="default", steps=12_000, paces_ms=(20, 50), pace_shares=(1, 1), warmup_ms=2_000,
                    horizon_ms=500, fee_bps=0.0, emergency_loss_ticks=3.0, epochs=3, market_eval_seeds=(11,),
                    market_eval_seconds=30)
PACES = {"20 ms": (20, 1_500), "1 ms": (1, 2_000)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "fast.onnx"
    return build(out, SMALL, paces=PACES), out


def test_the_model_its_card_and_its_report_are_written_beside_each_other(built):
    import onnxruntime as ort

    m, out = built
    card = json.loads(card_path(out).read_text())
    assert out.with_name("fast.card.json").is_file() and out.with_name("fast.eval.md").is_file()
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    embedded = json.loads(sess.get_modelmeta().custom_metadata_map[META_KEY])
    assert {k: v for k, v in card.items() if k != "model_file"} == embedded == json.loads(json.dumps(m.card))
    assert card["model_file"]["name"] == "fast.onnx"
    assert check_card(out, sess.get_modelmeta().custom_metadata_map) == card  # what the fast stage checks
    assert card["feature_layout_version"] == FEATURE_LAYOUT_VERSION and card["horizon_ms"] == 500
    assert [o.name for o in sess.get_outputs()] == ["probs", "at_risk"]
    assert card["io"]["side_output"]["name"] == "at_risk"
    bounds = input_bounds(card)
    assert (bounds.lo <= bounds.hi).all() and card[BOUNDS_KEY]["rule"].startswith("per slot over the training rows")
    td = card["training_data"]
    assert len(td["sha256"]) == 64 and td["synthetic"]["paces_ms"] == [20, 50] and td["captures"] == []
    assert td["synthetic"]["instruments"] == [{"tick_size": 0.1, "lot_size": 0.0001},
                                              {"tick_size": 0.01, "lot_size": 0.001}]
    assert td["synthetic"]["steps_by_pace"] == {"20ms": 6_000, "50ms": 6_000} and td["synthetic"]["market"] == "default"
    freq = card["labelling"]["label_freq"]["train"]
    assert sum(freq[k] for k in ("HOLD", "LEAN_BUY", "LEAN_SELL", "EMERGENCY")) == pytest.approx(1.0, abs=1e-4)
    assert freq["emergency_bid_side"] > 0 and freq["emergency_ask_side"] > 0
    rows = td["rows"]
    assert rows["train"] > rows["validation"] > 0 and rows["held_out"] > 0 and rows["embargo"] > 0
    text = out.with_name("fast.eval.md").read_text()
    assert "| model (as deployed: thresholds, side, guard) |" in text and "chosen on the validation split" in text
    assert "| random (the model's label rates) |" in text and "| train | " in text and "Input-range guard:" in text
    market = card["evaluation"]["market"]
    assert market["seeds"] == [11] and market["market"] == "default" and market["maker_fee_bps"] == 10.0
    rows = {r["variant"]: r for r in market["rows"]}
    assert {"quote-model", "quote-off", "quote-imbalance", "quote-random", "model", "hold", "imbalance",
            "random"} <= set(rows)
    assert rows["hold"]["fills"] == 0 and rows["quote-off"]["emergency_cancelled"] == 0
    assert "## Trading the market (the offline evaluation)" in text and "| quote-model |" in text
    feat = card["features"]  # the synthetic market has no non-displayed executions and no perpetual
    assert feat["names"] == feature_names() and feat["available_share_train"] == {"hidden_orders": 0.0, "basis": 0.0}
    assert {"HIDDEN_AVAILABLE", "HIDDEN_SHARE", "BASIS_AVAILABLE", "BASIS_Z", "RESERVED_0"} <= set(
        feat["constant_in_training"])
    assert "hidden-order strength available on 0.0%, the spot-perpetual basis on 0.0%" in text
    assert "HIDDEN_AVAILABLE, HIDDEN_VOLUME_RATE, HIDDEN_SHARE, HIDDEN_TO_TOUCH, BASIS_AVAILABLE" in text


def test_rows_with_inputs_the_training_market_never_had_are_held_by_the_guard(built):
    """Trained where no venue reports hidden executions and no pair is configured, the model meets rows
    that have them (an ITCH venue; a spot-perpetual pair): out of range, HOLD."""
    m, _ = built
    th, bounds = m.card["thresholds"], input_bounds(m.card)
    own = synthetic_series(SMALL, 20, 300, seed=99)
    for slot in (F_HIDDEN_AVAILABLE, F_BASIS_AVAILABLE):
        X = own.X.copy()
        X[:, slot] = 1.0
        lab, flags = model_decisions(m, X, th, bounds)
        assert (flags == 8).all() and (lab == Label.HOLD).all()


def test_thresholds_come_from_the_validation_split_and_are_scored_as_deployed(built):
    m, _ = built
    th = m.card["thresholds"]
    assert th["chosen_on"] == "validation" and th["buy"] == th["sell"] and th["buy"] in LEAN_GRID + (NEVER,)
    assert th["emergency"] == NEVER or 0.05 <= th["emergency"] <= 0.99
    assert th["side"] in SIDE_GRID
    if th["lean_bounds_met"]:
        assert max(th["lean_rate_by_series"].values()) <= SMALL.lean_rate_max
        assert th["lean_rate_on_validation"] >= SMALL.lean_rate_min
    ds = generate(SMALL)  # the same rows again (deterministic): the thresholds are those of the validation rows
    va = ds.rows(VALIDATION)
    again = choose_thresholds(forward(m, ds.X[va]).astype(np.float32), validation_rows(ds, va), ds.series[va], SMALL,
                              at_risk=forward_side(m, ds.X[va]).astype(np.float32))
    assert (again["buy"], again["emergency"], again["side"]) == (th["buy"], th["emergency"], th["side"])
    held = m.card["held_out"]["groups"]["synthetic"]
    assert held["rows"] == len(ds.rows(HELD_OUT)) and set(held["predictors"]) == {
        "model", "model_argmax", "always_hold", "imbalance_sign", "random_model_rates"}
    model = held["predictors"]["model"]
    assert model["rate"] == pytest.approx({"HOLD": 1 - sum(v for k, v in model["rate"].items() if k != "HOLD"),
                                           **{k: v for k, v in model["rate"].items() if k != "HOLD"}})
    assert m.card["evaluation"]["non_hold_rate_held_out"] == {k: model["rate"][k]
                                                             for k in ("LEAN_BUY", "LEAN_SELL", "EMERGENCY")}
    assert set(model["ic"]) == {"1000", "5000", "20000"} and model["ic"]["1000"] > 0.05  # the signal ranks the moves
    assert held["predictors"]["model_argmax"]["rate"] != model["rate"]  # the deployed rule is not argmax
    assert set(m.card["evaluation"]["pace_check"]) == {f"{k}, {sym}" for k in PACES for sym in ("BTCUSDT", "ETHUSDT")}
    dep = m.card["deployed_config"]
    assert dep["matches_card"] == all(dep[k] == th[k] for k in ("buy", "sell", "emergency", "side"))


def test_at_a_pace_it_never_saw_the_guard_says_hold_and_at_its_own_the_model_speaks(built):
    """The pipeline bench's symptom, answered: trained at 20 and 50 ms, the model meets 1 ms books (a
    BOOK interval of 1, trade intensity an order of magnitude higher) it was never trained on; the
    input-range guard makes them HOLD with the out-of-range flag instead of a saturated label, while a
    fresh market at a trained pace is nearly all in range."""
    m, _ = built
    th, bounds = m.card["thresholds"], input_bounds(m.card)
    fast = synthetic_series(SMALL, 1, 2_000, seed=99)
    lab, flags = model_decisions(m, fast.X, th, bounds)
    assert (flags & 8 > 0).mean() > 0.95 and (lab[flags & 8 > 0] == Label.HOLD).all()
    own = synthetic_series(SMALL, 20, 2_000, seed=99)
    assert (model_decisions(m, own.X, th, bounds)[1] & 8 > 0).mean() < 0.05
    assert m.card["evaluation"]["pace_check"]["1 ms, ETHUSDT"]["rate"]["OUT_OF_RANGE"] > 0.95
    assert m.card["evaluation"]["pace_check"]["20 ms, ETHUSDT"]["rate"]["OUT_OF_RANGE"] < 0.05  # its units were seen


def test_the_build_is_deterministic(tmp_path):
    p = dataclasses.replace(SMALL, steps=3_000, paces_ms=(1, 20), warmup_ms=500, epochs=1, market_eval_seeds=(3,),
                            market_eval_seconds=10)
    paces = {"x": (20, 100)}
    build(tmp_path / "a.onnx", p, paces=paces)
    build(tmp_path / "b.onnx", p, paces=paces)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    a, b = (json.loads((tmp_path / f"{n}.card.json").read_text()) for n in "ab")
    assert a["model_file"]["sha256"] == b["model_file"]["sha256"] and a == {**b, "model_file": a["model_file"]}


def test_the_command_line_says_what_is_wrong_with_its_input(tmp_path, capsys):
    out = str(tmp_path / "m.onnx")
    assert main(["--out", out, "--steps", "0"]) == 2
    assert "no training data: --steps 0 and no --capture" in capsys.readouterr().err
    bad = tmp_path / "bad.ws"
    bad.write_text("not a capture line\n")
    assert main(["--out", out, "--steps", "0", "--capture", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("python -m pipeline.trading.model: ")
    assert main(["--out", out, "--steps", "0", "--capture", str(tmp_path / "none.ws")]) == 2
    assert "none.ws" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


def test_the_shared_capture_alone_is_too_little_to_train_on_and_joins_a_synthetic_build(tmp_path, capsys,
                                                                                      capture_path):
    out = tmp_path / "m.onnx"
    assert main(["--out", str(out), "--steps", "0", "--capture", str(capture_path)]) == 2
    assert "too little to train on" in capsys.readouterr().err
    p = dataclasses.replace(SMALL, steps=4_000, paces_ms=(20,), pace_shares=(1,), warmup_ms=500, epochs=1,
                            market_eval_seeds=())
    m = build(out, p, (capture_path,), paces={"x": (20, 100)})
    (cap,) = m.card["training_data"]["captures"]
    assert cap["sha256"].startswith("bcdd126a0b38") and cap["instruments"] == 8 and cap["name"] == "BITGET.ws.1.0"
    assert sum(cap["labelled_rows"].values()) > 300
    # every instrument of the capture judged on its held-out rows; an out-of-range row is decided HOLD, so
    # the flagged share and the non-HOLD shares never overlap: together at most all of the rows
    rates = {k: r for k, r in m.card["evaluation"]["rate_by_series_held_out"].items() if k.startswith("capture:")}
    assert len(rates) == cap["instruments"], sorted(rates)
    for name, r in rates.items():
        assert set(r) == {"LEAN_BUY", "LEAN_SELL", "EMERGENCY", "OUT_OF_RANGE"} and min(r.values()) >= 0, (name, r)
        assert r["OUT_OF_RANGE"] + r["LEAN_BUY"] + r["LEAN_SELL"] + r["EMERGENCY"] <= 1 + 1e-9, (name, r)
    assert set(m.card["held_out"]["groups"]) == {"synthetic", "capture:BITGET.ws.1.0"}


SHIPPED_CARD = REPO_ROOT / "models" / "generated" / "fast.card.json"


def test_the_default_config_applies_the_thresholds_the_shipped_model_s_card_chose():
    """configs/default.toml carries the thresholds by hand: after a retrain that chose others, update it."""
    assert SHIPPED_CARD.is_file(), f"{SHIPPED_CARD} missing: `make test` makes it (`make model`)"
    from pipeline.trading.model.evaluation import deployed_thresholds

    card = json.loads(SHIPPED_CARD.read_text())
    th = deployed_thresholds()
    keys = ("buy", "sell", "emergency", "side")
    assert {k: th[k] for k in keys} == {k: card["thresholds"][k] for k in keys}
    assert card["deployed_config"]["matches_card"] is True
    assert card["feature_layout_version"] == FEATURE_LAYOUT_VERSION
    assert card["training_data"]["synthetic"]["market"] == "calibrated"  # `make model` trains on the calibrated market
