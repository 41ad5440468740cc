"""A ring's segment (``ringbuf.segment`` through ``Ring.create`` / ``attach`` / ``private`` /
``unlink`` / ``exists``): names, mode 0600, the wake-up semaphore, replace, and every way attach
rejects a segment whose magic, version, size or geometry differs.

Each test is one sentence of the contract.
"""

from __future__ import annotations

import mmap
import os
import stat

import posix_ipc
import pytest

from ringbuf import (
    Ring,
    RingError,
    RingExistsError,
    RingLayoutError,
    RingNotFoundError,
    shm_name,
)
from ringbuf import layout as L
from ringbuf.segment import geometry_mismatches, validate_geometry


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "little")


# ================================================================================ control path


def test_create_then_attach_share_one_segment(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as owner, Ring.attach(ring_name) as other:
        assert owner.name == other.name == "/" + ring_name
        assert (other.slot_size, other.capacity, other.full_policy) == (64, 8, "drop")
        assert owner.writer().try_write(4, b"shared", 77)
        m = other.reader().try_read()
        assert (m.seq, m.kind, m.ts_origin_ns, bytes(m.payload)) == (0, 4, 77, b"shared")


def test_a_private_ring_lives_in_this_process_only_and_cannot_park():
    before = set(os.listdir("/dev/shm"))
    ring = Ring.private(slot_size=128, capacity=2)
    try:
        assert set(os.listdir("/dev/shm")) == before  # no segment, no semaphore
        w, r = ring.writer(), ring.reader()
        got = []
        for i in range(5):  # wraps the two slots: every message written is read back intact
            assert w.try_write(3, seq_bytes(i), 1_000 + i)
            assert r.poll(lambda seq, ts, kind, payload: got.append((seq, ts, kind, bytes(payload))), 8) == 1
        assert got == [(i, 1_000 + i, 3, seq_bytes(i)) for i in range(5)]
        assert w.try_write(3, b"x", 1) and w.try_write(3, b"y", 2) and not w.try_write(3, b"z", 3)  # full: dropped
        assert [bytes(m.payload) for m in r.try_read_batch(8)] == [b"x", b"y"]
        r.commit()
        with pytest.raises(RuntimeError, match="cannot park"):
            r.wait(1_000_000, spins=0)
    finally:
        ring.close()


def test_attach_with_matching_geometry_succeeds(ring_name):
    Ring.create(ring_name, slot_size=128, capacity=4, full_policy="backpressure").close()
    with Ring.attach(ring_name, slot_size=128, capacity=4, full_policy="backpressure") as ring:
        assert ring.max_payload_bytes == 112


def test_name_gets_one_leading_slash():
    assert shm_name("md") == shm_name("/md") == "/md"
    for bad in ("", "/", "a/b", "/a/b", "x" * 201):
        with pytest.raises(ValueError):
            shm_name(bad)


def test_segment_and_semaphore_are_mode_0600(ring_name):
    old_umask = os.umask(0)  # a permissive umask must not widen the mode
    try:
        Ring.create(ring_name, slot_size=64, capacity=2).close()
    finally:
        os.umask(old_umask)
    seg = os.stat(f"/dev/shm/{ring_name}")
    assert stat.S_IMODE(seg.st_mode) == 0o600
    assert seg.st_size == 512 + 64 * 2
    assert seg.st_uid == os.getuid()
    sem = os.stat(f"/dev/shm/sem.{ring_name}.wake")
    assert stat.S_IMODE(sem.st_mode) == 0o600


def test_unlink_removes_segment_and_semaphore(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=2).close()
    assert Ring.exists(ring_name)
    assert os.path.exists(f"/dev/shm/sem.{ring_name}.wake")
    assert Ring.unlink(ring_name) is True
    assert not Ring.exists(ring_name)
    assert not os.path.exists(f"/dev/shm/{ring_name}")
    assert not os.path.exists(f"/dev/shm/sem.{ring_name}.wake")
    assert Ring.unlink(ring_name) is False  # idempotent


def test_mapping_outlives_unlink(ring_name):
    ring = Ring.create(ring_name, slot_size=64, capacity=4)
    w, r = ring.writer(), ring.reader()
    Ring.unlink(ring_name)
    assert w.try_write(1, b"still mapped", 0)
    assert bytes(r.try_read().payload) == b"still mapped"
    ring.close()


def test_attach_to_missing_raises_ring_not_found(ring_name):
    with pytest.raises(RingNotFoundError, match=f"/{ring_name}"):
        Ring.attach(ring_name)
    assert issubclass(RingNotFoundError, RingError)


def test_attach_without_wakeup_semaphore_raises_ring_not_found(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=2).close()
    posix_ipc.unlink_semaphore(f"/{ring_name}.wake")
    with pytest.raises(RingNotFoundError, match="semaphore"):
        Ring.attach(ring_name)


def test_create_twice_raises_ring_exists(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2):
        with pytest.raises(RingExistsError, match=f"/{ring_name}"):
            Ring.create(ring_name, slot_size=64, capacity=2)
        with pytest.raises(RingExistsError):
            Ring.create(ring_name, slot_size=128, capacity=4)


def test_create_with_replace_starts_a_fresh_segment(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2) as old:
        assert old.writer().try_write(1, b"old", 0)
    with Ring.create(ring_name, slot_size=128, capacity=8, full_policy="backpressure", replace=True) as new:
        st = new.stats()
        assert (st.slot_size, st.capacity, st.full_policy, st.write_cursor, st.written) == (128, 8, "backpressure", 0, 0)
        assert new.reader().try_read() is None
    with Ring.attach(ring_name, slot_size=128, capacity=8, full_policy="backpressure"):
        pass


def test_create_with_replace_when_nothing_exists(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2, replace=True) as ring:
        assert ring.stats().write_cursor == 0


@pytest.mark.parametrize(
    ("kwargs", "field", "expected", "found"),
    [
        ({"slot_size": 128}, "slot_size", "128", "64"),
        ({"capacity": 16}, "capacity", "16", "8"),
        ({"full_policy": "backpressure"}, "full_policy", "backpressure", "drop"),
    ],
)
def test_attach_with_wrong_geometry_names_segment_field_expected_and_found(ring_name, kwargs, field, expected, found):
    Ring.create(ring_name, slot_size=64, capacity=8, full_policy="drop").close()
    with pytest.raises(RingLayoutError) as info:
        Ring.attach(ring_name, **kwargs)
    msg = str(info.value)
    assert f"/{ring_name}" in msg
    assert f"{field} expected {expected} found {found}" in msg


def test_attach_reports_every_differing_field(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=8).close()
    with pytest.raises(RingLayoutError) as info:
        Ring.attach(ring_name, slot_size=128, capacity=4, full_policy="backpressure")
    msg = str(info.value)
    for part in ("slot_size expected 128 found 64", "capacity expected 4 found 8", "full_policy expected backpressure found drop"):
        assert part in msg


def _poke(name: str, offset: int, data: bytes) -> None:
    """Overwrite bytes of a segment through posix_ipc directly (no ringbuf code involved)."""
    shm = posix_ipc.SharedMemory("/" + name)
    try:
        with mmap.mmap(shm.fd, shm.size) as mm:
            mm[offset : offset + len(data)] = data
    finally:
        shm.close_fd()


def test_attach_rejects_wrong_magic(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=8).close()
    _poke(ring_name, 0, b"NOTARING")
    with pytest.raises(RingLayoutError) as info:
        Ring.attach(ring_name)
    msg = str(info.value)
    assert f"/{ring_name}" in msg and "magic" in msg
    assert f"{L.MAGIC:#018x}" in msg and f"{int.from_bytes(b'NOTARING', 'little'):#018x}" in msg


def test_attach_rejects_other_layout_version(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=8).close()
    _poke(ring_name, 8, (2).to_bytes(4, "little"))
    with pytest.raises(RingLayoutError) as info:
        Ring.attach(ring_name, slot_size=64, capacity=8)
    assert f"/{ring_name}" in str(info.value)
    assert "version expected 1 found 2" in str(info.value)


def test_attach_rejects_a_segment_not_written_by_ringbuf(ring_name):
    shm = posix_ipc.SharedMemory("/" + ring_name, posix_ipc.O_CREX, mode=0o600, size=4096)
    shm.close_fd()
    with pytest.raises(RingLayoutError, match="magic"):
        Ring.attach(ring_name)


def test_attach_rejects_a_segment_smaller_than_the_control_block(ring_name):
    shm = posix_ipc.SharedMemory("/" + ring_name, posix_ipc.O_CREX, mode=0o600, size=100)
    shm.close_fd()
    with pytest.raises(RingLayoutError, match="smaller"):
        Ring.attach(ring_name)


def test_attach_rejects_a_truncated_segment(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=8).close()
    os.truncate(f"/dev/shm/{ring_name}", 512 + 64 * 4)
    with pytest.raises(RingLayoutError, match="size expected >= 1024 found 768"):
        Ring.attach(ring_name)


def test_attach_rejects_impossible_geometry_in_the_segment(ring_name):
    Ring.create(ring_name, slot_size=64, capacity=8).close()
    _poke(ring_name, 16, (6).to_bytes(8, "little"))  # capacity 6 is not a power of two
    with pytest.raises(RingLayoutError, match="capacity"):
        Ring.attach(ring_name)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"slot_size": 0, "capacity": 8},
        {"slot_size": 100, "capacity": 8},
        {"slot_size": 16, "capacity": 8},
        {"slot_size": 65664, "capacity": 8},
        {"slot_size": 64, "capacity": 0},
        {"slot_size": 64, "capacity": 1},
        {"slot_size": 64, "capacity": 12},
        {"slot_size": 64, "capacity": 8, "full_policy": "block"},
    ],
)
def test_create_rejects_bad_geometry_and_leaves_nothing(ring_name, kwargs):
    with pytest.raises(ValueError):
        Ring.create(ring_name, **kwargs)
    assert not Ring.exists(ring_name)


# ============================================================================ geometry check (pure)

GOOD = (L.MAGIC, L.LAYOUT_VERSION, 64, 8, L.POLICY_DROP, L.CONTROL_BYTES)
GOOD_SIZE = L.segment_bytes(64, 8)


def test_a_fitting_geometry_block_has_no_mismatch():
    assert geometry_mismatches(GOOD, GOOD_SIZE, slot_size=None, capacity=None, full_policy=None) == []
    assert geometry_mismatches(GOOD, GOOD_SIZE, slot_size=64, capacity=8, full_policy="drop") == []


def test_a_wrong_magic_is_reported_alone():
    block = (0, L.LAYOUT_VERSION, 64, 6, 9, L.CONTROL_BYTES)  # the rest is garbage too: not reported
    assert geometry_mismatches(block, 0, slot_size=128, capacity=None, full_policy=None) == [
        f"magic expected {L.MAGIC:#018x} found {0:#018x}"
    ]


def test_every_expected_field_that_differs_is_named_with_expected_and_found():
    assert geometry_mismatches(GOOD, GOOD_SIZE, slot_size=128, capacity=4, full_policy="backpressure") == [
        "slot_size expected 128 found 64",
        "capacity expected 4 found 8",
        "full_policy expected backpressure found drop",
    ]


def test_an_impossible_geometry_or_a_short_segment_is_named():
    assert geometry_mismatches(GOOD[:3] + (6,) + GOOD[4:], GOOD_SIZE, slot_size=None, capacity=None, full_policy=None) == [
        "geometry invalid: capacity must be a power of two >= 2, got 6"
    ]
    assert geometry_mismatches(GOOD, GOOD_SIZE - 1, slot_size=None, capacity=None, full_policy=None) == [
        f"size expected >= {GOOD_SIZE} found {GOOD_SIZE - 1}"
    ]
    assert geometry_mismatches(GOOD[:4] + (7,) + GOOD[5:], GOOD_SIZE, slot_size=None, capacity=None, full_policy=None) == [
        "full_policy code 7 is unknown"
    ]


def test_validate_geometry_returns_the_policy_code():
    assert validate_geometry(64, 2, "drop") == L.POLICY_DROP
    assert validate_geometry(128, 1024, "backpressure") == L.POLICY_BACKPRESSURE
