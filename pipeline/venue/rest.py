"""The paper venue's order REST API: Bitget v2 spot trade endpoints over HTTP/1.1 on 127.0.0.1.

Three layers, the first two sans-I/O:

- ``HttpParser``: bytes in, ``HttpRequest``s out (request line, headers, a ``Content-Length``
  body; keep-alive by HTTP/1.1 rules). Bounded: the request line and headers at most
  ``MAX_HEADER_BYTES``, a body at most ``MAX_BODY_BYTES``. Malformed input raises ``HttpError``
  (answered with its status: 400 malformed, 413 body too large, 431 head too large, 501 chunked
  body or another HTTP version; code "40001"; then the connection is closed: its framing is lost).
- ``RestApi``: one request in, ``(http_status, json_bytes)`` out. Checks, in order: known route
  (404 "40404"), the auth headers (400 "40001" missing), ACCESS-KEY and ACCESS-PASSPHRASE (401
  "40006"), ACCESS-TIMESTAMP within ``recv_window_ms`` of the venue's wall clock (400 "40008"),
  ACCESS-SIGN (401 "40009", ``pipeline.bitget.signing.verify`` over the exact path, query text and
  body bytes received), the per-key rate limit for place / cancel requests (429 "429", a token
  bucket of ``rate_limit_per_s`` tokens refilled continuously), then the JSON body / query and the
  ``OrderEngine`` (``pipeline.venue.orders``). Every answer is
  ``{"code","msg","requestTime","data"}``; HTTP 200 with code "00000", or the error's status.
- ``RestServer``: ``asyncio.start_server`` on 127.0.0.1 (never another interface), one task per
  connection, requests answered in order; idle connections are closed after ``idle_timeout_s``;
  at most ``max_connections`` at once (more are closed at once). ``latency_ms`` > 0 delays each
  place / cancel request's processing (an artificial venue latency; requests of one connection
  stay in order). Runs as a ``VenueThread`` ``extra`` service (``start`` / ``stop`` /
  ``pump_task``) on the market server's loop, so the engine and the market hook share one thread.

Endpoints (all need the signed headers)::

    POST /api/v2/spot/trade/place-order          POST /api/v2/spot/trade/cancel-order
    POST /api/v2/spot/trade/cancel-symbol-order  GET  /api/v2/spot/trade/orderInfo
    GET  /api/v2/spot/trade/unfilled-orders      GET  /api/v2/spot/trade/fills

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

from pipeline.bitget.signing import Credentials, verify
from pipeline.venue.errors import VenueError
from pipeline.venue.orders import CODE_BAD_REQUEST, OrderEngine, OrderRejected

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
ROUTES = {PLACE: "POST", CANCEL: "POST", CANCEL_SYMBOL: "POST", ORDER_INFO: "GET", UNFILLED: "GET", FILLS: "GET"}
RATE_LIMITED = frozenset({PLACE, CANCEL, CANCEL_SYMBOL})

CODE_OK = "00000"
CODE_STALE = "40008"
CODE_BAD_KEY = "40006"
CODE_BAD_SIGN = "40009"
CODE_RATE = "429"
CODE_NOT_FOUND = "40404"
CODE_INTERNAL = "50000"

#: HTTP status of each error code (the engine's codes are all 400)
HTTP_STATUS = {CODE_BAD_KEY: 401, CODE_BAD_SIGN: 401, CODE_RATE: 429, CODE_NOT_FOUND: 404, CODE_INTERNAL: 500}
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"}

#: Counter names of ``RestApi.stats`` / ``RestServer.stats()``
STAT_NAMES = ("requests", "orders_placed", "orders_rejected", "fills", "cancels", "bad_signatures",
              "stale_timestamps", "rate_limited", "bad_requests", "http_errors", "connections", "connections_total",
              "connections_refused")


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

    Raises (from ``feed``):
        HttpError: 400 malformed request line / header / Content-Length, a bare LF line ending, a
            target not starting with "/"; 431 request line and headers over ``max_header_bytes``;
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
                        if len(self._buf) > self.max_header_bytes:
                            raise HttpError(431, "request line and headers too large")
                        break
                    if end + 4 > self.max_header_bytes:
                        raise HttpError(431, "request line and headers too large")
                    head = bytes(self._buf[:end])
                    del self._buf[: end + 4]
                    if not head:  # an empty line before a request line (RFC 9112 2.2): ignored
                        continue
                    self._head = self._parse_head(head)
                n = self._head[5]
                if len(self._buf) < n:
                    break
                body = bytes(self._buf[:n])
                del self._buf[:n]
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

    @property
    def idle(self) -> bool:
        """No partial request buffered."""
        return self._head is None and not self._buf

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
    limit; ``log``: an ``EventLog``-like object (``warning(event, **fields)``) for rejections, or None.
    """

    def __init__(self, engine: OrderEngine, credentials: Credentials, *, now_ms: Callable[[], int] | None = None,
                 mono_ns: Callable[[], int] | None = None, recv_window_ms: int = 30_000,
                 rate_limit_per_s: float = 10.0, log=None) -> None:
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
        cancelled = eng.cancel_symbol(symbol)
        return {"symbol": symbol, "cancelled": [{"orderId": str(o.order_id), "clientOid": o.client_oid}
                                                for o in cancelled]}

    def _get(self, path: str, q: dict):
        eng = self.engine
        if path == ORDER_INFO:
            return [eng.order(q.get("orderId"), q.get("clientOid")).to_json()]
        if path == UNFILLED:
            return [o.to_json() for o in eng.open_orders(q.get("symbol") or None)]
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


class RestServer:
    """Serves a ``RestApi`` over HTTP/1.1 on 127.0.0.1 (see the module docstring)."""

    def __init__(self, api: RestApi, *, port: int = 0, latency_ms: float = 0.0, idle_timeout_s: float = 60.0,
                 max_connections: int = 64, log=None) -> None:
        """Raises:
        VenueError: a port outside 0..65535, a negative latency, max_connections < 1.
        """
        if not 0 <= int(port) <= 65535:
            raise VenueError(f"rest_port must be in 0..65535, got {port}")
        if not 0.0 <= float(latency_ms) <= 60_000.0:
            raise VenueError(f"latency_ms must be in 0..60000, got {latency_ms}")
        if max_connections < 1:
            raise VenueError(f"max_connections must be >= 1, got {max_connections}")
        self.api = api
        self.requested_port = int(port)
        self.port = 0
        self.latency_s = float(latency_ms) / 1000.0
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_connections = int(max_connections)
        self.log = log
        self._server: asyncio.base_events.Server | None = None
        self._pump_task: asyncio.Task | None = None
        self._conn_tasks: set[asyncio.Task] = set()

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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        st = self.api.stats
        task = asyncio.current_task()
        if len(self._conn_tasks) >= self.max_connections:
            st["connections_refused"] += 1
            with suppress(Exception):
                writer.write(http_response(503, envelope("50000", "too many connections", self.api._now_ms()), False))
                writer.close()
            return
        self._conn_tasks.add(task)
        st["connections"] += 1
        st["connections_total"] += 1
        parser = HttpParser()
        try:
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES), self.idle_timeout_s)
                except TimeoutError:
                    break
                if not data:
                    break
                try:
                    reqs = parser.feed(data)
                except HttpError:
                    reqs = []
                close = False
                for req in reqs:
                    if self.latency_s and req.path in RATE_LIMITED:
                        await asyncio.sleep(self.latency_s)
                    status, body = self.api.handle(req)
                    writer.write(http_response(status, body, req.keep_alive))
                    if not req.keep_alive:
                        close = True
                        break
                exc = parser.failed
                if exc is not None and not close:
                    st["bad_requests"] += 1
                    st["http_errors"] += 1
                    if self.log is not None:
                        self.log.warning("rest_bad_http", status=exc.status, msg=exc.msg)
                    writer.write(http_response(exc.status, envelope(CODE_BAD_REQUEST, exc.msg, self.api._now_ms()),
                                               False))
                    close = True
                await writer.drain()
                if close:
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            self._conn_tasks.discard(task)
            st["connections"] -= 1
            writer.close()
            with suppress(Exception):
                await writer.wait_closed()
