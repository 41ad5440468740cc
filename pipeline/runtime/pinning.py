"""Core pinning plan: which core each process gets, and which wait strategy ``auto`` means.

Pure functions: the supervisor plans, each runner applies its own line of the plan with
``os.sched_setaffinity``.
"""

from __future__ import annotations

import os

import msgspec


class CorePlan(msgspec.Struct, frozen=True):
    cores: dict[str, int]  # process -> core
    wait: dict[str, str]  # process -> "busy-spin" | "back-off" | "blocking"
    shared: bool  # True when some processes share a core
    note: str  # said once at start


def available_cores() -> list[int]:
    """The cores this process may run on (its affinity mask), sorted."""
    return sorted(os.sched_getaffinity(0))


def plan_cores(processes: list[tuple[str, int | str, str]], cores: list[int]) -> CorePlan:
    """Plan pinning for ``(name, core, wait)`` triples over the usable ``cores``.

    Explicit cores are kept (they must be usable); ``auto`` processes get the free cores in turn,
    round-robin over all cores when there are fewer cores than processes. ``auto`` waits become
    ``busy-spin`` only when every process has a core of its own, else ``blocking``.

    Raises:
        ValueError: an explicit core is not in ``cores``.
    """
    if not cores:
        raise ValueError("no usable cores")
    chosen: dict[str, int] = {}
    for name, core, _ in processes:
        if core != "auto":
            if core not in cores:
                raise ValueError(f"process {name!r}: core {core} is not usable here (usable: {cores})")
            chosen[name] = int(core)
    free = [c for c in cores if c not in chosen.values()]
    autos = [name for name, core, _ in processes if core == "auto"]
    for i, name in enumerate(autos):
        # free cores first, one each; past them, round-robin over every usable core
        chosen[name] = free[i] if i < len(free) else cores[(i - len(free)) % len(cores)]
    counts: dict[int, int] = {}
    for c in chosen.values():
        counts[c] = counts.get(c, 0) + 1
    shared = any(n > 1 for n in counts.values())
    waits = {}
    for name, _, wait in processes:
        waits[name] = ("blocking" if shared else "busy-spin") if wait == "auto" else wait
    if shared:
        note = f"{len(processes)} processes on {len(cores)} cores: pinned round-robin, cores shared; 'auto' waits are blocking"
    else:
        note = f"{len(processes)} processes on {len(cores)} cores: one core each; 'auto' waits are busy-spin"
    return CorePlan(cores=chosen, wait=waits, shared=shared, note=note)
