"""The venue's answers to place, cancel and cancel-all requests: retried, journaled, reported.

``OrderAnswers.on_answer`` gets each answer read from an order connection (``InFlightRequests``),
classified (``pipeline.trading.bitget.rest``). A RETRYABLE one goes back to the head of the outbox
after ``retry_backoff_ms * 2**n``, up to ``max_retries`` times. Otherwise:

- place: OK -> ``ack`` journaled, ACKED (unless a fill poll saw the order first); 43118 (the venue
  already has the clientOid) -> the order is owed a query; REJECTED, or a 4xx / unreachable after
  every retry -> ``reject`` journaled, REJECTED (RATE_LIMITED for 429, BAD_SIGNATURE for 40009,
  HALTED when never sent, else VENUE_REJECTED); anything else (UNKNOWN, a 5xx) -> ``unknown``
  journaled, UNKNOWN (TIMEOUT), and the order owed a query after ``poll_interval_ms``.
- cancel: OK -> the fills are polled first, then ``cancel`` journaled, CANCELLED (leaves 0);
  43001 -> the order is queried and a working one answered REJECTED NOT_FOUND; a refused or failed
  cancel -> REJECTED with the order's leaves (an unknown outcome: the order owed a query).
- cancel-all: OK -> after the fills poll, each of ours it names CANCELLED, a working one it does not
  name owed a query; refused -> REJECTED with order_id 0.
"""

from __future__ import annotations

from typing import Callable

from pipeline.trading.bitget import orderapi, rest
from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.journal import PENDING, UNKNOWN, WORKING, OrderEntry
from pipeline.trading.messages import ExecReason, ExecType, OrderCmd
from pipeline.trading.sender.lane import QUERY
from pipeline.trading.sender.outbox import OutboxItem
from pipeline.trading.sender.ratelimit import backoff_ns


class OrderAnswers:
    """Acts on the answers to the order connections' requests (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``), ``queries`` (``VenueQueries``: owed queries, fill
    polls, orderInfo), ``lane`` (``Lane``), ``report`` (``ExecReporter.report``), ``requeue``
    (``Outbox.requeue``), ``crash`` (the test-only crash hook).
    """

    def __init__(self, ledger, queries, lane, report: Callable, requeue: Callable[[OutboxItem], None],
                 clock: Callable[[], int], stats: dict, log, crash: Callable[[str], None], *, max_retries: int,
                 retry_backoff_ms: int, poll_ns: int):
        self.ledger = ledger
        self.queries = queries
        self.owed = queries.owed  # cleared, never replaced
        self.lane = lane
        self.report = report
        self.requeue = requeue
        self.clock = clock
        self.stats = stats
        self.log = log
        self.crash = crash
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.poll_ns = poll_ns

    def on_answer(self, item: OutboxItem, res: Result, now: int) -> None:
        """Act on the answer ``res`` to ``item``'s request, read at ``now``; a retryable failure goes
        back to the head of the outbox with its back-off."""
        cmd = item.cmd
        if cmd is OrderCmd.NEW:
            if res.ok:
                self.crash("ack")
        elif cmd is OrderCmd.CANCEL:
            entry = self.ledger.orders[item.order.order_id]
        if res.outcome is Outcome.RETRYABLE and item.attempts < self.max_retries:
            item.attempts += 1
            self.stats["retries"] += 1
            item.due_ns = now + backoff_ns(self.retry_backoff_ms, item.attempts)
            self.requeue(item)
        elif cmd is OrderCmd.NEW:
            self._place_answered(item, res)
        elif cmd is OrderCmd.CANCEL:
            self._cancel_answered(item.ts_origin_ns, res, entry)
        else:
            self._cancel_all_answered(item.ts_origin_ns, item.order.instrument_id, res)

    # ------------------------------------------------------------------------------------ place
    def _place_answered(self, item: OutboxItem, res: Result) -> None:
        o = self.ledger.orders[item.order.order_id]
        self.ledger.bodies.pop(o.oid, None)
        ts = item.ts_origin_ns
        record = self.ledger.record
        if res.ok:
            vid = str(res.data.get("orderId", "")) if isinstance(res.data, dict) else ""
            known = o.status not in (PENDING, UNKNOWN)  # a fills poll while it was in flight saw it first
            record({"t": "ack", "oid": o.oid, "vid": vid})
            if not known:
                self.stats["acked"] += 1
                self.report(ts, ExecType.ACKED, o)
            return
        if res.outcome is Outcome.REJECTED and res.code in rest.DUPLICATE_OID_CODES:
            self.owed[o.oid] = self.clock()  # the venue has it: ask what it is
            return
        if res.outcome is Outcome.REJECTED or (res.outcome is Outcome.RETRYABLE and res.status < 500):
            code = res.code or ("unreachable" if res.status == 0 else str(res.status))
            record({"t": "reject", "oid": o.oid, "code": code})
            self.stats["rejected"] += 1
            if code == rest.CODE_RATE_LIMIT:
                self.stats["rl"] += 1
                reason = ExecReason.RATE_LIMITED
            elif code == rest.CODE_BAD_SIGNATURE:
                reason = ExecReason.BAD_SIGNATURE
            elif code == "unreachable":
                reason = ExecReason.HALTED
            else:
                reason = ExecReason.VENUE_REJECTED
            self.log.warning("sender_rejected", order_id=o.oid, code=code, msg=res.msg)
            self.report(ts, ExecType.REJECTED, o, reason=reason, leaves=0.0)
            return
        # UNKNOWN, or a 5xx after every retry: it may be at the venue
        record({"t": "unknown", "oid": o.oid})
        self.stats["unknown"] += 1
        self.log.warning("sender_unknown", order_id=o.oid, why=res.msg or str(res.status))
        self.report(ts, ExecType.UNKNOWN, o, reason=ExecReason.TIMEOUT)
        self.owed[o.oid] = self.clock() + self.poll_ns

    # ------------------------------------------------------------------------------------ cancel
    def _cancel_answered(self, ts: int, res: Result, o: OrderEntry) -> None:
        if res.ok:
            def cancelled() -> None:  # after the fills: fills before the cancel are reported before it
                if not o.terminal:
                    self.ledger.record({"t": "cancel", "oid": o.oid})
                    self.stats["cancels"] += 1
                    self.report(ts, ExecType.CANCELLED, o, leaves=0.0)

            self.queries.after_fills(cancelled)
            return
        if res.outcome is Outcome.REJECTED and res.code in rest.NO_ORDER_CODES:
            def queried() -> None:  # the venue's view applied: a cancel of an order it still works failed
                if not o.terminal and o.status not in (PENDING, UNKNOWN):
                    self.report(ts, ExecType.REJECTED, o, reason=ExecReason.NOT_FOUND)

            self.lane.queue(self.queries.query_gen(o, ts), QUERY, [queried])
            return
        if res.outcome is Outcome.UNKNOWN:
            self.owed[o.oid] = self.clock() + self.poll_ns
        reason = (ExecReason.RATE_LIMITED if res.code == rest.CODE_RATE_LIMIT else ExecReason.BAD_SIGNATURE
                  if res.code == rest.CODE_BAD_SIGNATURE else ExecReason.TIMEOUT if res.outcome is Outcome.UNKNOWN
                  else ExecReason.VENUE_REJECTED)
        self.log.warning("sender_cancel_failed", order_id=o.oid, code=res.code, msg=res.msg)
        self.report(ts, ExecType.REJECTED, o, reason=reason)

    def _cancel_all_answered(self, ts: int, iid: int, res: Result) -> None:
        if not res.ok:
            self.log.warning("sender_cancel_all_failed", instrument_id=iid, code=res.code, msg=res.msg)
            self.report(ts, ExecType.REJECTED, None, reason=ExecReason.VENUE_REJECTED, iid=iid)
            return
        try:
            coids = set(orderapi.parse_cancelled(res.data))
        except ValueError:
            coids = set()
        self.queries.after_fills(lambda: self._report_cancelled_all(ts, iid, coids))

    def _report_cancelled_all(self, ts: int, iid: int, coids: set[str]) -> None:
        """A cancel-all's outcome, once the fills before it are in: each of ours it names CANCELLED; a
        working one it does not name is owed a query."""
        for o in self.ledger.open_orders():
            if o.iid != iid or o.terminal:
                continue
            if o.coid in coids:
                self.ledger.record({"t": "cancel", "oid": o.oid})
                self.stats["cancels"] += 1
                self.report(ts, ExecType.CANCELLED, o, leaves=0.0)
            elif o.status in WORKING:
                self.owed.setdefault(o.oid, self.clock())
