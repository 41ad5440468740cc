"""The process and ring fault scenarios of ``bench.chaos_process`` (issue #9), each run once in quick mode
against the whole real pipeline (venue, feed, features, fast, llm, risk, sender under the supervisor):
the scenario's own pass criterion must hold, and the run must leave no process and no /dev/shm entry."""

from __future__ import annotations

import os

import pytest

from bench.chaos import ChaosPipeline, Row
from bench.chaos_process import SCENARIOS, shm_left, whole_lots


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    continue
        except OSError:
            continue
        out.append(pid)
    return out


class TrackingPipeline(ChaosPipeline):
    """``ChaosPipeline`` that remembers every run's prefix and every pid it saw, for the clean-up checks."""

    runs: list["TrackingPipeline"] = []

    def __enter__(self):
        TrackingPipeline.runs.append(self)
        self.seen_pids: set[int] = set()
        return super().__enter__()

    def status(self) -> dict:
        st = super().status()
        self.seen_pids.update(p["pid"] for p in st["processes"] if p["pid"])
        self.seen_pids.add(st["supervisor_pid"])
        return st


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("name,fn", SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_process_fault_scenario_passes_and_leaves_nothing_behind(name, fn):
    TrackingPipeline.runs = []
    row = fn(TrackingPipeline, True)
    assert isinstance(row, Row) and row.scenario == name
    assert row.passed, f"{row.scenario}: injected {row.injected}; did: {row.did}; measured: {row.figure}"
    assert TrackingPipeline.runs, "the scenario started no pipeline"
    for run in TrackingPipeline.runs:
        assert shm_left(run.prefix) == [], f"/dev/shm entries of {run.prefix} left behind"
        assert _alive(sorted(run.seen_pids)) == [], "processes of the run left behind"


def test_a_position_reconciles_in_whole_lots_or_not_at_all():
    # the base-unit floats of one position differ with the order its fills were summed in
    # (fills of 1 and 2 lots of 0.1 against a position of 3 lots, both 0.3 in base units)
    assert 0.1 + 0.2 != 0.3 and (0.1 + 0.2) / 0.1 != 0.3 / 0.1
    assert whole_lots((0.1 + 0.2) / 0.1) == whole_lots(0.3 / 0.1) == 3
    assert whole_lots(-7.0) == -7 and whole_lots(0.0) == 0
    for x in (2.5, 3.00001, float("nan"), float("inf"), -float("inf")):
        assert whole_lots(x) is None, x
