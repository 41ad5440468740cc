"""The feed stage: venue market data in, BOOK / TRADE messages out on the ``md`` ring.

Two agents (``pipeline.runtime.agent.Agent``), each the whole of a feed process:

``BitgetFeedAgent`` (``module = "procs.feed:BitgetFeedAgent"``): the Bitget v2 public WebSocket
(the real venue or the local paper venue, same dialect)::

     network thread (asyncio + websockets)                 agent thread (the runner's duty cycle)
    +------------------------------------------+          +----------------------------------------+
    | connect, subscribe (chunked), "ping"     |  inbox   | do_work(): up to ctx.batch items       |
    | every ping_interval_s, stale watchdog,   | (deque,  |   decode (msgspec; never raises)       |
    | back-off + jitter on close/error/stale;  |  bounded)|   BitgetBooks.apply -> BOOK (504 B)    |
    | every frame stamped time.monotonic_ns()  | -------> |   fill_trades      -> TRADE (40 B)     |
    | on arrival: (ts, text) appended, or      |          |   rejects counted by reason            |
    | counted in queue_drops when full;        |          |   resyncs (throttled) -> network       |
    | record mode: capture lines               | <------- |   markers: connected / disconnected /  |
    | sends what the agent asks (same conn)    |  sends   |   gap -> books.reset()                 |
    +------------------------------------------+          +----------------------------------------+

- ``decode_in = "network"`` (the default) runs the right-hand box on the network thread itself: each
  frame is decoded, applied and written to the ring as soon as websockets hands it over, with no
  inbox and no hand-over between threads (which costs ~100-200 us of GIL switching on a shared
  core); the agent thread only mirrors counters and retries deferred resyncs. ``"agent"`` keeps the
  two-thread split drawn above (the network thread never waits for a decode).
- ``ts_origin_ns`` of every message is the ``time.monotonic_ns()`` stamp the network thread took
  when the websockets library handed it the frame, so the tick-to-here latency of every later
  stage includes the wait in the inbox, the decode and the book update.
- Inbox items are ``(ts, frame)``; markers use negative ``ts``: ``MARK_CONNECTED`` (a new
  connection, before any of its frames), ``MARK_DISCONNECTED`` and ``MARK_GAP`` (frames were
  dropped because the inbox was full). On each the agent calls ``books.reset()``: every book goes
  back to AWAITING_SNAPSHOT, so no BOOK leaves until a fresh snapshot (after a gap an incremental
  ``books`` book asks for a resync on its next update). Markers bypass the bound.
- Resyncs (checksum mismatch, seq gap, update before snapshot): the agent sends
  ``resync_messages(sub)`` (unsubscribe, subscribe) through the network thread, at most
  ``resync_max_per_min`` per subscription in any 60 s (``ResyncThrottle``, ctx.clock); a deferred
  resync is retried on later ``do_work`` calls. A send addressed to a connection that has since
  closed is discarded: the next connection subscribes afresh anyway.
- Outgoing frames are paced to ``max_msgs_per_s`` (the venue allows 10 a second per connection).
- The network thread inherits the process's core pinning. On a core shared with the agent, run
  the feed with ``wait = "back-off"`` (a busy-spinning agent starves the thread); the agent sets
  ``sys.setswitchinterval(switch_interval_us)`` so the GIL is handed over quickly.

Params (``[[processes]] params = {...}``):

=====================  ==============================================================================
url                    ``ws://HOST:PORT/PATH`` or ``wss://...``; with ``port_file``, ``{port}`` in it is
                       replaced by the port read from the file (default template
                       ``ws://127.0.0.1:{port}/v2/ws/public``). One of url / port_file is required.
port_file              a file holding the venue's port (``8080``, ``127.0.0.1:8080`` or JSON with
                       ``port``); read at every connection attempt (a missing file is a failed
                       attempt, retried with back-off). Relative to the working directory.
inst_type              ``"SPOT"`` (default) or a futures type
channels               default ``["books15", "trade"]``; ``"books"`` for snapshot + updates
instruments            default: every configured instrument (symbol -> id); a list of configured
                       symbols, or a ``{symbol: id}`` table
ping_interval_s        30 (the venue wants a ``ping`` text at least every 30 s)
stale_after_s          10: no frame at all (pong included) for this long -> reconnect
backoff_initial_ms     100; doubles per failed attempt up to ``backoff_max_ms`` (5000)
backoff_jitter         0.2: each delay is drawn uniformly in ``[d * (1 - jitter), d]``
seed                   RNG seed of the jitter (default: unseeded)
open_timeout_s         5: TCP + TLS + WebSocket handshake
resync_max_per_min     30 per subscription (a resync is 2 frames; the venue allows 10 a second)
queue_frames           8192: inbox bound
max_msgs_per_s         10: outgoing frame rate
record_path            record mode: every event of the connection (open, sent, received frame with
                       its UNIX receive time) appended in the capture line format
                       (``pipeline.trading.bitget.capture``)
output                 output ring (default: the process's only output)
emit_trade_snapshots   false: the venue's snapshot of recent (old) trades is not emitted
decoder                ``"msgspec"`` (default) or ``"orjson"``
join_timeout_s         2: ``on_close`` waits this long for the network thread
switch_interval_us     100
decode_in              ``"network"`` (default) or ``"agent"``: which thread decodes (see above)
=====================  ==============================================================================

Typed (``BitgetFeedParams``; ``ItchFeedParams`` for the ITCH agent below): an unknown or ill-typed field
fails the start with a ConfigError naming the process and the field (``feed: bad params: Object
contains unknown field ...``).

Counters (``ctx.stats``, published with each heartbeat; the first ten fit the status record)::

    frames, rejected, books_emitted, trades_emitted, resyncs, reconnects, stale_timeouts,
    queue_drops, checksum_failures, seq_gaps, then: connects, connect_failures, disconnects,
    books_dropped (a depth push that produced no BOOK: awaiting snapshot / invalid / stale /
    unknown instrument), resyncs_throttled, gap_resets, venue_errors, pongs, out_drops (ring full),
    sends_discarded, record_errors, and rej_<reason> per Reject reason seen.

``ItchFeedAgent`` (``module = "procs.feed:ItchFeedAgent"``): NASDAQ TotalView-ITCH 5.0 through
``pipeline.trading.itch.L3Book``, one BOOK per message that changed a configured symbol's book:

- ``path``: replay a BinaryFILE (``.gz`` too) at ``speed`` ``"max"`` (default) or a factor of
  the original pace (1.0 = as recorded, by ITCH timestamps against ``ctx.clock``); the file is
  read lazily in chunks.
- ``port``: MoldUDP64 datagrams on a non-blocking UDP socket bound to 127.0.0.1 (``0`` picks a
  port: ``agent.port``; ``port_file`` receives it). ``MoldSequencer`` drops duplicates and reports
  gaps; a gap is counted (``gaps``, ``missing``) and logged, and the books go on (no re-request:
  an L3 book across a gap is not trustworthy until it is rebuilt).
- ``symbols`` (default every configured instrument), ``midnight_epoch_ns`` (for ``exch_ts_ns``;
  default 0 in the payload), ``skip_empty`` / ``require_end`` (BinaryFILE variants), ``session``.

Counters: messages, books_emitted, rejected, decode_errors, datagrams, bad_datagrams, gaps,
missing, duplicates, foreign, out_drops, replay_done, file_errors.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Callable, Literal

import msgspec

from pipeline.runtime.agent import Agent, AgentContext
from pipeline.trading.bitget.book import Applied, BitgetBooks
from pipeline.trading.bitget.capture import CaptureWriter
from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.protocol import (
    BOOK_CHANNELS,
    CHANNELS,
    INST_TYPES,
    MAX_FRAME_BYTES,
    PING_TEXT,
    FrameKind,
    Reject,
    Subscription,
    make_decoder,
    resync_messages,
    subscribe_message,
)
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.trading.itch.book import NO_BOOK, BookEvent, L3Book
from pipeline.trading.itch.errors import ItchError
from pipeline.trading.itch.framing import MoldSequencer, iter_file_frames, try_decode_packet
from pipeline.trading.messages import BOOK_DTYPE, TRADE_DTYPE, Kind
from pipeline.runtime.portfile import read_port_file

MARK_CONNECTED = -1
MARK_DISCONNECTED = -2
MARK_GAP = -3

DEFAULT_PORT_URL = "ws://127.0.0.1:{port}/v2/ws/public"
SUBSCRIBE_CHUNK = 20  # subscriptions per subscribe request (keeps args well under 4096 bytes)
RESYNC_WINDOW_NS = 60_000_000_000
BOOK_BYTES = BOOK_DTYPE.itemsize
TRADE_BYTES = TRADE_DTYPE.itemsize

#: the counters in the order they are published (the status record keeps the first that fit)
BITGET_COUNTERS = (
    "frames", "rejected", "books_emitted", "trades_emitted", "resyncs", "reconnects", "stale_timeouts",
    "queue_drops", "checksum_failures", "seq_gaps", "connects", "connect_failures", "disconnects",
    "books_dropped", "resyncs_throttled", "gap_resets", "venue_errors", "pongs", "out_drops",
    "sends_discarded", "record_errors",
)
#: counters the network thread owns (mirrored into ctx.stats by the agent)
NET_COUNTERS = ("reconnects", "stale_timeouts", "queue_drops", "connects", "connect_failures", "disconnects",
                "sends_discarded", "record_errors")
ITCH_COUNTERS = (
    "messages", "books_emitted", "rejected", "decode_errors", "datagrams", "bad_datagrams", "gaps", "missing",
    "duplicates", "foreign", "out_drops", "replay_done", "file_errors",
)
_REJECT_KEYS = tuple(f"rej_{r.name.lower()}" for r in Reject)
_LOG_FIRST_REJECTS = 20  # rejected frames logged one by one, then every 1000th


# ----------------------------------------------------------------------------------- pure helpers
class Backoff:
    """Exponential back-off with jitter: the n-th consecutive delay is ``d = min(initial * 2**(n-1),
    max)`` drawn uniformly in ``[d * (1 - jitter), d]`` from ``rng``. Pure (the caller sleeps)."""

    def __init__(self, initial_ms: float, max_ms: float, jitter: float, rng: random.Random):
        if not (initial_ms > 0 and max_ms >= initial_ms and 0.0 <= jitter <= 1.0):
            raise ConfigError(f"back-off needs 0 < initial <= max and 0 <= jitter <= 1, got "
                              f"{initial_ms}, {max_ms}, {jitter}")
        self.initial_ms = float(initial_ms)
        self.max_ms = float(max_ms)
        self.jitter = float(jitter)
        self.rng = rng
        self.attempt = 0

    def next_delay_s(self) -> float:
        """The delay before the next attempt, in seconds; each call counts one more failure."""
        d = min(self.initial_ms * (2.0 ** min(self.attempt, 62)), self.max_ms)
        self.attempt += 1
        return d * (1.0 - self.jitter * self.rng.random()) / 1000.0

    def reset(self) -> None:
        """A connection worked: the next delay starts from ``initial`` again."""
        self.attempt = 0


class ResyncThrottle:
    """At most ``max_per_window`` grants per key in any ``window_ns`` (sliding window). Pure."""

    def __init__(self, max_per_window: int, window_ns: int = RESYNC_WINDOW_NS):
        self.max = int(max_per_window)
        self.window_ns = int(window_ns)
        self._times: dict[object, collections.deque] = {}

    def allow(self, key, now_ns: int) -> bool:
        """Grant (and count) one more for ``key`` at ``now_ns``, or refuse."""
        q = self._times.get(key)
        if q is None:
            q = self._times[key] = collections.deque()
        while q and now_ns - q[0] >= self.window_ns:
            q.popleft()
        if len(q) >= self.max:
            return False
        q.append(now_ns)
        return True


_AtLeastMilli = Annotated[float, msgspec.Meta(ge=0.001)]
_NonNegative = Annotated[float, msgspec.Meta(ge=0)]
_Instruments = list[str] | dict[str, int] | None  # configured symbols, or a {symbol: id} table; None: every one


class BitgetFeedParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``BitgetFeedAgent``'s params (see the module docstring); an unknown or ill-typed field fails the start."""

    url: str = ""  # one of url / port_file is required
    port_file: str = ""
    inst_type: str = "SPOT"
    channels: tuple[str, ...] = ("books15", "trade")
    instruments: _Instruments = None
    ping_interval_s: _AtLeastMilli = 30.0
    stale_after_s: _AtLeastMilli = 10.0
    backoff_initial_ms: _AtLeastMilli = 100.0
    backoff_max_ms: _AtLeastMilli = 5_000.0
    backoff_jitter: _NonNegative = 0.2
    seed: int | None = None  # None: unseeded
    open_timeout_s: _AtLeastMilli = 5.0
    resync_max_per_min: Annotated[int, msgspec.Meta(ge=1)] = 30
    queue_frames: Annotated[int, msgspec.Meta(ge=1)] = 8192
    max_msgs_per_s: Annotated[float, msgspec.Meta(ge=1)] = 10.0
    record_path: str = ""  # "": no recording
    output: str | None = None  # default: the only output
    emit_trade_snapshots: bool = False
    decoder: str = "msgspec"
    join_timeout_s: _NonNegative = 2.0
    switch_interval_us: Annotated[float, msgspec.Meta(ge=1)] = 100.0
    decode_in: Literal["network", "agent"] = "network"


class ItchFeedParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``ItchFeedAgent``'s params (see the module docstring); an unknown or ill-typed field fails the start."""

    path: str | None = None  # exactly one of path / port
    port: Annotated[int, msgspec.Meta(ge=0, le=65_535)] | None = None
    speed: Literal["max"] | Annotated[float, msgspec.Meta(gt=0)] = "max"
    require_end: bool = True
    skip_empty: bool = False
    symbols: _Instruments = None
    midnight_epoch_ns: int | None = None
    session: str | None = None
    recv_buffer_bytes: Annotated[int, msgspec.Meta(ge=1)] = 4 << 20
    port_file: str = ""  # "": the bound port is not written anywhere
    output: str | None = None  # default: the only output


def parse_params(name: str, params: dict, kind: type[msgspec.Struct]):
    """``params`` of process ``name`` as ``kind`` (``BitgetFeedParams`` or ``ItchFeedParams``).

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process.
    """
    return parse_stage_params(name, params, kind)


def _output_port(ctx: AgentContext, name: str | None):
    if name is None:
        if len(ctx.outputs) != 1:
            raise ConfigError(f"process {ctx.name}: needs exactly one output ring or params.output, "
                              f"has {sorted(ctx.outputs)}")
        return next(iter(ctx.outputs.values()))
    if name not in ctx.outputs:
        raise ConfigError(f"process {ctx.name}: params.output {name!r} is not one of its outputs {sorted(ctx.outputs)}")
    return ctx.outputs[name]


def _instrument_map(ctx: AgentContext, key: str, want: _Instruments) -> dict[str, int]:
    """``{symbol: id}`` from ``params[key]`` (``want``: a list of configured symbols or a table), default
    every configured instrument."""
    configured = {i.symbol: i.id for i in ctx.config.instruments}
    if want is None:
        out = configured
    elif isinstance(want, dict):
        out = {str(k): v for k, v in want.items()}
    else:
        missing = [s for s in want if s not in configured]
        if missing:
            raise ConfigError(f"process {ctx.name}: params.{key} names unconfigured instruments {missing}")
        out = {s: configured[s] for s in want}
    if not out:
        raise ConfigError(f"process {ctx.name}: no instruments (configure [[instruments]] or params.{key})")
    for s, i in out.items():
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i <= 0xFFFF:
            raise ConfigError(f"process {ctx.name}: instrument {s!r} has id {i!r}, not an int in 0..65535")
    return out


# ----------------------------------------------------------------------------------- network thread
class NetCounters:
    """Counters the network thread owns; ``version`` moves whenever one of them does."""

    __slots__ = NET_COUNTERS + ("version", "frames_in", "sent")

    def __init__(self) -> None:
        for k in self.__slots__:
            setattr(self, k, 0)

    def bump(self, name: str, n: int = 1) -> None:
        setattr(self, name, getattr(self, name) + n)
        self.version += 1


class WsClient(threading.Thread):
    """The feed's network thread: one asyncio loop, one websockets connection at a time.

    ``inbox`` receives ``(ts_ns, frame)`` and the markers; ``send(conn_id, texts)`` is the one
    thread-safe way in. ``stop(timeout_s)`` cancels everything, closes the connection and joins.
    """

    def __init__(self, *, url_fn: Callable[[], str], subscribe_texts: list[str], inbox: collections.deque,
                 queue_max: int, backoff: Backoff, ping_interval_s: float, stale_after_s: float,
                 open_timeout_s: float, max_msgs_per_s: float, log, record_fp=None, name: str = "feed-ws",
                 wake: threading.Event | None = None, on_item: Callable[[int, object], None] | None = None):
        super().__init__(name=name, daemon=True)
        #: when set, every frame and marker is handed to it on this thread instead of the inbox
        self.on_item = on_item
        self.url_fn = url_fn
        self.subscribe_texts = subscribe_texts
        self.inbox = inbox
        self.wake = wake if wake is not None else threading.Event()  # set after each append
        self.queue_max = queue_max
        self.backoff = backoff
        self.ping_interval_s = ping_interval_s
        self.stale_ns = int(stale_after_s * 1e9)
        self.open_timeout_s = open_timeout_s
        self.max_msgs_per_s = max_msgs_per_s
        self.log = log
        self.record_fp = record_fp
        self.recorder = CaptureWriter(record_fp, "ws://unknown") if record_fp is not None else None
        self.counters = NetCounters()
        self.conn_id = 0
        self.connected = False
        self.loop = asyncio.new_event_loop()
        self._outq: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._gap_pending = False
        self._last_rx_ns = 0
        self._send_times: collections.deque = collections.deque()

    # -- agent side
    def send(self, conn_id: int, texts: list[str]) -> bool:
        """Queue ``texts`` for connection ``conn_id`` (discarded if that connection is gone)."""
        try:
            for t in texts:
                self.loop.call_soon_threadsafe(self._outq.put_nowait, (conn_id, t))
        except RuntimeError:  # loop closed
            return False
        return True

    def stop(self, timeout_s: float) -> bool:
        """Cancel the network task, wait up to ``timeout_s`` for the thread; True when it ended."""
        self._stopping = True
        try:
            self.loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:
            pass
        if self.is_alive():
            self.join(timeout_s)
        return not self.is_alive()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # -- thread
    def run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            self._task = loop.create_task(self._main())
            if self._stopping:
                self._task.cancel()
            try:
                loop.run_until_complete(self._task)
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # a bug here must not go unnoticed
                self.log.error("ws_thread_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
            self._flush_record()

    async def _main(self) -> None:
        from websockets.asyncio.client import connect

        first = True
        failures_logged = 0
        while not self._stopping:
            ws = None
            try:
                url = self.url_fn()
                ws = await connect(url, open_timeout=self.open_timeout_s, ping_interval=None, close_timeout=0.5,
                                   max_size=MAX_FRAME_BYTES, proxy=None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.counters.bump("connect_failures")
                if failures_logged < 5 or self.counters.connect_failures % 100 == 0:
                    self.log.warning("ws_connect_failed", error=f"{type(exc).__name__}: {exc}",
                                     failures=self.counters.connect_failures)
                failures_logged += 1
            if ws is not None:
                failures_logged = 0
                got_frames = await self._session(ws, url, first)
                first = False
                if got_frames:
                    self.backoff.reset()
            if self._stopping:
                break
            await asyncio.sleep(self.backoff.next_delay_s())

    async def _session(self, ws, url: str, first: bool) -> bool:
        """One connection: subscribe, then receive / ping / send / watch until one of them ends.
        Returns whether any frame arrived."""
        self.conn_id += 1
        cid = self.conn_id
        c = self.counters
        c.bump("connects")
        if not first:
            c.bump("reconnects")
        frames_before = c.frames_in
        self._put(MARK_CONNECTED, cid)
        self.connected = True
        self._last_rx_ns = time.monotonic_ns()
        self._gap_pending = False
        if self.recorder is not None:
            self.recorder.url = url.replace(" ", "%20")
            self._record(self.recorder.opened, time.time())
        self.log.info("ws_connected", url=url, conn=cid, reconnect=not first)
        tasks: list[asyncio.Task] = []
        reason = "closed"
        try:
            for text in self.subscribe_texts:
                await self._send(ws, text)
            tasks = [asyncio.create_task(self._recv(ws, cid), name="recv"),
                     asyncio.create_task(self._pinger(ws), name="ping"),
                     asyncio.create_task(self._sender(ws, cid), name="send"),
                     asyncio.create_task(self._watchdog(), name="watchdog")]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            t = next(iter(done))
            exc = t.exception()
            reason = f"{t.get_name()}: {type(exc).__name__}: {exc}" if exc is not None else f"{t.get_name()}: {t.result()}"
        except asyncio.CancelledError:
            reason = "stopping"
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            try:
                await asyncio.wait_for(ws.close(), 1.0)
            except BaseException:  # noqa: BLE001 - closing is best effort (cancelled, timed out, broken)
                if ws.transport is not None:
                    ws.transport.abort()
            self.connected = False
            self._put(MARK_DISCONNECTED, cid)
            c.bump("disconnects")
            self.log.info("ws_disconnected", conn=cid, reason=reason[:300], frames=c.frames_in - frames_before)
            self._flush_record()
        return c.frames_in > frames_before

    def _put(self, ts: int, item) -> None:
        if self.on_item is not None:
            self.on_item(ts, item)
        else:
            self.inbox.append((ts, item))
            self.wake.set()

    async def _recv(self, ws, cid: int) -> str:
        inbox, qmax, c = self.inbox, self.queue_max, self.counters
        mono, rec, on_item = time.monotonic_ns, self.recorder, self.on_item
        if on_item is not None:  # decode here: no queue, no hand-over to the agent thread
            async for frame in ws:
                ts = mono()
                self._last_rx_ns = ts
                c.frames_in += 1
                if rec is not None:
                    self._record(rec.received, time.time(), frame)
                on_item(ts, frame)
            return "closed by peer"
        async for frame in ws:
            ts = mono()
            self._last_rx_ns = ts
            c.frames_in += 1
            if rec is not None:
                self._record(rec.received, time.time(), frame)
            if len(inbox) >= qmax:
                c.bump("queue_drops")
                self._gap_pending = True
                continue
            if self._gap_pending:
                self._gap_pending = False
                inbox.append((MARK_GAP, cid))
            inbox.append((ts, frame))
            self.wake.set()
        return "closed by peer"

    async def _pinger(self, ws) -> None:
        while True:
            await asyncio.sleep(self.ping_interval_s)
            await self._send(ws, PING_TEXT)

    async def _sender(self, ws, cid: int) -> None:
        while True:
            to, text = await self._outq.get()
            if to != cid:
                self.counters.bump("sends_discarded")
                continue
            await self._send(ws, text)

    async def _watchdog(self) -> str:
        period = min(max(self.stale_ns / 4e9, 0.01), 1.0)
        last_flush = time.monotonic()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic_ns()
            if self.record_fp is not None and now / 1e9 - last_flush >= 1.0:
                self._flush_record()
                last_flush = now / 1e9
            if now - self._last_rx_ns > self.stale_ns:
                self.counters.bump("stale_timeouts")
                self.log.warning("ws_stale", silent_ms=(now - self._last_rx_ns) // 1_000_000)
                return "stale"

    async def _send(self, ws, text: str) -> None:
        """Send one frame, pacing to ``max_msgs_per_s`` over a sliding second."""
        times = self._send_times
        while len(times) >= self.max_msgs_per_s:
            age = time.monotonic() - times[0]
            if age >= 1.0:
                times.popleft()
            else:
                await asyncio.sleep(1.0 - age)
        times.append(time.monotonic())
        await ws.send(text)
        self.counters.sent += 1
        if self.recorder is not None:
            self._record(self.recorder.sent, time.time(), text)

    def _record(self, fn, t: float, frame=None) -> None:
        try:
            if frame is None:
                fn(t)
            else:
                fn(t, frame if isinstance(frame, str) else frame.decode("utf-8"))
        except Exception:  # a frame the line format cannot hold (line break, not UTF-8), or I/O
            self.counters.bump("record_errors")

    def _flush_record(self) -> None:
        if self.record_fp is not None:
            try:
                self.record_fp.flush()
            except Exception:
                self.counters.bump("record_errors")


# ----------------------------------------------------------------------------------- Bitget agent
class BitgetFeedAgent(Agent):
    """Bitget v2 public WebSocket -> BOOK / TRADE messages (see the module docstring)."""

    #: the struct ``ctx.params`` must convert to (a check before start can use it: ``parse_params``)
    params_type = BitgetFeedParams

    def on_start(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.p = p = parse_params(ctx.name, ctx.params, self.params_type)
        name = ctx.name
        self.out = _output_port(ctx, p.output)
        inst_type = p.inst_type
        if inst_type not in INST_TYPES:
            raise ConfigError(f"process {name}: params.inst_type {inst_type!r} not one of {sorted(INST_TYPES)}")
        channels = list(p.channels)
        bad = [c for c in channels if c not in CHANNELS]
        if bad or not channels or len(set(channels)) != len(channels):
            raise ConfigError(f"process {name}: params.channels {channels!r}: each one of {sorted(CHANNELS)}, no repeats")
        if sum(c in BOOK_CHANNELS for c in channels) > 1:
            raise ConfigError(f"process {name}: params.channels {channels!r}: one book channel per feed "
                              "(two would emit two BOOK streams per instrument)")
        self.instruments = _instrument_map(ctx, "instruments", p.instruments)
        try:
            self.books = BitgetBooks(self.instruments, emit_trade_snapshots=p.emit_trade_snapshots)
            self.decoder = make_decoder(p.decoder)
            # keep_warm's private decoder and books: the same code on the latest book frame, with no
            # effect on the real books, counters or ring
            self._warm_decoder = make_decoder(p.decoder)
            self._warm_books = BitgetBooks(self.instruments)
            self.subs = [Subscription(inst_type, ch, sym) for sym in self.instruments for ch in channels]
            texts = [subscribe_message(self.subs[i:i + SUBSCRIBE_CHUNK])
                     for i in range(0, len(self.subs), SUBSCRIBE_CHUNK)]
        except BitgetError as exc:
            raise ConfigError(f"process {name}: {exc}") from None
        self.url_fn = self._url_resolver(p, name)

        ping_s = p.ping_interval_s
        stale_s = p.stale_after_s
        backoff = Backoff(p.backoff_initial_ms, p.backoff_max_ms, p.backoff_jitter, random.Random(p.seed))
        self.throttle = ResyncThrottle(p.resync_max_per_min)
        queue_max = p.queue_frames
        self.join_timeout_s = p.join_timeout_s
        open_timeout_s = p.open_timeout_s
        max_msgs_per_s = p.max_msgs_per_s
        switch_s = p.switch_interval_us / 1e6

        stats = ctx.stats
        for k in BITGET_COUNTERS:
            stats[k] = 0
        self.stats = stats
        self._book_buf = bytearray(BOOK_BYTES)
        self._warm_buf = bytearray(BOOK_BYTES)
        self._warm_frame = None  # the latest frame that made a BOOK (keep_warm's input)
        self._warm_seen = -1  # frames received when keep_warm last looked
        self._trade_view = memoryview(self.books.trade_records.view("u1"))
        self._pending_resyncs: dict[Subscription, None] = {}
        self._conn_id = 0
        self._net_version = -1
        self._rejects_logged = 0

        self.record_fp = None
        record_path = p.record_path
        if record_path:
            Path(record_path).parent.mkdir(parents=True, exist_ok=True)
            self.record_fp = open(record_path, "a", encoding="utf-8")
        self.inbox: collections.deque = collections.deque()
        self._wake = threading.Event()
        decode_in = p.decode_in
        self.inline = decode_in == "network"
        self._errors_logged = 0
        self._next_retry_ns = 0
        self.net = WsClient(url_fn=self.url_fn, subscribe_texts=texts, inbox=self.inbox, queue_max=queue_max,
                            backoff=backoff, ping_interval_s=ping_s, stale_after_s=stale_s,
                            open_timeout_s=open_timeout_s, max_msgs_per_s=max_msgs_per_s,
                            log=ctx.log, record_fp=self.record_fp, name=f"{name}-ws", wake=self._wake,
                            on_item=self._on_item if self.inline else None)
        ctx.log.info("feed_starting", venue="bitget", channels=channels, instruments=self.instruments,
                     subscriptions=len(self.subs), record=bool(record_path), decode_in=decode_in)
        self._old_switch_s = sys.getswitchinterval()
        sys.setswitchinterval(switch_s)
        self.net.start()

    @staticmethod
    def _url_resolver(p: BitgetFeedParams, name: str) -> Callable[[], str]:
        url = p.url
        port_file = p.port_file
        if port_file:
            template = url or DEFAULT_PORT_URL
            if "{port}" not in template:
                raise ConfigError(f"process {name}: params.url {template!r} needs a {{port}} placeholder with port_file")
            return lambda: template.replace("{port}", str(read_port_file(port_file)))
        if not url.startswith(("ws://", "wss://")):
            raise ConfigError(f"process {name}: params.url must be ws://... or wss://... (or give port_file), got {url!r}")
        return lambda: url

    def wait_for_work(self, timeout_ns: int) -> bool:
        """The runner's park when idle: sleep until the network thread appends to the inbox (it sets
        the event after each append) or ``timeout_ns`` passes. True when the inbox has something."""
        self._wake.clear()
        if self.inbox:
            return True
        return self._wake.wait(timeout_ns / 1e9)

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): the latest frame that made a BOOK decoded and
        applied again by a private decoder onto private books (an update onto a copy of the real book
        it made: ``BitgetBooks.mirror``), into a private buffer; the real books, counters and ring are
        untouched, nothing is emitted. Runs on the agent thread, on the core the network thread
        decodes on, so the decode and the book update stay in that core's caches between frames.
        Nothing to do before the first BOOK, nor when frames arrived since the last call (the network
        thread's decode does not show in ``do_work``'s count, which postpones the runner's warm-up)."""
        frame = self._warm_frame
        seen = self.net.counters.frames_in
        if frame is None or seen != self._warm_seen:  # frames since the last call: the decode is warm
            self._warm_seen = seen
            return
        d = self._warm_decoder.decode(frame)
        books = self._warm_books
        if d.kind == FrameKind.UPDATE:  # onto a copy of the book it made: merged again, checksum holds
            books.mirror(self.books, d)
        else:  # a snapshot needs no history
            books.reset()
        books.apply(d, self._warm_buf)

    # -- hot path
    def _on_item(self, ts: int, item) -> None:
        """``decode_in = "network"``: one frame or marker, on the network thread (the only writer of
        the output ring and the only user of the books in this mode). Never raises."""
        try:
            if ts >= 0:
                self._on_frame(ts, item)
                self.ctx.received(1)
                resyncs = self.books.take_resyncs()
                if resyncs:
                    for sub in resyncs:
                        self._pending_resyncs[sub] = None
                if self._pending_resyncs:
                    self._send_resyncs()
            else:
                self._on_marker(ts, item)
        except Exception as exc:  # a bug must not end the connection: count, log the first few
            self.stats["errors"] = self.stats.get("errors", 0) + 1
            self._errors_logged += 1
            if self._errors_logged <= _LOG_FIRST_REJECTS:
                self.ctx.log.error("feed_error", error=f"{type(exc).__name__}: {exc}")

    def do_work(self) -> int:
        if self.inline:  # the network thread does the work; here only counters and deferred resyncs
            if self._net_version != self.net.counters.version:
                self._sync_net()
            if self._pending_resyncs:
                now = self.ctx.clock()
                if now >= self._next_retry_ns:
                    self._next_retry_ns = now + 100_000_000
                    with contextlib.suppress(RuntimeError):  # loop closed: stopping
                        self.net.loop.call_soon_threadsafe(self._send_resyncs)
            return 0
        inbox = self.inbox
        if not inbox:
            if self._net_version != self.net.counters.version:
                self._sync_net()
            if self._pending_resyncs:
                self._send_resyncs()
            return 0
        n = marks = 0
        batch = self.ctx.batch
        on_frame = self._on_frame
        popleft = inbox.popleft
        while n < batch and inbox:
            ts, frame = popleft()
            if ts >= 0:
                on_frame(ts, frame)
            else:
                self._on_marker(ts, frame)
                marks += 1
            n += 1
        self.ctx.received(n - marks)
        resyncs = self.books.take_resyncs()
        if resyncs:
            for sub in resyncs:
                self._pending_resyncs[sub] = None
        if self._pending_resyncs:
            self._send_resyncs()
        if self._net_version != self.net.counters.version:
            self._sync_net()
        return n

    def _on_frame(self, ts: int, frame) -> None:
        s = self.stats
        s["frames"] += 1
        d = self.decoder.decode(frame)
        k = d.kind
        if k == FrameKind.SNAPSHOT or k == FrameKind.UPDATE:
            code = self.books.apply(d, self._book_buf)
            if code == Applied.EMITTED:
                self._warm_frame = frame
                if self.ctx.emit(self.out, Kind.BOOK, self._book_buf, ts):
                    s["books_emitted"] += 1
                else:
                    s["out_drops"] += 1
            elif code == Applied.CHECKSUM_MISMATCH:
                s["checksum_failures"] += 1
            elif code == Applied.SEQ_GAP:
                s["seq_gaps"] += 1
            else:
                s["books_dropped"] += 1
        elif k == FrameKind.TRADE:
            n = self.books.fill_trades(d)
            if n:
                tv, emit, out = self._trade_view, self.ctx.emit, self.out
                for i in range(n):
                    if emit(out, Kind.TRADE, tv[i * TRADE_BYTES:(i + 1) * TRADE_BYTES], ts):
                        s["trades_emitted"] += 1
                    else:
                        s["out_drops"] += 1
        elif k == FrameKind.PONG:
            s["pongs"] += 1
        elif k == FrameKind.SUBSCRIBED or k == FrameKind.UNSUBSCRIBED:
            pass
        elif k == FrameKind.ERROR:
            s["venue_errors"] += 1
            if s["venue_errors"] <= 20 or s["venue_errors"] % 1000 == 0:
                self.ctx.log.warning("venue_error", detail=d.detail[:300], channel=d.channel, inst_id=d.inst_id,
                                     count=s["venue_errors"])
        else:  # REJECTED, UNKNOWN
            s["rejected"] += 1
            key = _REJECT_KEYS[d.reason]
            s[key] = s.get(key, 0) + 1
            self._rejects_logged += 1
            if self._rejects_logged <= _LOG_FIRST_REJECTS or self._rejects_logged % 1000 == 0:
                self.ctx.log.warning("frame_rejected", reason=Reject(d.reason).name, detail=d.detail[:200],
                                     kind=FrameKind(k).name, count=s["rejected"])

    def _on_marker(self, mark: int, cid: int) -> None:
        self.books.reset()
        self._pending_resyncs.clear()
        if mark == MARK_CONNECTED:
            self._conn_id = cid
        elif mark == MARK_GAP:
            self.stats["gap_resets"] += 1
            self.ctx.log.warning("inbox_overflow", queue_drops=self.net.counters.queue_drops,
                                 note="books reset; BOOK resumes after fresh snapshots")

    def _send_resyncs(self) -> None:
        now = self.ctx.clock()
        s = self.stats
        for sub in list(self._pending_resyncs):
            if self.throttle.allow(sub, now):
                del self._pending_resyncs[sub]
                self.net.send(self._conn_id, resync_messages(sub))
                s["resyncs"] += 1
                self.ctx.log.info("resync", channel=sub.channel, inst_id=sub.inst_id, conn=self._conn_id)
            elif self._pending_resyncs[sub] is None:
                self._pending_resyncs[sub] = True  # counted once per deferral
                s["resyncs_throttled"] += 1
                self.ctx.log.warning("resync_throttled", channel=sub.channel, inst_id=sub.inst_id)

    def _sync_net(self) -> None:
        c = self.net.counters
        self._net_version = c.version
        s = self.stats
        for k in NET_COUNTERS:
            s[k] = getattr(c, k)

    def on_close(self) -> None:
        stopped = self.net.stop(self.join_timeout_s)
        if not stopped:
            self.ctx.log.warning("ws_thread_not_stopped", timeout_s=self.join_timeout_s)
        self._sync_net()
        sys.setswitchinterval(self._old_switch_s)
        if self.record_fp is not None and stopped:
            self.record_fp.close()
        self.ctx.log.info("feed_closed", **self.stats)


# ----------------------------------------------------------------------------------- ITCH agent
_ITCH_TS_OFF = 5  # u48 BE nanoseconds since midnight at offset 5 of every message


class ItchFeedAgent(Agent):
    """ITCH 5.0 from a BinaryFILE replay or MoldUDP64 on UDP -> BOOK messages (module docstring)."""

    #: the struct ``ctx.params`` must convert to (a check before start can use it: ``parse_params``)
    params_type = ItchFeedParams

    def on_start(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.p = p = parse_params(ctx.name, ctx.params, self.params_type)
        name = ctx.name
        self.out = _output_port(ctx, p.output)
        symbols = _instrument_map(ctx, "symbols", p.symbols)
        try:
            self.book = L3Book(symbols, midnight_epoch_ns=p.midnight_epoch_ns)
        except ItchError as exc:
            raise ConfigError(f"process {name}: {exc}") from None
        self.stats = ctx.stats
        for k in ITCH_COUNTERS:
            self.stats[k] = 0
        self._buf = bytearray(BOOK_BYTES)
        self._seq = 0
        self.sock = None
        self.port = None
        self._frames = None
        if (p.path is None) == (p.port is None):
            raise ConfigError(f"process {name}: give exactly one of params.path (BinaryFILE) or params.port (MoldUDP64)")
        if p.path is not None:
            path = p.path
            if not os.path.isfile(path):
                raise ConfigError(f"process {name}: params.path {path!r} is not a file")
            speed = p.speed
            self.speed = 0.0 if speed == "max" else float(speed)
            self._frames = iter_file_frames(path, require_end=p.require_end, skip_empty=p.skip_empty)
            self._pending = None
            self._t0_itch = None
            self._t0_clock = 0
            self._done = False
            ctx.log.info("feed_starting", venue="itch-file", path=str(path), speed=speed, symbols=symbols)
        else:
            port = p.port
            self.seqr = MoldSequencer(p.session)
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, p.recv_buffer_bytes)
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                raise
            sock.setblocking(False)
            self.sock = sock
            self.port = sock.getsockname()[1]
            self._rx = bytearray(65536)
            self._rxv = memoryview(self._rx)
            port_file = p.port_file
            if port_file:
                tmp = f"{port_file}.tmp"
                Path(tmp).write_text(f"{self.port}\n")
                os.replace(tmp, port_file)
            ctx.log.info("feed_starting", venue="itch-moldudp64", port=self.port, symbols=symbols)

    def do_work(self) -> int:
        n = self._replay() if self._frames is not None else self._drain()
        if n:
            b, s = self.book, self.stats
            s["rejected"] = b.rejected
            s["decode_errors"] = b.counts[BookEvent.DECODE_ERROR]
        return n

    def _emit(self, iid: int, ts: int) -> None:
        self.book.write_payload(iid, self._buf)
        if self.ctx.emit(self.out, Kind.BOOK, self._buf, ts):
            self.stats["books_emitted"] += 1
        else:
            self.stats["out_drops"] += 1

    def _replay(self) -> int:
        if self._done:
            return 0
        clock, book, speed = self.ctx.clock, self.book, self.speed
        n = 0
        batch = self.ctx.batch
        while n < batch:
            item = self._pending
            if item is None:
                try:
                    item = next(self._frames, None)
                except (ItchError, OSError) as exc:
                    self.stats["file_errors"] += 1
                    self.ctx.log.error("replay_file_error", error=f"{type(exc).__name__}: {exc}")
                    item = None
                if item is None:
                    self._done = True
                    self.stats["replay_done"] = 1
                    self.ctx.log.info("replay_done", messages=self.stats["messages"],
                                      books_emitted=self.stats["books_emitted"])
                    break
            msg = item[1]
            if speed:
                t = int.from_bytes(msg[_ITCH_TS_OFF:_ITCH_TS_OFF + 6], "big") if len(msg) >= 11 else 0
                now = clock()
                if self._t0_itch is None:
                    self._t0_itch, self._t0_clock = t, now
                if now < self._t0_clock + (t - self._t0_itch) / speed:
                    self._pending = item
                    break
            self._pending = None
            self._seq += 1
            iid = book.apply_raw(msg, 0, len(msg), self._seq)
            n += 1
            if iid != NO_BOOK:
                self._emit(iid, clock())
        self.stats["messages"] += n
        return n

    def _drain(self) -> int:
        sock, rxv, clock, book, s = self.sock, self._rxv, self.ctx.clock, self.book, self.stats
        n = 0
        batch = self.ctx.batch
        while n < batch:
            try:
                size = sock.recv_into(self._rx)
            except (BlockingIOError, InterruptedError):
                break
            ts = clock()
            n += 1
            s["datagrams"] += 1
            packet, _reason = try_decode_packet(rxv[:size])
            if packet is None:
                s["bad_datagrams"] += 1
                continue
            v = self.seqr.on(packet)
            if v.foreign:
                s["foreign"] += 1
                continue
            if v.gap is not None:
                s["gaps"] += 1
                s["missing"] += len(v.gap)
                self.ctx.log.warning("mold_gap", first=v.gap.start, last=v.gap.stop - 1, missing=len(v.gap),
                                     gaps=s["gaps"])
            s["duplicates"] += v.duplicates
            msgs = packet.messages
            for i in range(v.deliver_from, len(msgs)):
                m = msgs[i]
                iid = book.apply_raw(m, 0, len(m), packet.seq + i)
                s["messages"] += 1
                if iid != NO_BOOK:
                    self._emit(iid, ts)
            if v.end_of_session:
                self.ctx.log.info("mold_end_of_session", next_seq=packet.seq, gaps=s["gaps"], missing=s["missing"])
        return n

    def on_close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self._frames is not None:
            self._frames.close()
        self.ctx.log.info("feed_closed", **self.stats, book=self.book.stats())
