"""The order sender's journal: an append-only file of order events, group-committed, replayed after a restart.

Line format (declared once, here)::

    CCCCCCCC {json object}\\n

``CCCCCCCC`` is the CRC-32 (zlib) of the JSON bytes in 8 lowercase hex digits; the JSON is an
orjson object whose ``"t"`` names the record type. A line that lacks its newline, whose CRC does not
match, or whose JSON does not parse is torn (a crash mid-write): replay ignores and counts it, and
``Journal.open`` truncates a torn tail so the next record starts on a clean line.

Records (``oid`` = our order id, u64; amounts are floats; ``ts_ms`` wall clock ms)::

    intent     oid coid iid sym side tif px sz oseq ts_ms    written BEFORE the send (fsync'd by the
               [ro] [adopted]                               group commit after it); ``ro``: true for a
                                                            reduce-only order (absent: false, as in a
                                                            journal written before the field);
                                                            ``adopted``: rebuilt from the venue's report
                                                            after its intent was lost (tif 0 = not
                                                            known, oseq 0)
    ack        oid vid                                      the venue accepted it (vid: its orderId)
    reject     oid code                                     the venue refused it; terminal
    unknown    oid                                          the send's outcome is not known
    fill       oid tid px sz side iid ts_ms                 one venue fill (tid: the venue trade id)
    cancel     oid                                          cancelled at the venue; terminal
    never_sent oid                                          the venue never saw it (43001 on reconcile)
    state      oid status vid                               reconciled from orderInfo (live /
                                                            partially_filled / filled / cancelled)
    account    id                                           the venue account this journal is about
                                                            (its first reconciliation writes it)
    adjust     iid qty was                                  the position set to the venue's ``qty``
                                                            (base units) where it differed (``was``)

Durability: ``append(rec, sync=False)`` writes a record (it then survives the process being killed:
it is in the page cache) and keeps its line in ``tail`` until an fsync of the file succeeds (one fsync
makes every record written so far durable: a group commit): ``sync`` waits for it; ``start_sync``
begins it without waiting (on the journal's fsync thread, ``fsync_thread=True``: ``os.fsync`` releases
the GIL while the disk works, so the caller goes on) and ``sync_outcome`` applies its outcome once
known; ``synced_bytes`` is the file's length at the last successful fsync. What a machine crash can
lose is the tail after ``synced_bytes``; the order sender bounds it
(``pipeline.trading.sender.groupcommit``) and its reconciliation with the venue recovers what it held.
``open`` fsyncs what it replayed, so records a killed process left in the page cache are durable
before anything new is written.

A failed write never leaves a fragment for the next record to be glued to: ``Journal.append`` that
fails (ENOSPC, EIO, a short write then an error, a failed fsync) truncates the file back to the end
of the last complete record before it raises, so the file stays a clean sequence of lines. Until that
truncation and an fsync have succeeded the journal is *in doubt* (``Journal.doubt`` says why): every
``append`` first tries to ``recover`` (truncate, write the backlog, fsync) and raises while it cannot.
After a failed fsync the kernel may have dropped the tail's pages (written back or not, they are no
longer dirty), so ``recover`` cuts the file back to ``synced_bytes`` and writes the tail again from
memory before its fsync. A record that describes something that already happened at the venue (a
fill, an ack) must not be lost because the disk was full: ``Journal.keep`` applies it to the state and
queues it in the backlog, written (in order, before anything newer) by the next successful ``recover``.

Replaying rebuilds every order's last known state (``OrderEntry``), the per-instrument positions
(``Position``: signed base units and average entry price, from the fills) and the last trade id.
The replay (``replay`` / ``JournalState.apply``) is pure; ``Journal`` does the file I/O. No record
ever holds a header or a key.
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

#: order statuses; the last four are terminal
PENDING = "pending"  # intent journaled, no answer yet
UNKNOWN = "unknown"  # sent, outcome not known
LIVE = "live"
PARTIAL = "partially_filled"
FILLED = "filled"
CANCELLED = "cancelled"
REJECTED = "rejected"
NEVER_SENT = "never_sent"
TERMINAL = frozenset((FILLED, CANCELLED, REJECTED, NEVER_SENT))
WORKING = frozenset((LIVE, PARTIAL))

RECORD_TYPES = frozenset(("intent", "ack", "reject", "unknown", "fill", "cancel", "never_sent", "state", "account",
                          "adjust"))


def encode_record(rec: dict) -> bytes:
    """One journal line for ``rec`` (must carry ``"t"``). Raises TypeError: not JSON-serialisable."""
    body = orjson.dumps(rec)
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def decode_line(line: bytes) -> dict | None:
    """The record of one complete line (without its newline); None when it is torn or corrupt."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    body = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        rec = orjson.loads(body)
    except (ValueError, orjson.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) and rec.get("t") in RECORD_TYPES else None


@dataclass
class OrderEntry:
    """An order's last known state."""

    oid: int
    coid: str
    iid: int
    sym: str
    side: int
    tif: int
    px: float
    sz: float
    oseq: int
    ts_ms: int
    status: str = PENDING
    vid: str = ""
    filled: float = 0.0
    code: str = ""
    reduce_only: bool = False  # the intent's ``ro`` (a perpetual's reduce-only order)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def leaves(self) -> float:
        return 0.0 if self.terminal else max(0.0, self.sz - self.filled)


@dataclass
class Position:
    """Signed position in base units and its average entry price (0 when flat)."""

    qty: float = 0.0
    avg_px: float = 0.0

    def apply_fill(self, signed_sz: float, px: float, eps: float = 1e-12) -> None:
        q = self.qty
        new = q + signed_sz
        if abs(q) <= eps or (q > 0) == (signed_sz > 0):  # opening or adding
            self.avg_px = (abs(q) * self.avg_px + abs(signed_sz) * px) / abs(new) if abs(new) > eps else 0.0
        elif abs(new) <= eps:  # closed out
            self.avg_px = 0.0
        elif (new > 0) != (q > 0):  # crossed through zero: the remainder opened at px
            self.avg_px = px
        self.qty = 0.0 if abs(new) <= eps else new


@dataclass
class JournalState:
    """What a replay rebuilds."""

    orders: dict[int, OrderEntry] = field(default_factory=dict)
    positions: dict[int, Position] = field(default_factory=dict)
    trade_ids: set[int] = field(default_factory=set)
    last_trade_id: int = 0
    records: int = 0
    torn: int = 0  # torn / corrupt lines ignored
    orphans: int = 0  # records about an order with no intent
    account: str = ""  # the venue account's id ("" until the first reconciliation)

    def apply(self, rec: dict) -> None:
        """Apply one record (pure state change; an inconsistent record is counted in ``orphans``)."""
        self.records += 1
        t = rec["t"]
        if t == "account":
            self.account = str(rec["id"])
            return
        if t == "adjust":
            pos = self.positions.setdefault(int(rec["iid"]), Position())
            pos.qty = float(rec["qty"])
            if pos.qty == 0.0:
                pos.avg_px = 0.0
            return
        oid = int(rec.get("oid", 0))
        if t == "intent":
            if oid not in self.orders:
                self.orders[oid] = OrderEntry(oid, rec["coid"], int(rec["iid"]), rec["sym"], int(rec["side"]),
                                              int(rec["tif"]), float(rec["px"]), float(rec["sz"]),
                                              int(rec["oseq"]), int(rec.get("ts_ms", 0)),
                                              reduce_only=rec.get("ro") is True)
            return
        o = self.orders.get(oid)
        if o is None:
            self.orphans += 1
            return
        if t == "fill":
            tid = int(rec["tid"])
            if tid in self.trade_ids:
                return
            self.trade_ids.add(tid)
            self.last_trade_id = max(self.last_trade_id, tid)
            sz = float(rec["sz"])
            o.filled += sz
            pos = self.positions.setdefault(o.iid, Position())
            pos.apply_fill(sz if o.side == 1 else -sz, float(rec["px"]))
            if not o.terminal:
                o.status = FILLED if o.filled >= o.sz - 1e-9 * max(1.0, o.sz) else PARTIAL
        elif t == "ack":
            o.vid = str(rec.get("vid", "")) or o.vid
            if o.status in (PENDING, UNKNOWN):
                o.status = LIVE
        elif t == "reject":
            o.status, o.code = REJECTED, str(rec.get("code", ""))
        elif t == "unknown":
            if o.status == PENDING:
                o.status = UNKNOWN
        elif t == "cancel":
            if o.status != FILLED:
                o.status = CANCELLED
        elif t == "never_sent":
            o.status = NEVER_SENT
        elif t == "state":
            o.vid = str(rec.get("vid", "")) or o.vid
            st = rec.get("status")
            if st in (LIVE, PARTIAL, FILLED, CANCELLED) and not (o.terminal and st in WORKING):
                o.status = st

    def position(self, iid: int) -> Position:
        return self.positions.get(iid, Position())


def replay(data: bytes, state: JournalState | None = None) -> tuple[JournalState, int]:
    """Replay journal bytes; returns (state, length of the clean prefix: every complete line).

    Torn or corrupt lines are counted in ``state.torn`` and skipped.
    """
    st = state or JournalState()
    end = data.rfind(b"\n") + 1
    for line in data[:end].split(b"\n")[:-1]:
        rec = decode_line(line)
        if rec is None:
            st.torn += 1
            continue
        try:
            st.apply(rec)
        except (KeyError, TypeError, ValueError):
            st.torn += 1
    if end < len(data):
        st.torn += 1
    return st, end


_RUNNING = object()  # an fsync begun and not yet returned (``_FsyncThread.result``)


class _FsyncThread:
    """Runs ``fsync(fd)`` on a daemon thread of its own, one at a time: ``start`` hands it over,
    ``result`` is ``_RUNNING`` until the call returned (None) or raised (the exception)."""

    def __init__(self):
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="journal-fsync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._todo.get()
            if job is None:
                return
            fsync, fd = job
            try:
                fsync(fd)
                out = None
            except Exception as exc:  # a failed fsync, or a bug: either way the records are not durable
                out = exc
            self._done.put(out)

    def start(self, fsync: Callable[[int], None], fd: int) -> None:
        self._todo.put((fsync, fd))

    def result(self, wait: bool):
        if not wait and self._done.empty():
            return _RUNNING
        return self._done.get()

    def stop(self) -> None:
        self._todo.put(None)
        self._thread.join(timeout=5.0)


class Journal:
    """The journal file: ``open`` replays it, ``append`` writes one record, ``sync`` makes every record
    written so far durable (see the module docstring).

    ``write``, ``fsync`` and ``truncate`` default to ``os.write`` / ``os.fsync`` / ``os.ftruncate``;
    tests inject failing ones. The file is created with mode 0600 and written through an O_APPEND
    descriptor. ``bytes`` is the length of the clean prefix: every record written and not rolled back;
    ``synced_bytes`` the part of it made durable by the last successful fsync; ``tail`` the lines
    written after it (``unsynced`` of them), kept until an fsync succeeds. ``fsync_thread``: the fsyncs
    ``start_sync`` begins run on a thread of the journal's own (else at once, in the caller's).
    """

    def __init__(self, path: str | os.PathLike, *, write: Callable[[int, bytes], int] = os.write,
                 fsync: Callable[[int], None] = os.fsync, truncate: Callable[[int, int], None] = os.ftruncate,
                 fsync_thread: bool = False):
        self.path = Path(path)
        self.fsync_thread = fsync_thread
        self._thread: _FsyncThread | None = None  # started with the first ``start_sync``
        self._running: tuple[int, int] | None = None  # the fsync begun: (bytes, tail lines) it covers
        self._outcome: object = _RUNNING  # its outcome, when it ran in the caller's thread
        self._write = write
        self._fsync = fsync
        self._truncate = truncate
        self.fd = -1
        self.bytes = 0
        self.synced_bytes = 0
        self.tail: list[bytes] = []  # lines written since the last successful fsync
        self.state = JournalState()
        self.backlog: list[dict] = []  # records applied in memory (``keep``), not yet in the file
        self.doubt = ""  # why the file is in doubt ("" when it is not): see the module docstring
        self.failures = 0  # failed writes, fsyncs and truncations since open
        self._rewrite = False  # an fsync failed: ``recover`` writes the tail again from ``synced_bytes``

    @property
    def in_doubt(self) -> bool:
        """True while a failed write or fsync is not yet repaired or kept records are not yet written."""
        return bool(self.doubt or self.backlog)

    @property
    def unsynced(self) -> int:
        """Records written since the last successful fsync."""
        return len(self.tail)

    def open(self) -> JournalState:
        """Replay the file (creating it), truncate a torn tail, fsync what is left (records a killed
        process left in the page cache become durable), open it for appending.

        Raises:
            OSError: the file cannot be created, read, truncated or fsync'd.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            chunks = []
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
            data = b"".join(chunks)
            self.state, end = replay(data)
            if end < len(data):
                os.ftruncate(fd, end)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.bytes = self.synced_bytes = end
        self.tail = []
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        return self.state

    def _write_all(self, data: bytes) -> None:
        n = self._write(self.fd, data)
        while n < len(data):  # a short write to a regular file: finish it (the next call raises ENOSPC)
            n += self._write(self.fd, data[n:])

    def _failed(self, what: str, exc: OSError) -> None:
        """After a failed write or fsync: cut the file back to the clean prefix (best effort) and
        record the doubt. Never raises."""
        self.failures += 1
        self.doubt = f"{what}: {exc.strerror or type(exc).__name__}"
        try:
            self._truncate(self.fd, self.bytes)
        except OSError as texc:
            self.failures += 1
            self.doubt += f"; truncate: {texc.strerror or type(texc).__name__}"

    def _synced(self) -> None:
        """An fsync succeeded: everything written is durable."""
        self.synced_bytes = self.bytes
        self.tail.clear()
        self._rewrite = False

    # ------------------------------------------------------------------------------ fsync without waiting
    @property
    def syncing(self) -> bool:
        """An fsync begun by ``start_sync`` whose outcome ``sync_outcome`` has not applied yet."""
        return self._running is not None

    def start_sync(self) -> bool:
        """Begin an fsync of every record written so far without waiting for it (on the fsync thread;
        without one, it runs now). False when there is nothing to make durable, one is running, or the
        journal is in doubt (``recover`` repairs it, with an fsync of its own)."""
        if self._running is not None or self.in_doubt or not self.tail:
            return False
        self._running = (self.bytes, len(self.tail))
        if self.fsync_thread:
            if self._thread is None:
                self._thread = _FsyncThread()
            self._thread.start(self._fsync, self.fd)
        else:
            try:
                self._fsync(self.fd)
                self._outcome = None
            except OSError as exc:
                self._outcome = exc
        return True

    def sync_outcome(self, *, wait: bool = False) -> str | None:
        """Apply the outcome of the fsync ``start_sync`` began once it is known (``wait``: wait for
        it): "" when it made every record written before it durable; the reason when it failed (the
        journal is then in doubt, and ``recover`` writes the tail again); None while it runs, or when
        none was begun."""
        if self._running is None:
            return None
        if self._thread is not None:
            out = self._thread.result(wait)
        else:
            out, self._outcome = self._outcome, _RUNNING
        if out is _RUNNING:
            return None
        target, lines = self._running
        self._running = None
        if out is None:
            self.synced_bytes = target
            del self.tail[:lines]
            return ""
        self.failures += 1
        self.doubt = f"fsync: {getattr(out, 'strerror', None) or type(out).__name__}"
        self._rewrite = True
        return self.doubt

    def _settle(self) -> None:
        """Before a step that fsyncs or truncates itself: the running fsync's outcome, waited for."""
        if self._running is not None:
            self.sync_outcome(wait=True)

    def recover(self) -> None:
        """Repair a journal in doubt: truncate the file to the clean prefix (after a failed fsync: to
        ``synced_bytes``, the tail written again), write the backlog, fsync. A journal not in doubt is
        left alone.

        Raises:
            OSError: a step failed; the journal stays in doubt (the file cut back again, best effort).
        """
        if not self.in_doubt:
            return
        self._settle()
        rewrite = self._rewrite
        try:
            self._truncate(self.fd, self.synced_bytes if rewrite else self.bytes)
            if rewrite:  # the tail's lines are not in the file any more until written below
                self.bytes = self.synced_bytes
            lines = (self.tail if rewrite else []) + [encode_record(r) for r in self.backlog]
            data = b"".join(lines)
            if data:
                self._write_all(data)
            self._fsync(self.fd)
        except OSError as exc:
            self._failed("recover", exc)
            raise
        self.bytes += len(data)
        self._synced()
        self.backlog.clear()
        self.doubt = ""

    def append(self, rec: dict, *, sync: bool = True) -> int:
        """Write ``rec``'s line (and fsync, unless ``sync`` is False: it then waits in ``tail`` for
        ``sync``), then apply it to the state; returns the bytes written. A journal in doubt is
        recovered first.

        Raises:
            OSError: the recovery, the write or the fsync failed: nothing is applied, the file is cut
                back to the clean prefix (or the journal stays in doubt), and the caller must not
                act on the record (an intent must not be sent).
        """
        self.recover()
        if sync:
            self._settle()
        line = encode_record(rec)
        try:
            self._write_all(line)
            if sync:
                self._fsync(self.fd)
        except OSError as exc:
            self._failed("append", exc)
            self._rewrite = sync and bool(self.tail)  # a failed fsync: the tail before it may be lost too
            raise
        self.bytes += len(line)
        if sync:
            self._synced()
        else:
            self.tail.append(line)
        self.state.apply(rec)
        return len(line)

    def keep(self, rec: dict) -> None:
        """Apply ``rec`` to the state now and write it with the next successful ``recover`` (the
        journal is in doubt until then): for a record of something that already happened, which a
        failed ``append`` must not lose. Never raises."""
        self.state.apply(rec)
        self.backlog.append(rec)

    def sync(self) -> None:
        """Make every record written so far durable: one fsync (a group commit of un-synced appends);
        a journal in doubt is recovered instead (which ends with its fsync).

        Raises:
            OSError: the fsync (or the recovery) failed: the journal is in doubt until a ``recover``
                succeeds, which writes the tail again from ``synced_bytes``.
        """
        self._settle()
        if self.in_doubt:
            self.recover()
            return
        try:
            self._fsync(self.fd)
        except OSError as exc:
            self.failures += 1
            self.doubt = f"fsync: {exc.strerror or type(exc).__name__}"
            self._rewrite = True
            raise
        self._synced()

    def close(self) -> None:
        """Close the file (a running fsync is waited for first; its outcome applied) and stop the fsync
        thread."""
        self._settle()
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
