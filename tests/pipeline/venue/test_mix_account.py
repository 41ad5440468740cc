"""The paper venue's USDT-FUTURES account (``mix_api``: accounts, a position's openPriceAvg / unrealizedPL,
a market buy sized in contracts) and its private WebSocket channels under instType USDT-FUTURES
(``private_ws``: orders / fill / positions / account), sans-I/O."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import orjson
import pytest

from pipeline.trading.bitget.signing import Credentials
from pipeline.venue.orders import OrderEngine
from pipeline.venue.private_ws import PrivateChannels
from pipeline.venue.rest_api import RestApi
from tests.pipeline.venue.test_private_ws import answers, login
from tests.support.venue import RULES, T0_MS, Book

D = Decimal
CREDS = Credentials("paper-key", "paper-secret", "paper-pass")
USDT = {"productType": "USDT-FUTURES"}


def _api() -> RestApi:
    return RestApi(OrderEngine(RULES, Book().levels, lambda: T0_MS), CREDS, now_ms=lambda: T0_MS, mono_ns=lambda: 0,
                   perps={"BTCUSDT": "USDT"})


def _take(api: RestApi, side: str, size: str, **extra) -> None:
    api.mix.place({"symbol": "BTCUSDT", "productType": "USDT-FUTURES", "side": side, "orderType": "market",
                   "size": size, **extra})


def test_a_perpetuals_market_buy_is_sized_in_contracts_and_a_spot_one_in_quote_coin():
    api = _api()
    _take(api, "buy", "1.5")  # 1 at 100.1, 0.5 at 100.2 (the book's asks)
    assert api.engine.position("BTCUSDT") == D("1.5")
    api.engine.place({"symbol": "ETHUSDT", "side": "buy", "orderType": "market", "size": "20.02"})
    assert api.engine.position("ETHUSDT") == D("2")  # spot: 20.02 USDT at 10.01
    with pytest.raises(Exception, match="lot"):
        _take(api, "buy", "0.0005")  # off the 0.001 lot: 40808


@pytest.mark.parametrize(("trades", "position", "entry"), [
    ([("buy", "1")], "1", "100.1"),
    ([("buy", "1"), ("buy", "1")], "2", "100.15"),            # 100.1 then 100.2 (the first level taken)
    ([("buy", "1.5"), ("sell", "0.5")], "1", "100.1333333333333333333333333"),  # a reduce keeps the average
    ([("buy", "1"), ("sell", "3")], "-2", "99.8"),            # flat after the first sell fill, then short
    ([("buy", "0.5"), ("sell", "1")], "-0.5", "99.9"),        # one fill crossing zero: the short opens at its price
])
def test_a_positions_open_price_is_the_average_of_the_fills_that_opened_it(trades, position, entry):
    api = _api()
    for side, size in trades:
        _take(api, side, size)
    (pos,) = api.mix.positions(USDT)
    assert (D(pos["total"]) * (1 if pos["holdSide"] == "long" else -1), D(pos["openPriceAvg"])) == \
        (D(position), D(entry))
    mid = D("100")  # (99.9 + 100.1) / 2
    assert D(pos["unrealizedPL"]) == D(position) * (mid - D(entry)) and pos["markPrice"] == "100"


def test_the_account_is_the_perpetuals_cash_marked_at_the_mid():
    api = _api()
    assert api.mix.accounts(USDT)[0]["accountEquity"] == "0"
    _take(api, "buy", "1")  # pays 100.1
    (acct,) = api.mix.accounts(USDT)
    assert (acct["marginCoin"], D(acct["accountEquity"]), D(acct["available"]), D(acct["unrealizedPL"])) == \
        ("USDT", D("-0.1"), D("-0.1"), D("-0.1"))  # -100.1 + 1 * 100
    api.engine.place({"symbol": "ETHUSDT", "side": "buy", "orderType": "limit", "force": "ioc", "price": "10.01",
                      "size": "1"})
    assert D(api.mix.accounts(USDT)[0]["accountEquity"]) == D("-0.1")  # a spot fill is not the perpetuals'


def test_the_usdt_futures_channels_are_served_for_perpetuals_only():
    channels = PrivateChannels(_api())
    s = channels.session()
    answers(s, login())

    def sub(inst_type, channel, target):
        key = "coin" if channel == "account" else "instId"
        return orjson.dumps({"op": "subscribe", "args": [{"instType": inst_type, "channel": channel,
                                                          key: target}]}).decode()

    assert [a["event"] for a in answers(s, sub("USDT-FUTURES", "orders", "default"))] == ["subscribe"]
    ack, snap = answers(s, sub("USDT-FUTURES", "positions", "default"))
    assert (ack["event"], snap["data"]) == ("subscribe", [])  # flat
    for refused in (sub("SPOT", "orders", "BTCUSDT"), sub("USDT-FUTURES", "orders", "ETHUSDT"),
                    sub("SPOT", "positions", "default"), sub("COIN-FUTURES", "orders", "default")):
        (err,) = answers(s, refused)
        assert (err["event"], err["code"]) == ("error", "30001")


def test_a_perpetuals_fill_is_pushed_under_usdt_futures_and_not_to_spot_subscribers():
    channels = PrivateChannels(_api())

    async def run():
        perp, spot = channels.session(), channels.session()
        for sess, inst_type in ((perp, "USDT-FUTURES"), (spot, "SPOT")):
            channels._conns[sess] = asyncio.Queue(100)
            answers(sess, login())
            for ch in ("orders", "fill"):
                answers(sess, orjson.dumps({"op": "subscribe", "args": [{"instType": inst_type, "channel": ch,
                                                                         "instId": "default"}]}).decode())
        for arg in ('"channel":"positions","instId":"default"', '"channel":"account","coin":"USDT"'):
            answers(perp, '{"op":"subscribe","args":[{"instType":"USDT-FUTURES",' + arg + '}]}')
        _take(channels.api, "buy", "1")
        return [orjson.loads(channels._conns[perp].get_nowait()) for _ in range(channels._conns[perp].qsize())], \
            channels._conns[spot].qsize()

    pushed, spot_pushes = asyncio.run(run())
    assert spot_pushes == 0
    assert [(p["arg"]["instType"], p["arg"]["channel"]) for p in pushed] == [
        ("USDT-FUTURES", "orders"), ("USDT-FUTURES", "orders"), ("USDT-FUTURES", "fill"),
        ("USDT-FUTURES", "positions"), ("USDT-FUTURES", "account")]
    filled = pushed[1]["data"][0]
    assert (filled["instId"], filled["status"], filled["posSide"], filled["tradeSide"], filled["accBaseVolume"],
            filled["fillPrice"], filled["marginCoin"]) == \
        ("BTCUSDT", "filled", "net", "buy_single", "1", "100.1", "USDT")
    assert pushed[2]["data"][0]["baseVolume"] == "1"
    (pos,) = pushed[3]["data"]
    assert (pos["instId"], pos["holdSide"], pos["total"], pos["openPriceAvg"]) == ("BTCUSDT", "long", "1", "100.1")
    assert [(a["marginCoin"], a["equity"]) for a in pushed[4]["data"]] == [("USDT", "-0.1")]
