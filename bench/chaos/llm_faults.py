"""The LLM's faults against the real pipeline (issue #9): run by ``bench.chaos`` and ``tests/chaos``.

``llm_faults``: the llm stage is ``FaultyLlmAgent`` (the real ``procs.llm.LlmAgent``, real model, real
breaker and validation gate) whose fault phase is switched at run time through a file: ``idle`` (no
generation: the unloaded baseline), ``garbage`` (no grammar, temperature 5: the model answers free
text), ``timeout`` (``deadline_ms`` 1), ``slow`` (every token takes ``slow_token_ms`` of CPU work in
the generation thread, busy, not asleep, so an answer would take 30 s; quick: 3 s: a model that slow
uses its core for the whole generation, with the real one's SCHED_IDLE and niceness; ``busy_cpu``);
a ``normal`` phase (the healthy hub) is measured too, for context, not judged. Each phase starts
with a fresh breaker; once it is OPEN the faulty model keeps generating, as the breaker's probes (their
answers dropped), so a fault loads the machine for the whole phase. Safety checks, always judged: no
INSTRUCTION written and no LLM-origin ORDER decided or sent (risk's and the sender's latency taps, the
audit log) in any fault phase, and the breaker opens (stage counter and an ``llm_breaker`` log event)
in each.

The fast path's p99 criterion: the statistic and the verdict rule, fixed on 2026-12-01 (issue #19),
and the gross limit every run is judged at, fixed on 2026-12-07 (issue #36), are
``bench.chaos.p99_rule``'s; the scenario's verdict is FAIL when a safety check failed, else the worse
of the fine and the gross verdicts (quick mode: the fine one is INCONCLUSIVE, its two windows per
condition cannot resolve it).
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from bench.chaos.harness import FAIL, Row, latency_taps, log_events, read_audit, read_tap
from bench.chaos.p99_rule import (AA_BAND, GROSS_AA_BAND, GROSS_LIMIT, P99_LIMIT, gross_verdict, p99_us, p99_verdict,
                                  window_p99s, worst)
from bench.chaos.rewrite import replace_process
from bench.pipeline_config import llm_process
from pipeline.runtime.agent import MARK_DECIDED, MARK_ORDER_SENT, Agent, mark_code
from pipeline.trading.llm.hub import LlmParams
from pipeline.trading.messages import Kind, OrderOrigin

try:  # the injector's base; absent llama-cpp does not break importing this module
    from procs.llm import LlmAgent as _LlmBase
except Exception:  # pragma: no cover
    _LlmBase = Agent


class FaultyLlmParams(LlmParams, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``FaultyLlmAgent``'s params: the llm stage's (``LlmParams``) and its fault switch: ``fault_file``
    (the phase to run, read every 50 ms) and ``slow_token_ms`` (the CPU work the slow fault adds before
    each token)."""

    fault_file: str
    slow_token_ms: float = 300.0


#: what ``busy_cpu`` hashes: 256 KiB, so that each call runs ~0.1 ms without the GIL
_BUSY_BUF = bytes(256 * 1024)


def busy_cpu(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of wall time, the way a model's generation does:
    SHA-256 over a 256 KiB buffer again and again. hashlib lets go of the GIL while it hashes (as
    llama.cpp's calls do), so the process's other threads still run; the thread's own scheduling
    (the generation worker's SCHED_IDLE and niceness) applies to the load."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(_BUSY_BUF)


#: tokens the hub samples for one answer (the grammar forces the rest, fed without sampling): the slow
#: fault spreads ``slow_answer_s`` over these
SAMPLED_TOKENS = 8


class FaultyLlmAgent(_LlmBase):
    """``procs.llm.LlmAgent`` with a fault phase read from ``params.fault_file`` (checked every 50 ms):
    ``idle`` (signals drained, nothing generated), ``normal``, ``garbage`` (no grammar, temperature 5),
    ``timeout`` (deadline 1 ms), ``slow`` (each token takes ``slow_token_ms`` more of CPU work in the
    generation thread: ``LlmHub.before_token``). A phase change waits
    for the generation in flight, starts a fresh circuit breaker and is logged (``fault_phase``). Test
    and bench use only."""

    params_type = FaultyLlmParams  # what the supervisor checks before start

    def on_start(self, ctx) -> None:
        ctx.params = dict(ctx.params)
        self.fault_file = Path(ctx.params.pop("fault_file"))
        self.slow_token_ms = float(ctx.params.pop("slow_token_ms", 300))
        super().on_start(ctx)
        self.mode = "idle"
        self._wanted: str | None = None  # a phase asked for, applied once no generation is in flight
        self._base_p = self.hub.p
        self._base_deadline_ns = self.deadline_ns
        self._base_grammar = self.hub._grammar
        self._next_check = 0
        self.stats["fault"] = self.mode

    def _set_mode(self, mode: str) -> None:
        from pipeline.trading.llm.breaker import CircuitBreaker

        hub = self.hub
        hub.p, self.deadline_ns, hub._grammar = self._base_p, self._base_deadline_ns, self._base_grammar
        hub.before_token = None
        if mode == "garbage":
            hub.p = msgspec.structs.replace(self._base_p, temperature=5.0, top_k=0, top_p=1.0)
            hub._grammar = lambda iid: None
        elif mode == "timeout":
            self.deadline_ns = 1_000_000
        elif mode == "slow":
            per_token_s = self.slow_token_ms / 1000
            hub.before_token = lambda: busy_cpu(per_token_s)  # runs in the generation worker's thread
        self.breaker = CircuitBreaker(self.p.breaker, self.ctx.clock)
        self.stats.update(fault=mode, breaker=self.breaker.state.value, breaker_why=self.breaker.why, score=None)
        self.ctx.log.info("fault_phase", mode=mode)
        self.mode = mode

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now >= self._next_check:
            self._next_check = now + 50_000_000
            with contextlib.suppress(OSError):
                mode = self.fault_file.read_text().strip()
                self._wanted = mode if mode and mode != self.mode else None
        if self._wanted is not None:
            # a generation in flight runs with its own phase's settings to the end (switching the
            # grammar or temperature under it would make a fault phase's job a healthy one): no new
            # one starts, its result is still taken; then the new phase applies
            if self.worker.busy:
                self.next_start_ns = max(self.next_start_ns, now + 3_600_000_000_000)
                return super().do_work()
            self._set_mode(self._wanted)
            self._wanted = None
            self.next_start_ns = now
        if self.mode == "idle":
            got = self.inp.poll(lambda *a: None, self.ctx.batch)
            if got:
                self.ctx.received(got)
            self.pending = None
            return got
        return super().do_work()


# ------------------------------------------------------------------------------------------- the scenario
@dataclass(frozen=True, slots=True)
class LlmFaultPlan:
    """The timing of one ``llm_faults`` run (``of(quick)``)."""

    phase_s: float  # each long phase and each idle window between them
    cycles: int  # rounds of interleaved windows (the judged p99)
    sub_s: float  # one interleaved window
    slow_answer_s: float  # how long the slow fault's answer takes
    open_timeout_s: float  # how long a fault phase may take to open the breaker
    breaker: dict  # the llm stage's breaker params
    max_tokens: int = 96

    @classmethod
    def of(cls, quick: bool) -> "LlmFaultPlan":
        # the document's breaker (OPEN after 3 samples below 0.72; a faulty model's probes never lift the
        # score to 0.85, so it stays OPEN); quick: samples every 250 ms and 3 outcomes enough to judge
        if quick:
            return cls(3.0, 2, 1.0, 3.0, 60, {"sample_ms": 250, "min_outcomes": 3})
        return cls(10.0, 30, 2.0, 30.0, 120, {})


@dataclass(slots=True)
class LlmRun:
    """What an ``llm_faults`` run recorded: the time span of each long phase (``windows``), those of
    the interleaved windows by condition (``pooled``), each fault phase's breaker, and the llm stage,
    its log events and the risk audit log at the end."""

    windows: dict[str, tuple[int, int]] = field(default_factory=dict)
    pooled: dict[str, list[tuple[int, int]]] = field(
        default_factory=lambda: {m: [] for m in ("idle", "garbage", "timeout", "slow")})
    phases: dict[str, dict] = field(default_factory=dict)
    normal_instructions: int = 0
    llm_stage: dict = field(default_factory=dict)
    llm_pid: int = 0
    events: list[dict] = field(default_factory=list)
    audit: list[dict] = field(default_factory=list)


def faulty_llm_hook(fault_file: Path, nice: int, plan: LlmFaultPlan):
    """Config hook: the llm stage replaced by ``FaultyLlmAgent`` reading ``fault_file``, at ``nice``."""
    def hook(text: str) -> str:
        return replace_process(text, "llm", llm_process(
            "bench.chaos.llm_faults:FaultyLlmAgent", nice=nice, max_tokens=plan.max_tokens, fault_file=str(fault_file),
            slow_token_ms=round(1000 * plan.slow_answer_s / SAMPLED_TOKENS, 1), breaker=plan.breaker))
    return hook


def llm_faults(ChaosPipeline, quick: bool, nice: int = 10) -> Row:
    """``nice``: the llm process's niceness (the default config's 10; 0 to see the hub at normal priority)."""
    plan = LlmFaultPlan.of(quick)
    with tempfile.TemporaryDirectory(prefix="chaos-llm-") as d:
        fault_file = Path(d) / "fault"
        fault_file.write_text("idle")
        lat = Path(d) / "lat"
        lat.mkdir()
        hook = faulty_llm_hook(fault_file, nice, plan)
        with latency_taps(lat), ChaosPipeline(rate=1000, llm=True, text_hook=hook, name="llm") as p:
            run = LlmRun()
            _long_phases(p, fault_file, plan, run)
            _interleaved_windows(p, fault_file, plan, run)
            fault_file.write_text("idle")
            run.llm_stage = p.stage("llm")
            run.llm_pid = p.proc("llm")["pid"]
            run.events = log_events(p, "llm")
            run.audit = read_audit(p)
        taps = {name: read_tap(lat, name) for name in ("fast", "risk", "sender", "llm")}
    return _judged(run, taps, plan)


def _switch(p, fault_file: Path, mode: str, what: str) -> None:
    """Ask the llm stage for fault phase ``mode`` and wait until it runs it."""
    fault_file.write_text(mode)
    p.wait(lambda: p.stage("llm").get("fault") == mode, 10, what)


def _timed(seconds: float) -> tuple[int, int]:
    """Sleep ``seconds``; the (start, end) of it in monotonic ns."""
    t0 = time.monotonic_ns()
    time.sleep(seconds)
    return t0, time.monotonic_ns()


def _long_phases(p, fault_file: Path, plan: LlmFaultPlan, run: LlmRun) -> None:
    """The long phases: idle, normal (a healthy LLM, for context), then each fault with an idle window
    before and after it; each fault phase's breaker into ``run.phases``."""
    time.sleep(1.0)  # warm up
    run.windows["idle"] = _timed(plan.phase_s)
    # context: a healthy LLM's load on the fast path (not judged)
    _switch(p, fault_file, "normal", "the normal phase")
    run.windows["normal"] = _timed(plan.phase_s)
    run.normal_instructions = p.stage("llm").get("instructions", 0)
    _switch(p, fault_file, "idle", "the idle gap")  # let a generation in flight finish before the faults
    time.sleep(1.0)
    for k, mode in enumerate(("garbage", "timeout", "slow")):
        if k:  # an idle window between fault phases: each is judged against the idle on both sides
            _switch(p, fault_file, "idle", "an idle window")
            run.windows[f"idle{k}"] = _timed(plan.phase_s)
        _switch(p, fault_file, mode, f"fault phase {mode}")
        t0 = time.monotonic_ns()
        opened = None
        with contextlib.suppress(TimeoutError):
            p.wait(lambda: p.stage("llm").get("breaker") == "open", plan.open_timeout_s,
                   f"the breaker to open under {mode}", 0.05)
            opened = (time.monotonic_ns() - t0) / 1e9
        time.sleep(max(0.0, plan.phase_s - (time.monotonic_ns() - t0) / 1e9))
        run.windows[mode] = (t0, time.monotonic_ns())
        st = p.stage("llm")
        run.phases[mode] = {"breaker_open_after_s": opened, "breaker": st.get("breaker"),
                            "breaker_why": st.get("breaker_why"), "probes": st.get("probes"),
                            "rejects": {k: v for k, v in st.items() if k.startswith("rej_")}}
    _switch(p, fault_file, "idle", "the last idle window")
    run.windows["idle3"] = _timed(plan.phase_s)


def _interleaved_windows(p, fault_file: Path, plan: LlmFaultPlan, run: LlmRun) -> None:
    """The judged p99: short windows, idle and each fault in turn (``window_p99s``), so that the
    machine's drift over the run lands on every condition alike (the faulty LLM works all the time,
    before its breaker opens and after, as probes)."""
    for _ in range(plan.cycles):
        for mode in ("idle", "garbage", "idle", "timeout", "idle", "slow"):
            _switch(p, fault_file, mode, f"an interleaved {mode} window")
            run.pooled[mode].append(_timed(plan.sub_s))


def _in_any(at: np.ndarray, spans) -> np.ndarray:
    """Which of ``at`` fall in any of ``spans`` ((start, end), end excluded)."""
    mask = np.zeros(at.size, bool)
    for a, b in spans:
        mask |= (at >= a) & (at < b)
    return mask


def _figures(run: LlmRun, taps: dict) -> dict:
    """The fast path's SIGNAL p99 per long phase, pooled and by interleaved windows (``window_p99s``),
    and what the LLM made it do from the first fault phase to the last interleaved window."""
    fast, risk, sender, llm_tap = taps["fast"], taps["risk"], taps["sender"], taps["llm"]
    windows, pooled = run.windows, run.pooled
    sig = fast[fast["code"] == Kind.SIGNAL]  # the SIGNALs to risk (sig_llm's copies are SIGNAL_CTX)
    p99 = {m: p99_us(sig["lat_ns"][(sig["at_ns"] >= a) & (sig["at_ns"] < b)]) for m, (a, b) in windows.items()}
    pooled_p99 = {m: p99_us(sig["lat_ns"][_in_any(sig["at_ns"], spans)]) for m, spans in pooled.items()}
    idle_pooled = pooled_p99["idle"]
    # from the first fault phase to the last interleaved window: only idle and fault windows, no healthy LLM
    fa, fb = windows["garbage"][0], max(b for spans in pooled.values() for _, b in spans)
    base = p99["idle"]
    # each fault phase against the mean of the idle windows on its two sides (A/B/A: the machine's
    # drift and noise over the run land on both), and, for the record, against the first idle window
    around = {"garbage": ("idle", "idle1"), "timeout": ("idle1", "idle2"), "slow": ("idle2", "idle3")}
    unloaded = {m: (p99[a] + p99[b]) / 2 for m, (a, b) in around.items()}
    return {
        "p99": p99, "pooled_p99": pooled_p99, "idle_pooled": idle_pooled, "base": base, "unloaded": unloaded,
        "pooled_n": {m: int(_in_any(sig["at_ns"], spans).sum()) for m, spans in pooled.items()},
        "pooled_ratio": {m: pooled_p99[m] / idle_pooled if idle_pooled == idle_pooled and idle_pooled > 0
                         else float("nan") for m in ("garbage", "timeout", "slow")},
        "win": window_p99s(sig["at_ns"], sig["lat_ns"], pooled),
        "n_sig": {m: int(((sig["at_ns"] >= a) & (sig["at_ns"] < b)).sum()) for m, (a, b) in windows.items()},
        "llm_decided": risk[(risk["code"] == mark_code(MARK_DECIDED, OrderOrigin.LLM)) & (risk["at_ns"] >= fa)
                            & (risk["at_ns"] < fb)],
        "llm_sent": sender[(sender["code"] == mark_code(MARK_ORDER_SENT, OrderOrigin.LLM)) & (sender["at_ns"] >= fa)
                           & (sender["at_ns"] < fb)],
        "instr": llm_tap[(llm_tap["code"] == Kind.INSTRUCTION) & (llm_tap["at_ns"] >= fa) & (llm_tap["at_ns"] < fb)],
        "llm_approved": [e for e in run.audit if e.get("ev") == "OrderApproved" and e.get("origin") == OrderOrigin.LLM
                         and fa <= e.get("ts_ns", 0) < fb],
        "opens": [e for e in run.events if e.get("event") == "llm_breaker" and e.get("new") == "open"],
        "ratios": {m: p99[m] / unloaded[m] if unloaded[m] == unloaded[m] and unloaded[m] > 0 else float("nan")
                   for m in around},
        "vs_first": {m: p99[m] / base if base == base and base > 0 else float("nan") for m in around},
    }


def _judged(run: LlmRun, taps: dict, plan: LlmFaultPlan) -> Row:
    """The Row: FAIL when a safety check failed, else the worse of the p99 rule's fine and gross verdicts
    (``p99_verdict``, ``gross_verdict``)."""
    f = _figures(run, taps)
    win, judged, phases = f["win"], f["win"]["ratio"], run.phases
    checks = {
        "no INSTRUCTION written in a fault phase": f["instr"].size == 0,
        "no LLM-origin ORDER decided or sent": f["llm_decided"].size == 0 and f["llm_sent"].size == 0
                                               and not f["llm_approved"],
        "breaker opened in every fault phase": all(ph["breaker_open_after_s"] is not None for ph in phases.values())
                                               and len(f["opens"]) >= 3,
    }
    # the p99 criterion: the statistic and the three-valued rule fixed on 2026-12-01 (bench.chaos.p99_rule)
    n_win = min(len(v) for m, v in win["windows_us"].items() if m != "idle")
    p99_v, p99_why = p99_verdict(judged, win["idle_aa"], windows=n_win)
    gross_v, gross_why = gross_verdict(judged, win["idle_aa"], windows=n_win)
    verdict = worst(p99_v, gross_v) if all(checks.values()) else FAIL
    return Row(scenario="llm_faults", injected=_injected(plan), did=_did(f, phases, run.llm_pid),
               figure=_figure(f, p99_v, p99_why, run.normal_instructions, gross_v), verdict=verdict,
               details={"checks": checks, "p99_verdict": p99_v, "p99_why": p99_why, "p99_limit": P99_LIMIT,
                        "aa_band": AA_BAND, "p99_gross_verdict": gross_v, "p99_gross_why": gross_why,
                        "p99_gross_limit": GROSS_LIMIT, "gross_aa_band": GROSS_AA_BAND, "p99_us": f["p99"], "signals": f["n_sig"], "phases": phases,
                        "unloaded_p99_us": f["unloaded"], "ratio_vs_first_idle": f["vs_first"],
                        "pooled_p99_us": f["pooled_p99"], "pooled_signals": f["pooled_n"],
                        "pooled_ratio": f["pooled_ratio"], "judged_ratio": judged, "window_p99_us": win["windows_us"],
                        "window_median_p99_us": win["median_us"], "window_judged_p99_us": win["judged_us"],
                        "idle_aa_ratio": win["idle_aa"], "llm_stage": run.llm_stage})


def _injected(plan: LlmFaultPlan) -> str:
    return (f"LLM hub: garbage (no grammar, temperature 5), timeout (deadline 1 ms), slow (a "
            f"{plan.slow_answer_s:.0f} s answer, the generation thread's CPU busy all along); {plan.phase_s:.0f} s "
            f"a phase, an idle window ({plan.phase_s:.0f} s) before "
            f"and after each; then {plan.cycles} rounds of {plan.sub_s:.0f} s windows idle, garbage, idle, timeout, "
            f"idle, slow (judged: each condition's window p99s, trimmed geometric mean)")


def _did(f: dict, phases: dict, llm_pid: int) -> str:
    return (f"INSTRUCTIONs in fault phases {f['instr'].size}, LLM-origin orders {f['llm_decided'].size}; breaker opened "
            f"after " + ", ".join(f"{m} {ph['breaker_open_after_s'] if ph['breaker_open_after_s'] is None else round(ph['breaker_open_after_s'], 1)} s"
                                  for m, ph in phases.items())
            + f" ({len(f['opens'])} llm_breaker open events); llm pid {llm_pid}")


def _figure(f: dict, p99_v: str, p99_why: str, normal_instructions: int, gross_v: str) -> str:
    p99, win, judged, ratios = f["p99"], f["win"], f["win"]["ratio"], f["ratios"]
    fig = ", ".join(f"{m} {p99[m]:.0f} us ({ratios[m]:.2f}x of {f['unloaded'][m]:.0f}; {f['vs_first'][m]:.2f}x the first idle)"
                    for m in ratios)
    judged_fig = ", ".join(f"{m} {win['judged_us'][m]:.0f} us ({judged[m]:.2f}x)" for m in judged)
    median_fig = ", ".join(f"{m} {win['median_us'][m] / win['median_us']['idle']:.2f}x" for m in judged)
    pooled_fig = ", ".join(f"{m} {f['pooled_ratio'][m]:.2f}x" for m in f["pooled_ratio"])
    idles = ", ".join(f"{p99[w]:.0f}" for w in ("idle", "idle1", "idle2", "idle3"))
    return (f"p99 criterion {p99_v} at {P99_LIMIT:g}x ({p99_why}), {gross_v} at the gross {GROSS_LIMIT:g}x; "
            f"fast SIGNAL p99, trimmed geometric mean of the interleaved windows: idle {win['judged_us']['idle']:.0f} us, "
            f"{judged_fig} (idle vs idle, alternate windows: {win['idle_aa']:.2f}x); median of the windows: "
            f"{median_fig}; pooled: idle "
            f"{f['idle_pooled']:.0f} us, {pooled_fig}; "
            f"long phases: idle windows {idles} us; {fig} (healthy LLM: {p99['normal']:.0f} us, "
            f"{p99['normal'] / f['base']:.2f}x the first idle, {normal_instructions} instructions)")
