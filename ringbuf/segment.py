"""A ring's shared-memory segment and its wake-up semaphore: names, geometry checks, and the
create / attach / unlink / exists calls on POSIX shared memory.

Everything here is control path and raises; ``Ring`` (``ringbuf.ring``) maps what these return.
``geometry_mismatches`` is the pure check ``attach_segment`` applies to a segment's geometry block.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import posix_ipc

from ringbuf import layout as L
from ringbuf.errors import RingExistsError, RingLayoutError, RingNotFoundError

SHM_MODE = 0o600


@dataclass(slots=True)
class Segment:
    """A mapped segment and its wake-up semaphore, with the geometry read from (or written to) it."""

    name: str
    mm: mmap.mmap
    sem: posix_ipc.Semaphore | NoSemaphore
    slot_size: int
    capacity: int
    policy: int


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


def validate_geometry(slot_size: int, capacity: int, full_policy: str) -> int:
    """The policy code of ``full_policy`` once the geometry is valid.

    Raises:
        ValueError: ``slot_size`` not a multiple of 64 in 64..65600, ``capacity`` not a power of two
            >= 2, or ``full_policy`` neither ``"drop"`` nor ``"backpressure"``.
    """
    if slot_size < L.HEADER_BYTES + 1 or slot_size % L.SLOT_ALIGN_BYTES or slot_size > L.HEADER_BYTES + L.MAX_PAYLOAD_BYTES + L.SLOT_ALIGN_BYTES:
        raise ValueError(f"slot_size must be a multiple of {L.SLOT_ALIGN_BYTES} in 64..65600, got {slot_size}")
    if capacity < 2 or capacity & (capacity - 1):
        raise ValueError(f"capacity must be a power of two >= 2, got {capacity}")
    if full_policy not in L.POLICY_CODES:
        raise ValueError(f"full_policy must be 'drop' or 'backpressure', got {full_policy!r}")
    return L.POLICY_CODES[full_policy]


def geometry_mismatches(
    geometry: tuple[int, int, int, int, int, int],
    seg_size: int,
    *,
    slot_size: int | None,
    capacity: int | None,
    full_policy: str | None,
) -> list[str]:
    """Every way a segment's geometry block (``L.GEOMETRY`` unpacked) and size differ from what a
    ringbuf segment must hold and from the geometry the caller expects (None: any); each entry names
    the field, the expected and the found value. Empty when the segment fits.

    A wrong magic, version or control-block size is reported alone: the rest of such a block means
    nothing.
    """
    magic, version, got_slot, got_cap, got_policy, ctl_bytes = geometry
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
            validate_geometry(got_slot, got_cap, L.POLICY_NAMES.get(got_policy, "drop"))
        except ValueError as exc:
            diffs.append(f"geometry invalid: {exc}")
        else:
            if seg_size < L.segment_bytes(got_slot, got_cap):
                diffs.append(f"size expected >= {L.segment_bytes(got_slot, got_cap)} found {seg_size}")
    return diffs


def _unlink_wake_semaphore(pname: str) -> None:
    try:
        posix_ipc.unlink_semaphore(_sem_name(pname))
    except posix_ipc.ExistentialError:
        pass


class NoSemaphore:
    """A private ring's stand-in for the wake-up semaphore: nobody parks on it, so nothing posts it."""

    def acquire(self, timeout=None) -> None:
        raise RuntimeError("a private ring has no wake-up semaphore: its reader cannot park")

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


def create_segment(name: str, *, slot_size: int, capacity: int, full_policy: str, replace: bool) -> Segment:
    """Create segment ``name`` (mode 0600), zeroed, write its geometry block, map it, and create its
    wake-up semaphore (replacing a stale one of that name).

    Raises:
        ValueError: bad name, geometry or policy.
        RingExistsError: the segment exists and ``replace`` is false.
    """
    policy = validate_geometry(slot_size, capacity, full_policy)
    pname = shm_name(name)
    if replace:
        unlink_segment(pname)
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
    _unlink_wake_semaphore(pname)  # any of this name is stale: the segment was just created
    sem = posix_ipc.Semaphore(_sem_name(pname), posix_ipc.O_CREX, mode=SHM_MODE, initial_value=0)
    return Segment(pname, mm, sem, slot_size, capacity, policy)


def private_segment(*, slot_size: int, capacity: int) -> Segment:
    """A segment in anonymous memory of this process (policy ``drop``), with a ``NoSemaphore``.

    Raises:
        ValueError: bad geometry.
    """
    policy = validate_geometry(slot_size, capacity, "drop")
    mm = mmap.mmap(-1, L.segment_bytes(slot_size, capacity))
    L.GEOMETRY.pack_into(mm, 0, L.MAGIC, L.LAYOUT_VERSION, slot_size, capacity, policy, L.CONTROL_BYTES)
    return Segment("private", mm, NoSemaphore(), slot_size, capacity, policy)


def attach_segment(name: str, *, slot_size: int | None, capacity: int | None, full_policy: str | None) -> Segment:
    """Map existing segment ``name`` and open its wake-up semaphore, checking the geometry block
    (``geometry_mismatches``) against the geometry given (None: any).

    Raises:
        RingNotFoundError: no such segment, or it has no wake-up semaphore.
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
    geometry = L.GEOMETRY.unpack_from(mm, 0)
    diffs = geometry_mismatches(geometry, seg_size, slot_size=slot_size, capacity=capacity, full_policy=full_policy)
    if diffs:
        mm.close()
        raise RingLayoutError(f"ring segment {pname} does not match: " + "; ".join(diffs))
    try:
        sem = posix_ipc.Semaphore(_sem_name(pname))
    except posix_ipc.ExistentialError as exc:
        mm.close()
        raise RingNotFoundError(f"ring segment {pname} has no wake-up semaphore {_sem_name(pname)}") from exc
    _, _, got_slot, got_cap, got_policy, _ = geometry
    return Segment(pname, mm, sem, got_slot, got_cap, got_policy)


def unlink_segment(name: str) -> bool:
    """Remove segment ``name`` and its semaphore. Returns True if the segment existed.

    Processes that still map it keep their mapping; only the name goes away.

    Raises:
        ValueError: bad name.
    """
    pname = shm_name(name)
    existed = True
    try:
        posix_ipc.unlink_shared_memory(pname)
    except posix_ipc.ExistentialError:
        existed = False
    _unlink_wake_semaphore(pname)
    return existed


def segment_exists(name: str) -> bool:
    """True if a segment named ``name`` exists.

    Raises:
        ValueError: bad name.
    """
    try:
        shm = posix_ipc.SharedMemory(shm_name(name))
    except posix_ipc.ExistentialError:
        return False
    shm.close_fd()
    return True
