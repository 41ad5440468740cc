"""A stage for the liveness tests (pipeline/runtime/supervisor/liveness.py): ``Busy`` makes
``params.calls`` long calls in ``do_work``, one after another, each holding the main thread for
``params.ms``: ``mode = "spin"`` computes (CPU-bound, in Python: the GIL held), ``mode = "sleep"``
sleeps (blocked, no CPU time: what a hang looks like). ``stats.busy_calls``: calls finished."""

from __future__ import annotations

import time

from pipeline.runtime.agent import Agent


class Busy(Agent):
    def on_start(self, ctx):
        self.ctx = ctx
        self.ms = int(ctx.params.get("ms", 1000))
        self.calls = int(ctx.params.get("calls", 1))
        self.mode = str(ctx.params.get("mode", "spin"))
        self.done = 0
        ctx.stats["busy_calls"] = 0

    def do_work(self) -> int:
        if self.done >= self.calls:
            return 0
        end = time.monotonic() + self.ms / 1000
        if self.mode == "sleep":
            time.sleep(self.ms / 1000)
        else:
            x = 0
            while time.monotonic() < end:
                x = (x * 31 + 7) % 1_000_003
        self.done += 1
        self.ctx.stats["busy_calls"] = self.done
        return 1
