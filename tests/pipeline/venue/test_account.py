"""The paper venue's account outlives its process (``pipeline.venue.account`` + ``OrderEngine.restore``):
an engine writes every state change to a real account log in a tmp dir, a new engine restored from
that file has the same account (orders, fills, positions, cash, account id, clientOids seen) and goes
on from it (ids above the old ones, resting orders still fill); a torn last line is ignored and
truncated, a corrupt middle line refuses the file, a reset is a new account with the old file kept."""

from __future__ import annotations

import os
import stat
from decimal import Decimal

import orjson
import pytest

from pipeline.trading.bitget.protocol import base_coin
from pipeline.trading.journal import encode_record
from pipeline.venue.account import AccountLog, decode_account_line, main, new_account_record, parse_account_log
from pipeline.venue.errors import VenueError
from pipeline.venue.account_state import STATUS_CANCELLED, STATUS_FILLED, STATUS_LIVE, STATUS_PARTIAL
from pipeline.venue.order_fields import OrderRejected
from pipeline.venue.orders import OrderEngine
from tests.support.clock import ManualClock
from tests.support.venue import RULES, T0_MS, Book, venue_clock

D = Decimal


def order(coid: str, side: str = "buy", price: str = "99.0", size: str = "1", force: str = "gtc",
          symbol: str = "BTCUSDT") -> dict:
    return {"symbol": symbol, "side": side, "orderType": "limit", "force": force, "price": price, "size": size,
            "clientOid": coid}


def start(path, book: Book, clock: ManualClock, *, reset: bool = False) -> tuple[OrderEngine, AccountLog]:
    """What the venue does at start: open the log, restore the engine, then log every change."""
    log = AccountLog(path, clock_ms=clock)
    records = log.open(reset=reset)
    eng = OrderEngine(RULES, book.levels, clock, max_notional=1_000_000)
    eng.restore(records)
    eng.on_event = log.append
    return eng, log


def trade_a_little(eng: OrderEngine, clock: ManualClock) -> None:
    """Taker fills both ways, a resting remainder, resting orders, a cancel, an ioc remainder, a killed fok."""
    eng.place(order("t-buy", price="100.2", size="2.5"))  # takes 100.1 x1, 100.2 x1.5: filled
    clock.advance_ms(5)
    eng.place(order("t-part", price="100.2", size="1"))  # 0.5 left at 100.2, then rests (partial)
    eng.place(order("rest-1", price="99.0", size="2"))
    eng.place(order("rest-2", price="99.5", size="1"))
    eng.place(order("eth-sell", side="sell", price="10.20", size="1", symbol="ETHUSDT"))
    clock.advance_ms(5)
    eng.place(order("t-sell", side="sell", price="9.99", size="2", symbol="ETHUSDT"))  # fills 2 at 9.99
    eng.cancel("BTCUSDT", client_oid="rest-1")
    eng.place(order("ioc-1", side="sell", price="99.9", size="3", force="ioc"))  # 1 at 99.9, rest cancelled
    eng.place(order("fok-1", price="100.5", size="50", force="fok"))  # killed
    eng.place({**order("", price="98.0", size="1"), "clientOid": ""})  # venue-assigned clientOid


def snapshot(eng: OrderEngine) -> dict:
    return {"orders": {i: o.to_json() for i, o in eng.orders.items()}, "fills": [f.to_json() for f in eng.fills],
            "positions": eng.positions(), "cash": eng.cash(), "account": (eng.account_id, eng.created_ms),
            "open": [(o.order_id, o.price, o.seq) for o in eng.open_orders()],
            "resting": {s: {side: [o.order_id for o in lst] for side, lst in sides.items()}
                        for s, sides in eng._resting.items()}}


def test_base_coin_is_the_symbol_without_usdt_and_refuses_other_quotes():
    assert base_coin("BTCUSDT") == "BTC" and base_coin("SUNUSDT") == "SUN"
    for bad in ("BTCUSDC", "USDT", "", None, "btcusdt"):
        with pytest.raises(ValueError):
            base_coin(bad)


def test_a_new_log_starts_with_a_random_account_record_in_a_0600_file(tmp_path):
    path = tmp_path / "run" / "venue.account"
    log = AccountLog(path, clock_ms=venue_clock())
    (rec,) = log.open()
    log.close()
    assert log.created and rec["t"] == "account" and rec["created_ms"] == T0_MS
    aid = rec["account_id"]
    assert aid.isdigit() and 0 < int(aid) < 2 ** 63
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes() == encode_record(rec)
    assert new_account_record(1)["account_id"] != aid  # random (a 1 in 2**63 chance to fail)


def test_a_restored_engine_has_the_same_account_and_goes_on_above_the_old_ids(tmp_path):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    trade_a_little(eng, clock)
    before = snapshot(eng)
    assert before["positions"] == {"BTCUSDT": D("2.5") + D("0.5") - D("1"), "ETHUSDT": D("-2")}
    assert before["cash"] == -(D("100.1") + D("100.2") * D("1.5") + D("100.2") * D("0.5")) + D("9.99") * 2 + D("99.9")
    statuses = {o.client_oid: o.status for o in eng.orders.values()}
    assert statuses == {"t-buy": STATUS_FILLED, "t-part": STATUS_PARTIAL, "rest-1": STATUS_CANCELLED,
                        "rest-2": STATUS_LIVE, "eth-sell": STATUS_LIVE, "t-sell": STATUS_FILLED,
                        "ioc-1": STATUS_CANCELLED, "fok-1": STATUS_CANCELLED, f"venue{max(eng.orders)}": STATUS_LIVE}
    old_max_oid, old_max_tid = max(eng.orders), max(f.trade_id for f in eng.fills)
    log.close()

    clock2 = venue_clock(T0_MS - 60_000)  # even a clock that went back a minute: ids stay above the old ones
    eng2, log2 = start(path, book, clock2)
    assert not log2.created and snapshot(eng2) == before
    assert eng2.counters == {"orders_placed": 0, "orders_rejected": 0, "fills": 0, "cancels": 0}
    for coid in ("t-buy", "rest-1", "fok-1", f"venue{old_max_oid}"):  # every old clientOid, whatever its state
        with pytest.raises(OrderRejected) as e:
            eng2.place(order(coid, price="90.0"))
        assert e.value.code == "43118"
    o = eng2.place(order("new-1", price="100.5", size="1"))  # takes 100.5 (100.1 / 100.2 were taken before)
    assert o.order_id > old_max_oid and o.seq > max(x.seq for x in eng.orders.values())
    assert [f.trade_id for f in eng2.fills_since(order_id=o.order_id)][0] > old_max_tid
    # an old open order is still cancellable
    assert eng2.cancel("ETHUSDT", client_oid="eth-sell").status == STATUS_CANCELLED
    log2.close()
    eng3, log3 = start(path, book, venue_clock())  # and what the second engine did is in the log too
    assert snapshot(eng3) == snapshot(eng2)
    log3.close()


def test_a_restored_resting_order_still_fills_by_book_and_by_trade(tmp_path):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("b1", price="99.5", size="2"))
    eng.place(order("b2", price="99.4", size="1"))
    eng.place(order("s1", side="sell", price="100.3", size="1"))
    log.close()

    eng2, log2 = start(path, book, clock)
    assert [o.client_oid for o in eng2._resting["BTCUSDT"]["buy"]] == ["b1", "b2"]  # price-time priority
    clock.advance_ms(10)
    book.books["BTCUSDT"] = ([["99.0", "1"]], [["99.5", "0.5"], ["99.6", "9"]])
    assert eng2.book_changed("BTCUSDT") == 1
    b1 = eng2.order(client_oid="b1")
    assert b1.status == STATUS_PARTIAL and b1.filled == D("0.5") and eng2.position("BTCUSDT") == D("0.5")
    assert eng2.traded("BTCUSDT", [{"price": "100.4", "size": "3"}]) == 1  # prints through our sell
    assert eng2.order(client_oid="s1").status == STATUS_FILLED and eng2.position("BTCUSDT") == D("-0.5")
    log2.close()
    eng3, log3 = start(path, book, clock)
    assert snapshot(eng3) == snapshot(eng2)
    log3.close()


@pytest.mark.parametrize("tail", [b"3f2a", b"0123abcd {\"t\":\"fill\",\"tid\":1", b"00000000 {\"t\":\"cancel\"}\n"])
def test_a_torn_last_line_is_ignored_and_truncated(tmp_path, tail):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("a", price="99.0"))
    log.close()
    clean = path.read_bytes()
    with open(path, "ab") as f:
        f.write(tail)
    eng2, log2 = start(path, book, clock)
    assert log2.torn_bytes == len(tail) and path.read_bytes() == clean
    assert [o.client_oid for o in eng2.orders.values()] == ["a"]
    eng2.place(order("b", price="99.1"))  # the next record starts on a clean line
    log2.close()
    records, end = parse_account_log(path.read_bytes())
    assert end == path.stat().st_size and [r.get("coid") for r in records if r["t"] == "order"] == ["a", "b"]


def test_a_torn_account_record_is_a_new_account(tmp_path):
    path = tmp_path / "venue.account"
    path.write_bytes(encode_record(new_account_record(T0_MS, 42))[:20])
    log = AccountLog(path, clock_ms=venue_clock())
    (rec,) = log.open()
    log.close()
    assert log.created and rec["account_id"] != "42" and path.read_bytes() == encode_record(rec)


def test_a_corrupt_line_before_the_last_refuses_the_file(tmp_path):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("a", price="99.0"))
    eng.place(order("b", price="99.1"))
    log.close()
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"coid":"a"', b'"coid":"x"'))  # the CRC no longer matches
    with pytest.raises(VenueError, match="corrupt"):
        AccountLog(path).open()
    assert path.read_bytes() == data.replace(b'"coid":"a"', b'"coid":"x"')  # nothing truncated or created


def test_decode_takes_only_lines_encode_record_would_write():
    line = encode_record({"t": "cancel", "id": 5, "ts": 1})[:-1]
    assert decode_account_line(line) == {"t": "cancel", "id": 5, "ts": 1}
    assert decode_account_line(encode_record({"t": "intent", "oid": 1})[:-1]) is None  # a journal record
    assert decode_account_line(line.replace(b"cancel", b"cancex")) is None
    assert decode_account_line(line[:9] + b'{"t": "cancel", "id": 5, "ts": 1}') is None  # same JSON, other bytes
    assert decode_account_line(b"") is None and decode_account_line(b"zzzzzzzz []") is None


def test_reset_is_a_new_account_and_the_old_file_is_kept_aside(tmp_path):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("t-buy", price="100.2", size="1"))
    old_id, old_bytes = eng.account_id, path.read_bytes()
    log.close()

    clock.advance_ms(1000)
    eng2, log2 = start(path, book, clock, reset=True)
    assert log2.created and eng2.account_id != old_id and eng2.created_ms == clock.now
    assert eng2.orders == {} and eng2.fills == [] and eng2.position("BTCUSDT") == 0 and eng2.cash() == 0
    assert eng2.place(order("t-buy", price="99.0")).status == STATUS_LIVE  # a new account: the clientOid is free
    assert log2.backup is not None and log2.backup.name.startswith("venue.account.") \
        and log2.backup.name.endswith(".bak") and log2.backup.read_bytes() == old_bytes
    log2.close()
    eng3, log3 = start(path, book, clock)
    assert eng3.account_id == eng2.account_id and [o.client_oid for o in eng3.orders.values()] == ["t-buy"]
    log3.close()

    path.unlink()  # the documented way by hand: rm run/venue.account
    eng4, log4 = start(path, book, clock)
    assert log4.created and eng4.account_id not in (old_id, eng2.account_id)
    log4.close()


def test_the_reset_command_renames_the_file_aside_and_show_prints_the_account(tmp_path, capsys):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("a", price="99.0"))
    log.close()
    assert main(["show", str(path)]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert shown == {"account_id": eng.account_id, "created_ms": T0_MS, "records": {"account": 1, "order": 1}}
    assert main(["reset", str(path)]) == 0
    assert len(list(tmp_path.glob("venue.account.*.bak"))) == 1
    records, _ = parse_account_log(path.read_bytes())
    assert [r["t"] for r in records] == ["account"] and records[0]["account_id"] != eng.account_id


def test_one_process_at_a_time(tmp_path):
    path = tmp_path / "venue.account"
    log = AccountLog(path)
    log.open()
    try:
        with pytest.raises(VenueError, match="held by another"):
            AccountLog(path).open()
        with pytest.raises(VenueError, match="held by another"):
            AccountLog(path).open(reset=True)  # a reset never renames a file a running venue holds
        assert list(tmp_path.iterdir()) == [path]
    finally:
        log.close()
    AccountLog(path).open()


def test_an_admin_adjustment_changes_the_position_only_and_persists(tmp_path):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("t-buy", price="100.1", size="1"))
    cash = eng.cash()
    clock.advance_ms(3)
    assert eng.adjust_position("BTCUSDT", "-0.002") == D("0.998")
    assert eng.cash() == cash and len(eng.fills) == 1 and eng.balance_u_ms("BTCUSDT") == clock.now
    for sym, delta, code in (("XYZUSDT", "1", "40034"), ("BTCUSDT", "0", "40020"), ("BTCUSDT", "abc", "40020"),
                             ("BTCUSDT", "NaN", "40020"), ("BTCUSDT", 1.5, "40020")):
        with pytest.raises(OrderRejected) as e:
            eng.adjust_position(sym, delta)
        assert e.value.code == code
    log.close()
    eng2, log2 = start(path, book, clock)
    assert eng2.position("BTCUSDT") == D("0.998") and eng2.cash() == cash
    assert eng2.balance_u_ms("BTCUSDT") == clock.now
    log2.close()


@pytest.mark.parametrize("records, words", [
    ([], "no account record"),
    ([{"t": "order", "id": 1}], "account record must be the first"),
    ([new_account_record(T0_MS, 7), new_account_record(T0_MS, 8)], "account record must be the first"),
    ([new_account_record(T0_MS, 7), {"t": "fill", "tid": 1, "id": 9, "px": "1", "sz": "1", "scope": "maker",
                                     "ts": 1}], "no earlier record placed"),
    ([new_account_record(T0_MS, 7), {"t": "cancel", "id": 9, "ts": 1}], "no earlier record placed"),
    ([new_account_record(T0_MS, 7), {"t": "nonsense"}], "unknown record type"),
    ([new_account_record(T0_MS, 7), {"t": "order", "id": "1"}], "TypeError"),
    ([{"t": "account", "account_id": "abc", "created_ms": 1}], "decimal string"),
])
def test_restore_refuses_records_that_do_not_make_an_account(records, words):
    eng = OrderEngine(RULES, Book().levels, venue_clock())
    with pytest.raises(VenueError, match=words):
        eng.restore(records)


def test_restore_needs_a_fresh_engine():
    eng = OrderEngine(RULES, Book().levels, venue_clock())
    eng.restore([new_account_record(T0_MS, 7)])
    assert eng.account_id == "7"
    with pytest.raises(VenueError, match="fresh engine"):
        eng.restore([new_account_record(T0_MS, 8)])


def test_an_order_of_a_symbol_no_longer_served_keeps_its_client_oid_but_does_not_rest(tmp_path):
    path, book, clock = tmp_path / "venue.account", Book(), venue_clock()
    eng, log = start(path, book, clock)
    eng.place(order("eth-1", price="9.00", symbol="ETHUSDT"))
    log.close()
    log2 = AccountLog(path)
    eng2 = OrderEngine({"BTCUSDT": RULES["BTCUSDT"]}, book.levels, clock)
    eng2.restore(log2.open())
    log2.close()
    assert eng2.order(client_oid="eth-1").is_open and "ETHUSDT" not in eng2._resting
    with pytest.raises(OrderRejected) as e:
        eng2.place(order("eth-1", price="99.0"))
    assert e.value.code == "43118"
