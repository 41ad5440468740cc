"""Small frame builders for the Bitget tests (v2 JSON, compact as the venue sends it)."""

from __future__ import annotations

import json


def dumps(obj) -> bytes:
    """Compact JSON bytes (stdlib: unlike orjson it writes ints beyond 64 bits, which tests need)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def depth_frame(
    bids, asks, *, channel="books", action="snapshot", inst_id="BTCUSDT", checksum=0, seq=None, pseq=None,
    ts="1695710946294", inst_type="SPOT",
) -> bytes:
    """A v2 depth push (``bids`` / ``asks`` as [price, size] string pairs, sent as given)."""
    entry = {"asks": asks, "bids": bids, "checksum": checksum, "ts": ts}
    if seq is not None:
        entry["seq"] = seq
    if pseq is not None:
        entry["pseq"] = pseq
    return dumps({
        "action": action,
        "arg": {"instType": inst_type, "channel": channel, "instId": inst_id},
        "data": [entry],
        "ts": 1695710946300,
    })


def trade_frame(trades, *, action="update", inst_id="BTCUSDT") -> bytes:
    """A v2 trade push; ``trades`` are dicts (v2 objects) or 4-lists (v1 rows)."""
    return dumps({
        "action": action,
        "arg": {"instType": "SPOT", "channel": "trade", "instId": inst_id},
        "data": list(trades),
        "ts": 1695711090682,
    })
