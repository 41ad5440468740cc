"""The paper venue's market-data server: the Bitget v2 public WebSocket dialect on 127.0.0.1.

A thin asyncio layer (``websockets.asyncio.server``) over the sans-I/O core: requests are parsed
by ``market.parse_request``, frames are built by ``market.VenueMarket`` from the events of a source
(``sources.SyntheticSource`` or ``sources.ReplaySource``), and the fault switches are decided by a
``faults.FaultInjector``. This module only moves bytes and keeps time.

Dialect (see ``pipeline.venue.market`` for the frames)::

    client: ping                                  server: pong
    client: {"op":"subscribe","args":[{"instType":"SPOT","channel":"books","instId":"BTCUSDT"}]}
            (instType: the instrument's own, ``inst_types``: "USDT-FUTURES" for a perpetual)
    server: {"event":"subscribe","arg":{...}}      one per args entry, or
            {"event":"error","code":"30001","msg":"...doesn't exist","arg":{...}}
            then: books -> a snapshot of the full book, then updates; books1/5/15 -> a snapshot
            now and on every book change; trade -> a snapshot of recent trades (if any), then updates
    client: {"op":"unsubscribe","args":[...]}     server: {"event":"unsubscribe","arg":{...}}

Any URL path is accepted; clients use ``ws://127.0.0.1:<port>/v2/ws/public`` (``url``). With a
private handler set (``set_private``: ``pipeline.venue.private_ws.PrivateChannels.handler``), a
path starting ``/v2/ws/private`` (``private_url``) goes to it instead: the login op and the
account's channels. The server
binds 127.0.0.1 only. Port 0 picks a free port; ``port`` holds the bound one after ``start``.

Time: a market clock runs at ``speed`` times the monotonic clock (``clock``, default the event
loop's) while not paused; the source's units due by the market time are published (the synthetic
model's due steps folded into one update per instrument). ``speed <= 0`` publishes one unit at a
time as fast as the slowest client takes them (no client is dropped for being slow in that mode).
``start_paused=True`` holds the clock until ``resume()``; ``advance(n)`` publishes the next ``n``
units now, whatever the clock (deterministic tests).

Per connection, outgoing frames wait in a queue of at most ``max_queue`` frames, sent in order by
one writer task; in paced mode a client that lets it fill is disconnected (``slow_disconnects``).
Accepts are bounded per pass of the loop and at most ``max_connections`` are open at once, one beyond
that reset as it is accepted (``connections_refused``; ``pipeline.venue.ws_accept``).

Fault switches (construction arguments, the fields of ``faults.FaultParams``, and thread-safe
methods; each counts in ``faults_injected``; decided by ``faults.FaultInjector``, which says what each
does):

- ``drop_connections(graceful=False)``: cut every connection now (transport abort: the client sees
  an abnormal closure, 1006), or close them with 1001 when ``graceful`` (``disconnects``).
- ``skip_seq(n=1, inst_id=None)``: the next ``books`` update's seq jumps by ``n`` more (negative:
  goes back, which ``BitgetBooks`` reports as SEQ_GAP; a forward jump is legal in v2; ``gaps``).
- ``corrupt_checksum(inst_id=None)``: the next ``books`` update carries a wrong non-zero checksum
  (``bad_checksums``).
- ``set_delay_ms`` / ``set_delay_jitter_ms`` / ``set_drop_prob``: frames delayed (fixed or jittered,
  order kept) or data pushes dropped (seeded by ``fault_seed``; acks, errors and pongs never).
- ``stall(seconds)``: no push for ``seconds`` (the market clock stops too, so the feed resumes
  consistently); pings and subscriptions are still answered.
- ``set_timed_faults`` / ``disconnect_every_s=`` / ``gap_every_s=`` / ``bad_checksum_every_s=``:
  every that many seconds of MARKET time (the source's clock: the loop clock times ``speed`` while
  not paused or stalled; ``advance(n)`` moves it by n units) what ``drop_connections()``,
  ``skip_seq(faults.GAP_SEQ)`` or ``corrupt_checksum()`` does, in the same counters.
- Price jumps of a ``SyntheticSource`` made with ``jump_prob`` / ``jump_ticks`` (ordinary updates)
  count in ``jumps`` and ``faults_injected`` as they are published.

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
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

from pipeline.runtime.portfile import write_port_file
from pipeline.trading.bitget.protocol import CHANNEL_BOOKS, CHANNEL_TRADE
from pipeline.venue.clients import Clients
from pipeline.venue.errors import VenueError
from pipeline.venue.faults import GAP_SEQ, FaultInjector, FaultParams, TimedFault
from pipeline.venue.market import DEPTH_CHANNELS, RECENT_TRADES, BookEvent, VenueMarket
from pipeline.venue.server_cli import arg_parser
from pipeline.venue.service import VenueThread, call_on_loop, cancel_task  # VenueThread: re-exported
from pipeline.venue.sources import instrument_specs, make_source
from pipeline.venue.ws_accept import listen

__all__ = ["HOST", "PATH", "STAT_NAMES", "VenueServer", "VenueThread", "main"]

HOST = "127.0.0.1"
PATH = "/v2/ws/public"
PRIVATE_PATH = "/v2/ws/private"
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
    "connections_refused",  # reset as accepted: max_connections were open (ws_accept)
)


class VenueServer:
    """The market-data WebSocket server of the paper venue (see the module docstring)."""

    def __init__(self, source, *, port: int = 0, speed: float = 1.0, start_paused: bool = False,
                 loop_replay: bool = False, delay_ms: float = 0.0, drop_prob: float = 0.0, fault_seed: int = 0,
                 max_queue: int = 10_000, max_units_per_push: int = 1_000, recent_trades: int = RECENT_TRADES,
                 clock: Callable[[], float] | None = None, delay_jitter_ms: float = 0.0,
                 disconnect_every_s: float = 0.0, gap_every_s: float = 0.0,
                 bad_checksum_every_s: float = 0.0, inst_types: Mapping[str, str] | None = None,
                 max_connections: int = 64) -> None:
        """``source``: a ``SyntheticSource`` or ``ReplaySource``; ``clock``: monotonic seconds for the
        market clock (default: the event loop's); the faults: ``faults.FaultParams`` (``fault_seed``
        is its ``seed``; see the module docstring); ``inst_types``: instId -> the instType it is
        published and subscribed under (``VenueMarket``; default, and any instrument missing: SPOT).

        Raises:
            VenueError: a port outside 0..65535, a bad fault value, ``max_queue`` or ``max_connections``
                too small, an unknown instType.
        """
        if not 0 <= int(port) <= 65535 or max_connections < 1:
            raise VenueError(f"port must be in 0..65535 and max_connections >= 1, got {port}, {max_connections}")
        self.max_connections, self.open_connections = int(max_connections), 0  # ws_accept.Limits
        if max_queue < 2:
            raise VenueError(f"max_queue must be >= 2, got {max_queue}")
        self.source = source
        self.market = VenueMarket(source.inst_ids, recent_trades=recent_trades, inst_type=inst_types or {})
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
        self._stats = dict.fromkeys(STAT_NAMES, 0)
        self._faults = FaultInjector(FaultParams(
            delay_ms=delay_ms, delay_jitter_ms=delay_jitter_ms, drop_prob=drop_prob, seed=fault_seed,
            disconnect_every_s=disconnect_every_s, gap_every_s=gap_every_s,
            bad_checksum_every_s=bad_checksum_every_s), self._stats)
        self._clients = Clients(self.market, self._faults, self._stats, self.max_queue)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._pump_task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._market_ms = 0.0
        self._listeners: list = []
        self._private = None  # the private WebSocket's handler (set_private), or None
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
        self._clients.loop = self._loop
        self._server = await listen(self._route, HOST, self.requested_port, self)
        self.port = self._server.sockets[0].getsockname()[1]
        if self._stalled and self._stall_handle is None:  # stall() called before start
            self._stall_handle = self._loop.call_later(self._stall_s, self._end_stall)
        self._pump_task = asyncio.create_task(self._pump(), name="venue-pump")
        return self.port

    async def stop(self) -> None:
        """Stop publishing, close every connection (1001) and the listening socket."""
        await cancel_task(self._pump_task)
        if self._stall_handle is not None:
            self._stall_handle.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def refused(self) -> None:
        """A connection was reset as it was accepted (``ws_accept.Limits``)."""
        self._stats["connections_refused"] += 1

    def set_private(self, handler) -> None:
        """Serve ``/v2/ws/private`` connections with ``handler(ws)`` (call before ``start``)."""
        self._private = handler

    async def _route(self, ws) -> None:
        private = self._private
        if private is not None and ws.request.path.startswith(PRIVATE_PATH):
            await private(ws)
        else:
            await self._clients.handler(ws)

    @property
    def url(self) -> str:
        return f"ws://{HOST}:{self.port}{PATH}"

    @property
    def private_url(self) -> str:
        return f"ws://{HOST}:{self.port}{PRIVATE_PATH}"

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

    def _control(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the server's loop (``service.call_on_loop``)."""
        return call_on_loop(self._loop, CONTROL_TIMEOUT_S, fn, *args, **kwargs)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def pause(self) -> None:
        """Hold the market clock: nothing is published until ``resume`` (``advance`` still works)."""
        self._control(self._set_paused, True)

    def resume(self) -> None:
        """Let the market clock run again (from where it stopped)."""
        self._control(self._set_paused, False)

    def _set_paused(self, paused: bool) -> None:
        self._paused = paused
        self._poke()

    def set_speed(self, speed: float) -> None:
        """Market time per real time (<= 0: as fast as the clients take it)."""
        self._control(self._set_speed, speed)

    def _set_speed(self, speed: float) -> None:
        self.speed = float(speed)
        self._poke()

    def advance(self, units: int = 1) -> int:
        """Publish the next ``units`` units of the source now, one push per unit; returns how many
        were published (fewer when a replay ends)."""
        return self._control(self._publish_units, units)

    def _publish_units(self, units: int) -> int:
        n = 0
        for _ in range(int(units)):
            if self.source.exhausted:
                break
            self._publish(self.source.take(1))
            n += 1
        return n

    def levels(self, inst_id: str, n: int | None = None) -> tuple[list, list]:
        """The venue's own book (bids, asks) best first as [price, size] strings."""
        return self._control(self._levels_copy, inst_id, n)

    def _levels_copy(self, inst_id: str, n: int | None) -> tuple[list, list]:
        bids, asks = self.market.levels(inst_id, n)
        return [list(lv) for lv in bids], [list(lv) for lv in asks]

    def checksum(self, inst_id: str) -> int:
        return self._control(self.market.checksum, inst_id)

    def seq(self, inst_id: str) -> int:
        return self._control(self._seq_of, inst_id)

    def _seq_of(self, inst_id: str) -> int:
        return self.market.states[inst_id].seq

    # -- faults (decided by self._faults; done here) ------------------------------------------

    def drop_connections(self, graceful: bool = False) -> int:
        """Fault: cut every open connection (abort), or close each with 1001 when ``graceful``.
        Returns how many."""
        return self._control(self._cut_connections, graceful)

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

    def set_timed_faults(self, *, disconnect_every_s: float | None = None, gap_every_s: float | None = None,
                         bad_checksum_every_s: float | None = None) -> None:
        """Fault: (re)start the timed faults (None: unchanged; 0: off), counted from the market
        time now (see the module docstring).

        Raises:
            VenueError: a negative or non-finite period.
        """
        self._control(self._faults.set_timed_faults, disconnect_every_s=disconnect_every_s,
                      gap_every_s=gap_every_s, bad_checksum_every_s=bad_checksum_every_s)

    @property
    def timed_faults(self) -> dict[str, float]:
        """The timed faults on now: name -> period in seconds."""
        return self._control(self._faults.timed_periods_s)

    def set_delay_ms(self, ms: float) -> None:
        """Fault: delay every outgoing frame by ``ms`` (0 turns it off; with jitter on: the mean).

        Raises:
            VenueError: ``ms`` outside 0..600000.
        """
        self._control(self._faults.set_delay, delay_ms=ms)

    def set_delay_jitter_ms(self, ms: float) -> None:
        """Fault: jitter each outgoing frame's delay, N(delay_ms, ``ms``) clipped to [0, 50] ms (0
        turns it off; see ``pipeline.venue.faults``).

        Raises:
            VenueError: ``ms`` outside 0..50.
        """
        self._control(self._faults.set_delay, jitter_ms=ms)

    def set_drop_prob(self, p: float) -> None:
        """Fault: drop each data push with probability ``p`` (0 turns it off).

        Raises:
            VenueError: ``p`` outside 0..1.
        """
        self._control(self._faults.set_drop_prob, p)

    def stall(self, seconds: float) -> None:
        """Fault: publish nothing for ``seconds`` (stale feed); the market clock stops meanwhile."""
        self._control(self._start_stall, seconds)

    def _start_stall(self, seconds: float) -> None:
        if self._stall_handle is not None:
            self._stall_handle.cancel()
            self._stall_handle = None
        self._stalled = True
        self._stall_s = max(float(seconds), 0.0)
        if self._loop is not None:  # else: from start()
            self._stall_handle = self._loop.call_later(self._stall_s, self._end_stall)
        self._faults.count()
        self._poke()

    def _end_stall(self) -> None:
        self._stalled = False
        self._stall_handle = None
        self._poke()

    def _cut_connections(self, graceful: bool = False) -> int:
        n = self._clients.cut_all(graceful)
        self._faults.count("disconnects")
        return n

    def _skip_seq(self, n: int, inst_id: str | None = None) -> None:
        self.market.skip_seq(n, inst_id)
        self._faults.count("gaps")

    def _corrupt_checksum(self, inst_id: str | None = None) -> None:
        self.market.corrupt_next_checksum(inst_id)
        self._faults.count("bad_checksums")

    def _fire_timed_faults(self, fired: TimedFault) -> None:
        """Do the timed faults ``FaultInjector.timed_due`` found due, in their order."""
        if fired & TimedFault.DISCONNECT:
            self._cut_connections()
        if fired & TimedFault.GAP:
            self._skip_seq(GAP_SEQ)
        if fired & TimedFault.BAD_CHECKSUM:
            self._corrupt_checksum()

    # -- publishing ---------------------------------------------------------------------------

    def _apply_quiet(self, ev) -> None:
        if type(ev) is BookEvent:
            self.market.apply_book(ev)
        else:
            self.market.apply_trades(ev)

    def _publish(self, events: Sequence) -> None:
        market, st, all_subs, send = self.market, self._stats, self._clients.subs, self._clients.send
        st["units"] += 1
        fired = self._faults.timed_due(self.source.market_ms)
        if fired:
            self._fire_timed_faults(fired)
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
        high, clients = self.max_queue // 2, self._clients
        while clients.backlogged(high):
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
# Standalone


async def _serve(args: argparse.Namespace, server: VenueServer, itch) -> None:
    """Serve until SIGINT / SIGTERM: the port file written once listening, removed at the end."""
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


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.venue.server``: serve until SIGINT / SIGTERM."""
    args = arg_parser().parse_args(argv)
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
    asyncio.run(_serve(args, server, itch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
