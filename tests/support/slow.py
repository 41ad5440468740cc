"""A stage slowed on purpose, for the latency guard's tests: ``SlowRelay`` copies its one input to its
one output and holds each batch ``delay_ms`` before writing it, so every output is at least that late.
The delay is read from ``params.delay_file`` (the milliseconds as text; missing or empty: 0), looked at
every 50 ms, and shown in its stage stats (``delay_ms``) once it applies. ``set_delay`` writes it."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.runtime.agent import Agent

LOOK_NS = 50_000_000


def set_delay(path: Path, delay_ms: int) -> None:
    """Ask a ``SlowRelay`` reading ``path`` for ``delay_ms`` (written whole, then renamed into place)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(delay_ms))
    tmp.replace(path)


class SlowRelay(Agent):
    """Relays its input to its output, each batch held ``delay_ms`` (see the module docstring)."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.out = next(iter(ctx.outputs.values()))
        self.path = Path(ctx.params["delay_file"])
        self.delay_ms = 0
        self.next_look = 0
        self.batch: list[tuple[int, bytes, int]] = []
        ctx.stats["delay_ms"] = 0

    def _look(self) -> None:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            text = ""
        self.delay_ms = int(text or 0)
        self.ctx.stats["delay_ms"] = self.delay_ms

    def _on(self, seq, ts, kind, payload) -> None:
        self.batch.append((kind, bytes(payload), ts))

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now >= self.next_look:
            self._look()
            self.next_look = now + LOOK_NS
        n = self.inp.poll(self._on, self.ctx.batch)
        if n and self.delay_ms:
            time.sleep(self.delay_ms / 1000)
        for kind, payload, ts in self.batch:
            self.ctx.emit(self.out, kind, payload, ts)
        self.batch.clear()
        self.ctx.received(n)
        return n
