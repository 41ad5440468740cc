"""The position and account fault scenarios of ``bench.chaos.position`` (issue #20), each run once in quick
mode against the whole real pipeline: the scenario's criterion must hold (disk_full_journal may be
INCONCLUSIVE only where tmpfs cannot be mounted: skipped then), the run must leave no process and no
/dev/shm entry; and each scenario, sabotaged (the running sender's account checks off), must FAIL. The
sender's machine crash (issue #24) likewise: PASS as it is, FAIL with a sender that does not recover the
lost window (``NoRecoverySender``)."""

from __future__ import annotations


import pytest

from types import SimpleNamespace

from bench.chaos.harness import FAIL, INCONCLUSIVE, PASS, Row
from bench.chaos.position import (acceptance, disk_full_journal, machine_crash_sender, position_behind_back,
                                  venue_fresh_state)
from bench.chaos.registry import POSITION as SCENARIOS
from procs.sender import SenderAgent
from tests.chaos._support import TrackingPipeline, left_nothing


class NoRecoverySender(SenderAgent):
    """The real sender whose start-up reconciliation adopts nothing from the venue (the sabotage of the
    lost window's recovery)."""

    def _wire(self, *args, **kwargs) -> None:
        super()._wire(*args, **kwargs)

        def nothing():
            return True
            yield  # a request generator that makes no request

        self.reconciler.recovery = SimpleNamespace(adopt_gen=nothing)


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
    left_nothing()
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
    left_nothing()


def test_acceptance_equal_or_reducing_with_the_difference_shown():
    eq = {"BTCUSDT": {"iid": 1, "venue": 3, "risk": 3}}
    apart = {"BTCUSDT": {"iid": 1, "venue": 8, "risk": 3}}
    assert acceptance(eq, "ACTIVE", {})[0]
    assert not acceptance(apart, "ACTIVE", {})[0]
    assert not acceptance(apart, "REDUCING", {})[0]  # no difference shown
    assert not acceptance(apart, "ACTIVE", {"pdiff_lots_1": 5.0})[0]  # shown but still trading
    assert acceptance(apart, "REDUCING", {"pdiff_lots_1": 5.0})[0]
    assert not acceptance({"BTCUSDT": {"iid": 1, "venue": None, "risk": 3}}, "ACTIVE", {})[0]


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_machine_crash_of_the_sender_loses_nothing_and_leaves_nothing_behind():
    TrackingPipeline.runs = []
    row = machine_crash_sender(TrackingPipeline, True)
    assert row.verdict == PASS, _describe(row) + f"; checks: {row.details.get('checks')}"
    left_nothing()


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_machine_crash_of_a_sender_that_does_not_recover_the_window_fails():
    TrackingPipeline.runs = []
    row = machine_crash_sender(TrackingPipeline, True,
                               sender_module="tests.chaos.test_chaos_position:NoRecoverySender")
    assert row.verdict == FAIL, _describe(row)
    failed = [k for k, ok in row.details["checks"].items() if not ok]
    assert "the restarted sender adopted orders the venue holds" in failed, failed
    left_nothing()
