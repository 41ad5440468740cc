"""The position and account fault scenarios of ``bench.chaos_position`` (issue #20), each run once in quick
mode against the whole real pipeline: the scenario's criterion must hold (disk_full_journal may be
INCONCLUSIVE only where tmpfs cannot be mounted: skipped then), the run must leave no process and no
/dev/shm entry; and each scenario, sabotaged (the running sender's account checks off), must FAIL."""

from __future__ import annotations

import os

import pytest

from bench.chaos import FAIL, INCONCLUSIVE, PASS, ChaosPipeline, Row
from bench.chaos_position import (SCENARIOS, _sender_params, acceptance, disk_full_journal, position_behind_back,
                                  venue_fresh_state)
from bench.chaos_process import shm_left


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    continue
        except (ProcessLookupError, OSError):
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


def _left_nothing() -> None:
    assert TrackingPipeline.runs, "the scenario started no pipeline"
    for run in TrackingPipeline.runs:
        assert shm_left(run.prefix) == [], f"/dev/shm entries of {run.prefix} left behind"
        assert _alive(sorted(run.seen_pids)) == [], "processes of the run left behind"


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
        assert name == "disk_full_journal" and not TrackingPipeline.runs
        pytest.skip(f"not resolvable here: {row.did}")
    assert row.verdict == PASS, _describe(row) + f"; checks: {row.details.get('checks')}"
    _left_nothing()
    assert _no_chaos_mounts() == mounts0, "a tmpfs of the scenario left mounted"


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("fn,kw", [
    (position_behind_back, {"account_check_ms": 0}),
    (venue_fresh_state, {"account_check_ms": 0}),
    (disk_full_journal, {"account_check_ms": 0, "sabotage_adjust_lots": 3}),
], ids=["position_behind_back", "venue_fresh_state", "disk_full_journal"])
def test_a_sabotaged_position_scenario_fails(fn, kw):
    # the running sender's account checks off (and, for the full disk, a position moved behind the back
    # with no restart): the difference goes unseen, which each scenario must judge a FAIL
    TrackingPipeline.runs = []
    row = fn(TrackingPipeline, True, **kw)
    if row.verdict == INCONCLUSIVE:
        pytest.skip(f"not resolvable here: {row.did}")
    assert row.verdict == FAIL, _describe(row)
    _left_nothing()


def test_acceptance_equal_or_reducing_with_the_difference_shown():
    eq = {"BTCUSDT": {"iid": 1, "venue": 3, "risk": 3}}
    apart = {"BTCUSDT": {"iid": 1, "venue": 8, "risk": 3}}
    assert acceptance(eq, "ACTIVE", {})[0]
    assert not acceptance(apart, "ACTIVE", {})[0]
    assert not acceptance(apart, "REDUCING", {})[0]  # no difference shown
    assert not acceptance(apart, "ACTIVE", {"pdiff_lots_1": 5.0})[0]  # shown but still trading
    assert acceptance(apart, "REDUCING", {"pdiff_lots_1": 5.0})[0]
    assert not acceptance({"BTCUSDT": {"iid": 1, "venue": None, "risk": 3}}, "ACTIVE", {})[0]


def test_sender_params_rewrites_the_bench_config(tmp_path):
    from bench.pipeline import Scenario, config_text
    from pipeline.config import load_config

    text = _sender_params(config_text(Scenario("t", 1000, llm=True), tmp_path, "t"), account_check_ms=0,
                          journal_path=str(tmp_path / "j" / "sender.journal"))
    path = tmp_path / "c.toml"
    path.write_text(text)
    prm = load_config(path).process("sender").params
    assert prm["account_check_ms"] == 0 and prm["journal_path"] == str(tmp_path / "j" / "sender.journal")
    with pytest.raises(ValueError):
        _sender_params("[supervisor]\n", account_check_ms=0)
