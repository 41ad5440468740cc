"""Ports: the ends of the arrows between processes, over the ring or, for comparison, pyzmq.

``open_ports(cfg, proc)`` gives a process its input readers and output writers. With
``supervisor.transport = "ring"`` (the product) they are ``ringbuf`` readers and writers. With
``"zmq"`` they are ``ZmqIn`` / ``ZmqOut`` with the same calls (``poll``, ``try_read``, ``commit``,
``wait``, ``write``, ``try_write``, ``heartbeat``) over PUSH/PULL on ``ipc://`` sockets in the run
directory, carrying the same 16-byte header (CRC included) and payload, so the bench compares like
with like. zmq ports keep nothing across a restart (no cursors): they exist for measurement only.
"""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import zmq

from pipeline.config import Config, ProcessConfig
from ringbuf import Ring, layout as L


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


def open_ports(cfg: Config, proc: ProcessConfig, writer_idle=None) -> Ports:
    """Attach the rings (or zmq sockets) named by ``proc.inputs`` / ``proc.outputs``.

    ``writer_idle`` is the idle strategy writers use while a ``backpressure`` ring is full.

    Raises:
        ringbuf.RingError: a ring is missing or its geometry differs from the config.
    """
    if cfg.supervisor.transport == "zmq":
        return _open_zmq(cfg, proc)
    inputs, outputs, closers = {}, {}, []
    for names, table, make in ((proc.inputs, inputs, "reader"), (proc.outputs, outputs, "writer")):
        for rn in names:
            rc = cfg.ring(rn)
            ring = Ring.attach(cfg.segment_name(rn), slot_size=L.slot_size_for(rc.max_payload_bytes),
                               capacity=rc.capacity, full_policy=rc.full_policy)
            table[rn] = ring.reader() if make == "reader" else ring.writer(writer_idle)
            closers.append(ring.close)
    return Ports(inputs, outputs, closers)


def zmq_endpoint(cfg: Config, ring: str) -> str:
    return f"ipc://{Path(cfg.supervisor.run_dir).resolve()}/zmq-{cfg.supervisor.shm_prefix}-{ring}.sock"


class ZmqIn:
    """Reader API over a PULL socket (binds; the socket file is made 0600)."""

    def __init__(self, ctx: zmq.Context, endpoint: str, max_payload: int):
        self._sock = ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        path = endpoint[len("ipc://"):]
        if os.path.exists(path):
            os.unlink(path)
        old = os.umask(0o177)
        try:
            self._sock.bind(endpoint)
        finally:
            os.umask(old)
        self._max = max_payload
        self._seq = 0
        self.crc_errors = 0

    def _decode(self, frame: bytes):
        ts, kind, n, crc = L.HEADER.unpack_from(frame, 0)
        view = memoryview(frame)[L.HEADER_BYTES:]
        pre = L.CRC_PREFIX.pack(self._seq, ts, kind, n)
        if n != len(view) or crc32c.crc32c(view, crc32c.crc32c(pre)) != crc:
            self.crc_errors += 1
            self._seq += 1
            return None
        seq = self._seq
        self._seq += 1
        return seq, ts, kind, view

    def poll(self, handler, limit: int) -> int:
        done = 0
        recv = self._sock.recv
        while done < limit:
            try:
                frame = recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            m = self._decode(frame)
            if m is not None:
                handler(*m)
                done += 1
        return done

    def try_read(self):
        while True:
            try:
                frame = self._sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return None
            m = self._decode(frame)
            if m is not None:
                return m

    def wait(self, timeout_ns: int) -> bool:
        return bool(self._sock.poll(max(timeout_ns // 1_000_000, 1)))

    def commit(self) -> None:
        pass

    def heartbeat(self, now_ns: int) -> None:
        pass

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
        self._seq = 0
        self.dropped = 0

    def _frame(self, kind: int, payload, ts: int) -> bytes:
        n = len(payload)
        crc = crc32c.crc32c(payload, crc32c.crc32c(L.CRC_PREFIX.pack(self._seq, ts, kind, n)))
        return L.HEADER.pack(ts, kind, n, crc) + bytes(payload)

    def try_write(self, kind: int, payload, ts_origin_ns: int) -> bool:
        try:
            self._sock.send(self._frame(kind, payload, ts_origin_ns), zmq.NOBLOCK)
        except zmq.Again:
            if self._drop:
                self.dropped += 1
            return False
        self._seq += 1
        return True

    def write(self, kind: int, payload, ts_origin_ns: int, timeout_ns: int | None = None) -> bool:
        if self._drop:
            return self.try_write(kind, payload, ts_origin_ns)
        self._sock.send(self._frame(kind, payload, ts_origin_ns))
        self._seq += 1
        return True

    def heartbeat(self, now_ns: int) -> None:
        pass

    def close(self) -> None:
        self._sock.close(0)


def _open_zmq(cfg: Config, proc: ProcessConfig) -> Ports:
    ctx = zmq.Context.instance()
    inputs, outputs, closers = {}, {}, []
    for rn in proc.inputs:
        rc = cfg.ring(rn)
        p = ZmqIn(ctx, zmq_endpoint(cfg, rn), rc.max_payload_bytes)
        inputs[rn] = p
        closers.append(p.close)
    for rn in proc.outputs:
        rc = cfg.ring(rn)
        p = ZmqOut(ctx, zmq_endpoint(cfg, rn), rc.full_policy == "drop", rc.capacity)
        outputs[rn] = p
        closers.append(p.close)
    return Ports(inputs, outputs, closers)
