"""The ITCH feed's ingestion, sans-I/O: ITCH 5.0 messages into an ``L3Book``, one BOOK payload per
message that changed a configured symbol's book, through an injected ``emit(port, kind, payload,
ts_origin_ns) -> bool`` (the ring); counters in the caller's ``stats`` dict, events to ``log``.

- ``FileReplay``: the frames of a BinaryFILE (any iterator of ``(offset, message)``, e.g.
  ``framing.iter_file_frames``) at full speed, or at ``speed`` times the recorded pace
  (``ReplayPacer``: the ITCH timestamps against ``clock``); a file error or the end of the frames
  ends the replay.
- ``MoldDatagrams``: MoldUDP64 datagrams as they arrive: malformed ones and other sessions counted
  and dropped; messages applied in sequence order through ``recovery.GapRecovery``:

  * a gap (``gaps``) holds what follows it and sends re-requests (``rerequests``: bounded rate,
    bounded window) through an injected ``request(first_seq, count)``; while it is open every
    configured book is flagged ``BOOK_FLAG_REBUILDING`` (which stocks the missing messages touch is
    unknown until they arrive): one BOOK each says so when it opens, every BOOK of the catch-up
    (the retransmitted messages, then the held ones, in order) carries it, and one clean BOOK each
    says it closed (``recovered``);
  * a gap past its bound (time, requests, size, hold) is given up (``unrecoverable``; ``missing``
    counts the messages lost): from then on a configured stock whose message contradicts its book
    (an order reference it does not hold, more shares executed or cancelled than rest, a reference
    it already holds, another stock's order) is the affected one: ``BOOK_FLAG_INVALID`` on its BOOKs
    and in status (``invalid_stocks``, ``invalid``: the symbols) until the next consistent state, a
    start of messages (S 'O'); stocks without a contradiction stay valid (MoldUDP64 does not say
    which stock a lost message was for: a lost add that is never referenced again goes unseen);
  * a BOOK whose best bid >= best ask carries ``BOOK_FLAG_CROSSED`` (``crossed_books``).

Every BOOK's and TRADE's ``ts_origin_ns`` is the time its datagram was received (taken by the caller
before the decode) or, for a file, the clock read before the message is decoded. Counters also:
``unknown_refs`` (the book's UNKNOWN_REF rejections), ``truncated`` (a file that ends inside a frame
or without its end marker; counted in ``file_errors`` too).
"""

from __future__ import annotations

from typing import Callable, Iterator

from pipeline.trading.itch.book import NO_BOOK, BookEvent, L3Book
from pipeline.trading.itch.errors import IncompleteSession, ItchError, TruncatedFrame
from pipeline.trading.itch.framing import MOLD_END_OF_SESSION, _session_bytes, try_decode_packet
from pipeline.trading.itch.recovery import GapRecovery, RecoveryParams
from pipeline.trading.messages import BOOK_DTYPE, BOOK_FLAG_CROSSED, BOOK_FLAG_INVALID, BOOK_FLAG_REBUILDING, Kind

#: the counters in the order they are published
ITCH_COUNTERS = (
    "messages", "books_emitted", "rejected", "decode_errors", "datagrams", "bad_datagrams", "gaps", "missing",
    "duplicates", "foreign", "out_drops", "replay_done", "file_errors", "rerequests", "recovered", "unrecoverable",
    "rebuilding", "invalid_stocks", "invalid", "crossed_books", "unknown_refs", "truncated",
)
_ITCH_TS_OFF = 5  # u48 BE nanoseconds since midnight at offset 5 of every message
_S, _O = ord("S"), ord("O")


def start_counters(stats: dict) -> None:
    """Every published counter at 0, in ``ITCH_COUNTERS`` order."""
    for k in ITCH_COUNTERS:
        stats[k] = 0
    stats["invalid"] = ""


class ItchIngest:
    """What both sources share: the book, the BOOK payload buffer, the emit and the counters
    (``start_counters`` puts them in ``stats``)."""

    def __init__(self, book: L3Book, *, stats: dict, log, clock: Callable[[], int], emit: Callable, out):
        self.book = book
        self.stats = stats
        self.log = log
        self.clock = clock
        self.emit = emit
        self.out = out
        self.ts = 0  # ts_origin_ns of the message being applied (its TRADEs carry it too)
        self._buf = bytearray(BOOK_DTYPE.itemsize)

    def emit_book(self, iid: int, ts: int) -> None:
        """Emit instrument ``iid``'s BOOK with ``ts_origin_ns = ts`` (``out_drops`` when the ring is full)."""
        self.book.write_payload(iid, self._buf)
        if self._buf[2] & BOOK_FLAG_CROSSED:
            self.stats["crossed_books"] += 1
        if self.emit(self.out, Kind.BOOK, self._buf, ts):
            self.stats["books_emitted"] += 1
        else:
            self.stats["out_drops"] += 1

    def publish_book_counters(self) -> None:
        """Copy the book's own counters (``rejected``, ``decode_errors``, ``unknown_refs``) into ``stats``."""
        b, s = self.book, self.stats
        s["rejected"] = b.rejected
        s["decode_errors"] = b.counts[BookEvent.DECODE_ERROR]
        s["unknown_refs"] = b.counts[BookEvent.UNKNOWN_REF]


class ReplayPacer:
    """The recorded pace at ``speed`` times: a message is due once the ``clock`` time since the first
    message is at least its ITCH timestamp's distance from the first one's, divided by ``speed``."""

    def __init__(self, speed: float):
        self.speed = speed
        self._t0_itch = None
        self._t0_clock = 0

    def due(self, msg, now: int) -> bool:
        """Whether ``msg`` (one ITCH message) is due at ``now`` (the clock's ns)."""
        t = int.from_bytes(msg[_ITCH_TS_OFF:_ITCH_TS_OFF + 6], "big") if len(msg) >= 11 else 0
        if self._t0_itch is None:
            self._t0_itch, self._t0_clock = t, now
        return now >= self._t0_clock + (t - self._t0_itch) / self.speed


class FileReplay(ItchIngest):
    """The messages of a BinaryFILE, in order; ``speed`` 0.0 = as fast as possible."""

    def __init__(self, book: L3Book, frames: Iterator, *, speed: float, **ports):
        super().__init__(book, **ports)
        self.frames = frames
        self.pacer = ReplayPacer(speed) if speed else None
        self.done = False
        self._pending = None  # a message read but not yet due
        self._seq = 0

    def replay(self, batch: int) -> int:
        """Apply up to ``batch`` messages that are due; returns how many."""
        if self.done:
            return 0
        clock, book, pacer = self.clock, self.book, self.pacer
        n = 0
        while n < batch:
            item = self._pending
            if item is None:
                try:
                    item = next(self.frames, None)
                except (ItchError, OSError, EOFError) as exc:  # EOFError: a gzip stream cut short
                    self.stats["file_errors"] += 1
                    if isinstance(exc, (TruncatedFrame, IncompleteSession, EOFError)):
                        self.stats["truncated"] += 1
                    self.log.error("replay_file_error", error=f"{type(exc).__name__}: {exc}")
                    item = None
                if item is None:
                    self.done = True
                    self.stats["replay_done"] = 1
                    self.log.info("replay_done", messages=self.stats["messages"],
                                  books_emitted=self.stats["books_emitted"])
                    break
            msg = item[1]
            if pacer is not None and not pacer.due(msg, clock()):
                self._pending = item
                break
            self._pending = None
            self._seq += 1
            self.ts = ts = clock()  # the origin: before the decode and the book update
            iid = book.apply_raw(msg, 0, len(msg), self._seq)
            n += 1
            if iid != NO_BOOK:
                self.emit_book(iid, ts)
        self.stats["messages"] += n
        return n


class MoldDatagrams(ItchIngest):
    """MoldUDP64 datagrams of session ``session`` (None: the first one seen), in sequence order
    through ``GapRecovery``; ``request(first_seq, count)`` sends a re-request (None: none is sent, so
    every gap runs into its bound). The book must be an ``ExecutionBook`` (its ``stale_flags``)."""

    def __init__(self, book, *, session: str | None, recovery: RecoveryParams = RecoveryParams(),
                 request: Callable[[int, int], object] | None = None, **ports):
        super().__init__(book, **ports)
        self.session = _session_bytes(session) if session is not None else None
        self.recovery = GapRecovery(recovery)
        self.request = request
        self.suspect = False  # a gap was given up: a stock whose messages contradict its book is invalid
        self.invalid: set[int] = set()  # instrument ids
        self._was_open = False
        self._iids = sorted(set(book.symbols.values()))
        self._by_locate = book.stock

    def on_datagram(self, data, ts: int) -> None:
        """One datagram (bytes or a memoryview, read before the next call) received at ``ts``."""
        s = self.stats
        s["datagrams"] += 1
        packet, _reason = try_decode_packet(data)
        if packet is None:
            s["bad_datagrams"] += 1
            return
        if self.session is None:
            self.session = packet.session
        elif packet.session != self.session:
            s["foreign"] += 1
            return
        rec = self.recovery
        self.ts = ts
        released = rec.on_packet(packet.seq, packet.count, packet.messages, ts)
        if released.messages or released.lost is not None or rec.gap_open != self._was_open:
            self._deliver(released, ts)
        if rec.gap_open:
            self._request(ts)
        if packet.count == MOLD_END_OF_SESSION:
            self.log.info("mold_end_of_session", next_seq=packet.seq, gaps=s["gaps"], missing=s["missing"])

    def poll(self, now: int) -> None:
        """The open gap's due re-request, or its giving up (``GapRecovery.poll``); call it often."""
        rec = self.recovery
        if not rec.gap_open:
            return
        released = rec.poll(now)
        if released.messages or released.lost is not None:
            self.ts = now
            self._deliver(released, now)
        if rec.gap_open:
            self._request(now)

    def _request(self, now: int) -> None:
        due = self.recovery.request_due(now)
        if due is not None and self.request is not None:
            self.stats["rerequests"] += 1
            self.request(*due)

    def _deliver(self, released, ts: int) -> None:
        """Apply released messages in order; the gap's flags on and off; a loss marks suspicion."""
        s, rec, book = self.stats, self.recovery, self.book
        if rec.gap_open and not self._was_open:
            self._set_rebuilding(True, ts)
        if released.lost is not None:
            lost = released.lost
            self.suspect = True
            s["missing"] += len(lost)
            self.log.warning("mold_gap_unrecoverable", first=lost.start, last=lost.stop - 1, lost=len(lost))
        suspect = self.suspect
        for seq, m in released.messages:
            before = book.rejected if suspect else 0
            iid = book.apply_raw(m, 0, len(m), seq)
            s["messages"] += 1
            if suspect and book.rejected != before:
                self._contradiction(m)
            elif m[0] == _S and len(m) >= 12 and m[11] == _O:  # start of messages: a consistent state
                self._revalidate()
            if iid != NO_BOOK:
                self.emit_book(iid, ts)
        if self._was_open and not rec.gap_open:
            self._set_rebuilding(False, ts)
        self._publish_recovery()

    def _set_rebuilding(self, on: bool, ts: int) -> None:
        """Every configured book flagged BOOK_FLAG_REBUILDING (a gap opened: which stocks the missing
        messages touch is unknown) or not any more (it closed); one BOOK each says so at once."""
        self._was_open = on
        flags = self.book.stale_flags
        for iid in self._iids:
            if on:
                flags[iid] = flags.get(iid, 0) | BOOK_FLAG_REBUILDING
            else:
                flags[iid] = flags.get(iid, 0) & ~BOOK_FLAG_REBUILDING
            self.emit_book(iid, ts)
        if on:
            r = self.recovery
            self.log.warning("mold_gap", first=r.expected, missing=r.top - r.expected, gaps=r.gaps)

    def _contradiction(self, m) -> None:
        """A rejected message after a loss: its stock (by locate) is invalid when it is configured."""
        st = self._by_locate(int.from_bytes(m[1:3], "big")) if len(m) >= 3 else None
        if st is None or st.instrument_id == NO_BOOK or st.instrument_id in self.invalid:
            return
        iid = st.instrument_id
        self.invalid.add(iid)
        self.book.stale_flags[iid] = self.book.stale_flags.get(iid, 0) | BOOK_FLAG_INVALID
        self.stats["invalid_stocks"] = len(self.invalid)
        names = {v: k for k, v in self.book.symbols.items()}
        self.stats["invalid"] = ",".join(sorted(names[i] for i in self.invalid))
        self.log.error("itch_stock_invalid", symbol=st.symbol, instrument_id=iid,
                       why="a message after an unrecoverable gap contradicts the book")

    def _revalidate(self) -> None:
        """Start of messages (S 'O'): books are consistent again; suspicion and invalid marks end."""
        self.suspect = False
        for iid in self.invalid:
            self.book.stale_flags[iid] = self.book.stale_flags.get(iid, 0) & ~BOOK_FLAG_INVALID
        self.invalid.clear()
        self.stats["invalid_stocks"] = 0
        self.stats["invalid"] = ""

    def _publish_recovery(self) -> None:
        r, s = self.recovery, self.stats
        s["gaps"], s["recovered"], s["unrecoverable"], s["duplicates"] = r.gaps, r.recovered, r.unrecoverable, r.duplicates
        s["rebuilding"] = int(r.gap_open)
