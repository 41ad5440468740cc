"""The group commit (pipeline/trading/sender/groupcommit.py): after the sends, one fsync once the window
closes or enough records wait; before the sends (``before_send``), one fsync per batch; when it fails,
intents not yet sent are never sent and those sent are tracked on."""

from __future__ import annotations

import pytest

from pipeline.runtime.agent import MARK_INTENT_SYNCED, mark_code
from pipeline.trading.journal import Journal
from pipeline.trading.messages import ExecReason, ExecType
from pipeline.trading.sender.groupcommit import RETRY_NS, GroupCommit, PendingIntent
from pipeline.trading.sender.ledger import OrderLedger
from tests.support.sender import Reports, intent

MS = 1_000_000


class Outbox:
    """``Outbox`` stand-in: the NEWs still waiting (never tried) and those dropped."""

    def __init__(self, waiting=()):
        self.waiting = set(waiting)
        self.dropped: list[set[int]] = []

    def never_tried(self, oid: int) -> bool:
        return oid in self.waiting

    def drop_new(self, oids: set[int]) -> None:
        self.dropped.append(oids)


@pytest.fixture
def now():
    return [0]


@pytest.fixture
def timed_ledger(tmp_path, stats, log, now):
    """A ledger whose clock is ``now[0]`` (when a record was written starts the window)."""
    led = OrderLedger(Journal(tmp_path / "sender.journal"), stats, log, lambda: now[0])
    yield led
    led.journal.close()


def fsyncs_of(ledger) -> list:
    calls = []
    fsync = ledger.journal._fsync
    ledger.journal._fsync = lambda fd: (calls.append(fd), fsync(fd))[1]
    return calls


def group_of(ledger, stats, log, *oids, waiting=(), window_ms=2, max_records=64):
    outbox, marks, reports, crashes = Outbox(waiting), [], Reports(), []
    group = GroupCommit(ledger, outbox, reports, lambda code, ts: marks.append((code, ts)), stats, log,
                        crashes.append, window_ns=window_ms * MS, max_records=max_records)
    for oid in oids:
        ledger.record(intent(oid))
        group.pending.append(PendingIntent(oid, 2, 1000 + oid))
    return group, outbox, marks, reports, crashes


def test_after_send_the_window_closes_at_its_time_since_the_oldest_record_then_one_fsync(timed_ledger, stats, log,
                                                                                          now):
    fsyncs = fsyncs_of(timed_ledger)
    now[0] = 10 * MS
    group, _, marks, _, crashes = group_of(timed_ledger, stats, log, 1, 2)
    now[0] = 11 * MS
    timed_ledger.record({"t": "ack", "oid": 1, "vid": "v"})  # a later record does not move the window
    assert group.due_ns(now[0]) == 12 * MS and group.tick(12 * MS - 1) == 0 and not fsyncs
    assert group.tick(12 * MS) == 1 and len(fsyncs) == 1 and not timed_ledger.journal.unsynced
    assert marks == [(mark_code(MARK_INTENT_SYNCED, 2), 1001), (mark_code(MARK_INTENT_SYNCED, 2), 1002)]
    assert crashes == ["sync"] and stats["jsynced"] == timed_ledger.journal.bytes == timed_ledger.journal.synced_bytes
    assert group.due_ns(13 * MS) is None and group.tick(20 * MS) == 0 and len(fsyncs) == 1  # nothing left
    now[0] = 30 * MS
    timed_ledger.record({"t": "ack", "oid": 2, "vid": "w"})  # a new tail: a new window
    assert group.due_ns(now[0]) == 32 * MS


def test_after_send_max_records_close_the_window_early(timed_ledger, stats, log, now):
    fsyncs = fsyncs_of(timed_ledger)
    group, *_ = group_of(timed_ledger, stats, log, 1, 2, max_records=3)
    assert group.tick(0) == 0 and not fsyncs  # two records, the window open
    timed_ledger.record(intent(3))
    assert group.due_ns(0) == 0 and group.tick(0) == 1 and len(fsyncs) == 1


def test_before_send_one_fsync_makes_the_batch_durable_and_each_intent_is_marked(ledger, stats, log):
    fsyncs = fsyncs_of(ledger)
    group, outbox, marks, reports, _ = group_of(ledger, stats, log, 1, 2, 3)
    group.before_send()
    group.before_send()  # nothing pending: no fsync
    assert len(fsyncs) == 1 and not group.pending and not outbox.dropped and not reports.calls
    assert marks == [(mark_code(MARK_INTENT_SYNCED, 2), 1000 + oid) for oid in (1, 2, 3)]


def broken(fd):
    raise OSError(5, "Input/output error")


def test_before_send_when_the_fsync_fails_no_intent_of_the_batch_is_sent_each_is_never_sent_and_halted(ledger, stats,
                                                                                                      log):
    fsync, ledger.journal._fsync = ledger.journal._fsync, broken
    ledger.bodies.update({1: "{}", 2: "{}"})
    group, outbox, marks, reports, _ = group_of(ledger, stats, log, 1, 2)
    group.before_send()
    assert outbox.dropped == [{1, 2}] and not marks and not ledger.bodies and not ledger.open
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


def test_after_send_a_failed_fsync_tracks_the_sent_orders_on_and_drops_only_those_never_tried(timed_ledger, stats,
                                                                                              log, now):
    """Order 1 is out, order 2 still waits in the outbox for a token: the fsync fails; 1 stays pending
    (its answer is on its way), 2 is never sent and answered HALTED; the journal is in doubt, retried
    every RETRY_NS; once fsync works again the records are all in the file."""
    fsync, timed_ledger.journal._fsync = timed_ledger.journal._fsync, broken
    group, outbox, marks, reports, crashes = group_of(timed_ledger, stats, log, 1, 2, waiting=(2,), window_ms=0)
    assert group.tick(0) == 1
    assert outbox.dropped == [{2}] and reports.types() == [(ExecType.REJECTED, 2)] and not marks and not crashes
    assert timed_ledger.orders[1].status == "pending" and timed_ledger.orders[2].status == "never_sent"
    (failed,) = [e for e in log.named("sender_journal_failed") if e.get("record") == "fsync"]
    assert (failed["sent"], failed["not_sent"]) == ([1], [2]) and stats["jdoubt"] == 1
    assert stats["journal_errors"] == 3  # the fsync; order 2 not sent; its never_sent record kept in memory
    timed_ledger.record({"t": "ack", "oid": 1, "vid": "v1"})  # the answer to 1: kept while in doubt
    assert timed_ledger.orders[1].status == "live" and timed_ledger.journal.backlog
    assert group.due_ns(0) == RETRY_NS and group.tick(RETRY_NS) == 1 and stats["jdoubt"] == 1  # still failing
    assert len(log.named("sender_journal_failed")) == 4  # a retry that fails again is not logged again
    timed_ledger.journal._fsync = fsync
    assert group.tick(2 * RETRY_NS - 1) == 0 and group.tick(2 * RETRY_NS) == 1
    assert stats["jdoubt"] == 0 and log.named("sender_journal_recovered") and group.due_ns(0) is None
    timed_ledger.journal.close()
    st = Journal(timed_ledger.journal.path).open()
    assert (st.orders[1].status, st.orders[1].vid, st.orders[2].status) == ("live", "v1", "never_sent")


def test_an_fsync_that_runs_past_the_stall_limit_holds_new_orders_until_it_returns(tmp_path, stats, log, now):
    """On the journal's thread, an fsync the disk does not answer: past STALL_NS the group commit is
    stalled (logged and counted once), and it is not any more once the fsync has returned."""
    import threading

    from pipeline.trading.sender.groupcommit import STALL_NS

    release = threading.Event()
    led = OrderLedger(Journal(tmp_path / "sender.journal", fsync_thread=True), stats, log, lambda: now[0])
    led.journal._fsync = lambda fd: release.wait(5.0)
    group, *_ = group_of(led, stats, log, 1, window_ms=0)
    assert group.tick(0) == 1 and led.journal.syncing
    assert not group.stalled(STALL_NS) and group.stalled(STALL_NS + 1) and group.stalled(STALL_NS + 2)
    assert stats["jstalls"] == 1 and len(log.named("sender_journal_stalled")) == 1
    release.set()
    led.journal.sync_outcome(wait=True)
    assert not group.stalled(STALL_NS + 3)
    led.journal.close()
