"""The venue's encoded source (``pipeline.venue.sources.EncodedSource``): the frames the venue would
have built, made once, then looped with seq and ts still increasing."""

from __future__ import annotations

import orjson
import pytest

from pipeline.venue.errors import VenueError
from pipeline.venue.market import BookEvent, TradeEvent, VenueMarket
from pipeline.venue.sources import EncodedSource, ReplaySource, make_source, render
from tests.support.venue import SPECS, START_MS, synthetic

UNITS = 50


def _reference_frames(units: int) -> list[list]:
    """The frames a ``VenueMarket`` builds, unit by unit, from the same synthetic market."""
    src = synthetic()
    market = VenueMarket(src.inst_ids)
    for ev in src.initial_events():
        market.apply_book(ev)
    out = []
    for _ in range(units):
        frames = []
        for ev in src.take(1):
            if type(ev) is BookEvent:
                ch = market.apply_book(ev)
                frames.append((("books15", ch.inst_id), market.depth_frame(ch.inst_id, "books15", ch.push_ts_ms)))
            else:
                frames.append((("trade", ev.inst_id), market.trades_frame(market.apply_trades(ev))))
        out.append(frames)
    return out


def test_the_first_loop_sends_exactly_the_frames_the_venue_would_have_built():
    src = EncodedSource(synthetic(), UNITS)
    got = [u.frames for u in src.take(UNITS)]
    assert got == _reference_frames(UNITS)
    assert any(k[0] == "trade" for frames in got for k, _ in frames)  # both channels covered


def _seq_ts(frame: bytes) -> tuple[int, int, int]:
    d = orjson.loads(frame)
    return d["data"][0]["seq"], int(d["data"][0]["ts"]), d["ts"]


def test_later_loops_repeat_the_books_with_seq_and_ts_still_increasing():
    src = EncodedSource(synthetic(), UNITS)
    loops = [src.take(UNITS) for _ in range(3)]
    assert src.loops == 3
    last: dict = {}
    for units in loops:
        for u in units:
            for key, frame in u.frames:
                if key[0] != "books15":
                    continue
                seq, ts, push = _seq_ts(frame)
                if key in last:
                    assert seq > last[key][0] and ts > last[key][1] and push > last[key][2], (key, seq, last[key])
                last[key] = (seq, ts, push)
    a, b = loops[0][7].frames[0][1], loops[2][7].frames[0][1]
    da, db = orjson.loads(a), orjson.loads(b)
    assert da["data"][0]["bids"] == db["data"][0]["bids"] and da["data"][0]["checksum"] == db["data"][0]["checksum"]
    assert db["data"][0]["seq"] == da["data"][0]["seq"] + 2 * src.seq_step
    assert db["ts"] == da["ts"] + 2 * src.ts_step


def test_units_come_due_in_market_time_and_the_loop_takes_one_period():
    src = EncodedSource(synthetic(step_ms=20), 10)
    assert src.period_ms == 200.0 and src.next_due_ms() == 0.0
    assert len(src.pending(0.0)) == 1 and src.next_due_ms() == 20.0
    assert len(src.pending(99.0)) == 4 and src.market_ms == 80.0
    assert len(src.pending(10_000.0, limit=3)) == 3  # at most limit a call
    assert len(src.pending(219.0)) == 3 and src.loops == 1 and src.market_ms == 200.0  # unit 0 of loop 1
    assert src.pending(219.0) == [] and src.next_due_ms() == 220.0


def test_a_capture_replay_can_be_the_frames_source():
    snap = BookEvent("BTCUSDT", True, [["100.0", "1"]], [["100.5", "2"]], START_MS)
    upd = BookEvent("BTCUSDT", False, [["100.1", "3"]], [], START_MS + 5)
    trade = TradeEvent("BTCUSDT", [{"ts": str(START_MS + 6), "price": "100.5", "size": "1", "side": "buy"}], START_MS + 6)
    src = EncodedSource(ReplaySource([(10.0, [snap]), (10.005, [upd]), (10.006, [trade])]), 100)
    assert len(src.units) == 3 and src.times == pytest.approx([0.0, 5.0, 6.0])
    (u0, u1, u2) = src.take(3)
    assert orjson.loads(u1.frames[0][1])["data"][0]["bids"][0] == ["100.1", "3"]
    assert u2.books == () and u2.trades[0][0] == "BTCUSDT" and u2.frames[0][0] == ("trade", "BTCUSDT")


def test_render_moves_only_the_numbers_it_should():
    book = b'{"action":"snapshot","arg":{},"data":[{"asks":[],"bids":[],"checksum":-7,"seq":12,"ts":"1000"}],"ts":1003}'
    from pipeline.venue.sources import _template
    assert render(_template(book), 0, 0) == book
    assert render(_template(book), 5, 100) == book.replace(b'"seq":12,"ts":"1000"}],"ts":1003', b'"seq":17,"ts":"1100"}],"ts":1103')
    trade = b'{"action":"update","arg":{},"data":[{"ts":"1000","price":"1","size":"1","side":"buy","tradeId":"1"}],"ts":1003}'
    assert render(_template(trade), 5, 100) == trade.replace(b'"ts":1003', b'"ts":1103')


@pytest.mark.parametrize("kwargs, words", [
    ({"encoded_units": 0}, "units must be >= 1"),
    ({"encoded_channels": ("books",)}, "encoded channels must be some of"),
    ({"encoded_channels": ()}, "encoded channels must be some of"),
    ({"jump_prob": 0.1}, "jump_prob"),
])
def test_bad_encoded_params_are_refused(kwargs, words):
    with pytest.raises(VenueError, match=words):
        make_source("encoded", instruments=SPECS, seed=1, step_ms=20, start_ms=START_MS, **kwargs)


def test_make_source_builds_an_encoded_source_of_the_synthetic_model():
    src = make_source("encoded", instruments=SPECS, seed=7, step_ms=20, start_ms=START_MS, encoded_units=UNITS)
    assert isinstance(src, EncodedSource) and src.inst_ids == ["BTCUSDT", "ETHUSDT"] and len(src.units) == UNITS
    assert [u.frames for u in src.take(UNITS)] == _reference_frames(UNITS)
