"""The prompt: a fixed system part framed by the model's own chat template, then a short state line read
from the SIGNAL_CTX and the position; the position's recent moves from the POSITION messages."""

from __future__ import annotations

import pytest

from pipeline.trading import features as F
from pipeline.trading.llm.modelfile import DEFAULT_MODEL, check_model
from pipeline.trading.llm.prompt import (PositionTrack, PositionView, chat_frame, example_signal, plain_frame,
                                         state_text, system_text)
from pipeline.trading.llm.schema import Bounds

B = Bounds(max_position_lots=7, max_offset_ticks=5)
S = 1_000_000_000


def test_the_system_text_carries_the_schema_and_bounds_and_never_changes():
    s = system_text(B)
    assert s == system_text(B) and "act (hold|buy|sell|flatten|cancel)" in s and "-7..7" in s and "0..5" in s
    assert "percent, 0..100" in s
    plain = plain_frame(B)
    assert plain.prefix == s + "\nSTATE\n" and plain.suffix == "\nANSWER " and plain.template == "plain"


def test_the_state_line_shows_signal_mid_spread_imbalance_volatility_position_and_moves():
    """One short line: every word and digit is a token the model evaluates on every decision."""
    sig = example_signal(3, instrument_id=2, feature_seq=9)
    sig["label"], sig["probs"] = 2, [0.1, 0.2, 0.64, 0.06]
    sig["ref_mid"] = 1234.565
    f = sig["features"]
    f[F.F_SPREAD_TICKS], f[F.F_IMBALANCE_5], f[F.F_VOLATILITY_FAST] = 3.0, -0.314, 4.25
    line = state_text(sig, symbol="ETHUSDT", position=PositionView(lots=-3, moves=(-1, 2)), tick_size=0.01)
    assert line == "ETHUSDT lean sell 64% mid 1234.565 spread 3 imb -31 vol 4.2 pos -3 moves -1 +2"
    assert state_text(sig, symbol="ETHUSDT", position=None, tick_size=0.01).endswith(" pos unknown")
    assert state_text(sig, symbol="ETHUSDT", position=4, tick_size=0.01).endswith(" pos +4")  # lots alone: no moves
    for label, word in ((0, "hold 1"), (1, "lean buy 1"), (3, "emergency 9")):
        sig["label"], sig["probs"] = label, [0.01, 0.01, 0.01, 0.97]
        assert state_text(sig, symbol="ETHUSDT", position=0).startswith(f"ETHUSDT {word}")
    sig["ref_mid"] = 2000.0
    assert " mid 2000 " in state_text(sig, symbol="ETHUSDT", position=0, tick_size=0.01)
    assert " mid 2000 " in state_text(sig, symbol="ETHUSDT", position=0)  # no tick size: the number as it is


def test_odd_numbers_do_not_break_the_line():
    sig = example_signal(1)
    sig["features"][F.F_SPREAD_TICKS] = float("nan")
    sig["ref_mid"] = float("inf")
    sig["label"] = 9
    line = state_text(sig, symbol="X", position=None, tick_size=0.1)
    assert "spread nan " in line and "X 9 ? mid nan " in line


def test_the_track_keeps_the_latest_position_and_its_moves_newest_first_within_the_horizon():
    t = PositionTrack(keep=3, horizon_ns=60 * S)
    assert t.view(1, 0) is None and t.lots(1) is None
    t.update(1, 0, 1 * S)  # the first POSITION: a level, not a move
    assert t.view(1, 1 * S) == PositionView(lots=0)
    t.update(1, 2, 2 * S)
    t.update(1, 2, 3 * S)  # the same position again: no move
    t.update(1, 1, 4 * S)
    t.update(2, 5, 4 * S)  # another instrument's are its own
    assert t.view(1, 5 * S) == PositionView(lots=1, moves=(-1, 2))
    for lots, at in ((3, 10), (4, 11), (-4, 12)):
        t.update(1, lots, at * S)
    assert t.view(1, 13 * S) == PositionView(lots=-4, moves=(-8, 1, 2))  # the last three
    assert t.view(1, 71 * S) == PositionView(lots=-4, moves=(-8, 1))  # older than the horizon: gone
    assert t.view(2, 5 * S) == PositionView(lots=5)


SMOLLM_TEMPLATE = check_model(DEFAULT_MODEL, verify_hash=False).chat_template


def test_the_default_model_s_own_template_is_split_around_the_user_s_text():
    frame = chat_frame(SMOLLM_TEMPLATE, B, bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert frame.template == "gguf"
    assert frame.prefix == f"<|im_start|>system\n{system_text(B)}<|im_end|>\n<|im_start|>user\n"
    assert frame.suffix == "<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("template, why", [
    ("{% for m in messages %}{{ m['content'] | upper }}{% endfor %}", "rewrites"),
    ("{% for m in messages %}{{ m['content'] }}{{ m['content'] }}{% endfor %}", "exactly once"),
    ("{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}", "rewrites"),
    ("{{ raise_exception('no system role') }}", "does not render"),
    ("{% for m in messages %", "does not render"),
])
def test_a_template_that_cannot_be_split_is_refused(template, why):
    with pytest.raises(ValueError, match=why):
        chat_frame(template, B)
