"""The msgspec decoder's books1/5/15 fast path (``MsgspecDecoder.decode`` -> ``_fast_snapshot``)
and the inlined books15 branch of ``BitgetBooks.apply``: same results as the full typed decode on
every frame, good or malformed (same kind, reason, values and BOOK bytes), and it is really taken."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.bitget.book import Applied, BitgetBooks, bitget_checksum
from pipeline.trading.bitget.protocol import FrameKind, MsgspecDecoder, OrjsonDecoder, Reject
from pipeline.trading.messages import BOOK_DTYPE

from tests.support.frames import depth_frame, dumps

BIDS = [["100.5", "1.25"], ["100.4", "0"], ["100", "3"], ["99.90", "0.0100"]]
ASKS = [["100.6", "2"], ["100.75", "0.5"], ["101", "0"]]
IDS = {"BTCUSDT": 7}


def _frame(bids=BIDS, asks=ASKS, **kw):
    kw.setdefault("channel", "books15")
    kw.setdefault("seq", 42)
    return depth_frame(bids, asks, **kw)


def _typed(frame):
    """The full typed decode, as the fast path's reference."""
    return MsgspecDecoder()._decode_typed(frame)


def _summary(d):
    out = [d.kind, d.reason, d.channel, d.inst_type, d.inst_id, d.snapshot]
    for lv in d.books or ():
        out.append((lv.bid_px, lv.bid_sz, lv.bid_lv, lv.ask_px, lv.ask_sz, lv.ask_lv, lv.checksum, lv.seq, lv.pseq,
                    lv.ts_ms))
    return out


def _book_bytes(frame, decoder):
    out = np.zeros(1, BOOK_DTYPE)
    books = BitgetBooks(IDS)
    code = books.apply(decoder.decode(frame), out)
    return code, out.tobytes(), books


@pytest.mark.parametrize("channel", ["books1", "books5", "books15"])
@pytest.mark.parametrize("as_text", [False, True])
def test_fast_path_is_taken_and_matches_the_typed_decode(channel, as_text):
    frame = _frame(channel=channel)
    if as_text:
        frame = frame.decode()
    dec = MsgspecDecoder()
    d = dec.decode(frame)
    assert d.books[0]._raw is not None and d.books[0]._bid_lv is None  # the fast path built it
    assert _summary(d) == _summary(_typed(frame)) == _summary(OrjsonDecoder().decode(frame))
    assert d.books[0].bid_lv == ["100.5:1.25", "100.4:0", "100:3", "99.90:0.0100"]  # original strings
    assert dec.kinds[FrameKind.SNAPSHOT] == 1 and dec.rejects[Reject.OK] == 1


def test_fast_path_book_payload_equals_the_orjson_decoder_one():
    frame = _frame()
    code, fast, books = _book_bytes(frame, MsgspecDecoder())
    code2, ref, _ = _book_bytes(frame, OrjsonDecoder())
    assert code == code2 == Applied.EMITTED and fast == ref
    rec = np.frombuffer(fast, BOOK_DTYPE)[0]
    assert (rec["n_bids"], rec["n_asks"]) == (3, 2)  # size-0 levels left out
    book = books.book("books15", "BTCUSDT")
    assert book.bids() == [("100.5", "1.25"), ("100", "3"), ("99.90", "0.0100")]
    assert book.asks() == [("100.6", "2"), ("100.75", "0.5")]


def test_fast_path_verifies_a_non_zero_checksum():
    good = bitget_checksum(BIDS, ASKS)
    assert _book_bytes(_frame(checksum=good), MsgspecDecoder())[0] == Applied.EMITTED
    code, payload, books = _book_bytes(_frame(checksum=good ^ 1), MsgspecDecoder())
    assert code == Applied.CHECKSUM_MISMATCH and payload == bytes(BOOK_DTYPE.itemsize)
    assert books.checksum_mismatches == 1


def test_fast_path_drops_a_stale_push():
    dec, books, out = MsgspecDecoder(), BitgetBooks(IDS), np.zeros(1, BOOK_DTYPE)
    assert books.apply(dec.decode(_frame(seq=9)), out) == Applied.EMITTED
    assert books.apply(dec.decode(_frame(seq=8)), out) == Applied.STALE
    assert books.apply(dec.decode(_frame(seq=10)), out) == Applied.EMITTED


def _levels_frame(bids_json: str, asks_json: str = '[["100.6","2"]]', **extra) -> bytes:
    entry = '{"asks":%s,"bids":%s,"checksum":%s,"seq":%s,"ts":%s}' % (
        asks_json, bids_json, extra.get("checksum", "0"), extra.get("seq", "42"), extra.get("ts", '"1695710946294"'))
    return ('{"action":"snapshot","arg":{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"},'
            '"data":[%s],"ts":%s}' % (entry, extra.get("top_ts", "1695710946300"))).encode()


BAD_NUMBERS = ["01", "1.", ".5", "1e5", "NaN", "nan", "inf", "-1", " 1", "1_0", "", ".", "1.2.3", "1" * 400,
               "18446744073709551616", "0", "0.0", "+1", "0x10"]


@pytest.mark.parametrize("bad", BAD_NUMBERS)
@pytest.mark.parametrize("where", ["bid_px", "bid_sz", "ask_px", "ask_sz"])
def test_bad_number_strings_give_the_typed_verdict(bad, where):
    bids = [["100.5", "1"], ["100.4", "2"]]
    asks = [["100.6", "1"], ["100.7", "2"]]
    side, i = (bids, 0) if where.startswith("bid") else (asks, 1)
    side[i][0 if where.endswith("px") else 1] = bad
    frame = dumps({"action": "snapshot", "arg": {"instType": "SPOT", "channel": "books15", "instId": "BTCUSDT"},
                   "data": [{"asks": asks, "bids": bids, "checksum": 0, "seq": 1, "ts": "1695710946294"}]})
    _assert_same_as_typed(frame)


MALFORMED = [
    _levels_frame('[["100.5","1"],["100.6","1"]]'),  # bids ascending
    _levels_frame('[["100.5","1"]]', '[["100.7","1"],["100.6","1"]]'),  # asks descending
    _levels_frame('[["100.5","1"],["100.5","2"]]'),  # duplicate price
    _levels_frame('[["100.5","1"],["100.50","2"]]'),  # the same price written twice
    _levels_frame('[["100.7","1"]]'),  # crossed: valid, taken the full way
    _levels_frame('[["0","1"]]'),  # zero price
    _levels_frame('[[100.5,1]]'),  # numbers, not strings
    _levels_frame('[["100.5",1]]'),
    _levels_frame('[["100.5","1","2"]]'),  # three strings
    _levels_frame('[["100.5"]]'),
    _levels_frame('[["100.5"],["100.4","1","2"]]'),  # level sizes 1 and 3 (counts alone would pass)
    _levels_frame('[["100.5","1"]]', '[["100.6","2"],["100.7"]]'),
    _levels_frame('[[["100.5"],"1"]]'),
    _levels_frame('[["[1]","1"]]'),
    _levels_frame('[["100.5","1"]]', "null"),
    _levels_frame("null"),
    _levels_frame("[]"),  # an empty side: valid, the full way
    _levels_frame('{"a":1}'),
    _levels_frame('"[[\\"1\\",\\"2\\"]]"'),
    _levels_frame('[["100.5", "1"]]'),  # whitespace: valid, the full way
    _levels_frame('[ ["100.5","1"]]'),
    _levels_frame('[["100.5","1"]]', checksum="2147483648"),
    _levels_frame('[["100.5","1"]]', checksum="-2147483649"),
    _levels_frame('[["100.5","1"]]', checksum='"5"'),
    _levels_frame('[["100.5","1"]]', checksum="1.5"),
    _levels_frame('[["100.5","1"]]', seq="-1"),
    _levels_frame('[["100.5","1"]]', seq="18446744073709551616"),
    _levels_frame('[["100.5","1"]]', seq='"012"'),
    _levels_frame('[["100.5","1"]]', seq='"12"'),
    _levels_frame('[["100.5","1"]]', seq="null"),
    _levels_frame('[["100.5","1"]]', ts='"0"'),
    _levels_frame('[["100.5","1"]]', ts='"01"'),
    _levels_frame('[["100.5","1"]]', ts='"18446744073710"'),  # * 1e6 overflows the u64
    _levels_frame('[["100.5","1"]]', ts='"99999999999999999999"'),
    _levels_frame('[["100.5","1"]]', ts='"1e3"'),
    _levels_frame('[["100.5","1"]]', ts='"\u0661"'),
    _levels_frame('[["100.5","1"]]', ts="1695710946294"),
    _levels_frame('[["100.5","1"]]', ts="null"),
    _levels_frame('[["100.5","1"]]', top_ts='"x"'),  # a wrong type elsewhere in the envelope
    _levels_frame('[["100.5","1"]]')[:-3],  # truncated
    _levels_frame('[["100.5","1"]]') + b"x",  # trailing bytes
    _levels_frame('[' + ",".join('["%d","1"]' % (200 - i) for i in range(30)) + ']'),  # 30 levels: the full way
    _levels_frame('[["100.5","1"]]').replace(b'"action":"snapshot"', b'"action":"upsert"'),
    _levels_frame('[["100.5","1"]]').replace(b'"action":"snapshot"', b'"action":"update"'),
    _levels_frame('[["100.5","1"]]').replace(b'"instId":"BTCUSDT"', b'"instId":""'),
    _levels_frame('[["100.5","1"]]').replace(b'"data":[{', b'"data":[{"price":5,'),
    _levels_frame('[["100.5","1"]]').replace(b'"data":[{', b'"event":5,"data":[{'),
    _levels_frame('[["100.5","1"]]').replace(b'}],"ts"', b'},{"asks":[],"bids":[],"ts":"1"}],"ts"'),
]


@pytest.mark.parametrize("frame", MALFORMED, ids=range(len(MALFORMED)))
def test_unusual_frames_give_the_typed_verdict(frame):
    _assert_same_as_typed(frame)


def _assert_same_as_typed(frame):
    d = MsgspecDecoder().decode(frame)
    ref = _typed(frame)
    assert _summary(d) == _summary(ref)
    assert d.reason != Reject.INTERNAL
    code, payload, _ = _book_bytes(frame, MsgspecDecoder())
    ref_code, ref_payload, _ = _book_bytes(frame, OrjsonDecoder())
    if d.reason != Reject.OK:
        assert code == Applied.NOT_A_BOOK and payload == bytes(BOOK_DTYPE.itemsize)  # never a BOOK
    else:
        assert (code, payload) == (ref_code, ref_payload)


def test_capture_books15_frames_all_take_the_fast_path_with_the_typed_result(capture_path):
    from bench.feed import books15_from_capture

    frames = books15_from_capture(capture_path)
    assert frames
    dec = MsgspecDecoder()
    for frame in frames:
        d = dec.decode(frame)
        assert d.books[0]._raw is not None  # fast path
        assert _summary(d) == _summary(_typed(frame))
        code, payload, _ = _book_bytes(frame, MsgspecDecoder())
        assert (code, payload) == _book_bytes(frame, OrjsonDecoder())[:2]
