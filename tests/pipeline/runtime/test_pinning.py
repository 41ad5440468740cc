"""The core plan (pipeline/runtime/pinning.py): one core each, sharing, explicit cores, no usable core."""

from __future__ import annotations

import pytest

from pipeline.runtime.pinning import plan_cores


def test_one_core_each_means_busy_spin_for_auto():
    plan = plan_cores([("a", "auto", "auto"), ("b", "auto", "auto"), ("c", "auto", "back-off")], [0, 1, 2, 3])
    assert plan.cores == {"a": 0, "b": 1, "c": 2}
    assert plan.shared is False
    assert plan.wait == {"a": "busy-spin", "b": "busy-spin", "c": "back-off"}  # explicit waits are kept
    assert "one core each" in plan.note


def test_fewer_cores_than_processes_round_robin_shared_blocking():
    plan = plan_cores([(n, "auto", "auto") for n in "abcde"], [0, 1])
    assert plan.cores == {"a": 0, "b": 1, "c": 0, "d": 1, "e": 0}
    assert plan.shared is True
    assert set(plan.wait.values()) == {"blocking"}
    assert "round-robin" in plan.note and "blocking" in plan.note


def test_explicit_cores_kept_and_autos_take_free_cores_first():
    plan = plan_cores([("a", "auto", "auto"), ("b", 0, "busy-spin"), ("c", "auto", "auto")], [0, 1, 2])
    assert plan.cores == {"b": 0, "a": 1, "c": 2}
    assert plan.shared is False
    assert plan.wait == {"a": "busy-spin", "b": "busy-spin", "c": "busy-spin"}


def test_explicit_unusable_core_raises():
    with pytest.raises(ValueError, match=r"core 7 is not usable"):
        plan_cores([("a", 7, "auto")], [0, 1])


def test_no_usable_cores_raises():
    with pytest.raises(ValueError):
        plan_cores([("a", "auto", "auto")], [])
