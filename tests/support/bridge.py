"""Helpers of the bridge's tests: ORDER payloads built by field name (``messages.ORDER_DTYPE``), and
the instruments and limits of a two-shard desk."""

from __future__ import annotations

import socket

import numpy as np

from pipeline.trading.messages import ORDER_DTYPE, OrderCmd, Side
from pipeline.trading.risk.limits import RiskLimits, resolve_limits


class Instrument:
    def __init__(self, id, symbol, tick_size=0.1, lot_size=0.001):
        self.id, self.symbol, self.tick_size, self.lot_size = id, symbol, tick_size, lot_size


INSTRUMENTS = [Instrument(1, "BTCUSDT"), Instrument(2, "ETHUSDT", 0.01, 0.01)]


def order_payload(instrument_id: int, order_id: int, price: float, size: float, side: int = Side.BUY,
                  cmd: int = OrderCmd.NEW) -> bytes:
    """A 48-byte ORDER payload (tif GTC, origin LLM)."""
    rec = np.zeros(1, ORDER_DTYPE)
    rec["instrument_id"], rec["cmd"], rec["side"], rec["tif"], rec["origin"] = instrument_id, cmd, side, 1, 2
    rec["order_id"], rec["price"], rec["size"] = order_id, price, size
    return rec.tobytes()


def desk_specs(**limits):
    """(specs, limits) of ``INSTRUMENTS`` under ``RiskLimits(**limits)``."""
    lim = RiskLimits(**limits)
    return resolve_limits(INSTRUMENTS, lim), lim


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def sender_reports(payload: bytes, now_ns: int, *, fill: bool = True) -> list[bytes]:
    """What the shared host's order sender (a double) reports for one ORDER payload: a NEW: ACKED,
    then FILLED in full at its price when ``fill``; a CANCEL: CANCELLED."""
    from pipeline.trading.messages import EXEC_STRUCT, ExecType, decode_order

    o = decode_order(payload)
    if o.cmd == OrderCmd.CANCEL:
        reports = [(ExecType.CANCELLED, 0.0, 0)]
    else:
        reports = [(ExecType.ACKED, 0.0, 0)] + ([(ExecType.FILLED, o.size, o.order_id)] if fill else [])
    return [EXEC_STRUCT.pack(o.instrument_id, etype, o.side, 0, o.order_id, o.price, size, 0.0, now_ns, fill_id)
            for etype, size, fill_id in reports]


def paper_sender(gw, now_ns: int, *, fill: bool = True) -> tuple[list, list]:
    """Every ORDER the gateway core ``gw`` queued answered through ``gw.on_report`` as
    ``sender_reports`` says. Returns (the ORDERs sent to the sender, decoded; the (peer, frames)
    routed to shards)."""
    from pipeline.trading.messages import decode_order

    sent, routed = [], []
    for payload, ts in gw.take_orders():
        sent.append(decode_order(payload))
        for rep in sender_reports(payload, now_ns, fill=fill):
            routed.extend(gw.on_report(rep, ts, now_ns))
    return sent, routed


def state_item(instrument_id: int, exec_type: int, *, order_id: int = 0, side: int = 0, price: float = 0.0,
               size: float = 0.0, reason: int = 0) -> bytes:
    """One EXEC_REPORT of a sender's state report (POSITION: size is the position, price its entry;
    POSITION_MISMATCH: price the journal's, size the venue's; OPEN_ORDER; SYNC_DONE)."""
    from pipeline.trading.messages import EXEC_STRUCT

    return EXEC_STRUCT.pack(instrument_id, exec_type, side, reason, order_id, price, size, 0.0, 0, 0)


def synced(gw, now_ns: int = 0, items: tuple = ()) -> list:
    """``gw`` (a ``SharedGateway``) started and answered by its sender's state report: ``items``
    (``state_item`` payloads) then SYNC_DONE. Returns what the SYNC_DONE routed to shards."""
    from pipeline.trading.messages import ExecType, OrderCmd, decode_order

    assert decode_order(gw.start(now_ns)).cmd == OrderCmd.SYNC
    for item in items:
        assert gw.on_report(item, now_ns, now_ns) == []
    return gw.on_report(state_item(0, ExecType.SYNC_DONE), now_ns, now_ns)
