"""The lossy order path (``bench.stress_proxy``): requests cut whole from a byte stream, only order
requests lost, at the chosen rate, and the proxy forwarding the rest and every answer."""

from __future__ import annotations

import socket
import threading

import pytest

from bench.stress_proxy import LossPlan, RequestSplitter, is_order_request, lossy_order_path
from pipeline.runtime.portfile import write_port_file

PLACE = b'POST /api/v2/spot/trade/place-order HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{"a":1}'
INFO = b"GET /api/v2/spot/trade/orderInfo?clientOid=c1 HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("chunks, want", [
    ([PLACE], [("POST", "/api/v2/spot/trade/place-order")]),
    ([PLACE + INFO], [("POST", "/api/v2/spot/trade/place-order"), ("GET", "/api/v2/spot/trade/orderInfo")]),
    ([PLACE[:10], PLACE[10:70], PLACE[70:] + INFO[:5], INFO[5:]],  # cut anywhere, the body included
     [("POST", "/api/v2/spot/trade/place-order"), ("GET", "/api/v2/spot/trade/orderInfo")]),
    ([PLACE[:-1]], []),  # the body is not complete yet
])
def test_requests_are_cut_whole_from_the_stream(chunks, want):
    split = RequestSplitter()
    got = [r for c in chunks for r in split.feed(c)]
    assert [(m, p) for m, p, _ in got] == want and b"".join(raw for *_, raw in got) == b"".join(chunks)[:len(
        b"".join(raw for *_, raw in got))]
    assert not split.broken


@pytest.mark.parametrize("data", [b"NONSENSE\r\n\r\n", b"POST /x HTTP/1.1\r\nContent-Length: -4\r\n\r\n",
                                  b"x" * 20_000])
def test_a_stream_that_is_not_http_ends_the_split(data):
    split = RequestSplitter()
    assert split.feed(data) == [] and split.broken


@pytest.mark.parametrize("method, path, order", [
    ("POST", "/api/v2/spot/trade/place-order", True), ("POST", "/api/v2/spot/trade/cancel-order", True),
    ("POST", "/api/v2/spot/trade/cancel-symbol-order", True), ("POST", "/api/v2/mix/order/place-order", True),
    ("GET", "/api/v2/spot/trade/orderInfo", False), ("GET", "/api/v2/spot/trade/fills", False),
    ("GET", "/api/v2/spot/trade/place-order", False),
])
def test_only_posts_to_the_order_endpoints_are_order_requests(method, path, order):
    assert is_order_request(method, path) is order


def test_the_plan_loses_order_requests_at_its_rate_and_nothing_else():
    assert not any(LossPlan(1.0).lose("GET", "/api/v2/spot/trade/orderInfo") for _ in range(100))
    assert all(LossPlan(1.0).lose("POST", "/a/place-order") for _ in range(100))
    assert not any(LossPlan(0.0).lose("POST", "/a/place-order") for _ in range(100))
    a, b = LossPlan(0.05, seed=3), LossPlan(0.05, seed=3)
    draws = [a.lose("POST", "/a/place-order") for _ in range(20_000)]
    assert draws == [b.lose("POST", "/a/place-order") for _ in range(20_000)]  # seeded
    # limit fixed before the run: 5 % of 20,000 = 1,000, sd ~31; 5 sd either side
    assert 845 <= sum(draws) <= 1155, sum(draws)
    with pytest.raises(ValueError, match="drop_prob"):
        LossPlan(1.5)


def _answering_server() -> tuple[socket.socket, list[bytes]]:
    """A one-connection upstream that answers 'HTTP/1.1 200 OK' to every request head it reads."""
    srv = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def run() -> None:
        conn, _ = srv.accept()
        split = RequestSplitter()
        with conn:
            while data := conn.recv(65536):
                for _, path, raw in split.feed(data):
                    seen.append(raw)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    threading.Thread(target=run, daemon=True).start()
    return srv, seen


def test_the_proxy_swallows_lost_orders_and_forwards_the_rest_with_their_answers(tmp_path):
    srv, seen = _answering_server()
    write_port_file(tmp_path / "venue.port", srv.getsockname()[1])
    with lossy_order_path(tmp_path / "venue.port", tmp_path / "proxy.port", 1.0) as stats:
        port = int((tmp_path / "proxy.port").read_text())
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(INFO)
            assert c.recv(100).endswith(b"ok")
            c.sendall(PLACE)  # lost: no answer
            c.settimeout(0.3)
            with pytest.raises(socket.timeout):
                c.recv(100)
            c.settimeout(5)
            c.sendall(INFO)  # the next request still goes through
            assert c.recv(100).endswith(b"ok")
    srv.close()
    assert seen == [INFO, INFO]
    assert stats == {"connections": 1, "requests": 3, "order_requests": 1, "dropped": 1, "broken": 0,
                     "upstream_errors": 0}
