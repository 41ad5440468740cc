"""A bench sink stage: ``bench.sink:LatencySink`` reads SIGNALs and records, for each, how long ago its
frame was received (``time.monotonic_ns() - ts_origin_ns``, the feed's receive stamp) into a file.

Params: ``input`` (default: the only input), ``out`` (file path; int64 little-endian nanoseconds, one
per SIGNAL, appended every ``flush_every`` SIGNALs and on close), ``flush_every`` (256). The stamp is
taken when the sink reads the SIGNAL, so each figure is frame-received-to-SIGNAL-written plus the
sink's own ring read (an upper bound). Warm-up SIGNALs (``SIGNAL_FLAG_WARMUP``) are skipped.
"""

from __future__ import annotations

import time

import numpy as np

from pipeline.runtime.agent import Agent
from pipeline.trading.messages import SIGNAL_DTYPE, SIGNAL_FLAG_WARMUP, Kind

_FLAGS_OFF = SIGNAL_DTYPE.fields["flags"][1]


class LatencySink(Agent):
    def on_start(self, ctx) -> None:
        self.ctx = ctx
        name = ctx.params.get("input") or next(iter(ctx.inputs))
        self.inp = ctx.inputs[name]
        self.path = str(ctx.params["out"])
        self.flush_every = int(ctx.params.get("flush_every", 256))
        self.buf = np.zeros(self.flush_every, np.int64)
        self.n = 0
        self.clock = time.monotonic_ns
        open(self.path, "wb").close()
        ctx.stats.update(signals=0, warmup=0)

    def _on(self, seq, ts_origin_ns, kind, payload) -> None:
        now = self.clock()
        if kind != Kind.SIGNAL:
            return
        if payload[_FLAGS_OFF] & SIGNAL_FLAG_WARMUP:
            self.ctx.stats["warmup"] += 1
            return
        self.buf[self.n] = now - ts_origin_ns
        self.n += 1
        self.ctx.stats["signals"] += 1
        if self.n == self.flush_every:
            self._flush()

    def _flush(self) -> None:
        if self.n:
            with open(self.path, "ab") as f:
                f.write(self.buf[: self.n].astype("<i8").tobytes())
            self.n = 0

    def do_work(self) -> int:
        got = self.inp.poll(self._on, self.ctx.batch)
        if got:
            self.ctx.received(got)
        return got

    def on_close(self) -> None:
        self._flush()
