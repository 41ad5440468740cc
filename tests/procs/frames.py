"""Bitget v2 frames for the feed tests (compact JSON text, as the venue sends it), and a tiny
reference book that computes the checksum a correct venue would send after each update."""

from __future__ import annotations

import json

from pipeline.trading.bitget.book import bitget_checksum


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def depth(bids, asks, *, channel="books15", action="snapshot", inst_id="BTCUSDT", checksum=0, seq=None,
          ts="1695710946294", inst_type="SPOT") -> str:
    """A depth push; ``bids`` / ``asks`` are [price, size] string pairs sent as given."""
    entry = {"asks": asks, "bids": bids, "checksum": checksum, "ts": ts}
    if seq is not None:
        entry["seq"] = seq
    return dumps({"action": action, "arg": {"instType": inst_type, "channel": channel, "instId": inst_id},
                  "data": [entry], "ts": 1695710946300})


def trades(rows, *, inst_id="BTCUSDT", action="update") -> str:
    """A trade push; ``rows`` are (ts_ms, price, size, side, trade_id) tuples of strings."""
    data = [{"ts": t, "price": p, "size": s, "side": side, "tradeId": tid} for t, p, s, side, tid in rows]
    return dumps({"action": action, "arg": {"instType": "SPOT", "channel": "trade", "instId": inst_id},
                  "data": data, "ts": 1695711090682})


def ladder(best: float, step: float, n: int, size: str = "1.5") -> list[list[str]]:
    """``n`` levels from ``best`` moving by ``step`` (negative for bids), as strings."""
    return [[f"{best + i * step:.1f}", size] for i in range(n)]


class RefBook:
    """The ``books`` channel as the venue keeps it: snapshot, then updates; ``frame()`` builds the
    push with the checksum of the book after it (``checksum_delta`` to corrupt it on purpose)."""

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
        return depth(b, a, channel="books", action="snapshot", inst_id=self.inst_id, checksum=0, seq=self.seq)

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
        return depth([list(x) for x in bids], [list(x) for x in asks], channel="books", action="update",
                     inst_id=self.inst_id, checksum=cs, seq=self.seq)

    def top(self, n: int = 15):
        b, a = self._sorted()
        return [float(p) for p, _ in b[:n]], [float(p) for p, _ in a[:n]]
