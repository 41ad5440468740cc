"""Bitget v2 USDT-FUTURES ("mix") REST, sans-I/O (pipeline/trading/bitget/mix.py): the exact request text
of every endpoint the sender uses and its signature (fixed vectors, and the same recomputed here from
the documented prehash with hashlib), and the parsing of every answer shape."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from pipeline.trading.bitget import mix
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import Side, TimeInForce

SECRET = "bitget-test-secret"
CREDS = Credentials("key-id-1", SECRET, "pass-phrase")
TS = 1659076670000
BTC = mix.MixInstrument("BTCUSDT", 0.1, 0.001)
COID = "tp0123456789abcdef"


def _doc_sign(method: str, target: str, body: str) -> str:
    """The documented signature: base64(HMAC-SHA256(secret, ts + METHOD + path[?query] + body))."""
    prehash = f"{TS}{method}{target}{body}".encode()
    return base64.b64encode(hmac.new(SECRET.encode(), prehash, hashlib.sha256).digest()).decode()


# (name, request, method, target, body, signature): the vectors, fixed
VECTORS = [
    ("place", lambda: mix.build_place(CREDS, TS, BTC, Side.BUY, TimeInForce.GTC, 23222.5, 0.008, COID),
     "POST", "/api/v2/mix/order/place-order",
     '{"symbol":"BTCUSDT","productType":"USDT-FUTURES","marginMode":"crossed","marginCoin":"USDT","size":"0.008",'
     '"price":"23222.5","side":"buy","orderType":"limit","force":"gtc","clientOid":"tp0123456789abcdef",'
     '"reduceOnly":"NO"}', "Aj1c6DU3CiQnRII09BGIRJDIN3ySD6r87WbKctZ5jGo="),
    ("place reduce-only", lambda: mix.build_place(CREDS, TS, BTC, Side.SELL, TimeInForce.POST_ONLY, 23222.5, 0.002,
                                                  COID, reduce_only=True),
     "POST", "/api/v2/mix/order/place-order",
     '{"symbol":"BTCUSDT","productType":"USDT-FUTURES","marginMode":"crossed","marginCoin":"USDT","size":"0.002",'
     '"price":"23222.5","side":"sell","orderType":"limit","force":"post_only","clientOid":"tp0123456789abcdef",'
     '"reduceOnly":"YES"}', "HyRCeguj8EYT7DhU32dv0GJNwq2+ZTlGcg8E4+XACxo="),
    ("cancel", lambda: mix.build_cancel(CREDS, TS, BTC, client_oid=COID), "POST", "/api/v2/mix/order/cancel-order",
     '{"symbol":"BTCUSDT","productType":"USDT-FUTURES","marginCoin":"USDT","clientOid":"tp0123456789abcdef"}',
     "kDiG4xM41BdvYaiSkxTyCO7gCSXaEk+E4Iil6zpYQD8="),
    ("batch cancel", lambda: mix.build_batch_cancel(CREDS, TS, BTC, [COID, "tp00000000000000ff"]),
     "POST", "/api/v2/mix/order/batch-cancel-orders",
     '{"symbol":"BTCUSDT","productType":"USDT-FUTURES","marginCoin":"USDT","orderIdList":'
     '[{"clientOid":"tp0123456789abcdef"},{"clientOid":"tp00000000000000ff"}]}',
     "3FhzXBiwNDxjl64tYCdYF2uz1S3egjGCdhvaIzbGEkM="),
    ("batch cancel of a symbol", lambda: mix.build_batch_cancel(CREDS, TS, BTC),
     "POST", "/api/v2/mix/order/batch-cancel-orders",
     '{"symbol":"BTCUSDT","productType":"USDT-FUTURES","marginCoin":"USDT"}',
     "KlMXd52QMVUhDz9ukKWvzUnCiwd5cg4cgCzo1oUS15s="),
    ("cancel all", lambda: mix.build_cancel_all(CREDS, TS), "POST", "/api/v2/mix/order/cancel-all-orders",
     '{"productType":"USDT-FUTURES","marginCoin":"USDT"}', "sYMjeeRRMUMLTHt8mskkRlNDQhc1Fm+oFEJZq36P9u0="),
    ("detail", lambda: mix.build_order_detail(CREDS, TS, "BTCUSDT", client_oid=COID),
     "GET", "/api/v2/mix/order/detail?clientOid=tp0123456789abcdef&productType=USDT-FUTURES&symbol=BTCUSDT", "",
     "F1WEA+4eLHAW55VwqaHsui9zxTWU8SZzxmaWcswqkgM="),
    ("orders pending", lambda: mix.build_pending(CREDS, TS), "GET",
     "/api/v2/mix/order/orders-pending?productType=USDT-FUTURES", "", "uqo+pB1aoMxxkDQoBx4RcqCKLZ+DHK413lgFXkbO3EE="),
    ("fills", lambda: mix.build_fills(CREDS, TS, id_greater_than=41), "GET",
     "/api/v2/mix/order/fills?idGreaterThan=41&productType=USDT-FUTURES", "",
     "g7C1zgo1TCY3Db01fDXRJYv5ZQas5E4LAo4juEIABtw="),
    ("all positions", lambda: mix.build_positions(CREDS, TS), "GET",
     "/api/v2/mix/position/all-position?marginCoin=USDT&productType=USDT-FUTURES", "",
     "wbifD4IBa6DFeEO1D2cJTycHjVqciLgUEWr6/uequMI="),
]


@pytest.mark.parametrize("name, make, method, target, body, sign", VECTORS, ids=[v[0] for v in VECTORS])
def test_every_endpoint_sends_these_bytes_signed_as_documented(name, make, method, target, body, sign):
    req = make()
    assert (req.method, req.target, req.body) == (method, target, body)
    assert req.headers["ACCESS-SIGN"] == sign == _doc_sign(method, target, body)
    assert req.headers["ACCESS-TIMESTAMP"] == str(TS) and req.headers["ACCESS-KEY"] == "key-id-1"


def test_the_documented_mix_prehash_vector_signs_as_the_reference_says():
    # ../shared reference: the exchange's own mix place-order prehash example, secret bitget-test-secret
    body = ('{"productType":"usdt-futures","symbol":"BTCUSDT","size":"8","marginMode":"crossed","side":"buy",'
            '"orderType":"limit","clientOid":"channel#123456"}')
    assert CREDS.headers(16273667805456, "POST", mix.PLACE_PATH, "", body)["ACCESS-SIGN"] == \
        "wpQMoiACciD4g+O0wftRWyN8dm23TIEOIsbaEMpYJqQ="


@pytest.mark.parametrize("price, size, side, tif, mode", [
    (0.0, 0.001, Side.BUY, TimeInForce.GTC, "crossed"), (100.05, 0.001, Side.BUY, TimeInForce.GTC, "crossed"),
    (100.0, 0.0015, Side.BUY, TimeInForce.GTC, "crossed"), (100.0, 0.0, Side.BUY, TimeInForce.GTC, "crossed"),
    (100.0, 0.001, 0, TimeInForce.GTC, "crossed"), (100.0, 0.001, Side.BUY, 9, "crossed"),
    (100.0, 0.001, Side.BUY, TimeInForce.GTC, "hedged")])
def test_place_refuses_off_step_sizes_unknown_enums_and_margin_modes(price, size, side, tif, mode):
    inst = mix.MixInstrument("BTCUSDT", 0.1, 0.001, "USDT", mode)
    with pytest.raises(ValueError):
        mix.place_body(inst, side, tif, price, size, COID)


def test_ids_are_required_and_batches_bounded():
    with pytest.raises(ValueError):
        mix.build_cancel(CREDS, TS, BTC)
    with pytest.raises(ValueError):
        mix.build_order_detail(CREDS, TS, "BTCUSDT")
    with pytest.raises(ValueError):
        mix.build_batch_cancel(CREDS, TS, BTC, [f"c{i}" for i in range(51)])
    assert '"orderId":"77"' in mix.build_cancel(CREDS, TS, BTC, order_id="77").body


def test_order_answers_detail_and_pending_read_as_venue_orders():
    detail = {"symbol": "BTCUSDT", "size": "0.008", "orderId": "9", "clientOid": COID, "baseVolume": "0.002",
              "priceAvg": "23222.5", "price": "23222.5", "state": "partially_filled", "side": "buy"}
    (o,) = mix.parse_orders(detail)
    assert (o.orderId, o.clientOid, o.size, o.baseVolume, o.status) == ("9", COID, 0.008, 0.002, "partially_filled")
    live = dict(detail, state=None, status="live", priceAvg="", baseVolume="0")
    cancelled = dict(detail, orderId="10", status="canceled")
    got = mix.parse_orders({"entrustedList": [live, cancelled], "endId": "10"})
    assert [(v.status, v.priceAvg) for v in got] == [("live", 0.0), ("cancelled", 23222.5)]
    assert mix.parse_orders({"entrustedList": None}) == [] and mix.parse_orders(None) == []
    for bad in ([detail], {"entrustedList": [1]}, {"entrustedList": [dict(detail, size="x")]}):
        with pytest.raises(ValueError):
            mix.parse_orders(bad)


def test_fill_answers_carry_base_volume_and_no_client_oid():
    fills = {"fillList": [{"tradeId": "12", "symbol": "BTCUSDT", "orderId": "9", "price": "100.5", "baseVolume": "0.003",
                           "side": "sell", "cTime": "1627293509612"},
                          {"tradeId": "11", "symbol": "BTCUSDT", "orderId": "9", "price": "100.4", "baseVolume": "0.001",
                           "side": "sell", "cTime": "1627293509611"}], "endId": "11"}
    got = mix.parse_fills(fills)
    assert [(f.tradeId, f.priceAvg, f.size, f.clientOid) for f in got] == [(11, 100.4, 0.001, ""), (12, 100.5, 0.003, "")]
    assert mix.parse_fills({"fillList": None}) == []
    with pytest.raises(ValueError):
        mix.parse_fills({"fillList": [{"tradeId": "x"}]})


def test_cancel_and_position_answers():
    assert mix.parse_cancelled({"successList": [{"orderId": "1", "clientOid": COID}], "failureList": []}) == [COID]
    with pytest.raises(ValueError):
        mix.parse_cancelled([])
    pos = [{"symbol": "BTCUSDT", "holdSide": "short", "total": "0.004"},
           {"symbol": "ETHUSDT", "holdSide": "long", "total": "0.1"}]
    assert mix.parse_positions(pos) == {"BTCUSDT": -0.004, "ETHUSDT": 0.1}
    assert mix.parse_positions(None) == {}
    for bad in ({"a": 1}, [{"symbol": "BTCUSDT", "holdSide": "net", "total": "1"}],
                [{"symbol": "BTCUSDT", "holdSide": "long", "total": "nan"}],
                [{"symbol": "BTCUSDT", "holdSide": "long", "total": "x"}]):
        with pytest.raises(ValueError):
            mix.parse_positions(bad)
