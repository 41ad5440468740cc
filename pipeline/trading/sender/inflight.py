"""Place and cancel requests in flight: one per order connection, answers read as they arrive.

``InFlightRequests`` holds the order connections (``pool``), which of them have nothing in flight
(``free``) and, per busy connection, the ``InFlight`` request (its outbox item, the request, when it
times out). ``start`` signs the item's request and writes it without waiting for the answer;
``read_answers`` reads what has arrived on each connection (a zero-timeout select, non-blocking reads:
an answer partway in is kept for the next pass, never waited for, so one slow peer holds no other),
in the order the requests were sent, and hands each whole answer to ``on_answer``
(``OrderAnswers.on_answer``, wired by the shell); a request unanswered past ``timeout_ms`` is an
unknown outcome (its connection is closed).
``must_wait`` says when a command must wait for a request in flight: a cancel never overtakes its
order's NEW, an order of an instrument never its CANCEL_ALL, a CANCEL_ALL never that instrument's
orders.
"""

from __future__ import annotations

from typing import Callable

import msgspec

from pipeline.runtime.agent import MARK_CANCEL_SENT, MARK_ORDER_SENT, MARK_VENUE_ACK, mark_code
from pipeline.trading.bitget import rest
from pipeline.trading.bitget.orderapi import OrderApi
from pipeline.trading.journal import OrderEntry
from pipeline.trading.messages import OrderCmd
from pipeline.trading.sender.connection import HttpTransport, readable
from pipeline.trading.sender.outbox import OutboxItem


class InFlight(msgspec.Struct, gc=False):
    """A request written on an order connection, not yet answered."""

    item: OutboxItem
    request: rest.Request
    deadline_ns: int  # unanswered past this: an unknown outcome


class InFlightRequests:
    """The order connections and the requests in flight on them (see the module docstring).

    ``client`` is the ``VenueClient``; ``ledger`` the ``OrderLedger`` (entries and admitted bodies);
    ``crash`` the test-only crash hook; ``wall_ms()`` the wall clock that signs requests.
    """

    def __init__(self, pool: list[HttpTransport], client, ledger, creds, instruments: dict, wall_ms: Callable[[], int],
                 timeout_ns: int, stats: dict, crash: Callable[[str], None]):
        self.pool = pool
        self.free = list(range(len(pool) - 1, -1, -1))  # order connections with nothing in flight
        self.inflight: dict[int, InFlight] = {}  # connection -> its request, in send order
        self.client = client
        self.send = client.send
        self.ledger = ledger
        self.bodies = ledger.bodies  # cleared, never replaced
        self.creds = creds
        self.instruments = instruments
        self.api = OrderApi(creds, instruments)  # each instrument's requests by its product type
        self.wall_ms = wall_ms
        self.timeout_ns = timeout_ns
        self.stats = stats
        self.crash = crash
        self.on_answer: Callable = None  # OrderAnswers.on_answer(item, result, now), wired by the shell

    def socks(self) -> list:
        """The open sockets of the connections with a request in flight."""
        return [s for s in (self.pool[k].sock for k in self.inflight) if s is not None]

    def has_new(self, oid: int) -> bool:
        """Whether a NEW of order ``oid`` is in flight."""
        return any(f.item.cmd is OrderCmd.NEW and f.item.order.order_id == oid for f in self.inflight.values())

    def must_wait(self, cmd: OrderCmd, o) -> bool:
        """True when a request in flight must be answered first: a CANCEL's own order's NEW (a cancel
        never overtakes its order), a CANCEL_ALL of its instrument (for a NEW or CANCEL), or any order
        of the instrument (for a CANCEL_ALL: it must not race the orders queued before it)."""
        iid = o.instrument_id
        if cmd is OrderCmd.CANCEL_ALL:
            return any(f.item.order.instrument_id == iid for f in self.inflight.values())
        oid = o.order_id
        for f in self.inflight.values():
            other = f.item.order
            if other.order_id == oid and f.item.cmd is not OrderCmd.CANCEL_ALL:
                return True
            if f.item.cmd is OrderCmd.CANCEL_ALL and other.instrument_id == iid:
                return True
        return False

    def start(self, item: OutboxItem, now: int) -> None:
        """Write ``item``'s request on a free order connection; in flight until ``read_answers`` reads
        its answer (a request that could not be written is answered at once)."""
        cmd, o, ts = item.cmd, item.order, item.ts_origin_ns
        if cmd is OrderCmd.NEW:
            req = self._place_request(self.ledger.orders[o.order_id])
            mark, crash_point = mark_code(MARK_ORDER_SENT, o.origin), "send"
            self.crash("journal")
            self.stats["sent"] += 1
        elif cmd is OrderCmd.CANCEL:
            entry = self.ledger.orders[o.order_id]
            req = self.api.cancel(self.instruments[entry.iid], self.wall_ms(), entry.coid)
            mark, crash_point = mark_code(MARK_CANCEL_SENT, o.origin), ""
        else:
            req = self.api.cancel_all(self.instruments[o.instrument_id], self.wall_ms())
            mark, crash_point = mark_code(MARK_CANCEL_SENT, o.origin), ""
        k = self.free.pop()
        res = self.send(self.pool[k], req, crash_point, sent_mark=mark, ts=ts)
        if res is None:
            self.inflight[k] = InFlight(item, req, now + self.timeout_ns)
        else:
            self.free.append(k)
            self.on_answer(item, res, now)

    def _place_request(self, o: OrderEntry) -> rest.Request:
        body = self.bodies.get(o.oid)
        if body is not None:
            return self.api.place_with_body(self.instruments[o.iid], self.wall_ms(), body)
        # not admitted by this process (never happens on the hot path): from the journaled intent,
        # reduce-only kept
        inst = self.instruments[o.iid]
        body = self.api.place_body(inst, o.side, o.tif, o.px, o.sz, o.coid, reduce_only=o.reduce_only)
        return self.api.place_with_body(inst, self.wall_ms(), body)

    def read_answers(self, now: int) -> int:
        """Read what has arrived (a zero-timeout select over the connections in flight, then
        non-blocking reads; ``VenueClient.read_answer``) and act on the answers that are whole, in the
        order their requests were sent; a request unanswered past
        ``timeout_ms`` is an unknown outcome (its connection is closed). Returns how many."""
        inflight = self.inflight
        if not inflight:
            return 0
        socks = {k: self.pool[k].sock for k in inflight}
        ready = readable(socks.values())
        n = 0
        for k in list(inflight):
            f = inflight[k]
            item = f.item
            ack = mark_code(MARK_VENUE_ACK, item.order.origin) if item.cmd is OrderCmd.NEW else 0
            res = self.client.read_answer(self.pool[k], f.request, f.deadline_ns, now, socks[k] in ready,
                                          ack_mark=ack, ts=item.ts_origin_ns)
            if res is None:
                continue
            del inflight[k]
            self.free.append(k)
            self.on_answer(item, res, now)
            n += 1
        return n
