"""SCHED_FIFO against the default policy for the fast path's stages, A/B in one pipeline run.

``python -m bench.pipeline --sched fifo [--rounds 20] [--window-s 3] [--model hand-set] [--source encoded]``

One run of the pipeline bench's config (``bench.pipeline_config``; 1,000 book updates/s, one instrument,
the default placement, the fast stage on ``--model``, the venue on ``--source``). The hot-path stages
(``HOT``: feed, features, fast, risk, sender) are switched between two arms in interleaved windows:

- ``other``: every thread of each of them under SCHED_OTHER (the kernel's default, what ``make up`` runs);
- ``fifo``: every thread under SCHED_FIFO at ``--priority`` (default 10; what ``sched = "fifo"`` in a
  process's config gives it from its start: ``pipeline.runtime.linux.set_fifo``).

The bench switches them from outside (sched_setscheduler(2) on each task of each stage; it needs
CAP_SYS_NICE, as the config option does). Windows go in the order other, fifo, fifo, other, ... (ABBA), so
neither arm always follows the other; the first window of the run is a warm-up and not counted.

STATISTIC AND VERDICT RULE, fixed on 2026-12-01 before any run of this measurement was looked at:

* judged: the fast path's SIGNAL latency (frame received -> SIGNAL written), pooled per arm over its
  windows; d = p50(other) - p50(fifo) in µs with a 95 % percentile-bootstrap interval;
* an A/A control: the other arm's windows split alternately in two halves, the same interval;
* the verdict: ``bench.report.ab_judged``'s rule, as amended on 2026-12-07 (issue #36): the intervals
  resample whole windows (``bench.report.window_diff_ci``), not samples; FIFO FASTER / FIFO SLOWER
  only when d's interval excludes 0 and the A/A interval (taken both ways round), else INCONCLUSIVE
  (never counted as a win); fewer than ``MIN_WINDOWS`` windows an arm: INCONCLUSIVE. (Until then the
  intervals resampled samples and the A/A control only had to hold 0.)
* Reported beside it, not judged: each arm's p99, order request sent (fast path) p50 / p99 per arm.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from bench import report
from pipeline.runtime.agent import MARK_ORDER_SENT, mark_code
from pipeline.runtime.linux import set_fifo
from pipeline.trading.messages import Kind, OrderOrigin

HOT = ("feed", "features", "fast", "risk", "sender")
ARMS = ("other", "fifo")
MIN_WINDOWS = 5
ORDER_SENT = (mark_code(MARK_ORDER_SENT, OrderOrigin.FAST), mark_code(MARK_ORDER_SENT, OrderOrigin.RISK))


# ------------------------------------------------------------------------------------- pure
def window_order(rounds: int, arms: tuple[str, str] = ARMS) -> list[str]:
    """The arms' windows: a warm-up ("warm-up"), then ABBA pairs, ``rounds`` windows an arm."""
    a, b = arms
    out = ["warm-up"]
    for i in range(rounds):
        out += [a, b] if i % 2 == 0 else [b, a]
    return out


def in_spans(at: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """A mask of the stamps ``at`` inside any of ``spans`` ([start, end) ns)."""
    mask = np.zeros(at.size, bool)
    for a, b in spans:
        mask |= (at >= a) & (at < b)
    return mask


def judge(lat: np.ndarray, at: np.ndarray, spans: dict[str, list[tuple[int, int]]], arms: tuple[str, str] = ARMS,
          verdicts: tuple[str, str] = ("FIFO FASTER", "FIFO SLOWER")) -> dict:
    """The rule of the module docstring on SIGNAL latencies ``lat`` stamped ``at``, with each arm's
    ``spans``: d and its interval, the A/A interval, each arm's pooled p50 / p99 / n, the verdict.
    ``arms``: (the baseline, the candidate), d = p50(baseline) - p50(candidate), the A/A control on
    the baseline's windows; ``verdicts``: the words for (candidate faster, candidate slower)."""
    base, cand = arms
    win = {k: [lat[in_spans(at, [sp])] for sp in spans[k]] for k in arms}
    arm = {k: np.concatenate(v) if v else np.zeros(0, lat.dtype) for k, v in win.items()}
    aa = (win[base][0::2], win[base][1::2])
    out = {"arms": {k: {"n": int(v.size), **dict(zip(("p50_us", "p99_us"), report.hdr_us(v, (50.0, 99.0))))}
                    if v.size else {"n": 0} for k, v in arm.items()},
           "windows": {k: len(spans[k]) for k in arms}}
    if min(out["windows"].values()) < MIN_WINDOWS or min(sum(w.size for w in v) for v in (*win.values(), *aa)) < 10:
        return {**out, "verdict": "INCONCLUSIVE", "why": f"fewer than {MIN_WINDOWS} windows or 10 samples an arm"}
    return out | report.ab_judged(win[base], win[cand], aa, verdicts, f"p50({base}) - p50({cand})")


# ------------------------------------------------------------------------------------- measured
def set_policy(pid: int, arm: str, priority: int) -> int:
    """Every thread of process ``pid`` to SCHED_FIFO at ``priority`` (``arm`` "fifo") or SCHED_OTHER;
    the threads set.

    Raises:
        OSError: the kernel refused (no CAP_SYS_NICE), or the process is gone.
    """
    task_dir = f"/proc/{pid}/task"
    if arm == "fifo":
        return set_fifo(priority, task_dir=task_dir)
    tids = [int(t) for t in os.listdir(task_dir)]
    for tid in tids:
        os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    return len(tids)


def windowed_run(name: str, arms: tuple[str, str], rounds: int, window_s: float, model: str, source: str,
                 switch: Callable[[object, str | None], None]) -> dict:
    """One run of the pipeline bench's config (1,000 updates/s, one instrument, the LLM stage on, the
    fast stage on ``model``, the venue on ``source``) through the windows of ``window_order(rounds,
    arms)``: ``switch(pipeline, arm)`` before each ("warm-up" first, not counted), ``switch(pipeline,
    None)`` after the last. Returns each arm's spans, the SIGNAL and the fast-path order-sent taps.

    Raises:
        RuntimeError / TimeoutError: the pipeline did not come up; what ``switch`` raises.
    """
    from bench.chaos.harness import ChaosPipeline, latency_taps, read_tap
    from bench.pipeline_config import ENCODED_LOOP_MS

    venue = {"source": "encoded", "encoded_units": ENCODED_LOOP_MS, "encoded_channels": ["books15", "trade"]} \
        if source == "encoded" else {}
    spans: dict[str, list[tuple[int, int]]] = {k: [] for k in arms}
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as d:
        lat = Path(d)
        with latency_taps(lat), ChaosPipeline(rate=1_000, llm=True, name=name, model=model, venue=venue) as p:
            for arm in window_order(rounds, arms):
                switch(p, arm)
                t0 = time.monotonic_ns()
                time.sleep(window_s)
                if arm != "warm-up":
                    spans[arm].append((t0, time.monotonic_ns()))
            switch(p, None)
        fast, sender = read_tap(lat, "fast"), read_tap(lat, "sender")
    return {"spans": spans, "signal": fast[fast["code"] == Kind.SIGNAL],
            "order_sent": sender[np.isin(sender["code"], ORDER_SENT)]}


def measure(rounds: int, window_s: float, model: str, source: str, priority: int) -> dict:
    """``windowed_run`` with the hot-path stages' policy switched per window (back to SCHED_OTHER after).

    Raises:
        RuntimeError / TimeoutError: the pipeline did not come up. OSError: a policy switch refused.
    """
    def switch(p, arm: str | None) -> None:
        for n in HOT:
            set_policy(p.proc(n)["pid"], arm if arm in ARMS else "other", priority)

    return windowed_run("sched", ARMS, rounds, window_s, model, source, switch)


def main(rounds: int, window_s: float, out: Path | None, model: str, source: str, priority: int = 10) -> int:
    """Measure, judge, write ``results.json`` and ``report.md``; 0 FIFO FASTER, 1 FIFO SLOWER, 3 INCONCLUSIVE."""
    out_dir, machine = report.start("sched", out)
    m = measure(rounds, window_s, model, source, priority)
    sig = m["signal"]
    f = judge(sig["lat_ns"], sig["at_ns"], m["spans"])
    o = m["order_sent"]
    sent = {k: dict(zip(("p50_us", "p99_us"), report.hdr_us(v, (50.0, 99.0)))) | {"n": int(v.size)} if v.size
            else {"n": 0} for k in ARMS for v in [o["lat_ns"][in_spans(o["at_ns"], m["spans"][k])]]}
    md = [f"# SCHED_FIFO A/B {machine['date']}", "", report.machine_line(machine),
          f"One pipeline run at 1,000 updates/s (fast stage on the {model} model, venue source {source}); "
          f"{', '.join(HOT)} switched between SCHED_OTHER and SCHED_FIFO priority {priority} in {rounds} ABBA windows "
          f"of {window_s:g} s an arm.", "",
          "| arm | windows | SIGNAL n | SIGNAL p50 / p99 µs | order sent n | order sent p50 / p99 µs |",
          "|---|---|---|---|---|---|"]
    for k in ARMS:
        a, s = f["arms"][k], sent[k]
        md.append(f"| {k} | {f['windows'][k]} | {a['n']} | {a.get('p50_us', float('nan')):.0f} / "
                  f"{a.get('p99_us', float('nan')):.0f} | {s['n']} | {s.get('p50_us', float('nan')):.0f} / "
                  f"{s.get('p99_us', float('nan')):.0f} |")
    md += ["", f"d = p50(other) - p50(fifo) of SIGNAL written: {f.get('d_us', '-')} µs, 95 % interval "
           f"{f.get('ci_us', '-')}; A/A {f.get('aa_d_us', '-')} µs, interval {f.get('aa_ci_us', '-')}.", "",
           f"**Verdict: {f['verdict']}** ({f['why']}; rule fixed before the run, bench.pipeline_sched)."]
    report.write(out_dir, {"machine": machine, "rounds": rounds, "window_s": window_s, "priority": priority,
                           "model": model, "source": source, "signal": f, "order_sent": sent, "spans": m["spans"]}, md)
    return {"FIFO FASTER": 0, "FIFO SLOWER": 1}.get(f["verdict"], 3)
