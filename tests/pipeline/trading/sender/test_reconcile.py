"""Reconciliation (pipeline/trading/sender/reconcile.py): account, positions, the state report."""

from __future__ import annotations

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import ExecReason, ExecType, client_oid
from pipeline.trading.sender.lane import ACCOUNT
from pipeline.trading.sender.queries import VenueQueries
from pipeline.trading.sender.reconcile import EXIT_ACCOUNT_CHANGED, PositionMismatch, Reconciler, base_coins
from pipeline.trading.sender.recovery import WindowRecovery
from tests.support.sender import INSTRUMENTS, Reports, intent


class Venue:
    """The lane's ``run_sync`` over a venue in memory: account/info, account/assets, unfilled-orders,
    orderInfo (by clientOid), fills (each once per poll: ``fills`` is filtered by ``idGreaterThan``)."""

    def __init__(self):
        self.account = "7001"
        self.balances = {"BTC": 0.0, "ETH": 0.0}
        self.orders: list[dict] = []
        self.fills: list[dict] = []
        self.queued: list = []
        self.asked: list[str] = []

    def answer(self, req) -> Result:
        endpoint = req.path.rsplit("/", 1)[-1]
        self.asked.append(endpoint)
        q = dict(kv.split("=", 1) for kv in req.query.split("&") if kv)
        if endpoint == "orderInfo":
            found = [o for o in self.orders if o["clientOid"] == q["clientOid"]]
            return Result(Outcome.OK, 200, "00000", "", found) if found else Result(Outcome.REJECTED, 400, "43001")
        data = {"info": {"userId": self.account},
                "assets": [{"coin": c, "available": str(q)} for c, q in self.balances.items()],
                "unfilled-orders": [o for o in self.orders if o["status"] in ("live", "partially_filled")],
                "fills": [f for f in self.fills if f["tradeId"] > int(q.get("idGreaterThan", 0))]}[endpoint]
        return Result(Outcome.OK, 200, "00000", "", data)

    def run_sync(self, gen):
        try:
            req = next(gen)
            while True:
                req = gen.send(self.answer(req))
        except StopIteration as stop:
            return stop.value

    def queue(self, gen, kind, thens=None):
        self.queued.append((kind, gen))

    def has(self, kind):
        return any(k == kind for k, _ in self.queued)

    def ready_at(self, paths, now):
        return now


def reconciler_of(ledger, stats, log):
    venue, reports, clock = Venue(), Reports(), lambda: 9_000
    queries = VenueQueries(ledger, venue, reports, Credentials("k", "s", "p"), lambda: 1_700_000_000_000, clock,
                           stats, log, poll_ns=50, grace_ms=100, batch=64, now_ns=0)
    recovery = WindowRecovery(ledger, Credentials("k", "s", "p"), INSTRUMENTS, lambda: 1_700_000_000_000, stats, log)
    rec = Reconciler(ledger, queries, recovery, venue, None, reports, Credentials("k", "s", "p"), INSTRUMENTS,
                     base_coins(INSTRUMENTS), lambda: 1_700_000_000_000, clock, stats, log, retry_backoff_ms=10,
                     account_check_ns=1_000, now_ns=0)
    return rec, venue, reports


def test_a_fresh_start_records_the_account_and_reports_flat_positions(ledger, stats, log):
    rec, venue, reports = reconciler_of(ledger, stats, log)
    assert rec.attempt(0) and not rec.reconciling and ledger.state.account == "7001" and stats["rec_n"] == 1
    assert reports.types() == [(ExecType.POSITION, 0), (ExecType.POSITION, 0), (ExecType.SYNC_DONE, 0)]
    assert log.named("sender_reconciled")[0]["positions"] == {"1": 0.0, "2": 0.0}


def test_orders_the_journal_lost_are_adopted_before_anything_else_so_positions_agree(ledger, stats, log):
    """A machine crash took the intents of two orders the venue holds (one working, one filled): they
    are found (unfilled-orders, then the fills and orderInfo), journaled and their fills ingested,
    before the journal's own orders are queried; the positions then agree with the balances."""
    rec, venue, reports = reconciler_of(ledger, stats, log)
    venue.orders = [{"orderId": "v8", "clientOid": client_oid(8), "symbol": "BTCUSDT", "side": "buy", "price": "99",
                     "size": "0.02", "baseVolume": "0", "priceAvg": "0", "status": "live"},
                    {"orderId": "v9", "clientOid": client_oid(9), "symbol": "ETHUSDT", "side": "sell", "price": "10",
                     "size": "0.5", "baseVolume": "0.5", "priceAvg": "10", "status": "filled"}]
    venue.fills = [{"tradeId": 40, "orderId": "v9", "clientOid": client_oid(9), "symbol": "ETHUSDT", "side": "sell",
                    "priceAvg": "10", "size": "0.5", "cTime": "1"}]
    venue.balances["ETH"] = -0.5
    assert rec.attempt(0) and stats["adopted"] == 2 and not rec.mismatches
    assert venue.asked[:5] == ["info", "unfilled-orders", "fills", "orderInfo", "orderInfo"]  # then 8's own query
    assert ledger.state.position(2).qty == -0.5 and ledger.last_trade_id == 40
    assert [(etype, oid) for etype, oid in reports.types() if oid] == [(ExecType.FILLED, 9), (ExecType.OPEN_ORDER, 8)]


def test_a_position_apart_by_whole_lots_is_adjusted_flagged_and_reported_one_under_a_lot_is_not(ledger, stats, log):
    rec, venue, reports = reconciler_of(ledger, stats, log)
    venue.balances = {"BTC": -0.0005, "ETH": 0.0004}  # 5 lots of 0.0001 apart; 0.4 of a 0.001 lot
    assert rec.attempt(0)
    assert rec.mismatches == {1: PositionMismatch(0.0, -0.0005)} and stats["pdiff_1"] == -5 and "pdiff_2" not in stats
    assert ledger.state.position(1).qty == -0.0005 and ledger.state.position(2).qty == 0.0
    mm = [(kw["price"], kw["size"]) for _, etype, _, kw in reports.calls if etype == ExecType.POSITION_MISMATCH]
    assert mm == [(0.0, -0.0005)]


def test_the_state_report_lists_positions_mismatches_open_orders_then_sync_done(ledger, stats, log):
    rec, _, reports = reconciler_of(ledger, stats, log)
    for oid in (3, 2):
        ledger.record(intent(oid))
    ledger.record({"t": "reject", "oid": 3, "code": "x"})
    rec.mismatches[2] = PositionMismatch(0.5, 0.25)
    rec.account_changed = True
    rec.report_state(77)
    assert reports.types() == [(ExecType.POSITION, 0), (ExecType.POSITION, 0), (ExecType.POSITION_MISMATCH, 0),
                               (ExecType.OPEN_ORDER, 2), (ExecType.SYNC_DONE, 0)]
    assert {ts for ts, *_ in reports.calls} == {77} and reports.calls[-1][3]["reason"] == ExecReason.ACCOUNT_CHANGED


def test_a_running_check_that_finds_another_account_exits_for_a_reconciling_restart(ledger, stats, log):
    rec, venue, _ = reconciler_of(ledger, stats, log)
    assert rec.attempt(0)
    rec.queue_account_check(2_000)
    rec.queue_account_check(3_000)  # one at a time
    assert [k for k, _ in venue.queued] == [ACCOUNT] and rec.next_account_check_ns == 4_000
    venue.account = "7002"
    with pytest.raises(SystemExit) as exc:
        venue.run_sync(venue.queued[0][1])
    assert exc.value.code == EXIT_ACCOUNT_CHANGED and log.named("sender_venue_account_changed")[0]["new"] == "7002"


def test_a_symbol_without_a_base_coin_is_a_config_error():
    with pytest.raises(ConfigError, match="spot balances"):
        base_coins({1: INSTRUMENTS[1].__class__(symbol="BTC-PERP")})


def test_the_running_account_check_waits_for_account_infos_token_rather_than_hold_the_lane(ledger, stats, log):
    rec, venue, _ = reconciler_of(ledger, stats, log)
    assert rec.attempt(0)
    asked = []
    venue.ready_at = lambda paths, now: asked.append(tuple(paths)) or 2_500
    rec.queue_account_check(2_000)
    assert venue.queued == [] and rec.next_account_check_ns == 2_500
    assert asked == [("/api/v2/spot/account/info",)]
    rec.queue_account_check(2_500)
    assert [k for k, _ in venue.queued] == [ACCOUNT] and rec.next_account_check_ns == 3_500
