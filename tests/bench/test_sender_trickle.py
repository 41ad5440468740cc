"""The slow-peer bench of the sender's read (bench/sender_trickle.py): its rule, and a short run of
both arms against its trickling venue (counts only: the times are the bench's to judge)."""

from __future__ import annotations

import pytest

from bench import sender_trickle


@pytest.mark.parametrize("ready_ms, blocking_ms, want", [
    (0.8, 501.0, "MEETS"),
    (99.9, 450.0, "MEETS"),
    (100.0, 501.0, "MISSES"),  # the target is strict
    (0.8, 399.0, "INCONCLUSIVE"),  # the control did not see the slow peer: no verdict
    (150.0, 10.0, "INCONCLUSIVE"),
])
def test_the_rule_meets_only_under_the_target_and_only_when_the_control_saw_the_slow_peer(ready_ms, blocking_ms,
                                                                                           want):
    assert sender_trickle.verdict(ready_ms, blocking_ms) == want


def test_a_short_run_measures_both_arms_with_the_slow_order_cut_and_prompt_orders_answered():
    res = sender_trickle.run(seconds=2.4, rate=100.0, byte_ms=20.0)
    for name in sender_trickle.ARMS:
        r = res[name]
        assert r["passes"] > 0 and r["outcomes"].get("prompt OK", 0) > 0, (name, r)
        assert set(r["outcomes"]) <= {"prompt OK", "slow UNKNOWN", "slow OK"}, (name, r)
        assert r["outcomes"].get("slow UNKNOWN", 0) >= 1, (name, r)  # 0.6 s windows: each cuts a slow answer
