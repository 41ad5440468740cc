"""``pipeline.venue.public.PublicMarket``: the public market-data routes in Bitget v2 spot shapes, a
pure function of the live book (strings), the trades it was told of and an injected clock."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.venue.order_fields import OrderRejected
from pipeline.venue.public import (CANDLES, COINS, CONTRACTS, MARGIN_CURRENCIES, MARKET_FILLS, MERGE_DEPTH, MINUTE_MS,
                                   ORDERBOOK, SYMBOLS, TICKERS, TIME, PublicMarket)
from tests.support.venue import RULES, T0_MS, Book

D = Decimal
M0 = T0_MS - T0_MS % MINUTE_MS  # a minute's start
NOW = M0 + 10 * MINUTE_MS


def trade(ts_ms: int, price: str, size: str, tid: int) -> dict:
    return {"ts": str(ts_ms), "price": price, "size": size, "side": "buy", "tradeId": str(tid)}


@pytest.fixture
def pub() -> PublicMarket:
    p = PublicMarket(RULES, Book().levels, lambda: NOW, (D("0.001"), D("0.001")))
    p.traded("BTCUSDT", [trade(M0, "100.0", "1", 1), trade(M0 + 1_000, "101.0", "2", 2),
                         trade(M0 + MINUTE_MS, "99.5", "1", 3), trade(M0 + 5 * MINUTE_MS, "100.5", "3", 4),
                         {"price": "x", "size": "1", "ts": "1"}])
    return p


def test_time_coins_symbols_and_margin(pub):
    assert pub.answer(TIME, {}) == {"serverTime": str(NOW)}
    assert [c["coin"] for c in pub.answer(COINS, {})] == ["BTC", "ETH", "USDT"]
    assert [c["coin"] for c in pub.answer(COINS, {"coin": "eth"})] == ["ETH"]
    btc, eth = pub.answer(SYMBOLS, {})
    assert (btc["symbol"], btc["baseCoin"], btc["quoteCoin"], btc["pricePrecision"], btc["quantityPrecision"],
            btc["status"], btc["makerFeeRate"]) == ("BTCUSDT", "BTC", "USDT", "1", "3", "online", "0.001")
    assert (eth["pricePrecision"], eth["quantityPrecision"]) == ("2", "2")  # the config's tick 0.01, lot 0.01
    assert pub.answer(SYMBOLS, {"symbol": "ETHUSDT"}) == [eth]
    assert pub.answer(MARGIN_CURRENCIES, {}) == []


def test_a_ticker_is_the_live_top_of_book_and_the_last_24_hours_of_trades(pub):
    (t,) = pub.answer(TICKERS, {"symbol": "BTCUSDT"})
    assert (t["bidPr"], t["bidSz"], t["askPr"], t["askSz"]) == ("99.9", "1", "100.1", "1")
    assert (t["open"], t["high24h"], t["low24h"], t["lastPr"], t["baseVolume"]) == ("100", "101", "99.5", "100.5", "7")
    assert t["quoteVolume"] == "703" and t["change24h"] == "0.005" and t["ts"] == str(NOW)
    (e,) = pub.answer(TICKERS, {"symbol": "ETHUSDT"})  # no trade yet: the best bid
    assert (e["lastPr"], e["baseVolume"]) == ("9.99", "0")
    assert len(pub.answer(TICKERS, {})) == 2


def test_depth_full_and_merged(pub):
    assert pub.answer(ORDERBOOK, {"symbol": "BTCUSDT", "limit": "2"}) == {
        "asks": [["100.1", "1"], ["100.2", "2"]], "bids": [["99.9", "1"], ["99.8", "2"]], "ts": str(NOW)}
    merged = pub.answer(MERGE_DEPTH, {"symbol": "BTCUSDT", "precision": "scale1"})  # onto whole units
    assert (merged["bids"], merged["asks"], merged["scale"], merged["isMaxPrecision"]) == \
        ([["99", "3"]], [["101", "8"]], "1", "NO")  # bids rounded down, asks up, sizes summed
    same = pub.answer(MERGE_DEPTH, {"symbol": "BTCUSDT", "limit": "1"})
    assert (same["bids"], same["asks"], same["precision"]) == ([["99.9", "1"]], [["100.1", "1"]], "scale0")


def test_recent_trades_newest_first_and_candles_oldest_first(pub):
    assert [f["tradeId"] for f in pub.answer(MARKET_FILLS, {"symbol": "BTCUSDT", "limit": "3"})] == ["4", "3", "2"]
    one = pub.answer(CANDLES, {"symbol": "BTCUSDT", "granularity": "1min"})
    assert one == [[str(M0), "100", "101", "100", "101", "3", "302", "302"],
                   [str(M0 + MINUTE_MS), "99.5", "99.5", "99.5", "99.5", "1", "99.5", "99.5"],
                   [str(M0 + 5 * MINUTE_MS), "100.5", "100.5", "100.5", "100.5", "3", "301.5", "301.5"]]
    five = pub.answer(CANDLES, {"symbol": "BTCUSDT", "granularity": "5min"})
    starts = sorted({m - m % (5 * MINUTE_MS) for m in (M0, M0 + MINUTE_MS, M0 + 5 * MINUTE_MS)})
    assert [row[0] for row in five] == [str(b) for b in starts]  # the minutes folded into their 5 min
    assert sum(D(row[5]) for row in five) == 7 and five[-1][4] == "100.5"
    assert pub.answer(CANDLES, {"symbol": "BTCUSDT", "granularity": "1min", "startTime": str(M0 + 1)})[0][0] == \
        str(M0 + MINUTE_MS)


@pytest.mark.parametrize(("path", "query", "code"), [
    (ORDERBOOK, {}, "40019"), (ORDERBOOK, {"symbol": "DOGEUSDT"}, "40034"),
    (ORDERBOOK, {"symbol": "BTCUSDT", "limit": "151"}, "40020"), (ORDERBOOK, {"symbol": "BTCUSDT", "limit": "x"}, "40020"),
    (MERGE_DEPTH, {"symbol": "BTCUSDT", "precision": "scale9"}, "40020"),
    (MERGE_DEPTH, {"symbol": "BTCUSDT", "limit": "7"}, "40020"),
    (CANDLES, {"symbol": "BTCUSDT"}, "40019"), (CANDLES, {"symbol": "BTCUSDT", "granularity": "2min"}, "40020"),
    (MARKET_FILLS, {"symbol": "BTCUSDT", "limit": "501"}, "40020"), (TICKERS, {"symbol": "NOPE"}, "40034"),
    (CONTRACTS, {}, "40019"), (CONTRACTS, {"productType": "SPOT"}, "40020"),
])
def test_bad_public_queries_get_the_exchanges_codes(pub, path, query, code):
    with pytest.raises(OrderRejected) as e:
        pub.answer(path, query)
    assert e.value.code == code


def test_a_spot_only_venue_has_no_contracts(pub):
    assert pub.answer(CONTRACTS, {"productType": "usdt-futures"}) == []  # the perpetuals: test_public_mix
