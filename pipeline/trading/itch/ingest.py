"""The ITCH feed's ingestion, sans-I/O: ITCH 5.0 messages into an ``L3Book``, one BOOK payload per
message that changed a configured symbol's book, through an injected ``emit(port, kind, payload,
ts_origin_ns) -> bool`` (the ring); counters in the caller's ``stats`` dict, events to ``log``.

- ``FileReplay``: the frames of a BinaryFILE (any iterator of ``(offset, message)``, e.g.
  ``framing.iter_file_frames``) at full speed, or at ``speed`` times the recorded pace
  (``ReplayPacer``: the ITCH timestamps against ``clock``); a file error or the end of the frames
  ends the replay.
- ``MoldDatagrams``: MoldUDP64 datagrams as they arrive: malformed ones, other sessions and
  duplicates counted and dropped; a gap counted (``gaps``, ``missing``) and logged, and the books go
  on (no re-request: an L3 book across a gap is not trustworthy until it is rebuilt).
"""

from __future__ import annotations

from typing import Callable, Iterator

from pipeline.trading.itch.book import NO_BOOK, BookEvent, L3Book
from pipeline.trading.itch.errors import ItchError
from pipeline.trading.itch.framing import MoldSequencer, try_decode_packet
from pipeline.trading.messages import BOOK_DTYPE, Kind

#: the counters in the order they are published
ITCH_COUNTERS = (
    "messages", "books_emitted", "rejected", "decode_errors", "datagrams", "bad_datagrams", "gaps", "missing",
    "duplicates", "foreign", "out_drops", "replay_done", "file_errors",
)
_ITCH_TS_OFF = 5  # u48 BE nanoseconds since midnight at offset 5 of every message


def start_counters(stats: dict) -> None:
    """Every published counter at 0, in ``ITCH_COUNTERS`` order."""
    for k in ITCH_COUNTERS:
        stats[k] = 0


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
        self._buf = bytearray(BOOK_DTYPE.itemsize)

    def emit_book(self, iid: int, ts: int) -> None:
        """Emit instrument ``iid``'s BOOK with ``ts_origin_ns = ts`` (``out_drops`` when the ring is full)."""
        self.book.write_payload(iid, self._buf)
        if self.emit(self.out, Kind.BOOK, self._buf, ts):
            self.stats["books_emitted"] += 1
        else:
            self.stats["out_drops"] += 1

    def publish_book_counters(self) -> None:
        """Copy the book's own counters (``rejected``, ``decode_errors``) into ``stats``."""
        b, s = self.book, self.stats
        s["rejected"] = b.rejected
        s["decode_errors"] = b.counts[BookEvent.DECODE_ERROR]


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
                except (ItchError, OSError) as exc:
                    self.stats["file_errors"] += 1
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
            iid = book.apply_raw(msg, 0, len(msg), self._seq)
            n += 1
            if iid != NO_BOOK:
                self.emit_book(iid, clock())
        self.stats["messages"] += n
        return n


class MoldDatagrams(ItchIngest):
    """MoldUDP64 datagrams of session ``session`` (None: the first one seen)."""

    def __init__(self, book: L3Book, *, session: str | None, **ports):
        super().__init__(book, **ports)
        self.sequencer = MoldSequencer(session)

    def on_datagram(self, data, ts: int) -> None:
        """One datagram (bytes or a memoryview, read before the next call) received at ``ts``."""
        s = self.stats
        s["datagrams"] += 1
        packet, _reason = try_decode_packet(data)
        if packet is None:
            s["bad_datagrams"] += 1
            return
        v = self.sequencer.on(packet)
        if v.foreign:
            s["foreign"] += 1
            return
        if v.gap is not None:
            s["gaps"] += 1
            s["missing"] += len(v.gap)
            self.log.warning("mold_gap", first=v.gap.start, last=v.gap.stop - 1, missing=len(v.gap), gaps=s["gaps"])
        s["duplicates"] += v.duplicates
        book = self.book
        msgs = packet.messages
        for i in range(v.deliver_from, len(msgs)):
            m = msgs[i]
            iid = book.apply_raw(m, 0, len(m), packet.seq + i)
            s["messages"] += 1
            if iid != NO_BOOK:
                self.emit_book(iid, ts)
        if v.end_of_session:
            self.log.info("mold_end_of_session", next_seq=packet.seq, gaps=s["gaps"], missing=s["missing"])
