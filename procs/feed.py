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
- The network thread inherits the process's core pinning, so it shares the agent thread's core. The
  agent sets ``sys.setswitchinterval(switch_interval_us)`` so the GIL is handed over quickly; under
  ``wait = "busy-spin"`` the runner's spin (``ringbuf.idle.YieldSpin``) yields the GIL and the core on
  every idle pass, so the thread takes them as soon as it wakes (a bare spin would hold the GIL until
  the switch interval forced a hand-over, for every frame).
- Where the parts live: the frames, markers, books, counters and resyncs are
  ``pipeline.trading.bitget.session.FeedSession`` (sans-I/O); the network thread is
  ``procs.feed_ws.WsClient``; the timing policies are ``pipeline.trading.bitget.pacing``. This module
  holds the params and the agents, which wire them to the context (ring, clock, log).

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
    sends_discarded, record_errors, and rej_<reason> per Reject reason seen; skew_ms_<id>: the
    instrument's clock skew, its book update's exchange timestamp minus the local wall-clock time the
    frame was received at (ms; negative: the update took that long to arrive, or the clocks differ),
    sampled on the first frame after ``SKEW_EVERY_NS`` that makes a BOOK (the per-frame path pays one
    comparison of its receive time with the next sample's due time).

``ItchFeedAgent`` (``module = "procs.feed:ItchFeedAgent"``): NASDAQ TotalView-ITCH 5.0 through
``pipeline.trading.itch.L3Book``, one BOOK per message that changed a configured symbol's book, and a
TRADE per execution (``pipeline.trading.itch.executions.ExecutionBook``: E, printable C, and P, the
non-displayed ones, flagged ``TRADE_FLAG_HIDDEN``) written just before the BOOK it changed, stamped
with ``ctx.clock()`` when it is written; every BOOK carries ``BOOK_FLAG_HIDDEN_REPORTED``:

- ``path``: replay a BinaryFILE (``.gz`` too) at ``speed`` ``"max"`` (default) or a factor of
  the original pace (1.0 = as recorded, by ITCH timestamps against ``ctx.clock``); the file is
  read lazily in chunks.
- ``port``: MoldUDP64 datagrams on a non-blocking UDP socket bound to 127.0.0.1 (``0`` picks a
  port: ``agent.port``; ``port_file`` receives it), each stamped with ``ctx.clock()`` as it is
  received, before the decode (its BOOKs and TRADEs carry that ``ts_origin_ns``). Gaps are recovered
  (``pipeline.trading.itch.ingest.MoldDatagrams``): re-requests go from this socket to the address
  the packets come from, at most one every ``rerequest_interval_ms`` (20) for at most
  ``rerequest_max_messages`` (1000), ``rerequest_max`` (10) per gap; a gap still open after
  ``gap_timeout_ms`` (500), wider than ``max_gap_messages`` or holding more than
  ``max_held_messages`` (100000 each) is given up; BOOKs carry ``BOOK_FLAG_REBUILDING`` while a gap
  is open, ``BOOK_FLAG_INVALID`` for a stock an unrecoverable gap left inconsistent, and
  ``BOOK_FLAG_CROSSED`` when best bid >= best ask.
- The ingestion itself is ``pipeline.trading.itch.ingest`` (``FileReplay``, ``MoldDatagrams``); the
  agent reads the file / socket and the clock.
- ``symbols`` (default every configured instrument), ``midnight_epoch_ns`` (for ``exch_ts_ns``;
  default 0 in the payload), ``skip_empty`` / ``require_end`` (BinaryFILE variants), ``session``.

Counters: messages, books_emitted, rejected, decode_errors, datagrams, bad_datagrams, gaps,
missing, duplicates, foreign, out_drops (BOOKs and TRADEs), replay_done, file_errors, rerequests,
recovered, unrecoverable, rebuilding (1 while a gap is open), invalid_stocks and invalid (the
symbols, comma-separated), crossed_books, unknown_refs, truncated, trades_emitted, hidden_trades
(the TRADEs of P messages among them), request_errors (a re-request the socket refused).
"""

from __future__ import annotations

import collections
import os
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Callable, Literal

import msgspec

from pipeline.runtime.agent import Agent, AgentContext
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.portfile import read_port_file, write_port_file
from pipeline.trading.bitget.capture import CaptureRecorder
from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.frames import BOOK_CHANNELS, CHANNELS, INST_TYPES
from pipeline.trading.bitget.pacing import Backoff
from pipeline.trading.bitget.session import LOG_FIRST_REJECTS, FeedSession
from pipeline.trading.itch.errors import ItchError
from pipeline.trading.itch.executions import ExecutionBook
from pipeline.trading.itch.framing import encode_request, iter_file_frames
from pipeline.trading.itch.ingest import FileReplay, MoldDatagrams, start_counters
from pipeline.trading.itch.recovery import RecoveryParams
from pipeline.trading.messages import OFF_TRADE_FLAGS, TRADE_FLAG_HIDDEN, Kind
from procs.feed_ws import NET_COUNTERS, WsClient

DEFAULT_PORT_URL = "ws://127.0.0.1:{port}/v2/ws/public"
#: how often the clock skew is sampled (``skew_ms_<id>``)
SKEW_EVERY_NS = 100_000_000
#: instrument_id (u16 @0) and exch_ts_ns (u64 @16) of a BOOK payload (pipeline.trading.messages.BOOK_DTYPE)
_BOOK_ID_TS = struct.Struct("<H14xQ")

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
    # gap recovery (pipeline.trading.itch.recovery.RecoveryParams)
    rerequest_interval_ms: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    rerequest_max_messages: Annotated[int, msgspec.Meta(ge=1, le=65_534)] = 1_000
    rerequest_max: Annotated[int, msgspec.Meta(ge=1)] = 10
    gap_timeout_ms: Annotated[float, msgspec.Meta(gt=0)] = 500.0
    max_gap_messages: Annotated[int, msgspec.Meta(ge=1)] = 100_000
    max_held_messages: Annotated[int, msgspec.Meta(ge=1)] = 100_000


def parse_params(name: str, params: dict, kind: type[msgspec.Struct]):
    """``params`` of process ``name`` as ``kind`` (``BitgetFeedParams`` or ``ItchFeedParams``).

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process.
    """
    return parse_stage_params(name, params, kind)


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


def _check_channels(name: str, inst_type: str, channels: list[str]) -> None:
    """Raises ConfigError: an unknown inst_type or channel, a repeat, no channel, or two book channels."""
    if inst_type not in INST_TYPES:
        raise ConfigError(f"process {name}: params.inst_type {inst_type!r} not one of {sorted(INST_TYPES)}")
    bad = [c for c in channels if c not in CHANNELS]
    if bad or not channels or len(set(channels)) != len(channels):
        raise ConfigError(f"process {name}: params.channels {channels!r}: each one of {sorted(CHANNELS)}, no repeats")
    if sum(c in BOOK_CHANNELS for c in channels) > 1:
        raise ConfigError(f"process {name}: params.channels {channels!r}: one book channel per feed "
                          "(two would emit two BOOK streams per instrument)")


def _url_resolver(p: BitgetFeedParams, name: str) -> Callable[[], str]:
    """The URL of the next connection attempt (``{port}`` filled from the port file, read each time).

    Raises:
        ConfigError: port_file without a ``{port}`` placeholder in url, or a url that is not ws(s)://.
    """
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


class _FeedAgent(Agent):
    """What both feed agents start from: their typed params and their output ring."""

    #: the struct ``ctx.params`` must convert to (a check before start can use it: ``parse_params``)
    params_type: type[msgspec.Struct]

    def _start(self, ctx: AgentContext):
        """Keep ``ctx``; set ``p`` (the params) and ``out`` (the output ring); return ``p``.

        Raises:
            ConfigError: bad params, or no such output ring.
        """
        self.ctx = ctx
        self.p = p = parse_params(ctx.name, ctx.params, self.params_type)
        self.out = ctx.output(p.output)
        return p


# ----------------------------------------------------------------------------------- Bitget agent
class BitgetFeedAgent(_FeedAgent):
    """Bitget v2 public WebSocket -> BOOK / TRADE messages (see the module docstring)."""

    params_type = BitgetFeedParams

    def on_start(self, ctx: AgentContext) -> None:
        p = self._start(ctx)
        name = ctx.name
        channels = list(p.channels)
        _check_channels(name, p.inst_type, channels)
        self.instruments = _instrument_map(ctx, "instruments", p.instruments)
        try:
            self.session = session = FeedSession(
                self.instruments, inst_type=p.inst_type, channels=channels, decoder=p.decoder,
                emit_trade_snapshots=p.emit_trade_snapshots, resync_max_per_min=p.resync_max_per_min,
                stats=ctx.stats, log=ctx.log, clock=ctx.clock, emit=ctx.emit, out=self.out, send=self._send)
        except BitgetError as exc:
            raise ConfigError(f"process {name}: {exc}") from None
        self.url_fn = _url_resolver(p, name)
        backoff = Backoff(p.backoff_initial_ms, p.backoff_max_ms, p.backoff_jitter, random.Random(p.seed))
        self.join_timeout_s = p.join_timeout_s
        session.start_counters()
        self.stats = ctx.stats
        # the session's books and warm-up state, also the agent's (tests look at them there); its
        # per-frame methods bound once (the per-frame path makes no attribute chains)
        self.books = session.books
        self._warm_books = session.warm_books
        self._warm_buf = session.warm_buf
        self._on_frame = session.on_frame
        self._request_resyncs = session.request_resyncs
        self._received = ctx.received
        self._net_version = -1
        self._errors_logged = 0
        self._skew_due_ns = 0  # the next frame received at or after this is looked at for the clock skew
        self._next_retry_ns = 0

        self.record_fp = None
        recorder = None
        if p.record_path:
            Path(p.record_path).parent.mkdir(parents=True, exist_ok=True)
            self.record_fp = open(p.record_path, "a", encoding="utf-8")
            recorder = CaptureRecorder(self.record_fp)
        self.inbox: collections.deque = collections.deque()
        self._wake = threading.Event()
        self.inline = p.decode_in == "network"
        self.net = WsClient(url_fn=self.url_fn, subscribe_texts=session.subscribe_texts, inbox=self.inbox,
                            queue_max=p.queue_frames, backoff=backoff, ping_interval_s=p.ping_interval_s,
                            stale_after_s=p.stale_after_s, open_timeout_s=p.open_timeout_s,
                            max_msgs_per_s=p.max_msgs_per_s, log=ctx.log, recorder=recorder, name=f"{name}-ws",
                            wake=self._wake, on_item=self._on_item if self.inline else None)
        ctx.log.info("feed_starting", venue="bitget", channels=channels, instruments=self.instruments,
                     subscriptions=len(session.subs), record=bool(p.record_path), decode_in=p.decode_in)
        self._old_switch_s = sys.getswitchinterval()
        sys.setswitchinterval(p.switch_interval_us / 1e6)
        self.net.start()

    @property
    def _warm_frame(self):
        """The latest frame that made a BOOK (``keep_warm``'s input; None before the first)."""
        return self.session.warm_frame

    def wait_for_work(self, timeout_ns: int) -> bool:
        """The runner's park when idle: sleep until the network thread appends to the inbox (it sets
        the event after each append) or ``timeout_ns`` passes. True when the inbox has something."""
        self._wake.clear()
        if self.inbox:
            return True
        return self._wake.wait(timeout_ns / 1e9)

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): ``FeedSession.keep_warm``, on the agent thread,
        on the core the network thread decodes on, so the decode and the book update stay in that
        core's caches between frames (the network thread's decode does not show in ``do_work``'s
        count, which postpones the runner's warm-up)."""
        self.session.keep_warm(self.net.counters.frames_in)

    # -- hot path
    def _on_item(self, ts: int, item) -> None:
        """``decode_in = "network"``: one frame or marker, on the network thread (the only writer of
        the output ring and the only user of the books in this mode). Never raises."""
        try:
            if ts >= 0:
                if ts < self._skew_due_ns:
                    self._on_frame(ts, item)
                else:
                    self._frame_sampling_skew(ts, item)
                self._received(1)
                self._request_resyncs()
            else:
                self._on_marker(ts, item)
        except Exception as exc:  # a bug must not end the connection: count, log the first few
            self.stats["errors"] = self.stats.get("errors", 0) + 1
            self._errors_logged += 1
            if self._errors_logged <= LOG_FIRST_REJECTS:
                self.ctx.log.error("feed_error", error=f"{type(exc).__name__}: {exc}")

    def do_work(self) -> int:
        n = 0
        if self.inline:  # the network thread does the work; here only counters and deferred resyncs
            if self.session.pending_resyncs:
                now = self.ctx.clock()
                if now >= self._next_retry_ns:
                    self._next_retry_ns = now + 100_000_000
                    try:
                        self.net.loop.call_soon_threadsafe(self.session.send_resyncs)
                    except RuntimeError:  # loop closed: stopping
                        pass
        elif self.inbox:
            n = self._drain_inbox()
        elif self.session.pending_resyncs:
            self.session.send_resyncs()
        if self._net_version != self.net.counters.version:
            self._sync_net()
        return n

    def _drain_inbox(self) -> int:
        """``decode_in = "agent"``: up to ``ctx.batch`` frames and markers from the inbox."""
        inbox = self.inbox
        n = marks = 0
        batch = self.ctx.batch
        on_frame = self._on_frame
        popleft = inbox.popleft
        while n < batch and inbox:
            ts, frame = popleft()
            if ts >= 0:
                if ts < self._skew_due_ns:
                    on_frame(ts, frame)
                else:
                    self._frame_sampling_skew(ts, frame)
            else:
                self._on_marker(ts, frame)
                marks += 1
            n += 1
        self._received(n - marks)
        self._request_resyncs()
        return n

    def _on_marker(self, mark: int, conn_id: int) -> None:
        self.session.on_marker(mark, conn_id, self.net.counters.queue_drops)

    def _frame_sampling_skew(self, ts: int, frame) -> None:
        """``on_frame``, and when the frame made a BOOK, its instrument's clock skew into
        ``skew_ms_<id>`` (the BOOK's exchange time minus the wall-clock time of ``ts``); the next
        sample is then due ``SKEW_EVERY_NS`` later (until a frame makes a BOOK, each frame is looked at)."""
        s = self.stats
        before = s["books_emitted"]
        self._on_frame(ts, frame)
        if s["books_emitted"] != before:
            iid, exch_ts_ns = _BOOK_ID_TS.unpack_from(self.session._book_buf)
            wall_ns = ts + time.time_ns() - time.monotonic_ns()
            s[f"skew_ms_{iid}"] = round((exch_ts_ns - wall_ns) / 1e6, 3)
            self._skew_due_ns = ts + SKEW_EVERY_NS

    def _send(self, conn_id: int, texts: list[str]) -> bool:
        return self.net.send(conn_id, texts)

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
class ItchFeedAgent(_FeedAgent):
    """ITCH 5.0 from a BinaryFILE replay or MoldUDP64 on UDP -> BOOK messages (module docstring)."""

    params_type = ItchFeedParams

    def on_start(self, ctx: AgentContext) -> None:
        p = self._start(ctx)
        name = ctx.name
        symbols = _instrument_map(ctx, "symbols", p.symbols)
        try:
            self.book = ExecutionBook(symbols, midnight_epoch_ns=p.midnight_epoch_ns, on_trade=self._emit_trade)
        except ItchError as exc:
            raise ConfigError(f"process {name}: {exc}") from None
        self.stats = ctx.stats
        start_counters(self.stats)
        self.stats.update(trades_emitted=0, hidden_trades=0)
        ports = {"stats": ctx.stats, "log": ctx.log, "clock": ctx.clock, "emit": ctx.emit, "out": self.out}
        self.sock = None
        self.port = None
        self._frames = None
        if (p.path is None) == (p.port is None):
            raise ConfigError(f"process {name}: give exactly one of params.path (BinaryFILE) or params.port (MoldUDP64)")
        if p.path is not None:
            if not os.path.isfile(p.path):
                raise ConfigError(f"process {name}: params.path {p.path!r} is not a file")
            self._frames = iter_file_frames(p.path, require_end=p.require_end, skip_empty=p.skip_empty)
            speed = 0.0 if p.speed == "max" else float(p.speed)
            self.replay = FileReplay(self.book, self._frames, speed=speed, **ports)
            ctx.log.info("feed_starting", venue="itch-file", path=str(p.path), speed=p.speed, symbols=symbols)
        else:
            recovery = RecoveryParams(
                request_interval_ns=int(p.rerequest_interval_ms * 1e6), max_request_messages=p.rerequest_max_messages,
                max_requests=p.rerequest_max, gap_timeout_ns=int(p.gap_timeout_ms * 1e6),
                max_gap_messages=p.max_gap_messages, max_held_messages=p.max_held_messages)
            self.mold = MoldDatagrams(self.book, session=p.session, recovery=recovery, request=self._rerequest, **ports)
            self._source = None  # where the latest datagram came from: re-requests go there
            self._bind(p.port, p.recv_buffer_bytes)
            if p.port_file:
                write_port_file(p.port_file, self.port)
            ctx.log.info("feed_starting", venue="itch-moldudp64", port=self.port, symbols=symbols)

    def _emit_trade(self, payload) -> None:
        """An execution's TRADE into the output, ahead of its BOOK, stamped as its message (received or
        read before the decode); ``out_drops`` when the ring is full."""
        s = self.stats
        ingest = self.replay if self._frames is not None else self.mold
        if self.ctx.emit(self.out, Kind.TRADE, payload, ingest.ts):
            s["trades_emitted"] += 1
            s["hidden_trades"] += payload[OFF_TRADE_FLAGS] & TRADE_FLAG_HIDDEN
        else:
            s["out_drops"] += 1

    def _bind(self, port: int, recv_buffer_bytes: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer_bytes)
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.sock = sock
        self.port = sock.getsockname()[1]
        self._rx = bytearray(65536)
        self._rxv = memoryview(self._rx)

    def do_work(self) -> int:
        if self._frames is not None:
            ingest = self.replay
            n = ingest.replay(self.ctx.batch)
        else:
            ingest = self.mold
            n = self._drain()
            ingest.poll(self.ctx.clock())  # an open gap's re-requests and bound, with or without datagrams
        if n:
            ingest.publish_book_counters()
        return n

    # hot path: every datagram; the receive time is taken before anything is decoded
    def _drain(self) -> int:
        recvfrom_into, rx, rxv = self.sock.recvfrom_into, self._rx, self._rxv
        clock, on_datagram = self.ctx.clock, self.mold.on_datagram
        n = 0
        batch = self.ctx.batch
        while n < batch:
            try:
                size, self._source = recvfrom_into(rx)
            except (BlockingIOError, InterruptedError):
                break
            ts = clock()
            n += 1
            on_datagram(rxv[:size], ts)
        return n

    def _rerequest(self, first_seq: int, count: int) -> None:
        """A MoldUDP64 re-request to where the packets come from (nothing before the first one)."""
        if self._source is None or self.mold.session is None:
            return
        try:
            self.sock.sendto(encode_request(self.mold.session, first_seq, count), self._source)
        except OSError as exc:
            self.stats["request_errors"] = self.stats.get("request_errors", 0) + 1
            self.ctx.log.warning("mold_rerequest_failed", error=f"{type(exc).__name__}: {exc}")

    def on_close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self._frames is not None:
            self._frames.close()
        self.ctx.log.info("feed_closed", **self.stats, book=self.book.stats())
