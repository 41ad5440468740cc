"""The order ledger (pipeline/trading/sender/ledger.py): records keep ``open`` and ``origin_ts`` true."""

from __future__ import annotations

import pytest

from pipeline.trading.journal import Journal
from tests.support.sender import intent


def test_an_order_is_open_from_its_intent_until_a_terminal_record(ledger):
    ledger.record(intent(1))
    ledger.origin_ts[1] = 77
    ledger.record({"t": "ack", "oid": 1, "vid": "v1"})
    assert ledger.open == {1} and ledger.ts_of(1) == 77 and [o.oid for o in ledger.working()] == [1]
    ledger.record({"t": "cancel", "oid": 1})
    assert ledger.open == set() and 1 not in ledger.origin_ts and ledger.ts_of(1) == 5_000  # the clock's


def test_an_intent_that_cannot_be_written_raises_and_nothing_is_applied(ledger, stats):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    ledger.journal._write = full
    with pytest.raises(OSError):
        ledger.record(intent(2))
    assert 2 not in ledger.orders and not ledger.open and stats["journal_errors"] == 0


def test_another_record_that_cannot_be_written_is_kept_counted_and_logged(ledger, stats, log):
    ledger.record(intent(3))
    write = ledger.journal._write

    def full(fd, data):
        raise OSError(28, "No space left on device")

    ledger.journal._write = full
    ledger.record({"t": "reject", "oid": 3, "code": "43012"})
    assert ledger.orders[3].status == "rejected" and 3 not in ledger.open  # applied: it happened at the venue
    assert stats["journal_errors"] == 1 and stats["jdoubt"] == 1
    (failed,) = log.named("sender_journal_failed")
    assert (failed["record"], failed["order_id"], failed["kept"]) == ("reject", 3, 1)
    ledger.journal._write = write
    ledger.record({"t": "account", "id": "7001"})  # the journal recovers: the kept record first
    assert stats["jdoubt"] == 0
    assert Journal(ledger.journal.path).open().orders[3].status == "rejected"


def test_set_aside_begins_a_fresh_journal_and_forgets_every_order(ledger, tmp_path):
    ledger.record(intent(4))
    ledger.bodies[4] = "{}"
    ledger.last_trade_id = 99
    aside = ledger.set_aside("7001", 123)
    assert aside == tmp_path / "sender.journal.7001.123" and Journal(aside).open().orders[4].oid == 4
    assert (ledger.orders, ledger.open, ledger.bodies, ledger.last_trade_id) == ({}, set(), {}, 0)
    assert ledger.journal.path == tmp_path / "sender.journal" and ledger.state.records == 0


def test_records_are_written_not_fsynced_and_the_first_of_a_tail_starts_the_group_commits_window(tmp_path, stats,
                                                                                                   log):
    from pipeline.trading.sender.ledger import OrderLedger

    now = [100]
    led = OrderLedger(Journal(tmp_path / "sender.journal"), stats, log, lambda: now[0])
    fsyncs = []
    led.journal._fsync = lambda fd: fsyncs.append(fd)
    led.record(intent(1))
    now[0] = 200
    led.record({"t": "ack", "oid": 1, "vid": "v1"})
    assert led.unsynced_since_ns == 100 and led.journal.unsynced == 2 and not fsyncs
    led.journal.sync()
    now[0] = 300
    led.record({"t": "cancel", "oid": 1})
    assert led.unsynced_since_ns == 300 and len(fsyncs) == 1
    led.journal.close()


def test_set_aside_makes_the_old_journal_durable_first(ledger):
    ledger.record(intent(5))
    fsyncs = []
    fsync = ledger.journal._fsync
    ledger.journal._fsync = lambda fd: (fsyncs.append(fd), fsync(fd))[1]
    ledger.set_aside("7001", 124)
    assert len(fsyncs) == 1
