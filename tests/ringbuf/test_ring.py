"""The ring's behaviour: control path (create / attach / unlink), the full policies, the batch and
zero-copy APIs, commit semantics, stats, and the blocking wait.

Each test is one sentence of the ring's contract. Tests that need "another process" start one
through the ``children`` fixture (``tests/ringbuf/ring_child.py``).
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import threading
import time

import posix_ipc
import pytest

from ringbuf import (
    BackOff,
    PayloadTooLargeError,
    Ring,
    RingError,
    RingExistsError,
    RingLayoutError,
    RingNotFoundError,
    RingStats,
    shm_name,
)
from ringbuf import layout as L


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


def test_close_is_idempotent_and_tolerates_outstanding_views(ring_name):
    ring = Ring.create(ring_name, slot_size=64, capacity=4)
    ring.writer().try_write(1, b"kept", 0)
    msg = ring.reader().try_read()
    ring.close()  # a payload view is still alive: must not raise
    ring.close()
    assert bytes(msg.payload) == b"kept"


# ========================================================================== write / read basics


@pytest.mark.parametrize("capacity", [2, 8])
def test_wraps_around_over_many_laps_with_every_payload_size(ring_name, capacity):
    slot = 128
    maxn = slot - 16
    sizes = [0, maxn, 1, maxn - 1, 7, 8, 9, 63, 64, 65, 0, maxn]
    with Ring.create(ring_name, slot_size=slot, capacity=capacity) as ring:
        w, r = ring.writer(), ring.reader()
        sent = []
        seq = 0
        laps = 60
        for lap in range(laps):
            burst = capacity if lap % 2 else 1 + lap % capacity  # alternately fill the ring exactly
            for _ in range(burst):
                n = sizes[seq % len(sizes)]
                payload = bytes((seq + i) & 0xFF for i in range(n))
                assert w.try_write(seq & 0xFFFF, payload, seq * 1000)
                sent.append((seq, seq * 1000, seq & 0xFFFF, payload))
                seq += 1
            got = []
            while (m := r.try_read()) is not None:
                got.append((m.seq, m.ts_origin_ns, m.kind, bytes(m.payload)))
            assert got == sent[-burst:]
        assert seq > laps * capacity / 2
        st = ring.stats()
        assert (st.written, st.read, st.dropped, st.crc_errors) == (seq, seq, 0, 0)


def test_max_length_payload_of_the_largest_slot(ring_name):
    with Ring.create(ring_name, slot_size=L.MAX_PAYLOAD_BYTES + 65, capacity=2) as ring:
        assert ring.max_payload_bytes == 65535
        payload = os.urandom(65535)
        w, r = ring.writer(), ring.reader()
        for _ in range(3):
            assert w.try_write(1, payload, 5)
            assert bytes(r.try_read().payload) == payload


def test_payload_too_large_raises_and_publishes_nothing(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w = ring.writer()
        assert w.try_write(1, b"x" * 48, 0)
        with pytest.raises(PayloadTooLargeError, match="49-byte"):
            w.try_write(1, b"x" * 49, 0)
        with pytest.raises(PayloadTooLargeError):
            w.try_claim(49)
        assert issubclass(PayloadTooLargeError, RingError)
        assert ring.stats().write_cursor == 1
        assert w.position == 1


def test_payload_too_large_in_a_batch_refuses_the_whole_batch(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        with pytest.raises(PayloadTooLargeError):
            w.try_write_batch([(1, b"a", 0), (1, b"b", 0), (1, b"c" * 49, 0), (1, b"d", 0)])
        assert ring.stats().write_cursor == 0
        assert r.try_read_batch(10) == []
        assert w.try_write_batch([(1, b"a", 0), (1, b"b", 0)]) == 2
        assert [bytes(m.payload) for m in r.try_read_batch(10)] == [b"a", b"b"]


def test_writer_accepts_bytes_like_payloads(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        assert w.try_write(1, bytearray(b"ba"), 0)
        assert w.try_write(1, memoryview(b"mv--")[:2], 0)
        assert w.try_write_batch([(1, bytearray(b"b1"), 0), (1, memoryview(b"m1"), 0)]) == 2
        assert [bytes(m.payload) for m in r.try_read_batch(10)] == [b"ba", b"mv", b"b1", b"m1"]


def test_payload_copy_outlives_the_next_read(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        w.try_write(1, b"first", 0)
        m = r.try_read()
        assert bytes(m.payload) == b"first"
        kept = bytes(m.payload)  # copying keeps it beyond the next read
        w.try_write(1, b"second", 0)
        assert r.try_read().seq == 1
        assert kept == b"first"


# ====================================================================================== policies


def test_drop_policy_refuses_when_full_and_counts_without_overwriting(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8, full_policy="drop") as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(8):
            assert w.try_write(1, seq_bytes(seq), seq)
        assert w.try_write(1, seq_bytes(99), 99) is False
        assert w.write(1, seq_bytes(99), 99) is False  # write == try_write on a drop ring
        assert w.write_batch([(1, seq_bytes(99), 99)] * 3) == 0
        st = ring.stats()
        assert (st.write_cursor, st.dropped, st.full_events, st.stall_ns, st.depth) == (8, 5, 1, 0, 8)
        # nothing was overwritten: the 8 messages are intact
        got = [(m.seq, int.from_bytes(m.payload, "little")) for m in r.try_read_batch(100)]
        assert got == [(s, s) for s in range(8)]
        r.commit()
        # reading resumes fine: room again, the next message continues the sequence
        assert w.try_write(1, seq_bytes(8), 8)
        m = r.try_read()
        assert (m.seq, int.from_bytes(m.payload, "little")) == (8, 8)
        assert ring.stats().crc_errors == 0


def test_drop_policy_counts_one_full_event_per_full_episode(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2) as ring:
        w, r = ring.writer(), ring.reader()
        for episode in range(1, 4):
            while w.try_write(1, b"", 0):
                pass
            w.try_write(1, b"", 0)
            assert ring.stats().full_events == episode
            r.try_read_batch(10)
            r.commit()
        assert ring.stats().dropped == 6


def test_drop_policy_batch_writes_what_fits_and_drops_the_rest(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w = ring.writer()
        assert w.try_write_batch([(1, b"", 0)] * 3) == 3
        assert w.try_write_batch([(1, seq_bytes(i), 0) for i in range(8)]) == 5
        st = ring.stats()
        assert (st.write_cursor, st.dropped, st.full_events) == (8, 3, 1)


def test_backpressure_try_write_refuses_without_dropping(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4, full_policy="backpressure") as ring:
        w = ring.writer()
        for seq in range(4):
            assert w.try_write(1, seq_bytes(seq), seq)
        assert w.try_write(1, b"no room", 0) is False
        assert w.try_write_batch([(1, b"no room", 0)] * 2) == 0
        assert w.try_claim(8) is None
        st = ring.stats()
        assert (st.dropped, st.full_events, st.write_cursor) == (0, 1, 4)


def test_backpressure_write_returns_false_after_timeout(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2, full_policy="backpressure") as ring:
        w = ring.writer(BackOff(spins=10, yields=10, min_sleep_ns=100_000, max_sleep_ns=1_000_000))
        assert w.try_write(1, b"a", 0) and w.try_write(1, b"b", 0)
        t0 = time.monotonic_ns()
        assert w.write(1, b"c", 0, timeout_ns=30_000_000) is False
        elapsed = time.monotonic_ns() - t0
        assert elapsed >= 30_000_000
        st = ring.stats()
        assert 30_000_000 <= st.stall_ns <= elapsed
        assert (st.dropped, st.write_cursor) == (0, 2)
        assert w.write_batch([(1, b"d", 0)] * 2, timeout_ns=10_000_000) == 0
        assert ring.stats().stall_ns >= 40_000_000


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_backpressure_write_blocks_until_another_process_frees_a_slot(ring_name, children):
    with Ring.create(ring_name, slot_size=64, capacity=4, full_policy="backpressure") as ring:
        w = ring.writer()
        for seq in range(4):
            assert w.try_write(1, seq_bytes(seq), seq)
        drainer = children.role("drain", ring_name, 0.3, 1)
        t0 = time.monotonic_ns()
        assert w.write(1, seq_bytes(4), 4, timeout_ns=30_000_000_000) is True
        blocked_ns = time.monotonic_ns() - t0
        rc, out, err = children.finish(drainer)
        assert rc == 0, err
        assert json.loads(out)["seqs"] == [0]
        st = ring.stats()
        assert blocked_ns >= 300_000_000  # the child slept 0.3 s before reading
        assert 0 < st.stall_ns <= blocked_ns
        assert (st.write_cursor, st.read_cursor, st.dropped) == (5, 1, 0)
        assert st.reader_pid == drainer.pid


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_backpressure_write_batch_waits_until_all_are_written(ring_name, children):
    with Ring.create(ring_name, slot_size=64, capacity=4, full_policy="backpressure") as ring:
        w = ring.writer()
        drainer = children.role("drain", ring_name, 0.2, 6)
        assert w.write_batch([(1, seq_bytes(s), s) for s in range(10)], timeout_ns=30_000_000_000) == 10
        rc, out, err = children.finish(drainer)
        assert rc == 0, err
        assert json.loads(out)["seqs"] == list(range(6))
        st = ring.stats()
        assert (st.write_cursor, st.read_cursor, st.dropped) == (10, 6, 0)
        assert st.stall_ns > 0


# ===================================================================================== batch APIs


def test_try_write_batch_returns_the_prefix_written(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8, full_policy="backpressure") as ring:
        w, r = ring.writer(), ring.reader()
        assert w.try_write_batch([]) == 0
        assert w.try_write_batch([(k, bytes([k]), 10 + k) for k in range(5)]) == 5
        assert w.try_write_batch([(k, bytes([k]), 10 + k) for k in range(5, 10)]) == 3
        msgs = r.try_read_batch(100)
        assert [(m.seq, m.kind, m.ts_origin_ns, bytes(m.payload)) for m in msgs] == [
            (k, k, 10 + k, bytes([k])) for k in range(8)]
        assert ring.stats().dropped == 0


def test_try_read_batch_respects_limit_and_commits_on_the_next_call(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=16) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(10):
            w.try_write(1, seq_bytes(seq), seq)
        first = r.try_read_batch(4)
        assert [m.seq for m in first] == [0, 1, 2, 3]
        assert ring.stats().read_cursor == 0  # handed out, not committed
        assert r.position == 4
        assert r.available() == 6
        second = r.try_read_batch(100)
        assert [m.seq for m in second] == list(range(4, 10))
        assert ring.stats().read_cursor == 4  # the first batch was committed by the second call
        assert r.try_read_batch(5) == []
        assert ring.stats().read_cursor == 10
        assert r.try_read_batch(0) == []


def test_try_read_commits_the_previous_message_on_the_next_call(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(3):
            w.try_write(1, seq_bytes(seq), seq)
        assert r.try_read().seq == 0
        assert ring.stats().read_cursor == 0
        assert r.try_read().seq == 1
        assert ring.stats().read_cursor == 1
        r.commit()
        assert ring.stats().read_cursor == 2
        assert r.try_read().seq == 2
        assert r.try_read() is None
        assert ring.stats().read_cursor == 3
        assert ring.stats().read == 3


def test_poll_hands_each_message_to_the_handler_and_commits_the_batch(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=16) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(10):
            w.try_write(seq % 3, seq_bytes(seq), 100 + seq)
        seen = []
        assert r.poll(lambda seq, ts, kind, p: seen.append((seq, ts, kind, bytes(p))), 4) == 4
        assert ring.stats().read_cursor == 4  # committed on return
        assert r.poll(lambda *a: seen.append((a[0], a[1], a[2], bytes(a[3]))), 100) == 6
        assert ring.stats().read_cursor == 10
        assert seen == [(s, 100 + s, s % 3, seq_bytes(s)) for s in range(10)]
        assert r.poll(lambda *a: None, 100) == 0


def test_poll_handler_exception_commits_only_what_was_handled_before_it(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=16) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(6):
            w.try_write(1, seq_bytes(seq), seq)
        handled = []

        def handler(seq, ts, kind, payload):
            if seq == 3 and not handled.count("failed"):
                handled.append("failed")
                raise RuntimeError("handler failure")
            handled.append(seq)

        with pytest.raises(RuntimeError, match="handler failure"):
            r.poll(handler, 10)
        assert handled == [0, 1, 2, "failed"]
        assert ring.stats().read_cursor == 3  # the failing message is not committed
        assert r.position == 3
        assert r.poll(handler, 10) == 3  # it is delivered again
        assert handled[4:] == [3, 4, 5]
        assert ring.stats().read_cursor == 6


def test_poll_handler_exception_on_first_message_commits_nothing(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        w.try_write(1, b"x", 0)

        def boom(*_):
            raise KeyError("x")

        with pytest.raises(KeyError):
            r.poll(boom, 10)
        assert ring.stats().read_cursor == 0 and r.position == 0


def test_read_apis_mix_without_losing_or_repeating(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        seen = []
        for seq in range(100):
            assert w.try_write(1, seq_bytes(seq), seq)
            if seq % 5 == 4:
                which = (seq // 5) % 3
                if which == 0:
                    while (m := r.try_read()) is not None:
                        seen.append(m.seq)
                elif which == 1:
                    seen.extend(m.seq for m in r.try_read_batch(3))
                    seen.extend(m.seq for m in r.try_read_batch(100))
                else:
                    r.poll(lambda s, *_: seen.append(s), 100)
        seen.extend(m.seq for m in r.try_read_batch(100))
        assert seen == list(range(100))


def test_reader_and_writer_resume_from_the_cursors_in_the_segment(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(5):
            w.try_write(1, seq_bytes(seq), seq)
        assert [m.seq for m in r.try_read_batch(3)] == [0, 1, 2]  # not committed
        r.commit()
        assert r.try_read().seq == 3  # handed out, never committed: a "crash" now
    with Ring.attach(ring_name) as again:
        w2, r2 = again.writer(), again.reader()
        assert w2.position == 5
        assert r2.position == 3  # message 3 is seen again (at-least-once)
        assert w2.try_write(1, seq_bytes(5), 5)
        seen = []
        while batch := r2.try_read_batch(10):  # a batch holds what was published when it looked
            seen.extend(m.seq for m in batch)
        assert seen == [3, 4, 5]


# ========================================================================== zero-copy claim


def test_claim_is_invisible_until_committed(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        view = w.try_claim(6)
        assert len(view) == 6 and not view.readonly
        view[:] = b"zcopy!"
        assert r.available() == 0 and r.try_read() is None
        assert ring.stats().write_cursor == 0
        w.commit_claim(7, 1234)
        m = r.try_read()
        assert (m.seq, m.kind, m.ts_origin_ns, bytes(m.payload)) == (0, 7, 1234, b"zcopy!")
        assert w.position == 1


def test_claim_zero_length_and_max_length(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        assert len(w.try_claim(0)) == 0
        w.commit_claim(1, 0)
        v = w.try_claim(48)
        v[:] = bytes(range(48))
        w.commit_claim(2, 0)
        assert [bytes(m.payload) for m in r.try_read_batch(5)] == [b"", bytes(range(48))]


def test_commit_claim_without_claim_raises(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w = ring.writer()
        with pytest.raises(RuntimeError):
            w.commit_claim(1, 0)
        w.try_claim(1)
        w.commit_claim(1, 0)
        with pytest.raises(RuntimeError):
            w.commit_claim(1, 0)  # a claim is committed once


def test_abandoned_claim_leaves_nothing_and_the_slot_is_reused(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        w.try_claim(8)[:] = b"lostlost"  # never committed
        assert r.try_read() is None
        assert w.try_write(1, b"next", 0)
        m = r.try_read()
        assert (m.seq, bytes(m.payload)) == (0, b"next")
        assert ring.stats().crc_errors == 0


def test_claim_on_a_full_drop_ring_returns_none_and_counts(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2) as ring:
        w = ring.writer()
        w.try_write(1, b"", 0), w.try_write(1, b"", 0)
        assert w.try_claim(4) is None
        assert (ring.stats().dropped, ring.stats().full_events) == (1, 1)


# ========================================================================================= stats


def test_stats_snapshot_reflects_the_control_block(ring_name):
    with Ring.create(ring_name, slot_size=128, capacity=8, full_policy="backpressure") as ring:
        st0 = ring.stats()
        assert isinstance(st0, RingStats)
        assert (st0.name, st0.slot_size, st0.capacity, st0.full_policy) == (f"/{ring_name}", 128, 8, "backpressure")
        assert (st0.write_cursor, st0.read_cursor, st0.depth, st0.written, st0.read) == (0, 0, 0, 0, 0)
        assert (st0.writer_pid, st0.reader_pid) == (0, 0)
        before = time.monotonic_ns()
        w, r = ring.writer(), ring.reader()
        for seq in range(5):
            w.try_write(1, b"", seq)
        r.try_read_batch(2)
        r.commit()
        st = ring.stats()
        assert (st.write_cursor, st.read_cursor, st.depth, st.written, st.read) == (5, 2, 3, 5, 2)
        assert st.writer_pid == st.reader_pid == os.getpid()
        assert st.writer_heartbeat_ns >= before and st.reader_heartbeat_ns >= before
        w.heartbeat(111), r.heartbeat(222)
        st = ring.stats()
        assert (st.writer_heartbeat_ns, st.reader_heartbeat_ns) == (111, 222)
        assert (st.dropped, st.full_events, st.stall_ns, st.crc_errors, st.wakeups, st.missed_wakeups) == (0,) * 6


def test_writer_free_slots_and_reader_available(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        assert (w.free_slots(), r.available()) == (8, 0)
        for seq in range(5):
            w.try_write(1, b"", seq)
        assert (w.free_slots(), r.available()) == (3, 5)
        r.try_read_batch(2)
        assert (w.free_slots(), r.available()) == (3, 3)  # not committed yet
        r.commit()
        assert w.free_slots() == 5


# ================================================================================= blocking wait


def test_wait_returns_true_at_once_when_data_is_there(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        w.try_write(1, b"", 0)
        t0 = time.monotonic()
        assert r.wait(10_000_000_000) is True
        assert time.monotonic() - t0 < 1.0
        assert ring.stats().wakeups == 0


def test_wait_returns_false_on_timeout(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        r = ring.reader()
        t0 = time.monotonic_ns()
        assert r.wait(50_000_000, spins=10, park_ns=10_000_000) is False
        assert time.monotonic_ns() - t0 >= 50_000_000
        st = ring.stats()
        assert (st.wakeups, st.missed_wakeups) == (0, 0)
        assert r.wait(0, spins=0) is False


def test_wait_after_consuming_everything_waits_for_new_data(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        w.try_write(1, b"", 0)
        assert r.try_read().seq == 0
        assert r.wait(20_000_000, spins=5) is False  # the message at the position is already read


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_parked_reader_is_woken_by_a_writer_in_another_process(ring_name, children):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        r = ring.reader()
        writer = children.role("write_when_parked", ring_name, 0.2)
        t0 = time.monotonic()
        # one long park: only the writer's semaphore post can end it before the timeout
        assert r.wait(30_000_000_000, spins=0, park_ns=30_000_000_000) is True
        assert time.monotonic() - t0 < 25
        m = r.try_read()
        assert (m.kind, bytes(m.payload)) == (9, b"wake")
        rc, out, err = children.finish(writer)
        assert rc == 0, err
        st = ring.stats()
        assert st.wakeups >= 1
        assert st.missed_wakeups == 0
        assert st.writer_pid == writer.pid


def test_parked_reader_is_woken_by_a_writer_thread(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        r, w = ring.reader(), ring.writer()
        ctl = ring._ctl  # to see the reader's parked flag
        result = []

        def write_once_parked():
            deadline = time.monotonic() + 10
            while ctl[L.W_READER_PARKED] != 1 and time.monotonic() < deadline:
                time.sleep(0.0005)
            time.sleep(0.02)
            w.try_write(1, b"t", 0)

        t = threading.Thread(target=write_once_parked)
        t.start()
        try:
            result.append(r.wait(10_000_000_000, spins=0, park_ns=10_000_000_000))
        finally:
            t.join(15)
        assert result == [True]
        assert ring.stats().wakeups == 1


# ============================================================================ payload views and size checks


@pytest.mark.parametrize("api", ["try_read", "try_read_batch", "poll"])
def test_payload_view_handed_to_the_reader_is_read_only(ring_name, api):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        w, r = ring.writer(), ring.reader()
        w.try_write(1, b"abc", 0)
        if api == "try_read":
            views = [r.try_read().payload]
        elif api == "try_read_batch":
            views = [m.payload for m in r.try_read_batch(4)]
        else:
            views = []
            r.poll(lambda seq, ts, kind, p: views.append(p), 4)
        assert views and all(v.readonly for v in views)


@pytest.mark.parametrize("call", ["try_write", "try_claim", "try_write_batch"])
def test_oversized_payload_raises_even_when_the_ring_is_full(ring_name, call):
    with Ring.create(ring_name, slot_size=64, capacity=2) as ring:
        w = ring.writer()
        w.try_write(1, b"", 0), w.try_write(1, b"", 0)
        try:
            with pytest.raises(PayloadTooLargeError):
                if call == "try_write":
                    w.try_write(1, b"x" * 49, 0)
                elif call == "try_claim":
                    w.try_claim(49)
                else:
                    w.try_write_batch([(1, b"x" * 49, 0)])
        finally:
            assert ring.stats().dropped == 0
