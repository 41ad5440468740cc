"""The outbox: commands from the ORDER ring waiting to start, in FIFO order.

An ``OutboxItem`` is one command (NEW, CANCEL, CANCEL_ALL of one instrument, SYNC) with its ORDER
record, the ORDER's ``ts_origin_ns``, the attempts made and when it may start next (a retry's
back-off, a rate-limit token). ``Outbox.run`` starts the due head on a free order connection
(``InFlightRequests.start``) as long as the head may start: a place or cancel needs a free
connection, no request in flight it must not race (``InFlightRequests.must_wait``) and a token of
the client-side rate limit (``TokenBucket``; none: the head waits for the next, ``rl_wait``); the
commands behind the head wait with it. A command that is not a request (SYNC, a CANCEL of an order
unknown or no longer working) is answered here once nothing is in flight and the lane has no job,
so that it comes after every answer and fill poll before it.
"""

from __future__ import annotations

import collections
from typing import Callable

import msgspec

from pipeline.trading.messages import ExecReason, ExecType, OrderCmd, OrderRecord


class OutboxItem(msgspec.Struct, gc=False):
    """One command waiting in the outbox (``attempts`` and ``due_ns`` change as it is retried)."""

    cmd: OrderCmd
    order: OrderRecord
    ts_origin_ns: int
    attempts: int = 0  # retries made so far
    due_ns: int = 0  # not started before this time


class Outbox:
    """The FIFO of commands between the ORDER ring and the order connections (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``), ``requests`` (``InFlightRequests``), ``lane``
    (``Lane``: only whether it is busy), ``bucket`` (``TokenBucket``), ``report`` (``ExecReporter.report``),
    ``report_state`` (the state report, for SYNC); ``batch`` caps the commands started per ``run``.
    """

    def __init__(self, ledger, requests, lane, bucket, report: Callable, report_state: Callable[[int], None],
                 stats: dict, batch: int):
        self.items: collections.deque[OutboxItem] = collections.deque()  # filtered in place, never replaced
        self.ledger = ledger
        self.requests = requests
        self.lane = lane
        self.bucket = bucket
        self.report = report
        self.report_state = report_state
        self.stats = stats
        self.batch = batch

    def __len__(self) -> int:
        return len(self.items)

    def run(self, now: int) -> int:
        """Start queued commands in FIFO order, each place / cancel on a free order connection without
        waiting for its answer (``InFlightRequests.read_answers``). Stops at the head when it is not
        due, when no connection is free, when it must wait for a request in flight, or when no token is
        left (the head is then due when the next comes). Returns how many were started or answered."""
        n = 0
        items = self.items
        requests = self.requests
        while items and n < self.batch:
            head = items[0]
            if head.due_ns > now:
                break
            cmd, o = head.cmd, head.order
            single = cmd is OrderCmd.NEW or cmd is OrderCmd.CANCEL_ALL or (
                cmd is OrderCmd.CANCEL and (e := self.ledger.orders.get(o.order_id)) is not None and not e.terminal)
            if not single:  # after every answer and fill poll before it
                if requests.inflight or self.lane.busy:
                    break
                self._answer_locally(head)
                items.popleft()
                n += 1
                continue
            if not requests.free or requests.must_wait(cmd, o):
                break
            if not self.bucket.take(now):
                head.due_ns = self.bucket.ready_at(now)
                self.stats["rl_wait"] += 1
                break
            items.popleft()
            requests.start(head, now)
            n += 1
        return n

    def _answer_locally(self, item: OutboxItem) -> None:
        """Answer a command that is not a request: SYNC (the state report) or a CANCEL of an order
        unknown or no longer working (REJECTED NOT_FOUND)."""
        cmd, o, ts = item.cmd, item.order, item.ts_origin_ns
        if cmd is OrderCmd.SYNC:
            self.report_state(ts)
            return
        entry = self.ledger.orders.get(o.order_id)
        self.report(ts, ExecType.REJECTED, entry, reason=ExecReason.NOT_FOUND, leaves=0.0,
                    iid=o.instrument_id, order_id=o.order_id)

    def requeue(self, item: OutboxItem) -> None:
        """Put ``item`` back at the head (a retry: its ``due_ns`` says when)."""
        self.items.appendleft(item)

    def has_new(self, oid: int) -> bool:
        """Whether a NEW of order ``oid`` waits here."""
        return any(it.cmd is OrderCmd.NEW and it.order.order_id == oid for it in self.items)

    def never_tried(self, oid: int) -> bool:
        """Whether a NEW of order ``oid`` waits here and was never sent (not a retry)."""
        return any(it.cmd is OrderCmd.NEW and it.order.order_id == oid and not it.attempts for it in self.items)

    def drop_new(self, oids: set[int]) -> None:
        """Remove the NEWs of ``oids`` (intents that could not be made durable), keeping the rest in order."""
        kept = [it for it in self.items if not (it.cmd is OrderCmd.NEW and it.order.order_id in oids)]
        self.items.clear()
        self.items.extend(kept)

    def next_due_ns(self) -> int | None:
        """The earliest time a queued command may start; None when the outbox is empty."""
        return min(item.due_ns for item in self.items) if self.items else None
