"""The ops server's HTTP rules (pipeline/runtime/ops/web.py), sans-I/O: who is served, what needs the
operator token, and what every refusal answers."""

from __future__ import annotations

import orjson
import pytest

from pipeline.runtime.ops.web import Control, Read, Reply, WebRules, bearer, control_reply, is_loopback

TOKEN = "the-operator-token-0123456789"
PORT = 8790
HOST = {"Host": f"127.0.0.1:{PORT}"}
AUTH = {**HOST, "Authorization": f"Bearer {TOKEN}"}
STATIC = {"index.html": ("text/html; charset=utf-8", b"<html>page</html>"),
          "app.js": ("text/javascript; charset=utf-8", b"js")}


class Headers(dict):
    """Case-insensitive ``get``, as websockets' Headers."""

    def get(self, key, default=None):
        for k, v in self.items():
            if k.lower() == key.lower():
                return v
        return default


@pytest.fixture
def rules():
    return WebRules(PORT, TOKEN, static=dict(STATIC))


def decide(rules, method, path, headers, peer="127.0.0.1"):
    return rules.decide(method, path, Headers(headers), peer)


def _error(reply: Reply) -> str:
    return orjson.loads(reply.body)["error"]


# ------------------------------------------------------------------------------ who is served
@pytest.mark.parametrize("peer", ["10.0.0.5", "192.168.1.20", "8.8.8.8", "::ffff:10.1.1.1", "2001:db8::1",
                                  "localhost", "", "not-an-ip"])
@pytest.mark.parametrize("method, path, headers", [("GET", "/", HOST), ("GET", "/metrics", HOST),
                                                   ("GET", "/ws", HOST), ("POST", "/api/halt", AUTH)])
def test_a_client_that_is_not_loopback_is_refused_even_with_the_token(rules, peer, method, path, headers):
    reply = decide(rules, method, path, headers, peer)
    assert isinstance(reply, Reply) and reply.status == 403
    assert "loopback" in _error(reply)
    assert rules.refused == {403: 1}


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "::ffff:127.0.0.1"])
def test_loopback_clients_are_served(rules, peer):
    assert is_loopback(peer)
    assert decide(rules, "GET", "/metrics", HOST, peer) == Read("metrics")


@pytest.mark.parametrize("host", [None, "evil.example", f"evil.example:{PORT}", "127.0.0.1:9999", "127.0.0.1"])
def test_a_host_header_other_than_this_servers_is_refused(rules, host):
    """DNS rebinding: a page of another site whose name resolves to 127.0.0.1 sends its own Host."""
    headers = {} if host is None else {"Host": host}
    reply = decide(rules, "GET", "/metrics", headers)
    assert reply.status == 403 and "Host" in _error(reply)


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"LOCALHOST:{PORT}"])
def test_the_servers_own_host_names_are_accepted(rules, host):
    assert decide(rules, "GET", "/health", {"Host": host}) == Read("health")


@pytest.mark.parametrize("method, path, headers", [("POST", "/api/halt", AUTH), ("GET", "/ws", HOST),
                                                   ("GET", "/metrics", HOST)])
def test_a_foreign_origin_is_refused(rules, method, path, headers):
    reply = decide(rules, method, path, {**headers, "Origin": "http://evil.example"})
    assert reply.status == 403 and "cross-origin" in _error(reply)


def test_the_pages_own_origin_is_accepted(rules):
    assert isinstance(decide(rules, "POST", "/api/halt", {**AUTH, "Origin": f"http://localhost:{PORT}"}), Control)
    assert decide(rules, "GET", "/ws", {**HOST, "Origin": f"http://127.0.0.1:{PORT}"}) == Read("ws")


# ------------------------------------------------------------------------------ control
@pytest.mark.parametrize("path, request_", [("/api/halt", {"cmd": "halt"}), ("/api/resume", {"cmd": "resume"}),
                                            ("/api/kill-switch", {"cmd": "kill-switch"}),
                                            ("/api/restart/fast", {"cmd": "restart", "name": "fast"})])
def test_control_with_the_token_becomes_the_control_planes_request(rules, path, request_):
    assert decide(rules, "POST", path, AUTH) == Control(request_)
    assert rules.refused == {}


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", "Bearer wrong-token-0123456789",
                                  f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"])
@pytest.mark.parametrize("path", ["/api/halt", "/api/resume", "/api/kill-switch", "/api/restart/risk"])
def test_control_without_the_right_token_is_401(rules, auth, path):
    headers = dict(HOST) if auth is None else {**HOST, "Authorization": auth}
    reply = decide(rules, "POST", path, headers)
    assert reply.status == 401
    assert ("WWW-Authenticate", 'Bearer realm="shmpipe"') in reply.headers
    assert TOKEN not in reply.body.decode()
    assert rules.refused == {401: 1}


def test_control_needs_post(rules):
    reply = decide(rules, "GET", "/api/halt", AUTH)
    assert reply.status == 405 and ("Allow", "POST") in reply.headers


@pytest.mark.parametrize("name", ["", "Fast", "../x", "a b", "x" * 40, "1fast"])
def test_restart_of_a_name_that_cannot_be_a_stage_is_404(rules, name):
    assert decide(rules, "POST", f"/api/restart/{name}", AUTH).status == 404


def test_without_a_token_file_control_is_off_and_says_why_without_asking_for_one(rules):
    off = WebRules(PORT, None, token_error="token file secrets/ops.token does not exist (make setup creates it)")
    reply = decide(off, "POST", "/api/halt", AUTH)
    assert reply.status == 503 and "make setup" in _error(reply)
    assert decide(off, "GET", "/metrics", HOST) == Read("metrics"), "reading needs no token"


# ------------------------------------------------------------------------------ reading
def test_the_page_and_its_files_are_served_and_nothing_else(rules):
    assert decide(rules, "GET", "/", HOST) == Reply(200, "text/html; charset=utf-8", b"<html>page</html>")
    assert decide(rules, "GET", "/static/app.js", HOST).body == b"js"
    assert decide(rules, "GET", "/?x=1", HOST).status == 200
    for path in ("/static/../web.py", "/static/", "/static/missing.js", "/index.html", "/etc/passwd", "/api"):
        assert decide(rules, "GET", path, HOST).status == 404, path


@pytest.mark.parametrize("path, what", [("/metrics", "metrics"), ("/health", "health"), ("/ws", "ws"),
                                        ("/metrics?name[]=x", "metrics")])
def test_reads_need_no_token(rules, path, what):
    assert decide(rules, "GET", path, HOST) == Read(what)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
def test_reads_answer_get_only(rules, method):
    reply = decide(rules, method, "/metrics", HOST)
    assert reply.status == 405 and ("Allow", "GET") in reply.headers


def test_refusals_are_counted_by_status(rules):
    decide(rules, "GET", "/nope", HOST)
    decide(rules, "GET", "/nope", HOST)
    decide(rules, "POST", "/api/halt", HOST)
    decide(rules, "GET", "/", HOST, "10.0.0.1")
    assert rules.refused == {404: 2, 401: 1, 403: 1}


def test_bearer_and_control_reply():
    assert bearer(Headers({"authorization": "bearer abc"})) == "abc"
    assert bearer(Headers({"Authorization": "Token abc"})) is None
    assert control_reply({"ok": True}).status == 200
    refused = control_reply({"ok": False, "error": "unknown process 'x'"})
    assert refused.status == 409 and b"unknown process" in refused.body
