"""Test agents the pipeline tests add to ``tests/agents.py``."""

from __future__ import annotations

import os

from pipeline.runtime.agent import Agent
from tests.agents import CrashAtStart


class CrashAtRestart(CrashAtStart):
    """Starts fine the first time (then idles), fails every later start: ``params.marker`` is a file
    created by the first start. Lets a crash loop begin after ``up`` has brought the system up
    (``up`` refuses to finish when a process goes FATAL during the initial start)."""

    def on_start(self, ctx):
        marker = ctx.params["marker"]
        if os.path.exists(marker):
            super().on_start(ctx)  # raises: deliberate start failure
        with open(marker, "w") as f:
            f.write(f"{os.getpid()}\n")

    def do_work(self) -> int:
        return 0


class Warmable(Agent):
    """Never has work; counts ``keep_warm`` calls in its stage stats (``warm``). ``params.fail``:
    the first keep_warm call raises."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.fail = bool(ctx.params.get("fail", False))
        ctx.stats["warm"] = 0

    def do_work(self) -> int:
        return 0

    def keep_warm(self) -> None:
        self.ctx.stats["warm"] += 1
        if self.fail:
            raise RuntimeError("warm-up broke")


class ThreadedIdle(Agent):
    """Starts one helper thread in on_start (it waits forever) and publishes its native id
    (``thread_tid``); never has work."""

    def on_start(self, ctx):
        import threading

        started = threading.Event()
        self._stop = threading.Event()

        def run():
            ctx.stats["thread_tid"] = threading.get_native_id()
            started.set()
            self._stop.wait()

        threading.Thread(target=run, daemon=True).start()
        started.wait(5)

    def do_work(self) -> int:
        return 0

    def on_close(self):
        self._stop.set()
