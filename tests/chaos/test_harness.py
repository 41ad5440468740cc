"""The chaos harness's verdicts (``bench.chaos.harness``): a Row's verdict, a run's exit status, a
Row judged by its checks."""

from __future__ import annotations

import pytest

from bench.chaos.harness import FAIL, INCONCLUSIVE, PASS, Row, exit_status, failed_checks, judged_row


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


def test_a_row_judged_by_its_checks_passes_only_when_every_check_held_and_names_the_failed_ones():
    ok = judged_row("s", {"a": True, "b": 1}, injected="i", did="d", figure="f", details={"x": 1})
    assert ok.verdict == PASS and ok.figure == "f" and ok.details == {"checks": {"a": True, "b": 1}, "x": 1}
    assert list(ok.details) == ["checks", "x"]  # the checks first, as every scenario reports them
    bad = judged_row("s", {"a": True, "b": False, "c": None}, injected="i", did="d", figure="f", details={})
    assert bad.verdict == FAIL and not bad.passed and bad.figure == "f; FAILED: ['b', 'c']"
    assert failed_checks({"a": True, "b": 0, "c": "x"}) == ["b"] and failed_checks({}) == []
