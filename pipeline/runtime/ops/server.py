"""The ops server: ``/metrics``, ``/health``, the dashboard page and its WebSocket, and the operator's
control endpoints, on ``127.0.0.1:<supervisor.ops_port>`` (0 = off), served by the supervisor process.

It runs an asyncio event loop in one daemon thread of its own (``OpsServer``), with websockets'
server answering both plain HTTP (``process_request``) and the page's WebSocket on the one port. A
thread, so the supervisor's loop (ticks every ``poll_interval_ms``, never waits) is not changed by it;
asyncio inside it, so any number of connections, the once-a-second push and a control request waiting
for its answer share that one thread without blocking each other. What it reads is what the
supervisor's status already reads (``ops.snapshot``: shared-memory counters, plus ``/proc`` for CPU):
no stage does anything for a scrape. What it does (halt, resume, kill switch, restart) goes through
the supervisor's own control socket (``pipeline.runtime.control.request``, run in a worker thread),
so the supervisor carries it out on its own thread with the same functions as ``python -m pipeline
halt``; the ops thread never touches the supervisor's state or its control ring.

Every request is answered or, when its client is gone before the answer, counted. Bad requests are
refused (``web.WebRules``), counted (``shmpipe_ops_requests_refused_total``), and logged (the first
``LOG_FIRST`` refusals, then every 1000th) with the path only: a query string is logged as
``?<redacted>`` and the token, wherever a request put it, as ``<redacted>`` (``pipeline.runtime.redact``).

Bytes come in through ``OpsConnection`` (websockets' connection, with a first look of its own,
``wire.check_head``): a head websockets would drop without an answer is refused here (400, 411,
413, 431, 505); a body (at most ``wire.MAX_BODY_BYTES``, announced by its Content-Length) is read
before the request is judged, within ``BODY_TIMEOUT_S`` (else 408); a head not complete within
``HEAD_TIMEOUT_S`` is answered 408 (a connection that sent nothing is closed then, uncounted: no
request); a connection closed with a request half sent is counted (400).
A control request's body may be empty or ``{}`` (it takes no parameters; anything else: 400); a read
(GET) takes no body (400); a WebSocket upgrade neither.
"""

from __future__ import annotations

import asyncio
import functools
import http
import importlib.resources
import logging
import threading
import time

import orjson
from websockets.asyncio.server import ServerConnection, broadcast, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from pipeline.runtime import redact
from pipeline.runtime.config import Config
from pipeline.runtime.control import request as control_request
from pipeline.runtime.errors import ConfigError, ControlError, StartupError
from pipeline.runtime.log import EventLog
from pipeline.runtime.ops.audit import DenialTail, audit_paths
from pipeline.runtime.ops.dashboard import History, dashboard_doc, graph
from pipeline.runtime.ops.health import health
from pipeline.runtime.ops.metrics import METRICS_CONTENT_TYPE, render_metrics
from pipeline.runtime.ops.snapshot import take_snapshot
from pipeline.runtime.ops.tokenfile import read_token
from pipeline.runtime.ops.web import JSON, Control, Read, Reply, WebRules, control_reply, error, security_headers
from pipeline.runtime.ops.wire import HEAD_END, BadHead, check_head, incomplete

HOST = "127.0.0.1"
LOG_FIRST = 20
HEAD_TIMEOUT_S = 5.0  # from the connection to the end of the request's head
BODY_TIMEOUT_S = 5.0  # from the end of the head to the end of the body
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
#: websockets' own log lines (a malformed handshake...) are not the supervisor's events
_WS_LOG = logging.getLogger("shmpipe.ops.websockets")
_WS_LOG.addHandler(logging.NullHandler())
_WS_LOG.propagate = False


def load_static() -> dict[str, tuple[str, bytes]]:
    """The dashboard's files shipped in the package (``static/``): name -> (content type, bytes)."""
    out = {}
    for f in importlib.resources.files(__package__).joinpath("static").iterdir():
        ext = "." + f.name.rsplit(".", 1)[-1]
        if f.is_file() and ext in STATIC_TYPES:
            out[f.name] = (STATIC_TYPES[ext], f.read_bytes())
    return out


class OpsServer:
    """The server of one supervisor (module docstring). ``source`` is what ``take_snapshot`` reads
    (the ``Supervisor``); ``control(request) -> answer`` sends a control-plane request (default: the
    supervisor's control socket); ``port`` 0 picks a free port (tests), else ``supervisor.ops_port``."""

    def __init__(self, cfg: Config, log: EventLog, source, *, control=None, port: int | None = None,
                 push_interval_s: float = 1.0, clock=time.monotonic_ns):
        self.cfg, self.log, self.source, self.clock = cfg, log, source, clock
        self.port = cfg.supervisor.ops_port if port is None else port
        self.control = control or (lambda req: control_request(cfg, req, timeout_ms=5_000))
        self.push_interval_s = push_interval_s
        try:
            token, token_error = read_token(cfg.supervisor.ops_token_file), ""
        except ConfigError as exc:
            token, token_error = None, str(exc)
        self.rules = WebRules(self.port, token, token_error, static=load_static())
        self.graph = graph(cfg)
        self.history = History()
        self.tails = [DenialTail(p) for p in audit_paths(cfg)]
        self.prev: dict | None = None
        self.doc_text: str | None = None
        self.clients: set[ServerConnection] = set()
        self.pushes = 0
        self._refusals_logged = 0
        self._snapshot_errors = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._start_error: str = ""

    # ------------------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 10.0) -> int:
        """Start the thread and bind ``127.0.0.1:port``. Returns the port.

        Raises:
            StartupError: the port cannot be bound (in use, not allowed), or the thread did not start.
        """
        self._thread = threading.Thread(target=self._run, name="ops-server", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise StartupError(f"the ops server did not start within {timeout_s:g} s")
        if self._start_error:
            self._thread.join(timeout_s)
            raise StartupError(self._start_error)
        if self.rules.token is None:
            self.log.warning("ops_control_off", why=self.rules.token_error)
        self.log.info("ops_listening", host=HOST, port=self.port, control=self.rules.token is not None)
        return self.port

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close every connection and the listening socket, end the thread (idempotent)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread is not None and self._thread.is_alive():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has already closed
                pass
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.log.warning("ops_server_not_stopped", timeout_s=timeout_s)
        self._thread = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # anything the loop did not handle: the server is off, the supervisor goes on
            self._start_error = self._start_error or f"ops server failed: {type(exc).__name__}: {exc}"
            self.log.error("ops_server_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            server = await serve(self._ws, HOST, self.port, process_request=self._http, server_header=None,
                                 max_size=4_096, max_queue=4, close_timeout=1, logger=_WS_LOG,
                                 create_connection=functools.partial(OpsConnection, ops=self))
        except OSError as exc:
            self._start_error = (f"cannot listen on {HOST}:{self.port}: {exc.strerror or exc} "
                                 "(set [supervisor] ops_port to a free port, or 0 to turn the ops server off)")
            self._started.set()
            return
        self.port = self.rules.port = server.sockets[0].getsockname()[1]
        self._started.set()
        sampler = asyncio.create_task(self._sample_forever(), name="ops-sampler")
        try:
            await self._stop.wait()
        finally:
            sampler.cancel()
            server.close()
            await server.wait_closed()

    # ------------------------------------------------------------------------------ reading
    def snapshot(self) -> dict:
        """A snapshot of the pipeline with the server's own refusal counters (``ops``).

        Raises:
            Whatever the source raises (``take_snapshot``).
        """
        snap = take_snapshot(self.source, self.cfg, self.clock())
        snap["ops"] = {"refused": dict(self.rules.refused)}
        return snap

    def sample(self) -> str:
        """Take a snapshot, update the history, build the dashboard document and keep it as JSON text."""
        snap = self.snapshot()
        self.history.add(snap)
        denials = sorted((d for t in self.tails for d in t.read()), key=lambda d: d.get("ts_ns") or 0)[-10:]
        doc = dashboard_doc(snap, self.prev, self.history, denials, health(snap), self.graph)
        self.prev = snap
        self.doc_text = orjson.dumps(doc).decode()
        return self.doc_text

    async def _sample_forever(self) -> None:
        while True:
            try:
                text = self.sample()
                if self.clients:
                    broadcast(self.clients, text)
                    self.pushes += 1
            except Exception as exc:  # a snapshot that failed (start-up, shutdown): try again next time
                self._snapshot_errors += 1
                if self._snapshot_errors <= LOG_FIRST:
                    self.log.warning("ops_snapshot_failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.push_interval_s)

    # ------------------------------------------------------------------------------ serving
    async def _ws(self, conn: ServerConnection) -> None:
        """The dashboard's WebSocket: the latest document at once, then every push; input is read and
        ignored (the page only listens)."""
        self.clients.add(conn)
        try:
            if self.doc_text is not None:
                await conn.send(self.doc_text)
            async for _ in conn:
                pass
        finally:
            self.clients.discard(conn)

    async def _http(self, conn: ServerConnection, req: Request) -> Response | None:
        """websockets' ``process_request``: every request but an allowed WebSocket upgrade is answered
        here (None lets websockets accept the upgrade); a body is read (``OpsConnection``) first."""
        peer = (conn.remote_address or ("",))[0]
        body, refused = await self._body(conn)
        decision = refused or self.rules.decide(req.method, req.path, req.headers, peer)
        if not isinstance(decision, Reply) or decision.status < 400:
            decision = self._body_refusal(decision, body) or decision
        if isinstance(decision, Read) and decision.what == "ws":
            return None
        if isinstance(decision, Read):
            reply = self._read(decision.what)
        elif isinstance(decision, Control):
            reply = await self._control(decision.request, peer)
        else:
            reply = decision
            if reply.status >= 400:
                self._note_refusal(reply, req.path, peer)
        return self._response(reply)

    async def _body(self, conn) -> tuple[bytes, Reply | None]:
        """The request's body as ``OpsConnection`` read it, or the refusal (counted) when it did not
        come whole within ``BODY_TIMEOUT_S`` (408) or the client closed first (400)."""
        done = getattr(conn, "body_done", None)
        if done is None:  # a plain ServerConnection (no body is ever let through)
            return b"", None
        try:
            await asyncio.wait_for(done.wait(), BODY_TIMEOUT_S)
        except TimeoutError:
            return b"", self.rules.refuse(408, f"the body did not come within {BODY_TIMEOUT_S:g} s")
        if conn.body_cut:
            return b"", self.rules.refuse(400, "the connection was closed before the body was complete")
        return bytes(conn.body), None

    def _body_refusal(self, decision, body: bytes) -> Reply | None:
        """The refusal (counted) of a body the decided request does not take; None when it is fine:
        no body, or a control request's empty JSON object."""
        if not body:
            return None
        if isinstance(decision, Control):
            try:
                if orjson.loads(body) == {}:
                    return None
            except orjson.JSONDecodeError:
                pass
            return self.rules.refuse(400, "a control request takes no parameters: send no body, or {}")
        return self.rules.refuse(400, "this request takes no body")

    def refuse_head(self, bad: BadHead, peer: str) -> bytes:
        """Count and log a head refused before websockets parsed it; the answer's bytes."""
        reply = self.rules.refuse(bad.status, bad.why)
        self._note_refusal(reply, bad.target, peer)
        return self._response(reply).serialize()

    def _read(self, what: str) -> Reply:
        try:
            snap = self.snapshot()
        except Exception as exc:
            return error(503, f"no snapshot now: {type(exc).__name__}: {exc}")
        if what == "metrics":
            return Reply(200, METRICS_CONTENT_TYPE, render_metrics(snap))
        status, body = health(snap)
        return Reply(status, JSON, orjson.dumps(body))

    async def _control(self, req: dict, peer: str) -> Reply:
        try:
            answer = await asyncio.to_thread(self.control, req)
        except ControlError as exc:
            answer = {"ok": False, "error": str(exc)}
        self.log.warning("ops_control", cmd=req["cmd"], name=req.get("name", ""), ok=bool(answer.get("ok")),
                         error=answer.get("error", ""), peer=peer)
        return control_reply(answer)

    def _note_refusal(self, reply: Reply, path: str, peer: str) -> None:
        self._refusals_logged += 1
        n = self._refusals_logged
        if n <= LOG_FIRST or n % 1000 == 0:
            safe = redact.without(redact.target(path), [self.rules.token])
            self.log.warning("ops_refused", status=reply.status, path=safe, peer=peer, count=n)

    def _response(self, reply: Reply) -> Response:
        headers = Headers([("Content-Type", reply.content_type), ("Content-Length", str(len(reply.body))),
                           ("Connection", "close"), *security_headers(self.port), *reply.headers])
        return Response(reply.status, http.HTTPStatus(reply.status).phrase, headers, reply.body)


class OpsConnection(ServerConnection):
    """websockets' server connection with a first look at the request (module docstring): the head
    is checked (``wire.check_head``) before websockets parses it, without its Content-Length; the
    body is kept in ``body`` (``body_done`` set when whole, ``body_cut`` when the client closed
    first) for ``OpsServer._http``. After an upgrade, bytes go to websockets untouched."""

    def __init__(self, *args, ops: OpsServer, **kwargs):
        super().__init__(*args, **kwargs)
        self.ops = ops
        self.phase = "head"  # head -> body -> done (websockets has the head; a body is whole)
        self.buf = bytearray()
        self.body = bytearray()
        self.body_bytes = 0
        self.body_done = asyncio.Event()
        self.body_cut = False
        self._eof_held = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_late)

    def _peer(self) -> str:
        return (self.remote_address or ("",))[0]

    def _refuse_now(self, bad: BadHead) -> None:
        """Answer a refused head ourselves and close (websockets never sees the request)."""
        self.phase = "refused"
        if self._timer is not None:
            self._timer.cancel()
        self.transport.write(self.ops.refuse_head(bad, self._peer()))
        self.transport.close()

    def _head_late(self) -> None:
        if self.phase != "head":
            return
        if not self.buf:  # no request at all (a browser's spare connection): closed, not a refusal
            self.phase = "refused"
            self.transport.close()
            return
        self._refuse_now(BadHead(408, f"the request's head did not come within {HEAD_TIMEOUT_S:g} s"))

    def data_received(self, data: bytes) -> None:
        if self.phase == "done":
            super().data_received(data)
        elif self.phase == "body":
            self._take_body(data)
        elif self.phase == "head":
            self.buf += data
            end = self.buf.find(HEAD_END)
            if end < 0:
                bad = incomplete(self.buf)
                if bad is not None:
                    self._refuse_now(bad)
                return
            self._timer.cancel()
            verdict = check_head(bytes(self.buf[:end + len(HEAD_END)]))
            rest, self.buf = bytes(self.buf[end + len(HEAD_END):]), bytearray()
            if isinstance(verdict, BadHead):
                self._refuse_now(verdict)
                return
            self.body_bytes = verdict.body_bytes
            self.phase = "body" if self.body_bytes else "done"
            if not self.body_bytes:
                self.body_done.set()
            super().data_received(verdict.head)
            if rest:
                self.data_received(rest)

    def _take_body(self, data: bytes) -> None:
        """Keep the body's bytes (what follows it is dropped: the answer closes the connection)."""
        self.body += data[:self.body_bytes - len(self.body)]
        if len(self.body) >= self.body_bytes:
            self.phase = "drained"
            self.body_done.set()

    def eof_received(self):
        if self.phase == "refused":
            return None
        if self.phase == "head":
            if not self.buf:
                return super().eof_received()
            self._refuse_now(BadHead(400, "the connection was closed before the request's head was complete"))
            return None
        if self.phase == "body":  # the client stopped sending: the request is answered (400), then closed
            self.body_cut = True
            self.phase = "drained"
            self.body_done.set()
        if self.response is None and (self.phase == "drained" or self.request is not None):
            self._eof_held = True  # a half-close before the answer: the answer still goes out (send_data)
            return True
        return super().eof_received()

    def send_data(self) -> None:
        super().send_data()
        if self._eof_held and self.response is not None:  # the answer is out: now the client's end
            self._eof_held = False
            super().eof_received()
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.phase == "body":
            self.body_cut = True
            self.body_done.set()
        elif (self.phase == "head" and self.buf) or (self.phase == "done" and self.request is None):
            # a half-sent head, or one websockets refused without calling process_request: counted
            self.ops.refuse_head(BadHead(400, "closed with no complete request"), self._peer())
        super().connection_lost(exc)


def start_ops_server(cfg: Config, log: EventLog, source, say=lambda text: None) -> OpsServer | None:
    """The supervisor's hook: start the ops server when ``supervisor.ops_port`` is set; None when it is
    0. A server that cannot start is logged and said (``say``), and the pipeline runs without it:
    trading never depends on the dashboard."""
    if not cfg.supervisor.ops_port:
        return None
    srv = OpsServer(cfg, log, source)
    try:
        port = srv.start()
    except StartupError as exc:
        log.error("ops_server_off", error=str(exc))
        say(f"ops server off: {exc}")
        return None
    control = "on" if srv.rules.token is not None else f"off ({srv.rules.token_error})"
    say(f"dashboard http://{HOST}:{port}/  (metrics /metrics, health /health; control {control})")
    return srv
