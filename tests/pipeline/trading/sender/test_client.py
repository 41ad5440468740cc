"""One request's exchange (pipeline/trading/sender/client.py): failures classified and counted."""

from __future__ import annotations

import collections

from pipeline.trading.bitget.rest import Outcome, Request
from pipeline.trading.sender.client import VenueClient
from pipeline.trading.sender.connection import Lost, NotSent

GET = Request("GET", "/api/v2/spot/trade/orderInfo", "", "", {})
POST = Request("POST", "/api/v2/spot/trade/place-order", "", "{}", {})


class Conn:
    """``HttpTransport`` stand-in: ``send`` raises ``send_error``; ``receive`` raises or answers in turn."""

    def __init__(self, send_error=None, answers=()):
        self.send_error = send_error
        self.answers = collections.deque(answers)
        self.sent = 0
        self.closed = False

    def send(self, req):
        self.sent += 1
        if self.send_error is not None:
            raise self.send_error

    answer_started = False

    def receive(self, wait=False):
        a = self.answers.popleft()
        if isinstance(a, Exception):
            raise a
        return a

    def receive_ready(self):
        return self.receive()

    def close(self):
        self.closed = True


def client_of():
    stats, marks, crashes = collections.defaultdict(int), [], []
    return VenueClient(stats, lambda code, ts: marks.append((code, ts)), crashes.append), stats, marks, crashes


def test_a_request_that_never_left_is_retryable_one_that_may_have_is_unknown_and_both_are_counted():
    client, stats, marks, crashes = client_of()
    assert client.send(Conn(NotSent("refused")), POST, "send", sent_mark=3, ts=1).outcome is Outcome.RETRYABLE
    assert client.send(Conn(Lost("reset")), POST, "send", sent_mark=3, ts=1).outcome is Outcome.UNKNOWN
    assert stats["http_err"] == 2 and client.last_http_error == "reset" and not marks and not crashes
    assert client.send(Conn(), POST, "send", sent_mark=3, ts=1) is None and marks == [(3, 1)] and crashes == ["send"]


def test_an_answer_past_its_deadline_is_a_timeout_and_closes_the_connection():
    client, stats, _, _ = client_of()
    conn = Conn()
    assert client.read_answer(conn, POST, 100, 99, False) is None and not conn.closed
    res = client.read_answer(conn, POST, 100, 100, False)
    assert res.outcome is Outcome.UNKNOWN and conn.closed and client.last_http_error == "timeout"


def test_a_get_on_a_stale_keep_alive_is_sent_once_more_a_post_is_not():
    client, stats, _, _ = client_of()
    conn = Conn(answers=[Lost("stale"), (200, b'{"code":"00000","msg":"success","data":[]}')])
    assert client.receive(conn, GET).ok and conn.sent == 1 and stats["http_err"] == 1
    conn = Conn(answers=[Lost("stale")])
    assert client.receive(conn, POST).outcome is Outcome.UNKNOWN and conn.sent == 0


class ReadyConn(Conn):
    """``Conn`` whose ``receive_ready`` answers in turn (None: not whole yet; ``answer_started``: bytes
    of it have come)."""

    def receive_ready(self):
        a = self.answers.popleft()
        self.answer_started = a is None
        if isinstance(a, Exception):
            raise a
        return a


def test_read_answer_never_waits_and_a_partial_answer_is_left_to_its_receive_deadline_not_the_request_one():
    client, stats, marks, _ = client_of()
    conn = ReadyConn(answers=[None, None, (200, b'{"code":"00000","msg":"success","data":{}}')])
    assert client.read_answer(conn, POST, 100, 50, True) is None  # bytes came, not all of them
    assert client.read_answer(conn, POST, 100, 150, False) is None and not conn.closed  # past the request's deadline
    res = client.read_answer(conn, POST, 100, 160, False, ack_mark=9, ts=4)
    assert res.ok and marks == [(9, 4)] and stats["http_err"] == 0


def test_read_answer_resends_a_get_whose_keep_alive_was_stale_and_keeps_it_in_flight():
    client, stats, _, _ = client_of()
    conn = ReadyConn(answers=[Lost("stale")])
    assert client.read_answer(conn, GET, 100, 50, True) is None and conn.sent == 1 and stats["http_err"] == 1
    conn = ReadyConn(answers=[Lost("stale")])
    assert client.read_answer(conn, POST, 100, 50, True).outcome is Outcome.UNKNOWN and conn.sent == 0
