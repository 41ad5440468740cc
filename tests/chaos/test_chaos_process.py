"""The process and ring fault scenarios (``bench.chaos.registry.PROCESS``; issue #9), each run once in quick mode
against the whole real pipeline (venue, feed, features, fast, llm, risk, sender under the supervisor):
the scenario's own pass criterion must hold, and the run must leave no process and no /dev/shm entry."""

from __future__ import annotations


import pytest

from bench.chaos.harness import Row
from bench.chaos.registry import PROCESS as SCENARIOS
from tests.chaos._support import TrackingPipeline, left_nothing


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("name,fn", SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_process_fault_scenario_passes_and_leaves_nothing_behind(name, fn):
    TrackingPipeline.runs = []
    row = fn(TrackingPipeline, True)
    assert isinstance(row, Row) and row.scenario == name
    assert row.passed, (f"{row.scenario}: injected {row.injected}; did: {row.did}; measured: {row.figure}; "
                        f"checks: {row.details.get('checks')}")
    left_nothing()
