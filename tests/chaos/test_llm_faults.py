"""The slow fault of ``FaultyLlmAgent`` (``bench.chaos.llm_faults``): busy, not asleep."""

from __future__ import annotations

from bench.chaos.llm_faults import busy_cpu


def test_the_slow_fault_keeps_the_cpu_busy_for_the_whole_generation():
    import threading
    import time

    used = {}

    def run():  # in a thread of its own, as in the generation worker
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(4):  # four sampled tokens, the hub's before_token hook as the slow fault sets it
            busy_cpu(0.05)
        used["cpu"], used["wall"] = time.thread_time() - c0, time.perf_counter() - w0

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert used["wall"] >= 0.2
    # busy, not asleep: the thread used the CPU for its wall time, as far as the machine let it (asleep
    # between tokens, as the fault was before, it used < 1 % of it; 0.2 leaves room for a 2-core
    # machine loaded with other tests: 0.41 seen so)
    assert used["cpu"] >= 0.2 * used["wall"], used
    c0 = time.thread_time()
    busy_cpu(0.0)
    assert time.thread_time() - c0 < 0.05


# ------------------------------------------------------------- the scenario's verdict from its taps (_judged)
def _judged_row(slowdown: float, *, safe: bool = True):
    """``llm_faults``' Row of a quick run made up: every window one SIGNAL a millisecond (p99 100 µs: the
    top 2 % at 100 µs, the rest at 50), ``slowdown`` times that in the fault conditions' windows; the
    breaker opened in each fault phase; ``safe`` False: one INSTRUCTION written in a fault window."""
    import numpy as np

    from bench.chaos.llm_faults import LlmFaultPlan, LlmRun, _judged
    from pipeline.trading.messages import Kind

    plan, run, t, s = LlmFaultPlan.of(True), LlmRun(), 0, 1_000_000_000
    for name in ("idle", "normal", "garbage", "idle1", "timeout", "idle2", "slow", "idle3"):
        run.windows[name], t = (t, t + s), t + s
    for _ in range(plan.cycles):
        for mode in ("idle", "garbage", "idle", "timeout", "idle", "slow"):
            run.pooled[mode].append((t, t + s))
            t += s
    run.phases = {m: {"breaker_open_after_s": 0.5} for m in ("garbage", "timeout", "slow")}
    run.events = [{"event": "llm_breaker", "new": "open"}] * 3
    at = np.arange(0, t, 1_000_000, dtype=np.int64)
    faulty = np.zeros(at.size, bool)
    for a, b in [run.windows[m] for m in ("garbage", "timeout", "slow")] + [
            w for m in ("garbage", "timeout", "slow") for w in run.pooled[m]]:
        faulty |= (at >= a) & (at < b)
    lat = np.where(np.arange(at.size) % 50 == 0, 100_000, 50_000) * np.where(faulty, slowdown, 1.0)
    dt = [("code", "<u2"), ("lat_ns", "<i8"), ("at_ns", "<i8")]
    fast = np.zeros(at.size, dt)
    fast["code"], fast["lat_ns"], fast["at_ns"] = Kind.SIGNAL, lat.astype(np.int64), at
    llm = np.zeros(1 if not safe else 0, dt)
    if not safe:
        llm["code"], llm["at_ns"] = Kind.INSTRUCTION, run.windows["garbage"][0]
    return _judged(run, {"fast": fast, "risk": np.zeros(0, dt), "sender": np.zeros(0, dt), "llm": llm}, plan)


def test_a_quick_run_is_judged_at_the_gross_limit_and_says_inconclusive_for_the_fine_one():
    from bench.chaos.harness import FAIL, INCONCLUSIVE, PASS

    row = _judged_row(1.5)  # 1.5x: over the fine 1.10, which two windows a condition cannot resolve
    assert all(row.details["checks"].values()), row.details["checks"]
    assert (row.details["p99_gross_verdict"], row.details["p99_verdict"], row.verdict) == (
        PASS, INCONCLUSIVE, INCONCLUSIVE), (row.details["p99_gross_why"], row.details["p99_why"])
    row = _judged_row(3.0)  # a fast path stalled to 3x its idle p99 under the faults
    assert (row.details["p99_gross_verdict"], row.verdict) == (FAIL, FAIL), row.details["p99_gross_why"]
    assert row.details["p99_verdict"] == INCONCLUSIVE
    row = _judged_row(1.0, safe=False)  # a safety check failed: FAIL whatever the p99
    assert row.details["p99_gross_verdict"] == PASS and row.verdict == FAIL
