"""The consumer end of a ring: ``Reader`` (one per ring in the whole system), the ``Message`` it
hands out, and ``wait_any``, the blocking wait of one consumer over several rings.

Protocol (see ``ringbuf.ring``): load ``write_cursor``, compare it monotonically with the reader's
own position, read the slot, verify the CRC (seeded with ``seq``), hand out a read-only view of the
payload, and publish ``read_cursor`` only once the caller is done with the message (at-least-once
across a crash).

Read calls never raise on a corrupt, torn or stale slot: it is counted in ``crc_errors`` and skipped.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, NamedTuple

import posix_ipc

from ringbuf import layout as L
from ringbuf.slot import CB as _CB
from ringbuf.slot import HB as _HB
from ringbuf.slot import HDR_UNPACK as _HDR_UNPACK
from ringbuf.slot import PARKED as _PARKED
from ringbuf.slot import PRE_PACK as _PRE_PACK
from ringbuf.slot import RC as _RC
from ringbuf.slot import READ as _READ
from ringbuf.slot import WC as _WC
from ringbuf.slot import crc as _crc

if TYPE_CHECKING:
    from ringbuf.ring import Ring

_new_tuple = tuple.__new__


class Message(NamedTuple):
    """One message as the reader hands it out.

    ``payload`` is a read-only view into the slot: valid until the reader's next read call or
    ``commit()``; copy it (``bytes(msg.payload)``) to keep it longer.
    """

    seq: int
    ts_origin_ns: int
    kind: int
    payload: memoryview



def wait_any(readers: "list[Reader]", timeout_ns: int, spins: int = 100, park_ns: int = 5_000_000) -> bool:
    """Blocking wait on several rings of one consumer: spin ``spins`` rounds over all of them, then
    raise every ring's parked flag and park on the first reader's semaphore (the doorbell every writer
    of these rings posts: ``Writer.use_doorbell``), for at most ``timeout_ns`` in all. True when one of
    them has a message. Same lost-wake-up bound as ``Reader.wait`` (parks of at most ``park_ns``).
    """
    if len(readers) == 1:
        return readers[0].wait(timeout_ns, spins, park_ns)
    ctls = [(r._ctl, r) for r in readers]
    for _ in range(spins):
        for ctl, r in ctls:
            if ctl[_WC] > r._pos:
                return True
    deadline = time.monotonic_ns() + timeout_ns
    bell_ctl, sem = readers[0]._ctl, readers[0]._sem
    while True:
        for ctl, _ in ctls:
            ctl[_PARKED] = 1
        ready = any(ctl[_WC] > r._pos for ctl, r in ctls)
        left = deadline - time.monotonic_ns()
        if ready or left <= 0:
            for ctl, _ in ctls:
                ctl[_PARKED] = 0
            return ready
        try:
            sem.acquire(min(left, park_ns) / 1e9)
            woke = True
        except (posix_ipc.BusyError, posix_ipc.SignalError):
            woke = False
        for ctl, _ in ctls:
            ctl[_PARKED] = 0
        if any(ctl[_WC] > r._pos for ctl, r in ctls):
            bell_ctl[L.W_WAKEUPS if woke else L.W_MISSED_WAKEUPS] += 1
            return True


class Reader:
    """The single consumer of a ring.

    Read calls commit what the previous call handed out (the caller has finished with it once it
    asks for more), so a reader killed while processing sees that message again after a restart,
    and nothing before it. ``commit()`` commits explicitly.
    """

    # hot path: try_read, try_read_batch and poll each inline the slot decode (header unpack, CRC
    # check, payload view) on purpose: a shared helper would add a call per message.

    def __init__(self, ring: Ring):
        self._ring = ring
        self._mm = ring._mm
        self._mv = ring._ro
        self._ctl = ring._ctl
        self._sem = ring._sem
        self._mask = ring.capacity - 1
        self._slot = ring.slot_size
        self._max = ring.max_payload_bytes
        self._prefix = bytearray(L.CRC_PREFIX.size)
        ctl = self._ctl
        self._pos = self._committed = ctl[_RC]  # resume after the last commit
        self._head = ctl[_WC]
        ctl[L.W_READER_PID] = os.getpid()
        ctl[L.W_READER_HEARTBEAT_NS] = time.monotonic_ns()

    @property
    def position(self) -> int:
        """Sequence number of the next message this reader will look at."""
        return self._pos

    def available(self) -> int:
        """Messages published and not yet read by this reader."""
        self._head = h = self._ctl[_WC]
        return h - self._pos if h > self._pos else 0

    def commit(self) -> None:
        """Publish the read cursor: every message handed out so far is done with."""
        pos = self._pos
        if pos > self._committed:
            self._committed = pos
            ctl = self._ctl
            ctl[_RC] = pos
            ctl[_READ] = pos

    def _corrupt(self) -> None:
        self._ctl[L.W_CRC_ERRORS] += 1

    def try_read(self) -> Message | None:
        """Commit the previous message, then return the next valid one, or None if none is ready.

        A slot whose CRC does not verify (corrupt, torn or stale) is counted in ``crc_errors`` and
        skipped; it is never returned and never raises.
        """
        pos = self._pos
        ctl = self._ctl
        if pos > self._committed:
            self._committed = pos
            ctl[_RC] = pos
            ctl[_READ] = pos
        mm = self._mm
        pre = self._prefix
        while True:
            if pos >= self._head:
                self._head = ctl[_WC]
                if pos >= self._head:
                    return None
            off = _CB + (pos & self._mask) * self._slot
            ts, kind, n, crc = _HDR_UNPACK(mm, off)
            self._pos = pos + 1
            if n <= self._max:
                _PRE_PACK(pre, 0, pos, ts, kind, n)
                view = self._mv[off + _HB : off + _HB + n]
                if _crc(view, _crc(pre)) == crc:
                    return _new_tuple(Message, (pos, ts, kind, view))
            self._corrupt()
            pos += 1

    def try_read_batch(self, limit: int) -> list[Message]:
        """Commit what was handed out before, then return up to ``limit`` valid messages (maybe none).

        Views stay valid until the next read call or ``commit()``.
        """
        self.commit()
        out: list[Message] = []
        pos = self._pos
        head = self._head
        if pos >= head:
            self._head = head = self._ctl[_WC]
            if pos >= head:
                return out
        end = min(head, pos + limit)
        mm = self._mm
        mv = self._mv
        pre = self._prefix
        mask, slot, maxn = self._mask, self._slot, self._max
        append = out.append
        bad = 0
        while pos < end:
            off = _CB + (pos & mask) * slot
            ts, kind, n, crc = _HDR_UNPACK(mm, off)
            if n <= maxn:
                _PRE_PACK(pre, 0, pos, ts, kind, n)
                view = mv[off + _HB : off + _HB + n]
                if _crc(view, _crc(pre)) == crc:
                    append(_new_tuple(Message, (pos, ts, kind, view)))
                    pos += 1
                    continue
            bad += 1
            pos += 1
        self._pos = pos
        if bad:
            self._ctl[L.W_CRC_ERRORS] += bad
        return out

    def poll(self, handler: Callable[[int, int, int, memoryview], object], limit: int) -> int:
        """Call ``handler(seq, ts_origin_ns, kind, payload)`` for up to ``limit`` valid messages,
        then commit them all with one cursor store. Returns the number handled.

        If the handler raises, the messages handled before it are committed and the exception
        propagates (the failing message will be seen again).
        """
        self.commit()
        pos = start = self._pos
        head = self._head
        if pos >= head:
            self._head = head = self._ctl[_WC]
            if pos >= head:
                return 0
        end = min(head, pos + limit)
        mm = self._mm
        mv = self._mv
        pre = self._prefix
        mask, slot, maxn = self._mask, self._slot, self._max
        handled = bad = 0
        try:
            while pos < end:
                off = _CB + (pos & mask) * slot
                ts, kind, n, crc = _HDR_UNPACK(mm, off)
                if n <= maxn:
                    _PRE_PACK(pre, 0, pos, ts, kind, n)
                    view = mv[off + _HB : off + _HB + n]
                    if _crc(view, _crc(pre)) == crc:
                        handler(pos, ts, kind, view)
                        handled += 1
                        pos += 1
                        continue
                bad += 1
                pos += 1
        finally:
            self._pos = pos
            if bad:
                self._ctl[L.W_CRC_ERRORS] += bad
            if pos > start:
                self.commit()
        return handled

    def wait(self, timeout_ns: int, spins: int = 100, park_ns: int = 5_000_000) -> bool:
        """Blocking wait: spin ``spins`` times, then park on the ring's semaphore until the writer
        posts it, for at most ``timeout_ns`` in all. Returns True when a message is available.

        The writer posts only when it sees the reader's parked flag, so an idle pair costs no CPU.
        A park that times out while data is waiting (a wake-up lost to store/load reordering
        between the two processes) is counted in ``missed_wakeups``; parks are bounded by
        ``park_ns`` so such a loss costs at most that long.
        """
        ctl = self._ctl
        for _ in range(spins):
            if ctl[_WC] > self._pos:
                return True
        deadline = time.monotonic_ns() + timeout_ns
        sem = self._sem
        while True:
            ctl[_PARKED] = 1
            if ctl[_WC] > self._pos:
                ctl[_PARKED] = 0
                return True
            left = deadline - time.monotonic_ns()
            if left <= 0:
                ctl[_PARKED] = 0
                return False
            try:
                sem.acquire(min(left, park_ns) / 1e9)
                woke = True
            except (posix_ipc.BusyError, posix_ipc.SignalError):  # timed out, or a signal (e.g. SIGTERM) arrived
                woke = False
            ctl[_PARKED] = 0
            if ctl[_WC] > self._pos:
                if woke:
                    ctl[L.W_WAKEUPS] += 1
                else:
                    ctl[L.W_MISSED_WAKEUPS] += 1
                return True

    def heartbeat(self, now_ns: int) -> None:
        """Record liveness (the runner calls this once per heartbeat period)."""
        self._ctl[L.W_READER_HEARTBEAT_NS] = now_ns
