"""``pipeline.venue.limits`` through ``RestApi``: every endpoint has the rate the exchange documents,
a bucket of its own per key (public routes: one for every client), answered HTTP 429 code "429" over
it; the venue's ``rate_limit_per_s`` scales them all."""

from __future__ import annotations

import orjson
import pytest

from pipeline.trading.bitget.signing import Credentials
from pipeline.venue.http_wire import HttpRequest
from pipeline.venue.limits import DOCUMENTED_PER_S, RouteLimits
from pipeline.venue.orders import OrderEngine
from pipeline.venue.public import PUBLIC_ROUTES
from pipeline.venue.rest_api import ROUTES, RestApi
from tests.support.venue import RULES, T0_MS, Book

CREDS = Credentials("paper-key", "paper-secret", "paper-pass")


class Mono:
    ns = 0

    def __call__(self) -> int:
        return self.ns


def _req(path: str) -> HttpRequest:
    method = ROUTES[path]
    body = b'{"symbol":"BTCUSDT"}' if method == "POST" else b""
    headers = {k.lower(): v for k, v in CREDS.headers(T0_MS, method, path, "", body.decode()).items()}
    return HttpRequest(method, path, "", {} if path in PUBLIC_ROUTES else headers, body, True)


def _codes(api: RestApi, path: str, n: int) -> list[int]:
    return [api.handle(_req(path))[0] for _ in range(n)]


#: the exchange's "Frequency limit" of each endpoint (Bitget v2 API reference), requests a second
EXCHANGE_PER_S = {
    "/api/v2/public/time": 20, "/api/v2/spot/public/coins": 3, "/api/v2/spot/public/symbols": 20,
    "/api/v2/spot/market/tickers": 20, "/api/v2/spot/market/orderbook": 20, "/api/v2/spot/market/merge-depth": 20,
    "/api/v2/spot/market/fills": 10, "/api/v2/spot/market/candles": 20, "/api/v2/margin/currencies": 10,
    "/api/v2/mix/market/contracts": 20, "/api/v2/spot/trade/place-order": 10, "/api/v2/spot/trade/cancel-order": 10,
    "/api/v2/spot/trade/batch-orders": 5, "/api/v2/spot/trade/batch-cancel-order": 10,
    "/api/v2/spot/trade/cancel-symbol-order": 5, "/api/v2/spot/trade/orderInfo": 20,
    "/api/v2/spot/trade/unfilled-orders": 20, "/api/v2/spot/trade/fills": 10, "/api/v2/spot/account/info": 1,
    "/api/v2/spot/account/assets": 10,
    # USDT-FUTURES (mix)
    "/api/v2/mix/market/ticker": 20, "/api/v2/mix/market/tickers": 20, "/api/v2/mix/market/merge-depth": 20,
    "/api/v2/mix/market/fills": 20, "/api/v2/mix/market/candles": 20, "/api/v2/mix/order/place-order": 10,
    "/api/v2/mix/order/cancel-order": 10, "/api/v2/mix/order/batch-cancel-orders": 10,
    "/api/v2/mix/order/cancel-all-orders": 10, "/api/v2/mix/order/detail": 10,
    "/api/v2/mix/order/orders-pending": 10, "/api/v2/mix/order/fills": 10, "/api/v2/mix/position/all-position": 5,
    "/api/v2/mix/account/accounts": 10,
}


def test_the_venue_limits_the_spot_and_mix_routes_as_the_exchange_documents_them():
    assert DOCUMENTED_PER_S == EXCHANGE_PER_S


@pytest.mark.parametrize("path", sorted(DOCUMENTED_PER_S))
def test_each_endpoint_allows_its_documented_rate_then_answers_429(path):
    mono = Mono()
    api = RestApi(OrderEngine(RULES, Book().levels, lambda: T0_MS), CREDS, now_ms=lambda: T0_MS, mono_ns=mono)
    per_s = DOCUMENTED_PER_S[path]
    burst = int(max(per_s, 1))
    codes = _codes(api, path, burst + 1)
    assert 429 not in codes[:burst] and codes[burst] == 429
    status, raw = api.handle(_req(path))
    assert (status, orjson.loads(raw)["code"]) == (429, "429")
    mono.ns += int(1e9 / per_s) + 1  # one token's time later: one more
    assert _codes(api, path, 2)[0] != 429 and api.stats["rate_limited"] == 3


def test_the_venues_rate_scales_every_endpoint_and_routes_do_not_share_buckets():
    limits = RouteLimits(scale=100.0)
    assert limits.per_s("/api/v2/spot/account/info") == 100.0 and limits.per_s("/nope") is None
    mono = Mono()
    api = RestApi(OrderEngine(RULES, Book().levels, lambda: T0_MS), CREDS, now_ms=lambda: T0_MS, mono_ns=mono,
                  rate_limit_per_s=20.0)  # twice the documented place-order rate: every route doubled
    assert _codes(api, "/api/v2/spot/account/info", 3) == [200, 200, 429]
    assert _codes(api, "/api/v2/spot/account/assets", 1) == [200]
