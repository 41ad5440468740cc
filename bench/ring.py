"""Ring benchmark: one-way latency, burst throughput and idle CPU of ``ringbuf`` against its peers.

Usage::

    .venv/bin/python -m bench.ring              # full run (about 2 minutes); make bench-ring
    .venv/bin/python -m bench.ring --quick      # ~10x smaller counts: a smoke run
    .venv/bin/python -m bench.ring --out DIR    # write into DIR instead of bench/results/<UTC>-ring/

Every measurement runs a producer and a consumer in two fresh processes (multiprocessing 'spawn'),
the producer pinned to core 0 and the consumer to core 1 (``os.sched_setaffinity``):

- paced one-way latency: the producer sends one message every ``1/rate`` s, stamping each with
  ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, one clock for all processes) just before the send
  call; the consumer records ``now - stamp`` into an HdrHistogram (1 ns .. 10 s, 3 digits) as soon
  as the receive call returns. The producer waits for its next slot spinning on
  ``time.perf_counter_ns``; where the transport sends from a helper thread in the producer
  (``multiprocessing.Queue``'s feeder, zmq's I/O thread, both on the producer's core) it calls
  ``os.sched_yield()`` in that spin so the thread gets the GIL / the core (a pure spin costs
  Queue a ~3 ms p50 and zmq a ~3.6 ms p99). A producer that falls behind (preempted) restarts its
  schedule rather than sending a catch-up burst.
- burst throughput: the producer sends as fast as it can; msg/s = measured messages / (consumer's
  receipt of the final STOP message - the first measured message's stamp); the median of
  ``burst_repeats`` runs.
- idle CPU: no traffic for ``idle_s``; the consumer's CPU time (getrusage) over that wall time.
- floors (measured, no ring and no payload): a stamp handed over through one shared u64 mailbox,
  polled by a Python loop, or announced by a POSIX semaphore to a parked consumer: the least any
  busy-polled / any blocking transport can cost on this machine.

Warm-up messages go first in every run and are not measured. Each run gets a new ring / queue /
socket, removed in a ``finally``, and its child processes are killed and reaped in a ``finally``.

Messages are 80 bytes on every transport. The ring: its 16-byte slot header (ts_origin_ns, kind,
length, CRC-32C) + a 64-byte payload, in 128-byte slots. The peers: an 80-byte ``bytes`` frame, the
same 16-byte header layout (CRC field 0, nothing verified) + the same 64-byte payload, plus each
peer's own framing: ``multiprocessing.Queue`` pickles the bytes (+~20 B) behind a 4-byte length;
``Pipe.send_bytes`` adds a 4-byte length; zmq a 2-byte ZMTP frame header; a POSIX message queue none.

Results: ``results.json`` (every figure, the machine, the run plan), ``report.md`` (the table printed
to stdout), ``latency.png`` (percentile curves). Targets are checked against the measured figures;
the "naive busy-polled ring" row is quoted from the original design brief (not in this repository), not measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import multiprocessing as mp
import os
import platform
import queue
import resource
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
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
# Other processes' CPU time during the bench above which the results are flagged: 5 % of the cores'
# time (/proc/stat counts by ticks, getrusage exactly: the difference is a few % either way), at least 3 s.
CONTENTION_FRACTION, CONTENTION_MIN_S = 0.05, 3.0
NAIVE_RING = {"p50_us": 1.3, "msg_per_s": 0.82e6}  # quoted from the original design brief, not in this repository ("a plain busy-polled ring")
RESULTS_ROOT = Path(__file__).resolve().parent / "results"


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


@dataclass
class Result:
    """Everything measured for one transport (None: not measured)."""

    transport: str
    api: str
    p50_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    latency_count: int = 0
    curve: list[tuple[float, float]] = field(default_factory=list)  # (percentile, µs)
    paced_cpu_pct: float | None = None  # consumer CPU during the paced run, % of a core
    msg_per_s: float | None = None  # median of the throughput runs
    msg_per_s_runs: list[float] = field(default_factory=list)
    burst_count: int = 0  # measured messages per throughput run
    idle_cpu_pct: float | None = None  # consumer CPU with no traffic, % of a core
    ring_stats: dict[str, dict] = field(default_factory=dict)  # run -> ring counters after it
    errors: list[str] = field(default_factory=list)


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


def _floor_open(name: str):
    shm = posix_ipc.SharedMemory(name)
    try:
        mm = mmap.mmap(shm.fd, shm.size)
    finally:
        shm.close_fd()
    return mm, memoryview(mm).cast("Q"), posix_ipc.Semaphore(name + ".wake")


def floor_producer(name: str, spec: Spec, ready) -> dict:
    mm, c, sem = _floor_open(name)
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
    mm, c, sem = _floor_open(name)
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


# ---------------------------------------------------------------------- channels (parent side)
@dataclass
class Channel:
    """One run's transport instance: what each child gets, and how the parent tears it down."""

    producer_arg: Any
    consumer_arg: Any
    close: Callable[[], None]
    stats: Callable[[], dict] | None = None


def ring_channel(ctx, tag: str, capacity: int) -> Channel:
    name = f"bench-ring-{os.getpid()}-{tag}"
    ring = Ring.create(name, slot_size=SLOT_SIZE, capacity=capacity, full_policy="backpressure")

    def close() -> None:
        try:
            ring.close()
        finally:
            Ring.unlink(name)

    def stats() -> dict:
        s = ring.stats()
        keys = ("capacity", "written", "read", "dropped", "full_events", "crc_errors", "wakeups", "missed_wakeups")
        return {k: getattr(s, k) for k in keys}

    return Channel(name, name, close, stats)


def queue_channel(ctx, tag: str, capacity: int) -> Channel:
    q = ctx.Queue()
    return Channel((open_queue, q), (open_queue, q), lambda: (q.close(), q.cancel_join_thread()))


def pipe_channel(ctx, tag: str, capacity: int) -> Channel:
    r, w = ctx.Pipe(duplex=False)
    return Channel((open_pipe, w), (open_pipe, r), lambda: (r.close(), w.close()))


def zmq_channel(ctx, tag: str, capacity: int) -> Channel:
    tmp = tempfile.mkdtemp(prefix=f"bench-zmq-{os.getpid()}-")
    endpoint = f"ipc://{tmp}/{tag}.sock"
    return Channel((open_zmq, endpoint), (open_zmq, endpoint), lambda: shutil.rmtree(tmp, ignore_errors=True))


def mq_channel(ctx, tag: str, capacity: int) -> Channel:
    name = f"/bench-mq-{os.getpid()}-{tag}"
    posix_ipc.MessageQueue(name, posix_ipc.O_CREX, mode=0o600, max_messages=MQ_DEPTH, max_message_size=MESSAGE_BYTES).close()

    def close() -> None:
        try:
            posix_ipc.unlink_message_queue(name)
        except posix_ipc.ExistentialError:
            pass

    return Channel((open_mq, name), (open_mq, name), close)


def floor_channel(ctx, tag: str, capacity: int) -> Channel:
    name = f"/bench-floor-{os.getpid()}-{tag}"
    posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=4096).close_fd()
    try:
        posix_ipc.Semaphore(name + ".wake", posix_ipc.O_CREX, mode=0o600, initial_value=0).close()
    except BaseException:
        posix_ipc.unlink_shared_memory(name)
        raise
    return Channel(name, name, lambda: _unlink_floor(name))


def _unlink_floor(name: str) -> None:
    for unlink, n in ((posix_ipc.unlink_shared_memory, name), (posix_ipc.unlink_semaphore, name + ".wake")):
        try:
            unlink(n)
        except posix_ipc.ExistentialError:
            pass


# --------------------------------------------------------------------------------- the transports
@dataclass(frozen=True)
class Transport:
    name: str
    api: str
    channel: Callable[[Any, str, int], Channel]
    producer: Callable[[Any, Spec, Any], dict]
    consumer: Callable[[Any, Spec, Any], dict]
    burst: int  # messages in the full throughput run (0: no throughput run)
    latency: bool = True
    idle: bool = False  # also measure the consumer's idle CPU
    read: str = "spin"
    write: str = "single"
    pace: str = "spin"


TRANSPORTS: tuple[Transport, ...] = (
    Transport("ring busy-spin", "try_write / try_read spin", ring_channel, ring_producer, ring_consumer, 2_000_000, idle=True),
    Transport("ring blocking", "try_write / try_read, Reader.wait when empty", ring_channel, ring_producer, ring_consumer,
              2_000_000, idle=True, read="blocking"),
    Transport("ring batch-256", "try_write_batch(256) / try_read_batch(256) spin", ring_channel, ring_producer, ring_consumer,
              4_000_000, latency=False, read="batch", write="batch"),
    Transport("multiprocessing.Queue", "put / get (pickled bytes)", queue_channel, peer_producer, peer_consumer, 300_000,
              pace="yield"),
    Transport("multiprocessing.Pipe", "send_bytes / recv_bytes", pipe_channel, peer_producer, peer_consumer, 500_000),
    Transport("pyzmq PUSH/PULL ipc", "send / recv, ipc:// in a temp dir", zmq_channel, peer_producer, peer_consumer, 500_000,
              pace="yield"),
    Transport("posix_ipc.MessageQueue", f"blocking send / receive, {MQ_DEPTH} deep", mq_channel, peer_producer, peer_consumer, 300_000),
    Transport("floor: spin on a shm word", "u64 stores / Python loop polling a u64 (no ring, no payload; measured)", floor_channel,
              floor_producer, floor_consumer, 0),
    Transport("floor: semaphore wake", "u64 stores + sem post / parked sem.acquire (no ring, no payload; measured)", floor_channel,
              floor_producer, floor_consumer, 0, read="blocking"),
)
RING_SPIN, RING_BLOCKING, RING_BATCH = "ring busy-spin", "ring blocking", "ring batch-256"

#: (label, transport, Result field, comparison, bound)
TARGETS = (
    ("busy-spin p50 <= 1.0 µs", RING_SPIN, "p50_us", "<=", 1.0),
    ("busy-spin p99 <= 2.0 µs", RING_SPIN, "p99_us", "<=", 2.0),
    ("single-message >= 1.5 M msg/s", RING_SPIN, "msg_per_s", ">=", 1.5e6),
    ("batch >= 3 M msg/s", RING_BATCH, "msg_per_s", ">=", 3e6),
    ("blocking p50 <= 8 µs", RING_BLOCKING, "p50_us", "<=", 8.0),
    ("blocking idle CPU near zero (<= 1 % of a core)", RING_BLOCKING, "idle_cpu_pct", "<=", 1.0),
)


# ---------------------------------------------------------------------------------- orchestration
class BenchError(Exception):
    pass


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when the bench process dies (even by SIGKILL), so that no
    busy-spinning child outlives it."""
    from pipeline.runtime.linux import PR_SET_PDEATHSIG, prctl

    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: no such call
        pass
    if os.getppid() == 1:  # the parent died before the line above
        os._exit(1)


def _child_main(fn, role: str, arg, spec: Spec, core: int, ready, results) -> None:
    """Entry point of both children: pin, run ``fn``, send its report (or the traceback) home."""
    _die_with_parent()
    try:
        pinned = _pin(core)
        gc.collect()
        gc.freeze()  # setup objects out of the collector's way; GC stays on, as in the pipeline
        out = fn(arg, spec, ready)
        out.update(role=role, core=pinned, pid=os.getpid())
    except BaseException:  # noqa: BLE001 - report everything to the parent
        out = {"role": role, "error": traceback.format_exc()}
    results.put(out)


def run_pair(ctx, t: Transport, spec: Spec, tag: str, capacity: int, timeout_s: float) -> tuple[dict, dict, dict | None]:
    """One run: a fresh channel, consumer then producer started; returns both reports and the
    ring's counters. Children are killed and reaped, and the channel removed, whatever happens."""
    chan = t.channel(ctx, tag, capacity)
    try:
        ready, results = ctx.Event(), ctx.Queue()
        procs = {
            role: ctx.Process(target=_child_main, args=(fn, role, arg, spec, core, ready, results), name=f"bench-{role}", daemon=True)
            for role, fn, arg, core in (
                ("consumer", t.consumer, chan.consumer_arg, CONSUMER_CORE),
                ("producer", t.producer, chan.producer_arg, PRODUCER_CORE),
            )
        }
        started = []
        try:
            for p in procs.values():
                p.start()
                started.append(p)
            got: dict[str, dict] = {}
            deadline = time.monotonic() + timeout_s
            while len(got) < 2:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"timed out after {timeout_s:.0f} s (got {sorted(got)})")
                try:
                    out = results.get(timeout=min(left, 1.0))
                except queue.Empty:
                    dead = [f"{r} exit {p.exitcode}" for r, p in procs.items() if r not in got and p.exitcode not in (None, 0)]
                    if dead:
                        raise BenchError("child died: " + ", ".join(dead)) from None
                    continue
                if "error" in out:
                    raise BenchError(f"{out['role']} failed:\n{out['error']}")
                got[out["role"]] = out
            for p in started:
                p.join(10)
            return got["producer"], got["consumer"], chan.stats() if chan.stats else None
        finally:
            for p in started:
                if p.is_alive():
                    p.kill()
                p.join(10)
            results.close()
            results.cancel_join_thread()
    finally:
        chan.close()


def _latency_figures(encoded: bytes) -> dict:
    h = HdrHistogram.decode(encoded)
    us = lambda ns: ns / 1000.0  # noqa: E731
    pcts = [100.0 * (1 - 10 ** (-k / 10)) for k in range(0, 51)]  # 0 % .. 99.999 %
    return {
        "p50_us": us(h.get_value_at_percentile(50)),
        "p99_us": us(h.get_value_at_percentile(99)),
        "p999_us": us(h.get_value_at_percentile(99.9)),
        "max_us": us(h.get_max_value()),
        "mean_us": us(h.get_mean_value()),
        "latency_count": h.get_total_count(),
        "curve": [(p, us(h.get_value_at_percentile(p))) for p in pcts],
    }


def measure(t: Transport, plan: Plan, ctx, log: Callable[[str], None]) -> Result:
    """All runs for one transport: paced latency, burst throughput, and idle CPU where asked."""
    res = Result(t.name, t.api)
    base = Spec(mode="paced", read=t.read, write=t.write, batch=plan.batch, pace=t.pace)
    slug = "".join(c if c.isalnum() else "-" for c in t.name.lower())
    runs = []
    if t.latency:
        runs.append(("paced", replace(base, warmup=plan.warmup, count=plan.latency_count, interval_ns=1_000_000_000 // plan.rate),
                     plan.latency_capacity, 3 * (plan.warmup + plan.latency_count) / plan.rate + 30))
    count = max(1000, int(t.burst * plan.burst_scale))
    burst = replace(base, mode="burst", warmup=plan.burst_warmup, count=count)
    runs += [(f"burst{i + 1}", burst, plan.burst_capacity, count / 20_000 + 30) for i in range(plan.burst_repeats if t.burst else 0)]
    if t.idle:
        runs.append(("idle", replace(base, mode="idle", idle_s=plan.idle_s), plan.latency_capacity, plan.idle_s + 30))
    for mode, spec, capacity, timeout_s in runs:
        t0 = time.monotonic()
        try:
            prod, cons, stats = run_pair(ctx, t, spec, f"{slug}-{mode}", capacity, timeout_s)
        except BenchError as exc:
            res.errors.append(f"{mode}: {exc}")
            log(f"  {t.name:24s} {mode:5s} FAILED: {str(exc).splitlines()[0]}")
            continue
        if stats is not None:
            res.ring_stats[mode] = stats
        cpu_pct = 100.0 * cons["cpu_s"] / cons["wall_s"] if cons["wall_s"] > 0 else None
        if mode != "idle" and cons["count"] != spec.count:
            res.errors.append(f"{mode}: consumer counted {cons['count']} of {spec.count} messages")
        if mode == "paced" and cons["hist"]:
            for k, v in _latency_figures(cons["hist"]).items():
                setattr(res, k, v)
            res.paced_cpu_pct = cpu_pct
            detail = f"p50 {res.p50_us:.2f} µs  p99 {res.p99_us:.2f} µs  max {res.max_us:.0f} µs"
        elif mode.startswith("burst"):
            res.burst_count = cons["count"]
            seconds = (cons["end_ns"] - cons["first_ts"]) / 1e9
            res.msg_per_s_runs.append(cons["count"] / seconds)
            res.msg_per_s = statistics.median(res.msg_per_s_runs)
            detail = f"{res.msg_per_s_runs[-1] / 1e6:.3f} M msg/s over {seconds:.2f} s"
        else:
            res.idle_cpu_pct = cpu_pct
            detail = f"consumer CPU {cpu_pct:.2f} % of a core over {cons['wall_s']:.1f} s idle"
        log(f"  {t.name:24s} {mode:5s} {detail}  ({time.monotonic() - t0:.1f} s)")
    return res


# ------------------------------------------------------------------------------------------ report
def machine_info() -> dict:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = sorted(os.sched_getaffinity(0))
    return {
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "producer_core": PRODUCER_CORE if PRODUCER_CORE in usable else usable[PRODUCER_CORE % len(usable)],
        "consumer_core": CONSUMER_CORE if CONSUMER_CORE in usable else usable[CONSUMER_CORE % len(usable)],
        "python": platform.python_version(),
        "python_build": sys.version,
        "kernel": platform.release(),
        "loadavg": list(os.getloadavg()),
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "libzmq": zmq.zmq_version(),
        "pyzmq": zmq.pyzmq_version(),
        "posix_ipc": posix_ipc.VERSION,
        "mq_depth": MQ_DEPTH,
    }


def cpu_account() -> dict:
    """CPU seconds so far: the whole machine's busy and steal time (/proc/stat), and this process's
    own plus its reaped children's (getrusage); their difference over a run is everyone else's work."""
    hz = os.sysconf("SC_CLK_TCK")
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy, steal = (f[0] + f[1] + f[2] + f[5] + f[6]) / hz, (f[7] / hz if len(f) > 7 else 0.0)
    except (OSError, ValueError, IndexError):
        busy = steal = float("nan")
    own = sum(ru.ru_utime + ru.ru_stime for ru in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))
    return {"machine_busy_s": busy, "steal_s": steal, "own_s": own}


def check_targets(results: dict[str, Result]) -> list[dict]:
    out = []
    for label, name, attr, op, bound in TARGETS:
        value = getattr(results[name], attr) if name in results else None
        met = value is not None and (value <= bound if op == "<=" else value >= bound)
        out.append({"target": label, "transport": name, "field": attr, "op": op, "bound": bound, "measured": value, "met": met})
    return out


def _us(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def _rate(v: float | None) -> str:
    return "–" if v is None else f"{v / 1e6:.3f} M"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None or b == 0 else f"{a / b:.1f}×"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def markdown_table(results: dict[str, Result]) -> str:
    spin, blk = results.get(RING_SPIN), results.get(RING_BLOCKING)
    spin_p50 = spin.p50_us if spin else None
    blk_p50 = blk.p50_us if blk else None
    ring_rate = spin.msg_per_s if spin else None
    head = ("| transport | p50 µs | p99 µs | p99.9 µs | max µs | p50 ÷ ring spin p50 | p50 ÷ ring blocking p50 "
            "| msg/s | ring single-msg ÷ this | consumer CPU % paced | consumer CPU % idle |")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in results.values():
        rows.append(
            f"| {r.transport} | {_us(r.p50_us)} | {_us(r.p99_us)} | {_us(r.p999_us)} | {_us(r.max_us)} "
            f"| {_ratio(r.p50_us, spin_p50)} | {_ratio(r.p50_us, blk_p50)} | {_rate(r.msg_per_s)} "
            f"| {_ratio(ring_rate, r.msg_per_s)} | {_pct(r.paced_cpu_pct)} | {_pct(r.idle_cpu_pct)} |"
        )
    n = NAIVE_RING
    rows.append(
        f"| naive busy-polled ring (quoted from the original design brief (not in this repository), not measured) | {_us(n['p50_us'])} | – | – | – "
        f"| {_ratio(n['p50_us'], spin_p50)} | {_ratio(n['p50_us'], blk_p50)} | {_rate(n['msg_per_s'])} "
        f"| {_ratio(ring_rate, n['msg_per_s'])} | – | – |"
    )
    return "\n".join(rows)


def target_lines(targets: list[dict]) -> list[str]:
    lines = []
    for t in targets:
        v = t["measured"]
        shown = "not measured" if v is None else (f"{v / 1e6:.3f} M msg/s" if t["field"] == "msg_per_s"
                                                  else f"{v:.2f} %" if t["field"].endswith("pct") else f"{v:.2f} µs")
        status = "N/A   " if v is None else "MET   " if t["met"] else "MISSED"
        lines.append(f"{status} ring {t['target']}: measured {shown} ({t['transport']})")
    return lines


def notes(plan: Plan, machine: dict) -> list[str]:
    cores = machine["usable_cores"]
    pin = (f"producer pinned to core {machine['producer_core']}, consumer to core {machine['consumer_core']}"
           if len(cores) > 1 else f"ONLY ONE USABLE CORE ({cores[0]}): producer and consumer share it")
    return [
        f"{machine['cpu_model']}, {machine['cpu_count']} cores, Python {machine['python']}, kernel {machine['kernel']}, "
        f"load average {' '.join(f'{x:.2f}' for x in machine['loadavg'])}, {machine['date_utc']}.",
        f"Each run: a producer and a consumer process (multiprocessing spawn), {pin}.",
        f"Messages: {MESSAGE_BYTES} bytes on every transport: the ring's 16-byte slot header (with CRC-32C) + 64-byte payload "
        f"in {SLOT_SIZE}-byte slots; peers send one 80-byte frame (the same header layout, CRC not computed, + the same "
        "payload) plus their own framing (Queue: pickle + 4-byte length; Pipe: 4-byte length; zmq: 2-byte frame header; mq: none).",
        f"Latency: paced at {plan.rate:,} msg/s, {plan.warmup:,} warm-up + {plan.latency_count:,} measured messages, "
        "one-way from the producer's perf_counter_ns() before the send call to the consumer's just after the receive "
        f"call returned (HdrHistogram 1 ns..10 s, 3 digits). Ring: {plan.latency_capacity} slots, backpressure.",
        f"Throughput: burst after {plan.burst_warmup:,} warm-up messages; msg/s = measured messages / (consumer's receipt "
        f"of STOP - first measured message's stamp); median of {plan.burst_repeats} run(s), each in JSON msg_per_s_runs. Ring: {plan.burst_capacity} slots, backpressure (nothing dropped); "
        f"the busy-spin and blocking rows use try_write / try_read, the batch row try_write_batch({plan.batch}) / "
        f"try_read_batch({plan.batch}) with one stamp per batch.",
        f"Idle CPU: consumer's getrusage CPU time over {plan.idle_s} s with no traffic, as % of one core. "
        "Paced CPU: the same over the whole paced run.",
        "Paced producers wait for their next slot by spinning on perf_counter_ns; the Queue and zmq producers call "
        "os.sched_yield() in that spin, so that their sending thread (Queue's feeder, zmq's I/O thread) gets the GIL / "
        "the core (a pure spin gives Queue a ~3 ms p50 and zmq a ~3.6 ms p99).",
        "Floor rows (measured): a one-message u64 mailbox in shared memory (producer waits for the consumer's ack), "
        "polled by a Python loop or announced by a posix_ipc.Semaphore post to a parked consumer: the least a "
        "busy-polled / a blocking transport can cost here. No payload, no CRC.",
        "Peers receive with their blocking call (no spinning); compare them with the ring's blocking row as well as its "
        "busy-spin row. The 'naive busy-polled ring' row is quoted from the original design brief (not in this repository), not measured here.",
        f"Other work on the machine during the bench: {max(0.0, machine.get('other_cpu_s', 0.0)):.1f} CPU-s "
        f"(machine busy time from /proc/stat minus this bench's own from getrusage; raw {machine.get('other_cpu_s', 0.0):+.1f}) "
        f"over {machine.get('bench_wall_s', 0):.0f} s; steal {machine.get('steal_s', 0):.1f} s. Above "
        f"{contention_limit_s(machine):.1f} CPU-s the figures count as taken under contention (flagged on stdout and above the table).",
        "This VM pauses processes for 0.2-15 ms now and then (measured in the original design brief, not in this repository): p99.9 and max describe the machine as much as the code.",
    ]


def plot(results: dict[str, Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    for r in results.values():
        if r.curve:
            xs = [1.0 / (1.0 - p / 100.0) for p, _ in r.curve]
            ax.plot(xs, [max(v, 1e-3) for _, v in r.curve], marker=".", markersize=3, label=f"{r.transport} (p50 {_us(r.p50_us)} µs)")
    ax.axhline(NAIVE_RING["p50_us"], color="grey", linestyle=":", label="naive ring p50 1.3 µs (quoted, not measured)")
    ticks = [1, 2, 10, 100, 1000, 10_000, 100_000]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("one-way latency (µs)")
    ax.set_title(f"One-way latency, {MESSAGE_BYTES}-byte messages, paced, producer and consumer on separate cores")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def contention_limit_s(machine: dict) -> float:
    return max(CONTENTION_MIN_S, CONTENTION_FRACTION * machine.get("bench_wall_s", 0) * len(machine["usable_cores"]))


def contended(machine: dict) -> str:
    """A warning when other processes used the cores during the bench, else ''."""
    if machine.get("other_cpu_s", 0) <= contention_limit_s(machine):
        return ""
    return (f"WARNING: other processes used {machine['other_cpu_s']:.1f} CPU-s during this {machine['bench_wall_s']:.0f} s "
            "bench, on the same cores: the figures were taken under contention; rerun on a quiet machine.")


def write_outputs(out_dir: Path, plan: Plan, machine: dict, results: dict[str, Result], quick: bool,
                  log: Callable[[str], None]) -> tuple[str, list[str], list[str]]:
    """Write results.json, report.md and latency.png; returns the table, the target lines, the errors."""
    targets = check_targets(results)
    table = markdown_table(results)
    tlines = target_lines(targets)
    note_lines = notes(plan, machine)
    errors = [f"{r.transport}: {e}" for r in results.values() for e in r.errors]
    ring_stats = [f"- {r.transport} {mode}: {s}" for r in results.values() for mode, s in r.ring_stats.items()]
    warning = [contended(machine), ""] if contended(machine) else []
    report = "\n".join(
        [f"# Ring benchmark {machine['date_utc']}{' (quick)' if quick else ''}", "", *warning, table, "",
         "## Targets", "", *[f"- {line}" for line in tlines], "",
         "## Notes", "", *[f"- {line}" for line in note_lines], "",
         "## Ring counters after each run", "", *ring_stats, ""]
        + (["## Errors", "", *[f"- {e}" for e in errors], ""] if errors else [])
    )
    doc = {
        "machine": machine,
        "plan": asdict(plan) | {"quick": quick, "message_bytes": MESSAGE_BYTES, "payload_bytes": PAYLOAD_BYTES, "slot_size": SLOT_SIZE},
        "transports": {name: asdict(r) for name, r in results.items()},
        "reference_quoted_from_design": {"naive busy-polled ring": NAIVE_RING},
        "targets": targets,
        "notes": note_lines,
        "contention_warning": contended(machine) or None,
        "errors": errors,
    }
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "report.md").write_text(report)
    try:
        plot(results, out_dir / "latency.png")
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the picture
        errors.append(f"plot: {exc}")
        log(f"plot failed: {exc}")
    return table, tlines, errors


def remove_stale() -> list[str]:
    """Remove rings and message queues that a bench killed by SIGKILL left behind (their pid is gone)."""
    removed = []
    for folder, prefix in ((Path("/dev/shm"), "bench-ring-"), (Path("/dev/shm"), "bench-floor-"), (Path("/dev/mqueue"), "bench-mq-")):
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            pid = entry.name[len(prefix):].split("-", 1)[0]
            if not entry.name.startswith(prefix) or not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            if prefix == "bench-ring-":
                Ring.unlink(entry.name)
            elif prefix == "bench-floor-":
                _unlink_floor("/" + entry.name)
            else:
                try:
                    posix_ipc.unlink_message_queue("/" + entry.name)
                except posix_ipc.ExistentialError:
                    pass
            removed.append(entry.name)
    return removed


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: children reaped, rings unlinked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ring", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~10x smaller counts (a smoke run)")
    ap.add_argument("--out", type=Path, help="output directory (default: bench/results/<UTC>-ring/)")
    ap.add_argument("--rate", type=int, help="paced messages per second (default 20000)")
    ap.add_argument("--only", help="comma-separated transport names to run (default: all)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.rate:
        plan = replace(plan, rate=args.rate)
    selected = [t for t in TRANSPORTS if not args.only or t.name in {s.strip() for s in args.only.split(",")}]
    if not selected:
        ap.error(f"--only matched nothing; transports: {', '.join(t.name for t in TRANSPORTS)}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = args.out or RESULTS_ROOT / f"{stamp}-ring"
    out_dir.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    for name in remove_stale():
        log(f"removed stale {name} (its bench process is gone)")
    machine = machine_info()
    if len(machine["usable_cores"]) < 2:
        log(f"warning: only one usable core ({machine['usable_cores']}); producer and consumer share it")
    log(f"bench.ring ({'quick' if args.quick else 'full'}) -> {out_dir}")
    ctx = mp.get_context("spawn")
    t0, acct0 = time.monotonic(), cpu_account()
    results = {t.name: measure(t, plan, ctx, log) for t in selected}
    acct1 = cpu_account()
    machine["loadavg_end"] = list(os.getloadavg())
    machine["bench_wall_s"] = round(time.monotonic() - t0, 1)
    machine["other_cpu_s"] = round((acct1["machine_busy_s"] - acct0["machine_busy_s"]) - (acct1["own_s"] - acct0["own_s"]), 1)
    machine["steal_s"] = round(acct1["steal_s"] - acct0["steal_s"], 1)
    table, tlines, errors = write_outputs(out_dir, plan, machine, results, args.quick, log)
    print(table)
    print()
    print("\n".join(tlines))
    if contended(machine):
        print("\n" + contended(machine))
    if errors:
        print("\nerrors:\n" + "\n".join(errors))
    log(f"wrote {out_dir}/results.json, report.md, latency.png in {machine['bench_wall_s']} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
