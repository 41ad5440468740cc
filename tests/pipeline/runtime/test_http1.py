"""pipeline.runtime.http1: the request bytes are pinned; the connection works against a real server on
127.0.0.1 (keep-alive, Connection: close, a server that closes a kept-alive connection, timeouts); an
answer is bounded in time and size against venues that misbehave on purpose (trickle, oversize, cut
short, garbage), and fuzzed answers (truncated, mutated) give a result or ReceiveFailed, nothing else."""

from __future__ import annotations

import http.server
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.runtime import http1
from pipeline.trading.bitget import rest
from pipeline.trading.bitget.signing import Credentials


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
    assert not exc.value.stale and str(exc.value) == "deadline"
    assert conn.sock is None


def test_garbage_for_an_answer_is_receive_failed():
    addr = _one_shot_server(b"this is not http\r\n\r\n")
    conn = http1.Connection(lambda: addr, timeout_s=1.0)
    conn.send("GET", "/", {})
    with pytest.raises(http1.ReceiveFailed):
        conn.receive()


# ------------------------------------------------------------------ bounds: venues that misbehave on purpose

class _Venue:
    """A venue on 127.0.0.1 that accepts one connection, reads one request, then runs ``script(sock,
    venue)`` (which writes what it likes; ``venue.stop`` is set when the test is done with it), then
    closes. A context manager: on exit the script is told to stop, the thread joined and every socket
    closed. ``tls``: a server ``ssl.SSLContext`` to wrap the accepted socket in."""

    def __init__(self, script, tls: ssl.SSLContext | None = None):
        self.script, self.tls = script, tls
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(1)
        self.lst.settimeout(3.0)
        self.address = self.lst.getsockname()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            c, _ = self.lst.accept()
            if self.tls is not None:
                c = self.tls.wrap_socket(c, server_side=True)
        except OSError:
            return
        with c:
            c.settimeout(3.0)
            try:
                c.recv(65536)
                self.script(c, self)
            except OSError:
                pass  # the client closed the connection on it: what a bounded client does

    def trickle(self, c: socket.socket, byte: bytes = b"x", every_s: float = 0.1) -> None:
        """Send ``byte`` every ``every_s`` until told to stop."""
        while not self.stop.wait(every_s):
            c.sendall(byte)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(3.0)
        self.lst.close()
        assert not self.thread.is_alive()


def _fails(venue: _Venue, *, timeout_s: float = 1.0, max_response_bytes: int = 1 << 20,
           tls: ssl.SSLContext | None = None) -> tuple[str, float]:
    """Ask ``venue``; the answer must be ReceiveFailed (not stale) and the connection closed. Returns
    (its message, seconds receive took)."""
    conn = http1.Connection(lambda: venue.address, timeout_s, tls, max_response_bytes=max_response_bytes)
    try:
        conn.send("GET", "/x", {})
        t0 = time.monotonic()
        with pytest.raises(http1.ReceiveFailed) as exc:
            conn.receive()
        took_s = time.monotonic() - t0
        assert not exc.value.stale and conn.sock is None
        return str(exc.value), took_s
    finally:
        conn.close()


def _trickle(head: bytes):
    def script(c, v):
        c.sendall(head)
        v.trickle(c)
    return script


def _rest_late(piece: bytes, at_s: float, rest: bytes, rest_at_s: float):
    def script(c, v):
        v.stop.wait(at_s)
        c.sendall(piece)
        v.stop.wait(rest_at_s - at_s)
        c.sendall(rest)
        v.stop.wait(3.0)
    return script


@pytest.mark.timeout(10)
@pytest.mark.parametrize("script,timeout_s", [
    (_trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"), 0.6),
    (_trickle(b"HTTP/1.1 200 OK\r\nX-Slow: "), 0.6),
    (_rest_late(b"HTTP/1.1 200 OK\r\n", 1.5, b"Content-Length: 5\r\n\r\nhello", 3.2), 2.0),
], ids=["trickled-body", "trickled-head", "the-rest-after-the-deadline"])
def test_a_venue_that_trickles_is_cut_off_at_the_deadline_in_total_not_per_read(script, timeout_s):
    """A byte every 100 ms never lets a single read wait long: only a deadline on the whole answer ends
    the wait (it would take 100 s to trickle this body: the test's timeout). A piece at 1.5 s and the
    rest at 3.2 s: the wait after the piece ends at the deadline (2.0 s); a timeout per read (the piece's
    read, then up to 2.0 s more) would have read the whole answer. Never before the deadline."""
    with _Venue(script) as venue:
        why, took_s = _fails(venue, timeout_s=timeout_s)
    assert why == "deadline" and took_s >= timeout_s - 0.05


@pytest.mark.timeout(5)
def test_an_answer_in_slow_pieces_within_the_deadline_is_read_and_the_connection_kept():
    """Several reads for one answer: it is complete, the connection stays open with its socket timeout
    back at timeout_s (what its sends are bounded by), and carries the next request."""
    def script(c, v):
        for _ in range(2):
            for part in (b"HTTP/1.1 200 OK\r\n", b"Content-Length: 5\r\n", b"\r\nhe", b"llo"):
                c.sendall(part)
                v.stop.wait(0.03)
            c.recv(65536)

    with _Venue(script) as venue:
        conn = http1.Connection(lambda: venue.address, timeout_s=1.0)
        try:
            conn.send("GET", "/1", {})
            assert conn.receive() == (200, b"hello")
            assert conn.sock is not None and conn.sock.gettimeout() == 1.0
            conn.send("GET", "/2", {})
            assert conn.reused and conn.receive() == (200, b"hello")
        finally:
            conn.close()


@pytest.mark.timeout(5)
@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: 314572800\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n12c00000\r\n"],
                         ids=["content-length", "chunk-size"])
def test_a_length_over_the_limit_is_refused_before_the_body_is_read(head):
    """300 MiB announced and then nothing: the client must not wait for (or read) the body to refuse it."""
    def script(c, v):
        c.sendall(head)
        v.stop.wait(3.0)

    with _Venue(script) as venue:
        why, _ = _fails(venue, timeout_s=2.0, max_response_bytes=64 * 1024)
    assert why.startswith("too large")  # a client waiting for the body would end at the deadline instead


def _stream(head: bytes, piece: bytes):
    def script(c, v):
        c.sendall(head)
        while not v.stop.is_set():
            c.sendall(piece)
    return script


@pytest.mark.timeout(5)
@pytest.mark.parametrize("script,what", [
    (_stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1000\r\n" + b"x" * 4096 + b"\r\n"), "chunked"),
    (_stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1;ext=" + b"e" * 4000 + b"\r\nx\r\n"),
     "chunked"),
    (_stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", b"X-Trailer: " + b"t" * 4000 + b"\r\n"),
     "chunked"),
    (_stream(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"x" * 4096), "body"),
    (_stream(b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"p" * 4000 + b"\r\n"), "head"),
    (_stream(b"HTTP/1.1 200 OK\r\nX-Pad: ", b"p" * 4096), "head"),
    (_stream(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 100), "head"),
], ids=["chunks", "chunk-extensions", "trailers", "read-to-close", "header-lines", "one-header", "interim-answers"])
def test_an_endless_answer_is_too_large_once_past_its_limit(script, what):
    """Bytes without end: refused as soon as the head passes MAX_HEAD_BYTES or the body (framing
    included) max_response_bytes, long before the deadline."""
    with _Venue(script) as venue:
        why, _ = _fails(venue, timeout_s=3.0, max_response_bytes=64 * 1024)
    assert why.startswith("too large") and what in why  # not "deadline": refused before it


@pytest.mark.timeout(5)
@pytest.mark.parametrize("reply", [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 50,
                                   b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + b"x" * 50,
                                   b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
                                   b"HTTP/1.1 200 OK\r\nContent-Le", b""],
                         ids=["content-length", "in-a-chunk", "before-the-last-chunk", "in-the-head", "nothing"])
def test_an_answer_cut_short_by_the_close_is_receive_failed_at_once(reply):
    with _Venue(lambda c, v: c.sendall(reply)) as venue:
        why, _ = _fails(venue, timeout_s=2.0)
    assert why == "closed"  # not "deadline": failed when the close came


@pytest.mark.timeout(5)
def test_a_reused_connection_closed_mid_answer_is_not_stale():
    """Stale means closed before a byte of the answer (the request most likely unseen); half an answer
    means the venue saw it."""
    def script(c, v):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")

    with _Venue(script) as venue:
        conn = http1.Connection(lambda: venue.address, timeout_s=1.0)
        try:
            conn.send("GET", "/1", {})
            assert conn.receive() == (200, b"ok")
            conn.send("GET", "/2", {})
            with pytest.raises(http1.ReceiveFailed) as exc:
                conn.receive()
            assert str(exc.value) == "closed" and not exc.value.stale and conn.reused
        finally:
            conn.close()


class _Pieces:
    """A client socket whose reads return at most the next of ``sizes`` bytes (in turn, round and round):
    an answer arrives in those pieces, whatever the kernel has buffered."""

    def __init__(self, sock: socket.socket, sizes: list[int]):
        self.sock, self.sizes, self.n = sock, sizes, 0

    def recv(self, want_bytes: int) -> bytes:
        self.n += 1
        return self.sock.recv(min(want_bytes, self.sizes[self.n % len(self.sizes)]))

    def __getattr__(self, name):
        return getattr(self.sock, name)


def _answer_from(data: bytes, *, method: str = "GET", max_response_bytes: int = 1 << 20,
                 pieces: list[int] | None = None):
    """Send ``data`` and then the end of the connection, as the answer to a ``method`` request, on a real
    TCP connection on 127.0.0.1 (no thread: ``data`` fits in the socket buffers); ``pieces``: the client
    reads it in pieces of these sizes (``_Pieces``). Returns ((status, body) or the ReceiveFailed,
    whether the client closed its connection)."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        conn = http1.Connection(lambda: lst.getsockname(), timeout_s=1.0, max_response_bytes=max_response_bytes)
        conn.send(method, "/fuzz", {})  # a fresh connection: not reused
        srv, _ = lst.accept()
    with srv:
        srv.recv(65536)
        srv.sendall(data)
        srv.shutdown(socket.SHUT_WR)
        if pieces:
            conn.sock = _Pieces(conn.sock, pieces)
        try:
            out = conn.receive()
        except http1.ReceiveFailed as exc:
            out = exc
        closed = conn.sock is None
        conn.close()
    return out, closed


@pytest.mark.parametrize("data,method,expected,closed", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n",
     "GET", (200, b"abcde"), False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "GET", (200, b"abc"), False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
     "GET", (200, b"abc"), True),
    (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nuntil the end", "GET", (200, b"until the end"), True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzzz", "GET", (200, b"zzz"), True),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "GET", (200, b"ok"), True),
    (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok", "GET", (200, b"ok"), False),
    (b"HTTP/1.1 200 OK\r\nconnection: Upgrade, Close\r\ncontent-length: 2\r\n\r\nok", "GET", (200, b"ok"), True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", "GET", (200, b"ok"), False),
    (b"HTTP/1.1 200 OK\r\nContent-Length : 2 \r\nX-Folded: a\r\n content-length: 99\r\n\r\nok", "GET",
     (200, b"ok"), False),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", "POST", (201, b"ok"), False),
    (b"HTTP/1.1 204 No Content\r\n\r\n", "POST", (204, b""), False),
    (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "GET", (304, b""), False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", (200, b""), False),
    (b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", "GET", (200, b"ok"), False),
    (b"HTTP/1.1 429 Too Many Requests\nContent-Length: 2\n\nok", "GET", (429, b"ok"), False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", "GET", (200, b"ok"), True),
], ids=["chunked", "gzip-chunked", "chunked-and-length", "read-to-close", "unknown-coding", "http1.0",
        "http1.0-keep-alive", "connection-close", "repeated-length", "blank-before-colon-and-folded-line",
        "100-continue", "204", "304", "head", "no-reason", "bare-lf", "extra-bytes"])
def test_each_framing_gives_the_body_and_says_whether_the_connection_closes(data, method, expected, closed):
    assert _answer_from(data, method=method) == (expected, closed)


@pytest.mark.parametrize("data", [
    b"this is not http\r\n\r\n",
    b"\x00\xff\xfe" * 50 + b"\n\n",
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/2 200\r\n\r\n",
    b"ICY 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
])
def test_garbage_and_bad_framing_are_receive_failed(data):
    out, closed = _answer_from(data)
    assert isinstance(out, http1.ReceiveFailed) and closed
    assert str(out).startswith(("malformed", "too large", "closed"))


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
def test_a_body_exactly_at_the_limit_is_read_and_one_byte_over_is_too_large(framing):
    body = bytes(range(256)) * 4
    if framing == "length":
        head, wire = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body), body
    elif framing == "chunked":
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        wire = b"200\r\n" + body[:512] + b"\r\n200\r\n" + body[512:] + b"\r\n0\r\n\r\n"
    else:
        head, wire = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", body
    assert _answer_from(head + wire, max_response_bytes=len(wire)) == ((200, body), framing == "close")
    out, closed = _answer_from(head + wire, max_response_bytes=len(wire) - 1)
    assert isinstance(out, http1.ReceiveFailed) and str(out).startswith("too large") and closed


def test_a_head_exactly_at_its_limit_is_read_and_one_byte_over_is_too_large():
    start, end = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: ", b"\r\n\r\n"
    pad = b"p" * (http1.MAX_HEAD_BYTES - len(start) - len(end))
    assert _answer_from(start + pad + end + b"ok") == ((200, b"ok"), False)
    out, closed = _answer_from(start + pad + b"p" + end + b"ok")
    assert isinstance(out, http1.ReceiveFailed) and str(out).startswith("too large: head") and closed


# ------------------------------------------------------------------ fuzz: truncations and mutations

@st.composite
def _answers(draw):
    """(the bytes of a valid answer, its head's length, status, body, framing)."""
    body = draw(st.binary(max_size=200))
    status = draw(st.sampled_from([200, 201, 400, 404, 429, 500, 503]))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    head = b"HTTP/1.1 %d Whatever\r\nContent-Type: application/json\r\n" % status
    if framing == "length":
        head += b"Content-Length: %d\r\n\r\n" % len(body)
        wire = body
    elif framing == "chunked":
        head += b"Transfer-Encoding: chunked\r\n\r\n"
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if b > a]
        wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    else:
        head += b"Connection: close\r\n\r\n"
        wire = body
    return head + wire, len(head), status, body, framing


_PIECES = st.lists(st.integers(1, 16), max_size=4)  # [] = as the kernel has it (mostly one read)


@pytest.mark.timeout(30)
@settings(max_examples=200, deadline=None)
@given(answer=_answers(), pieces=_PIECES, data=st.data())
def test_fuzz_a_truncated_answer_is_receive_failed_unless_its_end_is_the_close(answer, pieces, data):
    raw, head_len, status, body, framing = answer
    cut = data.draw(st.integers(0, len(raw)))
    out, closed = _answer_from(raw[:cut], pieces=pieces)
    if cut == len(raw):
        assert out == (status, body) and closed == (framing == "close")
    elif framing == "close" and cut >= head_len:
        assert out == (status, body[:cut - head_len]) and closed
    else:
        assert isinstance(out, http1.ReceiveFailed) and closed


_MAX_FUZZ_BYTES = 256


def _valid_or_failed(out, closed) -> None:
    if isinstance(out, http1.ReceiveFailed):
        assert closed and not out.stale
    else:
        status, body = out
        assert type(status) is int and 100 <= status <= 999
        assert type(body) is bytes and len(body) <= _MAX_FUZZ_BYTES


@pytest.mark.timeout(30)
@settings(max_examples=250, deadline=None)
@given(answer=_answers(), edits=st.lists(st.tuples(st.sampled_from(["flip", "delete", "insert", "repeat"]),
                                                   st.integers(0, 10_000), st.binary(min_size=1, max_size=8)),
                                         min_size=1, max_size=4), pieces=_PIECES)
def test_fuzz_a_mutated_answer_is_a_result_or_receive_failed_and_nothing_else(answer, edits, pieces):
    raw = bytearray(answer[0])
    for op, at, junk in edits:
        at %= len(raw) + 1
        if op == "flip" and at < len(raw):
            raw[at] = junk[0]
        elif op == "delete":
            del raw[at:at + len(junk)]
        elif op == "insert":
            raw[at:at] = junk
        else:
            raw[at:at] = raw[at:at + len(junk)] * 3
    _valid_or_failed(*_answer_from(bytes(raw), max_response_bytes=_MAX_FUZZ_BYTES, pieces=pieces))


_TOKENS = [b"\r\n", b"\n", b"\r", b":", b";", b",", b" ", b"0", b"1", b"f", b"-", b"x", b"\x00", b"\xff", b"HTTP/1.1 ",
           b"HTTP/1.0 200 ", b"100 ", b"204", b"Content-Length: ", b"Transfer-Encoding: chunked", b"Connection: close"]


@pytest.mark.timeout(30)
@settings(max_examples=200, deadline=None)
@given(prefix=st.sampled_from([b"", b"HTTP/1.1 ", b"HTTP/1.1 200 OK\r\n",
                               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]),
       junk=st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(_TOKENS), max_size=40).map(b"".join)),
       pieces=_PIECES)
def test_fuzz_garbage_is_a_result_or_receive_failed_and_nothing_else(prefix, junk, pieces):
    _valid_or_failed(*_answer_from(prefix + junk, max_response_bytes=_MAX_FUZZ_BYTES, pieces=pieces))


# ------------------------------------------------------------------ the same bounds over TLS

@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    """(server context, client context) for a throwaway certificate for 127.0.0.1 (openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line tool is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "c.crt", d / "c.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=30)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


@pytest.mark.timeout(5)
def test_over_tls_an_answer_in_pieces_is_read_and_a_trickle_is_cut_off_at_the_deadline(tls_pair):
    server, client = tls_pair

    def script(c, v):
        for part in (b"HTTP/1.1 200 OK\r\nContent-", b"Length: 5\r\n\r\nhe", b"llo"):
            c.sendall(part)
            v.stop.wait(0.03)
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        v.trickle(c)

    with _Venue(script, tls=server) as venue:
        conn = http1.Connection(lambda: venue.address, 0.5, client)
        try:
            conn.send("GET", "/1", {})
            assert conn.receive() == (200, b"hello") and conn.sock.gettimeout() == 0.5
            conn.send("GET", "/2", {})
            t0 = time.monotonic()
            with pytest.raises(http1.ReceiveFailed) as exc:
                conn.receive()
            # a timeout per read would trickle on (1,000 bytes at 10 a second): the test's timeout
            assert str(exc.value) == "deadline" and time.monotonic() - t0 >= 0.45 and conn.sock is None
        finally:
            conn.close()
