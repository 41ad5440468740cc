"""The venue's sources: the synthetic model in market time, and capture frames translated from
Bitget v1 (``sp``, trade arrays) to v2 events with the original strings and checksums."""

from __future__ import annotations

import json

import pytest

from pipeline.trading.bitget.capture import format_line
from pipeline.venue.errors import ReplayError, VenueError
from pipeline.venue.market import BookEvent, TradeEvent
from pipeline.venue.sources import InstrumentSpec, ReplaySource, SyntheticSource, translate_frame
from tests.support.paths import CAPTURE_PATH
from tests.support.venue import SPECS

V1_TRADE = ('{"action":"update","arg":{"instType":"sp","channel":"trade","instId":"HOTUSDT"},'
            '"data":[["1649290077777","0.005613","890.8","buy"]]}')  # protocols.md
V1_BOOKS = ('{"action":"snapshot","arg":{"instType":"sp","channel":"books","instId":"CULTUSDT"},'
            '"data":[{"asks":[["0.00003530","145214"]],"bids":[["0.00003511","10"]],"checksum":-5,"ts":"1649290077496"}]}')
V2_TRADE = ('{"action":"snapshot","arg":{"instType":"SPOT","channel":"trade","instId":"BTCUSDT"},"data":[{"ts":'
            '"1695709835822","price":"26293.4","size":"0.0013","side":"buy","tradeId":"1000000000"}],"ts":1695711090682}')


def test_v1_trade_rows_become_v2_objects_without_a_trade_id():
    (ev,) = translate_frame(V1_TRADE, 1649290077.8)
    assert ev == TradeEvent("HOTUSDT", [{"ts": "1649290077777", "price": "0.005613", "size": "890.8", "side": "buy"}],
                            1649290077777, False, 1649290077800)


def test_v1_books_keep_their_strings_and_checksum():
    (ev,) = translate_frame(V1_BOOKS)
    assert ev == BookEvent("CULTUSDT", True, [["0.00003511", "10"]], [["0.00003530", "145214"]], 1649290077496, -5, None)


def test_v2_frames_pass_through():
    (ev,) = translate_frame(V2_TRADE)
    assert ev.snapshot and ev.push_ts_ms == 1695711090682 and ev.trades[0]["tradeId"] == "1000000000"


@pytest.mark.parametrize("text", [
    '{"event":"subscribe","arg":{"instType":"sp","channel":"books","instId":"X"}}',
    '{"action":"snapshot","arg":{"instType":"sp","channel":"ticker","instId":"X"},"data":[{}]}',
    '{"action":"update","arg":{"instType":"mc","channel":"books","instId":"X"},"data":[{}]}',
    "pong",
    "{not json",
])
def test_frames_that_are_not_books_or_trade_pushes_are_skipped(text):
    assert translate_frame(text) == []


@pytest.mark.parametrize("text", [
    '{"action":"update","arg":{"instType":"sp","channel":"books","instId":"X"},"data":[]}',
    '{"action":"update","arg":{"instType":"sp","channel":"books","instId":"X"},"data":[{"bids":[["1"]],"ts":"1"}]}',
    '{"action":"update","arg":{"instType":"sp","channel":"books","instId":"X"},"data":[{"bids":[["x","1"]],"ts":"1"}]}',
    '{"action":"update","arg":{"instType":"sp","channel":"books","instId":"X"},"data":[{"bids":[]}]}',
    '{"action":"update","arg":{"instType":"sp","channel":"books","instId":"X"},"data":[{"ts":"1","checksum":"5"}]}',
    '{"action":"update","arg":{"instType":"sp","channel":"trade","instId":"X"},"data":[["1","1","1","hold"]]}',
    '{"action":"update","arg":{"instType":"sp","channel":"trade","instId":"X"},"data":[["1","1"]]}',
    '{"action":"merge","arg":{"instType":"sp","channel":"trade","instId":"X"},"data":[["1","1","1","buy"]]}',
    '{"action":"update","arg":{"instType":"sp","channel":"trade","instId":"X-Y"},"data":[["1","1","1","buy"]]}',
])
def test_malformed_books_or_trade_pushes_raise(text):
    with pytest.raises(ReplayError):
        translate_frame(text)


def test_replay_source_paces_frames_in_market_time(tmp_path):
    path = tmp_path / "cap"
    path.write_text(format_line(10.0, "open", url="wss://x") + format_line(10.5, "send", '{"op":"subscribe"}', url="wss://x")
                    + format_line(11.0, "recv", V1_BOOKS) + format_line(11.25, "recv", V1_TRADE)
                    + format_line(12.0, "recv", '{"event":"subscribe"}') + format_line(13.0, "recv", V1_TRADE))
    src = ReplaySource.from_capture(path)
    assert src.inst_ids == ["CULTUSDT", "HOTUSDT"] and src.next_due_ms() == 0.0
    assert [type(e) for e in src.pending(0)] == [BookEvent]
    assert src.pending(249) == [] and src.next_due_ms() == 250.0
    assert len(src.pending(10_000, limit=1)) == 1 and src.next_due_ms() == 2000.0
    assert len(src.take(5)) == 1 and src.exhausted and src.next_due_ms() is None and src.take(1) == []
    src.rewind()
    assert not src.exhausted and src.loops == 1


def test_replay_source_reports_where_a_capture_is_bad(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text(format_line(1.0, "recv", V1_TRADE.replace("buy", "hold")))
    with pytest.raises(ReplayError, match="event 1"):
        ReplaySource.from_capture(bad)
    empty = tmp_path / "empty"
    empty.write_text(format_line(1.0, "recv", '{"event":"subscribe"}'))
    with pytest.raises(ReplayError, match="nothing to replay"):
        ReplaySource.from_capture(empty)
    with pytest.raises(ReplayError):
        ReplaySource.from_capture(tmp_path / "missing")


def test_the_shared_capture_loads(capture_path):
    src = ReplaySource.from_capture(CAPTURE_PATH)
    books = [e for _, evs in src.frames for e in evs if isinstance(e, BookEvent)]
    assert len(books) == 443 and sum(e.snapshot for e in books) == 8 and len(src.inst_ids) == 8


def test_synthetic_source_steps_in_market_time_and_folds_due_steps():
    src = SyntheticSource(SPECS, seed=1, step_ms=20, start_ms=1000)
    init = src.initial_events()
    assert [e.inst_id for e in init] == ["BTCUSDT", "ETHUSDT"] and all(e.snapshot and e.ts_ms == 1000 for e in init)
    assert src.pending(19) == [] and src.next_due_ms() == 20
    evs = src.pending(100)  # five steps, one book event per instrument
    assert src.steps == 5 and sum(isinstance(e, BookEvent) for e in evs) == 2
    assert {e.ts_ms for e in evs} == {1100}
    for e in evs:
        if isinstance(e, BookEvent):
            assert [float(p) for p, _ in e.bids] == sorted((float(p) for p, _ in e.bids), reverse=True)
    assert src.pending(10_000, limit=3) and src.steps == 8
    with pytest.raises(VenueError):
        src.rewind()


def test_synthetic_source_is_deterministic_per_seed_and_instruments_are_independent():
    a = SyntheticSource(SPECS, seed=4, start_ms=0)
    b = SyntheticSource(SPECS, seed=4, start_ms=0)
    eth_only = SyntheticSource([SPECS[1]], seed=4, start_ms=0)
    for _ in range(20):
        ea, eb, ee = a.take(1), b.take(1), eth_only.take(1)
        assert json.dumps(ea) == json.dumps(eb)
        assert json.dumps([e for e in ea if e.inst_id == "ETHUSDT"]) == json.dumps(ee)
    c = SyntheticSource(SPECS, seed=5, start_ms=0)
    assert json.dumps(c.take(5)) != json.dumps(SyntheticSource(SPECS, seed=4, start_ms=0).take(5))


def test_synthetic_source_rejects_bad_instruments():
    with pytest.raises(VenueError):
        SyntheticSource([], seed=1)
    with pytest.raises(VenueError):
        SyntheticSource([InstrumentSpec("A", 0.0, 1.0)], seed=1)
    with pytest.raises(VenueError):
        SyntheticSource([SPECS[0], SPECS[0]], seed=1)
    with pytest.raises(VenueError):
        SyntheticSource(SPECS, seed=1, step_ms=0)


def test_make_source_serves_the_named_market():
    from pipeline.venue.sources import MARKETS, make_source
    from pipeline.venue.synthetic import CALIBRATED, SyntheticParams

    assert set(MARKETS) == {"default", "calibrated"}
    default = make_source("synthetic", instruments=SPECS, seed=1, start_ms=0)
    assert default.params == SyntheticParams() and default.step_ms == 20
    cal = make_source("synthetic", instruments=SPECS, seed=1, start_ms=0, market="calibrated")
    assert cal.params == CALIBRATED and cal.step_ms == CALIBRATED.step_ms == 550
    faster = make_source("synthetic", instruments=SPECS, seed=1, start_ms=0, market="calibrated", step_ms=100)
    assert faster.step_ms == 100, "a configured step_ms wins over the market's own"
    bid, ask = cal.markets["BTCUSDT"].best_bid(), cal.markets["BTCUSDT"].best_ask()
    assert ask - bid > 10, "the calibrated book starts with its wide spread"


def test_make_source_refuses_an_unknown_market_or_one_for_a_replay(capture_path):
    from pipeline.venue.sources import make_source

    with pytest.raises(VenueError, match="market must be one of"):
        make_source("synthetic", instruments=SPECS, market="realistic")
    with pytest.raises(VenueError, match="market 'calibrated' is a choice of the synthetic source only"):
        make_source("replay", capture=capture_path, market="calibrated")
