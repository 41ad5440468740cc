"""The outbox (pipeline/trading/sender/outbox.py): FIFO starts, the rate limit, commands answered locally."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.trading.messages import ExecReason, ExecType, OrderCmd
from pipeline.trading.sender.outbox import Outbox
from pipeline.trading.sender.ratelimit import TokenBucket
from tests.support.sender import Reports, intent, order


class Requests:
    """``InFlightRequests`` stand-in: ``blocked`` order ids must wait; ``start`` records."""

    def __init__(self, connections: int = 4):
        self.free = list(range(connections))
        self.inflight: dict = {}
        self.blocked: set[int] = set()
        self.started: list[tuple[OrderCmd, int]] = []

    def must_wait(self, cmd, o) -> bool:
        return o.order_id in self.blocked

    def start(self, item, now) -> None:
        self.free.pop()
        self.started.append((item.cmd, item.order.order_id))


def outbox(ledger, rate: float = 100.0, batch: int = 64):
    requests, lane, reports, states = Requests(), SimpleNamespace(busy=False), Reports(), []
    box = Outbox(ledger, requests, lane, TokenBucket(rate, rate, 0), reports, states.append,
                 {"rl_wait": 0}, batch)
    return box, requests, lane, reports, states


def queue(box, *items) -> None:
    for cmd, oid in items:
        box.items.append(order(cmd, oid))


def test_commands_start_in_fifo_order_and_a_head_that_must_wait_holds_the_rest(ledger):
    box, requests, *_ = outbox(ledger)
    queue(box, (OrderCmd.NEW, 1), (OrderCmd.NEW, 2), (OrderCmd.NEW, 3))
    requests.blocked = {2}
    assert box.run(0) == 1 and requests.started == [(OrderCmd.NEW, 1)] and len(box) == 2
    requests.blocked = set()
    assert box.run(0) == 2 and requests.started[1:] == [(OrderCmd.NEW, 2), (OrderCmd.NEW, 3)]


def test_no_free_connection_holds_the_head(ledger):
    box, requests, *_ = outbox(ledger)
    requests.free = []
    queue(box, (OrderCmd.NEW, 1))
    assert box.run(0) == 0 and len(box) == 1


def test_without_a_token_the_head_is_due_when_the_next_comes(ledger):
    box, requests, *_ = outbox(ledger, rate=1.0)
    queue(box, (OrderCmd.NEW, 1), (OrderCmd.NEW, 2))
    assert box.run(0) == 1 and box.stats["rl_wait"] == 1
    assert box.items[0].due_ns == 1_000_000_001 == box.next_due_ns()
    assert box.run(999_999_999) == 0 and box.run(1_000_000_001) == 1
    assert requests.started == [(OrderCmd.NEW, 1), (OrderCmd.NEW, 2)] and box.next_due_ns() is None


def test_sync_and_a_cancel_of_an_unknown_order_are_answered_once_nothing_is_in_flight(ledger):
    box, requests, lane, reports, states = outbox(ledger)
    queue(box, (OrderCmd.SYNC, 0), (OrderCmd.CANCEL, 9))
    requests.inflight = {0: object()}
    assert box.run(0) == 0
    requests.inflight, lane.busy = {}, True
    assert box.run(0) == 0
    lane.busy = False
    assert box.run(0) == 2 and states == [1000] and not requests.started
    ((ts, etype, oid, kw),) = reports.calls
    assert (ts, etype, oid, kw["reason"], kw["leaves"]) == (1009, ExecType.REJECTED, 9, ExecReason.NOT_FOUND, 0.0)


def test_a_cancel_of_a_working_order_is_a_request(ledger):
    ledger.record(intent(5))
    box, requests, *_ = outbox(ledger)
    queue(box, (OrderCmd.CANCEL, 5))
    assert box.run(0) == 1 and requests.started == [(OrderCmd.CANCEL, 5)]


def test_drop_new_removes_only_those_news_and_keeps_the_order(ledger):
    box, *_ = outbox(ledger)
    queue(box, (OrderCmd.NEW, 1), (OrderCmd.CANCEL, 2), (OrderCmd.NEW, 2), (OrderCmd.NEW, 3))
    box.drop_new({2, 3})
    assert [(it.cmd, it.order.order_id) for it in box.items] == [(OrderCmd.NEW, 1), (OrderCmd.CANCEL, 2)]
    assert box.has_new(1) and not box.has_new(2)


def test_never_tried_is_a_new_still_waiting_that_no_request_has_carried(ledger):
    box, *_ = outbox(ledger)
    queue(box, (OrderCmd.NEW, 1), (OrderCmd.NEW, 2), (OrderCmd.CANCEL, 3))
    box.items[1].attempts = 1  # a retry: its request may have reached the venue
    assert [box.never_tried(oid) for oid in (1, 2, 3, 4)] == [True, False, False, False]
