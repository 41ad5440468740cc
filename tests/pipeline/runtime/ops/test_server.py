"""The ops server (pipeline/runtime/ops/server.py) over real sockets on 127.0.0.1, reading a stand-in
supervisor: the page, /metrics, /health, the WebSocket push, the control endpoints and their
refusals, bad input, a port that cannot be bound, and stopping. The whole pipeline behind it is in
test_server_live.py."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request

from pipeline.runtime.config import parse_config
from pipeline.runtime.errors import ConfigError, ControlError, StartupError
from pipeline.runtime.ops.metrics import METRICS_CONTENT_TYPE
from pipeline.runtime.ops.server import OpsServer, start_ops_server
from pipeline.runtime.ops.tokenfile import generate_token_file, read_token
from tests.support.ops import FakeControl, FakeSource
from tests.support.ports import ListLog


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "ops.token"
    generate_token_file(path)
    return path


@pytest.fixture
def served(tmp_path, token_file):
    """(server, source, control) on a free port, stopped at teardown."""
    cfg = parse_config(f'[supervisor]\nlog_dir = "{tmp_path}"\nops_token_file = "{token_file}"\n')
    src, ctl = FakeSource(), FakeControl()
    srv = OpsServer(cfg, ListLog(), src, control=ctl, port=0, push_interval_s=0.1)
    srv.start()
    yield srv, src, ctl
    srv.stop()


def fetch(port: int, path: str, method: str = "GET", headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_the_page_and_its_files_are_served_with_safe_headers(served):
    srv, _, _ = served
    status, headers, body = fetch(srv.port, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"/static/app.js" in body
    assert headers["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["Cache-Control"] == "no-store"
    for name, ctype in (("app.js", "text/javascript"), ("style.css", "text/css")):
        status, headers, body = fetch(srv.port, f"/static/{name}")
        assert status == 200 and headers["Content-Type"].startswith(ctype) and body
    assert b"http://" not in fetch(srv.port, "/")[2].replace(b"http://www.w3.org", b""), "nothing from elsewhere"


def test_metrics_parse_with_prometheus_clients_parser(served):
    srv, _, _ = served
    status, headers, body = fetch(srv.port, "/metrics")
    assert status == 200 and headers["Content-Type"] == METRICS_CONTENT_TYPE
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"shmpipe_stage_state", "shmpipe_ring_written", "shmpipe_ops_requests_refused"} <= names


def test_health_follows_the_pipeline(served):
    srv, src, _ = served
    status, _, body = fetch(srv.port, "/health")
    assert status == 200 and orjson.loads(body)["ok"] is True
    src.snap["processes"][3]["state"] = "BACKOFF"
    status, _, body = fetch(srv.port, "/health")
    assert status == 503 and orjson.loads(body)["why"] == ["stage fast is BACKOFF, not RUNNING"]


def test_control_with_the_token_goes_to_the_control_plane_and_back(served, token_file):
    srv, _, ctl = served
    auth = {"Authorization": f"Bearer {read_token(token_file)}"}
    status, _, body = fetch(srv.port, "/api/halt", "POST", auth)
    assert (status, orjson.loads(body)) == (200, {"ok": True})
    ctl.answer = {"ok": False, "error": "unknown process 'nope'; known: [...]"}
    status, _, body = fetch(srv.port, "/api/restart/nope", "POST", auth)
    assert status == 409 and "unknown process" in orjson.loads(body)["error"]
    assert ctl.requests == [{"cmd": "halt"}, {"cmd": "restart", "name": "nope"}]
    assert any(ev == "ops_control" and f["cmd"] == "halt" for _, ev, f in srv.log.events)


def test_control_without_the_token_or_with_a_wrong_one_is_401_and_does_nothing(served, token_file):
    srv, _, ctl = served
    token = read_token(token_file)
    for headers in ({}, {"Authorization": "Bearer wrong-0123456789abcdef"}, {"Authorization": f"Basic {token}"}):
        for path in ("/api/halt", "/api/resume", "/api/kill-switch", "/api/restart/risk"):
            status, resp_headers, body = fetch(srv.port, path, "POST", headers)
            assert status == 401 and resp_headers["WWW-Authenticate"].startswith("Bearer")
            assert token.encode() not in body
    assert ctl.requests == []
    assert srv.rules.refused == {401: 12}
    logged = [f for _, ev, f in srv.log.events if ev == "ops_refused"]
    assert logged and all(token not in json.dumps(f) for f in logged)


def test_a_request_from_a_non_loopback_address_is_refused_with_the_token_too(served, token_file):
    """The server listens on 127.0.0.1 only, so a foreign peer cannot connect; its answer to one is
    checked through the server's own handler with that peer address."""
    srv, _, ctl = served

    class Conn:
        remote_address = ("192.168.1.50", 40000)

    auth = Headers([("Host", f"127.0.0.1:{srv.port}"), ("Authorization", f"Bearer {read_token(token_file)}")])
    for method, path in (("POST", "/api/halt"), ("GET", "/metrics"), ("GET", "/")):
        resp = asyncio.run(srv._http(Conn(), Request(path, auth, method)))
        assert resp.status_code == 403 and b"loopback" in resp.body
    assert ctl.requests == []


def test_a_forged_host_is_refused(served):
    srv, _, _ = served
    assert fetch(srv.port, "/metrics", headers={"Host": f"rebind.example:{srv.port}"})[0] == 403


def test_the_metrics_count_the_refusals(served):
    srv, _, _ = served
    fetch(srv.port, "/api/halt", "POST")
    fetch(srv.port, "/nope")
    body = fetch(srv.port, "/metrics")[2].decode()
    fam = next(f for f in text_string_to_metric_families(body) if f.name == "shmpipe_ops_requests_refused")
    got = {s.labels["code"]: s.value for s in fam.samples}
    assert got["401"] == 1 and got["404"] == 1 and got["403"] == 0


def test_the_websocket_pushes_the_document_every_interval(served):
    srv, _, _ = served

    async def two():
        async with connect(f"ws://127.0.0.1:{srv.port}/ws", origin=f"http://127.0.0.1:{srv.port}") as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 5))
            second = json.loads(await asyncio.wait_for(ws.recv(), 5))
            return first, second

    first, second = asyncio.run(two())
    assert second["t_ns"] > first["t_ns"]
    assert [s["name"] for s in second["stages"]] == ["venue", "feed", "features", "fast", "llm", "risk", "sender"]
    assert second["stages"][1]["in_per_s"] is not None, "the second push has rates"


def test_a_websocket_from_another_origin_is_refused(served):
    srv, _, _ = served

    async def attempt():
        async with connect(f"ws://127.0.0.1:{srv.port}/ws", origin="http://evil.example"):
            pass

    with pytest.raises(InvalidStatus, match="403"):
        asyncio.run(attempt())


@pytest.mark.parametrize("raw", [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: " + b"x" * 20_000 + b"\r\n\r\n",
                                 b"POST /api/halt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello",
                                 b"\x00\xff" * 100, b""])
def test_bad_input_never_stops_the_server(served, raw):
    srv, _, _ = served
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        try:
            s.recv(4096)
        except (ConnectionResetError, TimeoutError):
            pass
    assert fetch(srv.port, "/health")[0] == 200


def test_a_snapshot_that_fails_is_a_503_not_a_crash(served):
    srv, src, _ = served
    src.fail = RuntimeError("the table is being closed")
    status, _, body = fetch(srv.port, "/metrics")
    assert status == 503 and b"the table is being closed" in body
    src.fail = None
    assert fetch(srv.port, "/metrics")[0] == 200


def test_a_control_plane_that_does_not_answer_is_a_409_naming_it(served, token_file):
    srv, _, _ = served

    def silent(req):
        raise ControlError("no supervisor answered at ipc://x within 5000 ms")

    srv.control = silent
    status, _, body = fetch(srv.port, "/api/resume", "POST", {"Authorization": f"Bearer {read_token(token_file)}"})
    assert status == 409 and b"no supervisor answered" in body


def test_a_port_in_use_is_a_startup_error_and_the_hook_runs_on_without_the_server(tmp_path, token_file):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        cfg = parse_config(f'[supervisor]\nops_port = {port}\nops_token_file = "{token_file}"\n')
        with pytest.raises(StartupError, match=f"cannot listen on 127.0.0.1:{port}.*ops_port"):
            OpsServer(cfg, ListLog(), FakeSource()).start()
        said, log = [], ListLog()
        assert start_ops_server(cfg, log, FakeSource(), said.append) is None
        assert said and said[0].startswith("ops server off: cannot listen")
        assert any(ev == "ops_server_off" for _, ev, _ in log.events)


def test_the_hook_starts_nothing_when_the_port_is_0():
    said = []
    assert start_ops_server(parse_config(""), ListLog(), FakeSource(), said.append) is None and said == []


def test_without_a_token_file_the_server_runs_and_control_is_off(tmp_path):
    cfg = parse_config(f'[supervisor]\nops_token_file = "{tmp_path / "missing.token"}"\n')
    srv = OpsServer(cfg, ListLog(), FakeSource(), control=FakeControl(), port=0)
    srv.start()
    try:
        assert fetch(srv.port, "/metrics")[0] == 200
        status, _, body = fetch(srv.port, "/api/halt", "POST", {"Authorization": "Bearer anything-0123456789"})
        assert status == 503 and b"does not exist" in body
        assert any(ev == "ops_control_off" for _, ev, _ in srv.log.events)
    finally:
        srv.stop()


def test_stop_closes_the_port_and_ends_the_thread(served):
    srv, _, _ = served
    port, thread = srv.port, srv._thread
    srv.stop()
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1)
    srv.stop()  # idempotent


@pytest.mark.parametrize("port", [1, 80, 1023, 65_536, -1])
def test_the_config_refuses_a_port_that_is_not_0_or_1024_65535(port):
    with pytest.raises(ConfigError, match="ops_port"):
        parse_config(f"[supervisor]\nops_port = {port}\n")


def test_the_config_defaults_are_off_and_the_setup_token():
    sup = parse_config("").supervisor
    assert (sup.ops_port, sup.ops_token_file) == (0, "secrets/ops.token")


@pytest.mark.timeout(30)
def test_stop_waits_for_nothing_when_never_started(tmp_path):
    log = ListLog()
    srv = OpsServer(parse_config(""), log, FakeSource(), port=0)
    srv.stop(timeout_s=3600.0)  # a wait for the thread it never started would hang here (the timeout fails it)
    assert srv._thread is None and log.events == []
