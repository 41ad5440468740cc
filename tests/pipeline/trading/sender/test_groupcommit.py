"""The group commit (pipeline/trading/sender/groupcommit.py): one fsync per batch; when it fails none is sent."""

from __future__ import annotations

from pipeline.runtime.agent import MARK_INTENT_SYNCED, mark_code
from pipeline.trading.journal import Journal
from pipeline.trading.messages import ExecReason, ExecType
from pipeline.trading.sender.groupcommit import GroupCommit, PendingIntent
from tests.support.sender import Reports, intent


def group_of(ledger, stats, log, *oids):
    dropped, marks, reports = [], [], Reports()
    group = GroupCommit(ledger, dropped.append, reports, lambda code, ts: marks.append((code, ts)), stats, log)
    for oid in oids:
        ledger.record(intent(oid))
        group.pending.append(PendingIntent(oid, 2, 1000 + oid))
    return group, dropped, marks, reports


def test_one_fsync_makes_the_batch_durable_and_each_intent_is_marked(ledger, stats, log):
    fsyncs = []
    fsync = ledger.journal._fsync
    ledger.journal._fsync = lambda fd: (fsyncs.append(fd), fsync(fd))[1]
    group, dropped, marks, reports = group_of(ledger, stats, log, 1, 2, 3)
    group.commit()
    group.commit()  # nothing pending: no fsync
    assert len(fsyncs) == 1 and not group.pending and not dropped and not reports.calls
    assert marks == [(mark_code(MARK_INTENT_SYNCED, 2), 1000 + oid) for oid in (1, 2, 3)]


def test_when_the_fsync_fails_no_intent_of_the_batch_is_sent_each_is_never_sent_and_halted(ledger, stats, log):
    def broken(fd):
        raise OSError(5, "Input/output error")

    fsync, ledger.journal._fsync = ledger.journal._fsync, broken
    ledger.bodies.update({1: "{}", 2: "{}"})
    group, dropped, marks, reports = group_of(ledger, stats, log, 1, 2)
    group.commit()
    assert dropped == [{1, 2}] and not marks and not ledger.bodies and not ledger.open
    assert [(ts, etype, oid, kw["reason"], kw["leaves"]) for ts, etype, oid, kw in reports.calls] == [
        (1001, ExecType.REJECTED, 1, ExecReason.HALTED, 0.0), (1002, ExecType.REJECTED, 2, ExecReason.HALTED, 0.0)]
    failed = log.named("sender_journal_failed")
    assert [e["order_id"] for e in failed if "record" not in e] == [1, 2]
    # the journal is in doubt: each never_sent is kept in memory, written once the disk is back
    assert [e["order_id"] for e in failed if e.get("record") == "never_sent"] == [1, 2]
    assert stats["journal_errors"] == 4 and [ledger.orders[oid].status for oid in (1, 2)] == ["never_sent"] * 2
    ledger.journal._fsync = fsync
    ledger.journal.recover()
    ledger.journal.close()
    assert {o.status for o in Journal(ledger.journal.path).open().orders.values()} == {"never_sent"}
