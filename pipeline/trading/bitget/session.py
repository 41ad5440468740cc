"""The Bitget market-data feed's state machine, sans-I/O: what the feed does with each frame and each
connection event. Its ports are injected: ``emit(port, kind, payload, ts_origin_ns) -> bool`` (the
ring), ``send(conn_id, texts)`` (frames for a connection), ``log`` (events), ``clock() -> ns`` and the
``stats`` dict its counters live in.

- Subscriptions: every (instrument, channel) pair, subscribed in chunks on each connection
  (``subscribe_texts``).
- Frames (``on_frame``): decoded; a depth push applied to the books gives one BOOK payload, or is
  counted (``checksum_failures``, ``seq_gaps``, ``books_dropped``); a trade push gives TRADE payloads
  (a full ring counts ``out_drops``); pongs and venue errors are counted; a rejected frame is counted
  under ``rejected`` and ``rej_<reason>`` (the first 20 and every 1000th logged).
- Connection events (``on_marker``; markers are negative timestamps): a new connection, a disconnect
  or lost frames (``MARK_GAP``: the hand-over queue overflowed) put every book back to
  AWAITING_SNAPSHOT and forget the pending resyncs; no BOOK leaves until a fresh snapshot.
- Resyncs (``request_resyncs``, ``send_resyncs``): a ``books`` book invalidated by a checksum
  mismatch, a seq gap or an update before its snapshot asks for a fresh snapshot: unsubscribe then
  subscribe on the current connection, at most ``resync_max_per_min`` per subscription in any 60 s;
  a refused one stays pending (counted once in ``resyncs_throttled``) and is retried on a later call.
"""

from __future__ import annotations

from typing import Callable

from pipeline.trading.bitget.book import Applied, BitgetBooks
from pipeline.trading.bitget.frames import FrameKind, Reject, Subscription
from pipeline.trading.bitget.pacing import ResyncThrottle
from pipeline.trading.bitget.protocol import make_decoder
from pipeline.trading.bitget.requests import resync_messages, subscribe_messages
from pipeline.trading.messages import BOOK_DTYPE, TRADE_DTYPE, Kind

MARK_CONNECTED = -1
MARK_DISCONNECTED = -2
MARK_GAP = -3

BOOK_BYTES = BOOK_DTYPE.itemsize
TRADE_BYTES = TRADE_DTYPE.itemsize

#: the feed's counters in the order they are published (the status record keeps the first that fit);
#: the network thread owns connects .. record_errors, this class the rest
BITGET_COUNTERS = (
    "frames", "rejected", "books_emitted", "trades_emitted", "resyncs", "reconnects", "stale_timeouts",
    "queue_drops", "checksum_failures", "seq_gaps", "connects", "connect_failures", "disconnects",
    "books_dropped", "resyncs_throttled", "gap_resets", "venue_errors", "pongs", "out_drops",
    "sends_discarded", "record_errors",
)
REJECT_KEYS = tuple(f"rej_{r.name.lower()}" for r in Reject)
LOG_FIRST_REJECTS = 20  # rejected frames (and feed errors) logged one by one, then every 1000th


def subscriptions(inst_type: str, channels: list[str], instruments: dict[str, int]) -> list[Subscription]:
    """Every channel of every instrument, instrument by instrument."""
    return [Subscription(inst_type, ch, sym) for sym in instruments for ch in channels]


class FeedSession:
    """Frames and connection events in, BOOK / TRADE payloads, resync requests and counters out.

    ``instruments`` maps symbols to instrument ids; ``decoder`` names the frame decoder
    (``protocol.make_decoder``). One thread at a time calls ``on_frame`` / ``on_marker`` /
    ``request_resyncs`` / ``send_resyncs`` / ``keep_warm`` (the feed's decoding thread).

    Raises:
        BitgetError: an unknown decoder, a bad instrument id, or subscriptions the venue would refuse.
    """

    def __init__(self, instruments: dict[str, int], *, inst_type: str, channels: list[str], decoder: str,
                 emit_trade_snapshots: bool, resync_max_per_min: int, stats: dict, log, clock: Callable[[], int],
                 emit: Callable, out, send: Callable[[int, list[str]], object]):
        self.books = BitgetBooks(instruments, emit_trade_snapshots=emit_trade_snapshots)
        self.decoder = make_decoder(decoder)
        # keep_warm's private decoder and books: the same code on the latest book frame, with no
        # effect on the real books, counters or ring
        self._warm_decoder = make_decoder(decoder)
        self.warm_books = BitgetBooks(instruments)
        self.subs = subscriptions(inst_type, channels, instruments)
        self.subscribe_texts = subscribe_messages(self.subs)
        self.throttle = ResyncThrottle(resync_max_per_min)
        self.stats = stats
        self.log = log
        self.clock = clock
        self.emit = emit
        self.out = out
        self.send = send
        self._book_buf = bytearray(BOOK_BYTES)
        self.warm_buf = bytearray(BOOK_BYTES)
        self.warm_frame = None  # the latest frame that made a BOOK (keep_warm's input)
        self._warm_seen = -1  # frames received when keep_warm last looked
        self._trade_view = memoryview(self.books.trade_records.view("u1"))
        #: subscriptions waiting for a resync -> True once counted as throttled
        self.pending_resyncs: dict[Subscription, bool | None] = {}
        self.conn_id = 0
        self._rejects_logged = 0

    def start_counters(self) -> None:
        """Every published counter at 0."""
        for k in BITGET_COUNTERS:
            self.stats[k] = 0

    def on_frame(self, ts: int, frame) -> None:
        """One frame received at ``ts`` (monotonic ns, the BOOK / TRADE ``ts_origin_ns``). The feed's
        per-frame path: keep it free of calls beyond the decode, the book update and the emit."""
        s = self.stats
        s["frames"] += 1
        d = self.decoder.decode(frame)
        k = d.kind
        if k == FrameKind.SNAPSHOT or k == FrameKind.UPDATE:
            code = self.books.apply(d, self._book_buf)
            if code == Applied.EMITTED:
                self.warm_frame = frame
                if self.emit(self.out, Kind.BOOK, self._book_buf, ts):
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
                tv, emit, out = self._trade_view, self.emit, self.out
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
                self.log.warning("venue_error", detail=d.detail[:300], channel=d.channel, inst_id=d.inst_id,
                                 count=s["venue_errors"])
        else:  # REJECTED, UNKNOWN
            s["rejected"] += 1
            key = REJECT_KEYS[d.reason]
            s[key] = s.get(key, 0) + 1
            self._rejects_logged += 1
            if self._rejects_logged <= LOG_FIRST_REJECTS or self._rejects_logged % 1000 == 0:
                self.log.warning("frame_rejected", reason=Reject(d.reason).name, detail=d.detail[:200],
                                 kind=FrameKind(k).name, count=s["rejected"])

    def on_marker(self, mark: int, conn_id: int, queue_drops: int) -> None:
        """A connection event: ``MARK_CONNECTED`` (connection ``conn_id`` opened), ``MARK_DISCONNECTED``
        or ``MARK_GAP`` (frames lost; ``queue_drops`` so far, for the log)."""
        self.books.reset()
        self.pending_resyncs.clear()
        if mark == MARK_CONNECTED:
            self.conn_id = conn_id
        elif mark == MARK_GAP:
            self.stats["gap_resets"] += 1
            self.log.warning("inbox_overflow", queue_drops=queue_drops,
                             note="books reset; BOOK resumes after fresh snapshots")

    def request_resyncs(self) -> None:
        """Queue the resyncs the books asked for since the last call, and send what the throttle allows."""
        resyncs = self.books.take_resyncs()
        if resyncs:
            for sub in resyncs:
                self.pending_resyncs[sub] = None
        if self.pending_resyncs:
            self.send_resyncs()

    def send_resyncs(self) -> None:
        """Send the pending resyncs the throttle allows now (``resyncs``); count each refused one once."""
        now = self.clock()
        s = self.stats
        for sub in list(self.pending_resyncs):
            if self.throttle.allow(sub, now):
                del self.pending_resyncs[sub]
                self.send(self.conn_id, resync_messages(sub))
                s["resyncs"] += 1
                self.log.info("resync", channel=sub.channel, inst_id=sub.inst_id, conn=self.conn_id)
            elif self.pending_resyncs[sub] is None:
                self.pending_resyncs[sub] = True  # counted once per deferral
                s["resyncs_throttled"] += 1
                self.log.warning("resync_throttled", channel=sub.channel, inst_id=sub.inst_id)

    def keep_warm(self, frames_in: int) -> None:
        """Decode and apply the latest frame that made a BOOK again, by a private decoder onto private
        books (an update onto a copy of the real book it made: ``BitgetBooks.mirror``), into a private
        buffer; the real books, counters and ring are untouched, nothing is emitted. Keeps the decode
        and the book update in the caller's core's caches between frames. Nothing to do before the
        first BOOK, nor when frames arrived since the last call (``frames_in`` moved: already warm)."""
        frame = self.warm_frame
        if frame is None or frames_in != self._warm_seen:
            self._warm_seen = frames_in
            return
        d = self._warm_decoder.decode(frame)
        books = self.warm_books
        if d.kind == FrameKind.UPDATE:  # onto a copy of the book it made: merged again, checksum holds
            books.mirror(self.books, d)
        else:  # a snapshot needs no history
            books.reset()
        books.apply(d, self.warm_buf)
