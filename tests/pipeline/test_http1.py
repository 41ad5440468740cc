"""pipeline.http1: the request bytes are pinned; the connection works against a real server on
127.0.0.1 (keep-alive, Connection: close, a server that closes a kept-alive connection, timeouts)."""

from __future__ import annotations

import http.server
import select
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import http1
from pipeline.bitget import rest
from pipeline.bitget.signing import Credentials


def test_request_bytes_are_pinned():
    raw = http1.encode_request("POST", "/api/v2/spot/trade/cancel-symbol-order", "127.0.0.1:8080",
                               {"ACCESS-KEY": "k1", "Content-Type": "application/json"}, b'{"symbol":"BTCUSDT"}')
    assert raw == (b"POST /api/v2/spot/trade/cancel-symbol-order HTTP/1.1\r\n"
                   b"Host: 127.0.0.1:8080\r\n"
                   b"ACCESS-KEY: k1\r\n"
                   b"Content-Type: application/json\r\n"
                   b"Content-Length: 20\r\n"
                   b"\r\n"
                   b'{"symbol":"BTCUSDT"}')


def test_a_get_without_body_says_content_length_zero():
    assert http1.encode_request("GET", "/x?a=1", "h:1", {}) == b"GET /x?a=1 HTTP/1.1\r\nHost: h:1\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("method,target,headers", [
    ("POST", "/a\r\nX: y", {}),
    ("POST", "/a b", {}),
    ("PO ST", "/a", {}),
    ("POST", "/a", {"X-Bad": "v\r\nInjected: 1"}),
    ("POST", "/a", {"X-Bad": "v\nw"}),
    ("POST", "/a", {"X-Bad": "v\0"}),
    ("POST", "/a", {"Bad Name": "v"}),
    ("POST", "/a", {"Bad:Name": "v"}),
    ("POST", "/a", {"": "v"}),
    ("POST", "/a", {"Host": "evil"}),
    ("POST", "/a", {"content-length": "0"}),
])
def test_anything_that_would_split_the_request_is_refused(method, target, headers):
    with pytest.raises(http1.HeaderError):
        http1.encode_request(method, target, "127.0.0.1:1", headers, b"")


_ALPHABET = "aZ09-/ :\r\n\0"
_text = st.text(alphabet=_ALPHABET, max_size=6)


@settings(max_examples=400, deadline=None)
@given(method=_text, target=_text, host=_text,
       headers=st.dictionaries(st.one_of(_text, st.sampled_from(["Host", "HOST", "Content-Length"])), _text,
                               max_size=4))
def test_the_one_pass_check_refuses_exactly_what_the_rules_refuse(method, target, host, headers):
    """encode_request checks everything in one pass, then names the culprit part by part: the two
    agree on every input (a part, a header name or a header value, alone or mixed)."""
    rules_ok = (all(p and not any(c in p for c in "\r\n\0 ") for p in (method, target, host))
                and all(n and not any(c in n for c in "\r\n\0 :") and n.lower() not in ("host", "content-length")
                        and not any(c in v for c in "\r\n\0") for n, v in headers.items()))
    try:
        raw = http1.encode_request(method, target, host, headers, b"")
    except http1.HeaderError:
        assert not rules_ok
    else:
        assert rules_ok and raw.startswith(f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1"))


def test_a_signed_bitget_request_encodes_and_the_header_values_are_the_signed_ones():
    creds = Credentials("key-1", "secret-1", "pass-1")
    req = rest.build_cancel_symbol(creds, 1_700_000_000_000, "BTCUSDT")
    raw = http1.encode_request(req.method, req.target, "127.0.0.1:9", req.headers, req.body.encode())
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == f"POST {rest.CANCEL_SYMBOL_PATH} HTTP/1.1"
    got = dict(line.split(": ", 1) for line in lines[1:])
    assert {k: got[k] for k in req.headers} == req.headers
    assert int(got["Content-Length"]) == len(body) and body == req.body.encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list = []

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        body = self.rfile.read(n)
        self.seen.append((self.command, self.path, dict(self.headers), body, self.client_address[1]))
        close = self.path.endswith("/close")
        out = b'{"code":"00000","data":' + body + b"}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)
        if close:
            self.close_connection = True

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Handler.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def test_requests_reuse_one_connection_until_the_server_says_close(server):
    conn = http1.Connection(lambda: server.server_address, timeout_s=2.0)
    try:
        for i in range(3):
            conn.send("POST", "/p", {"X-N": str(i)}, b'{"i":%d}' % i)
            status, body = conn.receive()
            assert (status, body) == (200, b'{"code":"00000","data":{"i":%d}}' % i)
        ports = {s[4] for s in _Handler.seen}
        assert len(ports) == 1  # one TCP connection for the three
        assert [s[2]["X-N"] for s in _Handler.seen] == ["0", "1", "2"]
        conn.send("POST", "/close", {}, b"1")
        assert conn.receive() == (200, b'{"code":"00000","data":1}')
        assert conn.sock is None  # closed as asked
        conn.send("GET", "/again", {})
        assert conn.receive()[0] == 200
        assert len({s[4] for s in _Handler.seen}) == 2  # a new connection
    finally:
        conn.close()


def test_no_listener_is_connect_failed_and_nothing_was_sent():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    conn = http1.Connection(lambda: ("127.0.0.1", port), timeout_s=1.0)
    with pytest.raises(http1.ConnectFailed):
        conn.send("POST", "/p", {}, b"")
    bad = http1.Connection(lambda: ("127.0.0.1", int("no port")), timeout_s=1.0)
    with pytest.raises(http1.ConnectFailed):
        bad.send("GET", "/", {})


def _one_shot_server(reply: bytes | None):
    """Accept one connection, read one request, answer ``reply`` (None: say nothing), close."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run():
        c, _ = srv.accept()
        c.recv(65536)
        if reply is not None:
            c.sendall(reply)
            c.close()
        else:
            threading.Event().wait(3.0)
            c.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()


def _keep_alive_server(plan: list[str]):
    """Serve one connection per entry of ``plan``, in turn: read one request, then "answer-close" (answer
    without ``Connection: close``, then close anyway: an idle timeout) or "read-close" (read a second
    request and close without answering). Returns (address, list of requests read)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    seen: list[bytes] = []

    def run():
        for step in plan:
            c, _ = srv.accept()
            seen.append(c.recv(65536))
            if step == "answer-close":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                seen.append(c.recv(65536))
            c.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname(), seen


def test_a_kept_alive_connection_the_server_closed_while_idle_is_replaced_before_the_next_request():
    addr, seen = _keep_alive_server(["answer-close", "answer-close"])
    conn = http1.Connection(lambda: addr, timeout_s=2.0)
    conn.send("POST", "/first", {}, b"1")
    assert conn.receive() == (200, b"ok")
    first = conn.sock
    assert select.select([first], [], [], 2.0)[0]  # the server's close has arrived
    conn.send("POST", "/second", {}, b"2")  # not written into the dead socket: a fresh connection
    assert conn.sock is not first and not conn.reused
    assert conn.receive() == (200, b"ok")
    assert [r.split(b" ")[1] for r in seen] == [b"/first", b"/second"]


def test_a_server_that_closes_without_answering_a_reused_connection_is_stale():
    addr, seen = _keep_alive_server(["read-close"])
    conn = http1.Connection(lambda: addr, timeout_s=2.0)
    conn.send("GET", "/first", {})
    assert conn.receive() == (200, b"ok")
    conn.send("GET", "/second", {})  # open when it leaves; the server reads it and closes
    with pytest.raises(http1.ReceiveFailed) as exc:
        conn.receive()
    assert exc.value.stale and conn.sock is None and len(seen) == 2


def test_no_answer_in_time_is_receive_failed_not_stale():
    addr = _one_shot_server(None)
    conn = http1.Connection(lambda: addr, timeout_s=0.3)
    conn.send("POST", "/slow", {}, b"x")
    with pytest.raises(http1.ReceiveFailed) as exc:
        conn.receive()
    assert not exc.value.stale and str(exc.value) in ("TimeoutError", "timeout")
    assert conn.sock is None


def test_garbage_for_an_answer_is_receive_failed():
    addr = _one_shot_server(b"this is not http\r\n\r\n")
    conn = http1.Connection(lambda: addr, timeout_s=1.0)
    conn.send("GET", "/", {})
    with pytest.raises(http1.ReceiveFailed):
        conn.receive()
