"""The consumer (``ringbuf.reader.Reader``): commit semantics of ``try_read`` /
``try_read_batch`` / ``poll``, read-only payload views, and the blocking wait.

Each test is one sentence of the ring's contract. Tests that need "another process" start one
through the ``children`` fixture (``tests/ringbuf/ring_child.py``).
"""

from __future__ import annotations

import threading
import time

import pytest

from ringbuf import Ring
from ringbuf import layout as L


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "little")


# ===================================================================================== batch APIs


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


# ================================================================================== payload views


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
