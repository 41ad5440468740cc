"""ITCH executions as TRADE payloads (pipeline/trading/itch/executions.py): each execution type on a
hand-built session, the hidden flag of P, what is not reported, and the BOOK flag."""

from __future__ import annotations

import numpy as np

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.book import NO_BOOK, BookEvent, L3Book
from pipeline.trading.itch.executions import ExecutionBook
from pipeline.trading.messages import (BOOK_FLAG_HIDDEN_REPORTED, TRADE_DTYPE, TRADE_FLAG_HIDDEN,
                                       TRADE_SIDE_BUY, TRADE_SIDE_SELL)

AAPL, IBM = 1, 3  # stock_locates; IBM is not configured
IID = 10
MIDNIGHT = 1_700_000_000_000_000_000


def R(locate: int, symbol: str):
    return M.StockDirectory(locate, 0, 1, M.pad_alpha(symbol, 8), b"Q", b"N", 100, b"N", b"C", b"  ", b"P",
                            b"N", b"N", b"1", b"N", 0, b"N")


def A(loc, ref, side, shares, px):
    return M.AddOrder(loc, 0, 1_000, ref, side, shares, b"AAPL    ", px)


def feed(book, records):
    """Each record through apply_raw (the feed's path); returns the ids it returned."""
    return [book.apply_raw(M.encode(r), 0, None, seq) for seq, r in enumerate(records, 1)]


def recording_book(**kw):
    trades = []
    book = ExecutionBook({"AAPL": IID}, on_trade=lambda p: trades.append(np.frombuffer(bytes(p), TRADE_DTYPE, 1)[0]),
                         **kw)
    return book, trades


def fields(t):
    return (int(t["instrument_id"]), int(t["side"]), int(t["flags"]), int(t["trade_id"]), int(t["exch_ts_ns"]),
            float(t["price"]), float(t["size"]))


SESSION = [R(AAPL, "AAPL"), R(IBM, "IBM"),
           A(AAPL, 1, b"B", 300, 1_000_000), A(AAPL, 2, b"S", 200, 1_001_000), A(IBM, 3, b"B", 100, 500_000)]


def test_each_execution_type_becomes_its_trade():
    book, trades = recording_book(midnight_epoch_ns=MIDNIGHT)
    got = feed(book, SESSION + [
        M.OrderExecuted(AAPL, 0, 2_000, 1, 100, 501),  # the bid hit: a sell of 100 at 100.00
        M.OrderExecutedWithPrice(AAPL, 0, 3_000, 2, 50, 502, b"Y", 1_000_500),  # the ask lifted at 100.05
        M.Trade(AAPL, 0, 4_000, 0, b"B", 700, b"AAPL    ", 1_000_400, 503),  # non-displayed
    ])
    assert got[-3:] == [IID, IID, NO_BOOK]  # a P changes no book
    assert [fields(t) for t in trades] == [
        (IID, TRADE_SIDE_SELL, 0, 501, MIDNIGHT + 2_000, 100.0, 100.0),
        (IID, TRADE_SIDE_BUY, 0, 502, MIDNIGHT + 3_000, 100.05, 50.0),
        (IID, TRADE_SIDE_BUY, TRADE_FLAG_HIDDEN, 503, MIDNIGHT + 4_000, 100.04, 700.0),
    ]
    assert (book.trades_reported, book.hidden_reported) == (3, 1)
    assert book.order(1)[2] == 200 and book.order(2)[2] == 150  # the book itself as L3Book keeps it


def test_what_is_not_reported():
    book, trades = recording_book()
    feed(book, SESSION + [
        M.OrderExecutedWithPrice(AAPL, 0, 3_000, 2, 50, 502, b"N", 1_000_500),  # non-printable: reported elsewhere
        M.OrderExecuted(AAPL, 0, 3_000, 1, 999, 504),  # more than rests: rejected by the book
        M.OrderExecuted(AAPL, 0, 3_000, 77, 1, 505),  # no such order
        M.OrderExecuted(IBM, 0, 3_000, 3, 10, 506),  # a stock not configured
        M.Trade(IBM, 0, 4_000, 0, b"B", 700, b"IBM     ", 500_000, 507),
        M.Trade(AAPL, 0, 4_000, 0, b"X", 700, b"AAPL    ", 1_000_400, 508),  # an indicator other than B / S
    ])
    assert trades == [] and book.counts[BookEvent.OVER_EXECUTION] == 1 and book.counts[BookEvent.UNKNOWN_REF] == 1
    assert book.order(2)[2] == 150  # the non-printable execution still left the book


def test_books_say_the_venue_reports_hidden_executions_and_are_otherwise_the_l3_books():
    book, _ = recording_book()
    ref = L3Book({"AAPL": IID})
    feed(book, SESSION)
    feed(ref, SESSION)
    mine, theirs = book.book_payload(IID)[0], ref.book_payload(IID)[0]
    assert mine["flags"] == BOOK_FLAG_HIDDEN_REPORTED and theirs["flags"] == 0
    mine["flags"] = 0
    assert mine.tobytes() == theirs.tobytes()


def test_bytes_that_do_not_decode_are_counted_as_by_the_l3_book():
    book, trades = recording_book()
    assert book.apply_raw(b"E\x00\x01", 0, None, 1) == NO_BOOK and book.apply_raw(b"", 0, None, 2) == NO_BOOK
    assert book.counts[BookEvent.DECODE_ERROR] == 2 and trades == []
