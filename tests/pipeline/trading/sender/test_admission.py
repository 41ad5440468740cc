"""A NEW's admission (pipeline/trading/sender/admission.py): duplicates, validation, the intent."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.trading.messages import ExecReason, ExecType, OrderCmd
from pipeline.trading.sender.admission import NewOrderAdmission
from tests.support.sender import INSTRUMENTS, Reports, intent, order


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
