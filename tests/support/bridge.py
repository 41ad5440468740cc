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
