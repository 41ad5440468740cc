"""The venue's server over pre-encoded frames (``pipeline.venue.encoded_server``): the feed's own books
accept every push across loops, a new subscriber gets the last frame, and the order engine's book and
hooks follow the frames sent."""

from __future__ import annotations

import orjson

from pipeline.venue.encoded_server import EncodedVenueServer
from pipeline.venue.service import VenueThread
from pipeline.venue.sources import EncodedSource
from tests.support.venue import Client, sub, synthetic

UNITS = 40


class Hooks:
    """A market listener that counts what it hears."""

    def __init__(self) -> None:
        self.books, self.trades = 0, 0

    def book_changed(self, inst_id: str) -> None:
        self.books += 1

    def traded(self, inst_id: str, trades) -> None:
        self.trades += len(trades)


def test_frames_are_sent_as_built_and_accepted_by_the_feeds_books_across_loops():
    server = EncodedVenueServer(EncodedSource(synthetic(), UNITS), start_paused=True)
    hooks = Hooks()
    server.add_market_listener(hooks)
    thread = VenueThread(server)
    thread.start()
    c = late = None
    try:
        c = Client(server.url)
        c.subscribed(sub("books15", "BTCUSDT"), sub("trade", "BTCUSDT"))
        assert server.advance(2 * UNITS + 5) == 2 * UNITS + 5  # two loops and a bit
        last_seq = orjson.loads(server.market.last[("books15", "BTCUSDT")])["data"][0]["seq"]
        c.until_seq("books15", "BTCUSDT", last_seq)
        c.quiet(0.05)
        assert c.ok(), c.applied  # no STALE, no checksum mismatch: the feed takes every push
        seqs = c.seqs[("books15", "BTCUSDT")]
        assert len(seqs) == 2 * UNITS + 5 and all(b > a for a, b in zip(seqs, seqs[1:]))
        assert c.trades.get("BTCUSDT"), "no trade push"
        assert hooks.books == 2 * (2 * UNITS + 5) and hooks.trades > 0  # both instruments, every unit
        bids, asks = server.market.levels("BTCUSDT")
        book = c.books.book("books15", "BTCUSDT")
        assert [list(x) for x in book.bids()] == bids and [list(x) for x in book.asks()] == asks
        assert server.market.levels("BTCUSDT", 1) == (bids[:1], asks[:1])
        late = Client(server.url)
        late.subscribed(sub("books15", "ETHUSDT"))
        d = late.next()  # the last frame sent, at once
        assert d.inst_id == "ETHUSDT" and late.raw[-1].encode() == server.market.last[("books15", "ETHUSDT")]
        assert server.stats()["book_events"] == 2 * (2 * UNITS + 5)
    finally:
        for client in (c, late):
            if client is not None:
                client.close()
        thread.stop()
    assert thread.error is None
