"""``ManualClock``: it stands still until moved, in the unit it was made for."""

from __future__ import annotations

import pytest

from tests.support.clock import DEFAULT_START_NS, ManualClock


def test_a_clock_returns_now_until_the_test_moves_it():
    clock = ManualClock()
    assert clock() == clock.now == DEFAULT_START_NS
    assert clock() == DEFAULT_START_NS, "calling it does not move it"
    clock.advance(5)
    assert clock() == DEFAULT_START_NS + 5
    clock.now = 7
    assert clock() == 7


@pytest.mark.parametrize("unit, per_ms", [("ns", 1_000_000), ("us", 1_000), ("ms", 1)])
def test_advance_ms_and_advance_s_convert_to_the_clocks_unit(unit, per_ms):
    clock = ManualClock(0, unit=unit)
    clock.advance_ms(3)
    assert clock() == 3 * per_ms
    clock.advance_s(2)
    assert clock() == 2_003 * per_ms
    clock.advance_ms(-3)
    assert clock() == 2_000 * per_ms


def test_a_fraction_of_a_unit_is_truncated():
    ms = ManualClock(0, unit="ms")
    ms.advance_s(0.0015)
    assert ms() == 1
    ns = ManualClock(0)
    ns.advance_s(2.9)
    assert ns() == int(2.9 * 1_000_000_000)


def test_an_unknown_unit_is_refused():
    with pytest.raises(ValueError, match=r"unit 's' is not one of \['ms', 'ns', 'us'\]"):
        ManualClock(0, unit="s")
