"""The chaos checks made to fail on purpose (issue #19, "evidence that can fail"): each test runs a
scenario with exactly the thing one check guards broken (``tests/chaos/saboteurs.py``) and requires
that check, and the scenario, to report FAIL. Quick mode throughout (the LLM faults' p99 at the gross
limit that a quick run's windows resolve, ``bench.chaos.p99_rule``). Each check that guards money or safety has one (issue #36): sigkill_each's lost
(every NEW risk's audit log approved, journaled or refused), duplicated and positions-equal checks, a
run each (a sender that loses an order before its journal, one that sends an order twice, a gateway
one lot off the venue); consumer_stall's order counts and backpressure (``full_events``: rings that drop
when full); the LLM's safety checks (a validation gate that lets garbage through: INSTRUCTIONs, LLM
orders, a breaker that stays closed); the latency guard's REDUCING and HALTED effects and its budget;
the fast stage's input-range guard.

Not part of ``make test`` (the file name is not ``test_*``): each runs a whole pipeline for up to a
few minutes, together ~11 min on the 2-core VM, past the suite's budget; ``make chaos-sabotage`` runs
them, and CI runs it after ``make test`` on every submission. The pure verdict functions are tested in every run
(test_chaos_input.py, test_chaos_process.py, test_chaos_position.py). The position scenarios'
sabotaged runs (the running sender's account checks off; a sender that does not recover a machine
crash's lost window) moved here from the suite, which they took ~65 s of: a sabotaged run that cannot
be judged here (INCONCLUSIVE) fails, since it shows nothing."""

from __future__ import annotations


import pytest

from bench.chaos.flow import MIN_ORDERS
from bench.chaos.harness import FAIL
from bench.chaos.input_guard import NO_LEAN_CHECK, NO_ORDER_CHECK, input_range_guard
from bench.chaos.latency_guard import GUARD, latency_guard
from bench.chaos.llm_faults import llm_faults
from bench.chaos.outage import GAP_CHECK, venue_outage
from bench.chaos.position import disk_full_journal, machine_crash_sender, position_behind_back, venue_fresh_state
from bench.chaos.process import DUP_CHECK, LOST_CHECK, POSITIONS_CHECK, sigkill_each
from bench.chaos.stall import EXEC_FULL_CHECK, ORDERS_FULL_CHECK, consumer_stall
from tests.chaos._support import TrackingPipeline, left_nothing
from tests.chaos.saboteurs import StallFastUnderFaults, feed_module, risk_module, sender_module, with_hook
from tests.chaos.saboteurs import module_swap, ring_policy

pytestmark = [pytest.mark.chaos, pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.timeout(400)]

COUNTS = "every ORDER written arrived at the sender, none twice (both runs)"


def _report(row) -> str:
    text = f"{row.scenario} {row.verdict}: {row.figure}; checks: {row.details.get('checks')}"
    print(text)  # (shown with -s: the figures of the sabotaged run)
    return text


def test_a_sender_that_loses_an_order_fails_consumer_stall():
    row = consumer_stall(with_hook(sender_module("tests.chaos.saboteurs:LosingSender")), True)
    _report(row)
    assert row.verdict == FAIL
    assert row.details["checks"][COUNTS] is False, _report(row)
    for run in row.details["ends"].values():  # the gateway approved one more NEW than the sender journaled
        # (or answered REJECTED HALTED without an intent while its fsync was stalled: flow.order_counts_check)
        assert run["risk_approved"] == run["journal_new"] + run["sender_refused"] + 1, run
        assert run["lost"] == 1 and len(run["lost_ids"]) == 1, run  # by id, from risk's audit log


def test_a_sender_that_handles_an_order_twice_fails_consumer_stall():
    row = consumer_stall(with_hook(sender_module("tests.chaos.saboteurs:DuplicatingSender")), True)
    _report(row)
    assert row.verdict == FAIL
    assert row.details["checks"][COUNTS] is False, _report(row)
    assert all(run["sender_dups"] == 1 for run in row.details["ends"].values()), row.details["ends"]


def _no_quotes(text: str) -> str:
    new = text.replace("lean_lots = 1,", "lean_lots = 0,", 1)
    assert new != text, "no lean_lots in the risk limits"
    return new


def test_a_run_without_orders_fails_sigkill_each_and_consumer_stall():
    P = with_hook(_no_quotes)
    row = sigkill_each(P, True)
    _report(row)
    assert row.verdict == FAIL
    flow = [k for k in row.details["checks"] if k.startswith("enough flow")]
    assert flow and row.details["checks"][flow[0]] is False, _report(row)
    assert row.details["ledger"]["journal_orders"] < MIN_ORDERS  # (the LLM stage may place a few)
    row = consumer_stall(P, True)
    _report(row)
    assert row.verdict == FAIL
    flow = [k for k in row.details["checks"] if k.startswith("enough flow")]
    assert flow and row.details["checks"][flow[0]] is False, _report(row)


def test_a_fast_path_that_stalls_under_the_llm_faults_fails_llm_faults():
    # quick mode: judged at the gross limit (bench.chaos.p99_rule: FAIL above 2x of idle with the A/A
    # control within 1.25x), which its two windows per condition resolve; the fine 1.10x is not judged here
    row = llm_faults(StallFastUnderFaults, True)
    _report(row)
    assert all(row.details["checks"].values()), _report(row)  # the safety checks still hold
    assert row.details["p99_gross_verdict"] == FAIL and row.verdict == FAIL, row.details["p99_gross_why"]


def test_a_gateway_that_lets_risk_increasing_orders_through_while_reducing_fails_latency_guard():
    row = latency_guard(with_hook(risk_module("tests.chaos.saboteurs:LeakyRisk")), True)
    _report(row)
    assert row.verdict == FAIL
    checks = row.details["checks"]
    # REDUCING without its effect: no risk-increasing order is ever refused with REDUCING (always), and
    # any that came in the REDUCING window was approved (there are some in most runs, not all: the flow in
    # a quick run's ~3 s window is the hand-set model's)
    assert checks["risk-increasing orders refused with REDUCING (there were some)"] is False, _report(row)
    if row.details["audit"]["increasing"]:
        assert checks["no risk-increasing order approved while REDUCING"] is False, _report(row)
    # and HALTED that goes on approving (the guard's halt without its effect)
    assert checks["no order approved after HALTED"] is False, _report(row)
    assert row.details["audit"]["approved_after_halt"] > 0, _report(row)


def test_a_run_without_the_guard_fails_latency_guard():
    row = latency_guard(with_hook(lambda text: text.replace(GUARD, "")), True)
    assert row.verdict == FAIL and "no latency budget for features" in row.did, _report(row)


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
    assert row.verdict == FAIL, _report(row)
    left_nothing()


def test_a_machine_crash_of_a_sender_that_does_not_recover_the_window_fails():
    TrackingPipeline.runs = []
    row = machine_crash_sender(TrackingPipeline, True, sender_module="tests.chaos.saboteurs:NoRecoverySender")
    assert row.verdict == FAIL, _report(row)
    failed = [k for k, ok in row.details["checks"].items() if not ok]
    assert "the restarted sender adopted orders the venue holds" in failed, failed
    left_nothing()


def test_a_feed_that_does_not_see_sequence_gaps_fails_venue_outage_on_the_gap_check():
    TrackingPipeline.runs = []
    row = venue_outage(with_hook(feed_module("tests.chaos.saboteurs:GapBlindFeed")), True)
    _report(row)
    assert row.verdict == FAIL
    failed = [k for k, ok in row.details["checks"].items() if not ok]
    assert failed == [GAP_CHECK], _report(row)  # the injected gaps happened, only their detection is missing
    start, end = row.details["counts"]["start"], row.details["counts"]["end"]
    assert end["gaps"] > start["gaps"] and end["seq_gaps"] == start["seq_gaps"], row.details["counts"]


# ------------------------------------------------------------------ sigkill_each's money checks (issue #36)
#: the venue / journal check that cannot see an order lost before the journal (what the risk audit adds)
VENUE_JOURNAL = "the venue and the journal agree: placed = acknowledged, 0 unresolved"


@pytest.mark.parametrize("stage,saboteur,check", [
    ("sender", "LosingSender", LOST_CHECK),
    ("sender", "DoubleSendingSender", DUP_CHECK),
    ("risk", "SkewedRisk", POSITIONS_CHECK),
], ids=["losing_sender-lost", "double_sending_sender-duplicated", "skewed_risk-positions"])
def test_a_sabotaged_money_path_fails_its_sigkill_each_check(stage, saboteur, check):
    swap = sender_module if stage == "sender" else risk_module
    row = sigkill_each(with_hook(swap(f"tests.chaos.saboteurs:{saboteur}")), True)
    _report(row)
    checks, led, news = row.details["checks"], row.details["ledger"], row.details["news"]
    assert row.verdict == FAIL and checks[check] is False, _report(row)
    if saboteur == "LosingSender":  # approved by risk, in neither the journal nor the venue's book
        assert news["lost"] >= 1 and news["unapproved"] == 0, news
        assert checks[VENUE_JOURNAL] is True, _report(row)  # the venue / journal check alone passes it
    elif saboteur == "DoubleSendingSender":  # the venue refused the second place of the same clientOid
        assert led["dup_coid"] >= 1 and checks[LOST_CHECK] is True, (led, news)
    else:  # risk one lot above the venue and the journal, which agree
        lots = next(iter(led["position_lots"].values()))
        assert lots["risk"] - lots["venue"] == 1 and lots["venue"] == lots["journal"], led["position_lots"]


def test_rings_that_drop_when_full_fail_consumer_stall_on_its_backpressure_checks():
    # the orders and exec rings' policy "drop" instead of "backpressure": the writer meets the full ring
    # (full_events counted) but refuses the message instead of waiting for room
    row = consumer_stall(with_hook(lambda t: ring_policy("exec", "drop")(ring_policy("orders", "drop")(t))), True)
    _report(row)
    checks, bp = row.details["checks"], row.details["backpressure"]
    assert row.verdict == FAIL and checks[ORDERS_FULL_CHECK] is False and checks[EXEC_FULL_CHECK] is False, _report(row)
    assert bp["orders"]["dropped"] > 0 and bp["exec"]["dropped"] > 0, bp
    # an ORDER the gateway approved and the ring refused is lost, by risk's audit log
    assert row.details["ends"]["run 1"]["lost"] > 0, row.details["ends"]["run 1"]


@pytest.mark.timeout(600)
def test_an_llm_stage_that_lets_garbage_through_fails_the_llm_safety_checks():
    # quick mode; the breaker that never opens under garbage waits out the phase's 60 s open time-out
    row = llm_faults(with_hook(module_swap("bench.chaos.llm_faults:FaultyLlmAgent",
                                           "tests.chaos.saboteurs:GarbageGateLlm")), True)
    _report(row)
    checks, phases = row.details["checks"], row.details["phases"]
    assert row.verdict == FAIL, _report(row)
    assert checks["no INSTRUCTION written in a fault phase"] is False, _report(row)
    assert checks["no LLM-origin ORDER decided or sent"] is False, _report(row)
    assert checks["breaker opened in every fault phase"] is False, _report(row)
    # the sabotage is the garbage phase's alone: the breaker still opened under the other faults
    assert phases["garbage"]["breaker_open_after_s"] is None, phases
    assert all(phases[m]["breaker_open_after_s"] is not None for m in ("timeout", "slow")), phases


def test_a_fast_stage_without_its_input_range_guard_fails_input_range_guard():
    row = input_range_guard(with_hook(module_swap("procs.fast:FastAgent", "tests.chaos.saboteurs:NoRangeGuardFast")),
                            True)
    _report(row)
    checks = row.details["checks"]
    assert row.verdict == FAIL and checks[NO_LEAN_CHECK] is False and checks[NO_ORDER_CHECK] is False, _report(row)
    assert row.details["fast"]["out_of_range"] == 0 and row.details["approved"] > 0, row.details
