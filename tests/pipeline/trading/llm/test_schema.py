"""The answer's grammar, what it forces, and the validation gate, without a model."""

from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest

from pipeline.trading.llm.schema import (ACTION_WORDS, ANSWER_PREFIX, Bounds, Decision, Rejected, forced_text,
                                         grammar_text, instruction_bytes, int_range_gbnf, json_schema,
                                         max_answer_bytes, validate)
from pipeline.trading.messages import INSTRUCTION_DTYPE, Action

B = Bounds(max_position_lots=10, max_offset_ticks=20)


def as_regex(gbnf_expr: str) -> re.Pattern:
    """Our range expressions use only quoted literals, [x-y] classes, ( | ) groups: map them to a regex."""
    rx = re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), gbnf_expr)
    rx = rx.replace("( ", "(?:").replace(" )", ")").replace(" | ", "|").replace(" ", "")
    return re.compile(f"(?:{rx})\\Z")


def grammar_regex(grammar: str) -> re.Pattern:
    """A whole grammar of ours as one regex: quoted literals (with \\" escapes), classes, groups, ``?``,
    ``*`` and rule names, expanded from ``root`` (our grammars are not recursive)."""
    rules = dict(line.split(" ::= ", 1) for line in grammar.strip().splitlines())
    token = re.compile(r'"((?:[^"\\]|\\.)*)"|(\[[^\]]*\])|([()|?*])|([a-z]+)|\s+')

    def expand(expr: str) -> str:
        out = []
        for lit, cls, op, name in token.findall(expr):
            if lit:
                out.append(re.escape(lit.replace('\\"', '"')))
            elif cls:
                out.append(cls)
            elif op:
                out.append({"(": "(?:"}.get(op, op))
            elif name:
                out.append(f"(?:{expand(rules[name])})")
        return "".join(out)

    return re.compile(expand(rules["root"]) + r"\Z")


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 9), (0, 10), (-10, 10), (100, 10_000), (-5, -2), (7, 7), (13, 987),
                                   (1, 65_535), (0, 20), (0, 100)] + [(a, a + random.Random(a).randint(0, 4000))
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


def _answers(bounds: Bounds, rng: random.Random, n: int) -> list[str]:
    """``n`` random answers (after ANSWER_PREFIX) that validate, plus every corner of the bounds."""
    b = bounds
    corners = itertools.product(ACTION_WORDS, (-b.max_position_lots, 0, b.max_position_lots),
                                (0, b.max_offset_ticks), (0, 100))
    out = [f'{a}","pos":{0 if a == "flatten" else p},"off":{o},"conf":{c}}}' for a, p, o, c in corners]
    for _ in range(n):
        a = rng.choice(ACTION_WORDS)
        p = 0 if a == "flatten" else rng.randint(-b.max_position_lots, b.max_position_lots)
        out.append(f'{a}","pos":{p},"off":{rng.randint(0, b.max_offset_ticks)},"conf":{rng.randint(0, 100)}}}')
    return out


def test_the_tight_grammar_accepts_exactly_the_answers_that_validate():
    rx = grammar_regex(grammar_text(B))
    rng = random.Random(5)
    for text in _answers(B, rng, 300):
        assert rx.match(text), text
        assert isinstance(validate(ANSWER_PREFIX + text, instrument_id=1, bounds=B), Decision), text
    bad = ['buy","pos":11,"off":0,"conf":0}', 'buy","pos":3,"off":21,"conf":0}', 'buy","pos":3,"off":0,"conf":101}',
           'flatten","pos":3,"off":0,"conf":5}', 'BUY","pos":3,"off":0,"conf":5}', 'buy","pos":03,"off":0,"conf":5}',
           'buy","pos":3,"off":0,"conf":0.5}', 'buy","pos":3,"off":0,"conf":5,"x":1}']
    for text in bad:
        assert not rx.match(text), text
        assert isinstance(validate(ANSWER_PREFIX + text, instrument_id=1, bounds=B), Rejected), text
    assert not rx.match('buy","pos":-0,"off":0,"conf":5}')  # JSON's -0 means 0 to the gate; the grammar writes 0


def test_the_loose_grammar_lets_through_what_the_gate_must_reject():
    rx = grammar_regex(grammar_text(B, loose=True))
    for text in ('bux","pos":3,"off":0,"conf":5}', 'buy","pos":03,"off":0,"conf":5}', 'buy","pos":99,"off":0,"conf":5}',
                 'buy","pos":3,"off":0,"conf":0.5}', 'buy","pos":3,"off":0,"conf":5,"note":"ok then"}',
                 'flatten","pos":3,"off":0,"conf":5}'):
        assert rx.match(text), text
        assert isinstance(validate(ANSWER_PREFIX + text, instrument_id=1, bounds=B), Rejected), text
    assert rx.match('buy","pos":3,"off":0,"conf":5}')


@pytest.mark.parametrize("bounds", [B, Bounds(max_position_lots=3, max_offset_ticks=0),
                                    Bounds(max_position_lots=1000, max_offset_ticks=500)])
def test_no_tight_answer_is_longer_than_max_answer_bytes_and_the_longest_reaches_it(bounds):
    rx = grammar_regex(grammar_text(bounds))
    answers = _answers(bounds, random.Random(2), 100)
    assert all(len(a) <= max_answer_bytes(bounds) for a in answers if rx.match(a))
    assert max(len(a) for a in answers) == max_answer_bytes(bounds)
    assert max_answer_bytes(B) == 38 < 64  # the default max_tokens holds every answer: none is truncated


@pytest.mark.parametrize("bounds", [B, Bounds(max_position_lots=3, max_offset_ticks=0),
                                    Bounds(max_position_lots=150, max_offset_ticks=7)])
def test_forced_text_is_what_every_answer_has_next_and_leaves_only_the_values_to_choose(bounds):
    """Walk each answer byte by byte as a model would write it, letting ``forced_text`` fill in: what
    it forces is always the answer's own continuation, and what is left to the model is the action
    word, the numbers, and (where a number could go on) the byte that ends it."""
    for text in _answers(bounds, random.Random(9), 300):
        so_far, chosen = "", 0
        while so_far != text:
            forced = forced_text(so_far, bounds)
            if forced:
                assert text[len(so_far):].startswith(forced), (text, so_far, forced)
                so_far += forced
            else:
                so_far += text[len(so_far)]
                chosen += 1
        word = text.split('"', 1)[0]
        values = re.findall(r"-?\d+", text[len(word):])[(word == "flatten"):]  # flatten's pos 0 is forced
        # the model writes the word and each number's bytes, and at most one more byte per number: the
        # one that ends a number that could have gone on (the rest of that literal is forced)
        assert len(word) + sum(map(len, values)) <= chosen <= len(word) + sum(map(len, values)) + len(values), (text, chosen)
        assert forced_text(text, bounds) == ""
    assert forced_text("bu", B) == "" and forced_text("buy", B) == '","pos":'
    assert forced_text('flatten', B) == '","pos":0,"off":'
    assert forced_text('buy","pos":1', B) == ""  # 1 or 10: the model decides
    assert forced_text('buy","pos":10', B) == ',"off":' and forced_text('buy","pos":3,', B) == '"off":'
    assert forced_text('sell","pos":-2,"off":5,"conf":10', B) == ""  # 10 or 100
    assert forced_text('sell","pos":-2,"off":5,"conf":42', B) == "}"
    assert forced_text("nonsense", B) == "" and forced_text('buy","qty":', B) == ""


@pytest.mark.parametrize("text,finished,reason", [
    ('buy","pos":3,"off":2,"co', False, "truncated"),
    ('buy","pos":03,"off":2,"conf":75}', True, "invalid_json"),
    ('buy","pos":3,"off":2,"conf":75}\n\nx', True, "invalid_json"),
    ("[1,2]", True, "wrong_type"),
    ('buy","pos":3,"off":2}', True, "missing_field"),
    ('buy","pos":3,"off":2,"conf":75,"ttl":2000}', True, "unknown_field"),
    ('bux","pos":3,"off":2,"conf":75}', True, "bad_action"),
    ('BUY","pos":3,"off":2,"conf":75}', True, "bad_action"),
    ('buy","pos":11,"off":2,"conf":75}', True, "out_of_bounds"),
    ('buy","pos":3,"off":-1,"conf":75}', True, "out_of_bounds"),
    ('buy","pos":3,"off":2,"conf":101}', True, "out_of_bounds"),
    ('buy","pos":3,"off":2,"conf":0.75}', True, "wrong_type"),
    ('buy","pos":3,"off":2,"conf":75.0}', True, "wrong_type"),
    ('buy","pos":"3","off":2,"conf":75}', True, "wrong_type"),
    ('buy","pos":true,"off":2,"conf":75}', True, "wrong_type"),
    ('flatten","pos":3,"off":2,"conf":75}', True, "inconsistent"),
])
def test_every_kind_of_bad_answer_is_rejected_with_its_reason(text, finished, reason):
    got = validate(text if text.startswith("[") else ANSWER_PREFIX + text, instrument_id=1, bounds=B, finished=finished)
    assert isinstance(got, Rejected) and got.reason == reason, got


def test_a_good_answer_becomes_the_instruction_layout_with_the_signal_s_instrument_and_the_ttl():
    d = validate('{"act":"buy","pos":3,"off":2,"conf":75}', instrument_id=2, bounds=B, ttl_ms=1500)
    assert d == Decision(inst=2, act="BUY", lots=3, off=2, conf=75, ttl=1500)
    r = np.frombuffer(instruction_bytes(d, signal_seq=42, issued_ns=123, instruction_id=9), INSTRUCTION_DTYPE, 1)[0]
    assert (int(r["instrument_id"]), int(r["action"]), int(r["target_lots"]), int(r["limit_offset_ticks"])) == (2, Action.BUY, 3, 2)
    assert (int(r["signal_seq"]), int(r["issued_ns"]), int(r["ttl_ms"]), int(r["instruction_id"])) == (42, 123, 1500, 9)
    assert float(r["confidence"]) == pytest.approx(0.75) and int(r["flags"]) == 0
    for word in ACTION_WORDS:  # every action word maps to its Action
        d = validate(f'{ANSWER_PREFIX}{word}","pos":0,"off":0,"conf":100}}', instrument_id=1, bounds=B)
        r = np.frombuffer(instruction_bytes(d, signal_seq=1, issued_ns=1, instruction_id=1), INSTRUCTION_DTYPE, 1)[0]
        assert int(r["action"]) == Action[word.upper()] and float(r["confidence"]) == 1.0


def test_the_json_schema_states_the_same_bounds():
    s = json_schema(B)
    assert s["required"] == ["act", "pos", "off", "conf"] and s["additionalProperties"] is False
    assert s["properties"]["act"]["enum"] == list(ACTION_WORDS)
    assert (s["properties"]["pos"]["minimum"], s["properties"]["pos"]["maximum"]) == (-10, 10)
    assert s["properties"]["conf"] == {"type": "integer", "minimum": 0, "maximum": 100}
