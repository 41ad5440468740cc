"""Answers to place / cancel requests (pipeline/trading/sender/answers.py): retry, journal, report."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.messages import ExecReason, ExecType, OrderCmd
from pipeline.trading.sender.answers import OrderAnswers
from tests.support.sender import Reports, intent, order


def answers_of(ledger, stats, log, max_retries=2):
    reports, requeued = Reports(), []
    queries = SimpleNamespace(owed={})
    answers = OrderAnswers(ledger, queries, None, reports, requeued.append, lambda: 7_000, stats, log,
                           lambda point: None, max_retries=max_retries, retry_backoff_ms=10, poll_ns=50)
    return answers, reports, requeued, queries.owed


def test_a_retryable_answer_is_retried_with_its_back_off_then_rejected_after_the_last(ledger, stats, log):
    ledger.record(intent(1))
    answers, reports, requeued, _ = answers_of(ledger, stats, log)
    item = order(OrderCmd.NEW, 1)
    limited = Result(Outcome.RETRYABLE, 429, "429", "too many")
    answers.on_answer(item, limited, 100)
    answers.on_answer(item, limited, 200)
    assert requeued == [item, item] and (item.attempts, item.due_ns) == (2, 200 + 40_000_000) and not reports.calls
    answers.on_answer(item, limited, 300)
    ((ts, etype, oid, kw),) = reports.calls
    assert (ts, etype, oid, kw["reason"], kw["leaves"]) == (1001, ExecType.REJECTED, 1, ExecReason.RATE_LIMITED, 0.0)
    assert ledger.orders[1].status == "rejected" and stats["retries"] == 2 and stats["rl"] == 1


def test_an_ok_place_is_journaled_acked_and_an_unknown_one_owes_a_query(ledger, stats, log):
    ledger.record(intent(2))
    ledger.record(intent(3))
    ledger.bodies.update({2: "{}", 3: "{}"})
    answers, reports, _, owed = answers_of(ledger, stats, log)
    answers.on_answer(order(OrderCmd.NEW, 2), Result(Outcome.OK, 200, "00000", "", {"orderId": "v2"}), 100)
    answers.on_answer(order(OrderCmd.NEW, 3), Result(Outcome.UNKNOWN, 0, "", "timeout"), 100)
    assert reports.types() == [(ExecType.ACKED, 2), (ExecType.UNKNOWN, 3)] and not ledger.bodies
    assert (ledger.orders[2].status, ledger.orders[2].vid, ledger.orders[3].status) == ("live", "v2", "unknown")
    assert owed == {3: 7_050} and log.named("sender_unknown")[0]["order_id"] == 3


def test_an_ack_for_an_order_a_fill_poll_already_acked_is_journaled_but_not_reported_again(ledger, stats, log):
    ledger.record(intent(4))
    ledger.record({"t": "state", "oid": 4, "status": "live", "vid": "v4"})  # learned from its fill first
    answers, reports, _, _ = answers_of(ledger, stats, log)
    answers.on_answer(order(OrderCmd.NEW, 4), Result(Outcome.OK, 200, "00000", "", {"orderId": "v4"}), 100)
    assert not reports.calls and stats["acked"] == 0 and ledger.orders[4].status == "live"
