"""Small agents for the runtime's tests (the product has no placeholder stages).

Payload of every test message: u64 LE application sequence number, zero padded to ``size``.
"""

from __future__ import annotations

import os
import struct

from pipeline.runtime.agent import Agent
from pipeline.trading.messages import unpack_control

SEQ = struct.Struct("<Q")
KIND_SEQ = 100


class SeqSource(Agent):
    """Writes sequence-numbered messages at ``rate_per_s`` until ``total`` (resumes after a restart
    at the ring's write position, so application seq == ring seq)."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.out = next(iter(ctx.outputs.values()))
        self.rate = float(ctx.params.get("rate_per_s", 1000))
        self.total = int(ctx.params.get("total", 1 << 62))
        self.size = int(ctx.params.get("size", 64))
        self.t0 = ctx.clock()
        # rings resume at their write position; other transports keep no position and start at 0
        self.base = getattr(self.out, "position", 0)
        self.sent = 0
        self.buf = bytearray(self.size)

    def do_work(self) -> int:
        due = min(self.base + int((self.ctx.clock() - self.t0) * self.rate / 1e9), self.total)
        n = 0
        while self.base + self.sent < due and n < self.ctx.batch:
            SEQ.pack_into(self.buf, 0, self.base + self.sent)
            if not self.ctx.emit(self.out, KIND_SEQ, self.buf, self.ctx.clock()):
                break
            self.sent += 1
            n += 1
        return n


class Relay(Agent):
    """Copies every message from its one input to its one output (commit after the write)."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.out = next(iter(ctx.outputs.values()))

    def _on(self, seq, ts, kind, payload):
        self.ctx.emit(self.out, kind, payload, ts)

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        self.ctx.received(n)
        return n


class SeqSink(Agent):
    """Appends each new application seq to ``params.out`` (one decimal a line), deduplicating
    redeliveries by sequence: it resumes after the last seq in its file."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.path = ctx.params["out"]
        self.next = 0
        self.dups = 0
        self.gaps = 0
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                lines = f.read().splitlines()
            if lines:
                self.next = int(lines[-1]) + 1
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _on(self, seq, ts, kind, payload):
        app = SEQ.unpack_from(payload, 0)[0]
        if app < self.next:
            self.dups += 1
            return
        if app > self.next:
            self.gaps += 1
            self.ctx.log.error("gap", expected=self.next, got=app)
        os.write(self.fd, b"%d\n" % app)
        self.next = app + 1

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        self.ctx.received(n)
        return n

    def on_close(self):
        self.ctx.log.info("sink_closed", duplicates_skipped=self.dups, gaps=self.gaps)
        os.close(self.fd)


class ControlSink(Agent):
    """Records every CONTROL command it reads to ``params.out`` as ``CMD REASON`` lines."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.path = ctx.params["out"]

    def _on(self, seq, ts, kind, payload):
        c = unpack_control(payload)
        line = f"{c[0].name} {c[1].name}\n" if c else "MALFORMED\n"
        with open(self.path, "a") as f:
            f.write(line)

    def do_work(self) -> int:
        return self.inp.poll(self._on, self.ctx.batch)


class CrashAtStart(Agent):
    """Fails every start."""

    def on_start(self, ctx):
        raise RuntimeError("deliberate start failure")

    def do_work(self) -> int:  # pragma: no cover - never reached
        return 0


class Idle(Agent):
    """Does nothing; only beats (for heartbeat and signal tests)."""

    def do_work(self) -> int:
        return 0
