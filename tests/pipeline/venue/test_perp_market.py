"""The paper venue publishes each instrument's market data under its own instType: a perpetual's books
and trades under "USDT-FUTURES", a spot instrument's under "SPOT", as the exchange does; a subscription
that names another instType is the exchange's 30001 "doesn't exist"."""

from __future__ import annotations

import time

import orjson
import pytest

from pipeline.runtime.log import open_event_log
from pipeline.trading.messages import Kind
from pipeline.venue.errors import VenueConfigError, VenueError
from pipeline.venue.market import BookEvent, TradeEvent, VenueMarket, parse_request
from pipeline.venue.server import VenueServer
from pipeline.venue.service import VenueThread
from procs.feed import BitgetFeedAgent
from procs.venue import VenueAgent
from tests.support.configtext import dirs, process
from tests.support.context import feed_context, stage_context
from tests.support.venue import synthetic
from tests.support.wait import pump

TYPES = {"BTCUSDT": "USDT-FUTURES", "ETHUSDT": "SPOT"}


def _sub(inst_type: str, channel: str, inst_id: str) -> str:
    return orjson.dumps({"op": "subscribe", "args": [{"instType": inst_type, "channel": channel,
                                                      "instId": inst_id}]}).decode()


@pytest.mark.parametrize(("inst_type", "inst_id", "code"), [
    ("USDT-FUTURES", "BTCUSDT", ""),        # the perpetual under its own type
    ("SPOT", "ETHUSDT", ""),                # spot under SPOT
    ("SPOT", "BTCUSDT", "30001"),           # the perpetual asked as spot: does not exist
    ("USDT-FUTURES", "ETHUSDT", "30001"),   # spot asked as a perpetual
    ("COIN-FUTURES", "BTCUSDT", "30001"),
])
def test_a_subscription_must_name_the_instruments_own_inst_type(inst_type, inst_id, code):
    (req,) = parse_request(_sub(inst_type, "books15", inst_id), TYPES, TYPES)
    assert req.code == code
    if code:
        assert req.msg == f"instType:{inst_type},channel:books15,instId:{inst_id} doesn't exist"


def test_every_frame_of_an_instrument_carries_its_own_inst_type():
    m = VenueMarket(list(TYPES), inst_type=TYPES)
    for iid in TYPES:
        ch = m.apply_book(BookEvent(iid, True, [["100", "1"]], [["101", "2"]], 1))
        tr = m.apply_trades(TradeEvent(iid, [{"ts": "1", "price": "100", "size": "1", "side": "buy"}], 1))
        frames = [m.books_frame(ch), m.books_snapshot_frame(iid), m.depth_frame(iid, "books15"),
                  m.trades_frame(tr), m.trades_snapshot_frame(iid)]
        assert {orjson.loads(f)["arg"]["instType"] for f in frames} == {TYPES[iid]}


def test_one_inst_type_for_all_stays_the_default_and_an_unknown_one_is_refused():
    assert VenueMarket(["BTCUSDT"]).inst_types == {"BTCUSDT": "SPOT"}
    assert VenueMarket(["BTCUSDT"], inst_type="USDT-FUTURES").inst_types == {"BTCUSDT": "USDT-FUTURES"}
    with pytest.raises(VenueError, match="instType must be one of"):
        VenueMarket(["BTCUSDT"], inst_type={"BTCUSDT": "FUTURES"})


@pytest.mark.timeout(30)
def test_a_feed_subscribed_as_usdt_futures_gets_the_perpetuals_books_and_a_spot_one_gets_the_error():
    server = VenueServer(synthetic(), start_paused=True, inst_types={"BTCUSDT": "USDT-FUTURES"})
    thread = VenueThread(server)
    port = thread.start()
    feeds = {t: BitgetFeedAgent() for t in ("USDT-FUTURES", "SPOT")}
    try:
        for t, agent in feeds.items():
            agent.on_start(feed_context({"url": f"ws://127.0.0.1:{port}/v2/ws/public", "inst_type": t,
                                         "channels": ["books15", "trade"], "instruments": {"BTCUSDT": 1},
                                         "seed": 1}))
        perp, spot = feeds["USDT-FUTURES"], feeds["SPOT"]
        pump(perp, lambda: perp.ctx.stats.get("frames", 0) >= 2, what="the perpetual's subscribe acks")
        pump(spot, lambda: spot.ctx.stats.get("venue_errors", 0) >= 2, what="the spot feed's two errors")
        server.advance(20)
        pump(perp, lambda: perp.ctx.outputs["md"].count(Kind.BOOK) >= 5, what="the perpetual's books")
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # the spot feed reads whatever the venue sent it
            spot.do_work()
        assert perp.ctx.stats.get("venue_errors", 0) == 0 and perp.ctx.outputs["md"].count(Kind.TRADE) >= 1
        assert spot.ctx.stats["venue_errors"] == 2 and spot.ctx.outputs["md"].count(Kind.BOOK) == 0
    finally:
        for agent in feeds.values():
            agent.on_close()
        thread.stop()


PERP_AND_SPOT = """
[[instruments]]
id = 1
symbol = "BTCUSDT"
venue = "paper"
product_type = "USDT-FUTURES"
contract_size = 0.0001
tick_size = 0.1
lot_size = 0.0001

[[instruments]]
id = 2
symbol = "ETHUSDT"
venue = "paper"
tick_size = 0.01
lot_size = 0.001
"""


def _venue(tmp_path, params: str) -> VenueAgent:
    agent = VenueAgent()
    agent.on_start(stage_context(dirs(tmp_path) + process("venue", "procs.venue:VenueAgent", params=params)
                                 + PERP_AND_SPOT, "venue", log=open_event_log("venue", tmp_path / "logs")))
    return agent


def test_the_venue_stage_publishes_each_instrument_under_its_configured_product_type(tmp_path):
    agent = _venue(tmp_path, "")
    try:
        assert agent.server.market.inst_types == {"BTCUSDT": "USDT-FUTURES", "ETHUSDT": "SPOT"}
    finally:
        agent.on_close()


def test_the_encoded_source_with_a_perpetual_is_refused_by_name(tmp_path):
    with pytest.raises(VenueConfigError, match="source 'encoded' publishes SPOT frames only"):
        _venue(tmp_path, 'source = "encoded", encoded_units = 5')
