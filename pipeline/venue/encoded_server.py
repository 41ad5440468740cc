"""The paper venue's market-data server over pre-encoded frames (``sources.EncodedSource``).

``EncodedVenueServer`` is ``server.VenueServer`` (the same WebSocket dialect, clock, pacing, connections,
delay / drop faults and ``disconnect_every_s``) whose publishing only sends bytes built before anyone
connected: per unit, each ``(channel, inst_id)`` frame goes to that key's subscribers as it is, and the
market listeners (the order engine) hear ``book_changed`` / ``traded`` as from the synthetic source.
No book is folded and no frame is encoded while publishing, so the venue's CPU stays small whatever the
rate.

The book the order engine matches against (``market.levels``) is read from the last frame sent for the
instrument on its deepest encoded depth channel (so at most 15 levels a side), parsed only when asked
and kept until the next frame. A new subscriber to a depth channel gets that last frame at once; a
``trade`` subscriber gets no snapshot; ``books`` (incremental) is not served (its subscribers get the
subscribe answer and nothing more). The faults that change what the venue publishes (``skip_seq``,
``corrupt_checksum``, ``gap_every_s``, ``bad_checksum_every_s``, price jumps) have no effect on
fixed frames; the stage refuses them with this source (``procs.venue.parse_params``).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from pipeline.venue.market import DEPTH_CHANNELS
from pipeline.venue.server import VenueServer


class FrameBook:
    """What the server's connections and the order engine ask of the market, answered from the last
    frames sent (see the module docstring); anything else goes to the real ``VenueMarket`` beneath."""

    def __init__(self, market, channels: Sequence[str]) -> None:
        self._market = market
        depth = sorted((c for c in channels if c in DEPTH_CHANNELS), key=DEPTH_CHANNELS.get)
        self.book_channel = depth[-1] if depth else None
        self.last: dict[tuple[str, str], bytes] = {}
        self._parsed: dict[str, tuple[bytes, list, list]] = {}

    def __getattr__(self, name):
        return getattr(self._market, name)

    def depth_frame(self, inst_id: str, channel: str, push_ts_ms: int | None = None) -> bytes | None:
        """The last ``channel`` frame sent for ``inst_id`` (None before the first)."""
        return self.last.get((channel, inst_id))

    def books_snapshot_frame(self, inst_id: str, push_ts_ms: int | None = None) -> None:
        return None

    def trades_snapshot_frame(self, inst_id: str, push_ts_ms: int | None = None) -> None:
        return None

    def levels(self, inst_id: str, n: int | None = None) -> tuple[list, list]:
        """(bids, asks) best first as [price, size] strings from the last depth frame, at most ``n``."""
        frame = self.last.get((self.book_channel, inst_id))
        if frame is None:
            return [], []
        got = self._parsed.get(inst_id)
        if got is None or got[0] is not frame:
            d = orjson.loads(frame)["data"][0]
            got = self._parsed[inst_id] = (frame, d["bids"], d["asks"])
        return (list(got[1]), list(got[2])) if n is None else (got[1][:n], got[2][:n])  # copies: the cache stays


class EncodedVenueServer(VenueServer):
    """``VenueServer`` publishing ``EncodedUnit``s (see the module docstring)."""

    def __init__(self, source, **kwargs) -> None:
        """``source``: an ``EncodedSource``; ``kwargs``: ``VenueServer``'s.

        Raises:
            VenueError: what ``VenueServer`` raises.
        """
        super().__init__(source, **kwargs)
        self.market = FrameBook(self.market, source.channels)
        self._clients.market = self.market

    def _publish(self, units: Sequence) -> None:
        st, all_subs, send, last = self._stats, self._clients.subs, self._clients.send, self.market.last
        st["units"] += 1
        fired = self._faults.timed_due(self.source.market_ms)
        if fired:
            self._fire_timed_faults(fired)
        listeners, notify = self._listeners, self._notify
        for unit in units:  # trades before the book that shows them (pipeline.venue.orders)
            st["trade_events"] += len(unit.trades)
            if listeners:
                for inst_id, trades in unit.trades:
                    for listener in listeners:
                        notify(listener.traded, inst_id, trades)
            for key, frame in unit.frames:
                last[key] = frame
                subs = all_subs.get(key)
                if subs:
                    for conn in subs:
                        send(conn, frame)
            st["book_events"] += len(unit.books)
            if listeners:
                for inst_id in unit.books:
                    for listener in listeners:
                        notify(listener.book_changed, inst_id)
