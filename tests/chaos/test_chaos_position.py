"""The position and account fault scenarios of ``bench.chaos.position`` (issues #20, #24: the sender's
machine crash among them), each run once in quick mode against the whole real pipeline: the scenario's
criterion must hold (disk_full_journal may be INCONCLUSIVE only where tmpfs cannot be mounted: reported
then as a warning with its figures and why, never a pass or a skip), the run must leave no process and
no /dev/shm entry. Each of them sabotaged must FAIL: ``tests/chaos/sabotage.py`` (``make chaos-sabotage``)."""

from __future__ import annotations

import warnings

import pytest

from bench.chaos.harness import INCONCLUSIVE, PASS, Row
from bench.chaos.position import acceptance
from bench.chaos.registry import POSITION as SCENARIOS
from tests.chaos._support import TrackingPipeline, left_nothing


def _no_chaos_mounts() -> list[str]:
    with open("/proc/mounts") as f:
        return [line for line in f if "chaos-jfull-" in line]


def _describe(row: Row) -> str:
    return f"{row.scenario}: injected {row.injected}; did: {row.did}; measured: {row.figure}"


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("name,fn", SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_position_fault_scenario_passes_and_leaves_nothing_behind(name, fn):
    TrackingPipeline.runs = []
    mounts0 = _no_chaos_mounts()
    row = fn(TrackingPipeline, True)
    assert isinstance(row, Row) and row.scenario == name
    if row.verdict == INCONCLUSIVE:
        # only the tmpfs the scenario needs may be missing: then nothing was started, nothing is judged
        assert name == "disk_full_journal" and not TrackingPipeline.runs and row.details.get("mount_error"), \
            _describe(row)
        assert _no_chaos_mounts() == mounts0, "a tmpfs of the scenario left mounted"
        warnings.warn(f"{name} INCONCLUSIVE (tmpfs cannot be mounted here): {_describe(row)}")
        return
    assert row.verdict == PASS, _describe(row) + f"; checks: {row.details.get('checks')}"
    left_nothing()
    assert _no_chaos_mounts() == mounts0, "a tmpfs of the scenario left mounted"


def test_acceptance_equal_or_reducing_with_the_difference_shown():
    eq = {"BTCUSDT": {"iid": 1, "venue": 3, "risk": 3}}
    apart = {"BTCUSDT": {"iid": 1, "venue": 8, "risk": 3}}
    assert acceptance(eq, "ACTIVE", {})[0]
    assert not acceptance(apart, "ACTIVE", {})[0]
    assert not acceptance(apart, "REDUCING", {})[0]  # no difference shown
    assert not acceptance(apart, "ACTIVE", {"pdiff_lots_1": 5.0})[0]  # shown but still trading
    assert acceptance(apart, "REDUCING", {"pdiff_lots_1": 5.0})[0]
    assert not acceptance({"BTCUSDT": {"iid": 1, "venue": None, "risk": 3}}, "ACTIVE", {})[0]
