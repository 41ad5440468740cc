"""Depth-aware execution's pure parts (pipeline/trading/risk/execution.py): the parent's transition table,
the liquidity gate over a SIGNAL's depth block, the params and risk_aversion's bounds."""

from __future__ import annotations

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import Side
from pipeline.trading.risk import RiskGateway, RiskLimits
from pipeline.trading.risk.execution import (TERMINAL, TRANSITIONS, Act, ExecutionParams, ParentState, Trigger,
                                             decode_execution, displayed_within, liquidity_ok, transition)
from tests.support.depth import depth_sig
from tests.support.risk import INSTRUMENTS

W, SU, PA = ParentState.WAIT_LIQUIDITY, ParentState.SUBMITTED, ParentState.PARTIAL_FILLED
FI, CA, EX = ParentState.FILLED, ParentState.CANCELLED, ParentState.EXPIRED
T = Trigger

# (state, trigger) -> (new state, act): the document's machine as this module reads it
TABLE = [
    (W, T.LIQUIDITY_OK, SU, Act.SUBMIT),
    (W, T.LIQUIDITY_SHORT, W, Act.NONE),
    (W, T.ALL_FILLED, FI, Act.NONE),
    (W, T.TTL_PASSED, EX, Act.CANCEL_CHILDREN),
    (W, T.CANCEL, CA, Act.NONE),
    (W, T.PART_FILL, W, Act.NONE),
    (W, T.MOVED, W, Act.NONE),
    (W, T.CHILDREN_GONE, W, Act.NONE),
    (SU, T.PART_FILL, PA, Act.NONE),
    (SU, T.ALL_FILLED, FI, Act.NONE),
    (SU, T.MOVED, W, Act.CANCEL_AND_REPRICE),
    (SU, T.HELD, SU, Act.NONE),
    (SU, T.TTL_PASSED, EX, Act.CANCEL_CHILDREN),
    (SU, T.CANCEL, CA, Act.NONE),
    (SU, T.CHILDREN_GONE, CA, Act.NONE),
    (SU, T.LIQUIDITY_OK, SU, Act.NONE),
    (PA, T.PART_FILL, PA, Act.NONE),
    (PA, T.ALL_FILLED, FI, Act.NONE),
    (PA, T.MOVED, W, Act.CANCEL_AND_REPRICE),
    (PA, T.HELD, PA, Act.NONE),
    (PA, T.TTL_PASSED, EX, Act.CANCEL_CHILDREN),
    (PA, T.CANCEL, CA, Act.NONE),
    (PA, T.CHILDREN_GONE, CA, Act.NONE),
]


@pytest.mark.parametrize("state, trigger, new, act", TABLE)
def test_the_parent_transition_table(state, trigger, new, act):
    assert transition(state, trigger) == (new, act)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_filled_cancelled_and_expired_are_terminal(state):
    for trigger in Trigger:
        assert transition(state, trigger) == (state, Act.NONE)


def test_the_table_lists_no_transition_out_of_a_terminal_state_and_only_known_states():
    assert not [k for k in TRANSITIONS if k[0] in TERMINAL]
    # every listed entry is in the specification table above (no rule the table does not state)
    spec = {(s, t): (n, a) for s, t, n, a in TABLE}
    assert {k: v for k, v in TRANSITIONS.items() if v != (k[0], Act.NONE)} == \
        {k: v for k, v in spec.items() if v != (k[0], Act.NONE)}


# ------------------------------------------------------------------------------------------ the gate
# asks at 0.5, 1.5, 2.5 ticks from the mid with 3, 4, 10; bids at 0.5, 1.5 with 2, 7
DEPTH = depth_sig(mid=100.0, spread=1.0, bids=[(0.5, 2.0), (1.5, 7.0)], asks=[(0.5, 3.0), (1.5, 4.0), (2.5, 10.0)])


@pytest.mark.parametrize("side, dist, volume", [
    (Side.BUY, 0.5, 3.0), (Side.BUY, 1.5, 7.0), (Side.BUY, 2.0, 7.0), (Side.BUY, 2.5, 17.0), (Side.BUY, 99.0, 17.0),
    (Side.BUY, 0.4, 0.0),
    (Side.SELL, 0.5, 2.0), (Side.SELL, 1.5, 9.0), (Side.SELL, 5.0, 9.0),
])
def test_displayed_volume_is_the_opposite_sides_within_the_limits_distance_from_the_mid(side, dist, volume):
    assert displayed_within(DEPTH, side, dist) == volume


def test_the_gate_opens_only_above_the_ratio_times_the_size_and_never_without_depth():
    # a buy 1.5 ticks under the mid sees 7 of asks within 1.5 ticks above it
    assert liquidity_ok(DEPTH, Side.BUY, 1.5, 5.0, 1.2)  # 7 > 6
    assert not liquidity_ok(DEPTH, Side.BUY, 1.5, 3.5, 2.0)  # 7 is not > 2 x 3.5: equal does not open it
    assert not liquidity_ok(DEPTH, Side.BUY, 1.5, 6.0, 1.2)  # 7 < 7.2
    assert not liquidity_ok(None, Side.BUY, 1.5, 0.001, 1.2)


@pytest.mark.parametrize("bad_size", [float("nan"), -5.0])
def test_a_nan_or_negative_size_in_the_depth_closes_the_gate(bad_size):
    bad = depth_sig(asks=[(0.5, 100.0), (1.5, bad_size)])
    assert displayed_within(bad, Side.BUY, 0.5) == 100.0  # the bad level is not counted at 0.5
    assert displayed_within(bad, Side.BUY, 1.5) == 0.0 and not liquidity_ok(bad, Side.BUY, 1.5, 1.0, 1.2)


# ------------------------------------------------------------------------------------------ params
def test_execution_params_default_to_the_simple_planner_and_the_documents_numbers():
    p = decode_execution(None)
    assert p == ExecutionParams() and p.planner == "simple" and p.liquidity_ratio == 1.2
    assert (p.vol_window_s, p.vol_grid_ms) == (300, 1000)
    assert decode_execution({"planner": "depth"}).planner == "depth"


@pytest.mark.parametrize("table, field", [
    ({"planner": "fancy"}, "planner"), ({"liquidity_ratio": 0}, "liquidity_ratio"), ({"nope": 1}, "nope"),
    ({"vol_grid_ms": 0}, "vol_grid_ms"), ({"vol_window_s": 1, "vol_grid_ms": 2000}, "vol_window_s"),
])
def test_bad_execution_params_are_a_config_error_naming_the_field(table, field):
    with pytest.raises(ConfigError, match=field):
        decode_execution(table)


@pytest.mark.parametrize("value, ok", [(0.1, True), (1.0, True), (2.0, True), (0.09, False), (2.01, False),
                                       (0.0, False), (50.0, False)])
def test_risk_aversion_is_bounded_to_the_documents_range(value, ok):
    if ok:
        RiskGateway(INSTRUMENTS, RiskLimits(risk_aversion=value))
    else:
        with pytest.raises(ConfigError, match=r"params\.limits\.risk_aversion"):
            RiskGateway(INSTRUMENTS, RiskLimits(risk_aversion=value))
