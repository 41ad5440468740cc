"""A NEW's admission (pipeline/trading/sender/admission.py): duplicates, validation, the intent; a reduce-only
ORDER's request."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from pipeline.runtime import http1
from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.bitget import rest
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import ExecReason, ExecType, OrderCmd, Side, TimeInForce, decode_order
from pipeline.trading.risk import OrderApproved, encode_order
from pipeline.trading.sender.admission import NewOrderAdmission
from pipeline.trading.sender.inflight import InFlightRequests
from pipeline.trading.sender.outbox import OutboxItem
from pipeline.venue.http_wire import HttpRequest
from pipeline.venue.orders import OrderEngine
from pipeline.venue.rest_api import RestApi
from tests.support.sender import INSTRUMENTS, Reports, intent, order
from tests.support.venue import RULES, T0_MS
from tests.support.venue import Book as VenueBook


def admission_of(ledger, stats, log, queued=(), flying=(), stalled=False):
    reports, group, owed = Reports(), SimpleNamespace(pending=[], stalled=lambda now: stalled), {}
    adm = NewOrderAdmission(ledger, group, SimpleNamespace(has_new=lambda oid: oid in queued),
                            SimpleNamespace(has_new=lambda oid: oid in flying), owed, reports, INSTRUMENTS,
                            lambda: 1_700_000_000_000, lambda: 9_000, lambda code, ts: None, stats, log)
    return adm, reports, group, owed


def test_an_admitted_new_is_journaled_with_its_body_and_waits_for_the_group_commit(ledger, stats, log):
    adm, reports, group, _ = admission_of(ledger, stats, log)
    assert adm.admit(order(OrderCmd.NEW, 1).order, 1001)
    assert ledger.orders[1].status == "pending" and ledger.origin_ts[1] == 1001 and '"clientOid"' in ledger.bodies[1]
    assert [(p.order_id, p.ts_origin_ns) for p in group.pending] == [(1, 1001)] and not reports.calls


@pytest.mark.parametrize("record, etype, leaves", [
    ({"t": "ack", "oid": 2, "vid": "v"}, ExecType.ACKED, None),
    ({"t": "reject", "oid": 2, "code": "43012"}, ExecType.REJECTED, 0.0),
    ({"t": "unknown", "oid": 2}, ExecType.UNKNOWN, None),
])
def test_a_journaled_id_is_answered_duplicate_never_sent_again(ledger, stats, log, record, etype, leaves):
    ledger.record(intent(2))
    ledger.record(record)
    adm, reports, group, owed = admission_of(ledger, stats, log)
    assert not adm.admit(order(OrderCmd.NEW, 2).order, 1002)
    ((ts, got, oid, kw),) = reports.calls
    assert (ts, got, oid, kw["reason"], kw.get("leaves")) == (1002, etype, 2, ExecReason.DUPLICATE, leaves)
    assert not group.pending and stats["dups"] == 1
    assert owed == ({2: 9_000} if etype is ExecType.UNKNOWN else {})  # an open outcome, not queued: queried


def test_a_duplicate_still_queued_or_in_flight_owes_no_query(ledger, stats, log):
    ledger.record(intent(3))
    for queued, flying in (((3,), ()), ((), (3,))):
        adm, _, _, owed = admission_of(ledger, stats, log, queued, flying)
        assert not adm.admit(order(OrderCmd.NEW, 3).order, 1003) and owed == {}


def test_an_order_off_the_tick_is_malformed_and_one_whose_intent_cannot_be_written_is_halted(ledger, stats, log):
    adm, reports, group, _ = admission_of(ledger, stats, log)
    assert not adm.admit(order(OrderCmd.NEW, 4).order._replace(price=100.05), 1004)

    def full(fd, data):
        raise OSError(28, "No space left on device")

    ledger.journal._write = full
    assert not adm.admit(order(OrderCmd.NEW, 5).order, 1005)
    assert [(etype, oid, kw["reason"]) for _, etype, oid, kw in reports.calls] == [
        (ExecType.REJECTED, 4, ExecReason.MALFORMED), (ExecType.REJECTED, 5, ExecReason.HALTED)]
    assert not ledger.orders and not group.pending and stats["malformed"] == 1 and stats["journal_errors"] == 1


def test_while_the_group_commits_fsync_is_stalled_a_new_is_halted_and_nothing_is_journaled(ledger, stats, log):
    adm, reports, group, _ = admission_of(ledger, stats, log, stalled=True)
    assert not adm.admit(order(OrderCmd.NEW, 6).order, 1006)
    assert [(etype, oid, kw["reason"]) for _, etype, oid, kw in reports.calls] == [
        (ExecType.REJECTED, 6, ExecReason.HALTED)]
    assert not ledger.orders and not group.pending and stats["jstalled"] == 1


# ------------------------------------------------------------------------------------- reduce-only
CREDS = Credentials("paper-key", "paper-secret", "paper-pass")
#: the perpetual BTCUSDT (a lot is one contract of 0.001 BTC) and the spot ETHUSDT, as the sender sees them
PERP_AND_SPOT = {1: InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.001, product_type="USDT-FUTURES",
                                     contract_size=0.001),
                 2: InstrumentConfig(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001)}


class Wire:
    """``VenueClient`` stand-in: keeps each request's bytes as the connection would write them."""

    def __init__(self):
        self.requests: list = []

    def send(self, conn, req, crash_point="", *, sent_mark=0, ts=0):
        self.requests.append(req)
        return None


def sent_request(ledger, stats, log, payload: bytes):
    """An ORDER payload through admission and the order connection: the request it put on the wire (None when
    admission answered it) and the reports."""
    reports, group = Reports(), SimpleNamespace(pending=[], stalled=lambda now: False)
    wire = Wire()
    requests = InFlightRequests(["conn0"], wire, ledger, CREDS, PERP_AND_SPOT, lambda: T0_MS, 10**9, stats,
                                lambda point: None)
    adm = NewOrderAdmission(ledger, group, SimpleNamespace(has_new=lambda oid: False), requests, {}, reports,
                            PERP_AND_SPOT, lambda: T0_MS, lambda: 9_000, lambda code, ts: None, stats, log)
    o = decode_order(payload)
    if not adm.admit(o, 1000):
        return None, reports
    requests.start(OutboxItem(OrderCmd.NEW, o, 1000), 50)
    return wire.requests[-1], reports


def approved(oid, iid, side, price, size, reduce_only) -> bytes:
    """The ORDER the risk gateway writes for an approved order."""
    return encode_order(OrderApproved(ts_ns=1, cmd=OrderCmd.NEW, instrument_id=iid, order_id=oid, side=side,
                                      tif=TimeInForce.GTC, price=price, size=size, origin_seq=3, leg=0,
                                      reduce_only=reduce_only))


def venue_answer(api: RestApi, req) -> rest.Result:
    headers = {k.lower(): v for k, v in req.headers.items()}
    status, raw = api.handle(HttpRequest(req.method, req.path, req.query, headers, req.body.encode(), True))
    return rest.classify_response(status, raw)


def test_a_reduce_only_order_goes_out_with_reduce_only_yes_and_the_venue_holds_it_to_that(ledger, stats, log):
    req, _ = sent_request(ledger, stats, log, approved(11, 1, Side.SELL, 100.5, 0.002, True))
    wire_bytes = http1.encode_request(req.method, req.target, "127.0.0.1:1", req.headers, req.body.encode())
    assert wire_bytes.startswith(b"POST /api/v2/mix/order/place-order HTTP/1.1\r\n")
    assert b'"reduceOnly":"YES"' in wire_bytes and b'"productType":"USDT-FUTURES"' in wire_bytes
    plain, _ = sent_request(ledger, stats, log, approved(12, 1, Side.BUY, 100.1, 0.002, False))
    assert '"reduceOnly":"NO"' in plain.body
    # the paper venue: with no position the reduce-only sell would open a short (22002); the plain buy
    # opens a long of 0.002, which the same reduce-only sell (a new id) then closes
    api = RestApi(OrderEngine(RULES, VenueBook().levels, lambda: T0_MS), CREDS, now_ms=lambda: T0_MS,
                  mono_ns=lambda: 0, perps={"BTCUSDT": "USDT"})
    assert venue_answer(api, req).code == "22002"
    assert venue_answer(api, plain).ok and api.engine.position("BTCUSDT") == Decimal("0.002")
    grows, _ = sent_request(ledger, stats, log, approved(13, 1, Side.BUY, 99.0, 0.001, True))
    assert venue_answer(api, grows).code == "22002", "a reduce-only buy would grow the long"
    again, _ = sent_request(ledger, stats, log, approved(14, 1, Side.SELL, 100.5, 0.002, True))
    assert venue_answer(api, again).ok


def test_a_reduce_only_spot_order_is_malformed_and_never_sent(ledger, stats, log):
    req, reports = sent_request(ledger, stats, log, approved(21, 2, Side.SELL, 10.01, 0.002, True))
    assert req is None and [(etype, oid, kw["reason"]) for _, etype, oid, kw in reports.calls] == [
        (ExecType.REJECTED, 21, ExecReason.MALFORMED)]
    assert stats["malformed"] == 1 and 21 not in ledger.orders


def test_a_place_rebuilt_from_the_journaled_intent_keeps_reduce_only_and_an_old_intent_reads_as_plain(
        ledger, stats, log):
    """The fallback for an order this process did not admit (no body kept): the request is made from
    the journaled intent, its ``ro`` included; an intent written before the field existed has none."""
    for oid, ro in ((31, True), (32, False), (33, None)):
        rec = {**intent(oid, iid=1, px=100.5, sz=0.002), "side": Side.SELL}
        if ro is not None:
            rec["ro"] = ro
        ledger.record(rec)
    wire = Wire()
    requests = InFlightRequests(["conn0"], wire, ledger, CREDS, PERP_AND_SPOT, lambda: T0_MS, 10**9, stats,
                                lambda point: None)
    bodies = {}
    for oid in (31, 32, 33):
        assert oid not in ledger.bodies
        requests.free = [0]  # one connection, freed for each
        requests.start(OutboxItem(OrderCmd.NEW, order(OrderCmd.NEW, oid).order, 1000), 50)
        bodies[oid] = wire.requests[-1].body
    assert [ledger.orders[oid].reduce_only for oid in (31, 32, 33)] == [True, False, False]
    assert ['"reduceOnly":"YES"' in bodies[oid] for oid in (31, 32, 33)] == [True, False, False]
    assert all('"reduceOnly":"NO"' in bodies[oid] for oid in (32, 33))
