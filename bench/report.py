"""What the benches share: where results go, the machine line, the HdrHistogram percentiles
(``hdr_us``, ``percentiles_us``, ``hdr_summary``), writing results.json + report.md (the table also
printed), the placement lines of a bench config, and running a pipeline config for a while."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]
#: the percentiles of ``hdr_summary``'s curve (the plots' percentile curves)
CURVE_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100)


def start(name: str, out: Path | None) -> tuple[Path, dict]:
    """The output folder (``out``, or ``bench/results/<UTC stamp>-<name>``, created) and the
    machine facts recorded beside the figures."""
    stamp = dt.datetime.now(dt.timezone.utc)
    out_dir = out or RESULTS / (stamp.strftime("%Y%m%dT%H%M%SZ") + f"-{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "load_avg": os.getloadavg(), "date": stamp.isoformat(timespec="seconds")}
    return out_dir, machine


def machine_line(machine: dict) -> str:
    return (f"Machine: {machine['cores']} cores, Python {machine['python']}, {machine['platform']}, "
            f"load {machine['load_avg']}.")


def hdr_us(ns, percentiles=(50.0, 99.0)) -> list[float]:
    """The ``percentiles`` of nanosecond timings in µs, from an HdrHistogram (1 ns to 60 s, 3
    significant digits: within 0.1 % of the recorded value; a value under 1 ns counts as 1 ns), as
    every latency percentile the benches and chaos report. NaN each when there is no timing."""
    vals = np.asarray(ns, dtype=np.int64).ravel()
    if vals.size == 0:
        return [float("nan")] * len(percentiles)
    h = _histogram(np.clip(vals, 1, 60_000_000_000).tolist())
    return [h.get_value_at_percentile(q) / 1000.0 for q in percentiles]


def hdr_summary(lat_ns, curve: tuple = CURVE_PERCENTILES) -> dict:
    """HdrHistogram (1 ns to 60 s, 3 significant digits) of nanosecond timings: n, p50 / p99 / p99.9 /
    max in µs and the percentile ``curve`` ([[q, µs], ...]); ``{"n": 0}`` for none. Every percentile
    bench.pipeline and bench.fast report comes from here (a value under 1 ns is recorded as 1 ns; one
    over 60 s is not recorded, but counted in n)."""
    vals = np.asarray(lat_ns, dtype=np.int64).ravel()
    if vals.size == 0:
        return {"n": 0}
    h = _histogram(np.maximum(vals, 1).tolist())
    out = {"n": int(vals.size), "p50_us": h.get_value_at_percentile(50) / 1000,
           "p99_us": h.get_value_at_percentile(99) / 1000, "p999_us": h.get_value_at_percentile(99.9) / 1000,
           "max_us": h.get_max_value() / 1000, "percentiles": "HdrHistogram"}
    if curve:
        out["curve"] = [[q, h.get_value_at_percentile(q) / 1000] for q in curve]
    return out


def _histogram(values: list[int]):
    """An HdrHistogram of 1 ns to 60 s, 3 significant digits, with each of ``values`` recorded."""
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram(1, 60_000_000_000, 3)
    for v in values:
        h.record_value(v)
    return h


def percentiles_us(ns) -> dict:
    """p50 / p99 in µs (HdrHistogram, ``hdr_us``) and the sample count of nanosecond timings."""
    p50, p99 = hdr_us(ns)
    return {"p50_us": p50, "p99_us": p99, "n": int(np.asarray(ns).size), "percentiles": "HdrHistogram"}


BOOTSTRAP = 2_000  # resamples of the A/B benches' bootstrap intervals
#: the fewest windows an arm, and each half of the A/A control, with which ``ab_judged`` gives a verdict
AB_MIN_WINDOWS = 2


def median_diff_ci(before_ns: np.ndarray, after_ns: np.ndarray, n: int = BOOTSTRAP) -> tuple[float, float, float]:
    """(p50(before) - p50(after), the 95 % percentile-bootstrap interval's ends), in µs, each sample
    resampled as if independent of the others. Not the A/B rule's (``ab_judged`` resamples windows:
    ``window_diff_ci``); for a bench whose two arms alternate one sample at a time."""
    rng = np.random.default_rng(1)
    d = [np.median(rng.choice(before_ns, before_ns.size)) - np.median(rng.choice(after_ns, after_ns.size))
         for _ in range(n)]
    lo, hi = np.percentile(d, [2.5, 97.5])
    return (float(np.median(before_ns) - np.median(after_ns)) / 1e3, float(lo) / 1e3, float(hi) / 1e3)


def window_diff_ci(a_windows, b_windows, n: int = BOOTSTRAP) -> tuple[float, float, float]:
    """(the median of ``a_windows``' values pooled - the same of ``b_windows``, the 95 %
    percentile-bootstrap interval's ends), in the values' unit. Each argument is a list of windows,
    each window an array of values (a window's samples, or its one p50); a resample draws each arm's
    windows with replacement as whole blocks (2,000 resamples, seed 1), so samples of one window,
    which move together, are never taken as independent. A window of one value each: the median of
    the windows' values, resampled over windows. nan each when an arm has no value."""
    a = [np.asarray(w, float).ravel() for w in a_windows]
    b = [np.asarray(w, float).ravel() for w in b_windows]
    if not sum(w.size for w in a) or not sum(w.size for w in b):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(1)
    d = [np.median(np.concatenate([a[i] for i in rng.choice(len(a), len(a))]))
         - np.median(np.concatenate([b[i] for i in rng.choice(len(b), len(b))])) for _ in range(n)]
    lo, hi = np.percentile(d, [2.5, 97.5])
    return float(np.median(np.concatenate(a)) - np.median(np.concatenate(b))), float(lo), float(hi)


def ab_verdict(ci: tuple[float, float], aa_ci: tuple[float, float], words: tuple[str, str],
               what: str) -> tuple[str, str]:
    """The A/B rule on the intervals (fixed 2026-12-07, issue #36; see ``ab_judged``): with m the A/A
    interval's largest end in size (which half of the A/A control comes first is arbitrary, so its
    interval counts both ways round: [-m, m]), ``words[0]`` when d's interval lies above m (so above
    0 and clear of the A/A interval), ``words[1]`` when it lies below -m, else INCONCLUSIVE (it holds
    0, or overlaps the A/A interval: the machine's own deviation is as large as the effect). An end
    that is not a finite number: INCONCLUSIVE. Returns (verdict, why)."""
    (lo, hi), (aa_lo, aa_hi) = ci, aa_ci
    if not all(np.isfinite(x) for x in (lo, hi, aa_lo, aa_hi)):
        return "INCONCLUSIVE", "an interval is not measured"
    m = max(abs(aa_lo), abs(aa_hi))
    if lo > m:
        return words[0], f"the interval of {what} lies above 0 and the A/A interval (|A/A| <= {m:.2f})"
    if hi < -m:
        return words[1], f"the interval of {what} lies below 0 and the A/A interval (|A/A| <= {m:.2f})"
    if lo <= 0 <= hi:
        return "INCONCLUSIVE", "the interval holds 0"
    return "INCONCLUSIVE", (f"the interval of {what} overlaps the A/A interval taken both ways round "
                            f"([-{m:.2f}, {m:.2f}]): the machine's own deviation is as large as the effect")


def ab_judged(a_windows, b_windows, aa: tuple, words: tuple[str, str], what: str) -> dict:
    """The A/B benches' rule (fixed 2026-12-07, issue #36, before any report was re-judged by it; it
    replaced one that bootstrapped over samples and only asked whether the A/A interval held 0):
    d = p50(``a_windows``) - p50(``b_windows``) in µs (nanosecond values, each argument a list of
    windows: ``window_diff_ci``), with a 95 % percentile-bootstrap interval over windows; the same for
    the A/A pair ``aa`` (two lists of windows of one arm); the verdict is ``ab_verdict``'s: ``words[0]``
    (a > b) or ``words[1]`` only when d's interval excludes 0 and the A/A interval taken both ways
    round, else INCONCLUSIVE; fewer than ``AB_MIN_WINDOWS`` windows in an arm or an A/A half:
    INCONCLUSIVE (one window's bootstrap has no spread). ``what`` names d in the reason. Returns
    d_us, ci_us, aa_d_us, aa_ci_us, verdict, why."""
    if min(len(a_windows), len(b_windows), *(len(h) for h in aa)) < AB_MIN_WINDOWS:
        return {"verdict": "INCONCLUSIVE", "why": f"fewer than {AB_MIN_WINDOWS} windows in an arm or an A/A half"}
    d, lo, hi = (x / 1e3 for x in window_diff_ci(a_windows, b_windows))
    aa_d, aa_lo, aa_hi = (x / 1e3 for x in window_diff_ci(*aa))
    out = {"d_us": round(d, 2), "ci_us": [round(lo, 2), round(hi, 2)], "aa_d_us": round(aa_d, 2),
           "aa_ci_us": [round(aa_lo, 2), round(aa_hi, 2)]}
    verdict, why = ab_verdict((lo, hi), (aa_lo, aa_hi), words, what)
    return {**out, "verdict": verdict, "why": why}


def write(out_dir: Path, results: dict, md: list[str]) -> None:
    """results.json and report.md into ``out_dir``; the report is printed too."""
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwritten to {out_dir}")


def default_place(name: str) -> str:
    """The TOML line that gives process ``name`` of a bench config the ``keep_warm_us`` the default
    config (configs/default.toml) gives it ('' when it gives none): a bench's default placement is the
    one ``make up`` runs (``auto`` core and wait, the same keep-warm)."""
    with open(REPO / "configs" / "default.toml", "rb") as f:
        procs = {p["name"]: p for p in tomllib.load(f).get("processes", [])}
    us = procs.get(name, {}).get("keep_warm_us", 0)
    return f"keep_warm_us = {us}\n" if us else ""


def placement(name: str, spin_core: int | None = None, *, warm: bool = True) -> str:
    """A bench process's placement lines: ``spin_place(spin_core)`` when a core is given, else the
    default config's (``default_place``), or nothing at all when ``warm`` is False (no keep-warm)."""
    if spin_core is not None:
        return spin_place(spin_core)
    return default_place(name) if warm else ""


def spin_place(core: int, keep_warm_us: int = 200) -> str:
    """The TOML lines of a ``[[processes]]`` entry that pin it to ``core``, busy-spinning, kept warm."""
    return f'core = {core}\nwait = "busy-spin"\nkeep_warm_us = {keep_warm_us}\n'


def run_pipeline_for(cfg: Path, seconds: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m pipeline up --run-for seconds`` on ``cfg`` (output captured), then ``down`` whatever
    happened, so no process or segment outlives the bench."""
    try:
        return subprocess.run([sys.executable, "-m", "pipeline", "--config", str(cfg), "up", "--run-for", str(seconds),
                               "--status-every", "0"], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=seconds + 120)
    finally:
        subprocess.run([sys.executable, "-m", "pipeline", "--config", str(cfg), "down"], cwd=REPO, capture_output=True,
                       timeout=60)
