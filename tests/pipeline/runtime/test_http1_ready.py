"""Readiness-driven reading (pipeline/runtime/http1.py ``Connection.receive_ready``) over real
sockets on 127.0.0.1: an answer that arrives in pieces is None until whole, then the answer; it never
waits; the bounds and the failures are ``receive``'s (a cut answer, a stale keep-alive, a body over
its limit), and the connection is closed after each failure."""

from __future__ import annotations

import socket
import time

import pytest

from pipeline.runtime import http1

WAIT_S = 3.0


class Peer:
    """A client ``Connection`` and the server's end of its TCP connection (``server``)."""

    def __init__(self, max_response_bytes: int = 1 << 20) -> None:
        self.lst = socket.create_server(("127.0.0.1", 0))
        self.conn = http1.Connection(lambda: self.lst.getsockname(), WAIT_S, max_response_bytes=max_response_bytes)
        self.server: socket.socket | None = None

    def ask(self, method: str = "GET") -> None:
        """Send a request; the server's end is accepted and the request read (on the first ask)."""
        self.conn.send(method, "/x", {})
        if self.server is None:
            self.lst.settimeout(WAIT_S)
            self.server, _ = self.lst.accept()
            self.server.settimeout(WAIT_S)
        self.server.recv(65536)

    def feed(self, data: bytes):
        """Send ``data`` from the server; ``receive_ready``'s result once it has arrived."""
        self.server.sendall(data)
        deadline = time.monotonic() + WAIT_S
        got = self.conn.receive_ready()
        while got is None and self.conn.first_bytes_s is None and time.monotonic() < deadline:
            time.sleep(0.001)  # the bytes are on their way over the loopback
            got = self.conn.receive_ready()
        return got

    def close(self) -> None:
        self.conn.close()
        if self.server is not None:
            self.server.close()
        self.lst.close()


@pytest.fixture
def peer():
    p = Peer()
    try:
        yield p
    finally:
        p.close()


def test_an_answer_in_pieces_is_none_until_whole_then_the_answer_and_the_connection_is_reused(peer):
    peer.ask()
    assert peer.conn.receive_ready() is None and peer.conn.first_bytes_s is None  # nothing yet: no wait
    assert peer.feed(b"HTTP/1.1 200 OK\r\nContent-Le") is None
    first = peer.conn.first_bytes_s
    assert first is not None
    assert peer.feed(b"ngth: 5\r\n\r\nab") is None and peer.conn.first_bytes_s == first
    time.sleep(0.02)
    assert peer.conn.receive_ready() is None  # nothing more arrived
    server = peer.server
    server.sendall(b"cde")
    got, deadline = None, time.monotonic() + WAIT_S
    while got is None and time.monotonic() < deadline:
        got = peer.conn.receive_ready()
    assert got == (200, b"abcde") and peer.conn.first_bytes_s is None and peer.conn.sock is not None
    peer.ask("POST")  # the same keep-alive connection
    assert peer.conn.reused and peer.server is server
    assert peer.feed(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n") is None
    got = None
    server.sendall(b"0\r\n\r\n")
    while got is None and time.monotonic() < deadline:
        got = peer.conn.receive_ready()
    assert got == (201, b"abc")


def test_an_answer_cut_short_by_the_peer_fails_closed_and_closes_the_connection(peer):
    peer.ask()
    assert peer.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc") is None
    peer.server.close()
    peer.server = None
    with pytest.raises(http1.ReceiveFailed, match="closed") as exc:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            peer.conn.receive_ready()
            time.sleep(0.001)
    assert not exc.value.stale and peer.conn.sock is None


def test_a_reused_keep_alive_the_server_closed_before_a_byte_is_stale(peer):
    peer.ask()
    assert peer.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == (200, b"")
    peer.ask()
    assert peer.conn.reused
    peer.server.close()
    peer.server = None
    with pytest.raises(http1.ReceiveFailed, match="stale") as exc:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            peer.conn.receive_ready()
            time.sleep(0.001)
    assert exc.value.stale and peer.conn.sock is None


def test_a_body_over_its_limit_is_refused_as_receive_refuses_it():
    p = Peer(max_response_bytes=100)
    try:
        p.ask()
        with pytest.raises(http1.ReceiveFailed, match="too large: Content-Length 101"):
            p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n")
        assert p.conn.sock is None
        p.server.close()
        p.server = None
        p.ask()  # a fresh connection; a body that ends with the connection, over the limit
        with pytest.raises(http1.ReceiveFailed, match="too large: body over 100"):
            p.feed(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 200)
    finally:
        p.close()
