"""What the venue tells (pipeline/trading/sender/queries.py): fills ingested once, owed queries queued, the
periodic poll paced."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.bitget.orderapi import OrderApi
from pipeline.trading.bitget import rest
from pipeline.trading.bitget.rest import Outcome, Result, VenueFill
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import ExecType, client_oid
from pipeline.trading.sender.lane import POLL, QUERY
from pipeline.trading.sender.lane import Lane as RealLane
from pipeline.trading.sender.queries import VenueQueries
from pipeline.trading.sender.ratelimit import EndpointBudget
from tests.support.sender import Reports, intent


class Lane:
    """``Lane`` stand-in: keeps the queued jobs' kinds and callbacks."""

    def __init__(self):
        self.queued: list = []

    def queue(self, gen, kind, thens=None):
        self.queued.append((kind, thens))

    def has(self, kind):
        return False

    def ready_at(self, paths, now):
        return now


def queries_of(ledger, stats, log, batch=64):
    reports, lane, now = Reports(), Lane(), [9_000]
    q = VenueQueries(ledger, lane, reports, None, lambda: 1_700_000_000_000, lambda: now[0], stats, log, poll_ns=50,
                     grace_ms=100, batch=batch, now_ns=0)
    return q, reports, lane, now


def fill(tid: int, oid: int | None, size: float = 0.01) -> VenueFill:
    coid = client_oid(oid) if oid is not None else "someone-elses"
    return VenueFill(tradeId=tid, orderId="v", clientOid=coid, symbol="BTCUSDT", side="buy", priceAvg=100.0,
                     size=size, cTime=1_700_000_000_000)


def test_a_fill_is_journaled_and_reported_once_and_an_order_first_seen_by_its_fill_is_acked_first(ledger, stats, log):
    ledger.record(intent(1))
    ledger.origin_ts[1] = 1001
    q, reports, _, _ = queries_of(ledger, stats, log)
    q.owed[1] = 0
    q.ingest([fill(11, 1), fill(12, None), fill(11, 1)], None)
    assert reports.types() == [(ExecType.ACKED, 1), (ExecType.FILLED, 1)] and ledger.last_trade_id == 12
    assert reports.calls[0][0] == 1001 and reports.calls[1][0] == 9_000  # the ORDER's; the clock's for the fill
    assert ledger.orders[1].filled == 0.01 and 1 not in q.owed and stats["fills"] == 1


def test_owed_queries_are_queued_when_due_one_at_a_time_and_owed_again_after_an_inconclusive_answer(ledger, stats,
                                                                                                     log):
    for oid in (1, 2):
        ledger.record(intent(oid))
    q, _, lane, now = queries_of(ledger, stats, log)
    q.owed.update({1: 100, 2: 10_000})
    assert q.query_owed(5_000) == 1 and [k for k, _ in lane.queued] == [QUERY] and q.querying == {1}
    assert q.query_owed(5_000) == 0 and q.next_due_ns() == 10_000  # 1 is on the lane already
    (_, (then,)), = lane.queued
    then()  # the query ended, the order still owed: due poll_interval later
    assert q.querying == set() and q.owed[1] == now[0] + 50


def test_one_orders_fills_do_not_move_the_fills_polls_cursor_past_anothers_unpolled_fill(ledger, stats, log):
    """Fills fetched for one order (an orderInfo that shows more filled) are journaled and reported, but
    the last trade id is the fills poll's: another order's fill with a lower id is still polled."""
    for oid in (1, 2):
        ledger.record(intent(oid))
    q, reports, _, _ = queries_of(ledger, stats, log)
    q.ingest([fill(21, 2)], None, advance=False)
    assert ledger.last_trade_id == 0 and reports.types()[-1] == (ExecType.FILLED, 2)
    q.ingest([fill(20, 1), fill(21, 2)], None)  # the next poll: 1's fill is there, 2's is not reported twice
    assert ledger.last_trade_id == 21 and [t for t in reports.types() if t[0] == ExecType.FILLED] == [
        (ExecType.FILLED, 2), (ExecType.FILLED, 1)]


def test_a_perpetuals_fill_without_a_client_oid_is_matched_by_the_venue_order_id(ledger, stats, log):
    ledger.record(intent(1))
    ledger.record({"t": "state", "oid": 1, "status": "live", "vid": "v77"})
    q, reports, _, _ = queries_of(ledger, stats, log)
    mix_fill = VenueFill(tradeId=21, orderId="v77", clientOid="", symbol="BTCUSDT", side="buy", priceAvg=100.0,
                         size=0.01, cTime=1_700_000_000_000)
    stranger = VenueFill(tradeId=22, orderId="v99", clientOid="", symbol="BTCUSDT", side="buy", priceAvg=100.0,
                         size=0.01, cTime=1_700_000_000_000)
    q.ingest([mix_fill, stranger], None)
    assert reports.types() == [(ExecType.FILLED, 1)] and ledger.orders[1].filled == 0.01 and stats["fills"] == 1


def test_the_fills_poll_asks_each_product_after_the_same_cursor_and_advances_to_the_newest(ledger, stats, log):
    spot = InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001)
    perp = InstrumentConfig(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001, product_type="USDT-FUTURES",
                            contract_size=0.001)
    q, _, _, _ = queries_of(ledger, stats, log)
    q.api = OrderApi(Credentials("k", "s", "p"), {1: spot, 2: perp})
    ledger.last_trade_id = 10
    gen = q.poll_fills_gen()
    first = next(gen)
    assert first.target == "/api/v2/spot/trade/fills?idGreaterThan=10"
    second = gen.send(Result(Outcome.OK, 200, "00000", "", [fill(14, None)]))
    assert second.target == "/api/v2/mix/order/fills?idGreaterThan=10&productType=USDT-FUTURES"
    with pytest.raises(StopIteration) as stop:
        gen.send(Result(Outcome.OK, 200, "00000", "", {"fillList": [
            {"tradeId": "12", "orderId": "x", "symbol": "ETHUSDT", "side": "sell", "price": "10", "baseVolume": "1"}]}))
    assert stop.value.value is True
    assert ledger.last_trade_id == 14



def test_the_periodic_poll_is_queued_only_once_its_endpoints_have_tokens(ledger, stats, log):
    """Paced by the lane's budget (fills: 5 banked, 8 a second): with an order working, a poll due
    while fills has no token is not queued (it would hold the lane) but due when the token is."""
    q, _, lane, _ = queries_of(ledger, stats, log)
    budget = EndpointBudget(1.0, 0)
    lane.ready_at = RealLane(None, None, 0, stats, log, budget=budget).ready_at
    ledger.record(intent(5))
    ledger.record({"t": "ack", "oid": 5, "vid": "v5"})
    while budget.take(rest.FILLS_PATH, 0):
        pass
    q.queue_poll(0)
    assert lane.queued == [] and q.next_poll_ns == 125_000_001
    q.queue_poll(125_000_001)
    assert [k for k, _ in lane.queued] == [POLL] and q.next_poll_ns == 125_000_051
