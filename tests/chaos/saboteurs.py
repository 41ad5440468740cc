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
- ``DoubleSendingSender``: sends the ``NTH`` NEW order it reads to the venue twice (the second place
  request bypasses its journal's duplicate check): the same clientOid at the venue twice.
- ``LeakyRisk``: the real ``procs.risk.RiskAgent`` whose gateway says REDUCING or HALTED (event, audit
  line, stats) but goes on approving as if ACTIVE: the latency guard's REDUCING and HALTED effects broken.
- ``SkewedRisk``: the real ``procs.risk.RiskAgent`` whose gateway takes every state report one lot off
  (each instrument's position one lot above the sender's): the gateway's position apart from the venue's.
- ``GarbageGateLlm``: ``bench.chaos.llm_faults.FaultyLlmAgent`` whose validation gate lets garbage through
  under the garbage fault (every answer that did not validate becomes a BUY or SELL of a few lots, a
  success for the breaker): INSTRUCTIONs out of a faulty model, and a breaker that does not open.
- ``NoRangeGuardFast``: the real ``procs.fast.FastAgent`` with its input-range guard off (bounds
  widened to the whole float range): rows outside the model card's bounds classified as any other.
- ``GapBlindFeed``: the real ``procs.feed.BitgetFeedAgent`` whose books skip the sequence check: a
  sequence gap goes undetected (``feed_module`` puts it in the config).
- ``with_hook(extra)``: a ``ChaosPipeline`` whose config text is also rewritten by ``extra`` (after the
  scenario's own hook); ``module_swap``, ``ring_policy``, ``sender_module``, ``risk_module``: such
  rewrites (a stage's module replaced, a ring's full policy changed).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from types import SimpleNamespace

import msgspec
import numpy as np

from bench.chaos.harness import ChaosPipeline
from bench.chaos.llm_faults import FaultyLlmAgent
from pipeline.trading.bitget.book import IncrementalBook
from pipeline.trading.llm.schema import Decision
from pipeline.trading.messages import ORDER_DTYPE, Kind, OrderCmd, decode_order
from pipeline.trading.model.decide import InputBounds
from pipeline.trading.risk.checks import TradingState
from pipeline.trading.risk.events import Synced
from pipeline.trading.sender.outbox import OutboxItem
from procs.fast import FastAgent
from procs.feed import BitgetFeedAgent
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


class DoubleSendingSender(SenderAgent):
    """Sends the ``NTH`` NEW order it reads to the venue twice (see the module docstring)."""

    _news = 0

    def _on_order(self, seq, ts, kind, payload) -> None:
        super()._on_order(seq, ts, kind, payload)
        if _is_new(kind, payload):
            self._news += 1
            if self._news == NTH and decode_order(payload).order_id in self.ledger.orders:
                self.stats["sabotage_doubled"] = 1
                self._queue(OutboxItem(OrderCmd.NEW, decode_order(payload), ts))  # a second place request


class LeakyRisk(RiskAgent):
    """Says REDUCING or HALTED but approves as if ACTIVE (see the module docstring)."""

    def on_start(self, ctx) -> None:
        super().on_start(ctx)
        gw, orig = self.gw, self.gw.on_control

        def leaky(payload):
            out = orig(payload)
            if gw.state in (TradingState.REDUCING, TradingState.HALTED):
                gw.state = TradingState.ACTIVE  # the transition is on record; its effect is not
                self.stats["sabotage_leaky"] = self.stats.get("sabotage_leaky", 0) + 1
            return out

        gw.on_control = leaky


class SkewedRisk(RiskAgent):
    """Takes every state report one lot off (see the module docstring)."""

    def on_start(self, ctx) -> None:
        super().on_start(ctx)  # (its first state report comes later, through the exec ring)
        gw, orig = self.gw, self.gw.on_exec

        def skewed(payload):
            out = orig(payload)
            if any(isinstance(ev, Synced) for ev in out):
                for bk in gw.books.values():
                    bk.position += bk.spec.lot  # before the stage publishes pos_lots_<id> from it
                self.stats["sabotage_skewed"] = self.stats.get("sabotage_skewed", 0) + 1
            return out

        gw.on_exec = skewed


class GarbageGateLlm(FaultyLlmAgent):
    """Lets garbage through as valid instructions under the garbage fault (see the module docstring)."""

    def _finish(self, job, out) -> None:
        if self.mode == "garbage" and not out.ok and not self.hung:
            n = self.stats["sabotage_leaked"] = self.stats.get("sabotage_leaked", 0) + 1
            act, lots = ("BUY", 2) if n % 2 else ("SELL", -2)
            decision = Decision(inst=int(job.sig["instrument_id"]), act=act, lots=lots, off=0, conf=90,
                                ttl=self.hub.p.ttl_ms)
            out = msgspec.structs.replace(out, decision=decision, reason="", finish="stop")
        super()._finish(job, out)


class NoRangeGuardFast(FastAgent):
    """The fast stage with its input-range guard off (see the module docstring)."""

    def on_start(self, ctx) -> None:
        super().on_start(ctx)
        n = len(self._lo)
        self.bounds = InputBounds(np.full(n, -np.inf, np.float32), np.full(n, np.inf, np.float32))
        self._lo, self._hi = self.bounds.lo, self.bounds.hi
        self.stats["sabotage_unguarded"] = 1


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


def module_swap(old: str, module: str):
    """Config rewrite: the stage whose module is ``old`` (once in the text) runs ``module`` instead."""
    def extra(text: str) -> str:
        line = f'module = "{old}"'
        if text.count(line) != 1:
            raise ValueError(f"no stage running {old} in the config text")
        return text.replace(line, f'module = "{module}"')
    return extra


def ring_policy(ring: str, policy: str):
    """Config rewrite: ring ``ring``'s ``full_policy`` set to ``policy``."""
    def extra(text: str) -> str:
        pat = re.compile(r'(\[\[rings\]\]\nname = "' + re.escape(ring) + r'"\n(?:[^\[\n][^\n]*\n)*?full_policy = )"\w+"')
        new, n = pat.subn(lambda m: f'{m.group(1)}"{policy}"', text)
        if n != 1:
            raise ValueError(f"ring {ring!r} not found once in the config text")
        return new
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


_REAL_INCREMENTAL_APPLY = IncrementalBook.apply


def _apply_without_seq_check(book: IncrementalBook, lv, snapshot: bool):
    """``IncrementalBook.apply`` that takes every update's seq as the next one (no sequence check)."""
    if not snapshot:
        book.last_seq = -1  # the seq check runs only when a last seq is known
    return _REAL_INCREMENTAL_APPLY(book, lv, snapshot)


class GapBlindFeed(BitgetFeedAgent):
    """The real Bitget feed whose ``books`` books do not check the sequence: an update whose seq steps
    back (the venue's gap fault) is merged and emitted, not counted in ``seq_gaps``, not resynced (the
    sabotage of venue_outage's gap check). Patches ``IncrementalBook`` in its own process only."""

    def on_start(self, ctx) -> None:
        IncrementalBook.apply = _apply_without_seq_check
        super().on_start(ctx)


def feed_module(module: str):
    """Config rewrite: the feed stage's module replaced by ``module``."""
    def extra(text: str) -> str:
        old = 'module = "procs.feed:BitgetFeedAgent"'
        if text.count(old) != 1:
            raise ValueError("no Bitget feed stage in the config text")
        return text.replace(old, f'module = "{module}"')
    return extra
