"""The paper venue's order REST API (sans-I/O): one ``HttpRequest`` in, ``(http_status, json_bytes)``
out, against the ``OrderEngine`` (``pipeline.venue.orders``); ``pipeline.venue.rest.RestServer``
serves it over HTTP/1.1.

``RestApi.handle`` checks, in order: known route (404 "40404"; a known route with another method:
405); for a public route (``pipeline.venue.public.PUBLIC_ROUTES``: market data, no auth) its rate
limit and its answer; else the auth headers (400 "40001" missing), ACCESS-KEY and
ACCESS-PASSPHRASE (401 "40006"), ACCESS-TIMESTAMP within ``recv_window_ms`` of the venue's wall
clock (400 "40008"), ACCESS-SIGN (401 "40009", ``pipeline.trading.bitget.signing.verify`` over the
exact path, query text and body bytes received), the route's rate limit per key (429 "429":
``pipeline.venue.limits``, the exchange's documented rate of each endpoint, all scaled by
``rate_limit_per_s`` / 10), then the JSON body / query and the route's handler (``ROUTES``: path
-> method; one handler each). Every answer is ``{"code","msg","requestTime","data"}``; HTTP 200
with code "00000", or the error's status. Parameters the venue does not use (ccxt's startTime,
limit on unfilled-orders, ...) are accepted and ignored, as the exchange does for optional ones.

Endpoints (signed)::

    POST /api/v2/spot/trade/place-order          POST /api/v2/spot/trade/cancel-order
    POST /api/v2/spot/trade/batch-orders         POST /api/v2/spot/trade/batch-cancel-order
    POST /api/v2/spot/trade/cancel-symbol-order  GET  /api/v2/spot/trade/orderInfo
    GET  /api/v2/spot/trade/unfilled-orders      GET  /api/v2/spot/trade/fills
    GET  /api/v2/spot/account/info               GET  /api/v2/spot/account/assets[?coin=BTC]
    POST /api/v2/paper/adjust-position           (admin, paper only: 403 "40014" unless allow_admin)
    /api/v2/mix/...                              USDT-FUTURES perpetuals (``perps``): ``pipeline.venue.mix_api``

Batches (``pipeline.venue.batch``): body ``{"symbol", "orderList": [...]}`` (at most 50 entries;
an entry's own symbol first); data ``{"successList": [{"orderId","clientOid"}], "failureList":
[{"orderId","clientOid","errorMsg","errorCode"}]}``.

Fills: each object as ``pipeline.venue.account_state.Fill.to_json`` makes it (tradeId, orderId,
clientOid, symbol, orderType, side, priceAvg, size, amount, tradeScope, cTime, uTime); a fill with a fee (the
engine has a fee schedule) also carries Bitget v2's ``feeDetail`` (``totalFee`` negative: the fee
paid, in USDT).

Account routes (the account persists across venue restarts: ``pipeline.venue.account``)::

    info    data {"userId": <account id>, "inviterId": "", "channelCode": "", "channel": "",
                  "regisTime": <account created ms>}          (strings; a reset venue: another userId)
    assets  data [{"coin", "available", "frozen": "0", "locked": "0", "limitAvailable": "0",
                   "uTime": <ms of the coin's last change>}, ...]
            one per base coin of the served USDT-quoted symbols (``base_coin``: BTCUSDT -> BTC;
            a symbol of another quote is left out, and out of the cash), in symbol order, then
            USDT; ``coin`` (case-insensitive) keeps that coin only ([] when the account has none).
            A base coin's available is the account's signed position in its symbol; USDT's is the
            cash from fills, -sum(signed price * size + fee) (fee 0 unless the engine has a fee
            schedule, ``pipeline.venue.fees``). Both may be negative: the paper
            venue lends without limit (a negative base balance is a paper short). Nothing is ever
            frozen for open orders. An engine never restored from an account log answers userId "".
    adjust-position  body {"symbol": "BTCUSDT", "delta": "0.002"} (a non-zero decimal string, may
            be negative): the position changes by delta with no order, fill or cash (a position
            changed behind the client's back, for chaos tests); persisted; data {"symbol",
            "position": <new position>}.

Secrets: the credentials are held by ``RestApi`` only; no log line, counter, response or exception
text carries the secret, the passphrase or a signature (log lines name the key by its fingerprint).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from contextlib import suppress
from decimal import Decimal
from urllib.parse import parse_qsl

import orjson

from pipeline.runtime import redact
from pipeline.trading.bitget.protocol import QUOTE_COIN, base_coin
from pipeline.trading.bitget.signing import Credentials, verify
from pipeline.venue import mix_api
from pipeline.venue.batch import cancel_batch, place_batch
from pipeline.venue.errors import VenueError
from pipeline.venue.http_wire import HttpRequest
from pipeline.venue.limits import PLACE_ORDER_PER_S, RouteLimits, TokenBucket
from pipeline.venue.order_fields import (CODE_BAD_REQUEST, CODE_PARAM_EMPTY, CODE_PARAM_ERROR, MALFORMED_CODES,
                                         OrderRejected, fmt)
from pipeline.venue.orders import OrderEngine
from pipeline.venue.public import PUBLIC_ROUTES, PublicMarket

__all__ = ["ROUTES", "RestApi", "TokenBucket", "envelope"]

PREFIX = "/api/v2/spot/trade/"
PLACE = PREFIX + "place-order"
CANCEL = PREFIX + "cancel-order"
CANCEL_SYMBOL = PREFIX + "cancel-symbol-order"
ORDER_INFO = PREFIX + "orderInfo"
UNFILLED = PREFIX + "unfilled-orders"
FILLS = PREFIX + "fills"
BATCH_PLACE = PREFIX + "batch-orders"
BATCH_CANCEL = PREFIX + "batch-cancel-order"
ACCOUNT_INFO = "/api/v2/spot/account/info"
ASSETS = "/api/v2/spot/account/assets"
ADJUST_POSITION = "/api/v2/paper/adjust-position"  # admin: only with allow_admin
ROUTES = {PLACE: "POST", CANCEL: "POST", CANCEL_SYMBOL: "POST", BATCH_PLACE: "POST", BATCH_CANCEL: "POST",
          ORDER_INFO: "GET", UNFILLED: "GET", FILLS: "GET", ACCOUNT_INFO: "GET", ASSETS: "GET",
          ADJUST_POSITION: "POST", **dict.fromkeys(PUBLIC_ROUTES, "GET")}
#: the order-changing routes (the REST server's ``latency_ms`` applies to them)
RATE_LIMITED = frozenset({PLACE, CANCEL, CANCEL_SYMBOL, BATCH_PLACE, BATCH_CANCEL})
PUBLIC_KEY = "public"  # the public routes' rate-limit key (per IP at the exchange; every client is 127.0.0.1)
# the USDT-FUTURES (mix) routes: pipeline.venue.mix_api
ROUTES.update(mix_api.ROUTES)
RATE_LIMITED = RATE_LIMITED | mix_api.RATE_LIMITED

CODE_OK = "00000"
CODE_STALE = "40008"
CODE_BAD_KEY = "40006"
CODE_BAD_SIGN = "40009"
CODE_RATE = "429"
CODE_NOT_FOUND = "40404"
CODE_INTERNAL = "50000"
CODE_FORBIDDEN = "40014"  # Bitget's "incorrect permissions": an admin route on a venue without allow_admin

#: HTTP status of each error code (the engine's codes are all 400)
HTTP_STATUS = {CODE_BAD_KEY: 401, CODE_BAD_SIGN: 401, CODE_RATE: 429, CODE_NOT_FOUND: 404, CODE_INTERNAL: 500,
               CODE_FORBIDDEN: 403}

#: Counter names of ``RestApi.stats`` / ``RestServer.stats()``
STAT_NAMES = ("requests", "orders_placed", "orders_rejected", "fills", "cancels", "bad_signatures",
              "stale_timestamps", "rate_limited", "bad_requests", "http_errors", "connections", "connections_total",
              "connections_refused", "slow_closed", "idle_closed", "evicted",
              # the REST server's accept path (pipeline.venue.rest)
              "accepted", "closed_at_accept", "accept_passes_full", "accept_errors")


# --------------------------------------------------------------------------------------------
# The API


def envelope(code: str, msg: str, request_ms: int, data=None) -> bytes:
    """An answer's JSON body: ``{"code","msg","requestTime","data"}``."""
    return orjson.dumps({"code": code, "msg": msg, "requestTime": request_ms, "data": data})


class RestApi:
    """Authenticates, rate-limits and routes one request to the ``OrderEngine`` (see the module
    docstring).

    ``credentials``: the one key the venue accepts; ``now_ms``: the venue's wall clock (ms since the
    epoch) for the timestamp window and ``requestTime``; ``mono_ns``: monotonic ns for the rate
    limit; ``log``: an ``EventLog``-like object (``warning(event, **fields)``) for rejections, or None;
    ``allow_admin``: serve the admin route (adjust-position) instead of refusing it (403 "40014");
    ``rate_limit_per_s``: place-order requests a second per key, every other route's documented
    rate scaled alike (``pipeline.venue.limits``); ``public``: the public routes' ``PublicMarket``
    (default: one over the engine's rules and book, ``public``; the venue server must feed it its
    trades: ``add_market_listener(api.public)``).
    """

    def __init__(self, engine: OrderEngine, credentials: Credentials, *, now_ms: Callable[[], int] | None = None,
                 mono_ns: Callable[[], int] | None = None, recv_window_ms: int = 30_000,
                 rate_limit_per_s: float = 10.0, log=None, allow_admin: bool = False,
                 perps: dict[str, str] | None = None, public: PublicMarket | None = None) -> None:
        """Raises:
        VenueError: recv_window_ms not positive, rate_limit_per_s not positive.
        """
        if recv_window_ms <= 0:
            raise VenueError(f"recv_window_ms must be > 0, got {recv_window_ms}")
        self.engine = engine
        self._creds = credentials
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._mono_ns = mono_ns or time.monotonic_ns
        self.recv_window_ms = int(recv_window_ms)
        if not rate_limit_per_s > 0:
            raise VenueError(f"rate_limit_per_s must be > 0, got {rate_limit_per_s}")
        self.limits = RouteLimits(rate_limit_per_s / PLACE_ORDER_PER_S)
        fees = engine.fees
        self.public = public if public is not None else PublicMarket(
            engine.rules, engine.book_levels, self._now_ms,
            None if fees is None else (Decimal(repr(fees.maker_bps)) / 10_000, Decimal(repr(fees.taker_bps)) / 10_000),
            perps=perps)
        self.log = log
        self.allow_admin = bool(allow_admin)
        self.mix = mix_api.MixRoutes(engine, perps or {})  # perps: symbol -> margin coin (mix routes)
        self._coins = []  # (base coin, symbol) of the served USDT-quoted symbols (others: not in assets)
        for sym in engine.rules:
            if sym in self.mix.perps:  # a perpetual's position is not a spot balance
                continue
            with suppress(ValueError):
                self._coins.append((base_coin(sym), sym))
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        #: whether the last request ``handle`` answered was signed with the venue's key
        self.authenticated = False
        #: path -> the route's handler: the body (POST) or the query (GET) in, the answer's data out
        #: (raises OrderRejected)
        self._handlers: dict[str, Callable[[dict], object]] = {
            PLACE: self._place, CANCEL: self._cancel, CANCEL_SYMBOL: self._cancel_symbol,
            BATCH_PLACE: self._batch_place, BATCH_CANCEL: self._batch_cancel,
            ADJUST_POSITION: self._adjust_position, ORDER_INFO: self._order_info, UNFILLED: self._unfilled,
            FILLS: self._fills, ACCOUNT_INFO: self._account_info, ASSETS: self._assets, **self.mix.handlers}

    def now_ms(self) -> int:
        """The venue's wall clock, ms since the epoch (an answer's ``requestTime``)."""
        return self._now_ms()

    def counters(self) -> dict[str, int]:
        """The counters, the engine's included (a copy; with its ``book_checks``: orders_valid,
        orders_invalid)."""
        out = dict(self.stats)
        out.update(self.engine.counters)
        out.update(self.engine.book_checks)
        return out

    def _error(self, code: str, msg: str, now: int, req: HttpRequest | None, status: int | None = None):
        self.stats["http_errors"] += 1
        if self.log is not None:
            self.log.warning("rest_rejected", code=code, msg=msg, method=req.method if req else "",
                             path=self._loggable(req.path) if req else "")
        return (status or HTTP_STATUS.get(code, 400)), envelope(code, msg, now)

    def _loggable(self, path: str) -> str:
        """A request's path as it may be logged: no query, and none of the key's three secrets, should
        a client have put one there (``pipeline.runtime.redact``)."""
        c = self._creds
        return redact.without(redact.target(path, 100), (c.api_key, c.secret, c.passphrase))

    def handle(self, req: HttpRequest) -> tuple[int, bytes]:
        """The answer to one request: (HTTP status, JSON body). Never raises (an engine bug is a 500)."""
        now = int(self._now_ms())
        self.stats["requests"] += 1
        self.authenticated = False
        try:
            return self._route(req, now)
        except Exception as exc:  # a bug: answered, logged, never a crash of the server
            if self.log is not None:
                self.log.error("rest_internal_error", error=type(exc).__name__, path=self._loggable(req.path))
            self.stats["http_errors"] += 1
            return 500, envelope(CODE_INTERNAL, "internal error", now)

    def _route(self, req: HttpRequest, now: int) -> tuple[int, bytes]:
        method = ROUTES.get(req.path)
        if method is None:
            return self._error(CODE_NOT_FOUND, "request URL not found", now, req)
        if req.method != method:
            return self._error(CODE_BAD_REQUEST, f"{req.path} takes {method}", now, req, status=405)
        public = req.path in PUBLIC_ROUTES
        if not public:
            refused = self._check_auth(req, now)
            if refused is not None:
                return refused
            self.authenticated = True
        if not self.limits.allow(req.path, PUBLIC_KEY if public else req.headers["access-key"], self._mono_ns()):
            self.stats["rate_limited"] += 1
            return self._error(CODE_RATE, "Too Many Requests", now, req)
        try:
            args = _json_body(req.body) if method == "POST" else _query(req.query)
            data = self.public.answer(req.path, args) if public else self._handlers[req.path](args)
        except OrderRejected as exc:
            if exc.code in MALFORMED_CODES:
                self.stats["bad_requests"] += 1
            if req.path == PLACE and exc.code in MALFORMED_CODES and not isinstance(exc, _EngineRejected):
                self.engine.counters["orders_rejected"] += 1  # the engine never saw it
            return self._error(exc.code, exc.msg, now, req)
        return 200, envelope(CODE_OK, "success", now, data)

    def _check_auth(self, req: HttpRequest, now: int) -> tuple[int, bytes] | None:
        """None when the request is signed with the venue's key within the time window, else the
        error answer (counted: bad_signatures, stale_timestamps or bad_requests)."""
        h = req.headers
        key, sig, ts, pp = (h.get("access-key"), h.get("access-sign"), h.get("access-timestamp"),
                            h.get("access-passphrase"))
        if not (key and sig and ts and pp):
            self.stats["bad_signatures"] += 1
            return self._error(CODE_BAD_REQUEST, "ACCESS-KEY, ACCESS-SIGN, ACCESS-TIMESTAMP and ACCESS-PASSPHRASE "
                                                 "are required", now, req)
        creds = self._creds
        if not (_same(key, creds.api_key) and _same(pp, creds.passphrase)):
            self.stats["bad_signatures"] += 1
            return self._error(CODE_BAD_KEY, "unknown ACCESS-KEY or wrong passphrase", now, req)
        if not (ts.isascii() and ts.isdigit() and len(ts) <= 16) or abs(int(ts) - now) > self.recv_window_ms:
            self.stats["stale_timestamps"] += 1
            return self._error(CODE_STALE, f"ACCESS-TIMESTAMP is more than {self.recv_window_ms} ms away from the "
                                           f"venue's clock ({now})", now, req)
        try:
            ok = verify(creds.secret, sig, ts, req.method, req.path, req.query, req.body)
        except UnicodeDecodeError:
            self.stats["bad_requests"] += 1
            return self._error(CODE_BAD_REQUEST, "the body is not UTF-8", now, req)
        if not ok:
            self.stats["bad_signatures"] += 1
            return self._error(CODE_BAD_SIGN, "signature mismatch", now, req)
        return None

    def verify_login(self, arg) -> tuple[str, str] | None:
        """A private WebSocket login's ``args[0]`` (apiKey, passphrase, timestamp in s, sign: base64
        HMAC-SHA256 of ``timestamp + "GET" + "/user/verify"``, the exchange's scheme) checked against
        the venue's key and clock (the REST window): None when it holds, else the exchange's (code,
        msg): 30016 not an object of strings, 30011 the key, 30012 the passphrase, 30013 / 30014 a
        malformed / stale timestamp, 30015 the signature. Counted like the REST checks."""
        if not isinstance(arg, dict) or not all(isinstance(arg.get(k), str) and arg.get(k)
                                                for k in ("apiKey", "passphrase", "timestamp", "sign")):
            self.stats["bad_requests"] += 1
            return "30016", "Param error"
        creds, ts = self._creds, arg["timestamp"]
        if not _same(arg["apiKey"], creds.api_key):
            self.stats["bad_signatures"] += 1
            return "30011", "Invalid ACCESS_KEY"
        if not _same(arg["passphrase"], creds.passphrase):
            self.stats["bad_signatures"] += 1
            return "30012", "Invalid ACCESS_PASSPHRASE"
        if not (ts.isascii() and ts.isdigit() and len(ts) <= 13):
            self.stats["stale_timestamps"] += 1
            return "30013", "Invalid ACCESS_TIMESTAMP"
        if abs(int(ts) * 1000 - int(self._now_ms())) > self.recv_window_ms:
            self.stats["stale_timestamps"] += 1
            return "30014", "Request timestamp expired"
        if not verify(creds.secret, arg["sign"], ts, "GET", "/user/verify"):
            self.stats["bad_signatures"] += 1
            return "30015", "Invalid sign"
        return None

    # -- POST routes (a JSON object body) -----------------------------------------------------

    def _place(self, body: dict) -> dict:
        try:
            o = self.engine.place(body)
        except OrderRejected as exc:
            raise _EngineRejected(exc.code, exc.msg) from None
        return {"orderId": str(o.order_id), "clientOid": o.client_oid}

    def _cancel(self, body: dict) -> dict:
        o = self.engine.cancel(_body_symbol(body), body.get("orderId"), body.get("clientOid"))
        return {"orderId": str(o.order_id), "clientOid": o.client_oid}

    def _batch_place(self, body: dict) -> dict:
        placed, refused = place_batch(self.engine, body.get("symbol"), body.get("orderList"))
        return _batch_answer(placed, refused)

    def _batch_cancel(self, body: dict) -> dict:
        done, refused = cancel_batch(self.engine, body.get("symbol"), body.get("orderList"))
        return _batch_answer(done, refused)

    def _cancel_symbol(self, body: dict) -> dict:
        symbol = _body_symbol(body)
        cancelled = self.engine.cancel_symbol(symbol)
        return {"symbol": symbol, "cancelled": [{"orderId": str(o.order_id), "clientOid": o.client_oid}
                                                for o in cancelled]}

    def _adjust_position(self, body: dict) -> dict:
        """The admin route (refused with 40014 unless ``allow_admin``).

        Raises:
            OrderRejected: 40014 admin routes off; 40019 / 40020 / 40034 a missing or bad field.
        """
        if not self.allow_admin:
            raise OrderRejected(CODE_FORBIDDEN, "admin routes are off at this venue (venue param allow_admin)")
        symbol = _body_symbol(body)
        delta = body.get("delta")
        if not isinstance(delta, str):
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter delta error: a decimal string")
        pos = self.engine.adjust_position(symbol, delta)
        if self.log is not None:
            self.log.warning("paper_position_adjusted", symbol=symbol, delta=delta[:40], position=fmt(pos))
        return {"symbol": symbol, "position": fmt(pos)}

    # -- GET routes (the query's parameters) --------------------------------------------------

    def _order_info(self, q: dict) -> list[dict]:
        return [self.engine.order(q.get("orderId"), q.get("clientOid")).to_json()]

    def _unfilled(self, q: dict) -> list[dict]:
        return [o.to_json() for o in self.engine.open_orders(q.get("symbol") or None)]

    def _account_info(self, q: dict) -> dict:
        eng = self.engine
        return {"userId": eng.account_id, "inviterId": "", "channelCode": "", "channel": "",
                "regisTime": str(eng.created_ms)}

    def _fills(self, q: dict) -> list[dict]:
        eng = self.engine
        limit = q.get("limit")
        if limit is not None:
            if not (limit.isascii() and limit.isdigit() and 0 < int(limit) <= 1_000_000):
                raise OrderRejected(CODE_PARAM_ERROR, "Parameter limit error: a positive integer")
            limit = int(limit)
        symbol = q.get("symbol") or None
        if symbol is not None:
            eng.check_symbol(symbol)
        return [f.to_json() for f in eng.fills_since(symbol, q.get("orderId") or None,
                                                     q.get("idGreaterThan") or None, limit)]

    def balances(self, coin: str | None = None) -> list[dict]:
        """The assets route's data (``coin`` only, when given)."""
        return self._assets({} if coin is None else {"coin": coin})

    def _assets(self, q: dict) -> list[dict]:
        """The assets route's data (see the module docstring)."""
        coin = q.get("coin") or None
        eng = self.engine
        rows = [(c, eng.position(sym), eng.balance_u_ms(sym)) for c, sym in self._coins]
        rows.append((QUOTE_COIN, eng.cash(), eng.balance_u_ms(QUOTE_COIN)))
        want = coin.upper() if coin is not None else None
        return [{"coin": c, "available": fmt(avail), "frozen": "0", "locked": "0", "limitAvailable": "0",
                 "uTime": str(u)} for c, avail, u in rows if want is None or c == want]


class _EngineRejected(OrderRejected):
    """A place-order refusal already counted by the engine."""


def _batch_answer(done: list, refused: list) -> dict:
    """A batch route's data: the orders it placed / cancelled, and the entries it refused."""
    return {"successList": [{"orderId": str(o.order_id), "clientOid": o.client_oid} for o in done],
            "failureList": [{"orderId": str(e.get("orderId") or ""), "clientOid": str(e.get("clientOid") or ""),
                             "errorMsg": exc.msg, "errorCode": exc.code} for e, exc in refused]}


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def _body_symbol(body: dict) -> str:
    symbol = body.get("symbol")
    if symbol is None or symbol == "":
        raise OrderRejected(CODE_PARAM_EMPTY, "Parameter symbol cannot be empty")
    if not isinstance(symbol, str):
        raise OrderRejected(CODE_PARAM_ERROR, "Parameter symbol error: a string")
    return symbol


def _json_body(raw: bytes) -> dict:
    if not raw:
        raise OrderRejected(CODE_BAD_REQUEST, "a JSON object body is required")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise OrderRejected(CODE_BAD_REQUEST, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise OrderRejected(CODE_BAD_REQUEST, "the body must be a JSON object")
    return body


def _query(text: str) -> dict:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise OrderRejected(CODE_BAD_REQUEST, "malformed query string") from None
    out: dict[str, str] = {}
    for k, v in pairs:
        if k in out:
            raise OrderRejected(CODE_BAD_REQUEST, f"duplicate query parameter {k[:32]!r}")
        out[k] = v
    return out
