"""The paper venue's order REST API: Bitget v2 spot trade endpoints over HTTP/1.1 on 127.0.0.1.

Three layers, the first two sans-I/O:

- ``HttpParser``: bytes in, ``HttpRequest``s out (request line, headers, a ``Content-Length``
  body; keep-alive by HTTP/1.1 rules). Bounded: the request line and headers at most
  ``MAX_HEADER_BYTES``, a body at most ``MAX_BODY_BYTES``. Malformed input raises ``HttpError``
  (answered with its status: 400 malformed, a bare LF / bare CR line ending (at once, before the
  head is complete), or a request cut short by the peer's end of file; 413 body too large, 431 head
  too large, 501 chunked body or another HTTP version; code "40001"; then the connection is closed:
  its framing is lost).
- ``RestApi``: one request in, ``(http_status, json_bytes)`` out. Checks, in order: known route
  (404 "40404"), the auth headers (400 "40001" missing), ACCESS-KEY and ACCESS-PASSPHRASE (401
  "40006"), ACCESS-TIMESTAMP within ``recv_window_ms`` of the venue's wall clock (400 "40008"),
  ACCESS-SIGN (401 "40009", ``pipeline.trading.bitget.signing.verify`` over the exact path, query text and
  body bytes received), the per-key rate limit for place / cancel requests (429 "429", a token
  bucket of ``rate_limit_per_s`` tokens refilled continuously), then the JSON body / query and the
  ``OrderEngine`` (``pipeline.venue.orders``). Every answer is
  ``{"code","msg","requestTime","data"}``; HTTP 200 with code "00000", or the error's status.
- ``RestServer``: ``asyncio.start_server`` on 127.0.0.1 (never another interface), one task per
  connection, requests answered in order. Per-connection deadlines (slowloris): a request's head
  must be complete ``header_timeout_s`` after its first byte, its body ``body_timeout_s`` after its
  head (else 408 and close), an answer must be taken by the peer within ``write_timeout_s``, and a
  connection idle between requests is closed after ``idle_timeout_s``. At most ``max_connections``
  at once: a new one beyond that evicts the most suspect existing one (see ``RestServer``), and is
  refused (503) only when every connection is processing a request. ``latency_ms`` > 0 delays each
  place / cancel request's processing (an artificial venue latency; requests of one connection
  stay in order). Runs as a ``VenueThread`` ``extra`` service (``start`` / ``stop`` /
  ``pump_task``) on the market server's loop, so the engine and the market hook share one thread.

Endpoints (all need the signed headers)::

    POST /api/v2/spot/trade/place-order          POST /api/v2/spot/trade/cancel-order
    POST /api/v2/spot/trade/cancel-symbol-order  GET  /api/v2/spot/trade/orderInfo
    GET  /api/v2/spot/trade/unfilled-orders      GET  /api/v2/spot/trade/fills
    GET  /api/v2/spot/account/info               GET  /api/v2/spot/account/assets[?coin=BTC]
    POST /api/v2/paper/adjust-position           (admin, paper only: 403 "40014" unless allow_admin)

Account routes (the account persists across venue restarts: ``pipeline.venue.account``)::

    info    data {"userId": <account id>, "inviterId": "", "channelCode": "", "channel": "",
                  "regisTime": <account created ms>}          (strings; a reset venue: another userId)
    assets  data [{"coin", "available", "frozen": "0", "locked": "0", "limitAvailable": "0",
                   "uTime": <ms of the coin's last change>}, ...]
            one per base coin of the served USDT-quoted symbols (``base_coin``: BTCUSDT -> BTC;
            a symbol of another quote is left out, and out of the cash), in symbol order, then
            USDT; ``coin`` (case-insensitive) keeps that coin only ([] when the account has none).
            A base coin's available is the account's signed position in its symbol; USDT's is the
            cash from fills, -sum(signed price * size) (no fees). Both may be negative: the paper
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

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from typing import NamedTuple
from urllib.parse import parse_qsl

import orjson

from pipeline.trading.bitget.protocol import QUOTE_COIN, base_coin
from pipeline.trading.bitget.signing import Credentials, verify
from pipeline.venue.errors import VenueError
from pipeline.venue.orders import CODE_BAD_REQUEST, OrderEngine, OrderRejected, fmt

HOST = "127.0.0.1"
MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
MAX_HEADERS = 64
READ_CHUNK_BYTES = 64 * 1024

PREFIX = "/api/v2/spot/trade/"
PLACE = PREFIX + "place-order"
CANCEL = PREFIX + "cancel-order"
CANCEL_SYMBOL = PREFIX + "cancel-symbol-order"
ORDER_INFO = PREFIX + "orderInfo"
UNFILLED = PREFIX + "unfilled-orders"
FILLS = PREFIX + "fills"
ACCOUNT_INFO = "/api/v2/spot/account/info"
ASSETS = "/api/v2/spot/account/assets"
ADJUST_POSITION = "/api/v2/paper/adjust-position"  # admin: only with allow_admin
ROUTES = {PLACE: "POST", CANCEL: "POST", CANCEL_SYMBOL: "POST", ORDER_INFO: "GET", UNFILLED: "GET", FILLS: "GET",
          ACCOUNT_INFO: "GET", ASSETS: "GET", ADJUST_POSITION: "POST"}
RATE_LIMITED = frozenset({PLACE, CANCEL, CANCEL_SYMBOL})

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
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed",
           408: "Request Timeout", 413: "Payload Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
           503: "Service Unavailable"}

#: Counter names of ``RestApi.stats`` / ``RestServer.stats()``
STAT_NAMES = ("requests", "orders_placed", "orders_rejected", "fills", "cancels", "bad_signatures",
              "stale_timestamps", "rate_limited", "bad_requests", "http_errors", "connections", "connections_total",
              "connections_refused", "slow_closed", "idle_closed", "evicted")


# --------------------------------------------------------------------------------------------
# HTTP/1.1 (sans-I/O)


class HttpError(Exception):
    """Input that is not an HTTP/1.1 request this server takes: ``status`` (400, 413, 431, 501) and
    a short ``msg``. The connection cannot be reused after it."""

    def __init__(self, status: int, msg: str) -> None:
        super().__init__(f"{status} {msg}")
        self.status = status
        self.msg = msg


class HttpRequest(NamedTuple):
    method: str  # upper case
    path: str  # the target before "?"
    query: str  # the exact text after "?" ("" when none)
    headers: dict  # lower-cased names -> values (latin-1 decoded, stripped)
    body: bytes
    keep_alive: bool


_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HttpParser:
    """Incremental request parser for one connection: ``feed(data)`` returns the requests completed
    by ``data`` (possibly several: pipelining), keeping a partial one for the next call.

    A bare LF (an LF not after a CR) or a bare CR (a CR not before an LF) in the request line or
    headers fails the parser as soon as the byte is fed, not only once the head is complete (a peer
    that ends its lines with LF alone would otherwise wait for a CRLF CRLF that never comes).

    Raises (from ``feed``):
        HttpError: 400 malformed request line / header / Content-Length, a bare LF or bare CR line
            ending, a target not starting with "/"; 431 request line and headers over ``max_header_bytes``;
            413 a body over ``max_body_bytes``; 501 Transfer-Encoding (chunked bodies) or an HTTP
            version other than 1.0 / 1.1. Requests completed before the error in the same ``feed``
            are returned first (``failed`` is then set, and the next ``feed`` raises); after an
            error the parser stays failed.
    """

    def __init__(self, max_header_bytes: int = MAX_HEADER_BYTES, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self._buf = bytearray()
        self._head: tuple | None = None  # parsed head waiting for its body: (method, path, query, headers, ka, n)
        self._failed: HttpError | None = None
        self._scanned = 0  # bytes of a partial head already checked for bare LF / CR

    def feed(self, data: bytes) -> list[HttpRequest]:
        if self._failed is not None:
            raise self._failed
        self._buf += data
        out = []
        try:
            while True:
                if self._head is None:
                    end = self._buf.find(b"\r\n\r\n")
                    if end < 0:
                        self._check_line_endings()
                        if len(self._buf) > self.max_header_bytes:
                            raise HttpError(431, "request line and headers too large")
                        break
                    if end + 4 > self.max_header_bytes:
                        raise HttpError(431, "request line and headers too large")
                    head = bytes(self._buf[:end])
                    del self._buf[: end + 4]
                    self._scanned = 0
                    if not head:  # an empty line before a request line (RFC 9112 2.2): ignored
                        continue
                    self._head = self._parse_head(head)
                n = self._head[5]
                if len(self._buf) < n:
                    break
                body = bytes(self._buf[:n])
                del self._buf[:n]
                self._scanned = 0
                method, path, query, headers, ka, _ = self._head
                self._head = None
                out.append(HttpRequest(method, path, query, headers, body, ka))
        except HttpError as exc:
            self._failed = exc
            if not out:
                raise
        return out  # requests completed before an error: answered first; ``failed`` then says why it stopped

    @property
    def failed(self) -> HttpError | None:
        """The error that stopped this parser (the next ``feed`` raises it), or None."""
        return self._failed

    def feed_eof(self) -> None:
        """The peer ended its side of the connection (end of file): a partial request can never complete.

        Raises:
            HttpError: 400 when part of a request is buffered (a head without its blank line, or a body
                shorter than its Content-Length); the parser is then failed. The error that already
                failed the parser, if any.
        """
        if self._failed is not None:
            raise self._failed
        if self._head is not None:
            self._failed = HttpError(400, f"body shorter than its Content-Length ({self._head[5]})")
        elif self._buf:
            self._failed = HttpError(400, "request head cut short by end of file")
        else:
            return
        raise self._failed

    @property
    def idle(self) -> bool:
        """No partial request buffered."""
        return self._head is None and not self._buf

    @property
    def awaiting_body(self) -> bool:
        """A request's head is complete and its body is not."""
        return self._head is not None

    def _check_line_endings(self) -> None:
        """Check the partial head's new bytes (each byte once; a CR at the very end waits for the next).

        Raises:
            HttpError: 400 on a bare LF (not after a CR) or a bare CR (not before an LF).
        """
        buf = self._buf
        i = buf.find(b"\n", self._scanned)
        while i >= 0:
            if i == 0 or buf[i - 1] != 0x0D:
                raise HttpError(400, "bad line ending (bare LF)")
            i = buf.find(b"\n", i + 1)
        i = buf.find(b"\r", self._scanned)
        while 0 <= i < len(buf) - 1:
            if buf[i + 1] != 0x0A:
                raise HttpError(400, "bad line ending (bare CR)")
            i = buf.find(b"\r", i + 1)
        self._scanned = len(buf) - 1 if buf.endswith(b"\r") else len(buf)

    def _parse_head(self, head: bytes) -> tuple:
        lines = head.split(b"\r\n")
        if any(b"\n" in ln or b"\r" in ln for ln in lines):
            raise HttpError(400, "bad line ending")
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            raise HttpError(400, "malformed request line")
        method, target, version = parts
        if not method or not all(c in _TOKEN for c in method):
            raise HttpError(400, "malformed method")
        if version not in (b"HTTP/1.1", b"HTTP/1.0"):
            if version.startswith(b"HTTP/"):
                raise HttpError(501, "HTTP version not supported")
            raise HttpError(400, "malformed request line")
        if not target.startswith(b"/") or any(c <= 0x20 or c >= 0x7F for c in target):
            raise HttpError(400, "malformed request target")
        if len(lines) - 1 > MAX_HEADERS:
            raise HttpError(431, "too many headers")
        headers: dict[str, str] = {}
        for ln in lines[1:]:
            name, sep, value = ln.partition(b":")
            if not sep or not name or not all(c in _TOKEN for c in name):
                raise HttpError(400, "malformed header line")
            key = name.decode("ascii").lower()
            val = value.strip(b" \t").decode("latin-1")
            if key in headers:
                if key in ("content-length", "host", "transfer-encoding"):
                    raise HttpError(400, f"duplicate {key} header")
                headers[key] = headers[key] + ", " + val
            else:
                headers[key] = val
        if "transfer-encoding" in headers:
            raise HttpError(501, "Transfer-Encoding is not supported; send a Content-Length body")
        cl = headers.get("content-length", "0")
        if not (cl.isascii() and cl.isdigit()) or len(cl) > 12:
            raise HttpError(400, "malformed Content-Length")
        n = int(cl)
        if n > self.max_body_bytes:
            raise HttpError(413, f"body over {self.max_body_bytes} bytes")
        conn = headers.get("connection", "").lower()
        ka = ("close" not in conn) if version == b"HTTP/1.1" else ("keep-alive" in conn)
        t = target.decode("ascii")
        path, _, query = t.partition("?")
        return method.decode("ascii").upper(), path, query, headers, ka, n


def http_response(status: int, body: bytes, keep_alive: bool, extra_headers: tuple = ()) -> bytes:
    """A complete HTTP/1.1 response with a JSON body."""
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: " + ("keep-alive" if keep_alive else "close"), *extra_headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


# --------------------------------------------------------------------------------------------
# Rate limit (sans-I/O)


class TokenBucket:
    """Per-key token buckets: ``rate_per_s`` tokens a second, at most ``burst`` (default: one
    second's worth) held. ``allow(key, now_ns)`` takes one token, False when there is none."""

    def __init__(self, rate_per_s: float, burst: float | None = None) -> None:
        """Raises:
        VenueError: a rate that is not positive.
        """
        if not rate_per_s > 0:
            raise VenueError(f"rate_limit_per_s must be > 0, got {rate_per_s}")
        self.rate_per_ns = float(rate_per_s) / 1e9
        self.burst = float(burst if burst is not None else max(rate_per_s, 1.0))
        self._state: dict[str, tuple[float, int]] = {}

    def allow(self, key: str, now_ns: int) -> bool:
        tokens, last = self._state.get(key, (self.burst, now_ns))
        tokens = min(self.burst, tokens + (now_ns - last) * self.rate_per_ns)
        if tokens >= 1.0:
            self._state[key] = (tokens - 1.0, now_ns)
            return True
        self._state[key] = (tokens, now_ns)
        return False


# --------------------------------------------------------------------------------------------
# The API (sans-I/O)


def envelope(code: str, msg: str, request_ms: int, data=None) -> bytes:
    return orjson.dumps({"code": code, "msg": msg, "requestTime": request_ms, "data": data})


class RestApi:
    """Authenticates, rate-limits and routes one request to the ``OrderEngine``.

    ``credentials``: the one key the venue accepts; ``now_ms``: the venue's wall clock (ms since the
    epoch) for the timestamp window and ``requestTime``; ``mono_ns``: monotonic ns for the rate
    limit; ``log``: an ``EventLog``-like object (``warning(event, **fields)``) for rejections, or None;
    ``allow_admin``: serve the admin route (adjust-position) instead of refusing it (403 "40014").
    """

    def __init__(self, engine: OrderEngine, credentials: Credentials, *, now_ms: Callable[[], int] | None = None,
                 mono_ns: Callable[[], int] | None = None, recv_window_ms: int = 30_000,
                 rate_limit_per_s: float = 10.0, log=None, allow_admin: bool = False) -> None:
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
        self.limiter = TokenBucket(rate_limit_per_s)
        self.log = log
        self.allow_admin = bool(allow_admin)
        self._coins = []  # (base coin, symbol) of the served USDT-quoted symbols (others: not in assets)
        for sym in engine.rules:
            with suppress(ValueError):
                self._coins.append((base_coin(sym), sym))
        self.stats = dict.fromkeys(STAT_NAMES, 0)

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
                             path=(req.path[:100] if req else ""))
        return (status or HTTP_STATUS.get(code, 400)), envelope(code, msg, now)

    def handle(self, req: HttpRequest) -> tuple[int, bytes]:
        """The answer to one request: (HTTP status, JSON body). Never raises (an engine bug is a 500)."""
        now = int(self._now_ms())
        self.stats["requests"] += 1
        try:
            return self._handle(req, now)
        except Exception as exc:  # a bug: answered, logged, never a crash of the server
            if self.log is not None:
                self.log.error("rest_internal_error", error=type(exc).__name__, path=req.path[:100])
            self.stats["http_errors"] += 1
            return 500, envelope(CODE_INTERNAL, "internal error", now)

    def _handle(self, req: HttpRequest, now: int) -> tuple[int, bytes]:
        method = ROUTES.get(req.path)
        if method is None:
            return self._error(CODE_NOT_FOUND, "request URL not found", now, req)
        if req.method != method:
            return self._error(CODE_BAD_REQUEST, f"{req.path} takes {method}", now, req, status=405)
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
        if req.path in RATE_LIMITED and not self.limiter.allow(key, self._mono_ns()):
            self.stats["rate_limited"] += 1
            return self._error(CODE_RATE, "too many requests", now, req)
        try:
            if method == "POST":
                body = _json_body(req.body)
                data = self._post(req.path, body)
            else:
                data = self._get(req.path, _query(req.query))
        except OrderRejected as exc:
            if exc.code == CODE_BAD_REQUEST:
                self.stats["bad_requests"] += 1
            if req.path == PLACE and exc.code == CODE_BAD_REQUEST and not isinstance(exc, _EngineRejected):
                self.engine.counters["orders_rejected"] += 1  # the engine never saw it
            return self._error(exc.code, exc.msg, now, req)
        return 200, envelope(CODE_OK, "success", now, data)

    def _post(self, path: str, body: dict):
        eng = self.engine
        if path == ADJUST_POSITION and not self.allow_admin:
            raise OrderRejected(CODE_FORBIDDEN, "admin routes are off at this venue (venue param allow_admin)")
        if path == PLACE:
            try:
                o = eng.place(body)
            except OrderRejected as exc:
                raise _EngineRejected(exc.code, exc.msg) from None
            return {"orderId": str(o.order_id), "clientOid": o.client_oid}
        symbol = body.get("symbol")
        if not isinstance(symbol, str) or not symbol:
            raise OrderRejected(CODE_BAD_REQUEST, "symbol is missing")
        if path == CANCEL:
            o = eng.cancel(symbol, body.get("orderId"), body.get("clientOid"))
            return {"orderId": str(o.order_id), "clientOid": o.client_oid}
        if path == CANCEL_SYMBOL:
            cancelled = eng.cancel_symbol(symbol)
            return {"symbol": symbol, "cancelled": [{"orderId": str(o.order_id), "clientOid": o.client_oid}
                                                    for o in cancelled]}
        return self._adjust(symbol, body.get("delta"))

    def _adjust(self, symbol: str, delta) -> dict:
        """The admin route (``ADJUST_POSITION``; ``_post`` refused it with 40014 unless ``allow_admin``).

        Raises:
            OrderRejected: 40034 / 40001 from ``adjust_position``.
        """
        if not isinstance(delta, str):
            raise OrderRejected(CODE_BAD_REQUEST, "delta must be a decimal string")
        pos = self.engine.adjust_position(symbol, delta)
        if self.log is not None:
            self.log.warning("paper_position_adjusted", symbol=symbol, delta=delta[:40], position=fmt(pos))
        return {"symbol": symbol, "position": fmt(pos)}

    def _get(self, path: str, q: dict):
        eng = self.engine
        if path == ORDER_INFO:
            return [eng.order(q.get("orderId"), q.get("clientOid")).to_json()]
        if path == UNFILLED:
            return [o.to_json() for o in eng.open_orders(q.get("symbol") or None)]
        if path == ACCOUNT_INFO:
            return {"userId": eng.account_id, "inviterId": "", "channelCode": "", "channel": "",
                    "regisTime": str(eng.created_ms)}
        if path == ASSETS:
            return self._assets(q.get("coin") or None)
        limit = q.get("limit")
        if limit is not None:
            if not (limit.isascii() and limit.isdigit() and 0 < int(limit) <= 1_000_000):
                raise OrderRejected(CODE_BAD_REQUEST, "limit must be a positive integer")
            limit = int(limit)
        symbol = q.get("symbol") or None
        if symbol is not None:
            eng._check_symbol(symbol)
        return [f.to_json() for f in eng.fills_since(symbol, q.get("orderId") or None,
                                                     q.get("idGreaterThan") or None, limit)]

    def _assets(self, coin: str | None) -> list[dict]:
        """The assets route's data (see the module docstring)."""
        eng = self.engine
        rows = [(c, eng.position(sym), eng.balance_u_ms(sym)) for c, sym in self._coins]
        rows.append((QUOTE_COIN, eng.cash(), eng.balance_u_ms(QUOTE_COIN)))
        want = coin.upper() if coin is not None else None
        return [{"coin": c, "available": fmt(avail), "frozen": "0", "locked": "0", "limitAvailable": "0",
                 "uTime": str(u)} for c, avail, u in rows if want is None or c == want]


class _EngineRejected(OrderRejected):
    """A place-order refusal already counted by the engine."""


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


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


# --------------------------------------------------------------------------------------------
# The server (asyncio)


class _Conn:
    """One connection's state, for the deadlines and the choice of whom to evict at the cap."""

    __slots__ = ("writer", "since_s", "proven", "partial", "busy", "writing", "evicted")

    def __init__(self, writer: asyncio.StreamWriter, now_s: float) -> None:
        self.writer = writer
        self.since_s = now_s  # loop time the current phase began: idle wait, head, or body
        self.proven = False  # at least one complete request was answered
        self.partial = False  # bytes of an incomplete request are buffered
        self.busy = False  # complete requests are being processed (never evicted then)
        self.writing = False  # waiting for the peer to take an answer (drain)
        self.evicted = False

    @property
    def suspect(self) -> bool:
        """Never completed a request, is in the middle of one, or is not reading its answers."""
        return not self.proven or self.partial or self.writing


class RestServer:
    """Serves a ``RestApi`` over HTTP/1.1 on 127.0.0.1 (see the module docstring).

    Deadlines, per connection (loop time; each one closes the connection, counted in the API's
    stats): the head of a request must be complete ``header_timeout_s`` after its first byte arrived
    and its body ``body_timeout_s`` after the head (else a 408 answer, then close: ``slow_closed``);
    a connection with nothing buffered is closed ``idle_timeout_s`` after its last answer or its
    accept (``idle_closed``); a write the peer does not take within ``write_timeout_s`` closes the
    connection (``slow_closed``). A peer's end of file in the middle of a request is answered 400 at
    once (``bad_requests``). A complete request resets the clock, so a client sending whole requests
    is never cut off; only one that dribbles a request or sits idle is.

    The cap (``max_connections``): a connection accepted beyond it evicts one existing connection
    that is not processing a request, choosing first among the *suspect* ones (never completed a
    request, partway through one, or not reading its answers) the one whose current phase began
    earliest, and only when there is none, the proven idle one idle the longest (``evicted``; the
    evicted socket is reset). So a slowloris holding every slot only ever displaces its own
    connections, while a well-behaved client (a complete request at once, like the order sender's)
    is accepted at once and its keep-alive connection is kept. A new connection is refused (503,
    ``connections_refused``) only when every connection is processing a request (``latency_ms``).
    """

    def __init__(self, api: RestApi, *, port: int = 0, latency_ms: float = 0.0, idle_timeout_s: float = 15.0,
                 header_timeout_s: float = 2.0, body_timeout_s: float = 2.0, write_timeout_s: float = 5.0,
                 max_connections: int = 64, log=None) -> None:
        """Raises:
        VenueError: a port outside 0..65535, a latency outside 0..60000 ms, max_connections < 1, an
            idle, header, body or write timeout that is not a positive finite number of seconds.
        """
        if not 0 <= int(port) <= 65535:
            raise VenueError(f"rest_port must be in 0..65535, got {port}")
        if not 0.0 <= float(latency_ms) <= 60_000.0:
            raise VenueError(f"latency_ms must be in 0..60000, got {latency_ms}")
        if max_connections < 1:
            raise VenueError(f"max_connections must be >= 1, got {max_connections}")
        for name, value in (("idle_timeout_s", idle_timeout_s), ("header_timeout_s", header_timeout_s),
                            ("body_timeout_s", body_timeout_s), ("write_timeout_s", write_timeout_s)):
            if not 0.0 < float(value) < float("inf"):
                raise VenueError(f"{name} must be a positive number of seconds, got {value}")
        self.api = api
        self.requested_port = int(port)
        self.port = 0
        self.latency_s = float(latency_ms) / 1000.0
        self.idle_timeout_s = float(idle_timeout_s)
        self.header_timeout_s = float(header_timeout_s)
        self.body_timeout_s = float(body_timeout_s)
        self.write_timeout_s = float(write_timeout_s)
        self.max_connections = int(max_connections)
        self.log = log
        self._server: asyncio.base_events.Server | None = None
        self._pump_task: asyncio.Task | None = None
        self._conn_tasks: set[asyncio.Task] = set()  # every live connection task (stop awaits them)
        self._conns: dict[asyncio.Task, _Conn] = {}  # the connections counted against the cap

    async def start(self) -> int:
        """Bind 127.0.0.1:``port``; returns the bound port.

        Raises:
            OSError: the port cannot be bound.
        """
        self._server = await asyncio.start_server(self._handle, HOST, self.requested_port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        self._pump_task = asyncio.create_task(self._server.serve_forever(), name="venue-rest")
        return self.port

    async def stop(self) -> None:
        """Close the listening socket and every connection."""
        if self._server is not None:
            self._server.close()
        for t in list(self._conn_tasks):
            t.cancel()
        for t in list(self._conn_tasks):
            with suppress(asyncio.CancelledError, Exception):
                await t
        if self._pump_task is not None:
            self._pump_task.cancel()
            with suppress(asyncio.CancelledError):
                await self._pump_task

    @property
    def pump_task(self) -> asyncio.Task | None:
        return self._pump_task

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stats(self) -> dict[str, int]:
        """The API's and the engine's counters (a copy)."""
        return self.api.counters()

    def _evict_one(self) -> bool:
        """Reset the connection the class docstring says goes first; False when every one is busy."""
        victim_task, victim = None, None
        for t, c in self._conns.items():
            if c.busy:
                continue
            if victim is None or (not c.suspect, c.since_s) < (not victim.suspect, victim.since_s):
                victim_task, victim = t, c
        if victim is None:
            return False
        del self._conns[victim_task]
        victim.evicted = True
        self.api.stats["evicted"] += 1
        with suppress(Exception):
            victim.writer.transport.abort()
        return True

    def _write_error(self, writer: asyncio.StreamWriter, status: int, msg: str) -> None:
        writer.write(http_response(status, envelope(CODE_BAD_REQUEST, msg, self.api._now_ms()), False))

    def _bad_http(self, writer: asyncio.StreamWriter, exc: HttpError) -> None:
        st = self.api.stats
        st["bad_requests"] += 1
        st["http_errors"] += 1
        if self.log is not None:
            self.log.warning("rest_bad_http", status=exc.status, msg=exc.msg)
        self._write_error(writer, exc.status, exc.msg)

    async def _drain(self, writer: asyncio.StreamWriter, conn: _Conn) -> bool:
        """Wait until the peer has taken what was written; False (counted ``slow_closed``) when it
        did not within ``write_timeout_s``."""
        conn.writing = True
        try:
            await asyncio.wait_for(writer.drain(), self.write_timeout_s)
        except TimeoutError:
            self.api.stats["slow_closed"] += 1
            return False
        finally:
            conn.writing = False
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        st = self.api.stats
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if len(self._conns) >= self.max_connections and not self._evict_one():
            st["connections_refused"] += 1
            with suppress(Exception):
                writer.write(http_response(503, envelope("50000", "too many connections", self.api._now_ms()), False))
                writer.close()
            return
        conn = _Conn(writer, loop.time())
        self._conn_tasks.add(task)
        self._conns[task] = conn
        st["connections"] += 1
        st["connections_total"] += 1
        parser = HttpParser()
        abort = False
        try:
            while True:
                if parser.idle:
                    phase, limit_s = "idle", self.idle_timeout_s
                elif parser.awaiting_body:
                    phase, limit_s = "body", self.body_timeout_s
                else:
                    phase, limit_s = "head", self.header_timeout_s
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES),
                                                  max(0.0, conn.since_s + limit_s - loop.time()))
                except TimeoutError:
                    if phase == "idle":
                        st["idle_closed"] += 1
                    else:
                        st["slow_closed"] += 1
                        self._write_error(writer, 408, f"request {phase} not complete within {limit_s:g} s")
                        abort = not await self._drain(writer, conn)
                    break
                if conn.evicted:
                    break
                if not data:  # end of file: a partial request can never complete
                    try:
                        parser.feed_eof()
                    except HttpError as exc:
                        self._bad_http(writer, exc)
                        abort = not await self._drain(writer, conn)
                    break
                try:
                    reqs = parser.feed(data)
                except HttpError:
                    reqs = []
                now = loop.time()
                if reqs or phase != ("idle" if parser.idle else "body" if parser.awaiting_body else "head"):
                    conn.since_s = now  # a new phase (the first byte of a request, a head done) starts its clock
                conn.partial = not parser.idle
                close = False
                conn.busy = bool(reqs)
                for req in reqs:
                    if self.latency_s and req.path in RATE_LIMITED:
                        await asyncio.sleep(self.latency_s)
                    status, body = self.api.handle(req)
                    writer.write(http_response(status, body, req.keep_alive))
                    if not req.keep_alive:
                        close = True
                        break
                conn.busy = False
                exc = parser.failed
                if exc is not None and not close:
                    self._bad_http(writer, exc)
                    close = True
                if not await self._drain(writer, conn):
                    abort = True
                    break
                if reqs:
                    conn.proven = True
                    conn.since_s = loop.time()  # the idle wait (or a pipelined request's head) starts now
                if close:
                    break
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            # stop(): this task is a leaf and ends here; ending it normally keeps asyncio's (3.11)
            # client_connected_cb done-callback from logging the CancelledError as an error
            abort = True
        finally:
            self._conn_tasks.discard(task)
            self._conns.pop(task, None)
            st["connections"] -= 1
            if abort or conn.evicted:
                writer.transport.abort()
            else:
                writer.close()
                try:
                    await asyncio.wait_for(writer.wait_closed(), self.write_timeout_s)
                except TimeoutError:  # the peer does not take the last bytes: reset
                    writer.transport.abort()
                except Exception:  # noqa: BLE001 - a reset peer; the socket is closed either way
                    pass
