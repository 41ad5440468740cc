"""Bitget v2 frames for the tests, compact JSON as the venue sends it.

- ``depth_frame`` / ``trade_frame``: the raw frame as bytes (what the decoders take), every field
  as given, so malformed frames are built the same way as good ones.
- ``depth_text`` / ``trades_text``: the same frames as text (a WebSocket text frame, what
  ``WsTestServer.send`` sends as such); ``depth_text`` defaults to the ``books15`` channel.
- ``ladder``: price levels as strings; ``RefBook``: the ``books`` channel as the venue keeps it,
  building each push with the checksum a correct venue would send.
"""

from __future__ import annotations

import json

from pipeline.trading.bitget.book import bitget_checksum

DEPTH_TS = "1695710946294"


def dumps(obj) -> bytes:
    """Compact JSON bytes (stdlib: unlike orjson it writes ints beyond 64 bits, which tests need)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def depth_frame(bids, asks, *, channel="books", action="snapshot", inst_id="BTCUSDT", checksum=0, seq=None,
                pseq=None, ts=DEPTH_TS, inst_type="SPOT") -> bytes:
    """A v2 depth push (``bids`` / ``asks`` as [price, size] string pairs, sent as given)."""
    entry = {"asks": asks, "bids": bids, "checksum": checksum, "ts": ts}
    if seq is not None:
        entry["seq"] = seq
    if pseq is not None:
        entry["pseq"] = pseq
    return dumps({"action": action, "arg": {"instType": inst_type, "channel": channel, "instId": inst_id},
                  "data": [entry], "ts": 1695710946300})


def trade_frame(trades, *, action="update", inst_id="BTCUSDT") -> bytes:
    """A v2 trade push; ``trades`` are dicts (v2 objects) or 4-lists (v1 rows), sent as given."""
    return dumps({"action": action, "arg": {"instType": "SPOT", "channel": "trade", "instId": inst_id},
                  "data": list(trades), "ts": 1695711090682})


def depth_text(bids, asks, *, channel="books15", **fields) -> str:
    """``depth_frame`` as text; the channel defaults to ``books15`` (the feed's snapshot channel)."""
    return depth_frame(bids, asks, channel=channel, **fields).decode()


def trades_text(rows, *, inst_id="BTCUSDT", action="update") -> str:
    """A trade push as text; ``rows`` are (ts_ms, price, size, side, trade_id) tuples of strings."""
    data = [{"ts": t, "price": p, "size": s, "side": side, "tradeId": tid} for t, p, s, side, tid in rows]
    return trade_frame(data, action=action, inst_id=inst_id).decode()


def ladder(best: float, step: float, n: int, size: str = "1.5") -> list[list[str]]:
    """``n`` levels from ``best`` moving by ``step`` (negative for bids), as strings."""
    return [[f"{best + i * step:.1f}", size] for i in range(n)]


class RefBook:
    """The ``books`` channel as the venue keeps it: snapshot, then updates; each builds the push (text)
    with the checksum of the book after it (``checksum_delta`` to corrupt it on purpose)."""

    def __init__(self, inst_id: str = "BTCUSDT"):
        self.inst_id = inst_id
        self.bids: dict[str, str] = {}
        self.asks: dict[str, str] = {}
        self.seq = 100

    def _sorted(self):
        b = sorted(self.bids.items(), key=lambda kv: -float(kv[0]))
        a = sorted(self.asks.items(), key=lambda kv: float(kv[0]))
        return [list(x) for x in b], [list(x) for x in a]

    def snapshot(self, bids, asks) -> str:
        self.bids = dict(map(tuple, bids))
        self.asks = dict(map(tuple, asks))
        self.seq += 1
        b, a = self._sorted()
        return depth_text(b, a, channel="books", action="snapshot", inst_id=self.inst_id, checksum=0, seq=self.seq)

    def update(self, bids=(), asks=(), *, checksum_delta: int = 0, seq: int | None = None) -> str:
        for side, rows in ((self.bids, bids), (self.asks, asks)):
            for p, s in rows:
                if float(s) == 0:
                    side.pop(p, None)
                else:
                    side[p] = s
        self.seq = self.seq + 1 if seq is None else seq
        b, a = self._sorted()
        cs = bitget_checksum(b, a) + checksum_delta
        if cs > 2**31 - 1:
            cs -= 2**32
        return depth_text([list(x) for x in bids], [list(x) for x in asks], channel="books", action="update",
                          inst_id=self.inst_id, checksum=cs, seq=self.seq)

    def top(self, n: int = 15):
        b, a = self._sorted()
        return [float(p) for p, _ in b[:n]], [float(p) for p, _ in a[:n]]
