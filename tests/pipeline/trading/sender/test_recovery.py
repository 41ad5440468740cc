"""The lost window's recovery (pipeline/trading/sender/recovery.py): every order of ours the venue holds
open, or that has fills after the journal's last trade id, and that the journal lacks, is adopted."""

from __future__ import annotations

from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import client_oid
from pipeline.trading.sender.queries import FILL_PAGE
from pipeline.trading.sender.recovery import WindowRecovery
from tests.support.sender import INSTRUMENTS, intent

WALL_MS = 1_700_000_000_000


def venue_order(oid: int | str, status: str = "live", symbol: str = "BTCUSDT", filled: str = "0") -> dict:
    coid = client_oid(oid) if isinstance(oid, int) else oid
    return {"orderId": f"v{oid}", "clientOid": coid, "symbol": symbol, "side": "buy", "price": "99.5", "size": "0.02",
            "baseVolume": filled, "priceAvg": "99.5" if filled != "0" else "0", "status": status}


def venue_fill(tid: int, oid: int | str) -> dict:
    coid = client_oid(oid) if isinstance(oid, int) else oid
    return {"tradeId": tid, "orderId": f"v{oid}", "clientOid": coid, "symbol": "BTCUSDT", "side": "buy",
            "priceAvg": "99.5", "size": "0.01", "cTime": "1"}


class Venue:
    """Answers a request generator (as ``Lane.run_sync``) from ``orders`` and ``fills``; notes each
    request (endpoint and query); ``refuse``: the endpoint answered with a 5xx."""

    def __init__(self, orders=(), fills=(), refuse: str = ""):
        self.orders, self.fills, self.refuse = list(orders), list(fills), refuse
        self.asked: list[tuple[str, str]] = []

    def answer(self, req) -> Result:
        endpoint = req.path.rsplit("/", 1)[-1]
        self.asked.append((endpoint, req.query))
        if endpoint == self.refuse:
            return Result(Outcome.RETRYABLE, 503, "", "down")
        q = dict(kv.split("=", 1) for kv in req.query.split("&") if kv)
        if endpoint == "orderInfo":
            return Result(Outcome.OK, 200, "00000", "", [o for o in self.orders if o["clientOid"] == q["clientOid"]])
        if endpoint == "unfilled-orders":
            return Result(Outcome.OK, 200, "00000", "", [o for o in self.orders if o["status"] == "live"])
        after = int(q.get("idGreaterThan", 0))
        return Result(Outcome.OK, 200, "00000", "", [f for f in self.fills if f["tradeId"] > after][:FILL_PAGE])

    def run(self, gen):
        try:
            req = next(gen)
            while True:
                req = gen.send(self.answer(req))
        except StopIteration as stop:
            return stop.value


def recovery_of(ledger, stats, log) -> WindowRecovery:
    return WindowRecovery(ledger, Credentials("k", "s", "p"), INSTRUMENTS, lambda: WALL_MS, stats, log)


def test_an_open_order_of_ours_the_journal_lacks_is_adopted_with_the_venues_state(ledger, stats, log):
    ledger.record(intent(1))
    venue = Venue([venue_order(1), venue_order(2), venue_order("someone-elses")])
    assert venue.run(recovery_of(ledger, stats, log).adopt_gen())
    o = ledger.orders[2]
    assert (o.status, o.vid, o.coid, o.iid, o.side, o.px, o.sz, o.tif) == ("live", "v2", client_oid(2), 1, 1, 99.5,
                                                                           0.02, 0)
    assert ledger.open == {1, 2} and ledger.orders[1].vid == "" and len(ledger.orders) == 2  # 1 untouched
    assert stats["adopted"] == 1 and log.named("sender_order_adopted")[0]["found_by"] == "open"


def test_an_order_with_fills_after_the_last_trade_id_is_asked_for_and_adopted_without_moving_the_cursor(
        ledger, stats, log):
    ledger.record(intent(1))
    ledger.record({"t": "fill", "oid": 1, "tid": 50, "px": 99.5, "sz": 0.01, "side": 1, "iid": 1, "ts_ms": 1})
    ledger.last_trade_id = 50
    venue = Venue([venue_order(1, "filled", filled="0.01"), venue_order(3, "cancelled", filled="0.01")],
                  [venue_fill(50, 1), venue_fill(51, 3), venue_fill(52, 3)])
    assert venue.run(recovery_of(ledger, stats, log).adopt_gen())
    assert venue.asked == [("unfilled-orders", ""), ("fills", "idGreaterThan=50"),
                           ("orderInfo", f"clientOid={client_oid(3)}")]
    assert ledger.orders[3].status == "cancelled" and ledger.orders[3].filled == 0.0  # the fills poll ingests them
    assert ledger.last_trade_id == 50 and stats["adopted"] == 1


def test_the_fills_are_read_page_by_page(ledger, stats, log):
    fills = [venue_fill(100 + i, 4) for i in range(FILL_PAGE)] + [venue_fill(100 + FILL_PAGE, 5)]
    venue = Venue([venue_order(4, "filled"), venue_order(5, "filled")], fills)
    assert venue.run(recovery_of(ledger, stats, log).adopt_gen())
    pages = [q for endpoint, q in venue.asked if endpoint == "fills"]
    assert pages == ["", f"idGreaterThan={100 + FILL_PAGE - 1}"] and set(ledger.orders) == {4, 5}


def test_an_order_on_a_symbol_not_traded_here_is_counted_and_logged_not_adopted(ledger, stats, log):
    venue = Venue([venue_order(6, symbol="SOLUSDT")])
    assert venue.run(recovery_of(ledger, stats, log).adopt_gen())
    assert not ledger.orders and stats["adopt_skipped"] == 1 and log.named("sender_order_not_adopted")


def test_an_unanswered_request_ends_the_attempt_and_a_retry_adopts_once(ledger, stats, log):
    venue = Venue([venue_order(7)], [venue_fill(60, 8)], refuse="fills")
    venue.orders.append(venue_order(8, "filled"))
    rec = recovery_of(ledger, stats, log)
    assert venue.run(rec.adopt_gen()) is False and set(ledger.orders) == {7}
    venue.refuse = ""
    assert venue.run(rec.adopt_gen()) and set(ledger.orders) == {7, 8} and stats["adopted"] == 2


class MixVenue:
    """The mix endpoints of one perpetual: orders-pending (none open), fills without clientOid, detail."""

    def __init__(self, orders, fills):
        self.orders, self.fills, self.asked = orders, fills, []

    def answer(self, req) -> Result:
        endpoint = req.path.rsplit("/", 1)[-1]
        q = dict(kv.split("=", 1) for kv in req.query.split("&") if kv)
        self.asked.append((endpoint, q))
        if endpoint == "orders-pending":
            return Result(Outcome.OK, 200, "00000", "", {"entrustedList": None})
        if endpoint == "fills":
            rows = [{"tradeId": str(f["tradeId"]), "orderId": f["orderId"], "symbol": "ETHUSDT", "side": "buy",
                     "price": "99.5", "baseVolume": "0.01"} for f in self.fills]
            return Result(Outcome.OK, 200, "00000", "", {"fillList": rows})
        (o,) = [o for o in self.orders if o["orderId"] == q.get("orderId")]
        return Result(Outcome.OK, 200, "00000", "", {**o, "state": o["status"]})

    run = Venue.run


def test_a_perpetuals_lost_order_behind_a_fill_is_found_by_its_venue_order_id(ledger, stats, log):
    perp = InstrumentConfig(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001, product_type="USDT-FUTURES",
                            contract_size=0.001)
    rec = WindowRecovery(ledger, Credentials("k", "s", "p"), {2: perp}, lambda: WALL_MS, stats, log)
    order = {**venue_order(5, "filled", symbol="ETHUSDT", filled="0.02"), "orderId": "v5"}
    venue = MixVenue([order], [{"tradeId": 40, "orderId": "v5"}])
    assert venue.run(rec.adopt_gen())
    assert [e for e, _ in venue.asked] == ["orders-pending", "fills", "detail"]
    assert venue.asked[2][1] == {"orderId": "v5", "productType": "USDT-FUTURES", "symbol": "ETHUSDT"}
    o = ledger.orders[5]
    assert (o.status, o.vid, o.iid) == ("filled", "v5", 2) and stats["adopted"] == 1
