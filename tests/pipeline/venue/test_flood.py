"""The paper venue's REST accept path under a reconnect flood, over real sockets on 127.0.0.1: a crowd
of sockets reconnecting at once (each opened, sent an unsigned request or one byte of one, then
closed and opened again as newer ones come) while the key holder's established keep-alive
connections (the order sender's own ``pipeline.runtime.http1.Connection``) keep sending signed
requests. Every one of the client's requests is answered on the connection it was sent on (none
reset, none refused); every connection the venue accepted is counted (admitted, refused, or closed
at accept), and the flood's that the caps displaced are counted (``evicted``).

The flood is bounded in connects and in time and stops by itself; every wait is bounded
(``WAIT_S``); the venue thread, the flood's thread and every socket are stopped / closed even when
the test fails. No time is asserted: how long answers took is printed, for the benches to judge.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from decimal import Decimal

import orjson
import pytest

from pipeline.runtime import http1
from pipeline.venue.orders import InstrumentRules
from pipeline.venue.rest_api import UNFILLED
from tests.support.venue import VenueStack, paper_credentials
from tests.support.wait import wait_until

WAIT_S = 20.0  # the longest any wait in this file may take (a hang guard, not a limit)
CLIENT_CONNECTIONS = 4  # as the sender's order connections
#: the flood's unsigned requests (answered 400: no key), and a request's first byte (never completed)
UNSIGNED = f"GET {UNFILLED} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


class Flood:
    """``held`` sockets open at once, reconnecting: each new one sends ``UNSIGNED`` or its first byte
    (alternately) and, once ``held`` newer ones are open, is closed; until ``total`` connects were
    made or ``limit_s`` passed, then every socket is closed (it stops by itself)."""

    def __init__(self, port: int, held: int, total: int, limit_s: float) -> None:
        self.port, self.held, self.total, self.limit_s = port, held, total, limit_s
        self.connects = 0
        self.failed = 0  # connects or sends that failed (a full queue, a reset by the venue)
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._stop = threading.Event()
        self._open: collections.deque[socket.socket] = collections.deque()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def start(self) -> Flood:
        self._thread.start()
        return self

    def _run(self) -> None:
        end = time.monotonic() + self.limit_s
        try:
            while self.connects < self.total and time.monotonic() < end and not self._stop.is_set():
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=2.0)
                except OSError:
                    self.failed += 1
                    continue
                self.connects += 1
                self._open.append(s)
                try:
                    s.sendall(UNSIGNED if self.connects % 2 else UNSIGNED[:1])
                except OSError:
                    self.failed += 1
                while len(self._open) > self.held:
                    self._open.popleft().close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            while self._open:
                self._open.popleft().close()
            self.done.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "flood thread still running"


class Venue(VenueStack):
    """A ``VenueStack`` (BTCUSDT only, the real clock) with REST server options ``server_kwargs``."""

    def __init__(self, tmp_path, **server_kwargs) -> None:
        rules = {"BTCUSDT": InstrumentRules("BTCUSDT", Decimal("0.1"), Decimal("0.0001"))}
        super().__init__(paper_credentials(tmp_path / "paper.json"), lambda: time.time_ns() // 1_000_000,
                         rules=rules, name="test-venue-flood", server_kwargs=server_kwargs,
                         api_kwargs={"rate_limit_per_s": 10_000.0})  # connections are tested here, not rates

    def stats(self) -> dict[str, int]:
        return self.rest.stats()

    def headers(self) -> dict[str, str]:
        return self.creds.headers(time.time_ns() // 1_000_000, "GET", UNFILLED, "", "")


@pytest.fixture
def venue(tmp_path):
    v = Venue(tmp_path, max_connections=16, max_untrusted=12, header_timeout_s=30.0, idle_timeout_s=30.0)
    try:
        yield v
    finally:
        v.stop()


def test_a_reconnect_flood_never_resets_or_refuses_the_key_holders_established_connections(venue):
    clients = [http1.Connection(lambda: ("127.0.0.1", venue.rest.port), timeout_s=WAIT_S)
               for _ in range(CLIENT_CONNECTIONS)]
    answers, failures, worst_s = 0, [], 0.0
    flood = None
    try:
        for c in clients:  # established: each has answered a signed request (trusted from then on)
            c.send("GET", UNFILLED, venue.headers())
            assert c.receive()[0] == 200
        flood = Flood(venue.rest.port, held=200, total=3000, limit_s=8.0).start()
        end = time.monotonic() + WAIT_S
        while not flood.done.is_set() and time.monotonic() < end:
            for c in clients:
                t0 = time.perf_counter()
                try:
                    c.send("GET", UNFILLED, venue.headers())
                    reused = c.reused  # written on the established connection, not a new one
                    status, body = c.receive()
                except (http1.ConnectFailed, http1.SendFailed, http1.ReceiveFailed) as exc:
                    failures.append(repr(exc))
                    continue
                worst_s = max(worst_s, time.perf_counter() - t0)
                if not reused or (status, orjson.loads(body)["code"]) != (200, "00000"):
                    failures.append((reused, status, body[:80]))
                answers += 1
                time.sleep(0.01)
        flood.stop()
        assert flood.error is None and flood.done.is_set()
        assert failures == [] and answers >= CLIENT_CONNECTIONS  # every request answered where it was sent
        # every connection the venue accepted is counted: the clients' and each the flood made
        wait_until(lambda: venue.stats()["accepted"] == CLIENT_CONNECTIONS + flood.connects, WAIT_S,
                   what="every connection of the flood accepted")
        wait_until(lambda: venue.stats()["connections"] == CLIENT_CONNECTIONS, WAIT_S,
                   what="the flood's connections gone, the clients' kept")
    finally:
        if flood is not None:
            flood.stop()
        for c in clients:
            c.close()
    st = venue.stats()
    assert st["accepted"] == st["connections_total"] + st["connections_refused"] + st["closed_at_accept"]
    assert st["evicted"] > 0  # the flood pressed on the caps and was displaced, counted
    print(f"{answers} client answers, worst {worst_s * 1e3:.1f} ms; flood: {flood.connects} connects "
          f"({flood.failed} failed); venue: {st['accepted']} accepted, {st['evicted']} evicted, "
          f"{st['connections_refused']} refused, {st['closed_at_accept']} closed at accept, "
          f"{st['accept_passes_full']} full accept passes")


def test_accepts_are_bounded_per_pass_so_an_established_request_is_answered_before_a_queued_flood_is_drained(
        tmp_path, monkeypatch):
    """With the venue's loop held, 50 connections are made and closed by their peers and the
    established client's request arrives; once the loop runs again, the queue is accepted
    ``accepts_per_pass`` at a time (exactly 12 full passes of 4), the closed ones closed at accept
    (counted, no task), and the client's request is answered before the queue is drained."""
    v = Venue(tmp_path, accepts_per_pass=4)
    client = http1.Connection(lambda: ("127.0.0.1", v.rest.port), timeout_s=WAIT_S)
    entered, gate = threading.Event(), threading.Event()
    accepted_at_answers: list[int] = []
    handle = v.api.handle

    def recording_handle(req):
        accepted_at_answers.append(v.rest.stats()["accepted"])
        return handle(req)

    monkeypatch.setattr(v.api, "handle", recording_handle)
    queued: list[socket.socket] = []
    try:
        client.send("GET", UNFILLED, v.headers())
        assert client.receive()[0] == 200 and v.stats()["accepted"] == 1
        v.rest._loop.call_soon_threadsafe(lambda: (entered.set(), gate.wait(WAIT_S)))  # hold the venue's loop
        assert entered.wait(WAIT_S)
        client.send("GET", UNFILLED, v.headers())
        for _ in range(50):  # made (the kernel's handshake) and closed while the loop is held
            s = socket.create_connection(("127.0.0.1", v.rest.port), timeout=WAIT_S)
            queued.append(s)
            s.close()
        gate.set()
        assert client.receive()[0] == 200
        wait_until(lambda: v.stats()["closed_at_accept"] == 50, WAIT_S, what="the queued connections accepted")
    finally:
        gate.set()
        client.close()
        for s in queued:
            s.close()
        v.stop()
    st = v.stats()
    assert st["accepted"] == 51 and st["accept_passes_full"] == 12
    assert st["connections_total"] == 1 and st["connections_refused"] == 0 and st["accept_errors"] == 0
    assert accepted_at_answers[0] == 1 and 1 < accepted_at_answers[1] < 51  # answered with the queue partly accepted


def test_a_fresh_connection_whose_request_has_come_is_not_reset_for_newcomers(tmp_path):
    """A client connects, and its signed request arrives while the venue's loop is held, with six
    newcomers queued behind it over an untrusted pool of 2: the newcomers displace each other, never
    the fresh connection whose first request is on its way in, which is answered."""
    v = Venue(tmp_path, max_connections=4, max_untrusted=2, header_timeout_s=30.0, idle_timeout_s=30.0)
    entered, gate = threading.Event(), threading.Event()
    fresh = socket.create_connection(("127.0.0.1", v.rest.port), timeout=WAIT_S)
    crowd: list[socket.socket] = []
    try:
        wait_until(lambda: v.stats()["connections"] == 1, WAIT_S, what="the fresh connection accepted")
        time.sleep(0.1)  # its task reads it: accepted before its request, nothing was there then
        v.rest._loop.call_soon_threadsafe(lambda: (entered.set(), gate.wait(WAIT_S)))  # hold the venue's loop
        assert entered.wait(WAIT_S)
        fresh.sendall(f"GET {UNFILLED} HTTP/1.1\r\nHost: x\r\n".encode()
                      + "".join(f"{k}: {val}\r\n" for k, val in v.headers().items()).encode() + b"\r\n")
        for _ in range(6):
            crowd.append(socket.create_connection(("127.0.0.1", v.rest.port), timeout=WAIT_S))
        gate.set()
        fresh.settimeout(WAIT_S)
        answer = fresh.recv(65536)
        wait_until(lambda: v.stats()["accepted"] == 7, WAIT_S, what="the newcomers accepted")
    finally:
        gate.set()
        for s in (fresh, *crowd):
            s.close()
        v.stop()
    assert answer.startswith(b"HTTP/1.1 200 ")
    st = v.stats()
    assert st["evicted"] + st["connections_refused"] >= 5  # 7 on a pool of 2: the newcomers displaced
