"""Recorded captures into feature rows (pipeline/trading/model/capture.py): the feed's decoder and books,
rows at receive time, what cannot be used counted; the shared real capture, and what it can show."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pipeline.trading.bitget.capture import RECV, format_line
from pipeline.trading.model.capture import capture_series, grid_tick
from pipeline.trading.model.data import TrainParams, build_dataset
from tests.support.frames import RefBook, ladder, trades_text


def test_the_grid_tick_is_the_smallest_gap_between_prices():
    assert grid_tick([1.0, 1.5, 1.25, 1.25]) == 0.25
    assert grid_tick([3.0]) == 1.0


def write_capture(path, t0=1_700_000_000.0):
    """Eight frames of one instrument, 0.1 s apart: snapshot, update, trade, garbage, update, an update
    with a wrong checksum, one on the now invalid book, a fresh snapshot."""
    book = RefBook("BTCUSDT")
    frames = [book.snapshot(ladder(100.0, -0.1, 5), ladder(100.1, 0.1, 5)),
              book.update(bids=[["100.0", "2.0"]]),
              trades_text([("1695710946300", "100.1", "0.5", "buy", "7")]),
              "not json",
              book.update(asks=[["100.1", "0"]]),
              book.update(bids=[["99.9", "3.0"]], checksum_delta=1),
              book.update(bids=[["99.8", "3.0"]]),
              book.snapshot(ladder(100.0, -0.1, 5), ladder(100.2, 0.1, 5))]
    path.write_text("".join(format_line(t0 + 0.1 * i, RECV, text) for i, text in enumerate(frames)))
    return path


def test_a_capture_replays_through_the_feeds_books_into_rows_at_receive_time(tmp_path):
    path = write_capture(tmp_path / "cap.ws")
    (s,), info = capture_series(path)
    assert s.name == "capture:cap.ws:BTCUSDT" and s.group == f"capture:{path}"
    t0_ns = int(round(1_700_000_000.0 * 1e9))
    # rows: the update at 0.1 s, the update at 0.4 s, the fresh snapshot at 0.7 s (the first snapshot has no previous)
    assert [round((t - t0_ns) / 1e6) for t in s.t_ns] == [100, 400, 700]
    assert s.mid_ticks == pytest.approx([1000.5, 1001.0, 1001.0])  # mids 100.05, 100.1 (ask 100.1 deleted), 100.1
    assert s.bid_ticks == pytest.approx([1000, 1000, 1000]) and s.ask_ticks == pytest.approx([1001, 1002, 1002])
    # the trade at 100.1 (0.2 s) lies between the rows at 0.1 s and 0.4 s: the touch labels see it there
    assert s.trade_lo_ticks[1] == s.trade_hi_ticks[1] == pytest.approx(1001)
    assert np.isinf(s.trade_lo_ticks[[0, 2]]).all() and np.isinf(s.trade_hi_ticks[[0, 2]]).all()
    assert s.tick_bps == pytest.approx(0.1 / np.array([100.05, 100.1, 100.1]) * 1e4)
    assert info["frames"] == 8 and info["instruments"] == 1 and info["ticks"] == {"BTCUSDT": pytest.approx(0.1)}
    assert info["frame_kinds"] == {"REJECTED": 1, "SNAPSHOT": 2, "TRADE": 1, "UPDATE": 4}
    assert info["depth_pushes"] == {"CHECKSUM_MISMATCH": 1, "EMITTED": 4, "INVALID": 1}
    assert info["rows"] == 3 and info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_malformed_capture_line_is_an_error_naming_it(tmp_path):
    from pipeline.trading.bitget.errors import CaptureError

    bad = tmp_path / "bad.ws"
    bad.write_text("this is not a capture line\n")
    with pytest.raises(CaptureError):
        capture_series(bad)


def test_the_shared_capture_replays_but_is_too_short_to_train_on(capture_path):
    """8 instruments, ~30 s: a few hundred rows; on the 5 s horizon no move pays its round trip (spreads
    of 4 to 175 ticks plus 10 bps a side) and a handful of fills at the touch lose: the real market's
    proportions, too few rows to learn from."""
    series, info = capture_series(capture_path)
    assert info["instruments"] == len(series) == 8 and info["depth_pushes"] == {"EMITTED": 443}
    assert info["rows"] == 435 and info["sha256"].startswith("bcdd126a0b38")
    ds = build_dataset(series, TrainParams())
    assert len(ds.y) == 356 and np.bincount(ds.y, minlength=4).tolist() == [341, 0, 0, 15]
    assert ds.filled.sum(axis=0).tolist() == [13, 18] and (ds.side > 0).sum() == 15  # half the fills lose after 10 bps
