"""``pipeline.venue.account_state``: the account in memory. Every change is handed to ``on_event``
before it is applied (so a refused record changes nothing), and the records rebuild the same account.
The engine's use of it (matching, persistence across restarts) is in ``test_orders.py`` /
``test_account.py``."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.venue.account_state import STATUS_CANCELLED, STATUS_PARTIAL, AccountState
from pipeline.venue.errors import VenueError
from pipeline.venue.order_fields import OrderRejected

D = Decimal
T0_MS = 1_700_000_000_000


def _account(events: list) -> AccountState:
    return AccountState(["BTCUSDT", "BTCEUR"], T0_MS, events.append)


def _snapshot(a: AccountState) -> tuple:
    return ({i: o.to_json() for i, o in a.orders.items()}, [f.to_json() for f in a.fills], dict(a.positions), a.cash,
            a.next_order_id, a.next_trade_id, a.seq, sorted(a.by_client_oid))


def test_each_change_is_recorded_then_applied():
    events: list[dict] = []
    a = _account(events)
    o = a.open_order(None, "BTCUSDT", "buy", "gtc", D("100"), D("0.003"), "100", "0.003", T0_MS + 1)
    assert o.order_id == T0_MS * 1000 + 1 and o.client_oid == f"venue{o.order_id}" and a.find(None, o.client_oid) is o
    a.record_fill(o, D("99.5"), D("0.001"), "taker", T0_MS + 2)
    assert o.status == STATUS_PARTIAL and a.positions["BTCUSDT"] == D("0.001") and a.cash == D("-0.0995")
    assert a.balance_u_ms("USDT") == T0_MS + 2 and a.balance_u_ms("BTCEUR") == T0_MS
    a.record_cancel(o, T0_MS + 3)
    assert o.status == STATUS_CANCELLED and o.u_ms == T0_MS + 3
    assert a.record_adjust("BTCEUR", D("-2"), T0_MS + 4) == D("-2") and a.cash == D("-0.0995")  # no cash moves
    assert [e["t"] for e in events] == ["order", "fill", "cancel", "adjust"]
    assert events[1] == {"t": "fill", "tid": T0_MS * 1000 + 1, "id": o.order_id, "px": "99.5", "sz": "0.001",
                         "scope": "taker", "ts": T0_MS + 2}


def test_a_refused_record_changes_nothing():
    def refuse(rec: dict) -> None:
        raise OSError("disk full")

    a = AccountState(["BTCUSDT"], T0_MS, refuse)
    before = _snapshot(a)
    with pytest.raises(OSError):
        a.open_order("c1", "BTCUSDT", "buy", "gtc", D("1"), D("1"), "1", "1", T0_MS)
    assert _snapshot(a) == before


def test_the_records_rebuild_the_same_account():
    events: list[dict] = [{"t": "account", "account_id": "42", "created_ms": T0_MS}]
    a = _account(events)
    buy = a.open_order("b", "BTCUSDT", "buy", "gtc", D("100"), D("0.003"), "100", "0.003", T0_MS)
    sell = a.open_order("s", "BTCEUR", "sell", "ioc", D("90"), D("1"), "90", "1", T0_MS)
    a.record_fill(buy, D("100"), D("0.003"), "maker", T0_MS + 5)
    a.record_fill(sell, D("90"), D("0.5"), "taker", T0_MS + 6)
    a.record_cancel(sell, T0_MS + 6)
    a.record_adjust("BTCUSDT", D("0.001"), T0_MS + 7)
    b = AccountState(["BTCUSDT", "BTCEUR"], T0_MS - 5)
    assert b.restore(events) == len(events)
    assert b.account_id == "42" and _snapshot(b) == _snapshot(a)
    with pytest.raises(VenueError, match="fresh"):
        b.restore(events)
    with pytest.raises(VenueError, match="account record 1"):
        AccountState(["BTCUSDT"], T0_MS).restore([events[0], {**events[1], "side": "hold"}])


def test_find_needs_an_id_or_a_client_oid():
    a = AccountState(["BTCUSDT"], T0_MS)
    assert a.find("123", None) is None and a.find(None, "nope") is None
    for order_id, client_oid, code in ((None, None, "40019"), ("", "", "40019"), ("x", None, "40020"),
                                       (None, 5, "40020")):
        with pytest.raises(OrderRejected) as e:
            a.find(order_id, client_oid)
        assert e.value.code == code
