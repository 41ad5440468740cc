"""The fast path's p99 criterion of ``llm_faults`` (``bench.chaos.llm_faults``): the statistic
(``window_p99s``, ``trimmed_gmean``), the three-valued verdict rule (``p99_verdict``) at a fine limit
and at a gross one (``gross_verdict``), and the two combined (``worst``).

STATISTIC AND VERDICT RULE, FIXED AS OF 2026-12-01 (issue #19), before
the results of any run judged by them; they must not be changed after seeing results (the statistic
was changed six times after failing runs before this; a change now needs its own issue, argued and
decided before the runs it is to judge):

* Statistic (``window_p99s``, ``trimmed_gmean``): the fast path's SIGNAL p99 (latency tap: frame
  received -> SIGNAL written, each SIGNAL once) in each of short interleaved windows (30 rounds of
  2 s: idle, garbage, idle, timeout, idle, slow; quick: 2 rounds of 1 s); a condition's figure is
  the geometric mean of its windows' p99s without the lowest and the highest tenth of them
  (``int(n / 10)`` at each end, none below ten windows); a fault's ratio is its figure over idle's.
  Limit: every fault's ratio <= 1.10 (``P99_LIMIT``). A/A control: idle's windows split alternately
  into two halves, the ratio of the two halves' figures (``idle_aa``).
* Verdict (``p99_verdict``), with s = max(A/A, 1 / A/A), the machine's own idle-against-idle
  deviation in the same run:
    - FAIL when a fault's ratio or the A/A ratio is not a finite positive number (nothing
      measured is neither a pass nor the machine's noise);
    - when s <= 1.05 (``AA_BAND``: the machine resolves the limit, its own deviation within half
      the 10 % margin): PASS when every fault's ratio <= 1.10, else FAIL;
    - when s > 1.05 (it does not resolve the limit): FAIL when some fault's ratio > 1.10 * s (over
      the limit by more than the machine's own deviation), PASS when every fault's ratio <=
      1.10 / s (under it by more), else INCONCLUSIVE, reported as such (never as a pass).
  The scenario's verdict is FAIL when a safety check failed, else ``worst`` of this verdict and the
  gross one below.

GROSS LIMIT, FIXED AS OF 2026-12-07 (issue #36), before the result of any run judged by it: the quick
run's two windows per condition cannot resolve 1.10x, but they can resolve a fast path stalled to
twice its idle p99. ``gross_verdict`` is ``p99_verdict``'s rule with limit 2.0 (``GROSS_LIMIT``) and
A/A band 1.25 (``GROSS_AA_BAND``), and no fewer than 2 windows per condition (``GROSS_MIN_WINDOWS``;
fewer: INCONCLUSIVE): with s = max(A/A, 1 / A/A), s <= 1.25: PASS when every fault's ratio <= 2.0,
else FAIL; s > 1.25: FAIL when some ratio > 2.0 * s, PASS when every ratio <= 2.0 / s, else
INCONCLUSIVE. It is judged in every run, quick and full; in quick mode the fine verdict is
INCONCLUSIVE by its window precondition and is reported as such, never as a pass. ``worst`` of the
two: FAIL when either is FAIL, else INCONCLUSIVE when either is, else PASS (a fine PASS implies a
gross PASS, so a full run's verdict is the fine one unless the gross limit fails where the fine one
could not be resolved).

Reported beside it, not judged: the median of each condition's window p99s, the pooled p99 of all
its windows (one burst of host noise moves it: in four runs of one build it put garbage at
0.94-1.11x, timeout at 0.92-1.18x, slow at 0.85-1.21x), and 10 s phases judged A/B/A against the
idle phases on either side (a noise floor of 15-30 % between the run's own idle phases: why the
judged figure uses interleaved windows, so the machine's drift lands on every condition alike).
Why this statistic (chosen 2026-11-30): one window's p99 here moves between ~0.7x and ~1.8x of
the median; resampling six twenty-round runs gave the trimmed geometric mean a standard error of
the log ratio of 0.055 against 0.073 for the median of the windows (~4.6 % over thirty rounds).
A fresh breaker in each window keeps the faulty LLM working the whole time, the harsher case.
"""

from __future__ import annotations

import numpy as np

from bench import report
from bench.chaos.harness import FAIL, INCONCLUSIVE, PASS


def p99_us(lat_ns: np.ndarray) -> float:
    """The p99 of nanosecond latencies in µs, from an HdrHistogram (``bench.report.hdr_us``); NaN for none."""
    return report.hdr_us(lat_ns, (99.0,))[0]


#: the share of a condition's windows left out at each end before the judged mean (the bursts)
TRIM_SHARE = 0.1


def trimmed_gmean(values) -> float:
    """The geometric mean of ``values`` (> 0) without the lowest and the highest ``TRIM_SHARE`` of them
    (``int(n * TRIM_SHARE)`` at each end); nan values are left out first; nan when none is left."""
    v = np.sort(np.asarray([x for x in values if x == x], float))
    k = int(v.size * TRIM_SHARE)
    v = v[k : v.size - k]
    return float(np.exp(np.log(v).mean())) if v.size else float("nan")


def window_p99s(at_ns: np.ndarray, lat_ns: np.ndarray, spans: dict[str, list[tuple[int, int]]]) -> dict:
    """The p99 judgement on interleaved windows: per condition, the p99 (µs) of each of its windows
    (samples whose ``at_ns`` falls in it) and their ``trimmed_gmean`` (``judged_us``; the median is
    reported beside it, ``median_us``); per fault condition (every key but ``idle``), that mean over
    idle's (``ratio``); and an A/A control, idle's windows split alternately into two halves, the
    ratio of their means (``idle_aa``): how far two samples of the same condition differ here.

    Why this statistic: a burst of the host's noise moves one window's p99 (and the pooled p99 of a
    condition with it), so the bursts at either end are left out, while a load a fault adds shows in
    every window. Of the statistics compared that do that, the mean of the log p99s trimmed by a
    tenth resolves the most: resampling the rounds of six twenty-round runs (2026-11-30) gave a
    standard error of the log ratio of 0.055 for it, 0.059 trimmed by a fifth, 0.073 for the median
    of the windows' p99s (0.050 untrimmed, which one burst window moves)."""
    per = {m: [p99_us(lat_ns[(at_ns >= a) & (at_ns < b)]) for a, b in sp] for m, sp in spans.items()}
    judged = {m: trimmed_gmean(v) for m, v in per.items()}
    med = {m: float(np.nanmedian(v)) if v and not all(x != x for x in v) else float("nan") for m, v in per.items()}
    idle = judged.get("idle", float("nan"))
    ok = idle == idle and idle > 0
    ratio = {m: judged[m] / idle if ok else float("nan") for m in per if m != "idle"}
    iv = per.get("idle", [])
    a, b = iv[0::2], iv[1::2]
    aa = trimmed_gmean(a) / trimmed_gmean(b) if a and b else float("nan")
    return {"windows_us": per, "judged_us": judged, "median_us": med, "ratio": ratio, "idle_aa": aa}


#: the limit on a fault condition's judged p99 ratio to idle's (fixed 2026-12-01: see the module docstring)
P99_LIMIT = 1.10
#: the A/A deviation up to which the machine is taken to resolve ``P99_LIMIT`` (half its margin)
AA_BAND = 1.05
#: the fewest windows per condition with which the statistic can resolve ``P99_LIMIT`` (docstring)
MIN_WINDOWS = 10
#: the gross limit every run is judged at, quick ones included (fixed 2026-12-07: see the module docstring)
GROSS_LIMIT = 2.0
#: the A/A deviation up to which the machine is taken to resolve ``GROSS_LIMIT``
GROSS_AA_BAND = 1.25
#: the fewest windows per condition with which the statistic can resolve ``GROSS_LIMIT``
GROSS_MIN_WINDOWS = 2


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and x == x and 0 < x < float("inf")


def p99_verdict(ratios: dict[str, float], idle_aa: float, limit: float = P99_LIMIT,
                band: float = AA_BAND, windows: int | None = None,
                min_windows: int = MIN_WINDOWS) -> tuple[str, str]:
    """(verdict, why) of the fast path's p99 criterion from each fault's judged ratio to idle and the
    A/A control, by the rule fixed in the module docstring (2026-12-01): FAIL when anything is not a
    finite positive number; fewer than ``min_windows`` windows per condition (``windows``, None:
    enough): INCONCLUSIVE; with s = max(aa, 1 / aa): s <= ``band``: PASS iff every ratio <= ``limit``;
    s > ``band``: FAIL when some ratio > limit * s, PASS when every ratio <= limit / s, else
    INCONCLUSIVE. ``why`` names the rule's branch and the figures."""
    figs = ", ".join(f"{m} {r:.3f}x" for m, r in ratios.items()) + f"; A/A {idle_aa:.3f}x"
    bad = [m for m, r in ratios.items() if not _finite_positive(r)]
    if not ratios or bad or not _finite_positive(idle_aa):
        return FAIL, f"not measured ({', '.join(bad) or ('A/A' if ratios else 'no fault condition')}): {figs}"
    if windows is not None and windows < min_windows:
        return INCONCLUSIVE, (f"{windows} windows per condition, fewer than the {min_windows} that resolve "
                              f"{limit:g}: {figs}")
    s = max(idle_aa, 1 / idle_aa)
    worst = max(ratios, key=ratios.get)
    if s <= band:
        if ratios[worst] <= limit:
            return PASS, f"A/A within [1/{band:g}, {band:g}] and every ratio <= {limit:g}: {figs}"
        return FAIL, f"A/A within [1/{band:g}, {band:g}] and {worst} over {limit:g}: {figs}"
    if ratios[worst] > limit * s:
        return FAIL, f"A/A outside [1/{band:g}, {band:g}] but {worst} over {limit:g} x {s:.3f} = {limit * s:.3f}: {figs}"
    if ratios[worst] <= limit / s:
        return PASS, f"A/A outside [1/{band:g}, {band:g}] but every ratio <= {limit:g} / {s:.3f} = {limit / s:.3f}: {figs}"
    return INCONCLUSIVE, (f"A/A outside [1/{band:g}, {band:g}]: the machine does not resolve {limit:g} in this run "
                          f"({worst} between {limit / s:.3f} and {limit * s:.3f}): {figs}")


def gross_verdict(ratios: dict[str, float], idle_aa: float, windows: int | None = None) -> tuple[str, str]:
    """(verdict, why) at the gross limit (module docstring, 2026-12-07): ``p99_verdict`` with
    ``GROSS_LIMIT``, ``GROSS_AA_BAND`` and ``GROSS_MIN_WINDOWS``."""
    return p99_verdict(ratios, idle_aa, limit=GROSS_LIMIT, band=GROSS_AA_BAND, windows=windows,
                       min_windows=GROSS_MIN_WINDOWS)


def worst(*verdicts: str) -> str:
    """FAIL when any of ``verdicts`` is FAIL, else INCONCLUSIVE when any is, else PASS (none: FAIL)."""
    for v in (FAIL, INCONCLUSIVE):
        if v in verdicts:
            return v
    return PASS if verdicts and all(v == PASS for v in verdicts) else FAIL
