"""Markouts of fills on a known path, and the two would-have-filled rules for orders an EMERGENCY
cancel removed, on hand-made market paths; every number here is computed by hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.evaluation.markouts import (CancelledOrder, MarketPath, avoided_fills, fill_markouts,
                                                  market_path, markout_summary, mid_at, would_fill_ns)
from pipeline.trading.evaluation.metrics import Fill, MarkSeries
from pipeline.trading.evaluation.replay import MarketEvent, Tape
from pipeline.trading.messages import TRADE_SIDE_SELL, TRADE_STRUCT, Kind

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
S = 1000 * MS
TICKS = {1: 0.1, 2: 0.01}


def marks() -> MarkSeries:
    """Instrument 1 (tick 0.1): mid 100.0 at T0, 100.1 at 50 ms, 100.3 at 150 ms, 99.9 at 1 s, 100.5 at
    5.2 s, the last mark at 6 s (100.5). Instrument 2 (tick 0.01): 10.00 at T0, 9.97 at 1 s, 9.97 at 6 s."""
    return MarkSeries({1: [T0, T0 + 50 * MS, T0 + 150 * MS, T0 + S, T0 + 5200 * MS, T0 + 6 * S],
                       2: [T0, T0 + S, T0 + 6 * S]},
                      {1: [100.0, 100.1, 100.3, 99.9, 100.5, 100.5], 2: [10.0, 9.97, 9.97]})


def fill(ts, side, price, size, iid=1, fee=0.0) -> Fill:
    return Fill(ts_ns=ts, instrument_id=iid, side=side, price=price, size=size, fee=fee, liquidity="maker")


FILLS = [fill(T0, 1, 99.95, 2.0),  # a buy
         fill(T0 + 200 * MS, -1, 100.35, 1.0),  # a sell
         fill(T0 + 5500 * MS, 1, 100.4, 1.0)]  # a buy near the end: its 1 s and 5 s are beyond the marks


def test_the_mid_at_a_time_is_the_last_mark_at_or_before_it_and_unknown_past_the_data():
    known, mid = mid_at(marks(), 1, np.array([T0 - 1, T0 + 50 * MS, T0 + 149 * MS, T0 + 6 * S, T0 + 6 * S + 1]))
    assert known.tolist() == [False, True, True, True, False]
    assert mid[1:4].tolist() == [100.1, 100.1, 100.5]


def test_markouts_of_a_known_fill_sequence():
    # buy 2 @ 99.95 at T0:        +100 ms: mid 100.1 -> +0.15 (1.5 ticks); 1 s: 99.9 -> -0.05; 5 s: 99.9 -> -0.05
    # sell 1 @ 100.35 at 200 ms:  +100 ms: mid 100.3 -> +0.05;  1 s (1.2 s): 99.9 -> +0.45;  5 s (5.2 s): 100.5 -> -0.15
    # buy 1 @ 100.4 at 5.5 s:     +100 ms: mid 100.5 -> +0.1;   1 s / 5 s: past the last mark (6 s): unresolved
    known, ticks, bps, quote = fill_markouts(FILLS, marks(), TICKS, 100 * MS)
    assert known.tolist() == [True, True, True]
    assert ticks.tolist() == pytest.approx([1.5, 0.5, 1.0])
    assert bps.tolist() == pytest.approx([0.15 / 99.95 * 1e4, 0.05 / 100.35 * 1e4, 0.1 / 100.4 * 1e4])
    assert quote.tolist() == pytest.approx([0.30, 0.05, 0.1])
    s = markout_summary(FILLS, marks(), TICKS)
    assert list(s) == [100, 1000, 5000]
    assert s[100] == pytest.approx({"count": 3, "unresolved": 0, "mean_ticks": 1.0, "median_ticks": 1.0,
                                    "mean_bps": float(np.mean(bps)), "median_bps": float(np.median(bps)),
                                    "sum_ticks": 3.0, "sum_quote": 0.45})
    assert s[1000]["count"] == 2 and s[1000]["unresolved"] == 1
    assert (s[1000]["mean_ticks"], s[1000]["sum_ticks"], s[1000]["sum_quote"]) == pytest.approx((2.0, 4.0, 0.35))
    assert (s[5000]["mean_ticks"], s[5000]["median_ticks"], s[5000]["sum_quote"]) == pytest.approx((-1.0, -1.0, -0.25))


def test_ticks_are_each_instrument_s_own_and_no_fill_has_no_mean():
    # sell 3 @ 10.00 of instrument 2 (tick 0.01) at T0: 1 s later the mid is 9.97: +0.03 = 3 of its ticks
    s = markout_summary([fill(T0, -1, 10.0, 3.0, iid=2)], marks(), TICKS, (S,))
    assert s[1000]["mean_ticks"] == pytest.approx(3.0) and s[1000]["sum_quote"] == pytest.approx(0.09)
    empty = markout_summary([], marks(), TICKS)
    assert empty[1000] == {"count": 0, "unresolved": 0, "mean_ticks": None, "median_ticks": None, "mean_bps": None,
                           "median_bps": None, "sum_ticks": 0.0, "sum_quote": 0.0}


def test_bad_markout_input_is_named():
    with pytest.raises(ValueError, match=r"ticks\[3\] must be a finite tick size > 0"):
        markout_summary([fill(T0, 1, 1.0, 1.0, iid=3)], marks(), TICKS)
    with pytest.raises(ValueError, match="horizon must be a positive whole number of ms"):
        markout_summary(FILLS, marks(), TICKS, (1500,))
    with pytest.raises(ValueError, match="CancelledOrder.side"):
        CancelledOrder(ts_ns=T0, instrument_id=1, side=0, price=1.0, size=1.0)
    with pytest.raises(ValueError, match="CancelledOrder.size"):
        CancelledOrder(ts_ns=T0, instrument_id=1, side=1, price=1.0, size=-1.0)


def path(books=(), trades=()) -> MarketPath:
    """Instrument 1's path: books (ms after T0, best bid, best ask), trades (ms after T0, price)."""
    bt = np.array([T0 + ms * MS for ms, _, _ in books], np.int64)
    tt = np.array([T0 + ms * MS for ms, _ in trades], np.int64)
    return MarketPath(book_ts={1: bt}, bid={1: np.array([b for _, b, _ in books], float)},
                      ask={1: np.array([a for _, _, a in books], float)}, trade_ts={1: tt},
                      trade_px={1: np.array([p for _, p in trades], float)})


BID = CancelledOrder(ts_ns=T0, instrument_id=1, side=1, price=100.0, size=1.0, why="emergency")
ASK = CancelledOrder(ts_ns=T0, instrument_id=1, side=-1, price=100.2, size=1.0, why="emergency")
BOOKS = [(100, 99.9, 100.1), (400, 99.8, 100.0), (900, 99.7, 99.9)]  # the ask reaches our bid at 400, passes it at 900
TRADES = [(0, 99.0), (300, 100.0), (700, 99.95)]  # at the cancel itself (not after it), at our price, through it


@pytest.mark.parametrize("books, trades, window_ms, touch, through", [
    (BOOKS, TRADES, 1000, 300, 700),  # trades decide first: at our price at 300 ms, through it at 700 ms
    (BOOKS, TRADES, 500, 300, None),  # the trade through it comes after the window
    (BOOKS, [], 1000, 400, 900),  # books only: the ask at our price at 400 ms, beyond it at 900 ms
    (BOOKS[:1], [(0, 99.0)], 1000, None, None),  # a trade at the cancel's own time is not after it
])
def test_would_a_cancelled_bid_have_filled(books, trades, window_ms, touch, through):
    p = path(books, trades)
    got = [would_fill_ns(BID, p, window_ms * MS, rule) for rule in ("touch", "through")]
    assert got == [None if x is None else T0 + x * MS for x in (touch, through)]


def test_would_a_cancelled_ask_have_filled_mirrors_the_bid():
    p = path([(100, 100.1, 100.3), (600, 100.3, 100.5)], [(200, 100.2), (800, 100.25)])
    assert would_fill_ns(ASK, p, S, "touch") == T0 + 200 * MS  # a trade at our ask
    assert would_fill_ns(ASK, p, S, "through") == T0 + 600 * MS  # the bid above our ask
    with pytest.raises(ValueError, match="rule must be one of"):
        would_fill_ns(ASK, p, S, "queue")
    with pytest.raises(ValueError, match="window_ns must be a positive integer"):
        would_fill_ns(ASK, p, 0, "touch")


def test_avoided_fills_split_adverse_selection_from_good_fills_given_up():
    """Orders of instrument 1 cancelled at T0: a bid at 100.0 (2 units), traded through at 150 ms (a
    trade at 99.85), would have bought at 100.0; 1 s later the mid (99.9 at 1 s) is 0.1 below: -0.2
    quote, adverse selection avoided. An ask at 100.5 is never reached (every trade is below it). A
    bid at 99.5 cancelled at 900 ms is traded through by a trade at 99.4 at 950 ms and would have
    bought at 99.5: 1 s later (1.95 s) the mid is 99.9, +0.4: a good fill given up. Maker fee 10 bps:
    100.0 * 2 * 0.001 = 0.2 and 99.5 * 0.001 = 0.0995."""
    cancelled = [CancelledOrder(ts_ns=T0, instrument_id=1, side=1, price=100.0, size=2.0),
                 CancelledOrder(ts_ns=T0, instrument_id=1, side=-1, price=100.5, size=1.0),
                 CancelledOrder(ts_ns=T0 + 900 * MS, instrument_id=1, side=1, price=99.5, size=1.0),
                 CancelledOrder(ts_ns=T0, instrument_id=1, side=1, price=99.0, size=0.0)]  # nothing left: not counted
    p = path([], [(150, 99.85), (950, 99.4)])
    a = avoided_fills(cancelled, p, marks(), TICKS, maker_fee_bps=10.0, window_ns=S, horizons_ns=(S,))
    assert a["cancelled"] == 3 and a["window_ms"] == 1000
    through = a["rules"]["through"]
    assert through["would_fill"] == 2 and through["notional"] == pytest.approx(299.5)
    assert through["fees_quote"] == pytest.approx(0.2995)
    m = through["markouts"][1000]
    assert m["count"] == 2 and m["unresolved"] == 0
    assert (m["adverse_quote"], m["good_quote"], m["sum_quote"]) == pytest.approx((0.2, 0.4, 0.2))
    assert m["net_quote"] == pytest.approx(0.2 - 0.2995)  # net of fees: giving them up saved 0.0995
    assert m["sum_ticks"] == pytest.approx(-1.0 + 4.0)
    # touch: the same here (no trade at exactly a bid's price)
    assert a["rules"]["touch"]["would_fill"] == 2


def test_the_market_path_comes_from_the_feature_rows_and_the_tape_s_trades():
    from pipeline.trading.evaluation.decisions import compute_features
    from tests.pipeline.trading.evaluation.test_simulator import INS, book

    events = [book(T0, 100.0, 5, 100.2, 5, 1),
              MarketEvent(T0 + MS, Kind.TRADE, 1, TRADE_STRUCT.pack(1, TRADE_SIDE_SELL, 7, T0 + MS, 100.0, 2.0)),
              book(T0 + 2 * MS, 99.9, 5, 100.3, 5, 2)]
    tape = Tape((INS,), events)
    p = market_path(compute_features(tape), tape.events)
    assert p.book_ts[1].tolist() == [T0, T0 + 2 * MS]
    assert p.bid[1].tolist() == pytest.approx([100.0, 99.9]) and p.ask[1].tolist() == pytest.approx([100.2, 100.3])
    assert p.trade_ts[1].tolist() == [T0 + MS] and p.trade_px[1].tolist() == [100.0]
