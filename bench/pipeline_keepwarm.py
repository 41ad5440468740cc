"""Keep-warm's cost and benefit at each offered rate: the default config with and without ``keep_warm_us``.

``python -m bench.pipeline --keep-warm 50,200,1000 [--seconds 6] [--model shipped]``

The default config gives the hot-path stages ``keep_warm_us = 2000``: after 2 ms without a message the
runner wakes a parked stage to run its code on a dummy message, so that the next real one finds its
caches and branch predictors warm. Below ~500 messages/s a stage idles longer than that between
messages and keep-warm runs; above, it never does. For each offered rate (one instrument, the venue's
synthetic market), four runs in the order warm, cold, cold, warm (ABBA: a drift over the sweep lands on
both arms alike): ``warm`` the default config, ``cold`` the same with keep-warm off on every process
(``Scenario.warm = False``).

STATISTIC AND VERDICT RULE, fixed on 2026-12-01 before any run of this measurement was looked at:

* benefit: the fast path's SIGNAL latency (frame received -> SIGNAL written), pooled per arm over its
  two runs; d = p50(cold) - p50(warm) in µs with a 95 % percentile-bootstrap interval; an A/A control:
  the two warm runs against each other, the same interval; fewer than 10 SIGNALs in a run:
  INCONCLUSIVE.
* the verdict: ``bench.report.ab_judged``'s rule, as amended on 2026-12-07 (issue #36): each run cut
  into windows of ``WINDOW_S`` by the SIGNALs' stamps, the intervals resample whole windows
  (``bench.report.window_diff_ci``), not samples; KEEP-WARM HELPS / HURTS only when d's interval
  excludes 0 and the A/A interval (taken both ways round), else INCONCLUSIVE. (Until then the
  intervals resampled samples and the A/A control only had to hold 0.)
* cost: the CPU the pipeline's processes took (the venue's excluded), % of a core, mean of each arm's
  two runs; reported, not judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from bench import report
from bench.pipeline_config import Scenario
from pipeline.trading.messages import Kind

ARMS = ("warm", "cold")
ORDER = ("warm", "cold", "cold", "warm")  # ABBA per rate
MIN_SIGNALS = 10
WINDOW_S = 1.0  # the windows a run is cut into for the bootstrap


# ------------------------------------------------------------------------------------- pure
def plan(rates: list[int], seconds: float, model: str) -> list[Scenario]:
    """Four scenarios per rate, in ``ORDER``, named ``kw-<rate>-<arm>-<1|2>``."""
    out = []
    for r in rates:
        seen = dict.fromkeys(ARMS, 0)
        for arm in ORDER:
            seen[arm] += 1
            out.append(Scenario(f"kw-{r}-{arm}-{seen[arm]}", r, seconds=seconds, warm=arm == "warm", model=model))
    return out


def split_windows(lat_ns: np.ndarray, at_ns: np.ndarray, window_s: float = WINDOW_S) -> list[np.ndarray]:
    """A run's latencies cut into consecutive windows of ``window_s`` from its first stamp (``at_ns``);
    empty windows left out."""
    if not lat_ns.size:
        return []
    k = ((at_ns - at_ns.min()) // int(window_s * 1e9)).astype(np.int64)
    return [lat_ns[k == i] for i in np.unique(k)]


def judge(runs: dict[str, list[list[np.ndarray]]]) -> dict:
    """The rule of the module docstring on one rate's SIGNAL latencies (ns), ``runs``: arm -> its two
    runs in order, each a list of its windows' latency arrays (``split_windows``)."""
    flat = {k: [np.concatenate(r) if r else np.zeros(0, np.int64) for r in v] for k, v in runs.items()}
    arm = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in flat.items()}
    out = {"n": {k: int(v.size) for k, v in arm.items()},
           "p50_us": {k: float(np.median(v)) / 1e3 if v.size else None for k, v in arm.items()},
           "windows": {k: [len(r) for r in v] for k, v in runs.items()}}
    if min(x.size for v in flat.values() for x in v) < MIN_SIGNALS or any(len(v) != 2 for v in runs.values()):
        return {**out, "verdict": "INCONCLUSIVE", "why": f"fewer than {MIN_SIGNALS} SIGNALs in a run"}
    return out | report.ab_judged([w for r in runs["cold"] for w in r], [w for r in runs["warm"] for w in r],
                                  tuple(runs["warm"]), ("KEEP-WARM HELPS", "KEEP-WARM HURTS"), "p50(cold) - p50(warm)")


def pipeline_cpu_pct(result: dict) -> float:
    """The CPU of a run's processes but the venue, % of a core."""
    return round(sum(p["cpu_pct"] for n, p in result["processes"].items() if n != "venue"), 1)


# ------------------------------------------------------------------------------------- measured
def main(rates: list[int], seconds: float, out: Path | None, model: str, run_scenario: Callable[..., dict]) -> int:
    """Run ``plan`` through ``run_scenario`` (``bench.pipeline``'s), judge each rate, write
    ``results.json`` and ``report.md``; 0 when every rate has a verdict other than INCONCLUSIVE, else 3."""
    out_dir, machine = report.start("keepwarm", out)
    per_rate: dict[int, dict] = {r: {"lat": {k: [] for k in ARMS}, "cpu": {k: [] for k in ARMS}} for r in rates}
    for sc in plan(rates, seconds, model):
        res = run_scenario(sc, raw_taps=("fast",))
        fast = res.pop("raw").get("fast")
        arm = "warm" if sc.warm else "cold"
        sig = fast[fast["code"] == Kind.SIGNAL] if fast is not None else None
        lat = sig["lat_ns"] if sig is not None else np.zeros(0, np.int64)
        per_rate[sc.rate]["lat"][arm].append(split_windows(lat, sig["at_ns"]) if sig is not None else [])
        per_rate[sc.rate]["cpu"][arm].append(pipeline_cpu_pct(res))
        print(f"{sc.name}: {lat.size} SIGNALs, p50 {np.median(lat) / 1e3 if lat.size else float('nan'):.0f} µs, "
              f"pipeline CPU {per_rate[sc.rate]['cpu'][arm][-1]} %", flush=True)
    rows, results = [], {}
    for r in rates:
        f = judge(per_rate[r]["lat"])
        cpu = {k: round(float(np.mean(v)), 1) for k, v in per_rate[r]["cpu"].items()}
        results[r] = {**f, "cpu_pct": cpu}
        p50 = f["p50_us"]
        rows.append(f"| {r:,} | {p50['warm'] or float('nan'):.0f} / {p50['cold'] or float('nan'):.0f} | "
                    f"{f.get('d_us', '-')} {f.get('ci_us', '')} | {f.get('aa_d_us', '-')} {f.get('aa_ci_us', '')} | "
                    f"{cpu['warm']} / {cpu['cold']} | **{f['verdict']}** |")
    md = [f"# Keep-warm A/B {machine['date']}", "", report.machine_line(machine),
          f"The default config with keep_warm_us (warm) and without (cold), 4 runs of {seconds:g} s per rate "
          f"(warm, cold, cold, warm), one instrument, the fast stage on the {model} model.", "",
          "| offered updates/s | SIGNAL p50 warm / cold µs | d = cold - warm µs [95 %] | A/A warm-warm µs [95 %] | "
          "pipeline CPU warm / cold % of a core | verdict |", "|---|---|---|---|---|---|", *rows, "",
          f"Rule (bench.pipeline_keepwarm, bench.report.ab_judged; amended 2026-12-07): each run cut into "
          f"{WINDOW_S:g} s windows, intervals resampling windows; KEEP-WARM HELPS / HURTS when d's interval is "
          "above / below 0 and clear of the A/A interval taken both ways round; else INCONCLUSIVE. "
          "CPU: reported, not judged."]
    report.write(out_dir, {"machine": machine, "rates": rates, "seconds": seconds, "model": model,
                           "results": results}, md)
    return 0 if all(v["verdict"] != "INCONCLUSIVE" for v in results.values()) else 3
