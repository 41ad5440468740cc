"""``OrderEngine(queue_model=True)`` (``pipeline.venue.queue``): a resting order waits behind the
public size displayed at its price; trades at its price eat that queue first, cancels ahead of it
shorten it, a trade through its price or a crossing book fills it at once; liquidity is consumed
once across our orders. And the defaults (no queue) keep the old behaviour. Pure: a book given as
strings, an injected clock. Sizes are hand-computed in each test."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from pipeline.venue.errors import VenueError
from pipeline.venue.orders import OrderEngine
from pipeline.venue.queue import QueuePositions, displayed_sizes, sizes_at
from tests.support.venue import RULES, Book, venue_clock

D = Decimal
_coid = iter(range(1, 1_000_000))


def order(side="buy", price="99.9", size="1", force="gtc", symbol="BTCUSDT") -> dict:
    return {"symbol": symbol, "side": side, "orderType": "limit", "force": force, "price": price, "size": size,
            "clientOid": f"q{next(_coid)}"}


def trade(price: str, size: str) -> dict:
    return {"price": price, "size": size, "side": "sell", "ts": "1"}


def fills_of(eng: OrderEngine, o) -> list[tuple[str, str, str]]:
    return [(str(f.price), str(f.size), f.liquidity) for f in eng.fills_since(order_id=o.order_id)]


@pytest.fixture
def book() -> Book:
    b = Book()
    b.set("BTCUSDT", [["99.9", "3"], ["99.8", "2"]], [["100.1", "1"], ["100.2", "2"]])
    return b


@pytest.fixture
def eng(book) -> OrderEngine:
    return OrderEngine(RULES, book.levels, venue_clock(), queue_model=True)


# -- queue position ---------------------------------------------------------------------------


def test_behind_three_lots_a_two_lot_trade_does_not_fill_and_the_next_two_lot_trade_fills_one(eng, book):
    o = eng.place(order(size="2"))
    assert eng.queue_ahead(o.order_id) == D("3")
    assert eng.traded("BTCUSDT", [trade("99.9", "2")]) == 0
    assert eng.queue_ahead(o.order_id) == D("1") and o.filled == 0
    book.set("BTCUSDT", [["99.9", "1"], ["99.8", "2"]], [["100.1", "1"]])  # the book shows that trade
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == D("1")  # 3 - 1 = the 2 that traded: no cancel, not eaten twice
    assert eng.traded("BTCUSDT", [trade("99.9", "2")]) == 1
    assert fills_of(eng, o) == [("99.9", "1", "maker")]
    assert o.filled == D("1") and eng.queue_ahead(o.order_id) == 0


def test_a_sell_waits_behind_the_ask_in_the_same_way(eng):
    o = eng.place(order(side="sell", price="100.2", size="1"))
    assert eng.queue_ahead(o.order_id) == D("2")
    assert eng.traded("BTCUSDT", [trade("100.2", "1.5")]) == 0
    assert eng.traded("BTCUSDT", [trade("100.2", "0.7")]) == 1
    assert fills_of(eng, o) == [("100.2", "0.2", "maker")]


def test_a_cancel_ahead_of_us_shrinks_the_queue(eng, book):
    o = eng.place(order(size="1"))  # last in a level of 3: every cancel is ahead of us
    book.set("BTCUSDT", [["99.9", "1"], ["99.8", "2"]], [["100.1", "1"]])  # 2 cancelled, no trade
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == D("1")
    assert eng.traded("BTCUSDT", [trade("99.9", "1")]) == 0
    assert eng.traded("BTCUSDT", [trade("99.9", "1")]) == 1 and o.filled == D("1")


def test_cancels_in_a_level_that_grew_behind_us_are_credited_pro_rata_rounded_up_to_a_lot(eng, book):
    o = eng.place(order(size="1"))
    book.set("BTCUSDT", [["99.9", "6"]], [["100.1", "1"]])  # 3 joined behind us
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == D("3")  # an increase is behind us
    book.set("BTCUSDT", [["99.9", "3"]], [["100.1", "1"]])  # 3 of 6 cancelled: 3 * 3/6 = 1.5 ahead of us
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == D("1.5")
    book.set("BTCUSDT", [["99.9", "3.5"]], [["100.1", "1"]])  # +0.5 behind: level 3.5, 1.5 ahead
    eng.book_changed("BTCUSDT")
    book.set("BTCUSDT", [["99.9", "2.5"]], [["100.1", "1"]])  # 1 cancelled: 1.5 - 1 * 1.5/3.5 = 1.0714.. -> 1.072
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == D("1.072")


def test_the_queue_never_exceeds_the_displayed_size_and_a_vanished_level_puts_us_in_front(eng, book):
    o = eng.place(order(size="1"))
    book.set("BTCUSDT", [["99.8", "2"]], [["100.1", "1"]])  # 99.9 gone (trades not seen, cancels)
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == 0
    assert eng.traded("BTCUSDT", [trade("99.9", "0.25")]) == 1
    assert fills_of(eng, o) == [("99.9", "0.25", "maker")]


def test_a_trade_that_printed_before_we_joined_is_not_ahead_of_us_once_the_book_shows_it(eng, book):
    eng.traded("BTCUSDT", [trade("99.9", "2")])  # the book still shows 3 at 99.9 when we join
    o = eng.place(order(size="1"))
    assert eng.queue_ahead(o.order_id) == D("3")
    book.set("BTCUSDT", [["99.9", "1"], ["99.8", "2"]], [["100.1", "1"]])  # now it shows the trade
    eng.book_changed("BTCUSDT")
    assert eng.queue_ahead(o.order_id) == D("1")  # no cancel (3 - 2 traded = 1), capped by the 1 shown


def test_a_trade_through_our_price_fills_us_at_once_whatever_the_queue(eng):
    o = eng.place(order(size="1"))
    assert eng.queue_ahead(o.order_id) == D("3")
    assert eng.traded("BTCUSDT", [trade("99.8", "0.5")]) == 1
    assert fills_of(eng, o) == [("99.9", "0.5", "maker")]  # at OUR price, up to the trade's size
    assert eng.traded("BTCUSDT", [trade("99.7", "5")]) == 1 and o.filled == D("1")
    assert eng.queue_ahead(o.order_id) is None  # filled: out of the queue


def test_a_book_crossing_our_price_fills_us_at_once_whatever_the_queue(eng, book):
    o = eng.place(order(size="1"))
    book.set("BTCUSDT", [["99.8", "2"]], [["99.9", "0.4"], ["100.0", "1"]])
    assert eng.book_changed("BTCUSDT") == 1
    assert fills_of(eng, o) == [("99.9", "0.4", "maker")]
    book.set("BTCUSDT", [["99.7", "2"]], [["99.8", "5"]])
    assert eng.book_changed("BTCUSDT") == 1 and o.filled == D("1")


def test_a_cancelled_order_leaves_the_queue_and_a_new_price_level_is_the_front(eng):
    o = eng.place(order(size="1"))
    eng.cancel("BTCUSDT", o.order_id)
    assert eng.queue_ahead(o.order_id) is None
    front = eng.place(order(price="100.0", size="1"))  # inside the spread: nobody displayed there
    assert eng.queue_ahead(front.order_id) == 0
    assert eng.traded("BTCUSDT", [trade("100.0", "0.3")]) == 1 and front.filled == D("0.3")


def test_a_restored_resting_order_rejoins_behind_the_size_displayed_now(book):
    records = []
    first = OrderEngine(RULES, book.levels, venue_clock(), on_event=records.append, queue_model=True)
    o = first.place(order(size="1"))
    first.traded("BTCUSDT", [trade("99.9", "2")])
    assert first.queue_ahead(o.order_id) == D("1")
    second = OrderEngine(RULES, book.levels, venue_clock(), queue_model=True)
    second.restore([{"t": "account", "account_id": "7", "created_ms": 1}, *records])
    assert second.queue_ahead(o.order_id) == D("3")  # its old place is unknown: the back of the level


# -- liquidity consumed once ------------------------------------------------------------------


def test_two_orders_at_one_price_share_one_trade_through_the_queue(eng):
    a = eng.place(order(size="1"))
    b = eng.place(order(size="1"))
    assert (eng.queue_ahead(a.order_id), eng.queue_ahead(b.order_id)) == (D("3"), D("3"))
    # 4 trade: 3 public ahead of a, then a's 1; b (behind a and the same 3) gets nothing of it
    assert eng.traded("BTCUSDT", [trade("99.9", "4")]) == 1
    assert (a.filled, b.filled, eng.queue_ahead(b.order_id)) == (D("1"), 0, 0)
    assert eng.traded("BTCUSDT", [trade("99.9", "0.6")]) == 1 and b.filled == D("0.6")
    assert sum(f.size for f in eng.fills) == D("1.6")  # = 4 + 0.6 traded - 3 public ahead


def test_a_trade_through_two_of_our_prices_fills_them_once_in_total(eng):
    a = eng.place(order(price="100.0", size="1"))
    b = eng.place(order(price="99.9", size="1"))
    assert eng.traded("BTCUSDT", [trade("99.7", "1.2")]) == 2
    assert (a.filled, b.filled) == (D("1"), D("0.2"))


def test_a_crossing_book_fills_two_of_our_orders_once_against_one_displayed_size(eng, book):
    a = eng.place(order(size="1"))
    b = eng.place(order(size="1"))
    book.set("BTCUSDT", [["99.8", "2"]], [["99.9", "1.5"]])
    assert eng.book_changed("BTCUSDT") == 2
    assert (a.filled, b.filled) == (D("1"), D("0.5"))


def test_two_taker_orders_never_take_the_same_displayed_size_with_the_queue_on(eng):
    a = eng.place(order(price="100.1", size="0.6", force="ioc"))
    b = eng.place(order(price="100.1", size="0.6", force="ioc"))
    assert (a.filled, b.filled) == (D("0.6"), D("0.4"))  # 100.1 shows 1
    assert [f.liquidity for f in eng.fills] == ["taker", "taker"]


# -- defaults ---------------------------------------------------------------------------------


def test_without_the_queue_model_the_first_trade_at_our_price_fills_us(book):
    eng = OrderEngine(RULES, book.levels, venue_clock())  # the paper venue's default
    assert eng.queue_model is False
    o = eng.place(order(size="2"))
    assert eng.queue_ahead(o.order_id) is None
    assert eng.traded("BTCUSDT", [trade("99.9", "2")]) == 1 and o.filled == D("2")


def test_the_queue_only_matters_where_size_is_displayed_ahead(book):
    """At a price nobody shows, the queue model fills exactly like the default engine."""
    runs = []
    for queue_model in (False, True):
        b = Book()
        b.set("BTCUSDT", [["99.9", "3"]], [["100.1", "1"]])
        eng = OrderEngine(RULES, b.levels, venue_clock(), queue_model=queue_model)
        o = eng.place(order(price="100.0", size="1"))
        eng.traded("BTCUSDT", [trade("100.0", "0.4"), trade("100.1", "1"), trade("99.9", "0.3")])
        b.set("BTCUSDT", [["99.9", "3"]], [["100.0", "0.2"]])
        eng.book_changed("BTCUSDT")
        runs.append([(str(f.price), str(f.size), f.liquidity, f.fee) for f in eng.fills] + [o.status])
    assert runs[0] == runs[1] == [("100.0", "0.4", "maker", 0), ("100.0", "0.3", "maker", 0),
                                  ("100.0", "0.2", "maker", 0), "partially_filled"]


def test_queue_model_must_be_a_bool(book):
    with pytest.raises(VenueError, match="queue_model"):
        OrderEngine(RULES, book.levels, venue_clock(), queue_model=1)


# -- the queue bookkeeping alone ---------------------------------------------------------------


def test_displayed_sizes_skips_bad_levels_and_keeps_the_first_of_a_price():
    assert displayed_sizes([["1.5", "2"], ["x", "1"], ["1.5", "9"], ["1.4"], ["1.3", "nan"]]) == {
        D("1.5"): D("2")}


def test_sizes_at_reads_one_side_only_down_to_our_worst_price():
    def bids():
        yield from (["10", "1"], ["9.5", "x"], ["bad", "2"], ["9", "3"], ["8", "4"])
        raise AssertionError("read past the worst price wanted")

    assert sizes_at(bids(), [D("9"), D("9.5"), D("8.5")], True) == {D("9"): D("3")}
    assert sizes_at([["100.1", "1"], ["100.2", "2"], ["100.2", "5"]], [D("100.2")], False) == {D("100.2"): D("2")}
    assert sizes_at([["1", "1"]], [], True) == {}


def test_trades_noted_before_the_book_are_not_counted_as_cancels_and_are_forgotten_after_it():
    q = QueuePositions()
    o = SimpleNamespace(order_id=1, price=D("10"))

    q.join(1, D("5"))
    q.note_trade("X", D("10"), D("2"))
    assert q.take(1, D("2")) == 0 and q.ahead(1) == D("3")
    q.book_changed("X", [o], {D("10"): D("3")}, None)  # 5 - 2 traded = 3: no cancel
    q.trades_applied("X")
    assert q.ahead(1) == D("3")
    q.book_changed("X", [o], {D("10"): D("2")}, None)  # now a 1 decrease is a cancel (we are last: all ahead)
    assert q.ahead(1) == D("2")
