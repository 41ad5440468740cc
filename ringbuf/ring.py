"""Single-producer / single-consumer ring over a POSIX shared-memory segment.

Layout: see ``ringbuf.layout``. Protocol (one writer process, one reader process per ring):

- The writer copies the payload into slot ``seq & (capacity - 1)``, then writes the header with the
  CRC, then publishes ``write_cursor = seq + 1`` with one aligned 8-byte store. x86-64 makes stores
  visible in program order and CPython does not reorder them, so a reader that sees the cursor sees
  the whole slot.
- The reader loads ``write_cursor``, compares it monotonically with its own position, reads the slot,
  verifies the CRC (seeded with ``seq``), hands out a view of the payload, and publishes
  ``read_cursor`` only after the caller is done with the message (at-least-once across a crash).
- Both cursors live in the segment: a restarted reader resumes after its last committed message, and
  a restarted writer at its last published one (an unpublished slot is simply written again).

Hot-path methods return values or codes and never raise on market events (full ring, corrupt slot);
control-path methods (create, attach) raise ``RingError`` subclasses.

This module holds ``Ring`` (a mapped segment: its geometry, ``writer()`` / ``reader()``, ``stats()``,
``close()``) and ``RingStats``; the segment's create / attach / unlink calls live in
``ringbuf.segment``, the producer in ``ringbuf.writer``, the consumer and ``wait_any`` in
``ringbuf.reader``. ``Message``, ``Reader``, ``Writer``, ``shm_name``, ``open_doorbell``,
``wake_semaphore_name`` and ``wait_any`` are importable from here as well.
"""

from __future__ import annotations

import mmap

import msgspec
import posix_ipc

from ringbuf import layout as L
from ringbuf.idle import IdleStrategy
from ringbuf.reader import Message, Reader, wait_any
from ringbuf.segment import (
    NoSemaphore,
    Segment,
    attach_segment,
    create_segment,
    open_doorbell,
    private_segment,
    segment_exists,
    shm_name,
    unlink_segment,
    wake_semaphore_name,
)
from ringbuf.writer import Writer

__all__ = [
    "Message",
    "Reader",
    "Ring",
    "RingStats",
    "Writer",
    "open_doorbell",
    "shm_name",
    "wait_any",
    "wake_semaphore_name",
]


class RingStats(msgspec.Struct, frozen=True):
    """A snapshot of a ring's control block (counters are read without locking: each is exact)."""

    name: str
    slot_size: int
    capacity: int
    full_policy: str
    write_cursor: int
    read_cursor: int
    depth: int
    written: int
    read: int
    dropped: int
    full_events: int
    stall_ns: int
    crc_errors: int
    wakeups: int
    missed_wakeups: int
    writer_pid: int
    reader_pid: int
    writer_heartbeat_ns: int
    reader_heartbeat_ns: int


class Ring:
    """A mapped ring segment. Obtain one with ``Ring.create`` (the owner) or ``Ring.attach``.

    One process may hold at most one ``Writer`` and one ``Reader`` per ring, and the whole system
    at most one of each per ring (single producer, single consumer).
    """

    def __init__(self, name: str, mm: mmap.mmap, sem: posix_ipc.Semaphore | NoSemaphore, slot_size: int, capacity: int, policy: int):
        self.name = shm_name(name)
        self.slot_size = slot_size
        self.capacity = capacity
        self.full_policy = L.POLICY_NAMES[policy]
        self._mm = mm
        self._sem = sem
        self._mv = memoryview(mm)
        self._ro = self._mv.toreadonly()  # what readers slice payload views from
        self._ctl = self._mv[: L.CONTROL_BYTES].cast("Q")
        self._closed = False

    # ----------------------------------------------------------------------------- control path
    @classmethod
    def _from_segment(cls, seg: Segment) -> "Ring":
        return cls(seg.name, seg.mm, seg.sem, seg.slot_size, seg.capacity, seg.policy)

    @classmethod
    def create(cls, name: str, *, slot_size: int, capacity: int, full_policy: str = "drop", replace: bool = False) -> "Ring":
        """Create a new segment (mode 0600), zeroed, with a fresh control block, and map it.

        Args:
            name: ring name (a POSIX shm name; a leading slash is added when missing).
            slot_size: bytes per slot, a multiple of 64 (see ``layout.slot_size_for``).
            capacity: number of slots, a power of two.
            full_policy: ``"drop"`` (count and refuse when full) or ``"backpressure"`` (writer waits).
            replace: unlink an existing segment of that name first (the supervisor's stale-run cleanup).

        Raises:
            ValueError: bad geometry or policy.
            RingExistsError: the segment exists and ``replace`` is false.
        """
        return cls._from_segment(create_segment(name, slot_size=slot_size, capacity=capacity, full_policy=full_policy, replace=replace))

    @classmethod
    def private(cls, *, slot_size: int = 128, capacity: int = 2) -> "Ring":
        """A ring in anonymous memory of this process only: no segment, no name in /dev/shm, nothing
        to unlink, and no wake-up semaphore (its reader cannot park: ``Reader.wait`` raises
        RuntimeError once it would). The runner's keep-warm writes and reads messages through one,
        so that the ring's own code stays warm while a busy-spinning stage idles.

        Raises:
            ValueError: bad geometry.
        """
        return cls._from_segment(private_segment(slot_size=slot_size, capacity=capacity))

    @classmethod
    def attach(cls, name: str, *, slot_size: int | None = None, capacity: int | None = None, full_policy: str | None = None) -> "Ring":
        """Map an existing segment, checking magic, layout version and (when given) the geometry.

        Raises:
            RingNotFoundError: no such segment, or it has no wake-up semaphore.
            RingLayoutError: wrong magic, version, size or geometry; the message names the segment
                and each field that differs (expected vs found).
        """
        return cls._from_segment(attach_segment(name, slot_size=slot_size, capacity=capacity, full_policy=full_policy))

    @staticmethod
    def unlink(name: str) -> bool:
        """Remove the segment and its semaphore. Returns True if the segment existed.

        Processes that still map it keep their mapping; only the name goes away.
        """
        return unlink_segment(name)

    @staticmethod
    def exists(name: str) -> bool:
        """True if a segment of that name exists."""
        return segment_exists(name)

    @property
    def max_payload_bytes(self) -> int:
        return min(self.slot_size - L.HEADER_BYTES, L.MAX_PAYLOAD_BYTES)

    def writer(self, idle: IdleStrategy | None = None) -> "Writer":
        """The producer side; records this pid as the writer. ``idle`` is used by blocking writes."""
        return Writer(self, idle)

    def reader(self) -> "Reader":
        """The consumer side; records this pid as the reader."""
        return Reader(self)

    def stats(self) -> RingStats:
        """Snapshot the control block."""
        c = self._ctl
        w, r = c[L.W_WRITE_CURSOR], c[L.W_READ_CURSOR]
        return RingStats(
            name=self.name,
            slot_size=self.slot_size,
            capacity=self.capacity,
            full_policy=self.full_policy,
            write_cursor=w,
            read_cursor=r,
            depth=w - r if w > r else 0,
            written=c[L.W_WRITTEN],
            read=c[L.W_READ],
            dropped=c[L.W_DROPPED],
            full_events=c[L.W_FULL_EVENTS],
            stall_ns=c[L.W_STALL_NS],
            crc_errors=c[L.W_CRC_ERRORS],
            wakeups=c[L.W_WAKEUPS],
            missed_wakeups=c[L.W_MISSED_WAKEUPS],
            writer_pid=c[L.W_WRITER_PID],
            reader_pid=c[L.W_READER_PID],
            writer_heartbeat_ns=c[L.W_WRITER_HEARTBEAT_NS],
            reader_heartbeat_ns=c[L.W_READER_HEARTBEAT_NS],
        )

    def slot_view(self, seq: int) -> memoryview:
        """The raw bytes of the slot that message ``seq`` occupies (for tests and fault injection)."""
        off = L.CONTROL_BYTES + (seq & (self.capacity - 1)) * self.slot_size
        return self._mv[off : off + self.slot_size]

    def close(self) -> None:
        """Unmap (the segment itself stays until ``unlink``). Views handed out become invalid."""
        if self._closed:
            return
        self._closed = True
        self._ctl.release()
        self._ro.release()
        self._mv.release()
        try:
            self._mm.close()
        except BufferError:  # a caller still holds a payload view; the mapping dies with the process
            pass
        self._sem.close()

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
