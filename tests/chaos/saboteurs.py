"""Broken stand-ins that the chaos checks must catch (``tests/chaos/sabotage.py``, run by
``make chaos-sabotage``): each breaks exactly what one check guards, so that the check is seen to
report FAIL.

- ``LosingSender``: the real ``procs.sender.SenderAgent`` that loses the ``NTH`` NEW order it reads
  (taken from the ring, never journaled, sent or answered): an order lost between the gateway and the
  venue.
- ``DuplicatingSender``: handles the ``NTH`` NEW order it reads twice (as if the ring had delivered it
  twice).
- ``StallFastUnderFaults``: a ``bench.chaos.harness.ChaosPipeline`` that, while the llm stage is in a fault
  phase, stops the fast stage for 20 ms every ~40 ms (SIGSTOP / SIGCONT from the harness): a fast path
  that stalls under the LLM's faults.
- ``LeakyRisk``: the real ``procs.risk.RiskAgent`` whose gateway says REDUCING (event, audit line,
  stats) but goes on approving as if ACTIVE: the latency guard's REDUCING effect broken.
- ``with_hook(extra)``: a ``ChaosPipeline`` whose config text is also rewritten by ``extra`` (after the
  scenario's own hook).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import SimpleNamespace

from bench.chaos.harness import ChaosPipeline
from pipeline.trading.messages import ORDER_DTYPE, Kind, OrderCmd
from pipeline.trading.risk.checks import TradingState
from procs.risk import RiskAgent
from procs.sender import SenderAgent

#: which NEW order (1-based, as read) the broken senders lose or double
NTH = 5


def _is_new(kind, payload) -> bool:
    return kind == Kind.ORDER and len(payload) == ORDER_DTYPE.itemsize and payload[2] == OrderCmd.NEW


class LosingSender(SenderAgent):
    """Loses the ``NTH`` NEW order it reads (see the module docstring)."""

    _news = 0

    def _on_order(self, seq, ts, kind, payload) -> None:
        if _is_new(kind, payload):
            self._news += 1
            if self._news == NTH:
                self.stats["sabotage_lost"] = 1
                return
        super()._on_order(seq, ts, kind, payload)


class DuplicatingSender(SenderAgent):
    """Handles the ``NTH`` NEW order it reads twice (see the module docstring)."""

    _news = 0

    def _on_order(self, seq, ts, kind, payload) -> None:
        super()._on_order(seq, ts, kind, payload)
        if _is_new(kind, payload):
            self._news += 1
            if self._news == NTH:
                self.stats["sabotage_doubled"] = 1
                super()._on_order(seq, ts, kind, payload)


class LeakyRisk(RiskAgent):
    """Says REDUCING but approves as if ACTIVE (see the module docstring)."""

    def on_start(self, ctx) -> None:
        super().on_start(ctx)
        gw, orig = self.gw, self.gw.on_control

        def leaky(payload):
            out = orig(payload)
            if gw.state == TradingState.REDUCING:
                gw.state = TradingState.ACTIVE  # the transition is on record; its effect is not
                self.stats["sabotage_leaky"] = 1
            return out

        gw.on_control = leaky


def with_hook(extra):
    """A ``ChaosPipeline`` class whose config text is rewritten by the scenario's hook, then ``extra``."""

    class Hooked(ChaosPipeline):
        def __init__(self, *a, text_hook=None, **kw):
            def hook(text: str) -> str:
                return extra(text_hook(text) if text_hook is not None else text)

            super().__init__(*a, text_hook=hook, **kw)

    return Hooked


def sender_module(module: str):
    """Config rewrite: the sender stage's module replaced by ``module``."""
    def extra(text: str) -> str:
        old = 'module = "procs.sender:SenderAgent"'
        if text.count(old) != 1:
            raise ValueError("no sender stage in the config text")
        return text.replace(old, f'module = "{module}"')
    return extra


def risk_module(module: str):
    """Config rewrite: the risk stage's module replaced by ``module``."""
    def extra(text: str) -> str:
        old = 'module = "procs.risk:RiskAgent"'
        if text.count(old) != 1:
            raise ValueError("no risk stage in the config text")
        return text.replace(old, f'module = "{module}"')
    return extra


class StallFastUnderFaults(ChaosPipeline):
    """Stops the fast stage for 20 ms every ~40 ms while the llm stage is in a fault phase."""

    FAULTS = ("garbage", "timeout", "slow")

    def __enter__(self):
        super().__enter__()
        self._stop = threading.Event()
        self.stalls = 0
        self._thread = threading.Thread(target=self._sabotage, name="stall-fast", daemon=True)
        self._thread.start()
        return self

    def _sabotage(self) -> None:
        while not self._stop.is_set():
            try:
                fault, pid = self.stage("llm").get("fault"), self.proc("fast")["pid"]
            except Exception:
                time.sleep(0.01)
                continue
            if fault not in self.FAULTS:
                time.sleep(0.005)
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.02)
                os.kill(pid, signal.SIGCONT)
                self.stalls += 1
            time.sleep(0.02)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        return super().__exit__(*exc)


class NoRecoverySender(SenderAgent):
    """The real sender whose start-up reconciliation adopts nothing from the venue (the sabotage of the
    lost window's recovery)."""

    def _wire(self, *args, **kwargs) -> None:
        super()._wire(*args, **kwargs)

        def nothing():
            return True
            yield  # a request generator that makes no request

        self.reconciler.recovery = SimpleNamespace(adopt_gen=nothing)
