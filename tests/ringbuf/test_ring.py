"""The ring end to end (``ringbuf.ring.Ring`` with its writer and reader): wrap-around over many
laps, payload sizes, resuming from the cursors in the segment, ``stats()``, ``close()``, and the
names ``ringbuf.ring`` re-exports.

Each test is one sentence of the ring's contract.
"""

from __future__ import annotations

import os
import time

import pytest

from ringbuf import Ring, RingStats
from ringbuf import layout as L


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "little")


# ================================================================================ control path


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


# ======================================================================== resume from the cursors


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


# ================================================================================= module surface


def test_ringbuf_ring_re_exports_the_ends_and_the_doorbell_calls():
    """Callers import these from ``ringbuf.ring`` (transport, runner, supervisor): the same objects
    as where they are defined."""
    import ringbuf.reader
    import ringbuf.ring
    import ringbuf.segment
    import ringbuf.writer

    assert ringbuf.ring.Writer is ringbuf.writer.Writer
    assert (ringbuf.ring.Reader, ringbuf.ring.Message, ringbuf.ring.wait_any) == (
        ringbuf.reader.Reader,
        ringbuf.reader.Message,
        ringbuf.reader.wait_any,
    )
    for name in ("shm_name", "open_doorbell", "wake_semaphore_name"):
        assert getattr(ringbuf.ring, name) is getattr(ringbuf.segment, name), name
