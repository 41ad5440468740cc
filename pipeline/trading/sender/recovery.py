"""Orders the venue holds that the journal lost: found and adopted at start, before anything new is sent.

The journal is fsync'd after the requests go out (``pipeline.trading.sender.groupcommit``), so a
machine crash (power, kernel) can lose its last window: intents of orders the venue has, and what
followed them (acks, fills). A killed sender loses nothing (its records are in the page cache, and
``Journal.open`` fsyncs them on restart). ``WindowRecovery.adopt_gen`` runs in the start-up
reconciliation right after the account check, before the journaled orders are queried and long before
any ORDER is read, and asks the venue for:

1. every open order (unfilled-orders, all symbols);
2. every fill after the journal's last trade id (``fills?idGreaterThan``, page by page), and for each
   fill of an order the journal lacks, that order (orderInfo by its clientOid).

An order of ours (its clientOid is ``client_oid(order_id)``: ``order_id_from_client_oid`` reads it
back) that the journal does not know is adopted: an ``intent`` record rebuilt from the venue's report
(``adopted``; symbol -> instrument; side, price and size as the venue has them; time in force not
known: 0), then a ``state`` record with the venue's status and orderId, counted (``adopted``) and
logged (``sender_order_adopted``). Its fills are then journaled and reported by the reconciliation's
fills poll like any other, and the state report that ends reconciliation lists it when it still works,
so the risk gateway's position and open orders are the venue's. A clientOid of ours on a symbol this
sender does not trade is counted (``adopt_skipped``) and logged; the positions check then finds the
difference (POSITION_MISMATCH: the gateway only reduces).

Why those two lists are enough. Records reach the file in the order they are written and an fsync
makes everything before it durable, so what survives is a prefix of what was written. An intent is
written before its request, so an order whose intent is lost was sent after every surviving record
was written: each of its fills came after every fill the prefix holds, and venue trade ids increase,
so every fill of it is after the prefix's last trade id (list 2). An order of the lost window is, at
the venue, either still open (list 1), or it has filled at least once (list 2), or it ended without a
fill (cancelled, an IOC or FOK that found nothing, refused): then it holds no position and no
working risk, and its id cannot become a second order: the venue refuses a clientOid it has seen
(43118, for the account's whole life), and the sender answers that refusal by querying the order
(``OrderAnswers``), never by sending it again. The ids themselves cannot be enumerated instead: they
are hashes of the deciding market event (``order_id_for``), and after a machine crash the orders
ring is gone with ``/dev/shm`` and a new ``up`` draws a new run epoch, so no id of the lost window is
ever decided again.
"""

from __future__ import annotations

from typing import Callable

from pipeline.trading.bitget import orderapi
from pipeline.trading.bitget.orderapi import OrderApi
from pipeline.trading.bitget.rest import SIDE_FROM_TEXT, VenueOrder
from pipeline.trading.journal import CANCELLED, FILLED, LIVE, PARTIAL
from pipeline.trading.messages import order_id_from_client_oid
from pipeline.trading.sender.queries import FILL_PAGE

_STATUSES = (LIVE, PARTIAL, FILLED, CANCELLED)


class WindowRecovery:
    """Finds and adopts the orders the journal lost (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``); ``instruments`` (id -> its ``symbol``); ``wall_ms()``
    signs the requests and dates the adopted intents.
    """

    def __init__(self, ledger, creds, instruments: dict, wall_ms: Callable[[], int], stats: dict, log):
        self.ledger = ledger
        self.creds = creds
        self.api = OrderApi(creds, instruments)
        self.iid_of = {inst.symbol: iid for iid, inst in instruments.items()}
        self.wall_ms = wall_ms
        self.stats = stats
        self.log = log

    def adopt_gen(self):
        """Open orders, then the fills after the journal's last trade id and each unknown order behind
        them: every order of ours the journal lacks is adopted. A request generator; returns True when
        the venue answered every request (the journal's last trade id is not moved: the fills poll
        after it ingests those fills)."""
        api = self.api
        for product in api.products:
            res = yield api.open_orders(product, self.wall_ms())
            if not res.ok:
                return False
            try:
                for v in orderapi.parse_orders(res.data):
                    self._adopt(v, "open")
            except ValueError as exc:
                return self._bad("unfilled-orders", exc)
        unknown: list[tuple[str, str, str]] = []  # (symbol, clientOid, orderId): one of the two
        for product in api.products:
            after = self.ledger.last_trade_id or None
            while True:
                res = yield api.fills(product, self.wall_ms(), after)
                if not res.ok:
                    return False
                try:
                    fills = orderapi.parse_fills(res.data)
                except ValueError as exc:
                    return self._bad("fills", exc)
                for f in fills:
                    key = (f.symbol, f.clientOid, "") if f.clientOid else (f.symbol, "", f.orderId)
                    if self._unknown_fill(f.clientOid, f.orderId) and key not in unknown:
                        unknown.append(key)
                if len(fills) < FILL_PAGE or fills[-1].tradeId == after:
                    break
                after = fills[-1].tradeId
        for symbol, coid, vid in unknown:
            res = yield api.order_info(symbol, self.wall_ms(), client_oid=coid or None, order_id=vid or None)
            if not res.ok:
                return False
            try:
                found = [v for v in orderapi.parse_orders(res.data) if (v.clientOid == coid if coid else
                                                                        v.orderId == vid)]
            except ValueError as exc:
                return self._bad("orderInfo", exc)
            for v in found:
                self._adopt(v, "filled")
        return True

    def _unknown_fill(self, coid: str, vid: str) -> bool:
        """Whether a fill is of an order of ours the journal does not know (by clientOid, or, for a
        fill without one, by the venue's orderId: any orderId the journal does not hold)."""
        if coid:
            return self._unknown(coid)
        return bool(vid) and not any(o.vid == vid for o in self.ledger.orders.values())

    def _unknown(self, coid: str) -> bool:
        """Whether ``coid`` is one of ours that the journal does not know."""
        oid = order_id_from_client_oid(coid)
        return oid is not None and oid not in self.ledger.orders

    def _adopt(self, v: VenueOrder, found_by: str) -> None:
        """Journal ``v`` (an order of ours the journal lacks) as an adopted intent and its state."""
        if not self._unknown(v.clientOid):
            return
        oid = order_id_from_client_oid(v.clientOid)
        iid = self.iid_of.get(v.symbol)
        side = SIDE_FROM_TEXT.get(v.side)
        if iid is None or side is None or v.status not in _STATUSES:
            self.stats["adopt_skipped"] = self.stats.get("adopt_skipped", 0) + 1
            self.log.error("sender_order_not_adopted", order_id=oid, symbol=v.symbol, side=v.side, status=v.status)
            return
        record = self.ledger.record
        record({"t": "intent", "oid": oid, "coid": v.clientOid, "iid": iid, "sym": v.symbol, "side": int(side),
                "tif": 0, "px": v.price, "sz": v.size, "oseq": 0, "ts_ms": self.wall_ms(), "adopted": True})
        record({"t": "state", "oid": oid, "status": v.status, "vid": v.orderId})
        self.stats["adopted"] = self.stats.get("adopted", 0) + 1
        self.log.warning("sender_order_adopted", order_id=oid, symbol=v.symbol, status=v.status, found_by=found_by,
                         filled=v.baseVolume)

    def _bad(self, request: str, exc: ValueError) -> bool:
        """A malformed answer: counted, logged; reconciliation tries again later."""
        self.stats["malformed"] += 1
        self.log.error("sender_bad_answer", request=request, error=str(exc))
        return False
