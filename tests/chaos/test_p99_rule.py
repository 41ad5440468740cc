"""The fast path's p99 criterion of ``llm_faults`` (``bench.chaos.p99_rule``): the windowed statistic and
the verdict rule fixed on 2026-12-01."""

from __future__ import annotations

import numpy as np
import pytest

from bench.chaos.harness import FAIL, INCONCLUSIVE, PASS
from bench.chaos.p99_rule import (AA_BAND, GROSS_AA_BAND, GROSS_LIMIT, GROSS_MIN_WINDOWS, P99_LIMIT, gross_verdict,
                                  p99_us, p99_verdict, trimmed_gmean, window_p99s, worst)


def _samples(spans_ms: dict, lat_us_of) -> tuple[np.ndarray, np.ndarray, dict]:
    """One sample a millisecond in each window, latency ``lat_us_of(mode, window index, i)`` µs."""
    at, lat, spans = [], [], {}
    for mode, windows in spans_ms.items():
        spans[mode] = []
        for k, (a, b) in enumerate(windows):
            spans[mode].append((a * 1_000_000, b * 1_000_000))
            for i, t in enumerate(range(a, b)):
                at.append(t * 1_000_000)
                lat.append(lat_us_of(mode, k, i) * 1000)
    return np.array(at, np.int64), np.array(lat, np.int64), spans


# ten windows a condition, interleaved: idle, garbage, idle, garbage, ...
WINDOWS = {"idle": [(2000 * k, 2000 * k + 1000) for k in range(10)],
           "garbage": [(2000 * k + 1000, 2000 * k + 2000) for k in range(10)]}


def _steady(mode, k, i):  # p99 of every window: 100 µs (the top 2 % at 100, the rest at 50)
    return 100 if i % 50 == 0 else 50


def test_window_judgement_leaves_out_a_tenth_of_burst_windows_and_sees_a_load_in_every_window():
    def burst(mode, k, i):  # garbage's second window: a host stall makes its p99 ten times higher
        return 1000 if (mode == "garbage" and k == 1 and i % 5 == 0) else _steady(mode, k, i)

    def loaded(mode, k, i):  # every garbage window 20 % slower
        return _steady(mode, k, i) * (1.2 if mode == "garbage" else 1.0)

    got = window_p99s(*_samples(WINDOWS, burst))
    # (p99s from an HdrHistogram of 3 significant digits: equal to the recorded values within 0.1 %)
    assert got["windows_us"]["garbage"][1] == pytest.approx(1000.0, rel=1e-3)
    assert got["ratio"]["garbage"] == pytest.approx(1.0, rel=1e-3)
    # the pooled p99 of the same samples is moved by the one window: what the trimming is for
    at, lat, spans = _samples(WINDOWS, burst)
    g = np.zeros(at.size, bool)
    for a, b in spans["garbage"]:
        g |= (at >= a) & (at < b)
    assert p99_us(lat[g]) / p99_us(lat[~g]) > 5
    got = window_p99s(*_samples(WINDOWS, loaded))
    assert got["ratio"]["garbage"] == pytest.approx(1.2, rel=1e-3) and got["idle_aa"] == pytest.approx(1.0, rel=1e-3)
    assert got["judged_us"] == pytest.approx({"idle": 100.0, "garbage": 120.0}, rel=1e-3)


def test_window_judgement_of_two_burst_windows_in_ten_is_moved_by_the_one_past_the_trim():
    def two_bursts(mode, k, i):  # garbage's windows 1 and 2 ten times higher: one is trimmed, one counts
        return 1000 if (mode == "garbage" and k in (1, 2) and i % 5 == 0) else _steady(mode, k, i)

    got = window_p99s(*_samples(WINDOWS, two_bursts))
    # (eight windows kept: seven at 100 µs and one at 1000) -> 100 * 10 ** (1 / 8)
    assert got["ratio"]["garbage"] == pytest.approx(10 ** (1 / 8), rel=1e-3)
    assert got["median_us"]["garbage"] == pytest.approx(100.0, rel=1e-3)


def test_trimmed_gmean_leaves_out_int_n_tenths_at_each_end_and_nan_values():
    assert trimmed_gmean([1.0, 100.0]) == pytest.approx(10.0)  # n < 10: nothing left out
    assert trimmed_gmean([0.001] + [4.0] * 8 + [1e9]) == pytest.approx(4.0)
    assert trimmed_gmean([float("nan"), 2.0, 8.0]) == pytest.approx(4.0)
    assert trimmed_gmean([]) != trimmed_gmean([])  # nan


def test_window_judgement_of_no_samples_is_nan_not_a_pass():
    got = window_p99s(np.array([], np.int64), np.array([], np.int64), {"idle": [(0, 1)], "slow": [(1, 2)]})
    assert got["ratio"]["slow"] != got["ratio"]["slow"]  # nan: "<= 1.10" is False


# -------------------------------------------------------------------------------- the p99 verdict (fixed 2026-12-01)
def test_the_p99_rule_is_the_one_fixed_in_the_docstring():
    assert (P99_LIMIT, AA_BAND) == (1.10, 1.05)


@pytest.mark.parametrize("ratios,aa,want", [
    # the machine resolves the limit (A/A within [1/1.05, 1.05]): the point figures decide
    ({"garbage": 1.00, "timeout": 1.04, "slow": 1.10}, 1.00, PASS),
    ({"garbage": 0.90, "timeout": 1.02, "slow": 1.0}, 1 / 1.049, PASS),
    ({"garbage": 1.00, "timeout": 1.11, "slow": 1.0}, 0.97, FAIL),
    ({"garbage": 1.00, "timeout": 1.00, "slow": 3.0}, 1.04, FAIL),
    # it does not (A/A 1.08): decided only farther from the limit than that deviation
    ({"garbage": 1.00, "timeout": 1.05, "slow": 1.0}, 1.08, INCONCLUSIVE),  # 1.05 in (1.10 / 1.08, 1.10 * 1.08]
    ({"garbage": 1.00, "timeout": 1.18, "slow": 1.0}, 1.08, INCONCLUSIVE),  # 1.18 <= 1.188
    ({"garbage": 1.00, "timeout": 1.19, "slow": 1.0}, 1.08, FAIL),  # 1.19 > 1.188
    ({"garbage": 1.00, "timeout": 1.01, "slow": 0.95}, 1.08, PASS),  # all <= 1.0185
    ({"garbage": 1.00, "timeout": 1.00, "slow": 1.00}, 0.80, INCONCLUSIVE),  # s = 1.25: 1.00 > 0.88
    ({"garbage": 2.00, "timeout": 1.00, "slow": 1.00}, 0.80, FAIL),  # 2.00 > 1.375
    # nothing measured is never a pass, nor the machine's noise
    ({"garbage": float("nan"), "timeout": 1.0, "slow": 1.0}, 1.0, FAIL),
    ({"garbage": 1.0, "timeout": 1.0, "slow": 1.0}, float("nan"), FAIL),
    ({"garbage": 1.0, "timeout": 0.0, "slow": 1.0}, 1.0, FAIL),
    ({}, 1.0, FAIL),
])
def test_p99_verdict_is_pass_fail_or_inconclusive_by_the_fixed_rule(ratios, aa, want):
    got, why = p99_verdict(ratios, aa)
    assert got == want, why
    if got == INCONCLUSIVE:
        assert "A/A outside" in why  # only when the A/A control shows the machine cannot resolve the limit


def test_fewer_than_ten_windows_per_condition_is_inconclusive_whatever_the_figures():
    for ratios, aa in (({"garbage": 0.9}, 1.0), ({"garbage": 3.0}, 1.0), ({"garbage": 1.0}, 1.5)):
        got, why = p99_verdict(ratios, aa, windows=2)
        assert got == INCONCLUSIVE and "fewer than the 10" in why
    assert p99_verdict({"garbage": 3.0}, 1.0, windows=10)[0] == FAIL  # enough windows: judged
    assert p99_verdict({"garbage": float("nan")}, 1.0, windows=2)[0] == FAIL  # nothing measured


# ------------------------------------------------------------------------ the gross limit (fixed 2026-12-07)
def test_the_gross_limit_is_the_one_fixed_in_the_docstring():
    assert (GROSS_LIMIT, GROSS_AA_BAND, GROSS_MIN_WINDOWS) == (2.0, 1.25, 2)


@pytest.mark.parametrize("ratios,aa,want", [
    # A/A within [1/1.25, 1.25]: the point figures decide against 2.0
    ({"garbage": 1.00, "timeout": 1.90, "slow": 2.00}, 1.00, PASS),
    ({"garbage": 1.00, "timeout": 1.00, "slow": 2.01}, 1.00, FAIL),
    ({"garbage": 1.00, "timeout": 10.0, "slow": 1.00}, 1.00, FAIL),  # a fast path stalled 10x
    ({"garbage": 1.99, "timeout": 1.00, "slow": 1.00}, 1.24, PASS),
    ({"garbage": 2.10, "timeout": 1.00, "slow": 1.00}, 1 / 1.24, FAIL),
    # A/A 1.5 (outside): FAIL over 2.0 * 1.5 = 3.0, PASS under 2.0 / 1.5 = 1.333, INCONCLUSIVE between
    ({"garbage": 3.01, "timeout": 1.00, "slow": 1.00}, 1.5, FAIL),
    ({"garbage": 3.00, "timeout": 1.00, "slow": 1.00}, 1.5, INCONCLUSIVE),
    ({"garbage": 1.40, "timeout": 1.00, "slow": 1.00}, 1 / 1.5, INCONCLUSIVE),
    ({"garbage": 1.30, "timeout": 1.00, "slow": 1.00}, 1.5, PASS),
    # nothing measured
    ({"garbage": float("nan"), "timeout": 1.0, "slow": 1.0}, 1.0, FAIL),
    ({"garbage": 1.0, "timeout": 1.0, "slow": 1.0}, float("inf"), FAIL),
])
def test_the_gross_verdict_of_two_windows_a_condition_is_pass_fail_or_inconclusive_by_the_fixed_rule(ratios, aa, want):
    got, why = gross_verdict(ratios, aa, windows=2)
    assert got == want, why
    if got == INCONCLUSIVE:
        assert "A/A outside" in why  # only when the A/A control shows the machine cannot resolve 2.0


def test_two_windows_a_condition_judge_a_stall_at_the_gross_limit_the_fine_one_cannot():
    # the quick run's case: the fine verdict is INCONCLUSIVE whatever the figures, the gross one is not
    stalled = {"garbage": 1.0, "timeout": 1.0, "slow": 10.0}
    assert p99_verdict(stalled, 1.0, windows=2)[0] == INCONCLUSIVE
    assert gross_verdict(stalled, 1.0, windows=2)[0] == FAIL
    assert gross_verdict({"garbage": 1.5}, 1.0, windows=2)[0] == PASS  # within 2x: not the fine limit's FAIL
    got, why = gross_verdict(stalled, 1.0, windows=1)  # one window: not even the A/A control has two halves
    assert got == INCONCLUSIVE and "fewer than the 2" in why


@pytest.mark.parametrize("verdicts,want", [
    ((PASS, PASS), PASS), ((PASS, INCONCLUSIVE), INCONCLUSIVE), ((INCONCLUSIVE, PASS), INCONCLUSIVE),
    ((INCONCLUSIVE, FAIL), FAIL), ((FAIL, PASS), FAIL), ((PASS, "?"), FAIL), ((), FAIL),
])
def test_the_scenario_takes_the_worse_of_the_fine_and_the_gross_verdicts(verdicts, want):
    assert worst(*verdicts) == want


def test_a_fine_pass_is_a_gross_pass_at_any_a_a():
    # so a full run's verdict is the fine one unless the gross limit fails where the fine one is unresolved
    for aa in (0.7, 0.9, 1.0, 1.04, 1.06, 1.2, 1.3, 1.6):
        for r in (0.5, 0.9, 1.0, 1.05, 1.1):
            ratios = {"garbage": r}
            if p99_verdict(ratios, aa)[0] == PASS:
                assert gross_verdict(ratios, aa)[0] == PASS, (r, aa)
