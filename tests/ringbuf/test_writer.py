"""The producer (``ringbuf.writer.Writer``): payload size checks, the full policies (``drop``,
``backpressure``), batch writes and the zero-copy claim.

Each test is one sentence of the ring's contract. Tests that need "another process" start one
through the ``children`` fixture (``tests/ringbuf/ring_child.py``).
"""

from __future__ import annotations

import json
import time

import pytest

from ringbuf import BackOff, PayloadTooLargeError, Ring, RingError


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "little")


# ============================================================================ payload size checks


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


# ===================================================================== size checks on a full ring


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
