"""The slow path in the evaluation (variant ``model+llm``): the LLM hub in-process
(``pipeline.trading.llm.hub.LlmHub``, fixed seed), asked as the llm stage asks it (``procs.llm``), its
INSTRUCTION reaching the risk gateway after its MEASURED generation time, in simulated time.

As ``procs.llm.LlmAgent`` does: every non-HOLD signal becomes the pending one (the newest replaces an
older one: ``conflated``); a generation starts when none is running, ``min_gap_ms`` after the previous
start, whatever the circuit breaker's state (``pipeline.trading.llm.breaker``, on the simulated clock):
while it is OPEN the generation is a probe, its answer validated and scored, then dropped (``probes``,
``probes_valid``). The prompt's position is the gateway's position of the
instrument when the generation starts (what the risk stage's POSITION messages tell the stage). The
hub runs the generation at once, on this thread, with its deadline on the wall clock; its measured
wall time ``gen_ns`` is then spent in simulated time: the generation ends at start + ``gen_ns``, the
INSTRUCTION (``schema.instruction_bytes``, ``issued_ns`` = that end, ids 1, 2, ...) reaches the gateway
then, and the next generation may start. An answer that does not validate is counted by reason
(``rej_<reason>``) and the breaker told, as the stage does.

Because the generation times are measured, a ``model+llm`` variant's results can differ slightly from
one run to the next (the fast-path-only variants' never do); its decisions' content is fixed by the
seed and the greedy sampling of the stage's params.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from pipeline.trading.evaluation.decisions import Decisions, FeatureTable
from pipeline.trading.evaluation.replay import EvaluationError, TapeInstrument
from pipeline.trading.evaluation.simulator import INSTRUCTION_DUE, WAKE_DUE
from pipeline.trading.messages import FEATURES_FLAG_WARMUP, SIGNAL_CTX_DTYPE, SIGNAL_FLAG_WARMUP



class SlowPath:
    """The llm stage's decisions for one variant's run (see the module docstring)."""

    def __init__(self, hub, params, instruments: Sequence[TapeInstrument], table: FeatureTable, decisions: Decisions):
        from pipeline.trading.llm.breaker import CircuitBreaker

        self.hub, self.p = hub, params
        self.lots = {i.id: i.lot_size for i in instruments}
        self.table, self.d = table, decisions
        self.run = None
        self.breaker = CircuitBreaker(params.breaker, lambda: self.run.now)
        self.min_gap_ns = params.min_gap_ms * 1_000_000
        self.pending: int | None = None  # the newest row not yet asked about
        self.busy_until = 0
        self.next_start = 0
        self.wake_at: int | None = None
        self.next_id = 1
        self.gen_ns_total = 0
        self.stats = {"signals": 0, "conflated": 0, "generations": 0, "instructions": 0, "probes": 0,
                      "probes_valid": 0}

    @classmethod
    def load(cls, model_path: str, llm_params: dict, instruments: Sequence[TapeInstrument], table: FeatureTable,
             decisions: Decisions, *, seed: int) -> SlowPath:
        """The hub of the llm process's params with ``model_path`` and ``seed``.

        Raises:
            EvaluationError: params the stage refuses, or a model the hub cannot load (named).
        """
        from pipeline.runtime.errors import ConfigError, StartupError
        from pipeline.trading.llm.hub import LlmHub, parse_params

        try:
            p = parse_params({**llm_params, "model_path": model_path, "seed": int(seed) & 0xFFFF_FFFF})
            hub = LlmHub(p, {i.id: i for i in instruments})
        except (ConfigError, StartupError) as exc:
            raise EvaluationError(f"slow path: {exc}") from None
        return cls(hub, p, instruments, table, decisions)

    def attach(self, run) -> None:
        """The ``VariantRun`` this slow path schedules into (its ``now``, ``schedule``, gateway)."""
        self.run = run

    # ------------------------------------------------------------------------------- timeline
    def offer(self, row: int, now: int) -> None:
        """A non-HOLD signal (feature row ``row``) at ``now``."""
        self.stats["signals"] += 1
        if self.pending is not None:
            self.stats["conflated"] += 1
        self.pending = row
        self._try_start(now)

    def wake(self, now: int) -> None:
        """A scheduled look: a generation ended, or the minimum gap passed."""
        if self.wake_at is not None and now >= self.wake_at:
            self.wake_at = None
        self._try_start(now)

    def _wake_later(self, t: int) -> None:
        if self.wake_at is None or t < self.wake_at:
            self.wake_at = t
            self.run.schedule(t, WAKE_DUE, None)

    def _try_start(self, now: int) -> None:
        if self.pending is None:
            return
        ready = max(self.busy_until, self.next_start)
        if now < ready:
            self._wake_later(ready)
            return
        row, self.pending = self.pending, None
        self.next_start = now + self.min_gap_ns
        self.stats["generations"] += 1
        sig = self._signal_ctx(row)
        iid = int(sig["instrument_id"])
        pos = self.run.gw.books[iid].position
        lots = int(round(pos / self.lots[iid]))
        out = self.hub.decide(sig, lots, deadline_ns=time.monotonic_ns() + self.p.deadline_ms * 1_000_000)
        self.gen_ns_total += out.gen_ns
        end = now + max(int(out.gen_ns), 1)
        self.busy_until = end
        live = self.breaker.live()  # the stage judges at the answer's return; here the answer is instant
        if not live:
            self.stats["probes"] += 1
        if out.ok and not live:
            self.stats["probes_valid"] += 1
        elif out.ok:
            from pipeline.trading.llm.schema import instruction_bytes

            payload = instruction_bytes(out.decision, signal_seq=int(sig["feature_seq"]), issued_ns=end,
                                        instruction_id=self.next_id)
            self.next_id += 1
            self.stats["instructions"] += 1
            self.run.schedule(end, INSTRUCTION_DUE, payload)
        else:
            key = "rej_" + out.reason
            self.stats[key] = self.stats.get(key, 0) + 1
        self.run.schedule(end, WAKE_DUE, None)
        from pipeline.trading.llm.hub import CONTENT_REASONS

        self.breaker.record(success=out.ok, on_time=out.on_time, anomaly=out.reason in CONTENT_REASONS)

    def _signal_ctx(self, row: int):
        """The SIGNAL_CTX record the fast stage would have sent for feature row ``row``."""
        f = self.table.rows[row]
        rec = np.zeros(1, SIGNAL_CTX_DTYPE)[0]
        rec["instrument_id"] = f["instrument_id"]
        rec["label"] = self.d.labels[row]
        rec["flags"] = SIGNAL_FLAG_WARMUP if f["flags"] & FEATURES_FLAG_WARMUP else 0
        rec["feature_seq"], rec["exch_ts_ns"] = f["book_seq"], f["exch_ts_ns"]
        rec["ref_mid"], rec["ref_spread"] = f["ref_mid"], f["ref_spread"]
        rec["probs"] = self.d.probs[row]
        rec["features"] = f["features"]
        return rec

    # ------------------------------------------------------------------------------- results
    def counts(self) -> dict:
        """The slow path's counters (deterministic apart from what the measured times decide)."""
        return dict(sorted(self.stats.items()))

    def timings(self) -> dict:
        """Wall time spent generating (not deterministic)."""
        return {"generations": self.stats["generations"], "gen_s": self.gen_ns_total / 1e9}
