"""The market-data server's WebSocket clients: each connection, its subscriptions and its queue of
outgoing frames, and the answers to its requests (see ``pipeline.venue.server`` for the dialect).

``Clients.handler`` serves one connection (``websockets.asyncio.server.serve`` calls it): requests
are parsed by ``market.parse_request`` and answered (pong, subscribe / unsubscribe acks, error
events, the snapshot a subscription starts with). ``send`` queues a frame for one connection;
one writer task per connection sends them in order, each when it is due. The fault injector
(``pipeline.venue.faults``) decides whether a data push is dropped and when a frame is due; a
connection whose queue holds ``max_queue`` frames is aborted (``slow_disconnects``).
``subs[(channel, instId)]`` maps each subscribed connection to whether it is live (books: its
snapshot was sent), for the server's publisher to fan frames out.
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from pipeline.trading.bitget.protocol import CHANNEL_BOOKS, CHANNEL_TRADE, PING_TEXT
from pipeline.venue.faults import FaultInjector
from pipeline.venue.market import (
    OP_ERROR,
    OP_PING,
    OP_SUBSCRIBE,
    PONG_FRAME,
    VenueMarket,
    error_frame,
    event_frame,
    parse_request,
)
from pipeline.venue.service import cancel_task


class Conn:
    """One client connection's state."""

    __slots__ = ("ws", "queue", "writer", "subs", "last_due", "dead")

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.queue: asyncio.Queue = asyncio.Queue()  # (due loop time or 0.0, frame)
        self.writer: asyncio.Task | None = None
        self.subs: set[tuple[str, str]] = set()
        self.last_due = 0.0
        self.dead = False  # aborted by the venue: nothing more is queued


class Clients:
    """The server's open connections and their subscriptions (see the module docstring).
    ``stats``: the server's counter dict, updated in place (connections, connections_total,
    subscriptions, requests, errors_sent, frames_sent, bytes_sent, slow_disconnects). ``loop`` is
    set by the server when it starts, before the first connection."""

    def __init__(self, market: VenueMarket, faults: FaultInjector, stats: dict[str, int], max_queue: int) -> None:
        self.market = market
        self.max_queue = max_queue
        self.conns: set[Conn] = set()
        self.subs: dict[tuple[str, str], dict[Conn, bool]] = {}  # books: value = snapshot sent
        self.loop: asyncio.AbstractEventLoop | None = None
        self._faults = faults
        self._stats = stats

    async def handler(self, ws: ServerConnection) -> None:
        """Serve one connection until it closes."""
        conn = Conn(ws)
        st = self._stats
        self.conns.add(conn)
        st["connections"] += 1
        st["connections_total"] += 1
        conn.writer = asyncio.create_task(self._writer(conn))
        try:
            async for msg in ws:
                self._on_message(conn, msg)
        except ConnectionClosed:
            pass
        finally:
            self._forget(conn)
            await cancel_task(conn.writer)

    def cut_all(self, graceful: bool = False) -> int:
        """Abort every connection (nothing more is queued to them), or close each with 1001 when
        ``graceful``. Returns how many."""
        conns = list(self.conns)
        for c in conns:
            if graceful:
                asyncio.ensure_future(c.ws.close(1001, "venue closed the connection"))
            else:
                c.dead = True
                c.ws.transport.abort()
        return len(conns)

    def backlogged(self, high: int) -> bool:
        """Whether any connection has more than ``high`` frames queued."""
        return any(c.queue.qsize() > high for c in self.conns)

    def send(self, conn: Conn, data: bytes, push: bool = True) -> None:
        """Queue ``data`` for ``conn`` (a data push when ``push``: the drop fault may take it)."""
        faults = self._faults
        if push and faults.drop_prob and faults.drops_push():  # counted in frames_dropped
            return
        if conn.dead:
            return
        q = conn.queue
        if q.qsize() >= self.max_queue:  # never in speed <= 0 mode: the pump waits for the writers
            conn.dead = True
            self._stats["slow_disconnects"] += 1
            conn.ws.transport.abort()
            return
        if faults.delay.active:
            due = faults.frame_due_s(self.loop.time(), conn.last_due)
            conn.last_due = due
        else:
            due = 0.0
        q.put_nowait((due, data))

    def _forget(self, conn: Conn) -> None:
        self.conns.discard(conn)
        self._stats["connections"] -= 1
        for key in conn.subs:
            self._drop_subscriber(key, conn)
        self._stats["subscriptions"] -= len(conn.subs)
        conn.subs = set()

    def _drop_subscriber(self, key: tuple[str, str], conn: Conn) -> None:
        subs = self.subs.get(key)
        if subs is not None:
            subs.pop(conn, None)
            if not subs:
                del self.subs[key]

    async def _writer(self, conn: Conn) -> None:
        q, ws, loop, st = conn.queue, conn.ws, self.loop, self._stats
        try:
            while True:
                due, data = await q.get()
                if due:
                    wait = due - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                await ws.send(data, text=True)
                st["frames_sent"] += 1
                st["bytes_sent"] += len(data)
        except ConnectionClosed:
            pass

    def _on_message(self, conn: Conn, msg) -> None:
        self._stats["requests"] += 1
        if msg == PING_TEXT:
            self.send(conn, PONG_FRAME, push=False)
            return
        market = self.market
        for req in parse_request(msg, market.states, market.inst_types):
            if req.op == OP_PING:
                self.send(conn, PONG_FRAME, push=False)
            elif req.op == OP_ERROR:
                self._stats["errors_sent"] += 1
                self.send(conn, error_frame(req.code, req.msg, req.arg), push=False)
            elif req.op == OP_SUBSCRIBE:
                self._subscribe(conn, req.arg)
            else:
                self._unsubscribe(conn, req.arg)

    def _subscribe(self, conn: Conn, arg: dict) -> None:
        channel, inst_id = arg["channel"], arg["instId"]
        key = (channel, inst_id)
        self.send(conn, event_frame("subscribe", arg), push=False)
        subs = self.subs.setdefault(key, {})
        if key not in conn.subs:
            conn.subs.add(key)
            self._stats["subscriptions"] += 1
        market = self.market
        if channel == CHANNEL_BOOKS:
            frame = market.books_snapshot_frame(inst_id)
            subs[conn] = frame is not None  # else: the first replayed snapshot goes to it
        elif channel == CHANNEL_TRADE:
            frame = market.trades_snapshot_frame(inst_id)
            subs[conn] = True
        else:
            frame = market.depth_frame(inst_id, channel)
            subs[conn] = True
        if frame is not None:
            self.send(conn, frame, push=False)

    def _unsubscribe(self, conn: Conn, arg: dict) -> None:
        key = (arg["channel"], arg["instId"])
        self.send(conn, event_frame("unsubscribe", arg), push=False)
        if key in conn.subs:
            conn.subs.discard(key)
            self._stats["subscriptions"] -= 1
            self._drop_subscriber(key, conn)
