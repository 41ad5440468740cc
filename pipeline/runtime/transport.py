"""Ports: the ends of the arrows between processes, over the ring or, for comparison, pyzmq or
multiprocessing.Queue.

``open_ports(cfg, proc)`` gives a process its input readers and output writers. With
``supervisor.transport = "ring"`` (the product) they are ``ringbuf`` readers and writers. The other
two transports exist for like-for-like measurement only; their ports have the same calls (``poll``,
``try_read``, ``commit``, ``wait``, ``write``, ``try_write``, ``heartbeat``) and carry the same
16-byte header (CRC-32C included) and payload:

- ``"zmq"``: ``ZmqIn`` / ``ZmqOut`` over PUSH/PULL on ``ipc://`` sockets in the run directory.
  zmq ports keep nothing across a restart (no cursors).
- ``"mp-queue"``: ``MpQueueIn`` / ``MpQueueOut`` over one ``multiprocessing.Queue`` (spawn context,
  ``maxsize`` = the ring's capacity) per ring. Queue handles reach a process only by inheritance,
  so the supervisor creates the queues and starts the stages as ``multiprocessing`` processes
  (``pipeline.runtime.runner.run_spawned``), handing each its queues; ``open_ports`` gets them through
  ``queues``. **mp-queue pickles every frame by construction** (``Queue.put`` pickles in a feeder
  thread, ``get`` unpickles): it is there to be compared with, the product never pickles across
  processes. Each frame's CRC is computed with sequence number 0 (a queue delivers whole frames in
  order; there is no slot that could go stale), so frames stay verifiable when either end restarts.
  The queues outlive restarts (the supervisor holds them), but ``multiprocessing.Queue`` is not
  crash-safe: a process SIGKILLed while it holds the queue's internal read or write lock (inside a
  ``get``, or while its feeder thread writes into a full pipe) leaves that lock held for good, and
  messages still buffered in a killed writer's feeder thread are lost.

The control ring (``supervisor.control_ring``) is a shared-memory ring in every transport: the
supervisor writes CONTROL into it itself (``Supervisor.halt``), so its consumer reads the ring too
(``port_transport``).

Blocking waits are like-for-like: a stage with ``wait = "blocking"`` parks on its one input's
``wait``, and a stage of several inputs parks on ``wait_all(inputs)``, each transport's own best
wait over all of them at once: the ring doorbell (``ringbuf.ring.wait_any``), one ``zmq.Poller``
over the PULL sockets, or ``multiprocessing.connection.wait`` over the queues' reader pipes.
"""

from __future__ import annotations

import functools
import os
import queue as _queue
import time
from multiprocessing.connection import wait as _conn_wait
from pathlib import Path

import crc32c
import zmq

from pipeline.runtime.config import Config, ProcessConfig
from pipeline.runtime.errors import StartupError
from ringbuf import BackOff, PayloadTooLargeError, Reader, Ring, layout as L
from ringbuf.ring import open_doorbell, wait_any


class Ports:
    """A process's input and output ports by ring name."""

    def __init__(self, inputs: dict, outputs: dict, closers: list):
        self.inputs = inputs
        self.outputs = outputs
        self._closers = closers

    def heartbeat(self, now_ns: int) -> None:
        for p in self.inputs.values():
            p.heartbeat(now_ns)
        for p in self.outputs.values():
            p.heartbeat(now_ns)

    def commit(self) -> None:
        for p in self.inputs.values():
            p.commit()

    def close(self) -> None:
        for c in self._closers:
            c()


def port_transport(cfg: Config, ring: str) -> str:
    """What carries ``ring``: ``supervisor.transport``, except for the control ring, which is a
    shared-memory ring in every transport (the supervisor writes it through ``ringbuf``)."""
    if ring == cfg.supervisor.control_ring:
        return "ring"
    return cfg.supervisor.transport


def open_ports(cfg: Config, proc: ProcessConfig, writer_idle=None, queues: dict | None = None) -> Ports:
    """Attach the rings (or zmq sockets, or queues) named by ``proc.inputs`` / ``proc.outputs``.

    ``writer_idle`` is the idle strategy writers use while a ``backpressure`` ring is full.
    ``queues`` maps ring names to the ``multiprocessing.Queue`` of each (transport ``mp-queue``;
    the supervisor hands them over when it starts the process).

    Raises:
        ringbuf.RingError: a ring is missing or its geometry differs from the config.
        StartupError: transport ``mp-queue`` without the queue of one of the rings.
    """
    inputs, outputs, closers = {}, {}, []
    for names, table, side in ((proc.inputs, inputs, "reader"), (proc.outputs, outputs, "writer")):
        for rn in names:
            rc = cfg.ring(rn)
            how = port_transport(cfg, rn)
            if how == "ring":
                ring = Ring.attach(cfg.segment_name(rn), slot_size=L.slot_size_for(rc.max_payload_bytes),
                                   capacity=rc.capacity, full_policy=rc.full_policy)
                table[rn] = ring.reader() if side == "reader" else ring.writer(writer_idle)
                closers.append(ring.close)
                bell = doorbell_ring(cfg, rn) if side == "writer" else None
                if bell is not None and bell != rn:
                    sem = open_doorbell(cfg.segment_name(bell))
                    table[rn].use_doorbell(sem)
                    closers.append(sem.close)
                continue
            if how == "zmq":
                ctx = zmq.Context.instance()
                if side == "reader":
                    port = ZmqIn(ctx, zmq_endpoint(cfg, rn), rc.max_payload_bytes)
                else:
                    port = ZmqOut(ctx, zmq_endpoint(cfg, rn), rc.full_policy == "drop", rc.capacity)
            else:
                q = (queues or {}).get(rn)
                if q is None:
                    raise StartupError(f"transport mp-queue: no queue for ring {rn!r} (the queues are handed "
                                       "over by the supervisor when it starts the process)")
                if side == "reader":
                    port = MpQueueIn(q, rc.max_payload_bytes)
                else:
                    port = MpQueueOut(q, rc.full_policy == "drop", rc.max_payload_bytes, writer_idle)
            table[rn] = port
            closers.append(port.close)
    return Ports(inputs, outputs, closers)


def doorbell_ring(cfg: Config, ring: str) -> str | None:
    """The ring whose semaphore the writer of ``ring`` must post: the first input of ``ring``'s
    consumer when that consumer reads several shared-memory rings (it parks on that one semaphore
    for all of them, ``ringbuf.ring.wait_any``); None when the ring has no consumer or its consumer
    reads only it (then the ring's own semaphore is the one)."""
    for p in cfg.processes:
        if ring in p.inputs:
            rings = [r for r in p.inputs if port_transport(cfg, r) == "ring"]
            return rings[0] if len(rings) > 1 and ring in rings else None
    return None


#: the longest a socket or queue wait of several inputs sleeps before it looks at the shared-memory
#: rings among them (the control ring, under the peer transports): no socket or pipe can watch a ring.
#: The same bound as a parked ring reader's (``Reader.wait``'s ``park_ns``), so an idle stage wakes no
#: more often than under the ring, and a CONTROL reaches it within about this long.
RING_SLICE_NS = 5_000_000


def wait_all(inputs: list):
    """The blocking wait of a consumer of several inputs: ``park(timeout_ns) -> bool``, which returns
    once a message may be ready on any of them (True) or ``timeout_ns`` has passed (False); None when
    there is no such wait for this mix of ports (the caller falls back to its idle strategy).

    - only shared-memory rings: ``ringbuf.ring.wait_any`` on the doorbell, the first ring's
      semaphore (``doorbell_ring``): ``inputs`` must be in the config's order;
    - zmq: one ``zmq.Poller`` over every input socket (``ZmqWaitAll``);
    - mp-queue: ``multiprocessing.connection.wait`` over every queue's reader pipe (``MpQueueWaitAll``).

    Rings among socket or queue inputs (the control ring) are looked at between waits of at most
    ``RING_SLICE_NS``.
    """
    if all(isinstance(i, Reader) for i in inputs):
        return functools.partial(wait_any, list(inputs))
    rings = [i for i in inputs if isinstance(i, Reader)]
    peers = [i for i in inputs if not isinstance(i, Reader)]
    if all(isinstance(i, ZmqIn) for i in peers):
        return ZmqWaitAll(peers, rings)
    if all(isinstance(i, MpQueueIn) and i.reader_conn is not None for i in peers):
        return MpQueueWaitAll(peers, rings)
    return None


def _ring_ready(rings: list) -> bool:
    for r in rings:
        if r.available():
            return True
    return False


class ZmqWaitAll:
    """``park(timeout_ns)`` over several zmq inputs: one ``zmq.Poller`` (POLLIN) over all their
    sockets, so a message on any of them wakes the stage at once; shared-memory ``rings`` among the
    inputs are looked at before the wait and every ``RING_SLICE_NS``."""

    def __init__(self, ins: list, rings: list = ()):
        self._poller = zmq.Poller()
        for i in ins:
            self._poller.register(i._sock, zmq.POLLIN)
        self._rings = list(rings)

    def __call__(self, timeout_ns: int) -> bool:
        rings = self._rings
        if _ring_ready(rings):
            return True
        deadline = time.monotonic_ns() + timeout_ns
        left = timeout_ns
        while left > 0:
            part = min(left, RING_SLICE_NS) if rings else left
            if self._poller.poll(-(-part // 1_000_000)):  # ms, rounded up
                return True
            if _ring_ready(rings):
                return True
            left = deadline - time.monotonic_ns()
        return False


class MpQueueWaitAll:
    """``park(timeout_ns)`` over several mp-queue inputs: ``multiprocessing.connection.wait`` over
    the reader ends of their queues' pipes (``MpQueueIn.reader_conn``: this relies on
    ``multiprocessing.Queue`` keeping its reader ``Connection`` in ``_reader``, a CPython detail).
    A readable pipe means a frame may be ready; waiting takes no queue lock (a stage killed while
    parked leaves none held). Shared-memory ``rings`` among the inputs are looked at before the wait
    and every ``RING_SLICE_NS``."""

    def __init__(self, ins: list, rings: list = ()):
        self._ins = list(ins)
        self._conns = [i.reader_conn for i in ins]
        self._rings = list(rings)

    def __call__(self, timeout_ns: int) -> bool:
        rings = self._rings
        if _ring_ready(rings) or any(i._pending is not None for i in self._ins):
            return True
        deadline = time.monotonic_ns() + timeout_ns
        left = timeout_ns
        while left > 0:
            part = min(left, RING_SLICE_NS) if rings else left
            if _conn_wait(self._conns, part / 1e9):
                return True
            if _ring_ready(rings):
                return True
            left = deadline - time.monotonic_ns()
        return False


def zmq_endpoint(cfg: Config, ring: str) -> str:
    return f"ipc://{Path(cfg.supervisor.run_dir).resolve()}/zmq-{cfg.supervisor.shm_prefix}-{ring}.sock"


FRAME_SEQ = 0  # message-passing transports have no slot sequence: their frames are CRC'd with seq 0


def encode_frame(kind: int, payload, ts_origin_ns: int) -> bytes:
    """One frame for the zmq and mp-queue transports: the ring's 16-byte header (CRC-32C over
    seq 0, header bytes 0..11 and payload) followed by the payload."""
    n = len(payload)
    crc = crc32c.crc32c(payload, crc32c.crc32c(L.CRC_PREFIX.pack(FRAME_SEQ, ts_origin_ns, kind, n)))
    return L.HEADER.pack(ts_origin_ns, kind, n, crc) + bytes(payload)


def decode_frame(frame: bytes, max_payload: int):
    """``(ts_origin_ns, kind, payload view)`` of a frame, or None when it is short, its length is
    wrong or too large, or its CRC does not verify."""
    if len(frame) < L.HEADER_BYTES:
        return None
    ts, kind, n, crc = L.HEADER.unpack_from(frame, 0)
    view = memoryview(frame)[L.HEADER_BYTES:]
    if n != len(view) or n > max_payload or \
            crc32c.crc32c(view, crc32c.crc32c(L.CRC_PREFIX.pack(FRAME_SEQ, ts, kind, n))) != crc:
        return None
    return ts, kind, view


class _FrameIn:
    """Reader API over a message-passing transport; subclasses supply ``_next()`` (one frame or
    None, never blocking) and ``wait()``. ``seq`` handed to handlers counts the frames this reader
    has taken since it started; a frame that fails ``decode_frame`` is counted in ``crc_errors``."""

    def __init__(self, max_payload: int):
        self._max = max_payload
        self._seq = 0
        self.crc_errors = 0

    def _next(self) -> bytes | None:
        raise NotImplementedError

    def _decode(self, frame: bytes):
        seq = self._seq
        self._seq += 1
        m = decode_frame(frame, self._max)
        if m is None:
            self.crc_errors += 1
            return None
        return (seq, *m)

    def poll(self, handler, limit: int) -> int:
        done = 0
        while done < limit:
            frame = self._next()
            if frame is None:
                break
            m = self._decode(frame)
            if m is not None:
                handler(*m)
                done += 1
        return done

    def try_read(self):
        while True:
            frame = self._next()
            if frame is None:
                return None
            m = self._decode(frame)
            if m is not None:
                return m

    def commit(self) -> None:
        """Nothing to commit: these transports keep no cursor."""

    def heartbeat(self, now_ns: int) -> None:
        pass


def bind_private(sock: zmq.Socket, endpoint: str) -> None:
    """Bind ``sock``; an ``ipc://`` socket file is created mode 0600 (a stale one is replaced)."""
    if not endpoint.startswith("ipc://"):
        sock.bind(endpoint)
        return
    path = endpoint[len("ipc://"):]
    Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.path.exists(path):
        os.unlink(path)
    old = os.umask(0o177)
    try:
        sock.bind(endpoint)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)


class ZmqIn(_FrameIn):
    """Reader API over a PULL socket (binds; the socket file is made 0600)."""

    def __init__(self, ctx: zmq.Context, endpoint: str, max_payload: int):
        super().__init__(max_payload)
        self._sock = ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        bind_private(self._sock, endpoint)

    def _next(self) -> bytes | None:
        try:
            return self._sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return None

    def wait(self, timeout_ns: int) -> bool:
        return bool(self._sock.poll(max(timeout_ns // 1_000_000, 1)))

    def close(self) -> None:
        self._sock.close(0)


class ZmqOut:
    """Writer API over a PUSH socket (connects). ``drop`` rings send without blocking."""

    def __init__(self, ctx: zmq.Context, endpoint: str, drop: bool, hwm: int):
        self._sock = ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, hwm)
        self._sock.connect(endpoint)
        self._drop = drop
        self.dropped = 0

    def try_write(self, kind: int, payload, ts_origin_ns: int) -> bool:
        try:
            self._sock.send(encode_frame(kind, payload, ts_origin_ns), zmq.NOBLOCK)
        except zmq.Again:
            if self._drop:
                self.dropped += 1
            return False
        return True

    def write(self, kind: int, payload, ts_origin_ns: int, timeout_ns: int | None = None) -> bool:
        if self._drop:
            return self.try_write(kind, payload, ts_origin_ns)
        self._sock.send(encode_frame(kind, payload, ts_origin_ns))
        return True

    def heartbeat(self, now_ns: int) -> None:
        pass

    def close(self) -> None:
        self._sock.close(0)


# ------------------------------------------------------------------------------ multiprocessing.Queue
#: the longest one blocking ``put`` waits for room before the writer's idle strategy runs again
MP_PUT_WAIT_S = 0.001
#: how long ``MpQueueOut.close`` lets the feeder thread flush what is buffered before giving up
MP_FLUSH_TIMEOUT_S = 0.5
class MpQueueIn(_FrameIn):
    """Reader API over a ``multiprocessing.Queue`` of frames (header + payload bytes)."""

    def __init__(self, q, max_payload: int):
        super().__init__(max_payload)
        self._q = q
        self._pending: bytes | None = None  # a frame ``wait`` took off the queue (no lock-free peek)
        # ``wait`` selects on the queue's pipe without taking the queue's read lock (a consumer killed
        # while parked must not leave that lock held); the fallback is a blocking get. The pipe is
        # ``multiprocessing.Queue``'s private ``_reader`` Connection (CPython); ``MpQueueWaitAll``
        # waits on several of them at once.
        reader = getattr(q, "_reader", None)
        self._pipe_poll = getattr(reader, "poll", None)
        self.reader_conn = reader if callable(getattr(reader, "fileno", None)) else None

    def _next(self) -> bytes | None:
        frame = self._pending
        if frame is not None:
            self._pending = None
            return frame
        try:
            return self._q.get(False)
        except _queue.Empty:
            return None

    def wait(self, timeout_ns: int) -> bool:
        """Park until a frame may be ready or ``timeout_ns`` passes; True when one may be ready."""
        if self._pending is not None:
            return True
        timeout_s = max(timeout_ns, 0) / 1e9
        if self._pipe_poll is not None:
            return bool(self._pipe_poll(timeout_s))
        try:
            self._pending = self._q.get(True, max(timeout_s, 1e-3))
        except _queue.Empty:
            return False
        return True

    def close(self) -> None:
        pass  # the queue belongs to the supervisor; this process's handle dies with it


class MpQueueOut:
    """Writer API over a ``multiprocessing.Queue`` of frames (header + payload bytes).

    ``drop`` rings: ``put_nowait``; a full queue counts the message in ``dropped``. ``backpressure``
    rings: blocking ``put`` with a short timeout, the writer's idle strategy run between tries (so
    the runner's stall strategy keeps the heartbeat going and raises StopRequested on SIGTERM).
    """

    def __init__(self, q, drop: bool, max_payload: int, idle=None):
        self._q = q
        self._drop = drop
        self._max = max_payload
        self._idle = idle if idle is not None else BackOff()
        self.dropped = 0
        self.stall_ns = 0

    def _frame(self, kind: int, payload, ts_origin_ns: int) -> bytes:
        if len(payload) > self._max:
            raise PayloadTooLargeError(f"{len(payload)}-byte payload does not fit ring (max {self._max})")
        return encode_frame(kind, payload, ts_origin_ns)

    def try_write(self, kind: int, payload, ts_origin_ns: int) -> bool:
        """Put one frame if the queue has room; never blocks (False when full; ``drop``: counted)."""
        try:
            self._q.put(self._frame(kind, payload, ts_origin_ns), False)
        except _queue.Full:
            if self._drop:
                self.dropped += 1
            return False
        return True

    def write(self, kind: int, payload, ts_origin_ns: int, timeout_ns: int | None = None) -> bool:
        """Put one frame, applying the full policy (as ``ringbuf.Writer.write``): ``drop``: as
        ``try_write``; ``backpressure``: wait for room; False only when ``timeout_ns`` passes first."""
        frame = self._frame(kind, payload, ts_origin_ns)
        q = self._q
        try:
            q.put(frame, False)
            return True
        except _queue.Full:
            if self._drop:
                self.dropped += 1
                return False
        start = time.monotonic_ns()
        idle = self._idle
        idle.reset()
        try:
            while True:
                idle.idle(0)  # the runner's stall strategy: heartbeat, StopRequested on SIGTERM
                try:
                    q.put(frame, True, MP_PUT_WAIT_S)
                    return True
                except _queue.Full:
                    if timeout_ns is not None and time.monotonic_ns() - start >= timeout_ns:
                        return False
        finally:
            self.stall_ns += time.monotonic_ns() - start

    def heartbeat(self, now_ns: int) -> None:
        pass

    def close(self) -> None:
        """Let the feeder thread flush what is buffered, for at most ``MP_FLUSH_TIMEOUT_S``.

        (A consumer that has stopped leaves the pipe full and the flush blocked; the process must
        still be able to exit, so the rest is abandoned.)
        """
        q = self._q
        q.close()
        thread = getattr(q, "_thread", None)
        if thread is not None:
            thread.join(MP_FLUSH_TIMEOUT_S)
            if thread.is_alive():
                q.cancel_join_thread()
