"""A scripted WebSocket server standing in for the Bitget venue in the feed tests:
``websockets.asyncio.server.serve`` on 127.0.0.1 (an ephemeral port) in a thread of its own, sending
exactly the frames the test says.

    with WsTestServer(on_subscribe=lambda conn, args: [snapshot_text]) as srv:
        ...connect a client to srv.url...
        srv.wait_for(lambda: srv.subscribed(0), 5)
        sent_ns = srv.send([frame1, frame2])        # monotonic ns just before the first send
        srv.drop()                                   # abort the latest connection (no close frame)

Behaviour: every text received is kept per connection (``conns[i].received``); ``ping`` is
answered ``pong`` unless ``answer_ping=False``; ``subscribe`` / ``unsubscribe`` requests are
acknowledged per arg (as the venue does) unless ``ack=False``, and after a subscribe the frames
returned by ``on_subscribe(conn, args)`` are sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from tests.support.wait import wait_until


class Conn:
    """One client connection: what it received, and whether it closed."""

    def __init__(self, index: int, ws):
        self.index = index
        self.ws = ws
        self.received: list[str] = []
        self.closed = False

    def ops(self, op: str) -> list[list[dict]]:
        """The ``args`` of every request ``op`` received on this connection."""
        out = []
        for text in list(self.received):
            if text.startswith("{"):
                doc = json.loads(text)
                if doc.get("op") == op:
                    out.append(doc["args"])
        return out


class WsTestServer:
    """The server (a context manager: started on enter, stopped on exit)."""

    def __init__(self, *, on_subscribe=None, answer_ping: bool = True, ack: bool = True):
        self.on_subscribe = on_subscribe
        self.answer_ping = answer_ping
        self.ack = ack
        self.conns: list[Conn] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="ws-test-server", daemon=True)
        self._ready = threading.Event()
        self._server = None
        self._error: BaseException | None = None

    # -- lifecycle
    def __enter__(self) -> "WsTestServer":
        self._thread.start()
        if not self._ready.wait(5) or self._error is not None:
            raise RuntimeError(f"test server did not start: {self._error!r}")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v2/ws/public"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # pragma: no cover - reported by __enter__
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _start(self) -> None:
        self._server = await serve(self._handler, "127.0.0.1", 0, ping_interval=None, close_timeout=0.5)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def shutdown():
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except asyncio.TimeoutError:  # pragma: no cover
                pass

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    # -- the handler
    async def _handler(self, ws) -> None:
        conn = Conn(len(self.conns), ws)
        self.conns.append(conn)
        try:
            async for text in ws:
                conn.received.append(text)
                if text == "ping":
                    if self.answer_ping:
                        await ws.send("pong")
                    continue
                try:
                    doc = json.loads(text)
                except ValueError:
                    continue
                op, args = doc.get("op"), doc.get("args") or []
                if op in ("subscribe", "unsubscribe") and self.ack:
                    for a in args:
                        await ws.send(json.dumps({"event": op, "arg": a}, separators=(",", ":")))
                if op == "subscribe" and self.on_subscribe is not None:
                    for frame in self.on_subscribe(conn, args):
                        await ws.send(frame)
        except ConnectionClosed:
            pass
        finally:
            conn.closed = True

    # -- scripting (from the test thread)
    def _conn(self, conn: int | None) -> Conn:
        return self.conns[-1 if conn is None else conn]

    def send(self, frames, conn: int | None = None, timeout: float = 5) -> int:
        """Send ``frames`` (str: text frame, bytes: binary frame) in order on a connection (default:
        the latest); returns ``time.monotonic_ns()`` taken just before the first one went out."""
        c = self._conn(conn)
        box = []

        async def go():
            box.append(time.monotonic_ns())
            for f in frames:
                await c.ws.send(f)

        asyncio.run_coroutine_threadsafe(go(), self._loop).result(timeout)
        return box[0]

    def drop(self, conn: int | None = None) -> None:
        """Abort a connection's TCP transport: no close frame, as when a network path breaks."""
        c = self._conn(conn)
        self._loop.call_soon_threadsafe(c.ws.transport.abort)

    def subscribed(self, conn: int = -1) -> bool:
        """True when that connection has received a subscribe request."""
        return len(self.conns) > (conn if conn >= 0 else 0) and bool(self.conns[conn].ops("subscribe"))

    @staticmethod
    def wait_for(predicate, timeout: float = 5, what: str = "condition"):
        """``tests.support.wait.wait_until`` polling every 2 ms (the server thread answers fast)."""
        return wait_until(predicate, timeout, 0.002, what)
