"""``pipeline.venue.public.PublicMarket``'s USDT-FUTURES routes: a perpetual of the config is a mix
contract (tick and lot in the exchange's pricePlace / priceEndStep / sizeMultiplier), with its ticker,
merged depth, recent fills and candles from the live book and the trades the venue published; the spot
routes neither list nor answer it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.venue.order_fields import InstrumentRules, OrderRejected
from pipeline.venue.public import (CONTRACTS, MINUTE_MS, MIX_CANDLES, MIX_DEPTH, MIX_FILLS, MIX_TICKER, MIX_TICKERS,
                                   SYMBOLS, TICKERS, PublicMarket)
from tests.support.venue import T0_MS, Book

D = Decimal
M0 = T0_MS - T0_MS % MINUTE_MS
NOW = M0 + 10 * MINUTE_MS
RULES = {"BTCUSDT": InstrumentRules("BTCUSDT", D("0.1"), D("0.001")),
         "ETHUSDT": InstrumentRules("ETHUSDT", D("0.05"), D("0.01"))}
USDT = {"productType": "USDT-FUTURES"}


@pytest.fixture
def pub() -> PublicMarket:
    p = PublicMarket(RULES, Book().levels, lambda: NOW, (D("0.0002"), D("0.0006")), perps={"ETHUSDT": "USDT"})
    p.traded("ETHUSDT", [{"ts": str(M0), "price": "10.00", "size": "2", "side": "buy", "tradeId": "1"},
                         {"ts": str(M0 + 2 * MINUTE_MS), "price": "10.05", "size": "1", "side": "sell",
                          "tradeId": "2"}])
    return p


def test_a_perpetual_is_a_contract_and_not_a_spot_symbol(pub):
    (c,) = pub.answer(CONTRACTS, USDT)
    assert {k: c[k] for k in ("symbol", "baseCoin", "quoteCoin", "supportMarginCoins", "symbolType", "pricePlace",
                              "priceEndStep", "volumePlace", "sizeMultiplier", "minTradeNum", "makerFeeRate",
                              "takerFeeRate", "symbolStatus")} == {
        "symbol": "ETHUSDT", "baseCoin": "ETH", "quoteCoin": "USDT", "supportMarginCoins": ["USDT"],
        "symbolType": "perpetual", "pricePlace": "2", "priceEndStep": "5", "volumePlace": "2",
        "sizeMultiplier": "0.01", "minTradeNum": "0.01", "makerFeeRate": "0.0002", "takerFeeRate": "0.0006",
        "symbolStatus": "normal"}  # tick 0.05 = priceEndStep 5 / 10**pricePlace 2
    assert pub.answer(CONTRACTS, {"productType": "coin-futures"}) == []  # no coin-margined contract here
    assert [s["symbol"] for s in pub.answer(SYMBOLS, {})] == ["BTCUSDT"]
    assert [t["symbol"] for t in pub.answer(TICKERS, {})] == ["BTCUSDT"]


def test_ticker_depth_fills_and_candles_of_a_perpetual(pub):
    (t,) = pub.answer(MIX_TICKER, {**USDT, "symbol": "ETHUSDT"})
    assert pub.answer(MIX_TICKERS, USDT) == [t]
    assert (t["symbol"], t["lastPr"], t["bidPr"], t["askPr"], t["open24h"], t["markPrice"], t["fundingRate"],
            t["baseVolume"]) == ("ETHUSDT", "10.05", "9.99", "10.01", "10", "10.05", "0", "3")
    depth = pub.answer(MIX_DEPTH, {**USDT, "symbol": "ETHUSDT", "limit": "5"})
    assert (depth["bids"], depth["asks"]) == ([["9.95", "3"]], [["10.05", "3"]])  # merged onto the 0.05 tick
    assert [f["tradeId"] for f in pub.answer(MIX_FILLS, {**USDT, "symbol": "ETHUSDT"})] == ["2", "1"]
    rows = pub.answer(MIX_CANDLES, {**USDT, "symbol": "ETHUSDT", "granularity": "1m"})
    assert rows == [[str(M0), "10", "10", "10", "10", "2", "20"],  # [ts, o, h, l, c, base, quote volume]
                    [str(M0 + 2 * MINUTE_MS), "10.05", "10.05", "10.05", "10.05", "1", "10.05"]]


@pytest.mark.parametrize(("path", "query", "code"), [
    (MIX_TICKER, {"symbol": "ETHUSDT"}, "40019"),                                  # no productType
    (MIX_TICKER, {"productType": "SPOT", "symbol": "ETHUSDT"}, "40020"),          # not a futures type
    (MIX_TICKER, USDT, "40019"),                                                  # no symbol
    (MIX_TICKER, {**USDT, "symbol": "BTCUSDT"}, "40034"),                         # spot, not a perpetual
    (MIX_TICKER, {"productType": "USDC-FUTURES", "symbol": "ETHUSDT"}, "40034"),  # not of that product type
    (MIX_DEPTH, {**USDT, "symbol": "ETHUSDT", "precision": "scale9"}, "40020"),
    (MIX_FILLS, {**USDT, "symbol": "ETHUSDT", "limit": "101"}, "40020"),
    (MIX_CANDLES, {**USDT, "symbol": "ETHUSDT", "granularity": "1min"}, "40020"),  # spot's name, not mix's
    (MIX_CANDLES, {**USDT, "symbol": "ETHUSDT"}, "40019"),
    (TICKERS, {"symbol": "ETHUSDT"}, "40034"),                                    # the perpetual on a spot route
])
def test_bad_mix_queries_get_the_exchanges_codes(pub, path, query, code):
    with pytest.raises(OrderRejected) as e:
        pub.answer(path, query)
    assert e.value.code == code
