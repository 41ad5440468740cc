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
  two runs; d = p50(cold) - p50(warm) in µs with a 95 % percentile-bootstrap interval (2,000
  resamples, seed 1; ``bench.report.median_diff_ci``); an A/A control: the two warm runs against each
  other, the same interval; when it excludes 0 the verdict is INCONCLUSIVE; else KEEP-WARM HELPS when
  d's interval is above 0, KEEP-WARM HURTS when below, INCONCLUSIVE when it holds 0; fewer than 10
  SIGNALs in a run: INCONCLUSIVE.
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


def judge(runs: dict[str, list[np.ndarray]]) -> dict:
    """The rule of the module docstring on one rate's SIGNAL latencies (ns), ``runs``: arm -> its two
    runs' arrays in order."""
    arm = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in runs.items()}
    out = {"n": {k: int(v.size) for k, v in arm.items()},
           "p50_us": {k: float(np.median(v)) / 1e3 if v.size else None for k, v in arm.items()}}
    if min(x.size for v in runs.values() for x in v) < MIN_SIGNALS or any(len(v) != 2 for v in runs.values()):
        return {**out, "verdict": "INCONCLUSIVE", "why": f"fewer than {MIN_SIGNALS} SIGNALs in a run"}
    return out | report.ab_judged(arm["cold"], arm["warm"], tuple(runs["warm"]), ("KEEP-WARM HELPS", "KEEP-WARM HURTS"),
                                  "p50(cold) - p50(warm)")


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
        lat = fast["lat_ns"][fast["code"] == Kind.SIGNAL] if fast is not None else np.zeros(0, np.int64)
        per_rate[sc.rate]["lat"][arm].append(lat)
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
          "Rule fixed before the run (bench.pipeline_keepwarm): KEEP-WARM HELPS / HURTS when d's interval is "
          "above / below 0 and the A/A interval holds 0; else INCONCLUSIVE. CPU: reported, not judged."]
    report.write(out_dir, {"machine": machine, "rates": rates, "seconds": seconds, "model": model,
                           "results": results}, md)
    return 0 if all(v["verdict"] != "INCONCLUSIVE" for v in results.values()) else 3
