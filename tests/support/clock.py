"""``ManualClock``: the one clock a test moves by hand.

Calling it returns ``now``, an int in the unit the clock was made for (``"ns"`` for the stages'
monotonic clocks, ``"ms"`` for the venue's wall clock). Tests move it with ``advance`` (in its own
unit) or ``advance_s`` / ``advance_ms`` (converted, truncated to a whole unit), or read ``now``.
"""

from __future__ import annotations

#: nanoseconds in one unit of each unit a clock may be made for
NS_PER_UNIT = {"ns": 1, "us": 1_000, "ms": 1_000_000}
#: the default start of a ns clock: far enough from 0 that "a while ago" stays positive
DEFAULT_START_NS = 10**12


class ManualClock:
    """A clock that stands still until the test moves it.

    Raises:
        ValueError: ``unit`` is not one of ``NS_PER_UNIT``.
    """

    __slots__ = ("now", "unit", "_per_ms", "_per_s")

    def __init__(self, now: int = DEFAULT_START_NS, *, unit: str = "ns") -> None:
        if unit not in NS_PER_UNIT:
            raise ValueError(f"unit {unit!r} is not one of {sorted(NS_PER_UNIT)}")
        self.now = now
        self.unit = unit
        self._per_ms = 1_000_000 // NS_PER_UNIT[unit]
        self._per_s = 1_000_000_000 // NS_PER_UNIT[unit]

    def __call__(self) -> int:
        return self.now

    def advance(self, units: int) -> None:
        """Move the clock by ``units`` of its own unit (negative: back)."""
        self.now += units

    def advance_ms(self, ms: float) -> None:
        """Move the clock by ``ms`` milliseconds."""
        self.now += int(ms * self._per_ms)

    def advance_s(self, s: float) -> None:
        """Move the clock by ``s`` seconds."""
        self.now += int(s * self._per_s)

    def __repr__(self) -> str:
        return f"ManualClock({self.now}, unit={self.unit!r})"
