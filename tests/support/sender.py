"""What the order sender's core tests share: the configured instruments as the sender sees them, a
recorder of exec reports, and the records and outbox items of orders."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.trading.messages import OrderRecord, client_oid
from pipeline.trading.sender.outbox import OutboxItem

#: the configured instruments as the sender sees them (id -> symbol, tick, lot)
INSTRUMENTS = {1: SimpleNamespace(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001),
               2: SimpleNamespace(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001)}


class Reports:
    """``ExecReporter.report`` stand-in: keeps (ts, exec type, order id, keyword arguments)."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __call__(self, ts, etype, o, **kw):
        self.calls.append((ts, etype, o.oid if o is not None else kw.get("order_id", 0), kw))

    def types(self) -> list:
        return [(etype, oid) for _, etype, oid, _ in self.calls]


def intent(oid: int, iid: int = 1, side: int = 1, px: float = 100.0, sz: float = 0.02) -> dict:
    """An intent record as the sender journals it."""
    return {"t": "intent", "oid": oid, "coid": client_oid(oid), "iid": iid, "sym": INSTRUMENTS[iid].symbol,
            "side": side, "tif": 1, "px": px, "sz": sz, "oseq": 7, "ts_ms": 1}


def order(cmd, oid: int, iid: int = 1):
    """An ``OutboxItem`` for an ORDER ``cmd`` of order ``oid`` (origin time 1000 + oid)."""
    return OutboxItem(cmd, OrderRecord(instrument_id=iid, cmd=cmd, side=1, tif=1, origin=0, order_id=oid, price=100.0,
                                       size=0.02, origin_seq=7, decided_ns=1), 1000 + oid)
