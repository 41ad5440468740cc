"""The SCHED_FIFO A/B of the pipeline bench (``bench.pipeline_sched``): interleaved windows and the rule
fixed before any run (p50 difference with a bootstrap interval over windows, an A/A control the
difference must clear, INCONCLUSIVE unless resolved)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from bench.pipeline_sched import MIN_WINDOWS, judge, set_policy, window_order
from tests.support.wait import wait_until

S = 1_000_000_000


def test_windows_alternate_abba_after_a_warm_up():
    assert window_order(3) == ["warm-up", "other", "fifo", "fifo", "other", "other", "fifo"]
    assert window_order(10).count("fifo") == window_order(10).count("other") == 10


def _run(other_us: float, fifo_us: float, windows: int = 6, per: int = 100, drift_us: float = 0.0,
         offsets_us: tuple = (), sd_us: float = 5.0):
    """Latencies around each arm's level in ABBA windows of 1 s; ``drift_us`` added to every other
    'other' window (a machine that changes under the A/A halves); ``offsets_us``: the k-th window of
    each arm moved by the k-th offset (a machine whose state moves a whole window's samples)."""
    rng = np.random.default_rng(3)
    spans, at, lat = {"other": [], "fifo": []}, [], []
    for i, arm in enumerate(window_order(windows)[1:]):
        t0 = (i + 1) * S
        spans[arm].append((t0, t0 + S))
        level = other_us if arm == "other" else fifo_us
        if arm == "other" and len(spans["other"]) % 2 == 0:
            level += drift_us
        if offsets_us:
            level += offsets_us[len(spans[arm]) - 1]
        at.append(t0 + np.sort(rng.integers(0, S, per)))
        lat.append((rng.normal(level, sd_us, per).clip(1.0) * 1e3).astype(np.int64))
    return np.concatenate(lat), np.concatenate(at), spans


@pytest.mark.parametrize("other_us, fifo_us, drift_us, verdict", [
    (100.0, 80.0, 0.0, "FIFO FASTER"),
    (80.0, 100.0, 0.0, "FIFO SLOWER"),
    (100.0, 100.0, 0.0, "INCONCLUSIVE"),
    (100.0, 80.0, 30.0, "INCONCLUSIVE"),  # the A/A halves differ: the machine cannot resolve it
])
def test_the_verdict_follows_the_rule_fixed_before_the_run(other_us, fifo_us, drift_us, verdict):
    lat, at, spans = _run(other_us, fifo_us, drift_us=drift_us)
    f = judge(lat, at, spans)
    assert f["verdict"] == verdict, f
    assert f["arms"]["other"]["n"] == f["arms"]["fifo"]["n"] == 6 * 100


def test_a_drift_the_effect_clears_is_judged_and_one_it_does_not_is_not():
    # the rule amended on 2026-12-07: the A/A interval may exclude 0 if d's interval clears it both ways round
    lat, at, spans = _run(100.0, 50.0, drift_us=4.0)
    f = judge(lat, at, spans)
    assert f["aa_ci_us"][0] > 0 or f["aa_ci_us"][1] < 0, f  # the A/A control excludes 0 ...
    assert f["verdict"] == "FIFO FASTER", f  # ... and d (~50 µs) clears it
    lat, at, spans = _run(100.0, 94.0, drift_us=-8.0)
    assert judge(lat, at, spans)["verdict"] == "INCONCLUSIVE"  # d (~2 µs) within the A/A deviation (~8)


def test_windows_whose_states_spread_more_than_the_effect_are_inconclusive():
    # each arm's windows moved by the machine's state (-30 .. +30 µs), the same states in both A/A halves;
    # fifo 5 µs faster: resampling the samples as independent resolved it, resampling windows does not
    lat, at, spans = _run(100.0, 95.0, offsets_us=(-30.0, -30.0, 0.0, 0.0, 30.0, 30.0), sd_us=1.0)
    f = judge(lat, at, spans)
    assert f["verdict"] == "INCONCLUSIVE" and f["ci_us"][0] < 0 < f["ci_us"][1], f


def test_too_few_windows_is_inconclusive_whatever_the_difference():
    lat, at, spans = _run(200.0, 50.0, windows=MIN_WINDOWS - 1)
    f = judge(lat, at, spans)
    assert f["verdict"] == "INCONCLUSIVE" and "fewer than" in f["why"]


def test_a_policy_switch_reaches_every_thread_of_a_process():
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                              "time.sleep(30)"])
    try:
        wait_until(lambda: len(os.listdir(f"/proc/{child.pid}/task")) == 2, 5, 0.02, "the child's second thread")
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert set_policy(child.pid, "fifo", 3) == 2
        assert all(os.sched_getscheduler(t) == os.SCHED_FIFO and os.sched_getparam(t).sched_priority == 3 for t in tids)
        assert set_policy(child.pid, "other", 3) == 2
        assert all(os.sched_getscheduler(t) == os.SCHED_OTHER for t in tids)
    finally:
        child.kill()
        child.wait()
