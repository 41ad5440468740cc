"""The feed's clock skew per instrument (procs/feed.py, ``skew_ms_<id>``): a book update's exchange
timestamp minus the wall-clock time its frame was received, sampled at most every ``SKEW_EVERY_NS``
on a frame that made a BOOK. Driven in-process against a real WebSocket server on 127.0.0.1."""

from __future__ import annotations

import time

import pytest

from procs.feed import SKEW_EVERY_NS, BitgetFeedAgent
from tests.support.context import feed_context
from tests.support.frames import depth_text as depth
from tests.support.frames import ladder
from tests.support.frames import trades_text as trades
from tests.support.wait import pump
from tests.support.wsserver import WsTestServer


@pytest.fixture
def feed():
    agents = []

    def start(url: str, **params) -> BitgetFeedAgent:
        ctx = feed_context({"url": url, "backoff_initial_ms": 10, "backoff_max_ms": 40, "seed": 7,
                            "instruments": ["BTCUSDT", "ETHUSDT"], **params})
        agent = BitgetFeedAgent()
        agent.on_start(ctx)
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        a.on_close()


def _skew(agent, iid):
    return agent.ctx.stats.get(f"skew_ms_{iid}")


@pytest.mark.parametrize("decode_in", ["network", "agent"])
def test_skew_is_the_book_exchange_time_minus_the_wall_clock_receive_time(feed, decode_in):
    """A book stamped 2 s in the past reads about -2000 ms; one stamped 1 s ahead, about +1000 ms; each
    instrument keeps its own; a trade frame (no BOOK) sets none."""
    with WsTestServer() as srv:
        agent = feed(srv.url, decode_in=decode_in)
        srv.wait_for(lambda: srv.subscribed(0), what="subscribe")
        pump(agent, lambda: agent.ctx.stats.get("frames", 0) >= 4, what="the subscribe acks")
        srv.send([trades([(str(int(time.time() * 1000)), "100.4", "0.5", "buy", "1")])])
        pump(agent, lambda: agent.ctx.stats.get("trades_emitted", 0) == 1, what="the trade")
        assert _skew(agent, 1) is None, "a frame that made no BOOK gives no skew"
        past_ms = int(time.time() * 1000) - 2_000
        srv.send([depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=1, ts=str(past_ms))])
        pump(agent, lambda: _skew(agent, 1) is not None, what="BTCUSDT's skew")
        assert -2_500 < _skew(agent, 1) < -1_990, _skew(agent, 1)
        time.sleep(SKEW_EVERY_NS / 1e9)  # the next sample is due
        ahead_ms = int(time.time() * 1000) + 1_000
        srv.send([depth(ladder(10.0, -0.1, 3), ladder(10.2, 0.1, 3), inst_id="ETHUSDT", seq=2, ts=str(ahead_ms))])
        pump(agent, lambda: _skew(agent, 2) is not None, what="ETHUSDT's skew")
        assert 500 < _skew(agent, 2) < 1_010, _skew(agent, 2)
        assert -2_500 < _skew(agent, 1) < -1_990, "each instrument keeps its own sample"


def test_skew_is_sampled_at_most_once_per_interval(feed):
    """Books arriving faster than SKEW_EVERY_NS update the sample once per interval, not per book."""
    with WsTestServer() as srv:
        agent = feed(srv.url)
        srv.wait_for(lambda: srv.subscribed(0), what="subscribe")
        pump(agent, lambda: agent.ctx.stats.get("frames", 0) >= 4, what="the subscribe acks")
        now_ms = int(time.time() * 1000)
        srv.send([depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=1, ts=str(now_ms - 5_000))])
        pump(agent, lambda: _skew(agent, 1) is not None, what="the first sample")
        first = _skew(agent, 1)
        srv.send([depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=2, ts=str(now_ms + 5_000))])
        pump(agent, lambda: agent.ctx.stats.get("books_emitted", 0) == 2, what="the second BOOK")
        assert _skew(agent, 1) == first, "a BOOK within the interval does not replace the sample"
