"""Child-process roles for the ring tests, run as ``python tests/ringbuf/ring_child.py ROLE ARGS...``.

Each role attaches to an existing ring (the test process creates and unlinks it), does one job and
exits; the first line of stdout is a JSON object when the role reports anything. Every role gives
up after ``CHILD_DEADLINE_S`` so that a broken test cannot leave a spinning process behind (the
``children`` fixture SIGKILLs and reaps them anyway).

Roles:

- ``produce NAME N BATCH``: write messages 0..N-1 (payload = u64 LE sequence number) with
  ``write_batch``; the ring's ``backpressure`` policy makes the writer wait for the reader.
- ``consume NAME N BATCH``: read until N messages, checking every payload equals its sequence
  number and the sequence numbers are exactly 0..N-1 in order; reports counts; exit 0 when all good.
- ``consume_log NAME N BATCH LOG``: resume where the ring's read cursor says, ``poll(handler, BATCH)``
  until message N-1 is handled; the handler appends the message's sequence number (u64 LE) to LOG
  with an unbuffered ``os.write`` (so a SIGKILL loses nothing that was handled).
- ``write_resume NAME N``: resume at ``Writer.position`` and write messages up to N-1 with
  payload = u64 LE sequence number, rotating through ``try_write``, ``try_write_batch`` and
  ``try_claim``/``commit_claim``; reports its start position first.
- ``drain NAME DELAY_S COUNT``: sleep, then read COUNT messages with ``try_read`` and commit.
- ``write_when_parked NAME SETTLE_S``: wait until the reader's parked flag is set, sleep SETTLE_S,
  then write one message (kind 9, payload b"wake").
- ``store_cursor NAME COUNT``: store ``i * 0x1_0000_0001`` for i = 1..COUNT into the ring's write
  cursor word through the ring's own ``memoryview.cast("Q")`` view (the store path ``Writer`` uses
  to publish).
"""

from __future__ import annotations

import json
import os
import sys
import time

from ringbuf import Ring
from ringbuf import layout as L

CHILD_DEADLINE_S = 100.0
U64 = 8


def _report(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _deadline() -> float:
    return time.monotonic() + CHILD_DEADLINE_S


def produce(name: str, n: str, batch: str) -> int:
    n, batch = int(n), int(batch)
    ring = Ring.attach(name)
    w = ring.writer()
    seq = w.position
    end_by = _deadline()
    while seq < n:
        top = min(n, seq + batch)
        msgs = [(1, s.to_bytes(U64, "little"), s) for s in range(seq, top)]
        done = w.write_batch(msgs, timeout_ns=1_000_000_000)
        seq += done
        if time.monotonic() > end_by:
            _report(error="deadline", position=seq)
            return 3
    _report(written=seq)
    return 0


def consume(name: str, n: str, batch: str) -> int:
    n, batch = int(n), int(batch)
    ring = Ring.attach(name)
    r = ring.reader()
    expected = r.position
    bad = 0
    first_bad = None
    end_by = _deadline()
    idle = 0
    from_bytes = int.from_bytes
    while expected < n:
        msgs = r.try_read_batch(batch)
        if not msgs:
            idle += 1
            if idle & 0xFF == 0 and time.monotonic() > end_by:
                _report(error="deadline", position=expected)
                return 3
            os.sched_yield()
            continue
        for m in msgs:
            if m.seq != expected or from_bytes(m.payload, "little") != expected or m.ts_origin_ns != expected:
                bad += 1
                if first_bad is None:
                    first_bad = [expected, m.seq, from_bytes(m.payload, "little")]
                expected = m.seq
            expected += 1
    r.commit()
    st = ring.stats()
    _report(count=expected, bad=bad, first_bad=first_bad, crc_errors=st.crc_errors, read=st.read)
    return 0 if bad == 0 and st.crc_errors == 0 else 1


def consume_log(name: str, n: str, batch: str, log: str) -> int:
    n, batch = int(n), int(batch)
    ring = Ring.attach(name)
    r = ring.reader()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    _report(start=r.position)
    write = os.write
    from_bytes = int.from_bytes
    mismatches = []

    def handler(seq: int, ts: int, kind: int, payload) -> None:
        if from_bytes(payload, "little") != seq:
            mismatches.append(seq)
        write(fd, seq.to_bytes(U64, "little"))

    end_by = _deadline()
    idle = 0
    while r.position < n:
        if r.poll(handler, batch) == 0:
            idle += 1
            if idle & 0xFF == 0 and time.monotonic() > end_by:
                return 3
            os.sched_yield()
    os.close(fd)
    _report(end=r.position, mismatches=mismatches[:10], crc_errors=ring.stats().crc_errors)
    return 0 if not mismatches else 1


def write_resume(name: str, n: str) -> int:
    n = int(n)
    ring = Ring.attach(name)
    w = ring.writer()
    start = w.position
    _report(start=start)
    end_by = _deadline()
    idle = 0
    while w.position < n:
        seq = w.position
        mode = (seq // 7) % 3
        if mode == 0:
            ok = w.try_write(2, seq.to_bytes(U64, "little"), seq)
        elif mode == 1:
            top = min(n, seq + 16)
            ok = w.try_write_batch([(2, s.to_bytes(U64, "little"), s) for s in range(seq, top)]) > 0
        else:
            view = w.try_claim(U64)
            ok = view is not None
            if ok:
                view[:] = seq.to_bytes(U64, "little")
                view.release()
                w.commit_claim(2, seq)
        if not ok:
            idle += 1
            if idle & 0xFF == 0 and time.monotonic() > end_by:
                return 3
            os.sched_yield()
    return 0


def drain(name: str, delay_s: str, count: str) -> int:
    ring = Ring.attach(name)
    r = ring.reader()
    time.sleep(float(delay_s))
    seqs = []
    end_by = _deadline()
    while len(seqs) < int(count):
        m = r.try_read()
        if m is None:
            if time.monotonic() > end_by:
                return 3
            os.sched_yield()
            continue
        seqs.append(m.seq)
    r.commit()
    _report(seqs=seqs)
    return 0


def write_when_parked(name: str, settle_s: str) -> int:
    ring = Ring.attach(name)
    w = ring.writer()
    ctl = ring._ctl  # the parked flag is not part of the public API; read the word directly
    end_by = _deadline()
    while ctl[L.W_READER_PARKED] != 1:
        if time.monotonic() > end_by:
            return 3
        time.sleep(0.0005)
    time.sleep(float(settle_s))
    ok = w.try_write(9, b"wake", time.monotonic_ns())
    _report(written=ok)
    return 0 if ok else 1


def store_cursor(name: str, count: str) -> int:
    ring = Ring.attach(name)
    ctl = ring._ctl  # the same memoryview.cast("Q") view Writer._publish stores through
    step = 0x1_0000_0001
    idx = L.W_WRITE_CURSOR
    for i in range(1, int(count) + 1):
        ctl[idx] = i * step
    _report(last=int(count) * step)
    return 0


ROLES = {
    "produce": produce,
    "consume": consume,
    "consume_log": consume_log,
    "write_resume": write_resume,
    "drain": drain,
    "write_when_parked": write_when_parked,
    "store_cursor": store_cursor,
}

if __name__ == "__main__":
    sys.exit(ROLES[sys.argv[1]](*sys.argv[2:]))
