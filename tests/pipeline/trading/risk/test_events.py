"""The risk gateway's decision events (pipeline/trading/risk/events.py): the ORDER payload of the events that
carry one."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from pipeline.trading.messages import ORDER_DTYPE, ORDER_FLAG_REDUCE_ONLY, OrderCmd, OrderOrigin, Side, TimeInForce
from pipeline.trading.risk import CancelAllSent, OrderApproved, StateChanged, SyncRequested, encode_order


def test_orders_are_encoded_in_the_order_layout_of_pipeline_messages():
    ev = OrderApproved(ts_ns=5, cmd=OrderCmd.NEW, instrument_id=2, order_id=77, side=Side.SELL,
                       tif=TimeInForce.POST_ONLY, price=101.25, size=0.3, origin_seq=9, leg=1)
    r = np.frombuffer(encode_order(ev), ORDER_DTYPE, 1)[0]
    assert (int(r["instrument_id"]), int(r["cmd"]), int(r["side"]), int(r["tif"]), int(r["order_id"])) == (
        2, OrderCmd.NEW, Side.SELL, TimeInForce.POST_ONLY, 77)
    assert (float(r["price"]), float(r["size"]), int(r["origin_seq"]), int(r["decided_ns"])) == (101.25, 0.3, 9, 5)
    assert int(r["origin"]) == OrderOrigin.LLM and int(r["flags"]) == 0
    ro = np.frombuffer(encode_order(msgspec.structs.replace(ev, reduce_only=True)), ORDER_DTYPE, 1)[0]
    assert int(ro["flags"]) == ORDER_FLAG_REDUCE_ONLY, "a reduce-only approval carries the flag"
    c = np.frombuffer(encode_order(CancelAllSent(ts_ns=3, cmd=OrderCmd.CANCEL_ALL, instrument_id=1, origin_seq=4,
                                                 why="x")), ORDER_DTYPE, 1)[0]
    assert (int(c["cmd"]), int(c["instrument_id"]), int(c["side"]), int(c["order_id"])) == (OrderCmd.CANCEL_ALL, 1, 0, 0)
    assert int(c["origin"]) == OrderOrigin.RISK and int(c["flags"]) == 0
    s = np.frombuffer(encode_order(SyncRequested(ts_ns=8, cmd=OrderCmd.SYNC)), ORDER_DTYPE, 1)[0]
    assert int(s["cmd"]) == OrderCmd.SYNC and int(s["decided_ns"]) == 8
    with pytest.raises(ValueError):
        encode_order(StateChanged(ts_ns=1, old="A", new="B", cause="c", latched=False))
