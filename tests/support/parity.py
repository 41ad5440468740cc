"""A whole paper venue for exchange-client parity tests: the market server (paused synthetic market of
the paper instruments, moved by ``advance``), the order engine, the REST API with its public
routes, and the private WebSocket, all on one loop in a thread with the real clocks (an exchange
client signs with its own clock); plus the unmodified ccxt clients pointed at it, only their URLs
and keys set. ``ParityVenue(perps=True)``: every paper instrument is a USDT-FUTURES perpetual (its
market data under that instType, its orders through the mix routes)."""

from __future__ import annotations

import http.client
import time

import orjson

from pipeline.trading.bitget.signing import Credentials
from pipeline.venue.order_fields import rules_from_config
from pipeline.venue.orders import OrderEngine
from pipeline.venue.private_ws import PrivateChannels
from pipeline.venue.rest import RestServer
from pipeline.venue.rest_api import RestApi
from pipeline.venue.server import VenueServer
from pipeline.venue.service import VenueThread
from pipeline.venue.sources import SyntheticSource
from tests.support.venue import SPECS

CREDS = Credentials("bg_paper_parity_key", "parity-secret-not-a-real-one", "parity-pass")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ParityVenue:
    """The venue (see the module docstring); ``close`` stops it. ``warm_units`` market steps are
    published first, so the book is full and trades have printed."""

    def __init__(self, *, warm_units: int = 60, rate_limit_per_s: float = 10.0, perps: bool = False) -> None:
        source = SyntheticSource(SPECS, seed=11, step_ms=20, start_ms=now_ms() - warm_units * 20)
        self.perps = {s.symbol: "USDT" for s in SPECS} if perps else {}
        self.server = VenueServer(source, start_paused=True, inst_types=dict.fromkeys(self.perps, "USDT-FUTURES"))
        self.engine = OrderEngine(rules_from_config(SPECS, self.server.inst_ids), self.server.market.levels, now_ms)
        self.server.add_market_listener(self.engine)
        self.api = RestApi(self.engine, CREDS, rate_limit_per_s=rate_limit_per_s, perps=self.perps)
        self.server.add_market_listener(self.api.public)
        self.private = PrivateChannels(self.api)
        self.server.set_private(self.private.handler)
        self.rest = RestServer(self.api)
        self.thread = VenueThread(self.server, name="parity-venue", extra=[self.rest])
        self.thread.start()
        self.server.advance(warm_units)
        self.base_url = f"http://127.0.0.1:{self.rest.port}"

    def close(self) -> None:
        self.thread.stop()

    def levels(self, symbol: str = "BTCUSDT", n: int | None = None):
        return self.server.levels(symbol, n)

    def call(self, fn, *args):
        """``fn(*args)`` on the venue's loop (the engine's thread)."""
        return self.server._control(fn, *args)

    def send(self, method: str, target: str, body: str, headers: dict) -> tuple[int, dict]:
        """One raw HTTP request to the REST API; (status, JSON answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.rest.port, timeout=5)
        try:
            conn.request(method, target, body=body.encode() if body else None, headers=headers)
            resp = conn.getresponse()
            return resp.status, orjson.loads(resp.read())
        finally:
            conn.close()


def point_at(exchange, venue: ParityVenue):
    """An unmodified ccxt bitget client given only the venue's URLs and the paper key."""
    api = exchange.urls["api"]
    for name, url in list(api.items()):
        if isinstance(url, str):
            api[name] = venue.base_url
    ws_url = venue.server.private_url
    api["ws"] = {**api.get("ws", {}), "public": venue.server.url, "private": ws_url}
    exchange.apiKey, exchange.secret, exchange.password = CREDS.api_key, CREDS.secret, CREDS.passphrase
    return exchange
