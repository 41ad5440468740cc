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
"""

from __future__ import annotations

import mmap
import os
import time
from typing import Callable, NamedTuple, Sequence

import crc32c as _crc32c_mod
import msgspec
import posix_ipc

from ringbuf import layout as L
from ringbuf.errors import (
    PayloadTooLargeError,
    RingExistsError,
    RingLayoutError,
    RingNotFoundError,
)
from ringbuf.idle import BackOff, IdleStrategy

_crc = _crc32c_mod.crc32c
_HDR_PACK = L.HEADER.pack_into
_HDR_UNPACK = L.HEADER.unpack_from
_PRE_PACK = L.CRC_PREFIX.pack_into
_HB = L.HEADER_BYTES
_CB = L.CONTROL_BYTES
_WC = L.W_WRITE_CURSOR
_RC = L.W_READ_CURSOR
_WRITTEN = L.W_WRITTEN
_READ = L.W_READ
_PARKED = L.W_READER_PARKED
_new_tuple = tuple.__new__

SHM_MODE = 0o600


class Message(NamedTuple):
    """One message as the reader hands it out.

    ``payload`` is a read-only view into the slot: valid until the reader's next read call or
    ``commit()``; copy it (``bytes(msg.payload)``) to keep it longer.
    """

    seq: int
    ts_origin_ns: int
    kind: int
    payload: memoryview


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


def shm_name(name: str) -> str:
    """The POSIX name of a ring's segment: ``name`` with one leading slash.

    Raises:
        ValueError: empty name, or a name with a slash after the first character.
    """
    bare = name[1:] if name.startswith("/") else name
    if not bare or "/" in bare or len(bare) > 200:
        raise ValueError(f"invalid ring name {name!r}: one path component without '/'")
    return "/" + bare


def _sem_name(name: str) -> str:
    return shm_name(name) + ".wake"


def wake_semaphore_name(name: str) -> str:
    """The POSIX name of the wake-up semaphore of ring ``name`` (created and unlinked with the ring)."""
    return _sem_name(shm_name(name))


def open_doorbell(ring_name: str) -> posix_ipc.Semaphore:
    """Open the wake-up semaphore of ring ``ring_name`` to use as another ring's doorbell
    (``Writer.use_doorbell``): a consumer of several rings parks on the semaphore of its first input
    (``wait_any``), so the writers of its other inputs must post that one.

    Raises:
        RingNotFoundError: no such semaphore.
    """
    try:
        return posix_ipc.Semaphore(wake_semaphore_name(ring_name))
    except posix_ipc.ExistentialError as exc:
        raise RingNotFoundError(f"no wake-up semaphore {wake_semaphore_name(ring_name)} for a doorbell") from exc


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


def _validate_geometry(slot_size: int, capacity: int, full_policy: str) -> int:
    if slot_size < L.HEADER_BYTES + 1 or slot_size % L.SLOT_ALIGN_BYTES or slot_size > L.HEADER_BYTES + L.MAX_PAYLOAD_BYTES + L.SLOT_ALIGN_BYTES:
        raise ValueError(f"slot_size must be a multiple of {L.SLOT_ALIGN_BYTES} in 64..65600, got {slot_size}")
    if capacity < 2 or capacity & (capacity - 1):
        raise ValueError(f"capacity must be a power of two >= 2, got {capacity}")
    if full_policy not in L.POLICY_CODES:
        raise ValueError(f"full_policy must be 'drop' or 'backpressure', got {full_policy!r}")
    return L.POLICY_CODES[full_policy]


class _NoSemaphore:
    """A private ring's stand-in for the wake-up semaphore: nobody parks on it, so nothing posts it."""

    def acquire(self, timeout=None) -> None:
        raise RuntimeError("a private ring has no wake-up semaphore: its reader cannot park")

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


class Ring:
    """A mapped ring segment. Obtain one with ``Ring.create`` (the owner) or ``Ring.attach``.

    One process may hold at most one ``Writer`` and one ``Reader`` per ring, and the whole system
    at most one of each per ring (single producer, single consumer).
    """

    def __init__(self, name: str, mm: mmap.mmap, sem: posix_ipc.Semaphore, slot_size: int, capacity: int, policy: int):
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
        policy = _validate_geometry(slot_size, capacity, full_policy)
        pname = shm_name(name)
        if replace:
            cls.unlink(pname)
        size = L.segment_bytes(slot_size, capacity)
        try:
            shm = posix_ipc.SharedMemory(pname, posix_ipc.O_CREX, mode=SHM_MODE, size=size)
        except posix_ipc.ExistentialError as exc:
            raise RingExistsError(f"ring segment {pname} already exists (a previous run left it? unlink it first)") from exc
        try:
            os.fchmod(shm.fd, SHM_MODE)  # the umask may have narrowed it; never widen beyond 0600
            mm = mmap.mmap(shm.fd, size)
        except BaseException:
            shm.unlink()
            raise
        finally:
            shm.close_fd()
        L.GEOMETRY.pack_into(mm, 0, L.MAGIC, L.LAYOUT_VERSION, slot_size, capacity, policy, L.CONTROL_BYTES)
        try:
            posix_ipc.unlink_semaphore(_sem_name(pname))
        except posix_ipc.ExistentialError:
            pass
        sem = posix_ipc.Semaphore(_sem_name(pname), posix_ipc.O_CREX, mode=SHM_MODE, initial_value=0)
        return cls(pname, mm, sem, slot_size, capacity, policy)

    @classmethod
    def private(cls, *, slot_size: int = 128, capacity: int = 2) -> "Ring":
        """A ring in anonymous memory of this process only: no segment, no name in /dev/shm, nothing
        to unlink, and no wake-up semaphore (its reader cannot park: ``Reader.wait`` raises
        RuntimeError once it would). The runner's keep-warm writes and reads messages through one,
        so that the ring's own code stays warm while a busy-spinning stage idles.

        Raises:
            ValueError: bad geometry.
        """
        policy = _validate_geometry(slot_size, capacity, "drop")
        mm = mmap.mmap(-1, L.segment_bytes(slot_size, capacity))
        L.GEOMETRY.pack_into(mm, 0, L.MAGIC, L.LAYOUT_VERSION, slot_size, capacity, policy, L.CONTROL_BYTES)
        return cls("private", mm, _NoSemaphore(), slot_size, capacity, policy)

    @classmethod
    def attach(cls, name: str, *, slot_size: int | None = None, capacity: int | None = None, full_policy: str | None = None) -> "Ring":
        """Map an existing segment, checking magic, layout version and (when given) the geometry.

        Raises:
            RingNotFoundError: no such segment.
            RingLayoutError: wrong magic, version, size or geometry; the message names the segment
                and each field that differs (expected vs found).
        """
        pname = shm_name(name)
        try:
            shm = posix_ipc.SharedMemory(pname)
        except posix_ipc.ExistentialError as exc:
            raise RingNotFoundError(f"ring segment {pname} does not exist (is the supervisor running?)") from exc
        try:
            if shm.size < L.CONTROL_BYTES:
                raise RingLayoutError(f"ring segment {pname}: size {shm.size} bytes is smaller than the {L.CONTROL_BYTES}-byte control block")
            mm = mmap.mmap(shm.fd, shm.size)
            seg_size = shm.size
        finally:
            shm.close_fd()
        magic, version, got_slot, got_cap, got_policy, ctl_bytes = L.GEOMETRY.unpack_from(mm, 0)
        diffs = []
        if magic != L.MAGIC:
            diffs.append(f"magic expected {L.MAGIC:#018x} found {magic:#018x}")
        if version != L.LAYOUT_VERSION:
            diffs.append(f"version expected {L.LAYOUT_VERSION} found {version}")
        if ctl_bytes != L.CONTROL_BYTES and not diffs:
            diffs.append(f"control_bytes expected {L.CONTROL_BYTES} found {ctl_bytes}")
        if not diffs:
            if slot_size is not None and got_slot != slot_size:
                diffs.append(f"slot_size expected {slot_size} found {got_slot}")
            if capacity is not None and got_cap != capacity:
                diffs.append(f"capacity expected {capacity} found {got_cap}")
            if full_policy is not None and L.POLICY_NAMES.get(got_policy) != full_policy:
                diffs.append(f"full_policy expected {full_policy} found {L.POLICY_NAMES.get(got_policy, got_policy)}")
            if got_policy not in L.POLICY_NAMES:
                diffs.append(f"full_policy code {got_policy} is unknown")
            try:
                _validate_geometry(got_slot, got_cap, L.POLICY_NAMES.get(got_policy, "drop"))
            except ValueError as exc:
                diffs.append(f"geometry invalid: {exc}")
            else:
                if seg_size < L.segment_bytes(got_slot, got_cap):
                    diffs.append(f"size expected >= {L.segment_bytes(got_slot, got_cap)} found {seg_size}")
        if diffs:
            mm.close()
            raise RingLayoutError(f"ring segment {pname} does not match: " + "; ".join(diffs))
        try:
            sem = posix_ipc.Semaphore(_sem_name(pname))
        except posix_ipc.ExistentialError as exc:
            mm.close()
            raise RingNotFoundError(f"ring segment {pname} has no wake-up semaphore {_sem_name(pname)}") from exc
        return cls(pname, mm, sem, got_slot, got_cap, got_policy)

    @staticmethod
    def unlink(name: str) -> bool:
        """Remove the segment and its semaphore. Returns True if the segment existed.

        Processes that still map it keep their mapping; only the name goes away.
        """
        pname = shm_name(name)
        existed = True
        try:
            posix_ipc.unlink_shared_memory(pname)
        except posix_ipc.ExistentialError:
            existed = False
        try:
            posix_ipc.unlink_semaphore(_sem_name(pname))
        except posix_ipc.ExistentialError:
            pass
        return existed

    @staticmethod
    def exists(name: str) -> bool:
        """True if a segment of that name exists."""
        try:
            shm = posix_ipc.SharedMemory(shm_name(name))
        except posix_ipc.ExistentialError:
            return False
        shm.close_fd()
        return True

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


class Writer:
    """The single producer of a ring.

    Payloads are bytes-like objects of unsigned bytes (``bytes``, ``bytearray``, a ``memoryview``
    of format ``B``); ``len(payload)`` is taken as their size.
    """

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


class Reader:
    """The single consumer of a ring.

    Read calls commit what the previous call handed out (the caller has finished with it once it
    asks for more), so a reader killed while processing sees that message again after a restart,
    and nothing before it. ``commit()`` commits explicitly.
    """

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
