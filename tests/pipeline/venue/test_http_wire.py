"""``pipeline.venue.http_wire``: the REST server's HTTP/1.1 request parser, fed by hand (sans-I/O)."""

from __future__ import annotations

import pytest

from pipeline.venue.http_wire import HttpError, HttpParser, http_response


def test_the_parser_takes_requests_byte_by_byte_and_stays_failed_after_an_error():
    p = HttpParser()
    raw = b"POST /p?a=1 HTTP/1.1\r\nContent-Length: 2\r\nX-A: 1\r\n\r\n{}GET /q HTTP/1.0\r\n\r\n"
    got = []
    for i in range(len(raw)):
        got += p.feed(raw[i:i + 1])
    assert [(r.method, r.path, r.query, r.body, r.keep_alive) for r in got] == [
        ("POST", "/p", "a=1", b"{}", True), ("GET", "/q", "", b"", False)]
    assert got[0].headers == {"content-length": "2", "x-a": "1"} and p.idle
    with pytest.raises(HttpError) as e:
        p.feed(b"BAD\r\n\r\n")
    assert e.value.status == 400 and p.failed is e.value
    with pytest.raises(HttpError):
        p.feed(b"GET / HTTP/1.1\r\n\r\n")


def test_the_parser_fails_at_the_bare_lf_byte_and_not_on_a_crlf_split_across_feeds():
    p = HttpParser()
    for b in b"GET /x HTTP/1.1\r":
        assert p.feed(bytes([b])) == []
    assert p.feed(b"\n") == [] and p.feed(b"Host: x\r") == [] and p.feed(b"\n\r") == []
    assert [r.path for r in p.feed(b"\n")] == ["/x"] and p.idle
    assert p.feed(b"GET /y HTTP/1.1\r\nA: 1") == []
    with pytest.raises(HttpError) as e:
        p.feed(b"\n")
    assert e.value.status == 400 and "bare LF" in e.value.msg and p.failed is e.value
    p = HttpParser()
    with pytest.raises(HttpError, match="bare CR"):
        p.feed(b"GET /y HTTP/1.1\r\rA")
    # a body may hold any bytes
    p = HttpParser()
    assert [r.body for r in p.feed(b"POST /z HTTP/1.1\r\nContent-Length: 3\r\n\r\n\n\r\n")] == [b"\n\r\n"]


def test_the_parser_fails_at_end_of_file_only_inside_a_request():
    p = HttpParser()
    p.feed_eof()  # nothing buffered: a clean end
    p.feed(b"POST /z HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")
    assert p.awaiting_body
    with pytest.raises(HttpError, match="Content-Length") as e:
        p.feed_eof()
    assert e.value.status == 400 and p.failed is e.value
    p = HttpParser()
    p.feed(b"GET /z HT")
    with pytest.raises(HttpError, match="head cut short"):
        p.feed_eof()


def test_a_response_carries_its_reason_length_and_connection_header():
    raw = http_response(404, b'{"a":1}', keep_alive=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [b"HTTP/1.1 404 Not Found", b"Content-Type: application/json",
                                   b"Content-Length: 7", b"Connection: close"]
    assert body == b'{"a":1}'
    assert http_response(599, b"", keep_alive=True).startswith(b"HTTP/1.1 599 Error\r\n")
    assert b"Connection: keep-alive\r\n" in http_response(200, b"", keep_alive=True)
