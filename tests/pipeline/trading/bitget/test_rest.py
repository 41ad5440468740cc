"""Bitget v2 spot REST, sans-I/O (pipeline/trading/bitget/rest.py): the exact request text that is sent and
signed, and the classification of every answer the order sender can get."""

from __future__ import annotations

import math

import orjson
import pytest

from pipeline.trading.bitget import rest
from pipeline.trading.bitget.rest import Outcome
from pipeline.trading.bitget.signing import Credentials, verify
from pipeline.trading.messages import Side, TimeInForce

SECRET = "bitget-test-secret"
CREDS = Credentials("key-id-1", SECRET, "pass-phrase")
TS = 1659076670000
#: the shared vector of tests/pipeline/trading/bitget/test_signing.py (spot place-order)
SPOT_BODY = ('{"symbol":"BTCUSDT","side":"buy","orderType":"limit","force":"gtc","price":"23222.5","size":"1",'
             '"clientOid":"121211212122"}')
SPOT_SIGN = "LJxEuoZ+9jdSlIkD1G8XAtg0wiesnx604+GExQ5KlFk="


def test_place_order_body_is_the_shared_vector_and_its_signature_matches():
    req = rest.build_place(CREDS, TS, "BTCUSDT", Side.BUY, TimeInForce.GTC, 23222.5, 1.0, "121211212122", 0.1, 0.0001)
    assert (req.method, req.path, req.query, req.target) == ("POST", "/api/v2/spot/trade/place-order", "",
                                                              "/api/v2/spot/trade/place-order")
    assert req.body == SPOT_BODY
    assert req.headers["ACCESS-SIGN"] == SPOT_SIGN
    assert req.headers["ACCESS-TIMESTAMP"] == str(TS) and req.headers["ACCESS-KEY"] == "key-id-1"
    assert req.headers["ACCESS-PASSPHRASE"] == "pass-phrase"
    assert req.headers["Content-Type"] == "application/json"


def test_place_order_sell_post_only_and_ioc_with_step_decimals():
    req = rest.build_place(CREDS, TS, "ETHUSDT", Side.SELL, TimeInForce.POST_ONLY, 1834.07, 0.01, "tp00000000000000ff",
                           0.01, 0.001)
    assert req.body == ('{"symbol":"ETHUSDT","side":"sell","orderType":"limit","force":"post_only",'
                        '"price":"1834.07","size":"0.01","clientOid":"tp00000000000000ff"}')
    assert verify(SECRET, req.headers["ACCESS-SIGN"], TS, "POST", rest.PLACE_PATH, "", req.body)
    ioc = rest.build_place(CREDS, TS, "BTCUSDT", Side.BUY, TimeInForce.IOC, 30000.0, 0.0003, "x", 0.1, 0.0001)
    assert orjson.loads(ioc.body)["force"] == "ioc" and orjson.loads(ioc.body)["price"] == "30000"
    assert orjson.loads(ioc.body)["size"] == "0.0003"


@pytest.mark.parametrize("price, size, side, tif", [
    (0.0, 1.0, Side.BUY, TimeInForce.GTC), (-1.0, 1.0, Side.BUY, TimeInForce.GTC),
    (math.nan, 1.0, Side.BUY, TimeInForce.GTC), (math.inf, 1.0, Side.BUY, TimeInForce.GTC),
    (100.05, 1.0, Side.BUY, TimeInForce.GTC), (100.0, 0.00015, Side.BUY, TimeInForce.GTC),
    (100.0, 1.0, 0, TimeInForce.GTC), (100.0, 1.0, Side.BUY, 9)])
def test_place_order_refuses_what_is_not_positive_on_step_and_known(price, size, side, tif):
    with pytest.raises(ValueError):
        rest.build_place(CREDS, TS, "BTCUSDT", side, tif, price, size, "x", 0.1, 0.0001)


def test_cancel_and_cancel_symbol_bodies():
    c = rest.build_cancel(CREDS, TS, "BTCUSDT", client_oid="tp0123456789abcdef")
    assert (c.method, c.path) == ("POST", "/api/v2/spot/trade/cancel-order")
    assert c.body == '{"symbol":"BTCUSDT","clientOid":"tp0123456789abcdef"}'
    assert verify(SECRET, c.headers["ACCESS-SIGN"], TS, "POST", c.path, "", c.body)
    assert rest.build_cancel(CREDS, TS, "BTCUSDT", order_id="77").body == '{"symbol":"BTCUSDT","orderId":"77"}'
    with pytest.raises(ValueError):
        rest.build_cancel(CREDS, TS, "BTCUSDT")
    a = rest.build_cancel_symbol(CREDS, TS, "ETHUSDT")
    assert (a.path, a.body) == ("/api/v2/spot/trade/cancel-symbol-order", '{"symbol":"ETHUSDT"}')


def test_get_requests_sign_the_sorted_query_and_have_no_body():
    info = rest.build_order_info(CREDS, TS, client_oid="tp0123456789abcdef")
    assert (info.method, info.target, info.body) == ("GET", "/api/v2/spot/trade/orderInfo?clientOid=tp0123456789abcdef",
                                                     "")
    assert verify(SECRET, info.headers["ACCESS-SIGN"], TS, "GET", info.path, info.query)
    fills = rest.build_fills(CREDS, TS, symbol="BTCUSDT", order_id="9", id_greater_than=41)
    assert fills.target == "/api/v2/spot/trade/fills?idGreaterThan=41&orderId=9&symbol=BTCUSDT"
    assert verify(SECRET, fills.headers["ACCESS-SIGN"], TS, "GET", fills.path, fills.query)
    assert rest.build_fills(CREDS, TS).target == "/api/v2/spot/trade/fills"
    assert rest.build_unfilled(CREDS, TS).target == "/api/v2/spot/trade/unfilled-orders"
    assert rest.build_unfilled(CREDS, TS, "BTCUSDT").target == "/api/v2/spot/trade/unfilled-orders?symbol=BTCUSDT"
    with pytest.raises(ValueError):
        rest.build_order_info(CREDS, TS)


def test_a_request_repr_never_shows_the_key_or_passphrase():
    req = rest.build_place(CREDS, TS, "BTCUSDT", Side.BUY, TimeInForce.GTC, 1.0, 1.0, "x", 0.1, 0.0001)
    for text in (repr(req), str(req), f"{req}"):
        assert "key-id-1" not in text and "pass-phrase" not in text and req.headers["ACCESS-SIGN"] not in text


def _ans(code, data=None, msg="m"):
    return orjson.dumps({"code": code, "msg": msg, "requestTime": 1, "data": data})


@pytest.mark.parametrize("status, body, outcome, code", [
    (200, _ans("00000", {"orderId": "1"}), Outcome.OK, "00000"),
    (400, _ans("40001"), Outcome.REJECTED, "40001"),
    (400, _ans("40008"), Outcome.REJECTED, "40008"),
    (401, _ans("40006"), Outcome.REJECTED, "40006"),
    (401, _ans("40009"), Outcome.REJECTED, "40009"),
    (400, _ans("43001"), Outcome.REJECTED, "43001"),
    (400, _ans("43118"), Outcome.REJECTED, "43118"),
    (400, _ans("43012"), Outcome.REJECTED, "43012"),
    (400, _ans("43027"), Outcome.REJECTED, "43027"),
    (400, _ans("40034"), Outcome.REJECTED, "40034"),
    (200, _ans("43012"), Outcome.REJECTED, "43012"),
    (429, _ans("429"), Outcome.RETRYABLE, "429"),
    (429, b"", Outcome.RETRYABLE, "429"),
    (500, _ans("50000"), Outcome.RETRYABLE, "50000"),
    (502, b"<html>bad gateway</html>", Outcome.RETRYABLE, ""),
    (503, b"", Outcome.RETRYABLE, ""),
    (200, b"not json", Outcome.UNKNOWN, ""),
    (200, b"", Outcome.UNKNOWN, ""),
    (404, b"", Outcome.REJECTED, ""),
])
def test_response_classification_table(status, body, outcome, code):
    r = rest.classify_response(status, body)
    assert (r.outcome, r.code, r.status) == (outcome, code, status)
    assert r.ok == (outcome is Outcome.OK)
    if r.ok:
        assert r.data == {"orderId": "1"}


def test_transport_failures_before_sending_are_retryable_after_sending_unknown():
    assert rest.classify_transport_error(False, "ConnectionRefusedError").outcome is Outcome.RETRYABLE
    assert rest.classify_transport_error(True, "timeout").outcome is Outcome.UNKNOWN


def test_parse_orders_fills_and_cancelled():
    orders = rest.parse_orders([{"orderId": "5", "clientOid": "tp00000000000000aa", "symbol": "BTCUSDT",
                                 "side": "buy", "orderType": "limit", "force": "gtc", "price": "100.5",
                                 "size": "0.02", "baseVolume": "0.01", "priceAvg": "100.5",
                                 "status": "partially_filled", "cTime": "1", "uTime": "2"}])
    assert orders[0].price == 100.5 and orders[0].baseVolume == 0.01 and orders[0].status == "partially_filled"
    fills = rest.parse_fills([
        {"tradeId": "12", "orderId": "5", "clientOid": "c", "symbol": "BTCUSDT", "side": "buy", "priceAvg": "100.5",
         "size": "0.01", "amount": "1.005", "tradeScope": "maker", "cTime": "1700000000000"},
        {"tradeId": "9", "orderId": "5", "clientOid": "c", "symbol": "BTCUSDT", "side": "buy", "priceAvg": "100",
         "size": "0.01", "amount": "1", "tradeScope": "maker", "cTime": "1700000000000"}])
    assert [f.tradeId for f in fills] == [9, 12] and fills[1].priceAvg == 100.5 and fills[0].cTime == 1700000000000
    assert rest.parse_cancelled({"symbol": "BTCUSDT", "cancelled": [{"orderId": "1", "clientOid": "a"}]}) == ["a"]
    for bad in ({"x": 1}, [{"orderId": "1"}], "text"):
        with pytest.raises(ValueError):
            rest.parse_orders(bad)
        with pytest.raises(ValueError):
            rest.parse_fills(bad)
    with pytest.raises(ValueError):
        rest.parse_cancelled([1])
    assert rest.parse_orders(None) == [] and rest.parse_fills(None) == []


@pytest.mark.parametrize("x, step, text", [(23222.5, 0.1, "23222.5"), (0.01, 0.0001, "0.01"), (30000.0, 0.1, "30000"),
                                           (0.30000000000000004, 0.1, "0.3"), (5.0, 5.0, "5"), (1e-08, 1e-08, "0.00000001")])
def test_fmt_decimal(x, step, text):
    assert rest.fmt_decimal(x, step) == text


# ------------------------------------------------------------------------------- the venue's codes
#: every code the sender distinguishes, spot and mix, with what it must mean (fixed here, not read back)
EXPECTED_CODES = {
    "00000": rest.CodeClass.OK, "40001": rest.CodeClass.MALFORMED, "40006": rest.CodeClass.AUTH,
    "40008": rest.CodeClass.AUTH, "40009": rest.CodeClass.AUTH, "40012": rest.CodeClass.AUTH,
    "40034": rest.CodeClass.BAD_SYMBOL, "429": rest.CodeClass.RATE_LIMIT, "43001": rest.CodeClass.NO_ORDER,
    "43012": rest.CodeClass.FUNDS, "43027": rest.CodeClass.POST_ONLY, "43118": rest.CodeClass.DUPLICATE,
    "45110": rest.CodeClass.FUNDS, "50000": rest.CodeClass.INTERNAL,
    "22001": rest.CodeClass.NO_ORDER, "22002": rest.CodeClass.NO_POSITION, "40109": rest.CodeClass.NO_ORDER,
    "40768": rest.CodeClass.NO_ORDER, "40786": rest.CodeClass.DUPLICATE, "40762": rest.CodeClass.FUNDS,
    "40774": rest.CodeClass.POSITION_MODE, "40020": rest.CodeClass.MALFORMED,
}


def test_every_code_is_mapped_to_its_meaning():
    assert {c: k for c, (k, _) in rest.CODES.items()} == EXPECTED_CODES
    assert all(rest.CODES[c][1] for c in EXPECTED_CODES)  # each has its text
    assert rest.code_class("99999") is None
    assert rest.NO_ORDER_CODES == {"43001", "22001", "40109", "40768"}
    assert rest.DUPLICATE_OID_CODES == {"43118", "40786"}


@pytest.mark.parametrize("code", sorted(EXPECTED_CODES))
def test_every_code_classifies_as_the_sender_acts_on_it(code):
    body = orjson.dumps({"code": code, "msg": "m", "data": None})
    status = 429 if code == "429" else 500 if code == "50000" else 200 if code == "00000" else 400
    res = rest.classify_response(status, body)
    want = {rest.CodeClass.OK: Outcome.OK, rest.CodeClass.RATE_LIMIT: Outcome.RETRYABLE,
            rest.CodeClass.INTERNAL: Outcome.RETRYABLE}.get(EXPECTED_CODES[code], Outcome.REJECTED)
    assert (res.outcome, res.code) == (want, code)
    assert rest.classify_response(200, body).outcome is (Outcome.RETRYABLE if code == "429" else want
                                                         if code != "50000" else Outcome.REJECTED)
