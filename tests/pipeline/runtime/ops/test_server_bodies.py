"""The ops server (pipeline/runtime/ops/server.py, wire.py) over real sockets on 127.0.0.1: every
request is answered or, when its client left first, counted; requests with bodies are read (bounded)
and answered: a control request's ``{}`` is processed, any other body, a body too large, a
Transfer-Encoding, a malformed or too large head, a slow head or body get a clear 4xx / 5xx, each
counted by status in the server's refusal counters; no logged refusal holds the token."""

from __future__ import annotations

import json
import socket

import orjson
import pytest

from pipeline.runtime.config import parse_config
from pipeline.runtime.ops import server as ops_server
from pipeline.runtime.ops.server import OpsServer
from pipeline.runtime.ops.tokenfile import generate_token_file, read_token
from pipeline.runtime.ops.wire import MAX_BODY_BYTES, MAX_HEAD_BYTES
from tests.support.ops import FakeControl, FakeSource
from tests.support.ports import ListLog
from tests.support.wait import wait_until


@pytest.fixture
def served(tmp_path):
    """(server, control, token) on a free port, stopped at teardown."""
    token_file = tmp_path / "ops.token"
    generate_token_file(token_file)
    cfg = parse_config(f'[supervisor]\nlog_dir = "{tmp_path}"\nops_token_file = "{token_file}"\n')
    ctl = FakeControl()
    srv = OpsServer(cfg, ListLog(), FakeSource(), control=ctl, port=0, push_interval_s=0.1)
    srv.start()
    yield srv, ctl, read_token(token_file)
    srv.stop()


def exchange(port: int, data: bytes, *, shut: bool = False, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """Send ``data`` on a fresh connection (``shut``: then half-close), read until the server closes;
    (status, body) of the answer, (0, b"") when it closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    if not got:
        return 0, b""
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def request(port: int, method: str, path: str, *, token: str | None = None, body: bytes | None = None,
            extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    if body is not None:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + extra + "\r\n").encode() + (body or b"")


def test_a_control_post_with_an_empty_json_object_is_processed(served):
    srv, ctl, token = served
    status, body = exchange(srv.port, request(srv.port, "POST", "/api/halt", token=token, body=b"{}"))
    assert status == 200 and orjson.loads(body)["ok"] is True
    status, _ = exchange(srv.port, request(srv.port, "POST", "/api/restart/risk", token=token, body=b" { } "))
    assert status == 200
    assert ctl.requests == [{"cmd": "halt"}, {"cmd": "restart", "name": "risk"}]
    assert srv.rules.refused == {}


@pytest.mark.parametrize("method, path, body, auth, status", [
    ("POST", "/api/halt", b'{"cmd": "down"}', True, 400),  # a parameter a control request does not take
    ("POST", "/api/halt", b"halt now", True, 400),  # not JSON
    ("POST", "/api/halt", b"{}", False, 401),  # the token is checked before the body matters
    ("GET", "/health", b"{}", False, 400),  # a read takes no body
    ("GET", "/metrics", b"x" * MAX_BODY_BYTES, False, 400),
    ("POST", "/nowhere", b"{}", True, 404),
], ids=["control-params", "control-not-json", "no-token", "get-health", "get-metrics-max", "unknown-path"])
def test_a_body_a_request_does_not_take_is_answered_and_counted(served, method, path, body, auth, status):
    srv, ctl, token = served
    got, answer = exchange(srv.port, request(srv.port, method, path, token=token if auth else None, body=body))
    assert got == status and orjson.loads(answer)["ok"] is False
    assert srv.rules.refused == {status: 1}
    assert ctl.requests == []


def test_a_websocket_upgrade_with_a_body_is_refused(served):
    srv, _, _ = served
    extra = ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             "Sec-WebSocket-Version: 13\r\n")
    assert exchange(srv.port, request(srv.port, "GET", "/ws", body=b"{}", extra=extra))[0] == 400
    assert srv.rules.refused == {400: 1}


@pytest.mark.parametrize("data, status", [
    (b"POST /api/halt HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), 413),
    (b"POST /api/halt HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411),
    (b"POST /api/halt HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
    (b"POST /api/halt HTTP/1.1\r\nHost: h\r\nContent-Length: -2\r\n\r\n{}", 400),
    (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost h\r\n\r\n", 400),
    (b"GET / HTTP/1.1\nHost: h\n\n", 400),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\n" + b"X: a\r\n" * 65 + b"\r\n", 431),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n", 400),  # a TLS hello
], ids=["body-too-large", "chunked", "two-lengths", "negative-length", "http2", "double-space", "no-colon",
        "bare-lf", "head-too-large", "too-many-headers", "tls"])
def test_a_head_websockets_would_drop_silently_is_answered_and_counted(served, data, status):
    srv, ctl, _ = served
    got, body = exchange(srv.port, data)
    assert got == status and orjson.loads(body)["ok"] is False
    assert srv.rules.refused == {status: 1}
    assert ctl.requests == []


def test_a_slow_head_or_body_is_answered_408(served, monkeypatch):
    srv, ctl, token = served
    monkeypatch.setattr(ops_server, "HEAD_TIMEOUT_S", 0.3)
    monkeypatch.setattr(ops_server, "BODY_TIMEOUT_S", 0.3)
    assert exchange(srv.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1")[0] == 408
    full = request(srv.port, "POST", "/api/halt", token=token, body=b"{}    ")
    assert exchange(srv.port, full[:-3])[0] == 408  # 3 bytes of the body never come
    assert exchange(srv.port, b"")[0] == 0  # no request at all: closed at the deadline, not counted
    assert srv.rules.refused == {408: 2}
    assert ctl.requests == []


def test_a_request_cut_short_by_its_client_is_answered_when_it_can_be_and_counted(served):
    srv, ctl, token = served
    full = request(srv.port, "POST", "/api/halt", token=token, body=b"{}    ")
    assert exchange(srv.port, full[:-3], shut=True)[0] == 400  # half-closed: the answer still goes out
    assert exchange(srv.port, b"GET /health HTTP/1.1\r\nHo", shut=True)[0] == 400
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:  # gone before any answer
        s.sendall(b"GET /health HTT")
    wait_until(lambda: srv.rules.refused.get(400, 0) == 3, 5, 0.01, "the abandoned request counted")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5):
        pass  # a connection with no request at all is not a refusal
    assert exchange(srv.port, request(srv.port, "GET", "/health"), shut=True)[0] in (200, 503)
    assert srv.rules.refused == {400: 3}
    assert ctl.requests == []


def test_a_token_sent_in_the_query_or_the_path_is_not_logged(served):
    srv, ctl, token = served
    for path in (f"/api/halt?token={token}", f"/api/halt?{token}", f"/api/restart/{token}",
                 f"/static/{token}?x={token}", f"/{token}"):
        status, _ = exchange(srv.port, request(srv.port, "POST", path, body=b"{}"))
        assert status in (401, 404)  # (a 404 names the path to the client that sent it)
    exchange(srv.port, b"GET /?t=" + token.encode() + b" HTTP/3\r\nHost: h\r\n\r\n")  # refused before websockets
    logged = [f for _, ev, f in srv.log.events if ev == "ops_refused"]
    assert len(logged) == 6 and all(token not in json.dumps(f) for f in logged)
    assert logged[0]["path"] == "/api/halt?<redacted>"
    assert ctl.requests == []
