"""The bad-input, LLM, risk-limit, kill-switch and key / permission scenarios of ``bench.chaos_input``
(issue #9), each run once in quick mode against the whole real pipeline (venue, feed, features, fast,
llm or an injector in its place, risk, sender under the supervisor): the scenario's own pass criterion
must hold. The scanners the last scenario relies on are shown to find what they look for."""

from __future__ import annotations

import warnings

import os
import socket

import numpy as np
import pytest

from bench.chaos import FAIL, INCONCLUSIVE, PASS, ChaosPipeline, Row, exit_status
from bench.chaos_input import (AA_BAND, P99_LIMIT, SCENARIOS, busy_cpu, fuzz_frames, key_material_hits, kill_switch,
                               listening_sockets, llm_faults, malformed_frames, p99_us, p99_verdict, risk_limits,
                               secrets_and_permissions, slow_tokens, trimmed_gmean, window_p99s)


def _run(fn) -> Row:
    row = fn(ChaosPipeline, True)
    assert isinstance(row, Row)
    assert row.passed, (f"{row.scenario}: injected {row.injected}; did: {row.did}; measured: {row.figure}; "
                        f"checks: {row.details.get('checks')}")
    return row


def test_every_scenario_is_listed_once():
    assert [n for n, _ in SCENARIOS] == ["malformed_frames", "llm_faults", "risk_limits", "kill_switch",
                                         "secrets_and_permissions"]


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
    # the p99 criterion is judged by `make chaos` (thirty rounds) only: two windows per condition cannot
    # resolve 1.10x, so by the rule (bench.chaos_input, resolution precondition) the quick run's p99
    # verdict is INCONCLUSIVE, reported here as a warning with its figures, never as a pass
    assert row.verdict == row.details["p99_verdict"] == INCONCLUSIVE, (row.verdict, row.details["p99_why"])
    assert "fewer than the 10" in row.details["p99_why"]
    warnings.warn(f"llm_faults p99 INCONCLUSIVE in quick mode: {row.details['p99_why']} (measured: {row.figure})")


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
def test_kill_switch_stops_new_orders_within_100_ms_and_leaves_nothing_working():
    _run(kill_switch)


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_no_key_material_anywhere_and_every_segment_socket_and_listener_is_private():
    _run(secrets_and_permissions)


# -------------------------------------------------------------------------------- the scanners themselves
def test_fuzzed_frames_are_each_refused_by_the_decoder_or_fail_their_checksum():
    from pipeline.trading.bitget.protocol import FrameKind, make_decoder

    frames, badsum = fuzz_frames(3_000, seed=1, first_seq=10)
    kinds = [make_decoder().decode(f).kind for f in frames]
    assert sum(k in (FrameKind.REJECTED, FrameKind.UNKNOWN) for k in kinds) == 3_000 - badsum
    assert sum(k == FrameKind.SNAPSHOT for k in kinds) == badsum > 0
    assert any(isinstance(f, bytes) for f in frames) and any(isinstance(f, str) for f in frames)


def test_key_scan_finds_a_planted_secret(tmp_path):
    clean, leaky = tmp_path / "clean.log", tmp_path / "leaky.log"
    clean.write_bytes(b'{"event": "sender_ready", "key_fp": "ab12cd34"}\n')
    leaky.write_bytes(b'{"headers": {"ACCESS-PASSPHRASE": "pass-XYZ"}}\n')
    hits, read = key_material_hits({"secret": b"s3cr3t", "passphrase": b"pass-XYZ"}, [clean, leaky, tmp_path / "gone"],
                                   [b"status s3cr3t"])
    assert read == 2
    assert hits == [f"passphrase in {leaky}", "secret in text 0"]


def test_listener_scan_sees_a_wildcard_bind_and_a_loopback_one():
    wild, local = socket.socket(), socket.socket()
    try:
        wild.bind(("0.0.0.0", 0))
        wild.listen()
        local.bind(("127.0.0.1", 0))
        local.listen()
        found = {(addr, port) for pid, addr, port in listening_sockets([os.getpid()])}
        assert ("0.0.0.0", wild.getsockname()[1]) in found
        assert ("127.0.0.1", local.getsockname()[1]) in found
    finally:
        wild.close()
        local.close()


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


def test_an_inconclusive_row_is_not_a_pass_and_the_run_says_so():
    row = Row(scenario="llm_faults", injected="", did="", figure="", verdict=INCONCLUSIVE)
    assert row.passed is False and row.verdict == INCONCLUSIVE
    assert Row(scenario="x", injected="", did="", figure="", passed=True).verdict == PASS
    assert Row(scenario="x", injected="", did="", figure="", passed=False).verdict == FAIL
    with pytest.raises(ValueError):
        Row(scenario="x", injected="", did="", figure="", verdict="MAYBE")
    ok = Row(scenario="a", injected="", did="", figure="", passed=True)
    bad = Row(scenario="b", injected="", did="", figure="", passed=False)
    assert exit_status([ok]) == 0 and exit_status([ok, row]) == 3 and exit_status([ok, row, bad]) == 1


def test_the_slow_fault_keeps_the_cpu_busy_for_the_whole_generation():
    import threading
    import time

    def gen():
        yield from range(4)

    used = {}

    def run():  # in a thread of its own, as in the generation worker
        c0, w0 = time.thread_time(), time.perf_counter()
        assert list(slow_tokens(gen(), 0.05)) == [0, 1, 2, 3]
        used["cpu"], used["wall"] = time.thread_time() - c0, time.perf_counter() - w0

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert used["wall"] >= 0.2
    # busy, not asleep: the thread used the CPU for its wall time, as far as the machine let it (asleep
    # between tokens, as the fault was before, it used < 1 % of it; 0.2 leaves room for a 2-core
    # machine loaded with other tests: 0.41 seen so)
    assert used["cpu"] >= 0.2 * used["wall"], used
    c0 = time.thread_time()
    busy_cpu(0.0)
    assert time.thread_time() - c0 < 0.05
