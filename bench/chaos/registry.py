"""Every chaos scenario, by group, in the order ``python -m bench.chaos`` runs them: (name, function),
each function ``(ChaosPipeline-factory, quick: bool) -> Row``."""

from __future__ import annotations

from typing import Callable

from bench.chaos.input_guard import input_range_guard
from bench.chaos.kill_switch import kill_switch
from bench.chaos.latency_guard import latency_guard
from bench.chaos.llm_faults import llm_faults
from bench.chaos.malformed import malformed_frames
from bench.chaos.perp import machine_crash_sender_perp, perp_flow
from bench.chaos.outage import venue_outage
from bench.chaos.position import disk_full_journal, machine_crash_sender, position_behind_back, venue_fresh_state
from bench.chaos.process import ring_corruption, sigkill_each, sigstop_10s
from bench.chaos.risk_limits import risk_limits
from bench.chaos.secrets_scan import secrets_and_permissions
from bench.chaos.stall import consumer_stall

#: process and ring faults (issue #9)
PROCESS: list[tuple[str, Callable]] = [
    ("sigkill_each", sigkill_each),
    ("sigstop_10s", sigstop_10s),
    ("ring_corruption", ring_corruption),
    ("consumer_stall", consumer_stall),
    ("venue_outage", venue_outage),
]

#: bad input, the model's input-range guard (issue #36), the LLM, risk limits, the kill switch, key and permission
#: scans (issue #9)
INPUT: list[tuple[str, Callable]] = [
    ("malformed_frames", malformed_frames),
    ("input_range_guard", input_range_guard),
    ("llm_faults", llm_faults),
    ("risk_limits", risk_limits),
    ("kill_switch", kill_switch),
    ("secrets_and_permissions", secrets_and_permissions),
]

#: the position against the venue (issue #20)
POSITION: list[tuple[str, Callable]] = [
    ("disk_full_journal", disk_full_journal),
    ("venue_fresh_state", venue_fresh_state),
    ("position_behind_back", position_behind_back),
    ("machine_crash_sender", machine_crash_sender),
]

#: USDT-FUTURES perpetuals end to end (issue #25)
PERP: list[tuple[str, Callable]] = [
    ("perp_flow", perp_flow),
    ("machine_crash_sender_perp", machine_crash_sender_perp),
]

#: operating it: the latency-budget guard (issue #26)
OPERATIONS: list[tuple[str, Callable]] = [
    ("latency_guard", latency_guard),
]


def scenarios() -> list[tuple[str, Callable]]:
    """Every scenario of the groups, in order."""
    return [*PROCESS, *INPUT, *POSITION, *PERP, *OPERATIONS]
