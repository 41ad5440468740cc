"""``procs.venue:VenueAgent`` keeps its account across its own restarts (the account log in the run
dir), resets it only on purpose (``reset_account``), and serves the admin route only with
``allow_admin``. The agent runs in-process with its real REST server; requests go over real HTTP,
signed; a restart is ``on_close`` then a new agent on the same run dir."""

from __future__ import annotations

import http.client
import os
import stat
import time
from pathlib import Path

import orjson
import pytest

from pipeline.trading.bitget.signing import generate_paper_credentials, load_credentials, query_string
from pipeline.venue.errors import VenueError
from pipeline.venue.rest_api import ACCOUNT_INFO, ADJUST_POSITION, ASSETS, ORDER_INFO, PLACE
from pipeline.runtime.portfile import read_port_file
from procs.venue import VenueAgent
from tests.support.context import venue_context


class Running:
    """A started agent and a signed client to its REST port."""

    def __init__(self, tmp_path: Path, extra: str = "") -> None:
        key = tmp_path / "paper.json"
        if not key.exists():
            generate_paper_credentials(key)
        self.creds = load_credentials(key)
        params = f'seed = 3, step_ms = 20, key_file = "{key}", rate_limit_per_s = 1000.0' + extra
        self.ctx = venue_context(tmp_path, params)
        self.agent = VenueAgent()
        self.agent.on_start(self.ctx)
        self.conn = http.client.HTTPConnection("127.0.0.1", read_port_file(tmp_path / "run" / "venue.rest.port"),
                                               timeout=5)

    def request(self, method: str, path: str, params: dict | None = None, body: dict | None = None) -> dict:
        query = query_string(params)
        text = orjson.dumps(body).decode() if body is not None else ""
        headers = self.creds.headers(time.time_ns() // 1_000_000, method, path, query, text)
        self.conn.request(method, path + (f"?{query}" if query else ""), body=text.encode() if text else None,
                          headers=headers)
        return orjson.loads(self.conn.getresponse().read())

    def close(self) -> None:
        self.conn.close()
        self.agent.on_close()
        assert not self.agent.thread.alive and self.agent.thread.error is None


def test_the_account_survives_a_venue_restart_and_a_reset_is_a_new_one(tmp_path):
    path = tmp_path / "run" / "venue.account"
    v = Running(tmp_path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        info = v.request("GET", ACCOUNT_INFO)["data"]
        bids, asks = v.agent.server.market.levels("BTCUSDT", 1)
        far = f"{float(bids[0][0]) - 10:.1f}"  # rests, far below the touch
        placed = v.request("POST", PLACE, body={"symbol": "BTCUSDT", "side": "buy", "orderType": "limit",
                                                "force": "gtc", "price": far, "size": "0.01", "clientOid": "r-1"})
        assert placed["code"] == "00000"
        through = f"{float(asks[0][0]) + 50:.1f}"
        assert v.request("POST", PLACE, body={"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "ioc",
                                              "price": through, "size": "0.0005", "clientOid": "t-1"})["code"] == "00000"
        position = v.agent.engine.position("BTCUSDT")
        assert position > 0
        assets = v.request("GET", ASSETS, params={"coin": "BTC"})["data"]
    finally:
        v.close()

    v2 = Running(tmp_path)
    try:
        assert v2.request("GET", ACCOUNT_INFO)["data"] == info
        (o,) = v2.request("GET", ORDER_INFO, params={"clientOid": "r-1"})["data"]
        assert o["orderId"] == placed["data"]["orderId"] and o["status"] == "live" and o["price"] == far
        again = v2.request("POST", PLACE, body={"symbol": "BTCUSDT", "side": "buy", "orderType": "limit",
                                                "force": "gtc", "price": far, "size": "0.01", "clientOid": "t-1"})
        assert again["code"] == "43118"
        assert v2.request("GET", ASSETS, params={"coin": "BTC"})["data"] == assets
        v2.agent._next_stats_ns = 0
        v2.agent.do_work()
        assert v2.ctx.stats["positions"]["BTCUSDT"] == float(position) and v2.ctx.stats["dup_coid"] == 1
    finally:
        v2.close()

    v3 = Running(tmp_path, ", reset_account = true")
    try:
        info3 = v3.request("GET", ACCOUNT_INFO)["data"]
        assert info3["userId"] != info["userId"]
        assert v3.request("GET", ORDER_INFO, params={"clientOid": "r-1"})["code"] == "43001"
        assert v3.request("GET", ASSETS, params={"coin": "BTC"})["data"][0]["available"] == "0"
        assert len(list(path.parent.glob("venue.account.*.bak"))) == 1
    finally:
        v3.close()
    v4 = Running(tmp_path)  # reset_account is not sticky: the next start keeps the new account
    try:
        assert v4.request("GET", ACCOUNT_INFO)["data"] == info3
    finally:
        v4.close()
    starts = [orjson.loads(ln) for ln in (tmp_path / "logs" / "venue.log").read_text().splitlines()
              if '"venue_account"' in ln]
    assert [(e["account_id"], e["new"], e["orders"], bool(e["reset_backup"])) for e in starts] == [
        (info["userId"], True, 0, False), (info["userId"], False, 2, False), (info3["userId"], True, 0, True),
        (info3["userId"], False, 0, False)]


def test_the_admin_route_needs_allow_admin_and_its_adjustment_persists(tmp_path):
    v = Running(tmp_path)
    try:
        doc = v.request("POST", ADJUST_POSITION, body={"symbol": "BTCUSDT", "delta": "0.002"})
        assert doc["code"] == "40014" and v.agent.engine.position("BTCUSDT") == 0
    finally:
        v.close()
    v = Running(tmp_path, ", allow_admin = true")
    try:
        doc = v.request("POST", ADJUST_POSITION, body={"symbol": "BTCUSDT", "delta": "0.002"})
        assert doc["data"] == {"symbol": "BTCUSDT", "position": "0.002"}
    finally:
        v.close()
    v = Running(tmp_path)
    try:
        assert v.request("GET", ASSETS, params={"coin": "BTC"})["data"][0]["available"] == "0.002"
    finally:
        v.close()


@pytest.mark.parametrize("extra", [", allow_admin = 1", ", reset_account = \"yes\"", ", account_path = 5"])
def test_bad_account_params_fail_the_start(tmp_path, extra):
    with pytest.raises(VenueError):
        Running(tmp_path, extra)


def test_a_corrupt_account_log_fails_the_start_and_leaves_the_file_alone(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "venue.account").write_bytes(b"garbage line\nanother\n")
    with pytest.raises(VenueError, match="corrupt"):
        Running(tmp_path)
    assert (run / "venue.account").read_bytes() == b"garbage line\nanother\n"
    v = Running(tmp_path, f', account_path = "{tmp_path / "elsewhere.account"}"')
    try:
        assert (tmp_path / "elsewhere.account").exists()
    finally:
        v.close()


def test_a_start_that_fails_after_opening_the_account_releases_it(tmp_path):
    with pytest.raises(VenueError, match="rest_port"):
        Running(tmp_path, ", rest_port = 70000")
    v = Running(tmp_path)  # the account log is not held by the failed start
    v.close()
