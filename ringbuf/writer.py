"""The producer end of a ring: ``Writer`` (one per ring in the whole system).

Protocol (see ``ringbuf.ring``): copy the payload into slot ``seq & (capacity - 1)``, write the
header with the CRC, then publish ``write_cursor = seq + 1`` with one aligned 8-byte store, and post
the reader's semaphore only when its parked flag is up.

``try_write`` / ``write`` / ``try_claim`` return values or codes and never raise on a full ring;
they raise ``PayloadTooLargeError`` only for a payload that can never fit (a programming error).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Sequence

import posix_ipc

from ringbuf import layout as L
from ringbuf.errors import PayloadTooLargeError
from ringbuf.idle import BackOff, IdleStrategy
from ringbuf.slot import CB as _CB
from ringbuf.slot import HB as _HB
from ringbuf.slot import HDR_PACK as _HDR_PACK
from ringbuf.slot import PARKED as _PARKED
from ringbuf.slot import PRE_PACK as _PRE_PACK
from ringbuf.slot import RC as _RC
from ringbuf.slot import WC as _WC
from ringbuf.slot import WRITTEN as _WRITTEN
from ringbuf.slot import crc as _crc

if TYPE_CHECKING:
    from ringbuf.ring import Ring


class Writer:
    """The single producer of a ring.

    Payloads are bytes-like objects of unsigned bytes (``bytes``, ``bytearray``, a ``memoryview``
    of format ``B``); ``len(payload)`` is taken as their size.
    """

    # hot path: try_write inlines the size and full checks (as try_claim does) and the publishing
    # stores of _publish on purpose: a shared helper would add a call per message.

    def __init__(self, ring: Ring, idle: IdleStrategy | None):
        self._ring = ring
        self._mm = ring._mm
        self._ctl = ring._ctl
        self._sem = ring._sem
        self._doorbell: posix_ipc.Semaphore | None = None
        self._mask = ring.capacity - 1
        self._cap = ring.capacity
        self._slot = ring.slot_size
        self._max = ring.max_payload_bytes
        self._drop = ring.full_policy == "drop"
        self._idle = idle if idle is not None else BackOff()
        self._prefix = bytearray(L.CRC_PREFIX.size)
        ctl = self._ctl
        self._head = ctl[_WC]  # resume where the last writer published
        self._tail = ctl[_RC]
        self._was_full = False
        self._claim_seq = -1
        ctl[L.W_WRITER_PID] = os.getpid()
        ctl[L.W_WRITER_HEARTBEAT_NS] = time.monotonic_ns()

    @property
    def position(self) -> int:
        """Sequence number the next message will get."""
        return self._head

    def _full(self) -> bool:
        """Account for a full ring; returns False (nothing written)."""
        ctl = self._ctl
        if not self._was_full:
            self._was_full = True
            ctl[L.W_FULL_EVENTS] += 1
        if self._drop:
            ctl[L.W_DROPPED] += 1
        return False

    def try_write(self, kind: int, payload, ts_origin_ns: int) -> bool:
        """Write one message if there is room. Never blocks.

        Returns:
            True when published. False when the ring is full: with policy ``drop`` the message is
            counted in ``dropped``; with ``backpressure`` nothing is counted as lost and the caller
            still owns the message (use ``write`` to wait).

        Raises:
            PayloadTooLargeError: the payload does not fit a slot (a programming error).
        """
        n = len(payload)
        if n > self._max:
            raise PayloadTooLargeError(f"{n}-byte payload does not fit ring {self._ring.name} (max {self._max})")
        seq = self._head
        if seq - self._tail >= self._cap:
            self._tail = self._ctl[_RC]
            if seq - self._tail >= self._cap:
                return self._full()
        off = _CB + (seq & self._mask) * self._slot
        pre = self._prefix
        _PRE_PACK(pre, 0, seq, ts_origin_ns, kind, n)
        mm = self._mm
        mm[off + _HB : off + _HB + n] = payload
        _HDR_PACK(mm, off, ts_origin_ns, kind, n, _crc(payload, _crc(pre)))
        seq += 1
        self._head = seq
        ctl = self._ctl
        ctl[_WC] = seq  # publish: one aligned 8-byte store
        ctl[_WRITTEN] = seq
        self._was_full = False
        if ctl[_PARKED]:
            ctl[_PARKED] = 0
            self._sem.release()
        return True

    def use_doorbell(self, sem: posix_ipc.Semaphore) -> None:
        """Post ``sem`` instead of this ring's own semaphore when the reader is parked (its consumer
        parks on another ring's semaphore: ``wait_any``). The caller keeps ``sem`` open while the
        writer is in use and closes it after."""
        self._sem = self._doorbell = sem

    def write(self, kind: int, payload, ts_origin_ns: int, timeout_ns: int | None = None) -> bool:
        """Write one message, applying the ring's full policy.

        With ``drop`` this is ``try_write``. With ``backpressure`` it waits with the writer's idle
        strategy until the reader frees a slot, adds the wait to ``stall_ns``, and returns True; it
        returns False only when ``timeout_ns`` passes first (the message was not written, and the
        caller still owns it).
        """
        ok = self.try_write(kind, payload, ts_origin_ns)
        if ok or self._drop:
            return ok
        return self._wait_then(lambda: self.try_write(kind, payload, ts_origin_ns), timeout_ns)

    def _wait_then(self, attempt: Callable[[], bool], timeout_ns: int | None) -> bool:
        start = time.monotonic_ns()
        idle = self._idle
        idle.reset()
        ok = False
        while True:
            idle.idle(0)
            if attempt():
                ok = True
                break
            if timeout_ns is not None and time.monotonic_ns() - start >= timeout_ns:
                break
        self._ctl[L.W_STALL_NS] += time.monotonic_ns() - start
        return ok

    def try_write_batch(self, messages: Sequence[tuple[int, object, int]]) -> int:
        """Write ``(kind, payload, ts_origin_ns)`` messages in order while there is room.

        All are published with a single cursor store at the end. Returns how many were written (a
        prefix of ``messages``). With policy ``drop``, the rest are counted as dropped; with
        ``backpressure`` the caller still owns the rest.

        Raises:
            PayloadTooLargeError: a payload does not fit a slot; nothing of the batch is written.
        """
        total = len(messages)
        maxn = self._max
        for _, payload, _ in messages:  # refuse an oversized payload before anything is written
            if len(payload) > maxn:
                raise PayloadTooLargeError(f"{len(payload)}-byte payload does not fit ring {self._ring.name} (max {maxn})")
        seq = start = self._head
        cap = self._cap
        free = cap - (seq - self._tail)
        if free < total:
            self._tail = self._ctl[_RC]
            free = cap - (seq - self._tail)
        count = total if total <= free else free
        mm = self._mm
        pre = self._prefix
        mask, slot = self._mask, self._slot
        try:
            for i in range(count):
                kind, payload, ts = messages[i]
                n = len(payload)
                off = _CB + (seq & mask) * slot
                _PRE_PACK(pre, 0, seq, ts, kind, n)
                mm[off + _HB : off + _HB + n] = payload
                _HDR_PACK(mm, off, ts, kind, n, _crc(payload, _crc(pre)))
                seq += 1
        finally:
            if seq > start:
                self._publish(seq)
        if count < total:
            ctl = self._ctl
            if not self._was_full:
                self._was_full = True
                ctl[L.W_FULL_EVENTS] += 1
            if self._drop:
                ctl[L.W_DROPPED] += total - count
        return count

    def write_batch(self, messages: Sequence[tuple[int, object, int]], timeout_ns: int | None = None) -> int:
        """Write a list of messages, applying the full policy; returns how many were written.

        ``drop``: as ``try_write_batch``. ``backpressure``: waits (idle strategy, ``stall_ns``) until
        all are written or ``timeout_ns`` passes.
        """
        done = self.try_write_batch(messages)
        if self._drop or done == len(messages):
            return done
        box = [done]

        def attempt() -> bool:
            box[0] += self.try_write_batch(messages[box[0] :])
            return box[0] == len(messages)

        self._wait_then(attempt, timeout_ns)
        return box[0]

    def _publish(self, seq: int) -> None:
        self._head = seq
        ctl = self._ctl
        ctl[_WC] = seq
        ctl[_WRITTEN] = seq
        self._was_full = False
        if ctl[_PARKED]:
            ctl[_PARKED] = 0
            self._sem.release()

    def try_claim(self, length: int) -> memoryview | None:
        """Reserve the next slot and return a writable view of ``length`` payload bytes, or None
        when the ring is full (counted as for ``try_write``). Fill it, then call ``commit_claim``.
        Nothing is visible to the reader until then; a writer that dies in between leaves nothing.

        Raises:
            PayloadTooLargeError: ``length`` exceeds the slot.
        """
        if length > self._max:
            raise PayloadTooLargeError(f"{length}-byte payload does not fit ring {self._ring.name} (max {self._max})")
        seq = self._head
        if seq - self._tail >= self._cap:
            self._tail = self._ctl[_RC]
            if seq - self._tail >= self._cap:
                self._full()
                return None
        off = _CB + (seq & self._mask) * self._slot
        self._claim_seq = seq
        self._claim_off = off
        self._claim_len = length
        return self._ring._mv[off + _HB : off + _HB + length]

    def commit_claim(self, kind: int, ts_origin_ns: int) -> None:
        """Seal and publish the slot reserved by ``try_claim``.

        Raises:
            RuntimeError: no claim is outstanding.
        """
        seq = self._claim_seq
        if seq < 0:
            raise RuntimeError("commit_claim without a successful try_claim")
        self._claim_seq = -1
        off, n = self._claim_off, self._claim_len
        pre = self._prefix
        _PRE_PACK(pre, 0, seq, ts_origin_ns, kind, n)
        mm = self._mm
        _HDR_PACK(mm, off, ts_origin_ns, kind, n, _crc(self._ring._mv[off + _HB : off + _HB + n], _crc(pre)))
        self._publish(seq + 1)

    def heartbeat(self, now_ns: int) -> None:
        """Record liveness (the runner calls this once per heartbeat period)."""
        self._ctl[L.W_WRITER_HEARTBEAT_NS] = now_ns

    def free_slots(self) -> int:
        """Slots free right now (reads the reader's cursor)."""
        self._tail = self._ctl[_RC]
        return self._cap - (self._head - self._tail)
