"""Bitget v2 protocol: frame classification, and the decoder's contract on well-formed and malformed
frames. Every decoder test runs against both decoders. (The request messages: ``test_requests``.)"""

from __future__ import annotations

import pytest

from pipeline.trading.bitget.errors import BitgetError, FrameRejected
from pipeline.trading.bitget.protocol import (DEFAULT_DECODER, MAX_LEVELS_PER_SIDE, FrameKind, MsgspecDecoder, Reject,
                                              make_decoder)
from tests.support.frames import depth_frame, dumps, trade_frame

# ------------------------------------------------------------------------------ classification


def test_the_default_decoder_is_msgspec_the_faster_one_measured():
    assert DEFAULT_DECODER == "msgspec"
    assert isinstance(make_decoder(), MsgspecDecoder)
    with pytest.raises(BitgetError):
        make_decoder("simdjson")


@pytest.mark.parametrize("frame", ["pong", b"pong"])
def test_pong(decoder, frame):
    d = decoder.decode(frame)
    assert (d.kind, d.reason) == (FrameKind.PONG, Reject.OK)


def test_subscribe_ack(decoder):
    d = decoder.decode('{"event":"subscribe","arg":{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}}')
    assert (d.kind, d.reason, d.channel, d.inst_type, d.inst_id) == (
        FrameKind.SUBSCRIBED, Reject.OK, "books15", "SPOT", "BTCUSDT")


def test_unsubscribe_ack(decoder):
    d = decoder.decode('{"event":"unsubscribe","arg":{"instType":"SPOT","channel":"books","instId":"BTCUSDT"}}')
    assert d.kind == FrameKind.UNSUBSCRIBED and d.reason == Reject.OK


@pytest.mark.parametrize("code", ['"30005"', "30001"])
def test_error_event_keeps_code_and_message(decoder, code):
    d = decoder.decode('{"event":"error","code":%s,"msg":"instId doesn\'t exist"}' % code)
    assert d.kind == FrameKind.ERROR and d.reason == Reject.OK
    assert d.detail == f"{code.strip(chr(34))} instId doesn't exist"


def test_books_snapshot_decodes_best_first_with_original_strings(decoder):
    frame = depth_frame([["26274.8", "0.0009"], ["26274.70", "0.0027"]], [["26274.9", "0.0010"], ["26275", "0.05"]],
                        checksum=-1504501796, seq=123, ts="1695710946294")
    d = decoder.decode(frame)
    assert (d.kind, d.reason, d.channel, d.inst_id, d.snapshot) == (FrameKind.SNAPSHOT, Reject.OK, "books", "BTCUSDT", True)
    (lv,) = d.books
    assert lv.bid_px == [26274.8, 26274.7] and lv.bid_sz == [0.0009, 0.0027]
    assert lv.ask_px == [26274.9, 26275] and lv.ask_sz == [0.001, 0.05]
    assert lv.bid_lv == ["26274.8:0.0009", "26274.70:0.0027"]  # trailing zero kept
    assert lv.ask_lv == ["26274.9:0.0010", "26275:0.05"]
    assert (lv.checksum, lv.seq, lv.pseq, lv.ts_ms) == (-1504501796, 123, -1, 1695710946294)


def test_books_update_may_be_unsorted_and_carry_zero_sizes(decoder):
    d = decoder.decode(depth_frame([["1.5", "0"], ["1.7", "2"]], [], action="update", seq=7, pseq=6))
    assert (d.kind, d.reason, d.snapshot) == (FrameKind.UPDATE, Reject.OK, False)
    assert d.books[0].bid_sz == [0, 2] and (d.books[0].seq, d.books[0].pseq) == (7, 6)


def test_books15_is_a_snapshot_whatever_its_action(decoder):
    d = decoder.decode(depth_frame([["2", "1"]], [["3", "1"]], channel="books15", action="update"))
    assert d.kind == FrameKind.SNAPSHOT and d.snapshot


def test_seq_and_ts_may_be_digit_strings(decoder):
    d = decoder.decode(depth_frame([["2", "1"]], [["3", "1"]], seq="1343064377779269632", pseq=0, ts=1755937421270))
    assert d.reason == Reject.OK
    assert (d.books[0].seq, d.books[0].pseq, d.books[0].ts_ms) == (1343064377779269632, 0, 1755937421270)


def test_v2_trade_objects(decoder):
    d = decoder.decode(trade_frame([
        {"ts": "1695709835822", "price": "26293.4", "size": "0.0013", "side": "buy", "tradeId": "1000000000"},
        {"ts": "1695709835800", "price": "26293.1", "size": "0.5", "side": "sell", "tradeId": "999999999"},
    ], action="snapshot"))
    assert (d.kind, d.reason, d.snapshot) == (FrameKind.TRADE, Reject.OK, True)
    t = d.trades  # newest first on the wire, oldest first decoded
    assert t.ts_ms == [1695709835800, 1695709835822]
    assert t.price == [26293.1, 26293.4] and t.size == [0.5, 0.0013]
    assert t.side == [2, 1] and t.trade_id == [999999999, 1000000000]


def test_v1_trade_rows(decoder):
    d = decoder.decode(trade_frame([["1649290077777", "0.005613", "890.8", "buy"]]))
    assert d.kind == FrameKind.TRADE and d.reason == Reject.OK
    assert (d.trades.ts_ms, d.trades.price, d.trades.size, d.trades.side, d.trades.trade_id) == (
        [1649290077777], [0.005613], [890.8], [1], [0])


@pytest.mark.parametrize(
    "frame, reason",
    [
        ('{"action":"snapshot","arg":{"instType":"sp","channel":"ticker","instId":"EOSUSDT"},"data":[{"last":"1"}]}',
         Reject.UNKNOWN_CHANNEL),
        ('{"action":"update","arg":{"instType":"sp","channel":"candle1m","instId":"EOSUSDT"},"data":[["1","2","3","4","5","6"]]}',
         Reject.UNKNOWN_CHANNEL),
        ('{"event":"login","code":"0","msg":""}', Reject.UNKNOWN_EVENT),
        ('{"hello":"world"}', Reject.UNKNOWN_FRAME),
    ],
    ids=["ticker", "candle", "login", "no-action-no-event"],
)
def test_frames_not_ours_are_unknown_with_a_reason(decoder, frame, reason):
    d = decoder.decode(frame)
    assert (d.kind, d.reason) == (FrameKind.UNKNOWN, reason)


# ----------------------------------------------------------------------------------- rejections

OK_BIDS = [["2", "1"]]
OK_ASKS = [["3", "1"]]


def _with(level_bids=OK_BIDS, level_asks=OK_ASKS, **kw):
    return depth_frame(level_bids, level_asks, **kw)


def _raw_entry(entry: dict, channel="books") -> bytes:
    return dumps({"action": "snapshot", "arg": {"instType": "SPOT", "channel": channel, "instId": "X"}, "data": [entry]})


MALFORMED = [
    ("empty", b"", Reject.BAD_JSON),
    ("truncated", _with()[:-7], Reject.BAD_JSON),
    ("trailing", _with() + b"x", Reject.BAD_JSON),
    ("nan-literal", b'{"action":"snapshot","ts":NaN}', Reject.BAD_JSON),
    ("not-utf8", b'{"event":"\xff"}', Reject.BAD_JSON),
    ("array", b"[1,2]", Reject.NOT_OBJECT),
    ("string", b'"pong"', Reject.NOT_OBJECT),
    ("no-arg", b'{"action":"snapshot","data":[]}', Reject.MISSING_FIELD),
    ("no-data", b'{"action":"snapshot","arg":{"channel":"books","instId":"X"}}', Reject.MISSING_FIELD),
    ("no-instId", b'{"action":"snapshot","arg":{"channel":"books"},"data":[{}]}', Reject.MISSING_FIELD),
    ("no-bids", _raw_entry({"asks": [], "ts": "1"}), Reject.MISSING_FIELD),
    ("no-ts", _raw_entry({"asks": [], "bids": []}), Reject.MISSING_FIELD),
    ("empty-data", b'{"action":"snapshot","arg":{"channel":"books","instId":"X"},"data":[]}', Reject.EMPTY_DATA),
    ("bad-action", _with(action="partial"), Reject.BAD_ACTION),
    ("arg-not-object", b'{"action":"snapshot","arg":"books","data":[]}', Reject.WRONG_TYPE),
    ("data-not-list", b'{"action":"snapshot","arg":{"channel":"books","instId":"X"},"data":{}}', Reject.WRONG_TYPE),
    ("level-single", _with([["2"]]), Reject.WRONG_TYPE),
    ("level-triple", _with([["2", "1", "0"]]), Reject.WRONG_TYPE),
    ("level-triple-and-single", _with([["2", "1", "0"], ["1"]]), Reject.WRONG_TYPE),
    ("level-is-string", _with(["21"]), Reject.WRONG_TYPE),
    ("level-numbers", b'{"action":"snapshot","arg":{"channel":"books","instId":"X"},"data":[{"asks":[],"bids":[[2.5,1]],"ts":"1"}]}',
     Reject.WRONG_TYPE),
    ("checksum-string", _with(checksum="123"), Reject.WRONG_TYPE),
    ("checksum-float", _with(checksum=1.5), Reject.WRONG_TYPE),
    ("checksum-bool", _with(checksum=True), Reject.WRONG_TYPE),
    ("checksum-over-int32", _with(checksum=2**31), Reject.OUT_OF_RANGE),
    ("checksum-under-int32", _with(checksum=-(2**31) - 1), Reject.OUT_OF_RANGE),
    ("seq-negative", _with(seq=-1), Reject.OUT_OF_RANGE),
    # orjson reads an integer beyond 64 bits as a float, hence its WRONG_TYPE
    ("seq-over-u64", _with(seq=2**64), (Reject.OUT_OF_RANGE, Reject.WRONG_TYPE)),
    ("seq-float", _with(seq=1.5), Reject.WRONG_TYPE),
    ("seq-letters", _with(seq="12a"), Reject.BAD_NUMBER),
    ("ts-negative", _with(ts=-5), Reject.OUT_OF_RANGE),
    ("ts-ns-overflow", _with(ts=str(2**64 // 1_000_000 + 1)), Reject.OUT_OF_RANGE),
    ("ts-signed-string", _with(ts="+1695710946294"), Reject.BAD_NUMBER),
    ("ts-arabic-digits", _with(ts="\u0661\u0662"), Reject.BAD_NUMBER),
    ("price-NaN", _with([["NaN", "1"]]), Reject.BAD_NUMBER),
    ("price-nan", _with([["nan", "1"]]), Reject.BAD_NUMBER),
    ("price-inf", _with([["inf", "1"]]), Reject.BAD_NUMBER),
    ("price-negative", _with([["-2", "1"]]), Reject.BAD_NUMBER),
    ("price-zero", _with([["0", "1"]]), Reject.BAD_NUMBER),
    ("price-zero-update", _with([["0.0", "1"]], action="update"), Reject.BAD_NUMBER),
    ("price-exponent", _with([["2e3", "1"]]), Reject.BAD_NUMBER),
    ("price-hex", _with([["0x10", "1"]]), Reject.BAD_NUMBER),
    ("price-underscore", _with([["1_0", "1"]]), Reject.BAD_NUMBER),
    ("price-space", _with([[" 2", "1"]]), Reject.BAD_NUMBER),
    ("price-empty", _with([["", "1"]]), Reject.BAD_NUMBER),
    ("price-dot", _with([[".", "1"]]), Reject.BAD_NUMBER),
    ("price-two-dots", _with([["1.2.3", "1"]]), Reject.BAD_NUMBER),
    ("price-colon", _with([["2:5", "1"]]), Reject.BAD_NUMBER),
    ("price-huge", _with([["9" * 400, "1"]]), Reject.BAD_NUMBER),
    ("size-negative", _with([["2", "-1"]]), Reject.BAD_NUMBER),
    ("size-NaN-string", _with(level_asks=[["3", "NaN"]]), Reject.BAD_NUMBER),
    ("bids-ascending", _with([["2", "1"], ["2.5", "1"]]), Reject.UNSORTED),
    ("asks-duplicate", _with(level_asks=[["3", "1"], ["3.0", "1"]]), Reject.UNSORTED),
    ("books15-unsorted", _with([["1", "1"], ["2", "1"]], channel="books15"), Reject.UNSORTED),
    ("too-many-levels", _with([[str(10000 - i), "1"] for i in range(MAX_LEVELS_PER_SIDE + 1)]), Reject.TOO_LARGE),
    ("trade-bad-side", trade_frame([{"ts": "1", "price": "1", "size": "1", "side": "BUY", "tradeId": "1"}]),
     Reject.BAD_VALUE),
    ("trade-zero-size", trade_frame([{"ts": "1", "price": "1", "size": "0", "side": "buy"}]), Reject.BAD_NUMBER),
    ("trade-number-price", trade_frame([{"ts": "1", "price": 1.5, "size": "1", "side": "buy"}]), Reject.WRONG_TYPE),
    ("trade-no-side", trade_frame([{"ts": "1", "price": "1", "size": "1"}]), Reject.MISSING_FIELD),
    ("trade-id-letters", trade_frame([{"ts": "1", "price": "1", "size": "1", "side": "buy", "tradeId": "x1"}]),
     Reject.BAD_NUMBER),
    ("trade-v1-short-row", trade_frame([["1", "1", "buy"]]), Reject.WRONG_TYPE),
    ("trade-nested-garbage", trade_frame([[{"a": 1}, "1", "1", "buy"]]), Reject.WRONG_TYPE),
]


@pytest.mark.parametrize("frame, reason", [(f, r) for _, f, r in MALFORMED], ids=[n for n, _, _ in MALFORMED])
def test_malformed_frames_are_rejected_with_their_reason_and_never_raise(decoder, frame, reason):
    d = decoder.decode(frame)
    assert d.kind == FrameKind.REJECTED, (d.kind, d.reason, d.detail)
    assert d.reason in (reason if isinstance(reason, tuple) else (reason,)), d.detail
    assert d.books is None and d.trades is None
    assert decoder.rejects[d.reason] == 1 and decoder.kinds[FrameKind.REJECTED] == 1


def test_an_oversized_frame_is_rejected_before_parsing(decoder):
    d = decoder.decode(b" " * (4 * 1024 * 1024 + 1))
    assert (d.kind, d.reason) == (FrameKind.REJECTED, Reject.TOO_LARGE)


def test_decode_or_raise_is_the_control_path_variant(decoder):
    assert decoder.decode_or_raise("pong").kind == FrameKind.PONG
    with pytest.raises(FrameRejected) as info:
        decoder.decode_or_raise(b"{")
    assert info.value.reason == Reject.BAD_JSON
    assert isinstance(info.value, BitgetError)


def test_counters_count_every_frame_by_kind_and_reason(decoder):
    for frame in ("pong", b"{", _with(), '{"event":"login"}'):
        decoder.decode(frame)
    assert decoder.kinds[FrameKind.PONG] == decoder.kinds[FrameKind.REJECTED] == 1
    assert decoder.kinds[FrameKind.SNAPSHOT] == decoder.kinds[FrameKind.UNKNOWN] == 1
    assert sum(decoder.kinds) == sum(decoder.rejects) == 4
    assert decoder.rejects[Reject.OK] == 2
