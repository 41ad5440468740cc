"""What the sender learns by asking the venue: order queries, fill polls, the periodic poll.

``VenueQueries`` makes the lane's request generators (``Lane``) and acts on their answers:

- ``query_gen``: orderInfo for one order; the venue's view is journaled and reported (acked, its
  fills fetched when the venue has more, cancelled, filled); an order the venue does not know is
  ``never_sent`` once ``reconcile_grace_ms`` has passed since its intent (REJECTED NOT_FOUND), or, when
  it was working, lost (CANCELLED NOT_FOUND).
- ``poll_fills_gen``: every fill after the last trade id (a request per page), ingested (``ingest``:
  each new fill of ours journaled, then FILLED; an order first learned of by its fill ACKED first).
- ``poll_gen``: the periodic poll while orders work (``queue_poll``, every ``poll_interval_ms``):
  unfilled-orders, then the fills; a working order missing from unfilled-orders is owed a query.

Orders whose state is owed (unknown outcomes, surprises) wait in ``owed`` (order id -> when to query
it next); ``query_owed`` queues their queries, one at a time per order (``querying``).

The requests are ``api``'s (``OrderApi``: each instrument's product type; the account-wide ones once
per product type). It starts as spot only; the ``Reconciler`` that owns these queries sets the one of
the configured instruments. A fill that names no clientOid (a perpetual's) is matched by orderId.
"""

from __future__ import annotations

from typing import Callable

from pipeline.trading.bitget import mix, orderapi, rest
from pipeline.trading.bitget.orderapi import OrderApi
from pipeline.trading.bitget.rest import Outcome
from pipeline.trading.journal import CANCELLED, FILLED, LIVE, PARTIAL, PENDING, UNKNOWN, WORKING, OrderEntry
from pipeline.trading.messages import ExecReason, ExecType, order_id_from_client_oid
from pipeline.trading.sender.lane import FILLS, POLL, QUERY

FILL_PAGE = 100  # a fills answer this long may have more after it
#: product type -> the endpoints its poll asks (open orders, fills)
POLL_PATHS = {orderapi.SPOT: (rest.UNFILLED_PATH, rest.FILLS_PATH), orderapi.PERP: (mix.PENDING_PATH, mix.FILLS_PATH)}
_NS_PER_MS = 1_000_000


class VenueQueries:
    """The lane's queries and polls and the orders owed one (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``), ``lane`` (``Lane``), ``report``
    (``ExecReporter.report``); ``wall_ms()`` signs requests and dates the grace, ``clock()`` times
    the owed queries; ``batch`` caps the queries queued per ``query_owed``; ``now_ns``: the start.
    """

    def __init__(self, ledger, lane, report: Callable, creds, wall_ms: Callable[[], int], clock: Callable[[], int],
                 stats: dict, log, *, poll_ns: int, grace_ms: int, batch: int, now_ns: int):
        self.ledger = ledger
        self.lane = lane
        self.report = report
        self.creds = creds
        self.api = OrderApi(creds, {})  # spot; the Reconciler sets the configured instruments' one
        self.wall_ms = wall_ms
        self.clock = clock
        self.stats = stats
        self.log = log
        self.poll_ns = poll_ns
        self.grace_ms = grace_ms
        self.batch = batch
        self.owed: dict[int, int] = {}  # order id -> when to query it next (cleared, never replaced)
        self.querying: set[int] = set()  # order ids with an orderInfo query on the lane
        self.next_poll_ns = now_ns  # when the periodic poll is due next

    # ------------------------------------------------------------------------------------ scheduling
    def queue_poll(self, now: int) -> None:
        """The periodic poll is due (``next_poll_ns``): queue it when orders work, none is queued or
        running, and its endpoints have tokens (``Lane.ready_at``; else it is due when they have); the
        next is due ``poll_interval_ms`` from ``now``."""
        self.next_poll_ns = now + self.poll_ns
        if self.ledger.working() and not self.lane.has(POLL):
            ready = self.lane.ready_at([p for product in self.api.products for p in POLL_PATHS[product]], now)
            if ready > now:
                self.next_poll_ns = ready
                return
            self.lane.queue(self.poll_gen(now), POLL)

    def query_owed(self, now: int) -> int:
        """Queue an orderInfo query on the lane for each order whose state is owed and is due, at most
        ``batch``, one at a time per order; a query that leaves it owed is due again
        ``poll_interval_ms`` after its answer. Returns how many were queued."""
        n = 0
        for oid, due in list(self.owed.items()):
            if due > now or oid in self.querying or n >= self.batch:
                continue
            o = self.ledger.orders.get(oid)
            if o is None or o.terminal:
                self.owed.pop(oid, None)
                continue
            n += 1
            self.querying.add(oid)

            def then(oid=oid) -> None:
                self.querying.discard(oid)
                if oid in self.owed:
                    self.owed[oid] = self.clock() + self.poll_ns

            self.lane.queue(self.query_gen(o, self.ledger.ts_of(oid)), QUERY, [then])
        return n

    def next_due_ns(self) -> int | None:
        """When the next owed query not already queued is due; None when there is none."""
        owed = [t for oid, t in self.owed.items() if oid not in self.querying]  # a query queued: the lane's
        return min(owed) if owed else None

    def after_fills(self, then: Callable[[], None]) -> None:
        """Run ``then`` once a fills poll that starts after now has completed (on the lane): joins a
        fills poll still queued, else queues one."""
        if not self.lane.join_last(FILLS, then):
            self.lane.queue(self.poll_fills_gen(), FILLS, [then])

    # ------------------------------------------------------------------------------------ orderInfo
    def query_gen(self, o: OrderEntry, ts: int):
        """orderInfo for ``o``; applies and reports what the venue says (with the order's fills when
        the venue has more than we know). A request generator; returns the orderInfo Result."""
        res = yield self.api.order_info(o.sym, self.wall_ms(), client_oid=o.coid)
        if res.ok:
            try:
                found = [v for v in orderapi.parse_orders(res.data) if v.clientOid == o.coid]
            except ValueError:
                found = []
            if found:
                yield from self._apply_venue_gen(o, found[0], ts)
                self.owed.pop(o.oid, None)
            return res
        record = self.ledger.record
        if res.outcome is Outcome.REJECTED and res.code in rest.NO_ORDER_CODES and o.status in (PENDING, UNKNOWN):
            if self.wall_ms() - o.ts_ms >= self.grace_ms:
                record({"t": "never_sent", "oid": o.oid})
                self.stats["never_sent"] += 1
                self.owed.pop(o.oid, None)
                self.log.info("sender_never_sent", order_id=o.oid)
                self.report(ts, ExecType.REJECTED, o, reason=ExecReason.NOT_FOUND, leaves=0.0)
        elif res.outcome is Outcome.REJECTED and res.code in rest.NO_ORDER_CODES and o.status in WORKING:
            self.log.error("sender_order_lost", order_id=o.oid)  # the venue forgot an acked order
            record({"t": "cancel", "oid": o.oid})
            self.owed.pop(o.oid, None)
            self.stats["cancels"] += 1
            self.report(ts, ExecType.CANCELLED, o, reason=ExecReason.NOT_FOUND, leaves=0.0)
        return res

    def _apply_venue_gen(self, o: OrderEntry, v: rest.VenueOrder, ts: int):
        """Journal and report the venue's view ``v`` of ``o``: acked, its fills (fetched: a request
        generator), cancelled or filled."""
        was = o.status
        if v.status not in (LIVE, PARTIAL, FILLED, CANCELLED):
            return
        record = self.ledger.record
        if was in (PENDING, UNKNOWN) or (v.orderId and not o.vid):
            record({"t": "state", "oid": o.oid, "status": LIVE if v.status in (FILLED, CANCELLED) else v.status,
                    "vid": v.orderId})
            if was in (PENDING, UNKNOWN):
                self.stats["acked"] += 1
                self.report(ts, ExecType.ACKED, o)
        if v.baseVolume > o.filled + 1e-12:
            yield from self._fetch_fills_gen(o)
        if v.status == CANCELLED and not o.terminal:
            record({"t": "cancel", "oid": o.oid})
            self.stats["cancels"] += 1
            self.report(ts, ExecType.CANCELLED, o, leaves=0.0)
        elif v.status == FILLED and not o.terminal and v.baseVolume <= o.filled + 1e-12:
            record({"t": "state", "oid": o.oid, "status": FILLED, "vid": v.orderId})

    def _fetch_fills_gen(self, o: OrderEntry):
        """Every fill of ``o`` (a request per page), ingested. A request generator."""
        after = None
        while True:
            res = yield self.api.order_fills(o.sym, self.wall_ms(), order_id=o.vid or None, id_greater_than=after)
            if not res.ok:
                return
            try:
                fills = orderapi.parse_fills(res.data)
            except ValueError:
                return
            self.ingest(fills, None, advance=False)  # one order's fills: others' may lie before them
            if len(fills) < FILL_PAGE:
                return
            after = fills[-1].tradeId

    # ------------------------------------------------------------------------------------ polling
    def poll_gen(self, now: int):
        """Lane job: unfilled-orders, then every new fill; a working order missing from
        unfilled-orders is owed a query (due ``now``)."""
        self.stats["polls"] += 1
        open_coids: set[str] = set()
        for product in self.api.products:
            res = yield self.api.open_orders(product, self.wall_ms())
            if not res.ok:
                return
            try:
                open_coids.update(v.clientOid for v in orderapi.parse_orders(res.data))
            except ValueError:
                return
        yield from self.poll_fills_gen()
        for o in self.ledger.working():
            if o.coid not in open_coids:
                self.owed.setdefault(o.oid, now)

    def poll_fills_gen(self):
        """Fetch every fill after the last trade id (a request per page); returns True when the venue
        answered. A request generator (``Lane.run_sync`` waits for each answer; the lane does not)."""
        ledger = self.ledger
        start = top = ledger.last_trade_id
        for product in self.api.products:  # each product type's fills after the same cursor
            after = start
            while True:
                res = yield self.api.fills(product, self.wall_ms(), after or None)
                if not res.ok:
                    return False
                try:
                    fills = orderapi.parse_fills(res.data)
                except ValueError:
                    self.stats["http_err"] += 1
                    return False
                self.ingest(fills, None, advance=False)
                if not fills or fills[-1].tradeId <= after:
                    break
                top = max(top, fills[-1].tradeId)
                after = fills[-1].tradeId
                if len(fills) < FILL_PAGE:
                    break
            ledger.last_trade_id = max(ledger.last_trade_id, top)
        return True

    def ingest(self, fills: list[rest.VenueFill], ts: int | None, *, advance: bool = True) -> None:
        """Journal and report each fill of ours not seen before (FILLED with origin ``ts``, the clock's
        when None); an order first learned of by its fill is ACKED first. Advances the last trade id
        (the fills poll's cursor) unless ``advance`` is False (one order's fills: another order's fill
        with a lower trade id may not have been polled yet)."""
        ledger = self.ledger
        for f in fills:
            if advance and f.tradeId > ledger.last_trade_id:
                ledger.last_trade_id = f.tradeId
            oid = order_id_from_client_oid(f.clientOid) if f.clientOid else self._oid_of_vid(f.orderId)
            o = ledger.orders.get(oid) if oid is not None else None
            if o is None or f.tradeId in ledger.state.trade_ids:
                continue
            if o.status in (PENDING, UNKNOWN):
                ledger.record({"t": "state", "oid": o.oid, "status": LIVE, "vid": f.orderId})
                self.owed.pop(o.oid, None)
                self.stats["acked"] += 1
                self.report(ledger.ts_of(o.oid), ExecType.ACKED, o)
            ledger.record({"t": "fill", "oid": o.oid, "tid": f.tradeId, "px": f.priceAvg, "sz": f.size,
                           "side": o.side, "iid": o.iid, "ts_ms": f.cTime})
            self.stats["fills"] += 1
            self.report(self.clock() if ts is None else ts, ExecType.FILLED, o, price=f.priceAvg, size=f.size,
                        venue_ts_ns=f.cTime * _NS_PER_MS, fill_id=f.tradeId)

    def _oid_of_vid(self, vid: str) -> int | None:
        """The order id of the journaled order the venue calls ``vid`` (a fill without a clientOid)."""
        if not vid:
            return None
        for o in self.ledger.orders.values():
            if o.vid == vid:
                return o.oid
        return None
