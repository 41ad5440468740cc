"""The answer's grammar and the validation gate, without a model."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from pipeline.trading.llm.schema import Bounds, Rejected, grammar_text, instruction_bytes, int_range_gbnf, validate
from pipeline.trading.messages import INSTRUCTION_DTYPE, Action

B = Bounds(max_position_lots=10, max_offset_ticks=20, min_ttl_ms=100, max_ttl_ms=10_000)


def as_regex(gbnf_expr: str) -> re.Pattern:
    """Our range expressions use only quoted literals, [x-y] classes, ( | ) groups: map them to a regex."""
    rx = re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), gbnf_expr)
    rx = rx.replace("( ", "(?:").replace(" )", ")").replace(" | ", "|").replace(" ", "")
    return re.compile(f"(?:{rx})\\Z")


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 9), (0, 10), (-10, 10), (100, 10_000), (-5, -2), (7, 7), (13, 987),
                                   (1, 65_535), (0, 20)] + [(a, a + random.Random(a).randint(0, 4000))
                                                            for a in random.Random(3).sample(range(-3000, 3000), 25)])
def test_integer_ranges_match_exactly_the_canonical_integers_in_bounds(lo, hi):
    rx = as_regex(int_range_gbnf(lo, hi))
    for v in list(range(lo - 25, lo + 25)) + list(range(hi - 25, hi + 25)) + random.Random(lo).sample(range(lo, hi + 1), min(200, hi - lo + 1)):
        assert bool(rx.match(str(v))) == (lo <= v <= hi), (lo, hi, v)
    for s in ("-0", "00", "01", "-01", "", "+1", "1.0"):
        assert not rx.match(s), (lo, hi, s)


def test_an_empty_range_is_an_error():
    with pytest.raises(ValueError):
        int_range_gbnf(3, 2)


def test_the_tight_grammar_fixes_the_instrument_and_flatten_means_zero_lots():
    g = grammar_text(B, 7)
    assert r'"{\"inst\":" "7"' in g and r'"\"FLATTEN\",\"lots\":0"' in g and "[A-Z]" not in g
    assert "[A-Z]" in grammar_text(B, 7, loose=True)


GOOD = '{"inst":1,"act":"BUY","lots":3,"off":2,"conf":0.75,"ttl":2000}'


@pytest.mark.parametrize("text,finished,reason", [
    ('{"inst":1,"act":"BUY","lots":3,"off":2,"co', False, "truncated"),
    ('{"inst":1,"act":"BUY","lots":03,"off":2,"conf":0.75,"ttl":2000}', True, "invalid_json"),
    ('[1,2]', True, "wrong_type"),
    ('{"inst":1,"act":"BUY","lots":3,"off":2,"conf":0.75}', True, "missing_field"),
    ('{"inst":1,"act":"BUY","lots":3,"off":2,"conf":0.75,"ttl":2000,"x":1}', True, "unknown_field"),
    ('{"inst":1,"act":"BUX","lots":3,"off":2,"conf":0.75,"ttl":2000}', True, "bad_action"),
    ('{"inst":1,"act":"BUY","lots":11,"off":2,"conf":0.75,"ttl":2000}', True, "out_of_bounds"),
    ('{"inst":1,"act":"BUY","lots":3,"off":-1,"conf":0.75,"ttl":2000}', True, "out_of_bounds"),
    ('{"inst":1,"act":"BUY","lots":3,"off":2,"conf":1.5,"ttl":2000}', True, "out_of_bounds"),
    ('{"inst":1,"act":"BUY","lots":3,"off":2,"conf":0.75,"ttl":99}', True, "out_of_bounds"),
    ('{"inst":1,"act":"BUY","lots":3,"off":2,"conf":0.755,"ttl":2000}', True, "bad_precision"),
    ('{"inst":1,"act":"BUY","lots":"3","off":2,"conf":0.75,"ttl":2000}', True, "wrong_type"),
    ('{"inst":1,"act":"FLATTEN","lots":3,"off":2,"conf":0.75,"ttl":2000}', True, "inconsistent"),
    ('{"inst":2,"act":"BUY","lots":3,"off":2,"conf":0.75,"ttl":2000}', True, "wrong_instrument"),
])
def test_every_kind_of_bad_answer_is_rejected_with_its_reason(text, finished, reason):
    got = validate(text, instrument_id=1, bounds=B, finished=finished)
    assert isinstance(got, Rejected) and got.reason == reason, got


def test_a_good_answer_becomes_the_instruction_layout():
    d = validate(GOOD, instrument_id=1, bounds=B)
    assert not isinstance(d, Rejected) and (d.act, d.lots, d.off, d.conf, d.ttl) == ("BUY", 3, 2, 0.75, 2000)
    r = np.frombuffer(instruction_bytes(d, signal_seq=42, issued_ns=123, instruction_id=9), INSTRUCTION_DTYPE, 1)[0]
    assert (int(r["instrument_id"]), int(r["action"]), int(r["target_lots"]), int(r["limit_offset_ticks"])) == (1, Action.BUY, 3, 2)
    assert (int(r["signal_seq"]), int(r["issued_ns"]), int(r["ttl_ms"]), int(r["instruction_id"])) == (42, 123, 2000, 9)
    assert float(r["confidence"]) == pytest.approx(0.75) and int(r["flags"]) == 0
