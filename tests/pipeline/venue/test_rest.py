"""The paper venue's order REST API seen by a real HTTP client (``http.client``) on 127.0.0.1: signed
place / cancel / query round trips, authentication failures that place nothing, the rate limit, bad
HTTP and bad JSON answered with a 400 while the server keeps serving, and no key material in any
answer or log line. The venue clock and the rate limiter's clock are injected (no sleeps); the
synthetic market starts paused, so the book only moves when a test calls ``advance``."""

from __future__ import annotations

import http.client
import re
import socket
import time
from decimal import Decimal

import orjson
import pytest

from pipeline.trading.bitget.signing import Credentials, load_credentials
from pipeline.venue.rest import RestServer
from pipeline.venue.rest_api import CANCEL, CANCEL_SYMBOL, FILLS, ORDER_INFO, PLACE, UNFILLED
from pipeline.runtime.portfile import read_port_file
from procs.venue import ORDER_STATS, VenueAgent
from tests.support.context import venue_context
from tests.support.venue import T0_MS, RestVenue

D = Decimal


@pytest.fixture
def venue(tmp_path):
    v = RestVenue(tmp_path)
    try:
        yield v
    finally:
        v.close()


def assert_no_key_material(venue: RestVenue) -> None:
    texts = [b.decode() for b in venue.bodies] + [orjson.dumps(e, default=str).decode() for e in venue.log.events]
    for secret in venue.secrets():
        assert not any(secret in t for t in texts)


# -- round trips ------------------------------------------------------------------------------


def test_a_signed_place_query_cancel_round_trip(venue):
    bid, _ = venue.best()
    price = str(bid - D("5"))
    status, doc = venue.place(price=price, size="0.0100", clientOid="tp-rt-1")
    assert status == 200 and doc["msg"] == "success"
    oid = doc["data"]["orderId"]
    assert doc["data"] == {"orderId": oid, "clientOid": "tp-rt-1"}

    _, info = venue.request("GET", ORDER_INFO, params={"clientOid": "tp-rt-1"})
    (o,) = info["data"]
    assert o == {"orderId": oid, "clientOid": "tp-rt-1", "symbol": "BTCUSDT", "side": "buy", "orderType": "limit",
                 "force": "gtc", "price": price, "size": "0.0100", "baseVolume": "0", "quoteVolume": "0",
                 "priceAvg": "0", "status": "live", "enterPointSource": "API", "orderSource": "normal",
                 "cTime": str(T0_MS), "uTime": str(T0_MS)}
    assert venue.request("GET", ORDER_INFO, params={"orderId": oid})[1]["data"] == [o]
    assert [x["orderId"] for x in venue.request("GET", UNFILLED, params={"symbol": "BTCUSDT"})[1]["data"]] == [oid]

    venue.clock.advance_ms(7)
    status, doc = venue.request("POST", CANCEL, body={"symbol": "BTCUSDT", "orderId": oid})
    assert status == 200 and doc["data"] == {"orderId": oid, "clientOid": "tp-rt-1"}
    (o,) = venue.request("GET", ORDER_INFO, params={"orderId": oid})[1]["data"]
    assert o["status"] == "cancelled" and o["uTime"] == str(T0_MS + 7)
    assert venue.request("GET", UNFILLED, params={})[1]["data"] == []
    status, doc = venue.request("POST", CANCEL, body={"symbol": "BTCUSDT", "clientOid": "tp-rt-1"})
    assert (status, doc["code"], doc["data"]) == (400, "43001", None)
    status, doc = venue.request("GET", ORDER_INFO, params={"clientOid": "never-placed"})
    assert (status, doc["code"]) == (400, "43001")
    assert venue.rest.stats()["cancels"] == 1
    assert_no_key_material(venue)


def test_taker_fills_are_listed_oldest_first_and_reconcile_with_the_position(venue):
    _, ask = venue.best()
    _, asks = venue.market.levels("BTCUSDT", 2)
    first_size = D(asks[0][1])
    size = first_size + D("0.0001")  # takes the whole best ask and a bit of the next level
    status, doc = venue.place(price=asks[1][0], size=str(size), force="ioc", clientOid="tk1")
    assert status == 200
    _, fills = venue.request("GET", FILLS, params={"symbol": "BTCUSDT"})
    got = fills["data"]
    assert [(f["priceAvg"], f["size"], f["tradeScope"]) for f in got] == [
        (asks[0][0], str(first_size), "taker"), (asks[1][0], "0.0001", "taker")]
    assert int(got[1]["tradeId"]) > int(got[0]["tradeId"])
    assert all(f["orderId"] == doc["data"]["orderId"] and f["clientOid"] == "tk1" for f in got)
    assert D(got[0]["amount"]) == D(got[0]["priceAvg"]) * D(got[0]["size"])
    _, later = venue.request("GET", FILLS, params={"idGreaterThan": got[0]["tradeId"]})
    assert later["data"] == got[1:]
    assert sum(D(f["size"]) for f in got) == venue.engine.position("BTCUSDT") == size
    (o,) = venue.request("GET", ORDER_INFO, params={"clientOid": "tk1"})[1]["data"]
    assert o["status"] == "filled" and D(o["baseVolume"]) == size


def test_a_resting_order_fills_as_the_market_moves(venue):
    bid, _ = venue.best()
    status, doc = venue.place(price=str(bid), size="0.0001", clientOid="mk1")
    assert status == 200
    for _ in range(400):
        venue.market.advance(1)
        if venue.engine.order(client_oid="mk1").status == "filled":
            break
    (f,) = venue.request("GET", FILLS, params={"orderId": doc["data"]["orderId"]})[1]["data"]
    assert (f["tradeScope"], f["priceAvg"], f["size"]) == ("maker", str(bid), "0.0001")


def test_duplicate_client_oid_is_refused_and_cancel_symbol_cancels_the_rest(venue):
    bid, _ = venue.best()
    assert venue.place(price=str(bid - 10), clientOid="d1")[0] == 200
    assert venue.place(price=str(bid - 11), clientOid="d2")[0] == 200
    status, doc = venue.place(price=str(bid - 12), clientOid="d1")
    assert (status, doc["code"]) == (400, "43118")
    assert len(venue.engine.orders) == 2
    status, doc = venue.request("POST", CANCEL_SYMBOL, body={"symbol": "BTCUSDT"})
    assert status == 200 and [c["clientOid"] for c in doc["data"]["cancelled"]] == ["d1", "d2"]
    assert doc["data"]["symbol"] == "BTCUSDT"
    st = venue.rest.stats()
    assert (st["orders_placed"], st["orders_rejected"], st["cancels"]) == (2, 1, 2)


@pytest.mark.parametrize(("fields", "code"), [
    ({"symbol": "DOGEUSDT"}, "40034"),
    ({"price": "100.05"}, "41103"),
    ({"size": "abc"}, "40020"),
    ({"price": "100000.0", "size": "100"}, "43012"),
])
def test_bad_orders_get_the_venues_code(venue, fields, code):
    status, doc = venue.place(**fields)
    assert (status, doc["code"]) == (400, code) and doc["msg"]
    assert venue.engine.orders == {}


def test_post_only_that_would_cross_is_refused(venue):
    _, ask = venue.best()
    status, doc = venue.place(price=str(ask), force="post_only")
    assert (status, doc["code"]) == (400, "43027")


# -- authentication ---------------------------------------------------------------------------


def test_a_bad_signature_is_401_40009_and_places_nothing(venue):
    def flip(headers, text):
        sig = headers["ACCESS-SIGN"]
        return {**headers, "ACCESS-SIGN": ("A" if sig[0] != "A" else "B") + sig[1:]}, text

    status, doc = venue.request("POST", PLACE, body={"symbol": "BTCUSDT"}, tamper=flip)
    assert (status, doc["code"]) == (401, "40009")

    def body_changed(headers, text):  # signed one body, sent another
        return headers, text.replace("0.01", "0.02")

    body = {"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc", "price": "100.0",
            "size": "0.01", "clientOid": "x"}
    status, doc = venue.request("POST", PLACE, body=body, tamper=body_changed)
    assert (status, doc["code"]) == (401, "40009")
    assert venue.engine.orders == {} and venue.rest.stats()["bad_signatures"] == 2
    assert_no_key_material(venue)


def test_an_unknown_key_or_wrong_passphrase_is_401_40006(venue):
    c = venue.creds
    for other in (Credentials("paper-other", c.secret, c.passphrase), Credentials(c.api_key, c.secret, "wrong")):
        status, doc = venue.request("POST", PLACE, body={"symbol": "BTCUSDT"}, creds=other)
        assert (status, doc["code"]) == (401, "40006")
    status, doc = venue.request("GET", UNFILLED, tamper=lambda h, t: ({k: v for k, v in h.items()
                                                                        if k != "ACCESS-SIGN"}, t))
    assert (status, doc["code"]) == (400, "40001")
    assert venue.engine.orders == {}


def test_a_stale_or_future_timestamp_is_400_40008_and_places_nothing(venue):
    for ts in (T0_MS - 30_001, T0_MS + 30_001):
        status, doc = venue.request(
            "POST", PLACE, ts_ms=ts, body={"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc",
                                           "price": "100.0", "size": "0.01", "clientOid": "s1"})
        assert (status, doc["code"]) == (400, "40008")
    assert venue.engine.orders == {} and venue.rest.stats()["stale_timestamps"] == 2
    status, _ = venue.request("POST", PLACE, ts_ms=T0_MS - 30_000, body={
        "symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc", "price": "100.0", "size": "0.01",
        "clientOid": "s1"})
    assert status == 200  # the edge of the window is accepted; the clientOid was never taken


# -- rate limit -------------------------------------------------------------------------------


def test_each_endpoint_has_its_documented_rate_limit_answered_429(venue):
    bid, _ = venue.best()
    for i in range(10):  # place-order: 10 a second (the venue's rate_limit_per_s, the documented 10)
        assert venue.place(price=str(bid - 10), clientOid=f"r{i}")[0] == 200
    status, doc = venue.place(price=str(bid - 10), clientOid="r10")
    assert (status, doc["code"], doc["msg"]) == (429, "429", "Too Many Requests")
    status, _ = venue.request("POST", CANCEL, body={"symbol": "BTCUSDT", "clientOid": "r0"})
    assert status == 200  # cancel-order has a bucket of its own
    assert [venue.request("GET", FILLS)[0] for _ in range(11)] == [200] * 10 + [429]  # fills: 10 a second
    assert venue.request("GET", UNFILLED)[0] == 200  # unfilled-orders: 20 a second, a bucket of its own
    assert len(venue.engine.orders) == 10 and venue.rest.stats()["rate_limited"] == 2
    venue.mono_clock.advance_ms(100)  # 0.1 s: one more token
    assert venue.place(price=str(bid - 10), clientOid="r10")[0] == 200
    assert venue.place(price=str(bid - 10), clientOid="r11")[0] == 429


# -- bad HTTP ---------------------------------------------------------------------------------


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh socket; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize(("data", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /api/v2/spot/trade/fills HTTP/1.1\r\nbad header\r\n\r\n", 400),
    (b"POST /api/v2/spot/trade/place-order HTTP/1.1\r\nContent-Length: -3\r\n\r\n", 400),
    (b"POST /api/v2/spot/trade/place-order HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    (b"POST /api/v2/spot/trade/place-order HTTP/1.1\r\nContent-Length: 9999999\r\n\r\n", 413),
    (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", 431),
    (b"GET /x HTTP/2.0\r\n\r\n", 501),
])
def test_malformed_http_gets_an_error_status_and_the_server_keeps_serving(venue, data, status):
    answer = raw_exchange(venue.rest.port, data)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"Connection: close" in head
    assert orjson.loads(body)["code"] == "40001"
    assert venue.request("GET", UNFILLED)[0] == 200


def test_malformed_json_is_400_40001_on_a_connection_that_stays_open(venue):
    status, doc = venue.request("POST", PLACE, body={"x": 1}, tamper=lambda h, t: (
        Credentials(venue.creds.api_key, venue.creds.secret, venue.creds.passphrase).headers(
            T0_MS, "POST", PLACE, "", "{not json"), "{not json"))
    assert (status, doc["code"]) == (400, "40001") and "JSON" in doc["msg"]
    status, doc = venue.request("POST", PLACE, body=[1, 2])
    assert (status, doc["code"]) == (400, "40001")
    assert venue.rest.stats()["orders_rejected"] == 2
    assert venue.request("GET", UNFILLED)[0] == 200  # same keep-alive connection
    assert venue.api.stats["connections_total"] == 1


def test_unknown_paths_and_wrong_methods_are_refused(venue):
    status, doc = venue.request("GET", "/api/v2/spot/trade/nothing")
    assert (status, doc["code"]) == (404, "40404")
    status, doc = venue.request("GET", PLACE)
    assert (status, doc["code"]) == (405, "40001")


def test_pipelined_requests_are_answered_in_order(venue):
    reqs = b""
    for ts in (T0_MS, T0_MS + 1):
        h = venue.creds.headers(ts, "GET", UNFILLED, "", "")
        reqs += (f"GET {UNFILLED} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
                 + "\r\n").encode()
    answer = raw_exchange(venue.rest.port, reqs + b"GET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"200", b"200", b"404"]
    answer = raw_exchange(venue.rest.port, reqs + b"NOT HTTP\r\n\r\n")  # good ones first, then the 400
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"200", b"200", b"400"]


def test_the_server_binds_127_0_0_1_only(venue):
    host, port = venue.rest.address  # its one listening socket's
    assert host == "127.0.0.1" and port == venue.rest.port


def test_an_engine_bug_is_a_500_and_the_server_keeps_serving(venue, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(venue.engine, "open_orders", boom)
    status, doc = venue.request("GET", UNFILLED)
    assert (status, doc["code"]) == (500, "50000")
    monkeypatch.undo()
    assert venue.request("GET", UNFILLED)[0] == 200


def test_rest_server_refuses_a_bad_port_and_latency(venue):
    from pipeline.venue.errors import VenueError

    with pytest.raises(VenueError):
        RestServer(venue.api, port=70_000)
    with pytest.raises(VenueError):
        RestServer(venue.api, latency_ms=-1)


# -- the stage --------------------------------------------------------------------------------


def test_the_venue_stage_serves_orders_writes_the_rest_port_file_and_never_logs_the_key(tmp_path):
    key_file = tmp_path / "keys" / "paper.json"
    ctx = venue_context(tmp_path, f'key_file = "{key_file}", rate_limit_per_s = 50.0, latency_ms = 1.0')
    agent = VenueAgent()
    agent.on_start(ctx)
    try:
        assert key_file.stat().st_mode & 0o777 == 0o600  # created on first start
        creds = load_credentials(key_file)
        port = read_port_file(tmp_path / "run" / "venue.rest.port")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        body = orjson.dumps({"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc",
                             "price": "1000.0", "size": "0.0100", "clientOid": "stage-1"}).decode()
        conn.request("POST", PLACE, body=body, headers=creds.headers(int(time.time() * 1000), "POST", PLACE, "", body))
        resp = conn.getresponse()
        doc = orjson.loads(resp.read())
        assert resp.status == 200 and doc["data"]["clientOid"] == "stage-1"
        bad = creds.headers(int(time.time() * 1000), "POST", PLACE, "", body)
        sig = bad["ACCESS-SIGN"]
        bad["ACCESS-SIGN"] = ("x" if sig[0] != "x" else "y") + sig[1:]  # always a different signature
        conn.request("POST", PLACE, body=body, headers=bad)
        resp = conn.getresponse()
        assert (resp.status, orjson.loads(resp.read())["code"]) == (401, "40009")
        conn.close()
        agent._next_stats_ns = 0
        agent.do_work()
        assert {k: ctx.stats[k] for k in ORDER_STATS} == {"orders_placed": 1, "orders_rejected": 0, "fills": 0,
                                                          "cancels": 0, "bad_signatures": 1, "stale_timestamps": 0,
                                                          "rate_limited": 0}
    finally:
        agent.on_close()
    assert not (tmp_path / "run" / "venue.rest.port").exists()
    log_text = (tmp_path / "logs" / "venue.log").read_text()
    assert "rest_rejected" in log_text and f"#{creds.fingerprint}" in log_text
    for secret in (creds.secret, creds.passphrase):
        assert secret not in log_text and secret not in repr(ctx.stats)
