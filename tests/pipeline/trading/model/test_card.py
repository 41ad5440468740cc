"""The model card (pipeline/trading/model/card.py): where it lives, what a written one holds, and the
checks the fast stage runs (tests/procs/test_fast_agent.py runs them through the stage)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from pipeline.trading.features import FEATURE_LAYOUT_VERSION
from pipeline.trading.model.card import (BOUNDS_KEY, CARD_VERSION, META_KEY, CardError, card_path, check_card,
                                         hand_made_card, input_bounds, read_cards, write_card)
from pipeline.trading.model.decide import F32_MAX, InputBounds


def test_the_card_file_sits_beside_the_model():
    assert str(card_path("models/generated/fast.onnx")) == "models/generated/fast.card.json"
    assert card_path("/x/bench-model.onnx").name == "bench-model.card.json"


def test_a_written_card_names_its_model_file_and_its_hash(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"weights")
    card = hand_made_card("hand-set", "a test", extra=1)
    assert card == {"card_version": CARD_VERSION, "kind": "hand-set", "description": "a test",
                    "feature_layout_version": FEATURE_LAYOUT_VERSION,
                    "labels": ["HOLD", "LEAN_BUY", "LEAN_SELL", "EMERGENCY"],
                    BOUNDS_KEY: {"rule": "hand-set: any finite input", "lo": [-F32_MAX] * 128, "hi": [F32_MAX] * 128},
                    "extra": 1}
    path = write_card(model, card)
    assert path == tmp_path / "m.card.json" and not (tmp_path / "m.card.json.tmp").exists()
    doc = json.loads(path.read_text())
    assert doc == {**card, "model_file": {"name": "m.onnx", "sha256": hashlib.sha256(b"weights").hexdigest()}}
    assert check_card(model) == doc


def test_both_cards_are_read_the_file_first_and_each_must_match(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"w")
    embedded = {META_KEY: json.dumps({**hand_made_card("k", "embedded")})}
    assert [w for w, _ in read_cards(model, embedded)] == [f"the card in {str(model)!r}'s ONNX metadata"]
    write_card(model, hand_made_card("k", "file"))
    cards = read_cards(model, embedded)
    assert [c["description"] for _, c in cards] == ["file", "embedded"]
    assert check_card(model, embedded)["description"] == "file"
    stale = {META_KEY: json.dumps({**hand_made_card("k", "old"), "feature_layout_version": FEATURE_LAYOUT_VERSION - 1})}
    with pytest.raises(CardError, match=f"ONNX metadata says feature layout version {FEATURE_LAYOUT_VERSION - 1}, "
                                        f"but this pipeline computes feature layout version {FEATURE_LAYOUT_VERSION}"):
        check_card(model, stale)
    with pytest.raises(CardError, match=r"card file .*m\.card\.json.* says feature layout version "):
        check_card(model, stale, expected_version=FEATURE_LAYOUT_VERSION - 1)  # now the file is the odd one out


@pytest.mark.parametrize("text, why", [
    ("[1, 2]", "is not a JSON object"),
    ('{"feature_layout_version": "1"}', "has no integer feature_layout_version (got '1')"),
    ('{"feature_layout_version": true}', "has no integer feature_layout_version (got True)"),
    ('{"kind": "x"}', "has no integer feature_layout_version (got None)"),
    ("{", "is not valid JSON"),
])
def test_a_malformed_card_is_an_error_naming_where_and_what(tmp_path, text, why):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"w")
    with pytest.raises(CardError) as err:
        check_card(model, {META_KEY: text})
    assert f"the card in {str(model)!r}'s ONNX metadata {why}" in str(err.value)


def test_no_card_at_all_is_refused(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"w")
    with pytest.raises(CardError, match="has no model card"):
        check_card(model, {"labels": "[]"})


def _model(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"w")
    return model


def test_a_card_without_input_bounds_is_refused_like_one_without_a_layout_version(tmp_path):
    model = _model(tmp_path)
    card = hand_made_card("k", "no bounds")
    del card[BOUNDS_KEY]
    with pytest.raises(CardError) as err:
        check_card(model, {META_KEY: json.dumps(card)})
    msg = str(err.value)
    assert f"ONNX metadata has no {BOUNDS_KEY} (the per-feature bounds of its training rows)" in msg
    assert "make model" in msg


@pytest.mark.parametrize("bounds, why", [
    ({"lo": [0.0] * 127, "hi": [1.0] * 128}, f"{BOUNDS_KEY}.lo is not a list of 128 numbers"),
    ({"lo": [0.0] * 128, "hi": ["1"] * 128}, f"{BOUNDS_KEY}.hi is not a list of 128 numbers"),
    ({"lo": [0.0] * 128, "hi": [1.0] * 127 + [-1.0]}, f"{BOUNDS_KEY} has lo > hi (or NaN) at slot 127"),
    ([0, 1], f"has no {BOUNDS_KEY}"),
])
def test_malformed_bounds_are_an_error_naming_what(tmp_path, bounds, why):
    card = {**hand_made_card("k", "bad bounds"), BOUNDS_KEY: bounds}
    with pytest.raises(CardError, match=why.replace("(", r"\(").replace(")", r"\)")):
        check_card(_model(tmp_path), {META_KEY: json.dumps(card)})


def test_a_hand_made_card_carries_given_bounds_which_read_back_as_float32():
    b = InputBounds(np.full(128, -2.5, np.float32), np.full(128, 0.1, np.float32))
    card = json.loads(json.dumps(hand_made_card("k", "given", bounds=b)))
    got = input_bounds(card)
    assert card[BOUNDS_KEY]["rule"] == "hand-set" and np.array_equal(got.lo, b.lo) and np.array_equal(got.hi, b.hi)
    assert got.hi.dtype == np.float32 and got.hi[0] == np.float32(0.1)  # the float32 value itself, exact again
