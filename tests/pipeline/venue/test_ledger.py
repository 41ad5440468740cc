"""The paper venue's ledger counters (``procs.venue``): ``dup_coid`` counts places refused because the
clientOid was already placed (43118), ``positions`` is the signed base position per symbol from our
fills. Both are what the chaos scenarios reconcile the order sender and the risk gateway against.
The agent runs in-process with its real REST server; orders go over real HTTP, signed."""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import orjson

from pipeline.runtime.agent import AgentContext
from pipeline.trading.bitget.signing import generate_paper_credentials, load_credentials
from pipeline.venue.rest_api import PLACE
from pipeline.runtime.portfile import read_port_file
from procs.venue import LEDGER_STATS, PUBLISHED_STATS, VenueAgent
from tests.support.context import venue_context


def _start(tmp_path: Path) -> tuple[VenueAgent, AgentContext, object]:
    key = tmp_path / "paper.json"
    generate_paper_credentials(key)
    params = f'seed = 3, step_ms = 20, key_file = "{key}", rate_limit_per_s = 1000.0'
    ctx = venue_context(tmp_path, params)
    agent = VenueAgent()
    agent.on_start(ctx)
    return agent, ctx, load_credentials(key)


def _place(conn, creds, **fields) -> dict:
    body = orjson.dumps({"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc",
                         "size": "0.01", **fields}).decode()
    conn.request("POST", PLACE, body=body.encode(), headers=creds.headers(time.time_ns() // 1_000_000, "POST", PLACE, "", body))
    return orjson.loads(conn.getresponse().read())


def _published(agent: VenueAgent, ctx: AgentContext) -> dict:
    agent._next_stats_ns = 0
    assert agent.do_work() == 0
    return ctx.stats


def test_a_repeated_client_oid_is_refused_once_placed_and_counted_and_fills_show_in_positions(tmp_path):
    agent, ctx, creds = _start(tmp_path)
    try:
        st = _published(agent, ctx)
        assert set(LEDGER_STATS) <= set(st) and set(st) == set(PUBLISHED_STATS)
        assert st["dup_coid"] == 0 and st["positions"] == {"BTCUSDT": 0.0, "ETHUSDT": 0.0}
        conn = http.client.HTTPConnection("127.0.0.1", read_port_file(tmp_path / "run" / "venue.rest.port"), timeout=5)
        try:
            bids, asks = agent.server.market.levels("BTCUSDT", 1)
            far = f"{float(bids[0][0]) - 10:.1f}"  # rests, far below the touch
            assert _place(conn, creds, price=far, clientOid="c-1")["code"] == "00000"
            again = _place(conn, creds, price=far, clientOid="c-1")
            assert again["code"] == "43118"
            st = _published(agent, ctx)
            assert st["dup_coid"] == 1 and st["orders_placed"] == 1
            # a buy far through the ask takes liquidity at once: the position is what filled
            through = f"{float(asks[0][0]) + 50:.1f}"
            assert _place(conn, creds, price=through, force="ioc", size="0.0005", clientOid="c-2")["code"] == "00000"
            st = _published(agent, ctx)
            filled = float(agent.engine.position("BTCUSDT"))
            assert 0 < filled <= 0.0005 and st["positions"]["BTCUSDT"] == filled
            assert st["positions"]["ETHUSDT"] == 0.0 and st["dup_coid"] == 1
        finally:
            conn.close()
    finally:
        agent.on_close()
    assert not agent.thread.alive and agent.thread.error is None
