"""The two ends of a ring bench run (``bench.ring``), run in the children: the ``Plan`` of a bench
invocation and the ``Spec`` of one run, the message (``PAYLOAD`` behind the ring's header layout),
and the producer / consumer of every transport (the ring, the peers' openers, the floors), each
pinned to its core, timed with ``perf_counter_ns`` and reporting home (``child_main``)."""

from __future__ import annotations

import gc
import mmap
import os
import resource
import signal
import struct
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import posix_ipc
import zmq
from hdrh.histogram import HdrHistogram

from ringbuf import Ring
from ringbuf import layout as L

# ------------------------------------------------------------------------------------------ constants
PAYLOAD_BYTES = 64
PAYLOAD = bytes(range(PAYLOAD_BYTES))
MESSAGE_BYTES = L.HEADER_BYTES + PAYLOAD_BYTES  # 80 on every transport
SLOT_SIZE = 128
PEER_HEADER = struct.Struct("<QHHI")  # ts_origin_ns, kind, length, crc (0): the ring's header layout
assert PEER_HEADER.size == L.HEADER_BYTES

KIND_WARM, KIND_DATA, KIND_STOP = 1, 2, 3
PRODUCER_CORE, CONSUMER_CORE = 0, 1
HIST_ARGS = (1, 10_000_000_000, 3)  # 1 ns .. 10 s, 3 significant digits
WAIT_NS = 100_000_000  # timeout of one Reader.wait call in the blocking consumer
READY_TIMEOUT_S = 60.0


def _mq_depth() -> int:
    try:
        return min(10, int(Path("/proc/sys/fs/mqueue/msg_max").read_text()))
    except (OSError, ValueError):
        return 10


MQ_DEPTH = _mq_depth()


# ------------------------------------------------------------------------------------ plan and specs
@dataclass(frozen=True)
class Plan:
    """Sizes of one bench invocation."""

    rate: int = 20_000  # paced messages per second
    warmup: int = 10_000  # paced warm-up messages
    latency_count: int = 100_000  # paced measured messages
    burst_warmup: int = 20_000
    burst_scale: float = 1.0  # multiplies each transport's burst count
    burst_repeats: int = 3  # throughput runs per transport; the median is reported
    idle_s: float = 2.0
    latency_capacity: int = 1024  # ring slots in latency runs
    burst_capacity: int = 4096  # ring slots in throughput runs
    batch: int = 256


FULL = Plan()
QUICK = Plan(warmup=1_000, latency_count=10_000, burst_warmup=2_000, burst_scale=0.1, burst_repeats=1, idle_s=0.5)


@dataclass(frozen=True)
class Spec:
    """What one producer/consumer pair does in one run (pickled to both children)."""

    mode: str  # "paced" (latency), "burst" (throughput) or "idle"
    warmup: int = 0
    count: int = 0
    interval_ns: int = 0
    idle_s: float = 0.0
    read: str = "spin"  # ring consumer: "spin", "blocking" (Reader.wait when empty) or "batch"
    write: str = "single"  # ring producer: "single" (try_write) or "batch" (try_write_batch)
    batch: int = 256
    pace: str = "spin"  # paced producer's wait for its next slot: "spin" or "yield" (os.sched_yield in the spin)


# ------------------------------------------------------------------------------- child-side helpers
def _pin(core: int) -> int:
    usable = sorted(os.sched_getaffinity(0))
    chosen = core if core in usable else usable[core % len(usable)]
    os.sched_setaffinity(0, {chosen})
    return chosen


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _await(ready) -> None:
    if not ready.wait(READY_TIMEOUT_S):
        raise RuntimeError(f"consumer not ready after {READY_TIMEOUT_S} s")


def _produce(send: Callable[[int, Any, int], Any], spec: Spec) -> dict:
    """Send ``spec``'s messages with ``send(kind, payload, ts_ns)``, which returns False when the
    message must be retried (a full ring) and anything else once it is sent; then a STOP."""
    pc = time.perf_counter_ns
    if spec.mode == "idle":
        time.sleep(spec.idle_s)
    elif spec.mode == "paced":
        interval, warm = spec.interval_ns, spec.warmup
        yield_ = os.sched_yield if spec.pace == "yield" else None
        nxt = pc() + interval
        for i in range(warm + spec.count):
            while pc() < nxt:
                if yield_ is not None:
                    yield_()
            kind = KIND_DATA if i >= warm else KIND_WARM
            ts = pc()
            while send(kind, PAYLOAD, ts) is False:
                pass
            nxt += interval
            if nxt < ts:  # fell behind (preempted): restart the schedule, no catch-up burst
                nxt = ts + interval
        while pc() < nxt:  # STOP in its own slot too (a one-word mailbox must not be overwritten)
            pass
    else:
        for kind, n in ((KIND_WARM, spec.warmup), (KIND_DATA, spec.count)):
            for _ in range(n):
                while send(kind, PAYLOAD, pc()) is False:
                    pass
    while send(KIND_STOP, PAYLOAD, pc()) is False:
        pass
    return {}


def _produce_batches(write_batch: Callable[[list], int], spec: Spec) -> dict:
    """Burst with the ring's batch API: lists of ``spec.batch`` messages, one stamp per list."""
    pc = time.perf_counter_ns
    size = spec.batch
    for kind, n in ((KIND_WARM, spec.warmup), (KIND_DATA, spec.count)):
        while n:
            k = min(size, n)
            msgs = [(kind, PAYLOAD, pc())] * k
            done = write_batch(msgs)
            while done < k:
                done += write_batch(msgs[done:])
            n -= k
    while not write_batch([(KIND_STOP, PAYLOAD, pc())]):
        pass
    return {}


def _consume(recv: Callable[[], Any], idle: Callable[[int], Any] | None, ts_i: int, kind_i: int, spec: Spec, ready) -> dict:
    """Receive until STOP. ``recv()`` returns a message ``m`` (``m[ts_i]`` its stamp, ``m[kind_i]``
    its kind) or None when none is ready, then ``idle(timeout_ns)`` waits (None: spin)."""
    pc = time.perf_counter_ns
    hist = HdrHistogram(*HIST_ARGS)
    record = hist.record_value
    n = first = 0
    cpu0, t0 = _cpu_s(), pc()
    ready.set()
    # two loops on purpose: each mode's loop pays for its own per-message work only
    if spec.mode == "burst":
        while True:
            m = recv()
            if m is None:
                if idle is not None:
                    idle(WAIT_NS)
                continue
            kind = m[kind_i]
            if kind == KIND_DATA:
                if not n:
                    first = m[ts_i]
                n += 1
            elif kind == KIND_STOP:
                break
    else:  # paced or idle: the one-way latency of every measured message
        while True:
            m = recv()
            if m is None:
                if idle is not None:
                    idle(WAIT_NS)
                continue
            now = pc()
            kind = m[kind_i]
            if kind == KIND_DATA:
                record(now - m[ts_i])
                n += 1
            elif kind == KIND_STOP:
                break
    return _consumer_report(n, first, pc(), hist, cpu0, t0)


def _consume_batches(read_batch: Callable[[int], list], spec: Spec, ready) -> dict:
    """Burst consumer over the ring's batch API (``try_read_batch``)."""
    pc = time.perf_counter_ns
    size = spec.batch
    n = first = 0
    cpu0, t0 = _cpu_s(), pc()
    ready.set()
    while True:
        msgs = read_batch(size)
        if not msgs:
            continue
        if not first:  # still in the warm-up: skip it message by message
            msgs = [m for m in msgs if m[2] != KIND_WARM]
            if not msgs:
                continue
            first = msgs[0][1]
        n += len(msgs)
        if msgs[-1][2] == KIND_STOP:
            n -= 1
            break
    return _consumer_report(n, first, pc(), None, cpu0, t0)


def _consumer_report(n: int, first_ts: int, end_ns: int, hist: HdrHistogram | None, cpu0: float, t0: int) -> dict:
    return {
        "count": n,
        "first_ts": first_ts,
        "end_ns": end_ns,
        "hist": hist.encode() if hist is not None and hist.get_total_count() else None,
        "cpu_s": _cpu_s() - cpu0,
        "wall_s": (end_ns - t0) / 1e9,
    }


# ------------------------------------------------------------------ producer/consumer per transport
def ring_producer(name: str, spec: Spec, ready) -> dict:
    ring = Ring.attach(name)
    try:
        w = ring.writer()
        _await(ready)
        if spec.write == "batch":
            return _produce_batches(w.try_write_batch, spec)
        return _produce(w.try_write, spec)  # try_write returns False while the ring is full
    finally:
        ring.close()


def ring_consumer(name: str, spec: Spec, ready) -> dict:
    ring = Ring.attach(name)
    try:
        r = ring.reader()
        if spec.read == "batch":
            return _consume_batches(r.try_read_batch, spec, ready)
        idle = r.wait if spec.read == "blocking" else None
        return _consume(r.try_read, idle, 1, 2, spec, ready)  # Message: (seq, ts_origin_ns, kind, payload)
    finally:
        ring.close()


def peer_producer(arg: tuple[Callable, Any], spec: Spec, ready) -> dict:
    opener, target = arg
    send_raw, close = opener(target, "producer")
    pack = PEER_HEADER.pack

    def send(kind: int, payload, ts: int) -> None:
        send_raw(pack(ts, kind, PAYLOAD_BYTES, 0) + payload)

    try:
        _await(ready)
        return _produce(send, spec)
    finally:
        close()


def peer_consumer(arg: tuple[Callable, Any], spec: Spec, ready) -> dict:
    opener, target = arg
    recv_raw, close = opener(target, "consumer")
    unpack = PEER_HEADER.unpack_from

    def recv() -> tuple:
        return unpack(recv_raw())  # blocks; (ts, kind, length, crc)

    try:
        return _consume(recv, None, 0, 1, spec, ready)
    finally:
        close()


# Peer openers (child side): (target, role) -> (send(bytes) or recv() -> bytes, close).
def open_queue(q, role: str):
    if role == "producer":
        return q.put, lambda: (q.close(), q.join_thread())
    return q.get, q.close


def open_pipe(conn, role: str):
    return (conn.send_bytes if role == "producer" else conn.recv_bytes), conn.close


def open_zmq(endpoint: str, role: str):
    zctx = zmq.Context()
    if role == "producer":
        sock = zctx.socket(zmq.PUSH)
        sock.connect(endpoint)
        fn = sock.send
    else:
        sock = zctx.socket(zmq.PULL)
        sock.bind(endpoint)
        fn = sock.recv

    def close() -> None:
        sock.close(linger=10_000)  # the producer's last messages are flushed before it exits
        zctx.term()

    return fn, close


def open_mq(name: str, role: str):
    mq = posix_ipc.MessageQueue(name)  # blocking send and receive
    if role == "producer":
        return mq.send, mq.close
    return (lambda: mq.receive()[0]), mq.close


# Floors: no ring, no payload; what any Python busy-poll / any parked wake-up costs on this machine.
# A one-message mailbox: the producer waits until the consumer has acknowledged the previous message,
# stores the stamp and kind, then bumps a sequence word on its own cache line (and, in "blocking"
# mode, posts a semaphore); the consumer reads them and stores the sequence back as its ack.
# Paced runs only.
_FLOOR_TS, _FLOOR_KIND, _FLOOR_SEQ, _FLOOR_ACK = 8, 9, 16, 24  # u64 word indexes in a 4 KiB segment


def floor_open(name: str):
    shm = posix_ipc.SharedMemory(name)
    try:
        mm = mmap.mmap(shm.fd, shm.size)
    finally:
        shm.close_fd()
    return mm, memoryview(mm).cast("Q"), posix_ipc.Semaphore(name + ".wake")


def floor_producer(name: str, spec: Spec, ready) -> dict:
    mm, c, sem = floor_open(name)
    post = sem.release if spec.read == "blocking" else None

    def send(kind: int, payload, ts: int) -> bool:
        seq = c[_FLOOR_SEQ]
        if c[_FLOOR_ACK] < seq:
            return False  # the consumer has not taken the previous message yet: retry
        c[_FLOOR_TS] = ts
        c[_FLOOR_KIND] = kind
        c[_FLOOR_SEQ] = seq + 1  # the only writer: a plain 8-byte store
        if post is not None:
            post()
        return True

    try:
        _await(ready)
        return _produce(send, spec)
    finally:
        c.release()
        mm.close()
        sem.close()


def floor_consumer(name: str, spec: Spec, ready) -> dict:
    mm, c, sem = floor_open(name)
    seen = [c[_FLOOR_SEQ]]

    def poll() -> tuple | None:
        seq = c[_FLOOR_SEQ]
        if seq > seen[0]:
            seen[0] = seq
            m = c[_FLOOR_TS], c[_FLOOR_KIND]
            c[_FLOOR_ACK] = seq
            return m
        return None

    def park() -> tuple:
        sem.acquire()
        m = c[_FLOOR_TS], c[_FLOOR_KIND]
        c[_FLOOR_ACK] = c[_FLOOR_SEQ]
        return m

    try:
        return _consume(park if spec.read == "blocking" else poll, None, 0, 1, spec, ready)
    finally:
        c.release()
        mm.close()
        sem.close()



def die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when the bench process dies (even by SIGKILL), so that no
    busy-spinning child outlives it."""
    from pipeline.runtime.linux import PR_SET_PDEATHSIG, prctl

    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: no such call
        pass
    if os.getppid() == 1:  # the parent died before the line above
        os._exit(1)


def child_main(fn, role: str, arg, spec: Spec, core: int, ready, results) -> None:
    """Entry point of both children: pin, run ``fn``, send its report (or the traceback) home."""
    die_with_parent()
    try:
        pinned = _pin(core)
        gc.collect()
        gc.freeze()  # setup objects out of the collector's way; GC stays on, as in the pipeline
        out = fn(arg, spec, ready)
        out.update(role=role, core=pinned, pid=os.getpid())
    except BaseException:  # noqa: BLE001 - report everything to the parent
        out = {"role": role, "error": traceback.format_exc()}
    results.put(out)
