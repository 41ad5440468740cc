"""The simulated exchange: ORDER payloads through the paper venue's engine against the replayed book,
EXEC_REPORTs back as the order sender reports them."""

from __future__ import annotations

import pytest

from pipeline.trading.bitget.book import BOOK_STRUCT
from pipeline.trading.evaluation.exchange import ReplayedBook, SimulatedExchange
from pipeline.trading.evaluation.replay import TapeInstrument
from pipeline.trading.messages import (EXEC_STRUCT, ORDER_STRUCT, ExecReason, ExecType, OrderCmd, OrderOrigin, Side,
                                       TimeInForce)
from pipeline.venue.fees import FeeSchedule
from tests.pipeline.trading.evaluation.test_simulator import T0, book

INS = TapeInstrument(id=1, symbol="ABCUSDT", tick_size=0.1, lot_size=0.01)


def order(cmd, oid, side=0, tif=0, price=0.0, size=0.0) -> bytes:
    return ORDER_STRUCT.pack(1, cmd, side, tif, OrderOrigin.FAST, 0, oid, price, size, 0, 0)


def reports(payloads):
    """(exec_type, side, reason, order_id, price, size, leaves) of each report."""
    return [EXEC_STRUCT.unpack(p)[1:8] for p in payloads]


@pytest.fixture
def ex():
    x = SimulatedExchange([INS], lambda: T0, fees=FeeSchedule(maker_bps=2, taker_bps=6), queue_model=True)
    x.on_book(1, book(T0, 100.0, 5, 100.2, 0.5, 1).payload)
    return x


def test_the_book_is_shown_as_the_venue_s_strings(ex):
    assert ex.book.levels("ABCUSDT") == ([["100.0", "5.00"]], [["100.2", "0.50"]])
    assert ReplayedBook([INS]).levels("ABCUSDT") == ([], [])
    assert ex.book.mid("ABCUSDT") == pytest.approx(100.1)


def test_new_cancel_and_cancel_all(ex):
    assert reports(ex.on_order(order(OrderCmd.NEW, 11, Side.BUY, TimeInForce.POST_ONLY, 100.0, 0.02))) == [
        (ExecType.ACKED, Side.BUY, 0, 11, 100.0, 0.02, 0.02)]
    ex.on_order(order(OrderCmd.NEW, 12, Side.BUY, TimeInForce.POST_ONLY, 99.9, 0.01))
    assert reports(ex.on_order(order(OrderCmd.CANCEL, 11))) == [(ExecType.CANCELLED, Side.BUY, 0, 11, 100.0, 0.02, 0.0)]
    assert ex.on_order(order(OrderCmd.CANCEL, 11)) == []  # no longer open: nothing to report
    assert reports(ex.on_order(order(OrderCmd.CANCEL_ALL, 0))) == [
        (ExecType.CANCELLED, Side.BUY, 0, 12, 99.9, 0.01, 0.0)]
    assert ex.counts["placed"] == 2 and ex.counts["cancelled"] == 2


def test_refusals_are_reported(ex):
    # a post-only buy at the ask would take liquidity: the venue refuses it
    assert reports(ex.on_order(order(OrderCmd.NEW, 21, Side.BUY, TimeInForce.POST_ONLY, 100.2, 0.01))) == [
        (ExecType.REJECTED, Side.BUY, ExecReason.VENUE_REJECTED, 21, 100.2, 0.01, 0.0)]
    # off the tick grid: the sender's own body check refuses it before it is sent
    assert reports(ex.on_order(order(OrderCmd.NEW, 22, Side.BUY, TimeInForce.POST_ONLY, 100.05, 0.01))) == [
        (ExecType.REJECTED, Side.BUY, ExecReason.MALFORMED, 22, 100.05, 0.01, 0.0)]
    assert ex.counts["rejected"] == 1 and ex.counts["malformed"] == 1


def test_a_taker_fills_the_displayed_size_once_with_the_taker_fee(ex):
    got = reports(ex.on_order(order(OrderCmd.NEW, 31, Side.BUY, TimeInForce.IOC, 100.2, 0.8)))
    assert got == [(ExecType.ACKED, Side.BUY, 0, 31, 100.2, 0.8, 0.8),
                   (ExecType.FILLED, Side.BUY, 0, 31, 100.2, 0.5, pytest.approx(0.3)),
                   (ExecType.CANCELLED, Side.BUY, 0, 31, 100.2, 0.8, 0.0)]
    # the same displayed 0.5 is not there again in this book state
    got = reports(ex.on_order(order(OrderCmd.NEW, 32, Side.BUY, TimeInForce.IOC, 100.2, 0.1)))
    assert [r[0] for r in got] == [ExecType.ACKED, ExecType.CANCELLED]
    (f,) = ex.fills
    assert (f.side, f.price, f.size, f.liquidity) == (1, 100.2, 0.5, "taker")
    assert f.fee == pytest.approx(100.2 * 0.5 * 6 / 10_000)


def test_the_engine_s_book_renders_only_the_levels_it_reads():
    rb = ReplayedBook([INS])
    z = [0.0] * 12
    payload = BOOK_STRUCT.pack(1, 0, 3, 2, 1, T0, 100.0, 99.9, 99.8, *z, 5, 2.5, 0.125, *z,
                               100.2, 100.3, 0.0, *z, 0.5, 7, 0.0, *z)
    rb.set(1, payload)
    bids, asks = rb.rendered("ABCUSDT")
    assert (len(bids), len(asks)) == (3, 2)
    assert bids[0] == ["100.0", "5.00"] and bids._done == [["100.0", "5.00"]]  # one level read: one rendered
    assert bids[-1] == ["99.8", "0.12"] and len(bids._done) == 3  # the last: those before it too
    assert list(asks) == [["100.2", "0.50"], ["100.3", "7.00"]]
    assert bids[1:] == [["99.9", "2.50"], ["99.8", "0.12"]]
    with pytest.raises(IndexError):
        asks[2]
    assert rb.rendered("ABCUSDT", 1) == ([["100.0", "5.00"]], [["100.2", "0.50"]])
    assert rb.levels("ABCUSDT") == ([["100.0", "5.00"], ["99.9", "2.50"], ["99.8", "0.12"]],
                                    [["100.2", "0.50"], ["100.3", "7.00"]])
    assert rb.rendered("XYZUSDT") == ([], [])


def test_cancelled_orders_keep_their_working_size_and_why_and_filled_orders_are_counted(ex):
    """A bid of 0.04 at 100.0 rests behind 5; a sell trade of 5.01 at 100.0 eats the queue and fills 0.01
    of it, a second one of 0.01 fills 0.01 more (one order filled, twice); the EMERGENCY cancel then
    removes the 0.02 still working."""
    from pipeline.trading.messages import TRADE_SIDE_SELL, TRADE_STRUCT

    ex.on_order(order(OrderCmd.NEW, 41, Side.BUY, TimeInForce.POST_ONLY, 100.0, 0.04))
    ex.on_trade(1, TRADE_STRUCT.pack(1, TRADE_SIDE_SELL, 1, T0, 100.0, 5.01))
    ex.on_trade(1, TRADE_STRUCT.pack(1, TRADE_SIDE_SELL, 2, T0, 100.0, 0.01))
    assert ex.counts["fills"] == 2 and ex.counts["filled_orders"] == 1
    ex.on_order(order(OrderCmd.NEW, 42, Side.SELL, TimeInForce.POST_ONLY, 100.3, 0.02))
    ex.on_order(order(OrderCmd.CANCEL_ALL, 0), why="emergency")
    got = [(c.ts_ns, c.side, c.price, round(c.size, 9), c.why) for c in ex.cancelled]
    assert got == [(T0, 1, 100.0, 0.02, "emergency"), (T0, -1, 100.3, 0.02, "emergency")]
    assert ex.counts["filled_orders"] == 1 and ex.counts["placed"] == 2
