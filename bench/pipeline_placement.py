"""Where the fast path's stages sit on a machine with fewer cores than processes, A/B in one run.

``python -m bench.pipeline --placement chain [--rounds 20] [--window-s 3] [--model hand-set] [--source encoded]``

One run of the pipeline bench's config (``bench.pipeline_config``; 1,000 book updates/s, one instrument,
the fast stage on ``--model``, the venue on ``--source``), its processes moved between two placements in
interleaved windows (ABBA, a warm-up window first, not counted):

- ``spread``: the supervisor's plan (``pipeline.runtime.pinning.plan_cores``: round-robin over the cores,
  what ``make up`` runs), each process's affinity as it set it at its start;
- ``chain``: the hot path's stages (``HOT``: feed, features, fast, risk, sender) all on one core (the
  last), every other process (the venue, the llm stage) on the other cores in turn.

The hypothesis: a message crosses the fast path's stages one after another, so on two cores they gain
nothing from running in parallel, while every hop to a process on another core costs a cross-core
wake-up (an inter-processor interrupt, a vCPU's exit from idle), several times a same-core one, and
lands on a core the venue or another stage may hold. The bench moves every thread of each process
(sched_setaffinity(2) on each task, as the plan's own pinning does at a start).

STATISTIC AND VERDICT RULE, fixed on 2026-12-01 before any run of this measurement was looked at:

* judged: the fast path's SIGNAL latency (frame received -> SIGNAL written), pooled per arm over its
  windows; d = p50(spread) - p50(chain) in µs with a 95 % percentile-bootstrap interval over windows
  (2,000 resamples, seed 1); an A/A control on the spread arm's windows split alternately in two
  halves; CHAIN FASTER / CHAIN SLOWER only when d's interval excludes 0 and the A/A interval (taken
  both ways round), else INCONCLUSIVE; fewer than 5 windows or 10 samples an arm: INCONCLUSIVE
  (``bench.pipeline_sched.judge``, the same rule as the SCHED_FIFO A/B, as amended on 2026-12-07:
  ``bench.report.ab_judged``; until then the intervals resampled samples and the A/A control only
  had to hold 0).
* the same rule, judged separately, on order request sent (fast path) latency.
* reported beside them, not judged: each arm's p99 and the pipeline's CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench import report
from bench.pipeline_sched import HOT, judge, windowed_run

ARMS = ("spread", "chain")
VERDICTS = ("CHAIN FASTER", "CHAIN SLOWER")


# ------------------------------------------------------------------------------------- pure
def chain_plan(names: list[str], cores: list[int], hot: tuple[str, ...] = HOT) -> dict[str, int]:
    """The ``chain`` arm's core per process: every ``hot`` one on the last of ``cores``, the others on
    the remaining cores in turn (on one core: all there).

    Raises:
        ValueError: no cores.
    """
    if not cores:
        raise ValueError("no cores")
    last, rest = cores[-1], cores[:-1] or cores[-1:]
    out, i = {}, 0
    for n in names:
        if n in hot:
            out[n] = last
        else:
            out[n], i = rest[i % len(rest)], i + 1
    return out


# ------------------------------------------------------------------------------------- measured
def set_cores(pid: int, cores: set[int]) -> int:
    """Every thread of process ``pid`` onto ``cores``; the threads moved.

    Raises:
        OSError: the process is gone, or a core is not usable.
    """
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return len(tids)


def measure(rounds: int, window_s: float, model: str, source: str) -> dict:
    """``windowed_run`` with every process moved to its arm's placement per window (back to the spread
    one after); the taps, each arm's spans, both plans.

    Raises:
        RuntimeError / TimeoutError: the pipeline did not come up. OSError: a move refused.
    """
    plans: dict[str, dict[str, set[int]]] = {}
    shown: dict[str, dict] = {}

    def switch(p, arm: str | None) -> None:
        pids = p.pids()
        if not plans:  # at the warm-up: the supervisor's plan as it set it, and the chain
            shown["spread"] = {n: sorted(os.sched_getaffinity(pid)) for n, pid in pids.items()}
            shown["chain"] = chain_plan(list(pids), sorted(os.sched_getaffinity(0)))
            plans["spread"] = {n: set(c) for n, c in shown["spread"].items()}
            plans["chain"] = {n: {c} for n, c in shown["chain"].items()}
        for n, pid in pids.items():
            set_cores(pid, plans[arm if arm in ARMS else "spread"][n])

    return windowed_run("placement", ARMS, rounds, window_s, model, source, switch) | {"plans": shown}


def _row(arm: str, sig: dict, sent: dict) -> str:
    a, s = sig["arms"][arm], sent["arms"][arm]
    return (f"| {arm} | {sig['windows'][arm]} | {a['n']} | {a.get('p50_us', float('nan')):.0f} / "
            f"{a.get('p99_us', float('nan')):.0f} | {s['n']} | {s.get('p50_us', float('nan')):.0f} / "
            f"{s.get('p99_us', float('nan')):.0f} |")


def main(rounds: int, window_s: float, out: Path | None, model: str, source: str) -> int:
    """Measure, judge, write ``results.json`` and ``report.md``; 0 CHAIN FASTER (SIGNAL), 1 CHAIN SLOWER,
    3 INCONCLUSIVE."""
    out_dir, machine = report.start("placement", out)
    m = measure(rounds, window_s, model, source)
    sig, o = m["signal"], m["order_sent"]
    fs = judge(sig["lat_ns"], sig["at_ns"], m["spans"], ARMS, VERDICTS)
    fo = judge(o["lat_ns"], o["at_ns"], m["spans"], ARMS, VERDICTS)
    plans = m["plans"]
    md = [f"# Placement A/B {machine['date']}", "", report.machine_line(machine),
          f"One pipeline run at 1,000 updates/s (fast stage on the {model} model, venue source {source}); every "
          f"process moved between the two placements in {rounds} ABBA windows of {window_s:g} s an arm.", "",
          "| process | spread: cores | chain: core |", "|---|---|---|",
          *[f"| {n} | {','.join(map(str, plans['spread'][n]))} | {plans['chain'][n]} |" for n in plans["chain"]], "",
          "| arm | windows | SIGNAL n | SIGNAL p50 / p99 µs | order sent n | order sent p50 / p99 µs |",
          "|---|---|---|---|---|---|", _row("spread", fs, fo), _row("chain", fs, fo), ""]
    for what, f in (("SIGNAL written", fs), ("order request sent (fast path)", fo)):
        md += [f"- {what}: d = p50(spread) - p50(chain) {f.get('d_us', '-')} µs, 95 % interval {f.get('ci_us', '-')}; "
               f"A/A {f.get('aa_d_us', '-')} µs, interval {f.get('aa_ci_us', '-')}. **Verdict: {f['verdict']}** "
               f"({f['why']}; rule fixed before the run, bench.pipeline_placement)."]
    report.write(out_dir, {"machine": machine, "rounds": rounds, "window_s": window_s, "model": model,
                           "source": source, "plans": plans, "signal": fs, "order_sent": fo, "spans": m["spans"]}, md)
    return {VERDICTS[0]: 0, VERDICTS[1]: 1}.get(fs["verdict"], 3)
