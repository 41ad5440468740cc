"""The feed agent against the project's own paper venue over a real WebSocket on 127.0.0.1: the
shared real capture re-served by the venue is taken in by the feed with every one of its 443
non-zero checksums verified and one BOOK per depth push."""

from __future__ import annotations


import pytest

from pipeline.trading.messages import Kind
from pipeline.venue.server import VenueServer, VenueThread
from pipeline.venue.sources import ReplaySource
from procs.feed import BitgetFeedAgent
from tests.support.context import feed_context as make_ctx
from tests.support.wait import pump, wait_until

@pytest.mark.timeout(60)
def test_feed_verifies_every_checksum_of_the_capture_replayed_by_the_venue(capture_path):
    source = ReplaySource.from_capture(capture_path)
    insts = sorted(source.inst_ids)
    server = VenueServer(source, port=0, speed=0, start_paused=True)
    thread = VenueThread(server)
    port = thread.start()
    agent = BitgetFeedAgent()
    try:
        agent.on_start(make_ctx({"url": f"ws://127.0.0.1:{port}/v2/ws/public", "channels": ["books", "trade"],
                                 "instruments": {s: i + 1 for i, s in enumerate(insts)}, "seed": 1}))
        pump(agent, lambda: agent.ctx.stats.get("frames", 0) >= 2 * len(insts), what="every subscribe ack")
        server.resume()
        pump(agent, lambda: agent.books.checksums_verified >= 443, timeout=20, what="443 verified checksums")
        wait_until(lambda: server.stats()["replay_done"], 10, what="the end of the replay")
        pump(agent, lambda: agent.ctx.stats.get("frames", 0) >= server.stats()["frames_sent"], timeout=5,
             what="every frame the venue sent")
        stats = agent.ctx.stats
        assert agent.books.checksums_verified == 443
        assert stats.get("checksum_failures", 0) == 0 and stats.get("rejected", 0) == 0
        assert stats.get("resyncs", 0) == 0 and stats.get("seq_gaps", 0) == 0
        books = agent.ctx.outputs["md"].count(Kind.BOOK)
        assert books == stats["books_emitted"] >= 443, "one BOOK per depth push"
    finally:
        agent.on_close()
        thread.stop()
