"""``pipeline.venue.rest_api``: the order API as a pure function of one request (sans-I/O, no
socket): the route table, the checks before a route's handler runs, and the per-key token bucket.
The end-to-end behaviour over HTTP is in ``test_rest.py``."""

from __future__ import annotations

import orjson
import pytest

from pipeline.trading.bitget.signing import Credentials
from pipeline.venue.http_wire import HttpRequest
from pipeline.venue.orders import OrderEngine
from pipeline.venue.public import PUBLIC_ROUTES
from pipeline.venue.rest_api import (
    ACCOUNT_INFO,
    ADJUST_POSITION,
    PLACE,
    RATE_LIMITED,
    ROUTES,
    UNFILLED,
    RestApi,
    TokenBucket,
)
from tests.support.venue import RULES, T0_MS, Book

CREDS = Credentials("paper-key", "paper-secret", "paper-pass")


def _api(**kw) -> RestApi:
    engine = OrderEngine(RULES, Book().levels, lambda: T0_MS)
    return RestApi(engine, CREDS, now_ms=lambda: T0_MS, mono_ns=lambda: 0, **kw)


def _request(method: str, path: str, body: dict | None = None, query: str = "", creds: Credentials = CREDS,
             ts_ms: int = T0_MS) -> HttpRequest:
    text = orjson.dumps(body).decode() if body is not None else ""
    headers = {k.lower(): v for k, v in creds.headers(ts_ms, method, path, query, text).items()}
    return HttpRequest(method, path, query, headers, text.encode(), True)


def _call(api: RestApi, req: HttpRequest) -> tuple[int, dict]:
    status, raw = api.handle(req)
    return status, orjson.loads(raw)


def test_every_route_has_one_handler_and_the_order_changing_ones_take_the_latency():
    api = _api()
    assert set(api._handlers) | set(PUBLIC_ROUTES) == set(ROUTES) and not set(api._handlers) & set(PUBLIC_ROUTES)
    assert RATE_LIMITED == {p for p in ROUTES if "cancel" in p or p.endswith(("place-order", "batch-orders"))}
    assert all(ROUTES[p] == "POST" for p in RATE_LIMITED)


def test_a_signed_get_is_routed_to_its_handler():
    status, doc = _call(_api(), _request("GET", ACCOUNT_INFO))
    assert status == 200 and doc["code"] == "00000" and doc["requestTime"] == T0_MS
    assert set(doc["data"]) == {"userId", "inviterId", "channelCode", "channel", "regisTime"}
    assert _call(_api(), _request("GET", UNFILLED))[1]["data"] == []


def test_a_signed_place_reaches_the_engine():
    api = _api()
    status, doc = _call(api, _request("POST", PLACE, {"symbol": "BTCUSDT", "side": "buy", "orderType": "limit",
                                                      "force": "gtc", "price": "99.0", "size": "0.01",
                                                      "clientOid": "a-1"}))
    assert status == 200 and doc["data"]["clientOid"] == "a-1"
    assert api.engine.order(client_oid="a-1").is_open and api.counters()["orders_placed"] == 1


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/api/v2/spot/trade/nowhere", 404, "40404"),
    ("GET", PLACE, 405, "40001"),  # a known route with another method
    ("POST", ACCOUNT_INFO, 405, "40001"),
])
def test_unknown_routes_and_wrong_methods_are_refused_before_the_signature(method, path, status, code):
    api = _api()
    req = _request(method, path, creds=Credentials("other-key", "other-secret", "other-pass"))
    assert _call(api, req)[0] == status and _call(api, req)[1]["code"] == code
    assert api.stats["bad_signatures"] == 0


def test_the_admin_route_is_403_40014_unless_allowed():
    body = {"symbol": "BTCUSDT", "delta": "0.002"}
    status, doc = _call(_api(), _request("POST", ADJUST_POSITION, body))
    assert (status, doc["code"]) == (403, "40014")
    status, doc = _call(_api(allow_admin=True), _request("POST", ADJUST_POSITION, body))
    assert status == 200 and doc["data"] == {"symbol": "BTCUSDT", "position": "0.002"}


def test_an_unsigned_or_stale_request_never_reaches_a_handler():
    api = _api()
    req = _request("GET", UNFILLED)
    unsigned = req._replace(headers={k: v for k, v in req.headers.items() if k != "access-sign"})
    assert _call(api, unsigned)[1]["code"] == "40001" and api.stats["bad_signatures"] == 1
    assert _call(api, _request("GET", UNFILLED, ts_ms=T0_MS - 60_000))[1]["code"] == "40008"
    assert api.stats["stale_timestamps"] == 1


def test_the_token_bucket_refills_at_its_rate_and_caps_at_its_burst():
    b = TokenBucket(2.0)
    assert [b.allow("k", 0) for _ in range(3)] == [True, True, False]
    assert b.allow("other", 0)  # per key
    assert b.allow("k", 500_000_000) and not b.allow("k", 500_000_000)
    assert [b.allow("k", 100_000_000_000) for _ in range(3)] == [True, True, False]


def test_batch_place_and_cancel_answer_success_and_failure_lists_with_the_exchanges_codes():
    api = _api()
    good = {"side": "buy", "orderType": "limit", "force": "GTC", "price": "99.0", "size": "1", "clientOid": "b1"}
    status, doc = _call(api, _request("POST", "/api/v2/spot/trade/batch-orders", {"symbol": "BTCUSDT", "orderList": [
        good, {**good, "clientOid": "b2", "price": "99.05"}, {**good, "clientOid": "b1"}]}))
    assert status == 200 and [o["clientOid"] for o in doc["data"]["successList"]] == ["b1"]
    assert [(f["clientOid"], f["errorCode"]) for f in doc["data"]["failureList"]] == [("b2", "41103"), ("b1", "43118")]
    status, doc = _call(api, _request("POST", "/api/v2/spot/trade/batch-cancel-order", {
        "symbol": "BTCUSDT", "orderList": [{"clientOid": "b1"}, {"clientOid": "b1"}]}))
    assert [o["clientOid"] for o in doc["data"]["successList"]] == ["b1"]
    assert [f["errorCode"] for f in doc["data"]["failureList"]] == ["43001"]
    status, doc = _call(api, _request("POST", "/api/v2/spot/trade/batch-orders", {"symbol": "BTCUSDT", "orderList": []}))
    assert (status, doc["code"]) == (400, "40020") and api.stats["bad_requests"] == 1
