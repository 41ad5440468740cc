"""Answers read as they arrive (pipeline/trading/sender/inflight.py over real sockets): one peer that
trickles its answer byte by byte must not hold the answer of another connection, which is handled
while the slow one is still partway in; the slow one is then read whole, within its own deadline.

The local venue here answers each place request on its own thread: the prompt order's at once, the
slow order's head and body a byte every ``TRICKLE_S``, its last byte held until the test has seen the
prompt answer handled (so the order of events is causal, not a race). Every wait is bounded
(``WAIT_S``); the server's threads and sockets are closed even when a test fails.
"""

from __future__ import annotations

import socket
import threading
import time

import orjson
import pytest

from pipeline.trading.bitget.rest import Outcome
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import OrderCmd, client_oid
from pipeline.trading.sender.client import VenueClient
from pipeline.trading.sender.connection import HttpTransport
from pipeline.trading.sender.inflight import InFlightRequests
from tests.support.sender import INSTRUMENTS, intent, order

WAIT_S = 15.0  # the longest the test waits for anything (a bound against hangs, not a limit)
TRICKLE_S = 0.02
SLOW, PROMPT = 1, 2  # order ids


class TrickleVenue:
    """Answers place-order requests on 127.0.0.1: ``SLOW``'s a byte at a time (the last one held
    until ``release``), every other order's at once. ``slow_sent``: bytes of the slow answer sent."""

    def __init__(self) -> None:
        self.lst = socket.create_server(("127.0.0.1", 0))
        self.lst.settimeout(0.2)
        self.port = self.lst.getsockname()[1]
        self.release = threading.Event()
        self.stop = threading.Event()
        self.slow_sent = 0
        self.slow_total = 0
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.socks: list[socket.socket] = []

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                c, _ = self.lst.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.socks.append(c)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, c: socket.socket) -> None:
        c.settimeout(WAIT_S)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                data += c.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += c.recv(65536)
            coid = orjson.loads(body)["clientOid"]
            doc = orjson.dumps({"code": "00000", "msg": "success", "requestTime": 1,
                                "data": {"orderId": coid[-4:], "clientOid": coid}})
            answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
                len(doc), doc)
            if coid != client_oid(SLOW):
                c.sendall(answer)
                return
            self.slow_total = len(answer)
            for i in range(len(answer) - 1):
                c.sendall(answer[i:i + 1])
                self.slow_sent = i + 1
                if self.stop.wait(TRICKLE_S):
                    return
            if self.release.wait(WAIT_S):
                c.sendall(answer[-1:])
                self.slow_sent = len(answer)
        except OSError:
            pass  # the client closed the connection on it

    def start(self) -> TrickleVenue:
        self.threads[0].start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.release.set()
        for t in list(self.threads):
            t.join(WAIT_S)
        self.lst.close()
        for s in self.socks:
            s.close()
        assert not any(t.is_alive() for t in self.threads), "venue thread still running"


@pytest.fixture
def venue():
    v = TrickleVenue().start()
    try:
        yield v
    finally:
        v.close()


def test_a_prompt_answer_is_handled_while_another_connection_trickles_its_answer(ledger, venue):
    stats = {"sent": 0, "http_err": 0}
    pool = [HttpTransport(lambda: ("127.0.0.1", venue.port), WAIT_S, receive_deadline_s=WAIT_S) for _ in range(2)]
    client = VenueClient(stats, lambda code, ts: None, lambda point: None)
    r = InFlightRequests(pool, client, ledger, Credentials("k", "s", "p"), INSTRUMENTS, lambda: int(time.time() * 1000),
                         int(WAIT_S * 1e9), stats, lambda point: None)
    events: list[tuple[int, Outcome, int]] = []  # (order id, outcome, slow answer's bytes sent by then)
    r.on_answer = lambda item, res, now: events.append((item.order.order_id, res.outcome, venue.slow_sent))
    for oid in (SLOW, PROMPT):
        ledger.record(intent(oid))
    limit = time.monotonic() + WAIT_S
    partway = 0  # passes that left the slow answer partway in (read in pieces, not waited for)
    try:
        r.start(order(OrderCmd.NEW, SLOW), time.monotonic_ns())
        while venue.slow_sent == 0:  # the slow answer has begun before the prompt request leaves
            assert not events and time.monotonic() < limit, "the slow answer never began"
            time.sleep(0.005)
        r.start(order(OrderCmd.NEW, PROMPT), time.monotonic_ns())
        while len(events) < 2:
            assert time.monotonic() < limit, f"answers handled: {events}"
            r.read_answers(time.monotonic_ns())
            partway += pool[0].answer_started
            if events and events[-1][0] == PROMPT and not venue.release.is_set():
                # the prompt answer was handled with the slow one partway in: now let it finish
                assert pool[0].answer_started and venue.slow_sent < venue.slow_total
                venue.release.set()
            time.sleep(0.001)
    finally:
        for conn in pool:
            conn.close()
    assert [(oid, outcome) for oid, outcome, _ in events] == [(PROMPT, Outcome.OK), (SLOW, Outcome.OK)]
    prompt_at, slow_at = events[0][2], events[1][2]
    assert 0 < prompt_at < venue.slow_total == slow_at  # the slow answer had begun, not ended, at the prompt one
    assert stats["http_err"] == 0 and not r.inflight and sorted(r.free) == [0, 1]
    assert partway > 1  # read as it trickled in, pass after pass
