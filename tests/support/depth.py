"""SIGNALs with the depth block (``SIGNAL_DEPTH_DTYPE``) for the depth-aware planner's tests."""

from __future__ import annotations

import numpy as np

from pipeline.trading.messages import SIGNAL_DEPTH_DTYPE, Label


def depth_sig(iid=1, mid=100.0, spread=1.0, label=Label.HOLD, seq=1, bids=(), asks=()) -> bytes:
    """A 296-byte SIGNAL; ``bids`` / ``asks``: (distance from the mid in ticks, size) per level, best first."""
    r = np.zeros(1, SIGNAL_DEPTH_DTYPE)
    r["instrument_id"], r["label"], r["feature_seq"], r["ref_mid"], r["ref_spread"] = iid, label, seq, mid, spread
    for i, (d, s) in enumerate(bids):
        r["depth_bid_dist"][0, i], r["depth_bid_sz"][0, i] = d, s
    for i, (d, s) in enumerate(asks):
        r["depth_ask_dist"][0, i], r["depth_ask_sz"][0, i] = d, s
    return r.tobytes()
