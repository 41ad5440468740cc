"""Fixtures of the sender's core tests: counters, a list log, and a journal-backed ledger in tmp_path
(the doubles themselves live in ``tests.support.sender``)."""

from __future__ import annotations

import collections

import pytest

from pipeline.trading.journal import Journal
from pipeline.trading.sender.ledger import OrderLedger
from tests.support.ports import ListLog


@pytest.fixture
def stats():
    return collections.defaultdict(int)


@pytest.fixture
def log():
    return ListLog()


@pytest.fixture
def ledger(tmp_path, stats, log):
    led = OrderLedger(Journal(tmp_path / "sender.journal"), stats, log, lambda: 5_000)
    yield led
    led.journal.close()
