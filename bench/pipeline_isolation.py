"""The isolation measurement: does a real model generating continuously on the shared CPU slow the fast path?

``python -m bench.pipeline --isolation [--rounds 20] [--window-s 3] [--out DIR]``

One run of the pipeline bench's config (``bench.pipeline_config``: the whole graph under the supervisor
against the paper venue, 1,000 book updates/s, one instrument, the shipped fast model, the default
placement: every process on the machine's cores as ``make up`` plans them, the llm process at nice 10
with its generation thread SCHED_IDLE) whose llm stage is ``PhasedLlmAgent``: the real
``procs.llm.LlmAgent`` with the default model (SmolLM2-135M-Instruct, the default config's params, one
thread) and a phase read from a file:

- ``busy``: the model generates back to back. The stage asks the newest waiting signal as soon as the
  previous answer is in (``min_gap_ms = 0``), and when no new signal has come it asks the last one
  again, or before the first one a plausible stand-in (``prompt.example_signal``): a bench-only rule of
  this agent, since the shipped model labels few updates non-HOLD (none may come for seconds) and the
  claim is about a model that never rests. Answers go to risk as in production;
- ``stopped``: the stage drains its rings and generates nothing (a switch aborts the generation in
  flight and waits for it to end).

The two conditions are the same config, processes and rings: only whether the model runs differs.
They alternate in short windows (``rounds`` x stopped, busy; ``window_s`` each), so that the machine's
drift over the run lands on both alike.

STATISTIC AND VERDICT RULE, fixed on 2026-12-01 before any run of this measurement was looked at:

* the fast path's SIGNAL latency (latency tap: frame received -> SIGNAL written to sig_risk);
* per condition, the p99 of each of its windows and their trimmed geometric mean (without the lowest
  and highest tenth: ``bench.chaos.p99_rule.window_p99s``, the statistic of ``make chaos``'s
  llm_faults); the ratio busy / stopped; an A/A control, the stopped windows split alternately in
  two halves;
* limit ``LIMIT`` = 1.5 on the p99 ratio; the machine resolves it when the A/A deviation s =
  max(A/A, 1 / A/A) <= ``BAND`` = 1.25 (half the margin); ``bench.chaos.p99_rule.p99_verdict``'s
  three-valued rule with these two numbers and at least 10 windows per condition: HOLDS (its PASS),
  DOES NOT HOLD (FAIL), INCONCLUSIVE (never counted as holding; fewer windows always gives it).
* Reported beside it, not judged: the p50s the same way, the pooled p50 / p99 of each condition,
  the llm process's CPU share and its generations per condition.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import report
from bench.chaos.harness import ChaosPipeline, latency_taps, read_tap
from bench.chaos.p99_rule import p99_verdict, trimmed_gmean, window_p99s
from bench.chaos.rewrite import replace_process
from bench.pipeline_config import MODELS, llm_process
from pipeline.trading.llm.hub import LlmParams
from pipeline.trading.llm.modelfile import DEFAULT_MODEL
from pipeline.trading.llm.prompt import example_signal
from pipeline.trading.messages import Kind
from procs.llm import LlmAgent

LIMIT = 1.5
BAND = 1.25
MIN_WINDOWS = 10
#: the verdict words for p99_verdict's PASS / FAIL / INCONCLUSIVE
WORDS = {"PASS": "HOLDS", "FAIL": "DOES NOT HOLD", "INCONCLUSIVE": "INCONCLUSIVE"}

#: the llm stage's params in this measurement: the default config's model and sampling, no gap between
#: generations, a deadline no answer reaches (a late answer is load all the same), its ttl as the bench's;
#: its threads are the default config's (``default_llm_threads``)
REAL_LLM = {"model_path": DEFAULT_MODEL, "n_ctx": 1024, "temperature": 0.05, "max_tokens": 64,
            "deadline_ms": 10_000, "min_gap_ms": 0, "ttl_ms": 250}


def default_llm_threads() -> int:
    """``n_threads`` of the llm process in configs/default.toml (what ``make up`` runs; 1 when unset)."""
    from pipeline.runtime.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "default.toml")
    return int(cfg.process("llm").params.get("n_threads", 1))


#: the llm stage's start: the model loads at nice 10 while the fast path already runs on the same cores
READY_TIMEOUT_MS = 120_000
#: how long a phase switch may take (a generation in flight is aborted at its next token; the
#: generation thread runs SCHED_IDLE, so on a saturated machine that token can take a while)
SWITCH_TIMEOUT_S = 120


class PhasedLlmParams(LlmParams, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``PhasedLlmAgent``'s params: the llm stage's and ``phase_file`` (``busy`` or ``stopped``, read
    every 50 ms)."""

    phase_file: str


class PhasedLlmAgent(LlmAgent):
    """``procs.llm.LlmAgent`` switched between ``busy`` and ``stopped`` by a file (the module
    docstring). Its ``phase`` counter says which one runs. Bench use only."""

    params_type = PhasedLlmParams

    def on_start(self, ctx) -> None:
        ctx.params = dict(ctx.params)
        self.phase_file = Path(ctx.params.pop("phase_file"))
        super().on_start(ctx)
        self.phase = "stopped"
        self.last: tuple[bytes, int] | None = None
        self.example = (example_signal(0, instrument_id=ctx.config.instruments[0].id).tobytes(), ctx.clock())
        self._wanted: str | None = None
        self._next_check = 0
        self.stats["phase"] = self.phase

    def _on(self, seq, ts_origin_ns, kind, payload) -> None:
        super()._on(seq, ts_origin_ns, kind, payload)
        if self.pending is not None:
            self.last = self.pending

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now >= self._next_check:
            self._next_check = now + 50_000_000
            with contextlib.suppress(OSError):
                wanted = self.phase_file.read_text().strip()
                self._wanted = wanted if wanted in ("busy", "stopped") and wanted != self.phase else None
        if self._wanted is not None:
            if self.worker.busy:  # the generation in flight is aborted and ends first; none starts meanwhile
                self.worker.abort.set()
                self.next_start_ns = now + 3_600_000_000_000
                return super().do_work()
            self.phase = self.stats["phase"] = self._wanted
            self._wanted = None
            self.next_start_ns = now
        if self.phase == "stopped":
            got = self.inp.poll(self._on, self.ctx.batch)
            if self.pos_in is not None:
                got += self.pos_in.poll(self._on_position, self.ctx.batch)
            self.pending = None
            if got:
                self.ctx.received(got)
            return got
        if self.pending is None and not self.worker.busy:
            self.pending = self.last or self.example  # nothing new: ask the last signal again
        return super().do_work()


@dataclass
class IsolationRun:
    """What one run recorded: each condition's windows (monotonic ns spans), the llm process's CPU
    ticks and generations in them, and the llm stage's counters at the end."""

    spans: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: {"stopped": [], "busy": []})
    cpu_ticks: dict[str, int] = field(default_factory=lambda: {"stopped": 0, "busy": 0})
    generations: dict[str, int] = field(default_factory=lambda: {"stopped": 0, "busy": 0})
    llm_stage: dict = field(default_factory=dict)


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def _window(p, phase_file: Path, phase: str, seconds: float, run: IsolationRun, pid: int) -> None:
    """Switch the llm stage to ``phase``, wait until it runs it, and record one window of ``seconds``."""
    phase_file.write_text(phase)
    p.wait(lambda: p.stage("llm").get("phase") == phase, SWITCH_TIMEOUT_S, f"the llm stage's {phase} phase")
    g0, c0, t0 = p.stage("llm").get("generations", 0), _cpu_ticks(pid), time.monotonic_ns()
    time.sleep(seconds)
    t1 = time.monotonic_ns()
    run.spans[phase].append((t0, t1))
    run.cpu_ticks[phase] += _cpu_ticks(pid) - c0
    run.generations[phase] += p.stage("llm").get("generations", 0) - g0


def measure(rounds: int, window_s: float, model: str = "shipped") -> tuple[IsolationRun, np.ndarray]:
    """Run the pipeline once: ``rounds`` x (stopped, busy) windows, the fast stage running ``model`` (a key
    of ``bench.pipeline_config.MODELS``). Returns the run and the fast stage's SIGNAL tap records (fields
    code, lat_ns, at_ns).

    Raises:
        RuntimeError / TimeoutError: the pipeline did not come up, or the stage did not switch phases.
    """
    threads = default_llm_threads()
    with tempfile.TemporaryDirectory(prefix="bench-iso-") as d:
        phase_file, lat = Path(d) / "phase", Path(d) / "lat"
        phase_file.write_text("stopped")
        lat.mkdir()

        def hook(text: str) -> str:
            return replace_process(text, "llm", llm_process("bench.pipeline_isolation:PhasedLlmAgent",
                                                            ready_timeout_ms=READY_TIMEOUT_MS,
                                                            phase_file=str(phase_file), **REAL_LLM,
                                                            n_threads=threads))

        run = IsolationRun()
        with latency_taps(lat), ChaosPipeline(rate=1_000, llm=True, text_hook=hook, name="isolation",
                                              ready_timeout_s=180, model=model) as p:
            pid = p.proc("llm")["pid"]
            _window(p, phase_file, "busy", 2.0, IsolationRun(), pid)  # warm-up: the model's first prompt
            for _ in range(rounds):
                for phase in ("stopped", "busy"):
                    _window(p, phase_file, phase, window_s, run, pid)
            run.llm_stage = p.stage("llm")
        fast = read_tap(lat, "fast")
    return run, fast[fast["code"] == Kind.SIGNAL]


def figures(run: IsolationRun, sig: np.ndarray) -> dict:
    """The judged statistic and the figures beside it (the module docstring)."""
    at, lat = sig["at_ns"], sig["lat_ns"]
    spans = {"idle": run.spans["stopped"], "busy": run.spans["busy"]}  # p99_rule's names: idle = stopped
    win = window_p99s(at, lat, spans)
    p50s = {m: [report.hdr_us(lat[(at >= a) & (at < b)], (50.0,))[0] for a, b in sp] for m, sp in spans.items()}
    judged50 = {m: trimmed_gmean(v) for m, v in p50s.items()}
    pooled = {}
    for m, sp in spans.items():
        mask = np.zeros(at.size, bool)
        for a, b in sp:
            mask |= (at >= a) & (at < b)
        p50, p99 = report.hdr_us(lat[mask], (50.0, 99.0))
        pooled[m] = {"n": int(mask.sum()), "p50_us": round(p50, 1), "p99_us": round(p99, 1)}
    secs = {m: sum(b - a for a, b in sp) / 1e9 for m, sp in spans.items()}
    hz = os.sysconf("SC_CLK_TCK")
    n_win = min(len(v) for v in spans.values())
    verdict, why = p99_verdict({"busy": win["ratio"]["busy"]}, win["idle_aa"], limit=LIMIT, band=BAND,
                               windows=n_win if n_win < MIN_WINDOWS else None)
    return {"windows_per_condition": n_win, "judged_p99_us": win["judged_us"], "p99_ratio": win["ratio"]["busy"],
            "aa_ratio": win["idle_aa"], "judged_p50_us": judged50,
            "p50_ratio": judged50["busy"] / judged50["idle"] if judged50["idle"] else float("nan"),
            "window_p99_us": win["windows_us"], "window_p50_us": p50s, "pooled": pooled,
            "llm_cpu_pct": {m: round(100.0 * run.cpu_ticks[k] / hz / secs[m], 1) if secs[m] else float("nan")
                            for m, k in (("idle", "stopped"), ("busy", "busy"))},
            "generations": {"idle": run.generations["stopped"], "busy": run.generations["busy"]},
            "verdict": WORDS[verdict], "why": why.replace(" (quick mode judges the safety checks only)", "")}


def markdown(machine: dict, rounds: int, window_s: float, f: dict, llm_stage: dict, model: str) -> list[str]:
    j50, j99, pooled = f["judged_p50_us"], f["judged_p99_us"], f["pooled"]
    return [f"# Isolation under a real model {machine['date']}", "", report.machine_line(machine),
            f"One pipeline run at 1,000 book updates/s (bench.pipeline's config, the fast stage on the "
            f"{MODELS[model]}); the llm "
            f"stage runs {DEFAULT_MODEL} ({default_llm_threads()} thread(s) as configs/default.toml, nice 10, "
            f"generation thread SCHED_IDLE), switched between "
            f"stopped and busy (generating back to back) in {rounds} rounds of {window_s:g} s windows.", "",
            "| condition | windows | SIGNALs | p50 µs (judged) | p99 µs (judged) | pooled p50 / p99 µs | llm CPU | generations |",
            "|---|---|---|---|---|---|---|---|"] + [
            f"| {'stopped' if m == 'idle' else 'busy'} | {len(f['window_p99_us'][m])} | {pooled[m]['n']:,} | "
            f"{j50[m]:.0f} | {j99[m]:.0f} | {pooled[m]['p50_us']:.0f} / {pooled[m]['p99_us']:.0f} | "
            f"{f['llm_cpu_pct'][m]:.0f} % | {f['generations'][m]} |" for m in ("idle", "busy")] + [
            "", f"Ratio busy / stopped: p50 {f['p50_ratio']:.2f}x, p99 {f['p99_ratio']:.2f}x; A/A (stopped against "
            f"stopped, alternate windows) {f['aa_ratio']:.2f}x.", "",
            f"**Verdict: {f['verdict']}** (rule fixed before the run: p99 ratio <= {LIMIT:g}, the machine resolving it "
            f"when A/A is within [1/{BAND:g}, {BAND:g}], at least {MIN_WINDOWS} windows a condition): {f['why']}.", "",
            f"llm stage at the end: generations {llm_stage.get('generations')}, instructions "
            f"{llm_stage.get('instructions')}, last generation {llm_stage.get('gen_ms_last')} ms, breaker "
            f"{llm_stage.get('breaker')}."]


def main(rounds: int, window_s: float, out: Path | None, model: str = "shipped") -> int:
    """Measure, judge, write ``results.json`` and ``report.md``; 0 when it HOLDS, 1 when it does not, 3
    when INCONCLUSIVE (as ``make chaos``)."""
    out_dir, machine = report.start("isolation", out)
    run, sig = measure(rounds, window_s, model)
    f = figures(run, sig)
    report.write(out_dir, {"machine": machine, "rounds": rounds, "window_s": window_s, "limit": LIMIT, "band": BAND,
                           "fast_model": model, "figures": f, "llm_stage": run.llm_stage, "spans": run.spans},
                 markdown(machine, rounds, window_s, f, run.llm_stage, model))
    return {"HOLDS": 0, "DOES NOT HOLD": 1}.get(f["verdict"], 3)
