"""Paper venue parity for USDT perpetuals: ccxt's bitget client, given only the venue's URLs and the paper
key, loads the venue's perpetuals as linear swaps ('BTC/USDT:USDT') and trades them through the mix
endpoints as against the exchange: ticker, depth, the swap balance, limit / market / reduce-only orders,
order detail, open orders, cancels, fills and positions; its pro client watches the orders and positions
pushed over the private WebSocket under instType USDT-FUTURES."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import ccxt
import ccxt.pro
import pytest

from tests.support.parity import ParityVenue, point_at

D = Decimal
SYMBOL, MARKET = "BTC/USDT:USDT", "BTCUSDT"


@pytest.fixture
def venue():
    v = ParityVenue(perps=True)
    try:
        yield v
    finally:
        v.close()


@pytest.fixture
def ex(venue):
    client = point_at(ccxt.bitget(), venue)
    client.load_markets()
    return client


def best(venue) -> tuple[float, float]:
    bids, asks = venue.levels(MARKET, 1)
    return float(bids[0][0]), float(asks[0][0])


def position(venue) -> Decimal:
    return venue.call(venue.engine.position, MARKET)


def test_the_perpetuals_load_as_linear_swaps_with_the_configs_tick_and_lot(venue, ex):
    assert set(ex.markets) == {"BTC/USDT:USDT", "ETH/USDT:USDT"}  # no spot symbol: every instrument is a perpetual
    m = ex.markets[SYMBOL]
    assert (m["id"], m["type"], m["swap"], m["linear"], m["settle"], m["contractSize"]) == \
        (MARKET, "swap", True, True, "USDT", 1.0)
    assert m["precision"] == {"amount": 0.0001, "price": 0.1} and ex.markets["ETH/USDT:USDT"]["precision"] == \
        {"amount": 0.001, "price": 0.01}
    bids, asks = venue.levels(MARKET, 5)
    ticker = ex.fetch_ticker(SYMBOL)
    assert (ticker["symbol"], ticker["bid"], ticker["ask"]) == (SYMBOL, float(bids[0][0]), float(asks[0][0]))
    assert ticker["last"] and ticker["baseVolume"] > 0
    book = ex.fetch_order_book(SYMBOL, 5)
    assert (book["bids"], book["asks"]) == ([[float(p), float(s)] for p, s in bids],
                                            [[float(p), float(s)] for p, s in asks])
    assert ex.fetch_ohlcv(SYMBOL, "1m")[-1][5] > 0  # the trades the venue printed, as 1-minute candles
    assert ex.fetch_balance({"type": "swap"})["total"] == {"USDT": 0.0}


def test_orders_fills_and_positions_round_trip_through_ccxt(venue, ex):
    bid, ask = best(venue)
    rest = ex.create_order(SYMBOL, "limit", "buy", 0.001, bid - 5, {"clientOrderId": "px-gtc"})
    got = ex.fetch_order(rest["id"], SYMBOL)
    assert (got["status"], got["price"], got["amount"], got["clientOrderId"], got["timeInForce"]) == \
        ("open", round(bid - 5, 1), 0.001, "px-gtc", "GTC")
    po = ex.create_order(SYMBOL, "limit", "sell", 0.001, ask + 5, {"postOnly": True})
    assert {o["id"] for o in ex.fetch_open_orders(SYMBOL)} == {rest["id"], po["id"]}

    bought = ex.fetch_order(ex.create_order(SYMBOL, "market", "buy", 0.001)["id"], SYMBOL)
    assert (bought["type"], bought["status"], bought["filled"]) == ("market", "closed", 0.001)  # base-coin size
    assert position(venue) == D("0.001")
    closed = ex.fetch_order(ex.create_order(SYMBOL, "market", "sell", 0.0004, None, {"reduceOnly": True})["id"],
                            SYMBOL)
    assert (closed["status"], closed["filled"], position(venue)) == ("closed", 0.0004, D("0.0006"))
    with pytest.raises(ccxt.ExchangeError, match="22002"):  # would cross zero: the exchange's "no position"
        ex.create_order(SYMBOL, "market", "sell", 0.001, None, {"reduceOnly": True})

    assert ex.cancel_order(rest["id"], SYMBOL)["id"] == rest["id"]
    assert ex.fetch_order(rest["id"], SYMBOL)["status"] == "canceled"
    ex.cancel_all_orders(SYMBOL)
    assert ex.fetch_open_orders(SYMBOL) == [] and ex.fetch_order(po["id"], SYMBOL)["status"] == "canceled"

    trades = ex.fetch_my_trades(SYMBOL)
    fills = venue.call(lambda: list(venue.engine.fills))
    assert sorted(t["id"] for t in trades) == sorted(str(f.trade_id) for f in fills) and len(fills) >= 2
    assert {(t["symbol"], t["takerOrMaker"]) for t in trades} == {(SYMBOL, "taker")}
    (pos,) = ex.fetch_positions([SYMBOL])
    entry = sum(f.price * f.size for f in fills if f.side == "buy") / sum(f.size for f in fills if f.side == "buy")
    assert (pos["symbol"], pos["side"], pos["contracts"], pos["marginMode"]) == (SYMBOL, "long", 0.0006, "cross")
    assert D(str(pos["entryPrice"])) == entry  # one opening fill here, so its price
    cash = -sum((f.price * f.size if f.side == "buy" else -f.price * f.size) for f in fills)
    bids, asks = venue.levels(MARKET, 1)
    equity = cash + D("0.0006") * (D(bids[0][0]) + D(asks[0][0])) / 2
    assert D(str(ex.fetch_balance({"type": "swap"})["total"]["USDT"])) == equity


def test_ccxt_pro_watches_a_perpetuals_orders_and_positions_pushed(venue):
    async def watch():
        client = point_at(ccxt.pro.bitget(), venue)
        try:
            await client.load_markets()
            orders = asyncio.ensure_future(client.watch_orders(SYMBOL))
            positions = asyncio.ensure_future(client.watch_positions([SYMBOL]))
            for _ in range(300):  # logged in and subscribed to both: the venue pushes from now on
                if venue.call(_subscribed, venue) >= 2:
                    break
                await asyncio.sleep(0.01)
            await asyncio.wait_for(positions, 5)  # the snapshot a subscription gets first
            after_fill = asyncio.ensure_future(client.watch_positions([SYMBOL]))  # resolved by the next push
            await asyncio.sleep(0)
            placed = await client.create_order(SYMBOL, "market", "buy", 0.0002)
            return placed, await asyncio.wait_for(orders, 5), await asyncio.wait_for(after_fill, 5)
        finally:
            await client.close()

    before = position(venue)
    placed, pushed, held = asyncio.run(watch())
    assert [(o["id"], o["symbol"], o["side"]) for o in pushed] == [(placed["id"], SYMBOL, "buy")]
    assert [(p["symbol"], p["side"], D(str(p["contracts"]))) for p in held] == [(SYMBOL, "long", before + D("0.0002"))]
    assert venue.private.stats["logins"] >= 1


def _subscribed(venue) -> int:
    return sum(len(s.subs) for s in venue.private._conns)
