"""Paper venue parity with an unmodified exchange client: ccxt's bitget client (and its pro client for
the private WebSocket), given only the venue's URLs and the paper key, trades against a running
paper venue on 127.0.0.1 as against the exchange; and the pipeline's own order sender means, byte
for byte, what ccxt means by the same order (the venue's view of both is the same)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import ccxt
import ccxt.pro
import pytest

from pipeline.trading.bitget import rest as sender_rest
from pipeline.trading.messages import Side, TimeInForce
from tests.support.parity import CREDS, ParityVenue, now_ms, point_at

D = Decimal
SYMBOL, MARKET = "BTC/USDT", "BTCUSDT"


@pytest.fixture(scope="module")
def venue():
    v = ParityVenue()
    try:
        yield v
    finally:
        v.close()


@pytest.fixture(scope="module")
def ex(venue):
    return point_at(ccxt.bitget(), venue)


def best(venue) -> tuple[float, float, float]:
    """(best bid, best ask, size at the best ask)."""
    bids, asks = venue.levels(MARKET, 1)
    return float(bids[0][0]), float(asks[0][0]), float(asks[0][1])


def test_load_markets_ticker_depth_and_balance_come_from_the_venue(venue, ex):
    markets = ex.load_markets()
    m = markets[SYMBOL]
    assert (m["id"], m["spot"], m["precision"]) == (MARKET, True, {"amount": 0.0001, "price": 0.1})  # the config's
    assert set(markets) == {"BTC/USDT", "ETH/USDT"} and markets["ETH/USDT"]["precision"]["price"] == 0.01
    bids, asks = venue.levels(MARKET, 5)
    ticker = ex.fetch_ticker(SYMBOL)
    assert (ticker["bid"], ticker["ask"]) == (float(bids[0][0]), float(asks[0][0]))
    assert ticker["last"] and ticker["baseVolume"] > 0 and ticker["low"] <= ticker["last"] <= ticker["high"]
    book = ex.fetch_order_book(SYMBOL, 5)
    assert book["bids"] == [[float(p), float(s)] for p, s in bids]
    assert book["asks"] == [[float(p), float(s)] for p, s in asks]
    # the venue's own account, whatever the module's other tests traded on it before (any order)
    want = {row["coin"]: float(row["available"]) for row in venue.call(venue.api.balances)}
    assert set(want) == {"BTC", "ETH", "USDT"}
    assert ex.fetch_balance()["total"] == want


def test_every_order_type_and_time_in_force_round_trips_through_ccxt(venue, ex):
    ex.load_markets()
    bid, ask, ask_size = best(venue)
    gtc = ex.create_order(SYMBOL, "limit", "buy", 0.001, bid - 5, {"clientOrderId": "cx-gtc"})
    got = ex.fetch_order(gtc["id"], SYMBOL)
    assert (got["status"], got["timeInForce"], got["price"], got["amount"], got["clientOrderId"]) == \
        ("open", "GTC", round(bid - 5, 1), 0.001, "cx-gtc")
    po = ex.create_order(SYMBOL, "limit", "buy", 0.001, bid - 6, {"postOnly": True})
    assert ex.fetch_order(po["id"], SYMBOL)["timeInForce"] == "PO"
    assert {o["id"] for o in ex.fetch_open_orders(SYMBOL)} == {gtc["id"], po["id"]}

    ioc = ex.fetch_order(ex.create_order(SYMBOL, "limit", "buy", 0.0001, ask, {"timeInForce": "IOC"})["id"], SYMBOL)
    assert (ioc["timeInForce"], ioc["status"], ioc["filled"]) == ("IOC", "closed", 0.0001)
    fok_big = ex.create_order(SYMBOL, "limit", "buy", 100.0, ask, {"timeInForce": "FOK"})  # more than is shown
    assert (ex.fetch_order(fok_big["id"], SYMBOL)["status"], ex.fetch_order(fok_big["id"], SYMBOL)["filled"]) == \
        ("canceled", 0.0)
    bid, ask, ask_size = best(venue)
    fok = ex.fetch_order(ex.create_order(SYMBOL, "limit", "sell", 0.0001, bid, {"timeInForce": "FOK"})["id"], SYMBOL)
    assert (fok["timeInForce"], fok["status"], fok["filled"]) == ("FOK", "closed", 0.0001)

    buy = ex.fetch_order(ex.create_order(SYMBOL, "market", "buy", 0.001, ask)["id"], SYMBOL)  # spends 0.001 * ask
    assert buy["type"] == "market" and buy["status"] == "closed" and 0 < buy["filled"] <= 0.001
    sell = ex.fetch_order(ex.create_order(SYMBOL, "market", "sell", 0.0005)["id"], SYMBOL)
    assert (sell["type"], sell["status"], sell["filled"]) == ("market", "closed", 0.0005)

    assert ex.cancel_order(gtc["id"], SYMBOL)["id"] == gtc["id"]
    ex.cancel_all_orders(SYMBOL)
    assert ex.fetch_open_orders(SYMBOL) == []
    assert ex.fetch_order(po["id"], SYMBOL)["status"] == "canceled"

    trades = ex.fetch_my_trades(SYMBOL)
    fills = venue.call(lambda: list(venue.engine.fills))
    assert [t["id"] for t in trades] == [str(f.trade_id) for f in fills] and len(fills) >= 4
    assert all(t["takerOrMaker"] == "taker" for t in trades)
    position, cash = venue.call(lambda: (venue.engine.position(MARKET), venue.engine.cash()))
    assert D(str(ex.fetch_balance()["total"]["BTC"])) == position
    assert D(str(ex.fetch_balance()["total"]["USDT"])) == cash


def test_ccxt_pro_watches_its_orders_over_the_private_websocket(venue):
    async def watch():
        client = point_at(ccxt.pro.bitget(), venue)
        try:
            await client.load_markets()
            first = asyncio.ensure_future(client.watch_orders(SYMBOL))
            for _ in range(300):  # logged in and subscribed: the venue pushes from now on
                if venue.call(_subscribed, venue):
                    break
                await asyncio.sleep(0.01)
            bid, _, _ = best(venue)
            placed = await client.create_order(SYMBOL, "limit", "sell", 0.0002, bid, {"timeInForce": "IOC"})
            pushed = await asyncio.wait_for(first, 5)  # the first push: the order accepted
            for _ in range(300):  # then its fill, kept in the client's order cache as it arrives
                if any(o["id"] == placed["id"] and o["status"] == "closed" for o in client.orders):
                    break
                await asyncio.sleep(0.01)
            return placed, pushed, [o for o in client.orders if o["id"] == placed["id"]]
        finally:
            await client.close()

    placed, pushed, cached = asyncio.run(watch())
    assert [(o["id"], o["side"]) for o in pushed] == [(placed["id"], "sell")]  # watch_orders resolved with it
    assert [(o["status"], o["filled"], o["amount"]) for o in cached] == [("closed", 0.0002, 0.0002)]
    assert venue.private.stats["pushes"] >= 2 and venue.private.stats["logins"] == 1  # pushed, not polled


def _subscribed(venue) -> bool:
    return any(s.subs for s in venue.private._conns)


@pytest.mark.parametrize(("tif", "ccxt_params"), [
    (TimeInForce.GTC, {}), (TimeInForce.POST_ONLY, {"postOnly": True}), (TimeInForce.IOC, {"timeInForce": "IOC"}),
])
def test_the_sender_and_ccxt_mean_the_same_order(venue, ex, tif, ccxt_params):
    ex.load_markets()
    bid, _, _ = best(venue)
    price, size = bid - 20, 0.0013
    req = sender_rest.build_place(CREDS, now_ms(), MARKET, Side.BUY, tif, price, size, f"snd-{int(tif)}", 0.1, 0.0001)
    status, doc = venue.send(req.method, req.target, req.body, req.headers)
    assert status == 200, doc
    theirs = ex.create_order(SYMBOL, "limit", "buy", size, price, {**ccxt_params, "clientOrderId": f"cx-{int(tif)}"})
    views = [venue.call(venue.engine.order, None, f"snd-{int(tif)}").to_json(),
             venue.call(venue.engine.order, theirs["id"], None).to_json()]
    for v in views:
        for k in ("orderId", "clientOid", "cTime", "uTime"):
            v.pop(k)
    assert views[0] == views[1]
    ex.cancel_all_orders(SYMBOL)


def test_what_the_venue_refuses_ccxt_reports_as_the_exchanges_error(venue, ex):
    ex.load_markets()
    bid, _, _ = best(venue)
    with pytest.raises(ccxt.BadRequest, match="40020"):  # an unknown force, sent through ccxt's params
        ex.create_order(SYMBOL, "limit", "buy", 0.001, bid - 5, {"force": "day"})
    with pytest.raises(ccxt.OrderNotFound, match="43001"):
        ex.cancel_order("123", SYMBOL)
    ex.create_order(SYMBOL, "limit", "buy", 0.001, bid - 5, {"clientOrderId": "cx-dup"})
    with pytest.raises(ccxt.ExchangeError, match="43118"):
        ex.create_order(SYMBOL, "limit", "buy", 0.001, bid - 5, {"clientOrderId": "cx-dup"})
    ex.cancel_all_orders(SYMBOL)


def test_a_fills_fee_reads_in_ccxt_as_the_fee_paid():
    from pipeline.venue.fees import FeeSchedule
    from pipeline.venue.orders import OrderEngine
    from tests.support.venue import RULES, T0_MS, Book

    eng = OrderEngine(RULES, Book().levels, lambda: T0_MS, fees=FeeSchedule(maker_bps=10.0, taker_bps=10.0))
    o = eng.place({"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "ioc", "price": "100.1",
                   "size": "1"})  # a taker fill of 100.1 USDT at 10 bps: 0.1001 USDT
    client = ccxt.bitget()
    order, trade = client.parse_order(o.to_json()), client.parse_trade(eng.fills[0].to_json())
    assert order["fee"] == trade["fee"] == {"cost": 0.1001, "currency": "USDT"}
    assert (order["status"], order["filled"], order["timeInForce"]) == ("closed", 1.0, "IOC")
