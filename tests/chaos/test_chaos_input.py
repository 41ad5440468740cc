"""The bad-input, LLM, risk-limit, kill-switch and key / permission scenarios (``bench.chaos.registry.INPUT``;
issue #9), each run once in quick mode against the whole real pipeline (venue, feed, features, fast,
llm or an injector in its place, risk, sender under the supervisor): the scenario's own pass criterion
must hold."""

from __future__ import annotations

import warnings

import pytest

from bench.chaos.harness import INCONCLUSIVE, PASS, ChaosPipeline, Row
from bench.chaos.kill_switch import kill_switch
from bench.chaos.llm_faults import llm_faults
from bench.chaos.malformed import malformed_frames
from bench.chaos.registry import INPUT as SCENARIOS
from bench.chaos.risk_limits import risk_limits
from bench.chaos.secrets_scan import secrets_and_permissions


def _run(fn) -> Row:
    row = fn(ChaosPipeline, True)
    assert isinstance(row, Row)
    assert row.passed, (f"{row.scenario}: injected {row.injected}; did: {row.did}; measured: {row.figure}; "
                        f"checks: {row.details.get('checks')}")
    return row


def test_every_scenario_is_listed_once():
    assert [n for n, _ in SCENARIOS] == ["malformed_frames", "input_range_guard", "llm_faults", "risk_limits",
                                         "kill_switch", "secrets_and_permissions"]


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_malformed_frames_are_all_counted_and_never_crash_the_feed():
    row = _run(malformed_frames)
    assert row.details["sent_garbage"] == 10_000


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_llm_garbage_timeouts_and_slowness_open_the_breaker_and_send_no_order():
    row = llm_faults(ChaosPipeline, True)
    checks = row.details["checks"]
    assert set(row.details["phases"]) == {"garbage", "timeout", "slow"}
    # the safety checks, always: no INSTRUCTION, no LLM-origin order, the breaker opened in each phase
    assert checks and all(checks.values()), f"{row.did}; checks: {checks}"
    # the p99 at the gross limit (bench.chaos.p99_rule, 2x with the A/A control within 1.25x), which two
    # windows per condition resolve: never FAIL; INCONCLUSIVE only when the A/A control is out of its
    # band, reported as a warning, never as a pass
    gross, gross_why = row.details["p99_gross_verdict"], row.details["p99_gross_why"]
    assert gross in (PASS, INCONCLUSIVE), f"{gross}: {gross_why} (measured: {row.figure})"
    if gross == INCONCLUSIVE:
        assert "A/A outside" in gross_why, gross_why
        warnings.warn(f"llm_faults p99 at the gross limit INCONCLUSIVE in quick mode: {gross_why}")
    # the fine limit (1.10x) is judged by `make chaos` (thirty rounds) only: two windows per condition
    # cannot resolve it, so the quick run's fine verdict is INCONCLUSIVE, reported as a warning
    assert row.details["p99_verdict"] == INCONCLUSIVE and "fewer than the 10" in row.details["p99_why"]
    assert row.verdict == INCONCLUSIVE, (row.verdict, row.details["p99_why"])
    warnings.warn(f"llm_faults p99 at the fine limit INCONCLUSIVE in quick mode: {row.details['p99_why']} "
                  f"(measured: {row.figure})")


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_breached_risk_limit_is_denied_with_its_reason_and_nothing_reaches_the_venue():
    row = _run(risk_limits)
    for code in ("NOT_ALLOWED", "STALE_REF", "BAD_PRICE", "COLLAR", "MIN_NOTIONAL", "MAX_NOTIONAL", "MAX_POSITION",
                 "GROSS", "HALTED", "REDUCING", "MAX_OPEN", "RATE", "NOTIONAL_RATE", "DUPLICATE"):
        assert row.details["deny_counters"].get("deny_" + code.lower(), 0) >= 1, code


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kill_switch_stops_new_orders_and_leaves_nothing_working():
    # quick mode: the order of events (no order request once nothing works); the 100 ms / 2 s limits
    # are judged by make chaos (full mode) and reported here in the row's figures
    row = _run(kill_switch)
    assert any("judged in full mode" in name for name in row.details["checks"]), row.details["checks"]


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_no_key_material_anywhere_and_every_segment_socket_and_listener_is_private():
    _run(secrets_and_permissions)
