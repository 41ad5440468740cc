"""The order sender's requests by product type (pipeline/trading/bitget/orderapi.py): each instrument's
command goes to its product's endpoint; the account-wide queries are one per product type; positions
read spot balances and perpetual positions into one instrument -> position map; the parsers read
either product's answer shape."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.bitget import mix, rest
from pipeline.trading.bitget.orderapi import OrderApi, parse_cancelled, parse_fills, parse_orders
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import Side, TimeInForce

CREDS = Credentials("key-id-1", "bitget-test-secret", "pass-phrase")
TS = 1659076670000
SPOT = InstrumentConfig(id=1, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001)
PERP = InstrumentConfig(id=2, symbol="BTCUSDT", tick_size=0.1, lot_size=0.001, product_type="USDT-FUTURES",
                        contract_size=0.001)
API = OrderApi(CREDS, {1: SPOT, 2: PERP})


@pytest.mark.parametrize("inst, paths", [
    (SPOT, (rest.PLACE_PATH, rest.CANCEL_PATH, rest.CANCEL_SYMBOL_PATH, rest.ORDER_INFO_PATH, rest.FILLS_PATH)),
    (PERP, (mix.PLACE_PATH, mix.CANCEL_PATH, mix.BATCH_CANCEL_PATH, mix.DETAIL_PATH, mix.FILLS_PATH)),
])
def test_each_instruments_commands_go_to_its_products_endpoints(inst, paths):
    got = (API.place(inst, TS, Side.BUY, TimeInForce.GTC, 100.0, 0.002, "c"), API.cancel(inst, TS, "c"),
           API.cancel_all(inst, TS), API.order_info(inst.symbol, TS, client_oid="c"),
           API.order_fills(inst.symbol, TS, order_id="9"))
    assert tuple(r.path for r in got) == paths
    assert all(r.headers["ACCESS-SIGN"] for r in got)


def test_account_wide_queries_are_one_per_product_spot_first():
    assert API.products == ["SPOT", "USDT-FUTURES"]
    assert [API.open_orders(p, TS).path for p in API.products] == [rest.UNFILLED_PATH, mix.PENDING_PATH]
    assert [API.fills(p, TS, 5).target for p in API.products] == [
        "/api/v2/spot/trade/fills?idGreaterThan=5", "/api/v2/mix/order/fills?idGreaterThan=5&productType=USDT-FUTURES"]
    assert [(p, r.path) for p, r in API.position_requests(TS)] == [("SPOT", rest.ASSETS_PATH),
                                                                    ("USDT-FUTURES", mix.POSITIONS_PATH)]
    assert OrderApi(CREDS, {}).products == ["SPOT"]


def test_positions_read_spot_balances_and_perpetual_positions():
    answers = [("SPOT", [{"coin": "ETH", "available": "0.004"}, {"coin": "BTC", "available": "9"},
                         {"coin": "USDT", "available": "-1"}]),
               ("USDT-FUTURES", [{"symbol": "BTCUSDT", "holdSide": "short", "total": "0.003"}])]
    assert API.positions(answers) == {1: 0.004, 2: -0.003}  # the BTC balance is not the perpetual's
    assert API.positions([("SPOT", []), ("USDT-FUTURES", None)]) == {1: 0.0, 2: 0.0}
    with pytest.raises(ValueError):
        API.positions([("USDT-FUTURES", [{"symbol": "BTCUSDT", "holdSide": "both", "total": "1"}])])


def test_reduce_only_is_a_perpetuals_flag():
    assert '"reduceOnly":"YES"' in OrderApi.place_body(PERP, Side.SELL, TimeInForce.GTC, 100.0, 0.001, "c",
                                                       reduce_only=True)
    with pytest.raises(ValueError, match="perpetuals only"):
        OrderApi.place_body(SPOT, Side.SELL, TimeInForce.GTC, 100.0, 0.001, "c", reduce_only=True)


def test_parsers_read_either_shape():
    spot_order = {"orderId": "1", "clientOid": "a", "symbol": "ETHUSDT", "side": "buy", "price": "1", "size": "1",
                  "baseVolume": "0", "priceAvg": "0", "status": "live"}
    assert [o.clientOid for o in parse_orders([spot_order])] == ["a"]
    assert [o.clientOid for o in parse_orders({"entrustedList": [dict(spot_order, clientOid="b")]})] == ["b"]
    spot_fill = {"orderId": "1", "clientOid": "a", "symbol": "ETHUSDT", "side": "buy", "tradeId": "3",
                 "priceAvg": "1", "size": "1"}
    assert [f.clientOid for f in parse_fills([spot_fill])] == ["a"]
    assert [f.tradeId for f in parse_fills({"fillList": [{"orderId": "1", "symbol": "BTCUSDT", "side": "buy",
                                                          "tradeId": "4", "price": "1", "baseVolume": "1"}]})] == [4]
    assert parse_cancelled({"cancelled": [{"clientOid": "a"}]}) == ["a"]
    assert parse_cancelled({"successList": [{"clientOid": "b"}], "failureList": []}) == ["b"]
