"""The prompt: a fixed system part, then a compact state block read from the SIGNAL_CTX."""

from __future__ import annotations

from pipeline.trading import features as F
from pipeline.trading.llm.prompt import example_signal, state_block, system_part
from pipeline.trading.llm.schema import Bounds

B = Bounds(max_position_lots=7, max_offset_ticks=5, min_ttl_ms=200, max_ttl_ms=3000)


def test_the_system_part_carries_the_schema_and_bounds_and_never_changes():
    s = system_part(B)
    assert s == system_part(B) and '"act":"HOLD|BUY|SELL|FLATTEN|CANCEL"' in s and "-7..7" in s and "200..3000" in s
    chat = system_part(B, "chatml")
    assert chat.startswith("<|im_start|>system\n") and chat.endswith("<|im_start|>user\n")


def test_the_state_block_shows_levels_spread_imbalance_the_fast_view_and_the_position():
    sig = example_signal(3, instrument_id=2, feature_seq=9)
    sig["features"][F.F_BID_DIST_0] = 0.5
    sig["features"][F.F_BID_SIZE_0] = 1.25
    sig["features"][F.F_IMBALANCE_1] = 0.3
    sig["label"] = 2
    text = state_block(sig, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001, position_lots=-3, bounds=B, levels=2)
    lines = text.splitlines()
    assert lines[0].startswith("inst 2 ETHUSDT tick 0.01 lot 0.001 mid ")
    assert lines[1].startswith("bids 0.5t:1.25 ") and len(lines[1].split()) == 3  # two levels
    assert "imb l1 +0.30" in text and "fast LEAN_SELL" in text and "pos -3 limit 7 lots" in text
    unknown = state_block(sig, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001, position_lots=None, bounds=B)
    assert "pos unknown" in unknown and unknown.endswith("ANSWER ")


def test_odd_numbers_do_not_break_the_block():
    sig = example_signal(1)
    sig["features"][F.F_SPREAD_TICKS] = float("nan")
    sig["label"] = 9
    text = state_block(sig, symbol="X", tick_size=1, lot_size=1, position_lots=None, bounds=B)
    assert "spread nant" in text and "fast 9 " in text
