"""Fuzzing the decoder and books with hypothesis.

Malformed frames are made by breaking a valid one in exactly one way that the contract forbids
(truncation; a required field deleted; a value of the wrong type; a number string that is not a
plain finite decimal, or a price of 0; an out-of-range int; an unknown channel, action or side; a
level that is not a pair; a non-object). Each must be counted and skipped: ``decode`` returns a
rejection (never OK, never INTERNAL) without raising, ``BitgetBooks.apply`` writes no BOOK and
``fill_trades`` no TRADE. Arbitrary bytes and text get the same guarantees. The converse property
checks the validation is not too strict: random well-formed books15 pushes (prices with trailing
zeros, small and large magnitudes, a checksum) decode and emit exactly their numbers.
"""

from __future__ import annotations

import copy
import json
import os
import re
import zlib
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.trading.bitget.book import Applied, BitgetBooks
from pipeline.trading.bitget.protocol import CHANNELS, FrameKind, Reject, make_decoder
from pipeline.trading.messages import BOOK_DTYPE, BOOK_FLAG_SNAPSHOT, TRADE_DTYPE

# BITGET_FUZZ_EXAMPLES=20000 for a deep run; the default keeps the suite fast.
EXAMPLES = int(os.environ.get("BITGET_FUZZ_EXAMPLES", "1000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

ARG = {"instType": "SPOT", "channel": "books", "instId": "BTCUSDT"}
ENTRY = {"asks": [["100.6", "0.5"], ["100.7", "1"]], "bids": [["100.5", "1.0"], ["100.4", "2"]],
         "checksum": 0, "seq": 10, "ts": "1695710946294"}
BASES = {
    "snapshot": {"action": "snapshot", "arg": ARG, "data": [ENTRY], "ts": 1695710946300},
    "update": {"action": "update", "arg": ARG, "data": [dict(ENTRY, seq=11, pseq=10)], "ts": 1695710946300},
    "books15": {"action": "snapshot", "arg": dict(ARG, channel="books15"), "data": [ENTRY]},
    "trade": {"action": "update", "arg": dict(ARG, channel="trade"), "data": [
        {"ts": "1695709835822", "price": "26293.4", "size": "0.0013", "side": "buy", "tradeId": "1000000000"}]},
    "trade_v1": {"action": "update", "arg": dict(ARG, channel="trade"), "data": [
        ["1649290077777", "0.005613", "890.8", "sell"]]},
}

_VALID_DECIMAL = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?")
BAD_DECIMALS = ["NaN", "nan", "-nan", "inf", "Infinity", "-1", "-0.5", "+1", "1e5", "1E-3", "", " 1", "1 ", "1_0",
                "0x10", "1.2.3", ".", ".5", "5.", "01", "\u0661\u0662", "1,5", "1:5", "9" * 400, "\x00", "null"]
WRONG_TYPES = [None, True, 1, 1.5, [], {}, ["1"], {"a": "1"}]


def bad_decimal_text():
    """Text that is not a plain decimal as the venue writes numbers."""
    return st.one_of(st.sampled_from(BAD_DECIMALS),
                     st.text(max_size=12).filter(lambda s: not _VALID_DECIMAL.fullmatch(s)))


def not_in(allowed):
    return st.one_of(st.text(max_size=12).filter(lambda s: s not in allowed), st.sampled_from(WRONG_TYPES))


# For each base: (path, strategy of bad values). Paths index into the frame object.
def value_mutations(name: str):
    if name.startswith("trade"):
        row = ("data", 0)
        if name == "trade":
            return [
                (row + ("price",), st.one_of(bad_decimal_text(), st.sampled_from(["0", "0.0"] + WRONG_TYPES))),
                (row + ("size",), st.one_of(bad_decimal_text(), st.sampled_from(["0", "0.000"] + WRONG_TYPES))),
                (row + ("side",), not_in({"buy", "sell"})),
                (row + ("ts",), st.sampled_from(BAD_DECIMALS + [None, True, 1.5, [], {}, -1, 2**70])),
                (row + ("tradeId",), st.sampled_from(BAD_DECIMALS[:-2] + [True, 1.5, [], {}, 5, str(2**64)])),
            ]
        return [
            (row + (1,), st.one_of(bad_decimal_text(), st.sampled_from(["0"] + WRONG_TYPES))),
            (row + (2,), st.one_of(bad_decimal_text(), st.sampled_from(["0"] + WRONG_TYPES))),
            (row + (3,), not_in({"buy", "sell"})),
            (row + (0,), st.sampled_from(BAD_DECIMALS + WRONG_TYPES + [-1])),
            (row, st.sampled_from([[], ["1", "1", "buy"], ["1", "1", "1", "buy", "x"], "1,1,1,buy", 5])),
        ]
    entry = ("data", 0)
    return [
        (entry + ("bids", 0, 0), st.one_of(bad_decimal_text(), st.sampled_from(["0", "0.000"] + WRONG_TYPES))),
        (entry + ("asks", 1, 0), st.one_of(bad_decimal_text(), st.sampled_from(["0"] + WRONG_TYPES))),
        (entry + ("bids", 1, 1), st.one_of(bad_decimal_text(), st.sampled_from(WRONG_TYPES))),
        (entry + ("asks", 0, 1), st.one_of(bad_decimal_text(), st.sampled_from(WRONG_TYPES))),
        (entry + ("bids", 0), st.sampled_from([[], ["100.5"], ["100.5", "1", "1"], "100.5", 100.5, None, {}])),
        (entry + ("asks",), st.sampled_from([None, "x", 5, {}, [["1", "1"], "x"]])),
        (entry + ("checksum",), st.sampled_from([None, True, 1.5, "1", [], 2**31, -(2**31) - 1, 2**70, -(2**70)])),
        (entry + ("seq",), st.sampled_from([True, 1.5, [], {}, -1, 2**64, 2**70, "x", "-1", "1.5", ""])),
        (entry + ("ts",), st.sampled_from(BAD_DECIMALS + [None, True, 1.5, [], {}, -1, 2**70])),
        (("data",), st.sampled_from([[], {}, "x", 5, None, [5], [[]]])),
        (("arg",), st.sampled_from([None, "books", 5, [], True])),
        (("arg", "channel"), not_in(CHANNELS)),
        (("arg", "instId"), st.sampled_from(["", None, 5, [], {}])),
        (("action",), not_in({"snapshot", "update"})),
    ]


DELETABLE = {
    "snapshot": [("action",), ("arg",), ("data",), ("arg", "channel"), ("arg", "instId"),
                 ("data", 0, "bids"), ("data", 0, "asks"), ("data", 0, "ts")],
    "trade": [("data", 0, "price"), ("data", 0, "size"), ("data", 0, "side"), ("data", 0, "ts"), ("arg",)],
}
DELETABLE["update"] = DELETABLE["books15"] = DELETABLE["snapshot"]
DELETABLE["trade_v1"] = [("data",), ("arg", "instId"), ("action",)]


def dump(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def put(obj, path, value):
    obj = copy.deepcopy(obj)
    if not path:
        return value
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


def delete(obj, path):
    obj = copy.deepcopy(obj)
    target = obj
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return obj


@st.composite
def malformed_frames(draw) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(BASES)))
    base = BASES[name]
    how = draw(st.sampled_from(["truncate", "value", "delete", "top"]))
    if how == "truncate":
        raw = dump(base)
        return f"{name}/truncate", raw[: draw(st.integers(1, len(raw) - 1))]
    if how == "delete":
        path = draw(st.sampled_from(DELETABLE[name]))
        return f"{name}/delete {path}", dump(delete(base, path))
    if how == "top":
        return f"{name}/top", dump(draw(st.sampled_from([[base], "snapshot", 1, None, [], True])))
    path, values = draw(st.sampled_from(value_mutations(name)))
    value = draw(values)
    return f"{name}/{path}={value!r:.40}", dump(put(base, path, value))


def test_every_base_frame_is_valid_so_each_mutation_is_the_only_fault():
    for name, base in BASES.items():
        for dec in ("msgspec", "orjson"):
            assert make_decoder(dec).decode(dump(base)).reason == Reject.OK, (name, dec)


def _check_skipped(decoder, books, frame, book_out, trade_out):
    before = book_out.tobytes()
    d = decoder.decode(frame)  # must not raise
    assert d.reason != Reject.INTERNAL, d.detail
    code = books.apply(d, book_out)
    n = books.fill_trades(d, trade_out)
    return d, code, n, book_out.tobytes() == before


@pytest.mark.parametrize("decoder_name", ["msgspec", "orjson"])
@FUZZ
@given(case=malformed_frames())
def test_malformed_frames_are_counted_skipped_and_never_make_a_book(decoder_name, case):
    label, frame = case
    decoder = make_decoder(decoder_name)
    books = BitgetBooks({"BTCUSDT": 1})
    book_out = np.full(1, 0, BOOK_DTYPE)
    trade_out = np.zeros(4, TRADE_DTYPE)
    d, code, n, untouched = _check_skipped(decoder, books, frame, book_out, trade_out)
    assert d.reason != Reject.OK, (label, frame[:200])
    assert d.kind in (FrameKind.REJECTED, FrameKind.UNKNOWN), label
    assert decoder.rejects[d.reason] == 1 and sum(decoder.kinds) == 1  # counted
    assert code == Applied.NOT_A_BOOK and untouched and n == 0, label
    assert books.applied[Applied.NOT_A_BOOK] == 1


@pytest.mark.parametrize("decoder_name", ["msgspec", "orjson"])
@FUZZ
@given(frame=st.one_of(st.binary(max_size=400), st.text(max_size=400),
                       st.text(alphabet='{}[]":,0123456789.-eE truefalsn\\u', max_size=200)))
def test_arbitrary_input_never_raises_and_never_makes_a_book(decoder_name, frame):
    decoder = make_decoder(decoder_name)
    books = BitgetBooks({"BTCUSDT": 1})
    book_out = np.zeros(1, BOOK_DTYPE)
    trade_out = np.zeros(4, TRADE_DTYPE)
    d, code, n, untouched = _check_skipped(decoder, books, frame, book_out, trade_out)
    assert code != Applied.EMITTED and untouched and n == 0
    assert sum(decoder.kinds) == sum(decoder.rejects) == 1


# ------------------------------------------------------------------- well-formed books15 pushes


def decimal_text(value: Decimal, extra_zeros: int) -> str:
    text = format(value, "f")
    if extra_zeros:
        text += ("" if "." in text else ".") + "0" * extra_zeros
    return text


@st.composite
def books15_pushes(draw):
    scale = draw(st.sampled_from([Decimal("0.00000001"), Decimal("0.0001"), Decimal("0.1"), Decimal("1")]))
    ticks = draw(st.lists(st.integers(1, 10**6), min_size=0, max_size=30, unique=True))
    sizes = draw(st.lists(st.integers(1, 10**9), min_size=len(ticks), max_size=len(ticks)))
    zeros = draw(st.lists(st.integers(0, 3), min_size=len(ticks), max_size=len(ticks)))
    n_bids = draw(st.integers(0, len(ticks)))
    levels = sorted(zip(ticks, sizes, zeros))
    bids = [[decimal_text(t * scale, z), decimal_text(s * Decimal("0.001"), z)] for t, s, z in levels[:n_bids]][::-1]
    asks = [[decimal_text((t + 10**6) * scale, z), decimal_text(s * Decimal("0.001"), 0)] for t, s, z in levels[n_bids:]]
    return bids[:15], asks[:15]


def reference_checksum(bids, asks) -> int:
    parts = []
    for i in range(25):
        if i < len(bids):
            parts += bids[i]
        if i < len(asks):
            parts += asks[i]
    crc = zlib.crc32(":".join(parts).encode())
    return crc - 2**32 if crc >= 2**31 else crc


@pytest.mark.parametrize("decoder_name", ["msgspec", "orjson"])
@settings(max_examples=max(EXAMPLES // 2, 1), deadline=None, database=None)
@given(push=books15_pushes(), with_checksum=st.booleans())
def test_well_formed_books15_pushes_emit_exactly_their_numbers(decoder_name, push, with_checksum):
    bids, asks = push
    checksum = reference_checksum(bids, asks) if with_checksum else 0
    frame = dump({"action": "snapshot", "arg": dict(ARG, channel="books15"),
                  "data": [{"asks": asks, "bids": bids, "checksum": checksum, "seq": 5, "ts": "1695710946294"}]})
    decoder = make_decoder(decoder_name)
    books = BitgetBooks({"BTCUSDT": 3})
    out = np.zeros(1, BOOK_DTYPE)
    d = decoder.decode(frame)
    assert d.reason == Reject.OK, d.detail
    assert books.apply(d, out) == Applied.EMITTED
    r = out[0]
    assert (r["instrument_id"], r["flags"], r["n_bids"], r["n_asks"], r["seq"]) == (3, BOOK_FLAG_SNAPSHOT, len(bids), len(asks), 5)
    assert r["bid_px"].tolist() == [float(p) for p, _ in bids] + [0.0] * (15 - len(bids))
    assert r["bid_sz"].tolist() == [float(s) for _, s in bids] + [0.0] * (15 - len(bids))
    assert r["ask_px"].tolist() == [float(p) for p, _ in asks] + [0.0] * (15 - len(asks))
    assert r["ask_sz"].tolist() == [float(s) for _, s in asks] + [0.0] * (15 - len(asks))
    assert books.checksums_verified == (1 if checksum else 0)
