"""The paper venue's order REST server: the ``RestApi`` (``pipeline.venue.rest_api``) over HTTP/1.1
on 127.0.0.1 (``pipeline.venue.http_wire`` parses the requests and encodes the answers).

``RestServer``: a listening socket on 127.0.0.1 (never another interface) whose accepts are bounded
per pass of the loop (``accepts_per_pass``; the rest wait in the kernel's queue for the next pass, so
a flood of connections takes turns with the established connections, the market's publishing and
the stage's heartbeat), one task per admitted connection, requests answered in order.
Per-connection deadlines (slowloris): a request's head must be complete ``header_timeout_s`` after
its first byte, its body ``body_timeout_s`` after its head (else 408 and close), an answer must be
taken by the peer within ``write_timeout_s``, and a connection idle between requests is closed after
``idle_timeout_s``. At most ``max_connections`` at once, of which at most ``max_untrusted`` not yet
trusted (no request signed with the venue's key on it): a new one beyond either evicts the most
suspect existing one (see ``RestServer``; never a trusted one for an untrusted pool that is full),
and is refused (503) when none can go. Every connection accepted is counted (``accepted`` =
``connections_total`` + ``connections_refused`` + ``closed_at_accept``). ``latency_ms`` > 0 delays each
place / cancel request's processing (an artificial venue latency; requests of one connection
stay in order). Malformed HTTP (``HttpError``) is answered with its status and code "40001", then
the connection is closed. Runs as a ``VenueThread`` ``extra`` service (``start`` / ``stop`` /
``pump_task``) on the market server's loop, so the engine and the market hook share one thread.

The routes and codes (``PLACE``, ``ADJUST_POSITION``, ...) are the API's, named here too for the
server's clients.
"""

from __future__ import annotations

import asyncio
import socket
import struct
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
#: connections accepted per pass of the loop at most (asyncio's own server takes up to 100)
ACCEPTS_PER_PASS = 16
#: the kernel's queue of connections not accepted yet (the OS caps it at its somaxconn)
ACCEPT_BACKLOG = 1024
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (nothing more is sent, nothing waits in the kernel)."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    sock.close()


class _Conn:
    """One connection's state, for the deadlines and the choice of whom to evict at the cap."""

    __slots__ = ("sock", "writer", "since_s", "proven", "trusted", "partial", "busy", "writing", "evicted",
                 "started", "unread")

    def __init__(self, sock: socket.socket, now_s: float) -> None:
        self.sock = sock
        self.writer: asyncio.StreamWriter | None = None  # once its task has made the stream
        self.since_s = now_s  # loop time the current phase began: idle wait, head, or body
        self.proven = False  # at least one complete request was answered
        self.trusted = False  # a request signed with the venue's key was answered on it
        self.partial = False  # bytes of an incomplete request are buffered
        self.busy = False  # complete requests are being processed (never evicted then)
        self.writing = False  # waiting for the peer to take an answer (drain)
        self.evicted = False
        self.started = False  # its task has begun (until then the task owns no stream: the socket is ours)
        self.unread = False  # bytes handed to its stream that its task has not read yet

    @property
    def fresh(self) -> bool:
        """Not a byte of a request taken from it yet (none has come, or it has not been read)."""
        return not (self.proven or self.partial or self.busy)

    def arriving(self) -> bool:
        """Bytes have come that are not read yet (in its stream, or in the kernel's buffer)."""
        if self.unread:
            return True
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except OSError:  # nothing there (would block), or the socket is gone
            return False

    @property
    def suspect(self) -> bool:
        """Never completed a request, is in the middle of one, or is not reading its answers."""
        return not self.proven or self.partial or self.writing


class _Reader(asyncio.StreamReader):
    """A connection's stream that notes bytes handed to it and not read yet (``_Conn.unread``)."""

    def __init__(self, conn: _Conn, limit: int) -> None:
        super().__init__(limit=limit)
        self._conn = conn

    def feed_data(self, data: bytes) -> None:
        self._conn.unread = True
        super().feed_data(data)


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

    The accept path: each pass of the loop over a readable listening socket accepts at most
    ``accepts_per_pass`` connections (``accept_passes_full`` counts the passes that took that many).
    A new connection's first bytes are read at once when they are there (a client's whole request
    usually is: the connection is then processing a request from its accept, never evicted before it
    is answered); one already closed by its peer is closed at once, no task made (``closed_at_accept``).

    The caps: at most ``max_connections`` connections, of which at most ``max_untrusted`` (default
    three quarters of ``max_connections``) not *trusted*: a connection is trusted once a request
    signed with the venue's key was answered on it (the order sender's), which a flood without the
    key cannot make. A connection accepted beyond a cap evicts one existing connection that is not
    processing a request: for a full untrusted pool an untrusted one, else any, choosing untrusted
    before trusted, then among the *suspect* ones (never completed a request, partway through one,
    or not reading its answers) the one whose current phase began earliest, and only when there is
    none, the proven idle one idle the longest (``evicted``; the evicted socket is reset); a
    connection none of whose bytes were read yet is passed over while bytes have come on it (its
    first request on its way in: a client that connects and sends at once, as the order sender
    reconnecting, is not reset for a newcomer). So a slowloris or a reconnect flood only ever displaces connections of its own kind, never the
    key holder's established ones, while a well-behaved client (a complete request at once, like the
    order sender's) is accepted at once and its keep-alive connection is kept. A new connection is
    refused (503, then closed: ``connections_refused``) only when no connection can go (all
    processing a request, ``latency_ms``). Peers are not told apart by address: the server binds
    127.0.0.1 only, so every peer has that one; what sets the key holder's connections apart is
    what they proved.
    """

    def __init__(self, api: RestApi, *, port: int = 0, latency_ms: float = 0.0, idle_timeout_s: float = 15.0,
                 header_timeout_s: float = 2.0, body_timeout_s: float = 2.0, write_timeout_s: float = 5.0,
                 max_connections: int = 64, max_untrusted: int | None = None,
                 accepts_per_pass: int = ACCEPTS_PER_PASS, log=None) -> None:
        """Raises:
        VenueError: a port outside 0..65535, a latency outside 0..60000 ms, max_connections < 1,
            max_untrusted outside 1..max_connections, accepts_per_pass < 1, an idle, header, body or
            write timeout that is not a positive finite number of seconds.
        """
        if not 0 <= int(port) <= 65535:
            raise VenueError(f"rest_port must be in 0..65535, got {port}")
        if not 0.0 <= float(latency_ms) <= 60_000.0:
            raise VenueError(f"latency_ms must be in 0..60000, got {latency_ms}")
        if max_connections < 1:
            raise VenueError(f"max_connections must be >= 1, got {max_connections}")
        if max_untrusted is None:
            max_untrusted = max(1, max_connections * 3 // 4)
        if not 1 <= max_untrusted <= max_connections:
            raise VenueError(f"max_untrusted must be in 1..max_connections ({max_connections}), "
                             f"got {max_untrusted}")
        if accepts_per_pass < 1:
            raise VenueError(f"accepts_per_pass must be >= 1, got {accepts_per_pass}")
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
        self.max_untrusted = int(max_untrusted)
        self.accepts_per_pass = int(accepts_per_pass)
        self.log = log
        self._sock: socket.socket | None = None  # the listening socket
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pump_task: asyncio.Task | None = None
        self._conn_tasks: dict[asyncio.Task, _Conn] = {}  # every live connection task (stop awaits them)
        self._conns: dict[asyncio.Task, _Conn] = {}  # the connections counted against the caps

    async def start(self) -> int:
        """Bind 127.0.0.1:``port``; returns the bound port.

        Raises:
            OSError: the port cannot be bound.
        """
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((HOST, self.requested_port))
            sock.listen(ACCEPT_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock, self._loop = sock, asyncio.get_running_loop()
        self.port = sock.getsockname()[1]
        self._loop.add_reader(sock.fileno(), self._accept_pass)
        self._pump_task = asyncio.create_task(self._listening(), name="venue-rest")
        return self.port

    @staticmethod
    async def _listening() -> None:
        """The service's task: runs until ``stop`` (the accepts run from the loop's reader callback)."""
        await asyncio.get_running_loop().create_future()

    async def stop(self) -> None:
        """Close the listening socket and every connection."""
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
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
    def address(self) -> tuple[str, int] | None:
        """The listening socket's (host, port); None when not listening."""
        return None if self._sock is None else self._sock.getsockname()[:2]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stats(self) -> dict[str, int]:
        """The API's and the engine's counters (a copy)."""
        return self.api.counters()

    def _evict_one(self, untrusted_only: bool) -> bool:
        """Reset the connection the class docstring says goes first (an untrusted one when
        ``untrusted_only``); False when none may go."""
        order = sorted(((c.trusted, not c.suspect, c.since_s), i, t) for i, (t, c) in enumerate(self._conns.items())
                       if not (c.busy or (untrusted_only and c.trusted)))
        for _, _, victim_task in order:
            victim = self._conns[victim_task]
            if not (victim.fresh and victim.arriving()):  # a first request on its way in is left to come
                break
        else:
            return False
        del self._conns[victim_task]
        victim.evicted = True
        self.api.stats["evicted"] += 1
        if victim.writer is not None:
            with suppress(Exception):
                victim.writer.transport.abort()
        else:  # its task has not made its stream yet: cancelled, it ends at once, the socket closed
            victim_task.cancel()
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
        did not within ``write_timeout_s``. Taken at once (no wait, not counted as writing) when the
        kernel took it all."""
        if not writer.transport.get_write_buffer_size():
            return True
        conn.writing = True
        try:
            await asyncio.wait_for(writer.drain(), self.write_timeout_s)
        except TimeoutError:
            self.api.stats["slow_closed"] += 1
            return False
        finally:
            conn.writing = False
        return True

    def _accept_pass(self) -> None:
        """The listening socket is readable: accept at most ``accepts_per_pass`` connections, each
        taken in (``_take``); the rest wait in the kernel's queue for the next pass."""
        st, lsock = self.api.stats, self._sock
        for _ in range(self.accepts_per_pass):
            try:
                sock, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors, or the like: the connection stays queued
                st["accept_errors"] += 1
                return
            st["accepted"] += 1
            self._take(sock)
        st["accept_passes_full"] += 1

    def _take(self, sock: socket.socket) -> None:
        """A connection just accepted: its first bytes read if they are there (none and closed: closed
        now), then admitted (a task serves it) or refused."""
        st = self.api.stats
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            first = sock.recv(READ_CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            first = None
        except OSError:  # reset by its peer already
            first = b""
        if first == b"":
            st["closed_at_accept"] += 1
            sock.close()
            return
        conn, parser, reqs = _Conn(sock, self._loop.time()), HttpParser(), None
        if first is not None:
            try:
                reqs = parser.feed(first)
            except HttpError:  # parser.failed: answered by the connection's task
                reqs = []
            conn.busy = bool(reqs) or parser.failed is not None  # to be answered: not evicted before
            conn.partial = not parser.idle
        if not self._admit(conn):
            return
        task = self._loop.create_task(self._serve(conn, parser, reqs))
        self._conn_tasks[task] = self._conns[task] = conn
        task.add_done_callback(self._ended)
        st["connections"] += 1
        st["connections_total"] += 1

    def _admit(self, conn: _Conn) -> bool:
        """Whether a new (untrusted) connection gets a slot, evicting one at a cap; else it is
        answered 503 and closed (``connections_refused``)."""
        pool_full = sum(not c.trusted for c in self._conns.values()) >= self.max_untrusted
        if (not pool_full and len(self._conns) < self.max_connections) or self._evict_one(pool_full):
            return True
        self.api.stats["connections_refused"] += 1
        with suppress(OSError):
            conn.sock.send(http_response(503, envelope("50000", "too many connections", self.api.now_ms()), False))
        conn.sock.close()
        return False

    def _ended(self, task: asyncio.Task) -> None:
        """A connection's task is done (its end, an eviction, ``stop``): its slot and count go; a task
        cancelled before it began leaves its socket to close here."""
        conn = self._conn_tasks.pop(task)
        self._conns.pop(task, None)
        self.api.stats["connections"] -= 1
        if not conn.started:
            _reset(conn.sock)

    async def _serve(self, conn: _Conn, parser: HttpParser, reqs: list[HttpRequest] | None) -> None:
        """Serve one admitted connection until it closes (``reqs``: the requests of its first bytes,
        read at accept; None when none had come)."""
        conn.started = True
        loop = self._loop
        try:
            reader = _Reader(conn, 2 * READ_CHUNK_BYTES)
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.create_connection(lambda: protocol, sock=conn.sock)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        except Exception:  # noqa: BLE001 - the socket failed before it was served: reset, nothing to answer
            _reset(conn.sock)
            return
        conn.writer = writer
        abort = False
        try:
            abort = await self._serve_connection(reader, writer, conn, loop, parser, reqs)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:  # stop(): the connection is reset, the task ends normally
            abort = True
        finally:
            await self._close(writer, reset=abort or conn.evicted)

    def _phase(self, parser: HttpParser) -> tuple[str, float]:
        """The connection's phase ("idle", "body" or "head") and that phase's deadline in s."""
        if parser.idle:
            return "idle", self.idle_timeout_s
        if parser.awaiting_body:
            return "body", self.body_timeout_s
        return "head", self.header_timeout_s

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn,
                                loop: asyncio.AbstractEventLoop, parser: HttpParser,
                                first: list[HttpRequest] | None) -> bool:
        """Read, answer and enforce the deadlines until the connection is to end (``first``: the
        requests of the bytes read at accept, answered first; None when none had come); returns
        whether it must be reset (True) rather than closed.

        Raises:
            ConnectionError, OSError: the peer reset the connection.
        """
        while True:
            if first is not None:
                reqs, first = first, None
            else:
                phase, limit_s = self._phase(parser)
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES),
                                                  max(0.0, conn.since_s + limit_s - loop.time()))
                except TimeoutError:
                    return await self._end_overdue(writer, conn, phase, limit_s)
                conn.unread = False
                if conn.evicted:
                    return False
                if not data:  # end of file: a partial request can never complete
                    return await self._end_at_eof(writer, conn, parser)
                try:
                    reqs = parser.feed(data)
                except HttpError:
                    reqs = []
                if reqs or phase != self._phase(parser)[0]:
                    conn.since_s = loop.time()  # a new phase (a request's first byte, a head done) starts its clock
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
            conn.trusted = conn.trusted or self.api.authenticated
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
