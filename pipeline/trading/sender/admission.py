"""A NEW order's way into the outbox: the duplicate check, the body, the journaled intent.

``NewOrderAdmission.admit`` answers a NEW itself, and returns False, when:

- its ``order_id`` is already in the journal: it is NOT sent again; the answer carries reason
  DUPLICATE and says only whether that order still works (ACKED with leaves while it works, UNKNOWN
  while its outcome is being queried, REJECTED with leaves 0 once it is terminal); never FILLED: a
  fill is reported once, when the sender receives it, so a repeated id cannot move a position. An
  order whose outcome is still open and that is neither queued nor in flight is owed a query.
- its price or size does not fit the instrument's tick and lot, or it is flagged reduce-only
  (``ORDER_FLAG_REDUCE_ONLY``) for a spot instrument (spot has no reduce-only): REJECTED MALFORMED.
- its intent cannot be written (or the journal is in doubt and cannot recover): not durable, so not
  sent: REJECTED HALTED, ``journal_errors`` counted, ``sender_journal_failed`` logged.
- the group commit's fsync has run longer than its limit (``GroupCommit.stalled``: the disk is not
  answering): not sent, so that no order runs far ahead of the disk: REJECTED HALTED, counted in
  ``jstalled``.

Otherwise the intent is written (made durable by ``GroupCommit.commit`` with the batch's others)
and the place-order body made once, for the request (``InFlightRequests``): the instrument's product's
(``OrderApi.place_body``), a perpetual's with ``reduceOnly`` "YES" when the ORDER carries
``ORDER_FLAG_REDUCE_ONLY``, else "NO".
"""

from __future__ import annotations

from typing import Callable

from pipeline.runtime.agent import MARK_ORDER_READ, mark_code
from pipeline.trading.bitget.orderapi import OrderApi
from pipeline.trading.journal import PENDING, UNKNOWN, WORKING, OrderEntry
from pipeline.trading.messages import ORDER_FLAG_REDUCE_ONLY, ExecReason, ExecType, OrderRecord, client_oid
from pipeline.trading.sender.groupcommit import PendingIntent


class NewOrderAdmission:
    """Admits NEW orders (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``), ``group`` (``GroupCommit``: ``pending``, ``stalled``),
    ``outbox`` and ``requests`` (``Outbox``, ``InFlightRequests``: whether a NEW is still queued or in
    flight), ``owed`` (``VenueQueries.owed``), ``report`` (``ExecReporter.report``), ``mark``
    (``AgentContext.mark``).
    """

    def __init__(self, ledger, group, outbox, requests, owed: dict[int, int], report: Callable, instruments: dict,
                 wall_ms: Callable[[], int], clock: Callable[[], int], mark: Callable[[int, int], None],
                 stats: dict, log):
        self.ledger = ledger
        self.group = group
        self.outbox = outbox
        self.requests = requests
        self.owed = owed
        self.report = report
        self.instruments = instruments
        self.wall_ms = wall_ms
        self.clock = clock
        self.mark = mark
        self.stats = stats
        self.log = log

    def admit(self, o: OrderRecord, ts: int) -> bool:
        """Admit the NEW ``o`` read with origin time ``ts``: True when its intent is written and it may
        be queued; False when it was answered here."""
        self.mark(mark_code(MARK_ORDER_READ, o.origin), ts)
        oid, iid = o.order_id, o.instrument_id
        ledger = self.ledger
        prev = ledger.orders.get(oid)
        if prev is not None:
            self.stats["dups"] += 1
            self._report_duplicate(ts, prev)
            if prev.status in (PENDING, UNKNOWN) and not (self.outbox.has_new(oid) or self.requests.has_new(oid)):
                self.owed.setdefault(oid, self.clock())
            return False
        if self.group.stalled(self.clock()):
            self.stats["jstalled"] = self.stats.get("jstalled", 0) + 1
            self.report(ts, ExecType.REJECTED, None, reason=ExecReason.HALTED, iid=iid, order_id=oid,
                        side=o.side, price=o.price, size=o.size)
            return False
        inst = self.instruments[iid]
        coid = client_oid(oid)
        reduce_only = bool(o.flags & ORDER_FLAG_REDUCE_ONLY)
        try:
            body = OrderApi.place_body(inst, o.side, o.tif, o.price, o.size, coid, reduce_only=reduce_only)
        except ValueError as exc:
            self.stats["malformed"] += 1
            self.log.warning("sender_bad_order", order_id=oid, error=str(exc))
            self.report(ts, ExecType.REJECTED, None, reason=ExecReason.MALFORMED, iid=iid, order_id=oid,
                        side=o.side, price=o.price, size=o.size)
            return False
        intent = {"t": "intent", "oid": oid, "coid": coid, "iid": iid, "sym": inst.symbol, "side": o.side,
                  "tif": o.tif, "px": o.price, "sz": o.size, "oseq": o.origin_seq, "ts_ms": self.wall_ms()}
        if reduce_only:
            intent["ro"] = True
        try:
            ledger.record(intent)
        except OSError as exc:  # not durable, so not sent: answered, so the gateway does not count it working
            journal = ledger.journal
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
            self.stats["jdoubt"] = int(journal.in_doubt)
            self.log.error("sender_journal_failed", order_id=oid, error=f"{type(exc).__name__}: {exc.strerror}",
                           doubt=journal.doubt)
            self.report(ts, ExecType.REJECTED, None, reason=ExecReason.HALTED, iid=iid, order_id=oid,
                        side=o.side, price=o.price, size=o.size)
            return False
        ledger.origin_ts[oid] = ts
        ledger.bodies[oid] = body  # the request's body, made once (the intent holds the same fields)
        self.group.pending.append(PendingIntent(oid, o.origin, ts))
        return True

    def _report_duplicate(self, ts: int, o: OrderEntry) -> None:
        """The answer to a NEW whose id is already journaled: whether that order works, never a fill."""
        if o.status in WORKING:
            self.report(ts, ExecType.ACKED, o, reason=ExecReason.DUPLICATE)
        elif o.terminal:
            self.report(ts, ExecType.REJECTED, o, reason=ExecReason.DUPLICATE, leaves=0.0)
        else:
            self.report(ts, ExecType.UNKNOWN, o, reason=ExecReason.DUPLICATE)
