"""The paper venue's market-data server: the Bitget v2 public WebSocket dialect on 127.0.0.1.

A thin asyncio layer (``websockets.asyncio.server``) over the sans-I/O core: requests are parsed
by ``market.parse_request``, frames are built by ``market.VenueMarket`` from the events of a source
(``sources.SyntheticSource`` or ``sources.ReplaySource``). This module only moves bytes, keeps
time, and injects faults.

Dialect (see ``pipeline.venue.market`` for the frames)::

    client: ping                                  server: pong
    client: {"op":"subscribe","args":[{"instType":"SPOT","channel":"books","instId":"BTCUSDT"}]}
    server: {"event":"subscribe","arg":{...}}      one per args entry, or
            {"event":"error","code":"30001","msg":"...doesn't exist","arg":{...}}
            then: books -> a snapshot of the full book, then updates; books1/5/15 -> a snapshot
            now and on every book change; trade -> a snapshot of recent trades (if any), then updates
    client: {"op":"unsubscribe","args":[...]}     server: {"event":"unsubscribe","arg":{...}}

Any URL path is accepted; clients use ``ws://127.0.0.1:<port>/v2/ws/public`` (``url``). The server
binds 127.0.0.1 only. Port 0 picks a free port; ``port`` holds the bound one after ``start``.

Time: a market clock runs at ``speed`` times the monotonic clock (``clock``, default the event
loop's) while not paused; the source's units due by the market time are published (the synthetic
model's due steps folded into one update per instrument). ``speed <= 0`` publishes one unit at a
time as fast as the slowest client takes them (no client is dropped for being slow in that mode).
``start_paused=True`` holds the clock until ``resume()``; ``advance(n)`` publishes the next ``n``
units now, whatever the clock (deterministic tests).

Per connection, outgoing frames wait in a queue of at most ``max_queue`` frames, sent in order by
one writer task; in paced mode a client that lets it fill is disconnected (``slow_disconnects``).

Fault switches (construction arguments and thread-safe methods; each counts in ``faults_injected``):

- ``drop_connections(graceful=False)``: cut every connection now (transport abort: the client sees
  an abnormal closure, 1006) or close them with 1001 when ``graceful``.
- ``skip_seq(n=1, inst_id=None)``: the next ``books`` update's seq jumps by ``n`` more (negative:
  goes back, which ``BitgetBooks`` reports as SEQ_GAP; a forward jump is legal in v2).
- ``corrupt_checksum(inst_id=None)``: the next ``books`` update carries a wrong non-zero checksum.
- ``set_delay_ms(ms)`` / ``delay_ms=``: every outgoing frame (pongs and acks too) leaves ``ms``
  later than it was queued, order kept.
- ``set_drop_prob(p)`` / ``drop_prob=``: each data push to each client is dropped with probability
  ``p`` (seeded by ``fault_seed``; acks, errors and pongs are never dropped).
- ``stall(seconds)``: no push for ``seconds`` (the market clock stops too, so the feed resumes
  consistently); pings and subscriptions are still answered.

Stress faults (``make stress``; each has its own counter besides ``faults_injected``):

- ``set_delay_jitter_ms(ms)`` / ``delay_jitter_ms=``: with ``ms`` > 0, each outgoing frame's extra
  delay is drawn from a Gaussian N(``delay_ms``, ``ms``) clipped to [0, 50] ms (``DelayFault``,
  seeded by ``fault_seed``) instead of the fixed ``delay_ms``. Order is kept per connection: a frame
  is never due before the frame queued ahead of it (due = max(now + draw, previous due)). Turning
  it on counts once in ``faults_injected`` (at construction too); each jittered frame counts in
  ``jitter_frames``.
- Timed faults, ``disconnect_every_s`` / ``gap_every_s`` / ``bad_checksum_every_s`` (0 = off;
  ``set_timed_faults`` changes them while running): every that many seconds of MARKET time (the
  source's clock: the loop clock times ``speed`` while not paused or stalled; ``advance(n)`` moves
  it by n units, so tests are deterministic) the server cuts every connection (as
  ``drop_connections()``; ``disconnects``), makes the next books update of every instrument jump
  its seq by ``GAP_SEQ`` = 5 more (as ``skip_seq(5)``; ``gaps``), or makes the next books update of
  every instrument carry a wrong checksum (as ``corrupt_checksum()``; ``bad_checksums``). They are
  checked before each published unit, so the unit due at the fault's time already sees it; when
  several periods passed at once (a late loop) the fault fires once and the missed periods are
  skipped. A looping replay's clock keeps counting across the loop. The hand-called switches count
  in the same counters.
- Price jumps: a ``SyntheticSource`` made with ``jump_prob`` / ``jump_ticks`` shifts a book now
  and then (published as ordinary updates); the server counts them in ``jumps`` and
  ``faults_injected`` as they are published.

Order side: ``add_market_listener(listener)`` lets an object (the order engine,
``pipeline.venue.orders.OrderEngine``) see every published book change and trade of the market on
the server's loop: ``listener.book_changed(inst_id)`` after the change is applied (the new book is
``market.levels(inst_id)``), ``listener.traded(inst_id, trades)`` with the event's v2 trade objects.
A listener that raises is counted (``listener_errors``) and logged once; the market goes on.

Control methods may be called from any thread: off the server's loop they run on it and wait.
Called before ``start`` they take effect from the start (a ``stall`` counts from ``start``).

Standalone: ``python -m pipeline.venue.server --port 8765`` (see ``main``).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from pipeline.trading.bitget.protocol import CHANNEL_BOOKS, CHANNEL_TRADE, PING_TEXT
from pipeline.venue.errors import VenueError
from pipeline.venue.market import (
    DEPTH_CHANNELS,
    OP_ERROR,
    OP_PING,
    OP_SUBSCRIBE,
    PONG_FRAME,
    RECENT_TRADES,
    BookEvent,
    VenueMarket,
    error_frame,
    event_frame,
    parse_request,
)
from pipeline.venue.sources import InstrumentSpec, ReplaySource, SyntheticSource
from pipeline.runtime.portfile import write_port_file

HOST = "127.0.0.1"
PATH = "/v2/ws/public"
MAX_REQUEST_BYTES = 64 * 1024
CONTROL_TIMEOUT_S = 10.0

#: Counter names of ``VenueServer.stats()``.
STAT_NAMES = (
    "connections",  # open now
    "connections_total",
    "subscriptions",  # (connection, channel, instId) held now
    "requests",  # client frames received
    "errors_sent",  # error events answered
    "frames_sent",
    "bytes_sent",
    "frames_dropped",  # data pushes dropped by the drop_prob fault
    "faults_injected",
    "slow_disconnects",
    "book_events",
    "trade_events",
    "units",  # source units published (synthetic steps or capture frames)
    "replay_done",  # 1 once a replay reached its end (without loop)
    "replay_loops",
    "listener_errors",  # exceptions of market listeners (the order side), counted and skipped
    "jitter_frames",  # frames given a jittered delay (delay_jitter_ms)
    "jumps",  # synthetic price jumps published (the source's jump_prob)
    "disconnects",  # connection cuts: drop_connections, by hand or every disconnect_every_s
    "gaps",  # seq jumps: skip_seq, by hand or every gap_every_s
    "bad_checksums",  # corrupted checksums: corrupt_checksum, by hand or every bad_checksum_every_s
)

#: seq jump of the ``gap_every_s`` fault (a forward jump: legal in v2, seen as a hole by a client)
GAP_SEQ = 5
#: the range a jittered delay is clipped to
MAX_JITTER_DELAY_MS = 50.0


class DelayFault:
    """The per-frame extra delay (sans-I/O): ``delay_ms`` fixed, or with ``jitter_ms`` > 0 a draw
    from N(``delay_ms``, ``jitter_ms``) clipped to [0, ``MAX_JITTER_DELAY_MS``], from a generator
    seeded by ``seed`` (the same seed gives the same draws).

    Raises (construction and ``set``):
        VenueError: ``delay_ms`` outside 0..600000, ``jitter_ms`` outside 0..50 (or not finite).
    """

    def __init__(self, delay_ms: float = 0.0, jitter_ms: float = 0.0, seed: int = 0) -> None:
        self.rng = random.Random(f"venue-jitter:{int(seed)}")
        self.delay_ms = 0.0
        self.jitter_ms = 0.0
        self.set(delay_ms, jitter_ms)

    def set(self, delay_ms: float | None = None, jitter_ms: float | None = None) -> None:
        """Change the mean delay and / or the jitter (None: unchanged)."""
        if delay_ms is not None:
            d = float(delay_ms)
            if not 0.0 <= d <= 600_000.0:
                raise VenueError(f"delay_ms must be in 0..600000, got {delay_ms}")
            self.delay_ms = d
        if jitter_ms is not None:
            j = float(jitter_ms)
            if not 0.0 <= j <= MAX_JITTER_DELAY_MS:
                raise VenueError(f"delay_jitter_ms must be in 0..{MAX_JITTER_DELAY_MS:g}, got {jitter_ms}")
            self.jitter_ms = j

    @property
    def active(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms)

    @property
    def jittered(self) -> bool:
        return bool(self.jitter_ms)

    def draw_ms(self) -> float:
        """The next frame's extra delay in ms (fixed without jitter; one draw with it)."""
        if not self.jitter_ms:
            return self.delay_ms
        return min(max(self.rng.gauss(self.delay_ms, self.jitter_ms), 0.0), MAX_JITTER_DELAY_MS)

    def due_s(self, now_s: float, last_due_s: float) -> float:
        """When a frame queued at ``now_s`` behind a frame due at ``last_due_s`` is due: never
        before that one (order kept). 0.0 when no delay is set (send at once, in queue order)."""
        if not self.active:
            return 0.0
        return max(now_s + self.draw_ms() / 1000.0, last_due_s)


class FaultTimer:
    """A fault every ``every_s`` seconds of an elapsed clock (sans-I/O; 0 = off): ``due(elapsed_ms)``
    is True once when ``elapsed_ms`` reaches the next multiple of the period (then the schedule
    moves to the first multiple after ``elapsed_ms``: missed periods are skipped, not replayed).

    Raises:
        VenueError: ``every_s`` negative or not finite.
    """

    def __init__(self, every_s: float = 0.0, start_ms: float = 0.0, name: str = "every_s") -> None:
        e = float(every_s)
        if not (0.0 <= e < float("inf")):
            raise VenueError(f"{name} must be a finite number >= 0 (0: off), got {every_s}")
        self.every_ms = e * 1000.0
        self.start_ms = float(start_ms)
        self.next_ms = self.start_ms + self.every_ms
        self.fired = 0

    def due(self, elapsed_ms: float) -> bool:
        if not self.every_ms or elapsed_ms < self.next_ms:
            return False
        self.next_ms = self.start_ms + ((elapsed_ms - self.start_ms) // self.every_ms + 1) * self.every_ms
        self.fired += 1
        return True


class _Conn:
    __slots__ = ("ws", "queue", "writer", "subs", "last_due", "dead")

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.queue: asyncio.Queue = asyncio.Queue()
        self.writer: asyncio.Task | None = None
        self.subs: set[tuple[str, str]] = set()
        self.last_due = 0.0
        self.dead = False  # aborted by the venue: nothing more is queued


class VenueServer:
    """The market-data WebSocket server of the paper venue (see the module docstring)."""

    def __init__(self, source, *, port: int = 0, speed: float = 1.0, start_paused: bool = False,
                 loop_replay: bool = False, delay_ms: float = 0.0, drop_prob: float = 0.0, fault_seed: int = 0,
                 max_queue: int = 10_000, max_units_per_push: int = 1_000, recent_trades: int = RECENT_TRADES,
                 clock: Callable[[], float] | None = None, delay_jitter_ms: float = 0.0,
                 disconnect_every_s: float = 0.0, gap_every_s: float = 0.0,
                 bad_checksum_every_s: float = 0.0) -> None:
        """``source``: a ``SyntheticSource`` or ``ReplaySource``; ``clock``: monotonic seconds for the
        market clock (default: the event loop's); the faults: see the module docstring.

        Raises:
            VenueError: a port outside 0..65535, a bad fault value, ``max_queue`` < 2.
        """
        if not 0 <= int(port) <= 65535:
            raise VenueError(f"port must be in 0..65535, got {port}")
        if max_queue < 2:
            raise VenueError(f"max_queue must be >= 2, got {max_queue}")
        self.source = source
        self.market = VenueMarket(source.inst_ids, recent_trades=recent_trades)
        for ev in source.initial_events():
            self._apply_quiet(ev)
        self.requested_port = int(port)
        self.port = 0
        self.speed = float(speed)
        self.loop_replay = bool(loop_replay)
        self.max_queue = int(max_queue)
        self.max_units_per_push = int(max_units_per_push)
        self._clock = clock
        self._paused = bool(start_paused)
        self._stalled = False
        self._stall_handle: asyncio.TimerHandle | None = None
        self._stall_s = 0.0
        self._drop_prob = 0.0
        self._delay = DelayFault(delay_ms, delay_jitter_ms, fault_seed)
        self._set_drop(drop_prob)
        self._rng = random.Random(fault_seed)
        self._stats = dict.fromkeys(STAT_NAMES, 0)
        if self._delay.jittered:
            self._stats["faults_injected"] += 1
        self._fault_prev_ms = 0.0
        self._fault_elapsed_ms = 0.0
        self._timers: dict[str, FaultTimer] = {}
        self._set_timers(disconnect_every_s, gap_every_s, bad_checksum_every_s)
        self._conns: set[_Conn] = set()
        self._subs: dict[tuple[str, str], dict[_Conn, bool]] = {}  # books: value = snapshot sent
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._pump_task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._market_ms = 0.0
        self._listeners: list = []
        #: the first few listener exceptions (text), for the stage to log
        self.listener_failures: list[str] = []

    def _notify(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the order side must never stop the market data
            self._stats["listener_errors"] += 1
            if self._stats["listener_errors"] <= 10:
                self.listener_failures.append(f"{type(exc).__name__}: {exc}")

    def add_market_listener(self, listener) -> None:
        """Call ``listener.book_changed(inst_id)`` / ``listener.traded(inst_id, trades)`` for every
        book change / trade event published from now on (on the server's loop)."""
        self._listeners.append(listener)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> int:
        """Bind 127.0.0.1:``port`` and start publishing; returns the bound port.

        Raises:
            OSError: the port cannot be bound.
        """
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._server = await serve(self._handler, HOST, self.requested_port, compression=None,
                                   max_size=MAX_REQUEST_BYTES, ping_interval=None)
        self.port = self._server.sockets[0].getsockname()[1]
        if self._stalled and self._stall_handle is None:  # stall() called before start
            self._stall_handle = self._loop.call_later(self._stall_s, self._end_stall)
        self._pump_task = asyncio.create_task(self._pump(), name="venue-pump")
        return self.port

    async def stop(self) -> None:
        """Stop publishing, close every connection (1001) and the listening socket."""
        if self._pump_task is not None:
            self._pump_task.cancel()
            with suppress(asyncio.CancelledError):
                await self._pump_task
        if self._stall_handle is not None:
            self._stall_handle.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://{HOST}:{self.port}{PATH}"

    @property
    def pump_task(self) -> asyncio.Task | None:
        """The publishing task (done only after ``stop`` or on a bug)."""
        return self._pump_task

    @property
    def inst_ids(self) -> list[str]:
        return self.market.inst_ids

    def stats(self) -> dict[str, int]:
        """A copy of the counters (``STAT_NAMES``); safe from any thread."""
        return dict(self._stats)

    # -- thread-safe control ------------------------------------------------------------------

    def _control(self, fn, *args):
        loop = self._loop
        if loop is None or loop.is_closed():
            return fn(*args)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return fn(*args)
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # handed to the caller's thread
                fut.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return fut.result(timeout=CONTROL_TIMEOUT_S)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def pause(self) -> None:
        """Hold the market clock: nothing is published until ``resume`` (``advance`` still works)."""
        def do():
            self._paused = True
            self._poke()
        self._control(do)

    def resume(self) -> None:
        """Let the market clock run again (from where it stopped)."""
        def do():
            self._paused = False
            self._poke()
        self._control(do)

    def set_speed(self, speed: float) -> None:
        """Market time per real time (<= 0: as fast as the clients take it)."""
        def do():
            self.speed = float(speed)
            self._poke()
        self._control(do)

    def advance(self, units: int = 1) -> int:
        """Publish the next ``units`` units of the source now, one push per unit; returns how many
        were published (fewer when a replay ends)."""
        def do():
            n = 0
            for _ in range(int(units)):
                if self.source.exhausted:
                    break
                self._publish(self.source.take(1))
                n += 1
            return n
        return self._control(do)

    def _drop_all(self, graceful: bool = False) -> int:
        conns = list(self._conns)
        for c in conns:
            if graceful:
                asyncio.ensure_future(c.ws.close(1001, "venue closed the connection"))
            else:
                c.dead = True
                c.ws.transport.abort()
        self._stats["faults_injected"] += 1
        self._stats["disconnects"] += 1
        return len(conns)

    def _skip_seq(self, n: int, inst_id: str | None = None) -> None:
        self.market.skip_seq(n, inst_id)
        self._stats["faults_injected"] += 1
        self._stats["gaps"] += 1

    def _corrupt_checksum(self, inst_id: str | None = None) -> None:
        self.market.corrupt_next_checksum(inst_id)
        self._stats["faults_injected"] += 1
        self._stats["bad_checksums"] += 1

    def drop_connections(self, graceful: bool = False) -> int:
        """Fault: cut every open connection (abort), or close each with 1001 when ``graceful``.
        Returns how many."""
        return self._control(self._drop_all, graceful)

    def skip_seq(self, n: int = 1, inst_id: str | None = None) -> None:
        """Fault: the next books update's seq jumps by ``n`` more (see the module docstring).

        Raises:
            VenueError: an unknown ``inst_id``.
        """
        self._control(self._skip_seq, n, inst_id)

    def corrupt_checksum(self, inst_id: str | None = None) -> None:
        """Fault: the next books update (of ``inst_id``, or of each instrument) carries a wrong checksum.

        Raises:
            VenueError: an unknown ``inst_id``.
        """
        self._control(self._corrupt_checksum, inst_id)

    def _set_timers(self, disconnect_every_s: float | None, gap_every_s: float | None,
                    bad_checksum_every_s: float | None) -> None:
        new = {}
        for name, every in (("disconnect_every_s", disconnect_every_s), ("gap_every_s", gap_every_s),
                            ("bad_checksum_every_s", bad_checksum_every_s)):
            if every is not None:
                new[name] = FaultTimer(every, self._fault_elapsed_ms, name)
        for name, timer in new.items():  # all validated first: a bad value changes nothing
            if timer.every_ms:
                self._timers[name] = timer
            else:
                self._timers.pop(name, None)

    def set_timed_faults(self, *, disconnect_every_s: float | None = None, gap_every_s: float | None = None,
                         bad_checksum_every_s: float | None = None) -> None:
        """Fault: (re)start the timed faults (None: unchanged; 0: off), counted from the market
        time now (see the module docstring).

        Raises:
            VenueError: a negative or non-finite period.
        """
        self._control(self._set_timers, disconnect_every_s, gap_every_s, bad_checksum_every_s)

    @property
    def timed_faults(self) -> dict[str, float]:
        """The timed faults on now: name -> period in seconds."""
        return self._control(lambda: {name: t.every_ms / 1000.0 for name, t in self._timers.items()})

    def _timed_faults(self) -> None:
        """Fire the timed faults due by the market time of the unit about to be published."""
        t = float(self.source.market_ms)
        d = t - self._fault_prev_ms
        if d < 0:  # a replay started again: its clock went back to 0
            d = t
        self._fault_prev_ms = t
        self._fault_elapsed_ms += d
        if not self._timers:
            return
        el = self._fault_elapsed_ms
        timers = self._timers
        if (tm := timers.get("disconnect_every_s")) is not None and tm.due(el):
            self._drop_all()
        if (tm := timers.get("gap_every_s")) is not None and tm.due(el):
            self._skip_seq(GAP_SEQ)
        if (tm := timers.get("bad_checksum_every_s")) is not None and tm.due(el):
            self._corrupt_checksum()

    def _set_drop(self, p: float) -> None:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise VenueError(f"drop_prob must be in 0..1, got {p}")
        self._drop_prob = p

    def set_delay_ms(self, ms: float) -> None:
        """Fault: delay every outgoing frame by ``ms`` (0 turns it off; with jitter on: the mean).

        Raises:
            VenueError: ``ms`` outside 0..600000.
        """
        def do():
            self._delay.set(delay_ms=ms)
            if ms:
                self._stats["faults_injected"] += 1
        self._control(do)

    def set_delay_jitter_ms(self, ms: float) -> None:
        """Fault: jitter each outgoing frame's delay, N(delay_ms, ``ms``) clipped to [0, 50] ms (0
        turns it off; see the module docstring).

        Raises:
            VenueError: ``ms`` outside 0..50.
        """
        def do():
            self._delay.set(jitter_ms=ms)
            if ms:
                self._stats["faults_injected"] += 1
        self._control(do)

    def set_drop_prob(self, p: float) -> None:
        """Fault: drop each data push with probability ``p`` (0 turns it off)."""
        def do():
            self._set_drop(p)
            if p:
                self._stats["faults_injected"] += 1
        self._control(do)

    def stall(self, seconds: float) -> None:
        """Fault: publish nothing for ``seconds`` (stale feed); the market clock stops meanwhile."""
        def do():
            if self._stall_handle is not None:
                self._stall_handle.cancel()
                self._stall_handle = None
            self._stalled = True
            self._stall_s = max(float(seconds), 0.0)
            if self._loop is not None:  # else: from start()
                self._stall_handle = self._loop.call_later(self._stall_s, self._end_stall)
            self._stats["faults_injected"] += 1
            self._poke()
        self._control(do)

    def _end_stall(self) -> None:
        self._stalled = False
        self._stall_handle = None
        self._poke()

    def levels(self, inst_id: str, n: int | None = None) -> tuple[list, list]:
        """The venue's own book (bids, asks) best first as [price, size] strings."""
        def do():
            bids, asks = self.market.levels(inst_id, n)
            return [list(lv) for lv in bids], [list(lv) for lv in asks]
        return self._control(do)

    def checksum(self, inst_id: str) -> int:
        return self._control(self.market.checksum, inst_id)

    def seq(self, inst_id: str) -> int:
        return self._control(lambda: self.market.states[inst_id].seq)

    # -- connections --------------------------------------------------------------------------

    async def _handler(self, ws: ServerConnection) -> None:
        conn = _Conn(ws)
        st = self._stats
        self._conns.add(conn)
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
            conn.writer.cancel()
            with suppress(asyncio.CancelledError):
                await conn.writer

    def _forget(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        self._stats["connections"] -= 1
        for key in conn.subs:
            subs = self._subs.get(key)
            if subs is not None:
                subs.pop(conn, None)
                if not subs:
                    del self._subs[key]
        self._stats["subscriptions"] -= len(conn.subs)
        conn.subs = set()

    async def _writer(self, conn: _Conn) -> None:
        q, ws, loop, st = conn.queue, conn.ws, self._loop, self._stats
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

    def _send(self, conn: _Conn, data: bytes, push: bool = True) -> None:
        if push and self._drop_prob and self._rng.random() < self._drop_prob:
            self._stats["frames_dropped"] += 1
            return
        if conn.dead:
            return
        q = conn.queue
        if q.qsize() >= self.max_queue:  # never in speed <= 0 mode: the pump waits for the writers
            conn.dead = True
            self._stats["slow_disconnects"] += 1
            conn.ws.transport.abort()
            return
        delay = self._delay
        if delay.active:
            due = delay.due_s(self._loop.time(), conn.last_due)
            conn.last_due = due
            if delay.jitter_ms:
                self._stats["jitter_frames"] += 1
        else:
            due = 0.0
        q.put_nowait((due, data))

    def _on_message(self, conn: _Conn, msg) -> None:
        self._stats["requests"] += 1
        if msg == PING_TEXT:
            self._send(conn, PONG_FRAME, push=False)
            return
        market = self.market
        for req in parse_request(msg, market.states, market.inst_type):
            if req.op == OP_PING:
                self._send(conn, PONG_FRAME, push=False)
            elif req.op == OP_ERROR:
                self._stats["errors_sent"] += 1
                self._send(conn, error_frame(req.code, req.msg, req.arg), push=False)
            elif req.op == OP_SUBSCRIBE:
                self._subscribe(conn, req.arg)
            else:
                self._unsubscribe(conn, req.arg)

    def _subscribe(self, conn: _Conn, arg: dict) -> None:
        channel, inst_id = arg["channel"], arg["instId"]
        key = (channel, inst_id)
        self._send(conn, event_frame("subscribe", arg), push=False)
        subs = self._subs.setdefault(key, {})
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
            self._send(conn, frame, push=False)

    def _unsubscribe(self, conn: _Conn, arg: dict) -> None:
        key = (arg["channel"], arg["instId"])
        self._send(conn, event_frame("unsubscribe", arg), push=False)
        if key in conn.subs:
            conn.subs.discard(key)
            self._stats["subscriptions"] -= 1
            subs = self._subs.get(key)
            if subs is not None:
                subs.pop(conn, None)
                if not subs:
                    del self._subs[key]

    # -- publishing ---------------------------------------------------------------------------

    def _apply_quiet(self, ev) -> None:
        if type(ev) is BookEvent:
            self.market.apply_book(ev)
        else:
            self.market.apply_trades(ev)

    def _publish(self, events: Sequence) -> None:
        market, st, all_subs, send = self.market, self._stats, self._subs, self._send
        st["units"] += 1
        self._timed_faults()
        jumps = getattr(self.source, "jumps", 0)
        if jumps != st["jumps"]:
            st["faults_injected"] += jumps - st["jumps"]
            st["jumps"] = jumps
        for ev in events:
            if type(ev) is BookEvent:
                ch = market.apply_book(ev)
                if ch is None:
                    continue
                st["book_events"] += 1
                inst_id = ch.inst_id
                for listener in self._listeners:
                    self._notify(listener.book_changed, inst_id)
                subs = all_subs.get((CHANNEL_BOOKS, inst_id))
                if subs:
                    frame = None
                    for conn, live in subs.items():
                        if live or ch.snapshot:
                            if frame is None:
                                frame = market.books_frame(ch)
                            if not live:
                                subs[conn] = True
                            send(conn, frame)
                for channel in DEPTH_CHANNELS:
                    subs = all_subs.get((channel, inst_id))
                    if subs:
                        frame = market.depth_frame(inst_id, channel, ch.push_ts_ms)
                        for conn in subs:
                            send(conn, frame)
            else:
                tr = market.apply_trades(ev)
                if tr is None:
                    continue
                st["trade_events"] += 1
                for listener in self._listeners:
                    self._notify(listener.traded, tr.inst_id, tr.trades)
                subs = all_subs.get((CHANNEL_TRADE, tr.inst_id))
                if subs:
                    frame = market.trades_frame(tr)
                    for conn in subs:
                        send(conn, frame)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else self._loop.time()

    async def _wait_wake(self, timeout: float | None) -> None:
        wake = self._wake
        if wake.is_set():
            wake.clear()
            return
        if timeout is None:
            await wake.wait()
        elif timeout > 0:
            with suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
        wake.clear()

    async def _wait_drained(self) -> None:
        high = self.max_queue // 2
        while any(c.queue.qsize() > high for c in self._conns):
            await asyncio.sleep(0.0005)

    def _finished(self) -> bool:
        """At the end of a finite source: rewind (loop) or mark done. True when done."""
        src = self.source
        if self.loop_replay:
            src.rewind()
            self._market_ms = 0.0
            self._stats["replay_loops"] += 1
            return False
        self._stats["replay_done"] = 1
        return True

    async def _pump(self) -> None:
        src = self.source
        last = self._now()
        while True:
            if self._paused or self._stalled:
                await self._wait_wake(None)
                last = self._now()
                continue
            if src.exhausted:
                if self._finished():
                    await self._wait_wake(None)
                    last = self._now()
                continue
            if self.speed <= 0:
                await self._wait_drained()
                if self._paused or self._stalled or src.exhausted:
                    continue
                self._publish(src.take(1))
                await asyncio.sleep(0)
                last = self._now()
                continue
            now = self._now()
            self._market_ms += (now - last) * 1000.0 * self.speed
            last = now
            events = src.pending(self._market_ms, self.max_units_per_push)
            if events:
                self._publish(events)
            nxt = src.next_due_ms()
            if nxt is None:
                continue
            await self._wait_wake(max(nxt - self._market_ms, 0.0) / self.speed / 1000.0)


# --------------------------------------------------------------------------------------------
# Building a server from parameters; running it in a thread


def instrument_specs(instruments, venue: str | None = "paper") -> list[InstrumentSpec]:
    """``InstrumentSpec``s of config instruments (``pipeline.runtime.config.InstrumentConfig``) whose
    ``venue`` is ``venue`` (all when None)."""
    return [InstrumentSpec(i.symbol, i.tick_size, i.lot_size) for i in instruments if venue is None or i.venue == venue]


def make_source(kind: str, *, instruments: Sequence[InstrumentSpec] = (), capture: str | Path | None = None,
                seed: int = 1, step_ms: int | None = None, start_ms: int | None = None, jump_prob: float = 0.0,
                jump_ticks: int = 3):
    """A ``SyntheticSource`` (``kind`` "synthetic"; ``start_ms`` default: now, wall clock; the
    price-jump fault ``jump_prob`` / ``jump_ticks``) or a ``ReplaySource`` of ``capture`` (``kind``
    "replay"; no jumps).

    Raises:
        VenueError: an unknown kind, no instruments, no capture for a replay, an unreadable capture
            (``ReplayError``), a bad jump value, jumps asked of a replay.
    """
    if kind == "synthetic":
        return SyntheticSource(instruments, seed=seed, step_ms=step_ms,
                               start_ms=int(time.time() * 1000) if start_ms is None else start_ms,
                               jump_prob=jump_prob, jump_ticks=jump_ticks)
    if kind == "replay":
        if not capture:
            raise VenueError("source 'replay' needs a capture path")
        if jump_prob:
            raise VenueError("jump_prob is a fault of the synthetic source only (a replay's book is the capture's)")
        return ReplaySource.from_capture(capture)
    raise VenueError(f"unknown source {kind!r}; known: 'synthetic', 'replay'")


class VenueThread:
    """Runs a ``VenueServer`` on its own asyncio loop in a daemon thread.

    ``start()`` returns the bound port once the server listens (or raises what failed);
    ``stop()`` closes it and joins the thread. ``error`` holds an exception that ended the thread.
    """

    def __init__(self, server: VenueServer, name: str = "venue", extra: Sequence = ()) -> None:
        """``extra``: more services to run on the same loop (each with ``async start()``,
        ``async stop()`` and ``pump_task``), e.g. an ``itch_udp.ItchUdpPublisher``."""
        self.server = server
        self.extra = list(extra)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_ev: asyncio.Event | None = None

    def start(self, timeout: float = 10.0) -> int:
        """Raises:
        OSError: the port cannot be bound. VenueError: the server did not start in time.
        """
        self._thread.start()
        if not self._ready.wait(timeout):
            raise VenueError(f"venue server did not start within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.server.port

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported through .error
            self.error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_ev = asyncio.Event()
        services = [self.server, *self.extra]
        started = []
        try:
            for svc in services:
                await svc.start()
                started.append(svc)
            self._ready.set()
            stop_task = asyncio.create_task(self._stop_ev.wait())
            pumps = [svc.pump_task for svc in services]
            try:
                await asyncio.wait({stop_task, *pumps}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_task.cancel()
        finally:
            for svc in reversed(started):
                await svc.stop()
        for pump in pumps:
            if pump.done() and not pump.cancelled() and pump.exception() is not None:
                raise pump.exception()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join the thread (at most ``timeout`` s)."""
        loop, ev = self._loop, self._stop_ev
        if loop is not None and ev is not None and not loop.is_closed():
            with suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(ev.set)
        if self._thread.is_alive():
            self._thread.join(timeout)


# --------------------------------------------------------------------------------------------
# Standalone


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.venue.server``: serve until SIGINT / SIGTERM."""
    ap = argparse.ArgumentParser(prog="python -m pipeline.venue.server",
                                 description="Paper venue: Bitget v2 public WebSocket market data on 127.0.0.1.")
    ap.add_argument("--config", default="configs/default.toml", help="instruments (venue = 'paper') for synthetic")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed, and in --port-file)")
    ap.add_argument("--port-file", default=None, help="write the bound port here")
    ap.add_argument("--source", choices=["synthetic", "replay"], default="synthetic")
    ap.add_argument("--capture", default=None, help="capture file for --source replay")
    ap.add_argument("--speed", type=float, default=1.0, help="market time per real time; 0 = as fast as possible")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--step-ms", type=int, default=None)
    ap.add_argument("--loop", action="store_true", help="replay: start again at the end")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--drop-prob", type=float, default=0.0)
    ap.add_argument("--delay-jitter-ms", type=float, default=0.0,
                    help="Gaussian jitter of the delay (clipped 0..50 ms)")
    ap.add_argument("--jump-prob", type=float, default=0.0, help="synthetic: chance of a price jump per step")
    ap.add_argument("--jump-ticks", type=int, default=3, help="synthetic: a jump moves the book 1..N ticks")
    ap.add_argument("--disconnect-every-s", type=float, default=0.0,
                    help="cut every connection every N s (market time)")
    ap.add_argument("--gap-every-s", type=float, default=0.0, help="seq gap (+5) every N s (market time)")
    ap.add_argument("--bad-checksum-every-s", type=float, default=0.0,
                    help="a wrong checksum every N s (market time)")
    ap.add_argument("--itch-port", type=int, default=0,
                    help="also send a synthetic ITCH session over MoldUDP64 to this UDP port on 127.0.0.1")
    ap.add_argument("--itch-events", type=int, default=100_000)
    ap.add_argument("--itch-rate", type=float, default=10_000.0, help="ITCH messages a second (0 = as fast as possible)")
    args = ap.parse_args(argv)
    from pipeline.runtime.config import load_config

    specs = instrument_specs(load_config(args.config).instruments) if args.source == "synthetic" else []
    source = make_source(args.source, instruments=specs, capture=args.capture, seed=args.seed, step_ms=args.step_ms,
                         jump_prob=args.jump_prob, jump_ticks=args.jump_ticks)
    server = VenueServer(source, port=args.port, speed=args.speed, loop_replay=args.loop, delay_ms=args.delay_ms,
                         drop_prob=args.drop_prob, fault_seed=args.seed, delay_jitter_ms=args.delay_jitter_ms,
                         disconnect_every_s=args.disconnect_every_s, gap_every_s=args.gap_every_s,
                         bad_checksum_every_s=args.bad_checksum_every_s)

    itch = None
    if args.itch_port:
        from pipeline.venue.itch_udp import ItchUdpPublisher, MoldStream

        itch = ItchUdpPublisher(MoldStream.synthetic(args.seed, args.itch_events), args.itch_port,
                                rate_msgs_per_s=args.itch_rate)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        port = await server.start()
        if args.port_file:
            write_port_file(args.port_file, port)
        print(f"venue: {server.url} ({args.source}; {', '.join(server.inst_ids)})", flush=True)
        if itch is not None:
            await itch.start()
            print(f"venue: ITCH over MoldUDP64 to udp://{HOST}:{args.itch_port} from port {itch.request_port}",
                  flush=True)
        try:
            await stop.wait()
        finally:
            if itch is not None:
                await itch.stop()
            await server.stop()
            if args.port_file:
                with suppress(OSError):
                    os.unlink(args.port_file)
            print(f"venue: stopped {server.stats()}", flush=True)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
