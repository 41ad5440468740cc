"""The isolation measurement (``python -m bench.pipeline --isolation``): the llm stage switched between a
model generating back to back and one stopped, the rule that judges the fast path's p99 ratio, and one
short run of the whole thing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.pipeline_isolation import BAND, LIMIT, IsolationRun, PhasedLlmAgent, figures
from pipeline.runtime.config import ProcessConfig
from pipeline.trading.llm.prompt import example_signal
from pipeline.trading.messages import Kind
from tests.support.configtext import INSTRUMENTS, ring
from tests.support.context import stage_context
from tests.support.llm import tiny_model
from tests.support.ports import ListInput, RecordingPort

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000


def start(phase_file: Path):
    text = ring("sig_llm", payload=576) + ring("instr", payload=128) + INSTRUMENTS
    proc = ProcessConfig(name="llm", module="bench.pipeline_isolation:PhasedLlmAgent", inputs=["sig_llm"],
                         outputs=["instr"], params={"model_path": tiny_model(), "n_ctx": 2048, "min_gap_ms": 0,
                                                    "phase_file": str(phase_file)})
    ctx = stage_context(text, proc, inputs={"sig_llm": ListInput([])}, outputs={"instr": RecordingPort()})
    agent = PhasedLlmAgent()
    agent.on_start(ctx)
    return agent, ctx


def work_for(agent, seconds: float, until=None) -> None:
    """Drive the agent for ``seconds``, or until ``until()`` holds (then at most ``seconds``)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (until and until()):
        agent.do_work()
        agent.wait_for_work(2 * MS)


def test_stopped_drains_the_signals_busy_generates_without_rest_and_a_switch_waits_for_the_answer(tmp_path):
    phase = tmp_path / "phase"
    phase.write_text("stopped")
    agent, ctx = start(phase)
    try:
        ctx.inputs["sig_llm"].msgs += [(Kind.SIGNAL_CTX, example_signal(s, feature_seq=s).tobytes(), s) for s in (1, 2, 3)]
        work_for(agent, 0.3)
        assert ctx.stats["phase"] == "stopped" and ctx.stats["generations"] == 0
        assert ctx.inputs["sig_llm"].pos == 3  # read all the same
        phase.write_text("busy")
        work_for(agent, 30.0, until=lambda: ctx.stats["generations"] >= 3)
        busy = ctx.stats["generations"]
        assert ctx.stats["phase"] == "busy" and busy >= 3  # the last signal asked again and again
        phase.write_text("stopped")
        work_for(agent, 30.0, until=lambda: ctx.stats["phase"] == "stopped")
        assert ctx.stats["phase"] == "stopped" and not agent.worker.busy
        after = ctx.stats["generations"]  # (the file is read every 50 ms: a few more may have started)
        work_for(agent, 0.3)
        assert ctx.stats["generations"] == after  # nothing more while stopped
    finally:
        agent.on_close()


def test_busy_before_any_signal_asks_a_stand_in_signal(tmp_path):
    phase = tmp_path / "phase"
    phase.write_text("busy")
    agent, ctx = start(phase)
    try:
        work_for(agent, 30.0, until=lambda: ctx.stats["generations"] >= 2)
        assert ctx.stats["generations"] >= 2 and ctx.stats["signals"] == 0
    finally:
        agent.on_close()


def _run_with(busy_scale: float, aa_scale: float = 1.0, rounds: int = 12, seed: int = 1):
    """A run of ``rounds`` (stopped, busy) windows of 1 s whose SIGNAL latencies are drawn from one law,
    busy's scaled by ``busy_scale``, every other stopped window by ``aa_scale``."""
    rng = np.random.default_rng(seed)
    run, at, lat, t = IsolationRun(), [], [], 0
    for r in range(rounds):
        for phase in ("stopped", "busy"):
            scale = busy_scale if phase == "busy" else (aa_scale if r % 2 else 1.0)
            times = t + np.sort(rng.integers(0, 10**9, 500))
            at.append(times)
            lat.append((rng.lognormal(np.log(40_000), 0.4, 500) * scale).astype(np.int64))
            run.spans[phase].append((t, t + 10**9))
            t += 10**9
    sig = np.zeros(rounds * 1000, dtype=[("code", "<u2"), ("lat_ns", "<i8"), ("at_ns", "<i8")])
    sig["at_ns"], sig["lat_ns"], sig["code"] = np.concatenate(at), np.concatenate(lat), Kind.SIGNAL
    return figures(run, sig)


def test_the_rule_holds_at_no_change_fails_past_the_limit_and_is_inconclusive_without_resolution():
    assert (LIMIT, BAND) == (1.5, 1.25)
    same = _run_with(1.0)
    assert same["verdict"] == "HOLDS" and 0.9 < same["p99_ratio"] < 1.1 and 0.9 < same["p50_ratio"] < 1.1
    assert same["windows_per_condition"] == 12 and same["pooled"]["busy"]["n"] == 6000
    twice = _run_with(2.0)
    assert twice["verdict"] == "DOES NOT HOLD" and 1.8 < twice["p99_ratio"] < 2.2
    noisy = _run_with(1.45, aa_scale=1.6)  # the stopped windows disagree with each other by 1.6x
    assert noisy["verdict"] == "INCONCLUSIVE" and max(noisy["aa_ratio"], 1 / noisy["aa_ratio"]) > BAND
    few = _run_with(1.0, rounds=3)
    assert few["verdict"] == "INCONCLUSIVE" and "windows per condition" in few["why"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_a_short_run_measures_both_conditions_with_the_real_model(tmp_path: Path) -> None:
    """Two rounds of 1 s windows: too few for a verdict (INCONCLUSIVE, exit 3), but every figure there."""
    proc = subprocess.run([sys.executable, "-m", "bench.pipeline", "--isolation", "--rounds", "2", "--window-s", "1",
                           "--model", "hand-set", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    f = doc["figures"]
    assert f["verdict"] == "INCONCLUSIVE" and f["windows_per_condition"] == 2
    assert f["pooled"]["idle"]["n"] > 500 and f["pooled"]["busy"]["n"] > 500
    # the model's load shows in the llm process's CPU (a generation may outlast a 1 s window: it is
    # counted in the window it starts in); nothing starts while stopped
    assert f["llm_cpu_pct"]["busy"] > 2 * f["llm_cpu_pct"]["idle"] and f["generations"]["idle"] == 0
    assert doc["llm_stage"]["model"] == "SmolLM2-135M-Instruct.Q4_0.gguf" and doc["llm_stage"]["generations"] >= 1
    report = (tmp_path / "report.md").read_text()
    assert "| stopped | 2 |" in report and "| busy | 2 |" in report and "**Verdict: INCONCLUSIVE**" in report
