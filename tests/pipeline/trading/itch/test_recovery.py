"""MoldUDP64 gap recovery (``GapRecovery``): in-order release exactly once, re-requests at a bounded
rate and window, and the bounds that give a gap up."""

from __future__ import annotations

import pytest

from pipeline.trading.itch.framing import MOLD_END_OF_SESSION, MOLD_HEARTBEAT
from pipeline.trading.itch.recovery import GapRecovery, RecoveryParams

MS = 1_000_000


def msgs(first: int, n: int) -> list[bytes]:
    return [f"m{first + i}".encode() for i in range(n)]


def seqs(released) -> list[int]:
    return [s for s, _ in released.messages]


def test_in_order_packets_pass_straight_through_and_duplicates_are_dropped():
    r = GapRecovery()
    assert seqs(r.on_packet(1, 3, msgs(1, 3), 0)) == [1, 2, 3]
    assert seqs(r.on_packet(2, 3, msgs(2, 3), 1)) == [4]  # 2, 3 seen already
    assert r.duplicates == 2 and not r.gap_open and r.gaps == 0


def test_a_gap_holds_what_follows_asks_for_the_hole_and_releases_everything_in_order_once_filled():
    r = GapRecovery(RecoveryParams(request_interval_ns=10 * MS, max_request_messages=2))
    r.on_packet(1, 2, msgs(1, 2), 0)
    got = r.on_packet(6, 2, msgs(6, 2), 1 * MS)  # 3..5 missing
    assert seqs(got) == [] and r.gap_open and r.gaps == 1
    assert r.request_due(1 * MS) == (3, 2), "the window: at most max_request_messages from the first missing"
    assert r.request_due(5 * MS) is None, "the rate: one request per interval"
    assert seqs(r.on_packet(3, 2, msgs(3, 2), 6 * MS)) == [3, 4] and r.gap_open
    assert r.request_due(11 * MS) == (5, 1)
    got = r.on_packet(5, 1, msgs(5, 1), 12 * MS)
    assert seqs(got) == [5, 6, 7] and [m for _, m in got.messages] == msgs(5, 3)
    assert not r.gap_open and r.recovered == 1 and r.lost == 0 and got.lost is None


def test_a_heartbeat_ahead_of_the_last_message_reveals_a_gap():
    r = GapRecovery()
    r.on_packet(1, 2, msgs(1, 2), 0)
    r.on_packet(5, MOLD_HEARTBEAT, (), 1)
    assert r.gap_open and r.request_due(1) == (3, 2)
    r.on_packet(5, MOLD_END_OF_SESSION, (), 2)
    assert seqs(r.on_packet(3, 2, msgs(3, 2), 3)) == [3, 4] and not r.gap_open


def test_an_unanswered_gap_is_given_up_after_its_timeout_and_what_was_held_is_released():
    r = GapRecovery(RecoveryParams(gap_timeout_ns=100 * MS, request_interval_ns=30 * MS, max_requests=100))
    r.on_packet(1, 1, msgs(1, 1), 0)
    r.on_packet(4, 2, msgs(4, 2), 0)
    assert seqs(r.poll(99 * MS)) == [] and r.gap_open
    got = r.poll(100 * MS)
    assert got.lost == range(2, 4) and seqs(got) == [4, 5]
    assert not r.gap_open and r.unrecoverable == 1 and r.lost == 2 and r.recovered == 0
    assert seqs(r.on_packet(2, 2, msgs(2, 2), 101 * MS)) == [] and r.duplicates == 2, "late: too late"


def test_a_gap_is_given_up_when_its_requests_are_spent_or_it_is_too_wide_or_the_hold_is_full():
    r = GapRecovery(RecoveryParams(max_requests=2, request_interval_ns=10, gap_timeout_ns=10**12))
    r.on_packet(3, 1, msgs(3, 1), 0)
    assert r.request_due(0) and r.request_due(10) and r.request_due(20) is None
    assert r.poll(30).lost == range(1, 3)

    wide = GapRecovery(RecoveryParams(max_gap_messages=5))
    got = wide.on_packet(10, 1, msgs(10, 1), 0)
    assert got.lost == range(1, 10) and seqs(got) == [10] and not wide.gap_open

    full = GapRecovery(RecoveryParams(max_held_messages=2))
    full.on_packet(1, 1, msgs(1, 1), 0)
    assert seqs(full.on_packet(3, 2, msgs(3, 2), 0)) == []
    got = full.on_packet(5, 1, msgs(5, 1), 0)  # a third held message: the first hole goes
    assert got.lost == range(2, 3) and seqs(got) == [3, 4, 5] and full.overflow == 1 and not full.gap_open


@pytest.mark.parametrize("field", RecoveryParams._fields)
def test_every_bound_must_be_positive(field):
    with pytest.raises(ValueError, match=field):
        RecoveryParams(**{field: 0}).check()
