"""``pipeline.venue.orders.OrderEngine``: our orders against the paper venue's public book. Pure: a
book given as strings, an injected clock; the last test drives the engine from a real
``VenueServer`` market through its listener hook."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.venue.errors import VenueError
from pipeline.venue.account_state import STATUS_CANCELLED, STATUS_FILLED, STATUS_LIVE, STATUS_PARTIAL
from pipeline.venue.order_fields import InstrumentRules, OrderRejected, rules_from_config
from pipeline.venue.orders import OrderEngine
from tests.support.clock import ManualClock
from tests.support.venue import RULES, T0_MS, Book, synthetic, venue_clock

D = Decimal


@pytest.fixture
def book() -> Book:
    return Book()


@pytest.fixture
def clock() -> ManualClock:
    return venue_clock()


@pytest.fixture
def eng(book, clock) -> OrderEngine:
    return OrderEngine(RULES, book.levels, clock, max_notional=1_000_000)


_coid = iter(range(1, 1_000_000))


def order(side="buy", price="99.0", size="1", force="gtc", symbol="BTCUSDT", coid=None, **kw) -> dict:
    return {"symbol": symbol, "side": side, "orderType": "limit", "force": force, "price": price, "size": size,
            "clientOid": coid or f"c{next(_coid)}", **kw}


def fills_of(eng: OrderEngine, o) -> list[tuple[str, str, str]]:
    return [(str(f.price), str(f.size), f.scope) for f in eng.fills_since(order_id=o.order_id)]


# -- taker ------------------------------------------------------------------------------------


def test_a_buy_at_or_above_the_best_ask_takes_level_by_level_up_to_its_price(eng):
    o = eng.place(order(price="100.2", size="2.5"))
    assert fills_of(eng, o) == [("100.1", "1", "taker"), ("100.2", "1.5", "taker")]
    assert o.status == STATUS_FILLED and o.filled == D("2.5")
    assert o.to_json()["priceAvg"] == "100.16" and o.to_json()["baseVolume"] == "2.5"
    assert eng.position("BTCUSDT") == D("2.5")


def test_a_sell_takes_the_bids_and_the_position_goes_short(eng):
    o = eng.place(order(side="sell", price="99.8", size="1.5"))
    assert fills_of(eng, o) == [("99.9", "1", "taker"), ("99.8", "0.5", "taker")]
    assert eng.position("BTCUSDT") == D("-1.5")


def test_gtc_partial_rests_the_remainder_and_displayed_size_is_not_taken_twice(eng):
    a = eng.place(order(price="100.1", size="3"))
    assert a.status == STATUS_PARTIAL and a.filled == D("1")
    assert [o.order_id for o in eng.open_orders("BTCUSDT")] == [a.order_id]
    b = eng.place(order(price="100.2", size="3"))  # 100.1 was taken by a in this book state
    assert fills_of(eng, b) == [("100.2", "2", "taker")]
    assert b.status == STATUS_PARTIAL


def test_a_new_book_state_shows_the_displayed_size_again(eng, book):
    eng.place(order(price="100.1", size="1"))
    eng.book_changed("ETHUSDT")  # another symbol's change does not reset BTCUSDT
    assert eng.place(order(price="100.1", size="1", force="ioc")).filled == 0
    book.set("BTCUSDT", [["99.9", "1"]], [["100.3", "1"]])
    eng.book_changed("BTCUSDT")
    book.set("BTCUSDT", [["99.9", "1"]], [["100.1", "1"]])
    eng.book_changed("BTCUSDT")
    assert eng.place(order(price="100.1", size="1", force="ioc")).status == STATUS_FILLED


def test_ioc_fills_what_it_can_and_cancels_the_rest(eng):
    o = eng.place(order(price="100.1", size="4", force="ioc"))
    assert o.filled == D("1") and o.status == STATUS_CANCELLED
    assert eng.open_orders() == []


def test_fok_fills_fully_or_not_at_all(eng):
    killed = eng.place(order(price="100.2", size="3.5", force="fok"))  # 1 + 2 visible up to 100.2
    assert killed.status == STATUS_CANCELLED and killed.filled == 0 and eng.fills == []
    done = eng.place(order(price="100.2", size="3", force="fok"))
    assert done.status == STATUS_FILLED and fills_of(eng, done) == [("100.1", "1", "taker"), ("100.2", "2", "taker")]


def test_post_only_that_would_cross_is_refused_and_not_placed(eng):
    with pytest.raises(OrderRejected) as e:
        eng.place(order(price="100.1", force="post_only", coid="po1"))
    assert e.value.code == "43027"
    assert eng.orders == {} and eng.counters["orders_rejected"] == 1
    o = eng.place(order(price="100.0", force="post_only", coid="po1"))  # the clientOid is still free
    assert o.status == STATUS_LIVE


# -- maker ------------------------------------------------------------------------------------


def test_a_resting_buy_fills_at_its_own_price_when_a_later_book_crosses_it(eng, book):
    o = eng.place(order(price="100.0", size="2"))
    assert o.status == STATUS_LIVE
    book.set("BTCUSDT", [["99.8", "1"]], [["99.9", "0.5"], ["100.0", "0.7"], ["100.1", "9"]])
    assert eng.book_changed("BTCUSDT") == 2
    assert fills_of(eng, o) == [("100.0", "0.5", "maker"), ("100.0", "0.7", "maker")]
    assert o.status == STATUS_PARTIAL and o.remaining == D("0.8")
    assert eng.book_changed("BTCUSDT") == 2  # a new book state (same levels): fills again
    assert o.status == STATUS_FILLED and o.filled == D("2")  # never more than the order size


def test_a_resting_sell_fills_on_a_trade_at_or_through_its_price(eng):
    o = eng.place(order(side="sell", price="100.3", size="1"))
    assert eng.traded("BTCUSDT", [{"price": "100.2", "size": "5", "side": "buy", "ts": "1", "tradeId": "1"}]) == 0
    eng.traded("BTCUSDT", [{"price": "100.3", "size": "0.4", "side": "buy", "ts": "2", "tradeId": "2"}])
    assert fills_of(eng, o) == [("100.3", "0.4", "maker")]
    eng.traded("BTCUSDT", [{"price": "100.9", "size": "7", "side": "buy", "ts": "3", "tradeId": "3"}])
    assert fills_of(eng, o)[-1] == ("100.3", "0.6", "maker") and o.status == STATUS_FILLED
    assert eng.position("BTCUSDT") == D("-1")


def test_resting_orders_fill_in_price_time_priority(eng, clock):
    early = eng.place(order(price="99.0", size="1"))
    clock.advance_ms(5)
    better = eng.place(order(price="99.5", size="1"))
    clock.advance_ms(5)
    late = eng.place(order(price="99.0", size="1"))
    eng.traded("BTCUSDT", [{"price": "98.0", "size": "2.5", "side": "sell", "ts": "1"}])
    assert [(f.order_id, str(f.size)) for f in eng.fills] == [(better.order_id, "1"), (early.order_id, "1"),
                                                            (late.order_id, "0.5")]
    assert late.status == STATUS_PARTIAL and late.to_json()["uTime"] == str(T0_MS + 10)


def test_a_malformed_public_trade_is_ignored(eng):
    eng.place(order(price="99.0"))
    assert eng.traded("BTCUSDT", [{"price": "x", "size": "1"}, {"size": "1"}, {"price": "98", "size": "-1"}]) == 0


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_by_order_id_or_client_oid_and_a_cancelled_order_no_longer_fills(eng):
    a = eng.place(order(price="99.0", coid="a"))
    b = eng.place(order(price="99.1", coid="b"))
    assert eng.cancel("BTCUSDT", order_id=str(a.order_id)) is a
    assert eng.cancel("BTCUSDT", client_oid="b") is b
    assert a.status == b.status == STATUS_CANCELLED and eng.counters["cancels"] == 2
    assert eng.traded("BTCUSDT", [{"price": "90", "size": "9"}]) == 0
    for kwargs in ({"order_id": a.order_id}, {"client_oid": "nope"}, {"order_id": "123"}):
        with pytest.raises(OrderRejected) as e:
            eng.cancel("BTCUSDT", **kwargs)
        assert e.value.code == "43001"
    with pytest.raises(OrderRejected) as e:
        eng.cancel("BTCUSDT")
    assert e.value.code == "40019"


def test_a_filled_order_cannot_be_cancelled(eng):
    o = eng.place(order(price="100.1", size="1"))
    with pytest.raises(OrderRejected, match="43001"):
        eng.cancel("BTCUSDT", order_id=o.order_id)


def test_cancel_symbol_cancels_every_open_order_of_that_symbol_only(eng):
    a = eng.place(order(price="99.0"))
    b = eng.place(order(side="sell", price="101.0"))
    e = eng.place(order(symbol="ETHUSDT", price="9.5", size="1"))
    assert eng.cancel_symbol("BTCUSDT") == [a, b]
    assert eng.open_orders() == [e]
    assert eng.cancel_symbol("BTCUSDT") == []


# -- identity and sanity ----------------------------------------------------------------------


def test_a_duplicate_client_oid_is_refused_and_the_order_not_placed_again(eng):
    first = eng.place(order(price="99.0", coid="dup"))
    eng.cancel("BTCUSDT", client_oid="dup")
    with pytest.raises(OrderRejected) as e:
        eng.place(order(price="100.5", coid="dup"))
    assert e.value.code == "43118"
    assert list(eng.orders.values()) == [first] and eng.fills == []


def test_ids_increase_and_the_fills_list_pages_with_id_greater_than(eng):
    a = eng.place(order(price="100.2", size="2"))
    b = eng.place(order(symbol="ETHUSDT", price="10.01", size="1"))
    assert b.order_id > a.order_id
    all_fills = eng.fills_since()
    ids = [f.trade_id for f in all_fills]
    assert len(ids) == 3 and ids == sorted(set(ids))
    assert eng.fills_since(id_greater_than=str(ids[0])) == all_fills[1:]
    assert eng.fills_since(id_greater_than=ids[-1]) == []
    assert eng.fills_since(symbol="ETHUSDT") == all_fills[2:]
    assert eng.fills_since(order_id=str(a.order_id), limit=1) == all_fills[:1]
    j = all_fills[0].to_json()
    assert j == {"tradeId": str(ids[0]), "orderId": str(a.order_id), "clientOid": a.client_oid, "symbol": "BTCUSDT",
                 "orderType": "limit", "side": "buy", "priceAvg": "100.1", "size": "1", "amount": "100.1",
                 "tradeScope": "taker", "cTime": str(T0_MS), "uTime": str(T0_MS)}
    with pytest.raises(OrderRejected, match="40020"):
        eng.fills_since(id_greater_than="1e5")


def test_ids_do_not_repeat_after_a_restart_of_the_engine(book, clock):
    first = OrderEngine(RULES, book.levels, clock).place(order(price="99.0"))
    clock.advance_ms(1)
    second = OrderEngine(RULES, book.levels, clock).place(order(price="99.0"))
    assert second.order_id > first.order_id


@pytest.mark.parametrize(("change", "code", "words"), [
    ({"symbol": "DOGEUSDT"}, "40034", "DOGEUSDT does not exist"),
    ({"symbol": None}, "40019", "symbol cannot be empty"),
    ({"side": "long"}, "40020", "side error"),
    ({"orderType": "stop"}, "40020", "orderType"),
    ({"force": "day"}, "40020", "force"),
    ({"force": ""}, "40019", "force cannot be empty"),
    ({"price": "-1"}, "40020", "positive"),
    ({"price": "0"}, "40020", "positive"),
    ({"price": "NaN"}, "40020", "positive finite"),
    ({"price": "Infinity"}, "40020", "positive finite"),
    ({"price": "abc"}, "40020", "not a decimal"),
    ({"price": 99.0}, "40020", "decimal string"),
    ({"price": "99.05"}, "41103", "tick 0.1"),
    ({"size": "0.0005"}, "40808", "lot=0.001"),
    ({"size": None}, "40019", "size cannot be empty"),
    ({"price": "100000.0", "size": "11"}, "43012", "notional"),
    ({"clientOid": "x" * 65}, "40020", "clientOid"),
    ({"clientOid": "bad\noid"}, "40020", "clientOid"),
])
def test_bad_orders_are_refused_with_the_venues_code_and_change_nothing(eng, change, code, words):
    body = order(price="99.0")
    body.update(change)
    if change.get("symbol", "") is None:
        del body["symbol"]
    if "size" in change and change["size"] is None:
        del body["size"]
    with pytest.raises(OrderRejected) as e:
        eng.place(body)
    assert e.value.code == code and words in e.value.msg
    assert eng.orders == {} and eng.counters == {"orders_placed": 0, "orders_rejected": 1, "fills": 0, "cancels": 0}


def test_construction_refuses_no_instrument_and_a_bad_max_notional(book, clock):
    with pytest.raises(VenueError):
        OrderEngine({}, book.levels, clock)
    with pytest.raises(VenueError):
        OrderEngine(RULES, book.levels, clock, max_notional=-5)


def test_rules_from_config_take_tick_and_lot_of_the_matching_instrument():
    from pipeline.runtime.config import InstrumentConfig

    cfg = [InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001)]
    rules = rules_from_config(cfg, ["BTCUSDT", "SUNUSDT"])
    assert rules["BTCUSDT"] == InstrumentRules("BTCUSDT", D("0.1"), D("0.0001"))
    assert rules["SUNUSDT"] == InstrumentRules("SUNUSDT")  # a replayed symbol without config: unchecked


# -- with the real market ---------------------------------------------------------------------


def test_the_venue_servers_hook_feeds_the_engine_book_changes_and_trades(clock):
    from pipeline.venue.server import VenueServer

    server = VenueServer(synthetic(), start_paused=True)
    eng = OrderEngine({s: InstrumentRules(s) for s in server.inst_ids}, server.market.levels, clock)
    server.add_market_listener(eng)
    bids, asks = server.market.levels("BTCUSDT", 1)
    best_bid = D(bids[0][0])
    o = eng.place(order(price=str(best_bid), size="0.0001"))  # joins the best bid: rests
    assert o.status == STATUS_LIVE
    seen = {"book": 0, "trade": 0}

    class Spy:
        def book_changed(self, inst_id):
            seen["book"] += 1

        def traded(self, inst_id, trades):
            seen["trade"] += 1

    server.add_market_listener(Spy())
    for _ in range(400):
        server.advance(1)
        if o.status == STATUS_FILLED:
            break
    assert seen["book"] > 0 and seen["trade"] > 0
    assert o.status == STATUS_FILLED and {f.scope for f in eng.fills} == {"maker"}
    assert eng.position("BTCUSDT") == D("0.0001")


def test_a_failing_order_side_hook_is_counted_and_the_market_goes_on():
    """The server calls its market listeners on every book change; one that raises is counted in
    listener_errors and kept for the stage to log, and publishing carries on."""
    import asyncio

    from pipeline.venue.server import VenueServer
    from pipeline.venue.sources import InstrumentSpec, make_source

    class Broken:
        def book_changed(self, inst_id):
            raise RuntimeError("boom")

        def traded(self, inst_id, trades):
            raise RuntimeError("boom")

    async def go():
        srv = VenueServer(make_source("synthetic", instruments=[InstrumentSpec("BTCUSDT", 0.1, 0.0001)], seed=3),
                          start_paused=True)
        srv.add_market_listener(Broken())
        await srv.start()
        try:
            srv.advance(5)
            return srv.stats(), list(srv.listener_failures)
        finally:
            await srv.stop()

    stats, failures = asyncio.run(go())
    assert stats["book_events"] == 5 and stats["listener_errors"] >= 5
    assert failures and failures[0] == "RuntimeError: boom"


# -- market orders ------------------------------------------------------------------------------


def market(side: str, size: str, **kw) -> dict:
    return {"symbol": "BTCUSDT", "side": side, "orderType": "market", "size": size, **kw}


def test_a_market_buy_spends_its_quote_size_in_whole_lots_level_by_level(eng):
    # asks 100.1 x 1, 100.2 x 2, 100.5 x 5 (lot 0.001): 300.85 USDT buys 1 at 100.1, then
    # 200.75 / 100.2 = 2.003 -> 2 (the level holds 2), then 0.35 / 100.5 = 0.00348 -> 0.003
    o = eng.place(market("buy", "300.85", force="GTC"))
    assert [(f.price, f.size) for f in eng.fills] == [(D("100.1"), D("1")), (D("100.2"), D("2")),
                                                       (D("100.5"), D("0.003"))]
    assert (o.status, o.filled, o.order_type, o.size_text) == (STATUS_FILLED, D("3.003"), "market", "300.85")
    j = o.to_json()
    assert (j["orderType"], j["size"], j["baseVolume"], j["price"], j["orderSource"]) == \
        ("market", "300.85", "3.003", "0", "market")
    assert eng.book_checks == {"orders_valid": 0, "orders_invalid": 0}  # a market order is not a quote


def test_a_market_sell_takes_what_is_shown_and_the_rest_is_cancelled(eng):
    o = eng.place(market("sell", "4"))  # bids 99.9 x 1, 99.8 x 2
    assert (o.status, o.filled, eng.position("BTCUSDT")) == (STATUS_CANCELLED, D("3"), D("-3"))


@pytest.mark.parametrize(("body", "code"), [
    (market("buy", "0.1"), "45110"),  # less than one lot (0.001) at 100.1
    (market("buy", "0.0001"), "45110"),
    (market("sell", "0.0005"), "40808"),  # a sell is sized in base lots
])
def test_a_market_order_that_fills_nothing_is_refused(eng, body, code):
    with pytest.raises(OrderRejected) as e:
        eng.place(body)
    assert e.value.code == code and eng.orders == {} and eng.fills == []


def test_a_market_order_is_restored_from_the_account_records(book, clock):
    records = []
    first = OrderEngine(RULES, book.levels, clock, on_event=records.append)
    first.restore([{"t": "account", "account_id": "7", "created_ms": T0_MS}])
    first.place(market("buy", "150.2", clientOid="m1"))
    again = OrderEngine(RULES, book.levels, clock)
    again.restore([{"t": "account", "account_id": "7", "created_ms": T0_MS}, *records])
    a, b = first.order(client_oid="m1"), again.order(client_oid="m1")
    assert a.to_json() == b.to_json() and b.order_type == "market" and b.size == D("1.5")


def test_batches_place_and_cancel_each_entry_as_its_single_request_would(eng):
    from pipeline.venue.batch import MAX_BATCH, cancel_batch, place_batch

    placed, refused = place_batch(eng, "BTCUSDT", [order(coid="b1"), order(price="99.05", coid="b2"),
                                                   order(coid="b1"), order(symbol="ETHUSDT", price="9.9", coid="b3")])
    assert [o.client_oid for o in placed] == ["b1", "b3"]
    assert [(e["clientOid"], exc.code) for e, exc in refused] == [("b2", "41103"), ("b1", "43118")]
    done, refused = cancel_batch(eng, "BTCUSDT", [{"clientOid": "b1"}, {"orderId": "1"},
                                                 {"clientOid": "b3", "symbol": "ETHUSDT"}])
    assert [o.client_oid for o in done] == ["b1", "b3"] and [exc.code for _, exc in refused] == ["43001"]
    for bad in ([], [order()] * (MAX_BATCH + 1), "x", [1]):
        with pytest.raises(OrderRejected) as e:
            place_batch(eng, "BTCUSDT", bad)
        assert e.value.code == "40020"
