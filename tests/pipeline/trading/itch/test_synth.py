"""The synthetic session generator: deterministic, consistent, and shaped like a real session.

Consistency is checked here by an independent, naive model of the order flow (a dict of orders,
no sorted structures), not by the L3 book under test.
"""

from __future__ import annotations

from collections import Counter

import pytest

from pipeline.trading.itch import messages as M
from pipeline.trading.itch import synth


def test_same_seed_same_session_other_seed_other_session():
    a = synth.generate_binaryfile(3, 2_000)
    assert a == synth.generate_binaryfile(3, 2_000)
    assert a != synth.generate_binaryfile(4, 2_000)


def test_session_opens_with_directory_and_closes_with_end_of_messages():
    recs = synth.generate_session(1, 1_000, symbols=("AAPL", "MSFT"))
    assert [type(r) for r in recs[:7]] == [M.SystemEvent, M.StockDirectory, M.StockDirectory, M.SystemEvent,
                                           M.SystemEvent, M.StockTradingAction, M.StockTradingAction]
    assert [r.event_code for r in recs if type(r) is M.SystemEvent] == [b"O", b"S", b"Q", b"M", b"E", b"C"]
    assert [(r.stock_locate, r.stock) for r in recs[1:3]] == [(1, b"AAPL    "), (2, b"MSFT    ")]
    assert len(recs) == 1_000 + 6 + 2 * 2  # 6 system events, an R and an H per symbol
    ts = [r.timestamp_ns for r in recs]
    assert ts == sorted(ts)


def test_mix_is_dominated_by_adds_executions_cancels_deletes_replaces_and_trades():
    recs = synth.generate_session(2, 20_000)
    mix = Counter(r.MSG_TYPE for r in recs)
    assert sum(mix[t] for t in (b"A", b"E", b"X", b"D", b"U", b"P")) > 0.85 * len(recs)
    assert all(mix[t] > 0 for t in (b"A", b"F", b"E", b"C", b"X", b"D", b"U", b"P", b"H"))
    assert all(r.order_ref == 0 and r.side == b"B" for r in recs if type(r) is M.Trade)


def test_include_all_types_exercises_all_23():
    recs = synth.generate_session(2, 20_000, include_all_types=True)
    assert {r.MSG_TYPE for r in recs} == {s.type_byte for s in M.SPECS}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_session_is_consistent_and_never_locks_or_crosses(seed):
    orders: dict[int, list] = {}  # ref -> [locate, side, shares, price]
    seen_refs: set[int] = set()
    for r in synth.generate_session(seed, 15_000):
        t = type(r)
        if t in (M.AddOrder, M.AddOrderMpid):
            assert r.order_ref not in seen_refs and r.shares > 0 and r.side in (b"B", b"S")
            seen_refs.add(r.order_ref)
            orders[r.order_ref] = [r.stock_locate, r.side, r.shares, r.price_p4]
            touched = r.stock_locate
        elif t in (M.OrderExecuted, M.OrderExecutedWithPrice, M.OrderCancel, M.OrderDelete):
            o = orders[r.order_ref]  # exists
            assert o[0] == r.stock_locate
            n = {M.OrderExecuted: "executed_shares", M.OrderExecutedWithPrice: "executed_shares",
                 M.OrderCancel: "cancelled_shares"}.get(t)
            n = getattr(r, n) if n else o[2]
            assert 0 < n <= o[2]
            if t is M.OrderCancel:
                assert n < o[2]  # X is partial; D removes
            o[2] -= n
            if o[2] == 0:
                del orders[r.order_ref]
            continue
        elif t is M.OrderReplace:
            o = orders.pop(r.orig_ref)
            assert o[0] == r.stock_locate and r.new_ref not in seen_refs and r.shares > 0
            seen_refs.add(r.new_ref)
            orders[r.new_ref] = [o[0], o[1], r.shares, r.price_p4]
            touched = r.stock_locate
        else:
            continue
        bids = [o[3] for o in orders.values() if o[0] == touched and o[1] == b"B"]
        asks = [o[3] for o in orders.values() if o[0] == touched and o[1] == b"S"]
        if bids and asks:
            assert max(bids) < min(asks)
