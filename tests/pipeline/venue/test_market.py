"""The venue's sans-I/O market core: requests, books kept as strings, sequence numbers, checksums
and frames, checked against the feed's own decoder and ``BitgetBooks`` (no socket)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.trading.bitget import Applied, BitgetBooks, FrameKind, bitget_checksum, make_decoder
from pipeline.trading.messages import BOOK_DTYPE
from pipeline.venue.errors import VenueError
from pipeline.venue.market import (
    CODE_ILLEGAL_REQUEST,
    CODE_INVALID_OP,
    CODE_NOT_EXIST,
    CODE_PARAM_ERROR,
    OP_ERROR,
    OP_PING,
    OP_SUBSCRIBE,
    OP_UNSUBSCRIBE,
    BookEvent,
    TradeEvent,
    VenueMarket,
    corrupt_checksum,
    error_frame,
    event_frame,
    parse_request,
)

INSTS = {"BTCUSDT", "ETHUSDT"}


def _req(op, *args):
    return json.dumps({"op": op, "args": [dict(zip(("instType", "channel", "instId"), a)) for a in args]})


def test_parse_request_ping_subscribe_unsubscribe():
    assert parse_request("ping", INSTS) == [(OP_PING, None, "", "")]
    (r,) = parse_request(_req("subscribe", ("SPOT", "books15", "BTCUSDT")), INSTS)
    assert r.op == OP_SUBSCRIBE and r.arg == {"instType": "SPOT", "channel": "books15", "instId": "BTCUSDT"}
    (r,) = parse_request(_req("unsubscribe", ("SPOT", "trade", "ETHUSDT")), INSTS)
    assert r.op == OP_UNSUBSCRIBE


@pytest.mark.parametrize("text, code", [
    (b"ping", CODE_ILLEGAL_REQUEST),
    ("pong?", CODE_ILLEGAL_REQUEST),
    ("42", CODE_ILLEGAL_REQUEST),
    ('{"op":"login"}', CODE_INVALID_OP),
    ('{"args":[]}', CODE_INVALID_OP),
    ('{"op":"subscribe"}', CODE_PARAM_ERROR),
    ('{"op":"subscribe","args":{}}', CODE_PARAM_ERROR),
    ('{"op":"subscribe","args":[1]}', CODE_PARAM_ERROR),
    ('{"op":"subscribe","args":[{"instType":"SPOT","channel":"books","instId":5}]}', CODE_PARAM_ERROR),
])
def test_parse_request_rejects_malformed_requests(text, code):
    (r,) = parse_request(text, INSTS)
    assert r.op == OP_ERROR and r.code == code


def test_parse_request_answers_each_unknown_entry_alone():
    reqs = parse_request(_req("subscribe", ("SPOT", "books", "BTCUSDT"), ("SPOT", "books", "XRPUSDT"),
                              ("SPOT", "ticker", "BTCUSDT"), ("sp", "books", "BTCUSDT"),
                              ("SPOT", "books5", "ETHUSDT"), ("SPOT", "books1", "ETHUSDT")), INSTS)
    assert [r.op for r in reqs] == [OP_SUBSCRIBE, OP_ERROR, OP_ERROR, OP_ERROR, OP_SUBSCRIBE, OP_SUBSCRIBE]
    assert {r.code for r in reqs if r.op == OP_ERROR} == {CODE_NOT_EXIST}
    assert reqs[1].msg == "instType:SPOT,channel:books,instId:XRPUSDT doesn't exist"


def test_event_and_error_frames_are_the_venue_text():
    arg = {"instType": "SPOT", "channel": "books", "instId": "BTCUSDT"}
    assert event_frame("subscribe", arg) == b'{"event":"subscribe","arg":{"instType":"SPOT","channel":"books","instId":"BTCUSDT"}}'
    assert error_frame("30001", "x", arg) == (b'{"event":"error","code":"30001","msg":"x","arg":'
                                              b'{"instType":"SPOT","channel":"books","instId":"BTCUSDT"}}')
    assert error_frame("30002", "y") == b'{"event":"error","code":"30002","msg":"y"}'
    dec = make_decoder()
    assert dec.decode(error_frame("30001", "x", arg)).kind == FrameKind.ERROR


def test_market_rejects_bad_instruments():
    with pytest.raises(VenueError):
        VenueMarket([])
    with pytest.raises(VenueError):
        VenueMarket(["BTC-USDT"])
    with pytest.raises(VenueError):
        VenueMarket(["A", "A"])
    with pytest.raises(VenueError, match="unknown instrument"):
        VenueMarket(["A"]).skip_seq(1, "B")


SNAP = BookEvent("BTCUSDT", True, [["100.0", "1.5"], ["99.5", "2"]], [["100.5", "0.5000"], ["101", "3"]], 1000)


def test_snapshot_then_update_seq_checksum_and_original_strings():
    m = VenueMarket(["BTCUSDT"])
    assert m.apply_book(BookEvent("BTCUSDT", False, [["1", "1"]], [], 1)) is None  # update before any snapshot
    assert m.books_snapshot_frame("BTCUSDT") is None and m.depth_frame("BTCUSDT", "books15") is None
    ch = m.apply_book(SNAP)
    assert ch.seq == 1 and ch.checksum == bitget_checksum(SNAP.bids, SNAP.asks) != 0
    upd = m.apply_book(BookEvent("BTCUSDT", False, [["99.5", "0"], ["99.8", "7"]], [["100.5", "0.6000"]], 1020))
    assert upd.seq == 2 and not upd.snapshot
    bids, asks = m.levels("BTCUSDT")
    assert bids == [["100.0", "1.5"], ["99.8", "7"]] and asks == [["100.5", "0.6000"], ["101", "3"]]
    assert upd.checksum == bitget_checksum(bids, asks)
    frame = json.loads(m.books_frame(upd))
    assert frame == {"action": "update", "arg": {"instType": "SPOT", "channel": "books", "instId": "BTCUSDT"},
                     "data": [{"asks": [["100.5", "0.6000"]], "bids": [["99.8", "7"], ["99.5", "0"]],
                               "checksum": upd.checksum, "seq": 2, "ts": "1020"}], "ts": 1020}
    snap = json.loads(m.books_snapshot_frame("BTCUSDT", push_ts_ms=5))
    assert snap["action"] == "snapshot" and snap["data"][0]["seq"] == 2 and snap["ts"] == 5
    assert snap["data"][0]["bids"] == bids and snap["data"][0]["checksum"] == upd.checksum


def test_faults_skip_seq_and_corrupt_checksum_touch_only_the_next_update():
    m = VenueMarket(["BTCUSDT"])
    m.apply_book(SNAP)
    m.skip_seq(10)
    m.corrupt_next_checksum("BTCUSDT")
    up = BookEvent("BTCUSDT", False, [["99", "1"]], [], 2)
    a = m.apply_book(up)
    assert a.seq == 12 and a.corrupted and a.checksum == corrupt_checksum(m.checksum("BTCUSDT"))
    b = m.apply_book(up)
    assert b.seq == 13 and not b.corrupted and b.checksum == m.checksum("BTCUSDT")
    m.skip_seq(-100)
    assert m.apply_book(up).seq == 0  # clamped
    assert (m.seq_faults, m.checksum_faults) == (2, 1)
    assert corrupt_checksum(0x2A5A5A5A) == 1 and corrupt_checksum(5) not in (0, 5)


def test_given_checksums_are_kept_and_disagreements_counted():
    m = VenueMarket(["BTCUSDT"])
    ch = m.apply_book(SNAP._replace(checksum=123))
    assert ch.checksum == 123 and m.replay_checksum_disagreements == 1
    assert m.apply_book(SNAP._replace(checksum=0)).checksum == 0  # 0: "no checksum", sent as is


def test_trades_are_numbered_when_they_have_no_id_and_the_snapshot_lists_newest_first():
    m = VenueMarket(["BTCUSDT"], recent_trades=3)
    assert m.trades_snapshot_frame("BTCUSDT") is None
    assert m.apply_trades(TradeEvent("BTCUSDT", [], 1)) is None
    ev = m.apply_trades(TradeEvent("BTCUSDT", [{"ts": str(t), "price": "1", "size": "2", "side": "buy"}
                                               for t in (1, 2, 3, 4)], 4))
    assert [t["tradeId"] for t in ev.trades] == ["1", "2", "3", "4"]
    assert json.loads(m.trades_frame(ev))["action"] == "update"
    snap = json.loads(m.trades_snapshot_frame("BTCUSDT"))
    assert [t["tradeId"] for t in snap["data"]] == ["4", "3", "2"] and snap["ts"] == 4
    given_id = m.apply_trades(TradeEvent("BTCUSDT", [{"ts": "5", "price": "1", "size": "2", "side": "sell",
                                                      "tradeId": "99"}], 5))
    assert given_id.trades[0]["tradeId"] == "99"


# A random walk of updates over a price grid: whatever the venue publishes, the feed's books
# (decoder + BitgetBooks) verify every checksum and end equal to the venue's book.
_price = st.integers(1, 60).map(lambda i: f"{i / 4:.2f}")
_size = st.sampled_from(["0", "0", "1", "0.5000", "2.25", "10"])
_levels = st.lists(st.tuples(_price, _size).map(list), max_size=12, unique_by=lambda lv: lv[0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_levels, _levels), min_size=1, max_size=25))
def test_any_update_sequence_verifies_in_bitget_books(updates):
    m = VenueMarket(["BTCUSDT"])
    m.apply_book(BookEvent("BTCUSDT", True, [["7.00", "1"], ["6.00", "1"]], [["8.00", "1"], ["9.00", "1"]], 1))
    dec, books, out = make_decoder(), BitgetBooks({"BTCUSDT": 1}), np.zeros(1, BOOK_DTYPE)
    assert books.apply(dec.decode(m.books_snapshot_frame("BTCUSDT")), out) == Applied.EMITTED
    for i, (bids, asks) in enumerate(updates):
        # keep the book uncrossed: bids below 7.5, asks above
        bids = [lv for lv in bids if float(lv[0]) < 7.5]
        asks = [lv for lv in asks if float(lv[0]) > 7.5]
        ch = m.apply_book(BookEvent("BTCUSDT", False, bids, asks, 2 + i))
        d = dec.decode(m.books_frame(ch))
        assert d.kind == FrameKind.UPDATE
        code = books.apply(d, out)
        assert code == Applied.EMITTED, code
        for n, channel in ((15, "books15"), (5, "books5"), (1, "books1")):
            frame = m.depth_frame("BTCUSDT", channel)
            if frame is not None and (m.levels("BTCUSDT")[0] or m.levels("BTCUSDT")[1]):
                assert books.apply(dec.decode(frame), out) == Applied.EMITTED
    b = books.book("books", "BTCUSDT")
    bids, asks = m.levels("BTCUSDT")
    assert [list(x) for x in b.bids()] == bids and [list(x) for x in b.asks()] == asks


def test_the_synthetic_market_s_frames_are_pinned():
    """Every frame the venue publishes for a seeded synthetic market (updates of 1-3 steps, a
    corrupt checksum and a seq jump every 50 steps, then the snapshots), as bytes: the SHA-256 is
    what the implementation before the books kept their checksum texts (and the synthetic market
    drew its cancels in batches) published."""
    import hashlib

    from pipeline.venue.sources import InstrumentSpec, SyntheticSource

    specs = [InstrumentSpec("BTCUSDT", 0.1, 0.0001), InstrumentSpec("ETHUSDT", 0.01, 0.001)]
    src = SyntheticSource(specs, seed=11, start_ms=1_700_000_000_000)
    venue = VenueMarket([s.symbol for s in specs])
    h = hashlib.sha256()
    pending = list(src.initial_events())
    for step in range(301):
        if step:
            pending = src.take(1 + step % 3)
            if step % 50 == 0:
                venue.corrupt_next_checksum("ETHUSDT")
                venue.skip_seq(1, "BTCUSDT")
        for ev in pending:
            h.update(venue.books_frame(venue.apply_book(ev)) if isinstance(ev, BookEvent)
                     else venue.trades_frame(venue.apply_trades(ev)))
    for s in specs:
        h.update(venue.books_snapshot_frame(s.symbol) + venue.depth_frame(s.symbol, "books15"))
    assert h.hexdigest() == "f024b53be4290814c42d0ff03c3ebd11787876d82d10fe2c3074825440f745fa"
