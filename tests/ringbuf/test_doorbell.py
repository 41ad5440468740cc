"""A consumer of several rings parks on one semaphore (``wait_any``): the first ring's, which the
writers of its other rings post instead of their own (``Writer.use_doorbell``). A write to any of its
rings, from another process, wakes it long before its timeout; nothing written, it sleeps the timeout."""

from __future__ import annotations

import time

from ringbuf import Ring
from ringbuf.reader import wait_any
from ringbuf.segment import open_doorbell

WRITE_LATER = """
import sys, time
from ringbuf import Ring
from ringbuf.segment import open_doorbell
target, bell, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
ring = Ring.attach(target)
w = ring.writer()
if bell != target:
    w.use_doorbell(open_doorbell(bell))
time.sleep(delay)
assert w.try_write(7, b"hello", time.monotonic_ns())
"""


def _pair(ring_names):
    a, b = ring_names.new(), ring_names.new()
    ra = Ring.create(a, slot_size=64, capacity=8, full_policy="drop")
    rb = Ring.create(b, slot_size=64, capacity=8, full_policy="drop")
    return a, b, ra, rb


def test_nothing_written_parks_for_the_whole_timeout(ring_names):
    _, _, ra, rb = _pair(ring_names)
    try:
        readers = [ra.reader(), rb.reader()]
        t0 = time.monotonic()
        assert wait_any(readers, 150_000_000) is False
        assert time.monotonic() - t0 >= 0.14
    finally:
        ra.close(), rb.close()


def test_a_write_to_the_second_ring_rings_the_first_rings_semaphore(ring_names, children):
    a, b, ra, rb = _pair(ring_names)
    try:
        readers = [ra.reader(), rb.reader()]
        kid = children.python(WRITE_LATER, b, a, 0.3)
        t0 = time.monotonic()
        assert wait_any(readers, 20_000_000_000, park_ns=20_000_000_000) is True
        assert time.monotonic() - t0 < 10, "woken by the doorbell, not by the 20 s timeout"
        assert readers[1].try_read().payload.tobytes() == b"hello" and readers[0].try_read() is None
        assert children.finish(kid)[0] == 0
        assert ra.stats().wakeups == 1, "counted on the doorbell's ring"
    finally:
        ra.close(), rb.close()


def test_without_the_doorbell_the_second_rings_writer_would_post_its_own_semaphore(ring_names, children):
    """The control case: a writer that does not use the doorbell posts a semaphore nobody waits on,
    so the consumer only notices at the end of a (short) bounded park."""
    a, b, ra, rb = _pair(ring_names)
    try:
        readers = [ra.reader(), rb.reader()]
        kid = children.python(WRITE_LATER, b, b, 0.1)
        t0 = time.monotonic()
        assert wait_any(readers, 20_000_000_000, park_ns=1_500_000_000) is True
        assert time.monotonic() - t0 >= 1.4, "found only when the bounded park ran out"
        assert ra.stats().missed_wakeups == 1
        assert children.finish(kid)[0] == 0
    finally:
        ra.close(), rb.close()


def test_open_doorbell_names_a_missing_ring(ring_names):
    import pytest

    from ringbuf import RingNotFoundError

    with pytest.raises(RingNotFoundError, match="wake"):
        open_doorbell(ring_names.new())
