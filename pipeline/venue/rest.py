"""The paper venue's order REST server: the ``RestApi`` (``pipeline.venue.rest_api``) over HTTP/1.1
on 127.0.0.1 (``pipeline.venue.http_wire`` parses the requests and encodes the answers).

``RestServer``: ``asyncio.start_server`` on 127.0.0.1 (never another interface), one task per
connection, requests answered in order. Per-connection deadlines (slowloris): a request's head
must be complete ``header_timeout_s`` after its first byte, its body ``body_timeout_s`` after its
head (else 408 and close), an answer must be taken by the peer within ``write_timeout_s``, and a
connection idle between requests is closed after ``idle_timeout_s``. At most ``max_connections``
at once: a new one beyond that evicts the most suspect existing one (see ``RestServer``), and is
refused (503) only when every connection is processing a request. ``latency_ms`` > 0 delays each
place / cancel request's processing (an artificial venue latency; requests of one connection
stay in order). Malformed HTTP (``HttpError``) is answered with its status and code "40001", then
the connection is closed. Runs as a ``VenueThread`` ``extra`` service (``start`` / ``stop`` /
``pump_task``) on the market server's loop, so the engine and the market hook share one thread.

The routes and codes (``PLACE``, ``ADJUST_POSITION``, ...) are the API's, named here too for the
server's clients.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress

from pipeline.venue.errors import VenueError
from pipeline.venue.http_wire import HttpError, HttpParser, HttpRequest, http_response
from pipeline.venue.order_fields import CODE_BAD_REQUEST
from pipeline.venue.rest_api import (  # the routes: the server's clients name them from here too
    ACCOUNT_INFO,
    ADJUST_POSITION,
    ASSETS,
    CANCEL,
    CANCEL_SYMBOL,
    FILLS,
    ORDER_INFO,
    PLACE,
    RATE_LIMITED,
    ROUTES,
    UNFILLED,
    RestApi,
    envelope,
)
from pipeline.venue.service import cancel_task

__all__ = ["ACCOUNT_INFO", "ADJUST_POSITION", "ASSETS", "CANCEL", "CANCEL_SYMBOL", "FILLS", "HOST", "ORDER_INFO",
           "PLACE", "ROUTES", "UNFILLED", "RestApi", "RestServer"]

HOST = "127.0.0.1"
READ_CHUNK_BYTES = 64 * 1024


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
        await cancel_task(self._pump_task)

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
        writer.write(http_response(status, envelope(CODE_BAD_REQUEST, msg, self.api.now_ms()), False))

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
        """Serve one connection (``asyncio.start_server``'s callback) until it closes."""
        if not self._admit(writer):
            return
        st = self.api.stats
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        conn = _Conn(writer, loop.time())
        self._conn_tasks.add(task)
        self._conns[task] = conn
        st["connections"] += 1
        st["connections_total"] += 1
        abort = False
        try:
            abort = await self._serve_connection(reader, writer, conn, loop)
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
            await self._close(writer, reset=abort or conn.evicted)

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Whether a new connection gets a slot (evicting one at the cap); else it is answered 503
        and closed (``connections_refused``)."""
        if len(self._conns) < self.max_connections or self._evict_one():
            return True
        self.api.stats["connections_refused"] += 1
        with suppress(Exception):
            writer.write(http_response(503, envelope("50000", "too many connections", self.api.now_ms()), False))
            writer.close()
        return False

    def _phase(self, parser: HttpParser) -> tuple[str, float]:
        """The connection's phase ("idle", "body" or "head") and that phase's deadline in s."""
        if parser.idle:
            return "idle", self.idle_timeout_s
        if parser.awaiting_body:
            return "body", self.body_timeout_s
        return "head", self.header_timeout_s

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn,
                                loop: asyncio.AbstractEventLoop) -> bool:
        """Read, answer and enforce the deadlines until the connection is to end; returns whether
        it must be reset (True) rather than closed.

        Raises:
            ConnectionError, OSError: the peer reset the connection.
        """
        parser = HttpParser()
        while True:
            phase, limit_s = self._phase(parser)
            try:
                data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES),
                                              max(0.0, conn.since_s + limit_s - loop.time()))
            except TimeoutError:
                return await self._end_overdue(writer, conn, phase, limit_s)
            if conn.evicted:
                return False
            if not data:  # end of file: a partial request can never complete
                return await self._end_at_eof(writer, conn, parser)
            try:
                reqs = parser.feed(data)
            except HttpError:
                reqs = []
            now = loop.time()
            if reqs or phase != self._phase(parser)[0]:
                conn.since_s = now  # a new phase (the first byte of a request, a head done) starts its clock
            conn.partial = not parser.idle
            close = await self._process(writer, conn, reqs)
            exc = parser.failed
            if exc is not None and not close:
                self._bad_http(writer, exc)
                close = True
            if not await self._drain(writer, conn):
                return True
            if reqs:
                conn.proven = True
                conn.since_s = loop.time()  # the idle wait (or a pipelined request's head) starts now
            if close:
                return False

    async def _process(self, writer: asyncio.StreamWriter, conn: _Conn, reqs: list[HttpRequest]) -> bool:
        """Answer the complete requests in order (after ``latency_ms`` for place / cancel); returns
        whether the connection is to close after them (a request without keep-alive)."""
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
        return close

    async def _end_overdue(self, writer: asyncio.StreamWriter, conn: _Conn, phase: str, limit_s: float) -> bool:
        """A deadline passed: an idle connection ends quietly (``idle_closed``), one partway through
        a request is answered 408 (``slow_closed``). Returns whether to reset it."""
        st = self.api.stats
        if phase == "idle":
            st["idle_closed"] += 1
            return False
        st["slow_closed"] += 1
        self._write_error(writer, 408, f"request {phase} not complete within {limit_s:g} s")
        return not await self._drain(writer, conn)

    async def _end_at_eof(self, writer: asyncio.StreamWriter, conn: _Conn, parser: HttpParser) -> bool:
        """The peer ended its side: a partial request is answered 400. Returns whether to reset."""
        try:
            parser.feed_eof()
        except HttpError as exc:
            self._bad_http(writer, exc)
            return not await self._drain(writer, conn)
        return False

    async def _close(self, writer: asyncio.StreamWriter, reset: bool) -> None:
        """Reset the connection, or close it, waiting at most ``write_timeout_s`` for the peer to
        take the last bytes (reset then)."""
        if reset:
            writer.transport.abort()
            return
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), self.write_timeout_s)
        except TimeoutError:  # the peer does not take the last bytes: reset
            writer.transport.abort()
        except Exception:  # noqa: BLE001 - a reset peer; the socket is closed either way
            pass
