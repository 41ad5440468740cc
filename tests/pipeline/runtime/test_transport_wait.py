"""Like-for-like blocking waits: a consumer of several inputs parks on all of them at once under
every transport (the ring doorbell, one zmq.Poller, one multiprocessing.connection.wait), so it
costs next to no CPU while idle and wakes at once when a message arrives on any input, instead of
the back-off sleep of up to 1 ms the peer transports had.

The consumer is a spawned process shaped like the risk stage: the control ring (a shared-memory ring
under every transport) first, then three inputs of the transport under test. It takes its wait from
the runner (``choose_wait("blocking", ...)``) and runs the runner's duty cycle around it."""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import time

import pytest
import zmq

from pipeline.runtime.runner import choose_wait
from pipeline.runtime.transport import (
    RING_SLICE_NS, MpQueueIn, MpQueueOut, MpQueueWaitAll, ZmqIn, ZmqOut, ZmqWaitAll, wait_all,
)
from ringbuf import BackOff, Reader, Ring, layout as L
from ringbuf.ring import open_doorbell

PAYLOAD = 64
SLOT = L.slot_size_for(PAYLOAD)
PEERS = 3  # inputs of the transport under test, after the control ring (as the risk stage's)
MESSAGES = 50  # every 10th on the control ring, the rest round-robin over the peer inputs
IDLE_S = 0.5
BEAT_NS = 100_000_000  # the park timeout: the runner parks until its next heartbeat
OLD_BACK_OFF_CEILING_NS = 1_000_000  # the back-off sleep the peer transports used to idle with
ctx = multiprocessing.get_context("spawn")


def _inputs(transport: str, rings: list[str], ends: list) -> list:
    ins = [Ring.attach(rings[0], slot_size=SLOT, capacity=64).reader()]  # the control ring
    if transport == "ring":
        ins += [Ring.attach(r, slot_size=SLOT, capacity=64).reader() for r in rings[1:]]
    elif transport == "zmq":
        ins += [ZmqIn(zmq.Context.instance(), ep, PAYLOAD) for ep in ends]
    else:
        ins += [MpQueueIn(q, PAYLOAD) for q in ends]
    return ins


def _consumer(transport: str, rings: list[str], ends: list, conn) -> None:
    """The runner's duty cycle over ``_inputs`` with the runner's blocking wait: idle for IDLE_S
    (reports its CPU time and how many cycles it ran), then reports each message's wake latency
    (receive time - send time, one monotonic clock) and input index."""
    ins = _inputs(transport, rings, ends)
    park, idle = choose_wait("blocking", None, ins, BEAT_NS)
    got: list[tuple[int, int]] = []

    def cycle(until_ns: int) -> None:
        n = 0
        for k, port in enumerate(ins):
            n += port.poll(lambda seq, ts, kind, payload, k=k: got.append((k, time.monotonic_ns() - ts)), 16)
            port.commit()
        if n == 0:
            if park is not None:
                park(max(min(until_ns - time.monotonic_ns(), BEAT_NS), 0))
            else:
                idle.idle(0)
        elif idle is not None:
            idle.reset()

    conn.send("ready")
    assert conn.recv() == "go"
    end = time.monotonic_ns() + int(IDLE_S * 1e9)
    cpu0, cycles = time.process_time(), 0
    while time.monotonic_ns() < end:
        cycle(end)
        cycles += 1
    conn.send((time.process_time() - cpu0, cycles, len(got)))
    end = time.monotonic_ns() + 20_000_000_000
    while len(got) < MESSAGES and time.monotonic_ns() < end:
        cycle(end)
    conn.send(got)


def _measure(transport: str, tmp_path) -> tuple[float, int, int, list]:
    tag = f"shmpipe-test-wait-{os.getpid()}-{transport}"
    names = [f"{tag}-{i}" for i in range(1 + (PEERS if transport == "ring" else 0))]
    made, writers, closers, child = [], [], [], None
    try:
        for n in names:
            made.append(Ring.create(n, slot_size=SLOT, capacity=64, full_policy="drop", replace=True))
        writers.append(made[0].writer())
        if transport == "ring":  # several rings: every writer posts the first ring's semaphore
            for r in made[1:]:
                w = r.writer()
                sem = open_doorbell(names[0])
                w.use_doorbell(sem)
                closers.append(sem.close)
                writers.append(w)
            ends = []
        elif transport == "zmq":
            ends = [f"ipc://{tmp_path}/in{i}.sock" for i in range(PEERS)]
        else:
            ends = [ctx.Queue(maxsize=64) for _ in range(PEERS)]
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=_consumer, args=(transport, names, ends, theirs), daemon=True)
        child.start()
        assert mine.poll(30) and mine.recv() == "ready"
        if transport == "zmq":
            writers += [ZmqOut(zmq.Context.instance(), ep, drop=True, hwm=64) for ep in ends]
        elif transport == "mp-queue":
            writers += [MpQueueOut(q, drop=True, max_payload=PAYLOAD) for q in ends]
        closers += [w.close for w in writers[1:] if transport != "ring"]
        time.sleep(0.1)  # zmq: the PUSH sockets connect
        mine.send("go")
        assert mine.poll(10), "the idle phase reports"
        cpu_s, cycles, early = mine.recv()
        rnd = random.Random(7)
        for i in range(MESSAGES):
            time.sleep(rnd.uniform(0.020, 0.025))  # long enough for a back-off to reach its longest sleep
            w = writers[0] if i % 10 == 9 else writers[1 + i % PEERS]
            assert w.write(1, b"x" * 16, time.monotonic_ns())
        assert mine.poll(20), "the consumer reports every message"
        got = mine.recv()
        child.join(10)
        return cpu_s, cycles, early, got
    finally:
        if child is not None and child.is_alive():
            child.kill()
            child.join(5)
        for c in closers:
            c()
        for r in made:
            r.close()
        for n in names:
            Ring.unlink(n)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["ring", "zmq", "mp-queue"])
def test_multi_input_consumer_parks_while_idle_and_wakes_at_once_on_any_input(transport, tmp_path):
    cpu_s, cycles, early, got = _measure(transport, tmp_path)
    assert early == 0
    # parked: the duty cycle comes round only when the park times out (every BEAT_NS here), not
    # every back-off sleep (1 ms: hundreds of cycles), and the process uses next to no CPU
    assert cycles <= 3 * IDLE_S * 1e9 / BEAT_NS, f"{cycles} duty cycles in {IDLE_S} s idle: not parked"
    assert cpu_s / IDLE_S < 0.05, f"{cpu_s / IDLE_S:.1%} of a core while idle"

    assert len(got) == MESSAGES
    by_input: dict[int, list[int]] = {}
    for k, lat in got:
        by_input.setdefault(k, []).append(lat)
    assert sorted(by_input) == list(range(1 + PEERS)), "a message arrived on every input"
    peer = [lat for k, lat in got if k > 0]
    p50 = statistics.median(peer)
    # woken by the message, not by the end of a sleep: the old back-off (messages this far apart find
    # it in its 1 ms sleeps) leaves one waiting ~0.5 ms at the median, ~0.75 ms measured here
    assert p50 < OLD_BACK_OFF_CEILING_NS / 2, f"p50 wake latency {p50 / 1e3:.0f} us"
    # every input wakes it (one left out of the wait would sit until the park times out, BEAT_NS)
    for k in range(1, 1 + PEERS):
        assert statistics.median(by_input[k]) < OLD_BACK_OFF_CEILING_NS, \
            f"input {k}: p50 {statistics.median(by_input[k]) / 1e3:.0f} us"
    # the control ring: the doorbell under the ring; looked at every RING_SLICE_NS under the others
    ctl = statistics.median(by_input[0])
    assert ctl < RING_SLICE_NS + 5_000_000, f"control ring: p50 {ctl / 1e6:.1f} ms"


def test_wait_all_is_the_transports_own_wait_over_every_input(tmp_path):
    name = f"shmpipe-test-waitall-{os.getpid()}"
    ring = Ring.create(name, slot_size=SLOT, capacity=64, replace=True)
    q = ctx.Queue(maxsize=4)
    ins = []
    try:
        reader = ring.reader()
        zins = [ZmqIn(zmq.Context.instance(), f"ipc://{tmp_path}/w{i}.sock", PAYLOAD) for i in range(2)]
        ins += zins
        assert isinstance(wait_all([reader, *zins]), ZmqWaitAll)
        qins = [MpQueueIn(q, PAYLOAD), MpQueueIn(ctx.Queue(maxsize=4), PAYLOAD)]
        assert isinstance(wait_all([reader, *qins]), MpQueueWaitAll)
        assert wait_all([reader, zins[0], qins[0]]) is None, "no one wait over sockets and pipes"
        park, idle = choose_wait("blocking", None, [reader, *qins], BEAT_NS)
        assert isinstance(park, MpQueueWaitAll) and idle is None
        park, idle = choose_wait("back-off", None, [reader, *qins], BEAT_NS)
        assert park is None and isinstance(idle, BackOff), "back-off stays back-off"

        # a wait that times out returns False, not before its timeout (one that ignored it would hang:
        # the test's timeout); a ready input returns True
        for w in (wait_all([reader, *zins]), wait_all([reader, *qins])):
            t0 = time.monotonic_ns()
            assert w(12_000_000) is False
            assert time.monotonic_ns() - t0 >= 10_000_000
        ring.writer().write(1, b"x", 0)
        assert isinstance(reader, Reader) and wait_all([reader, *zins])(BEAT_NS) is True
        out = MpQueueOut(qins[1]._q, drop=True, max_payload=PAYLOAD)
        reader.poll(lambda *a: None, 16)
        out.write(1, b"y", 0)
        assert wait_all([reader, *qins])(2_000_000_000) is True
        assert qins[1].try_read() is not None
        out.close()
    finally:
        for i in ins:
            i.close()
        ring.close()
        Ring.unlink(name)
