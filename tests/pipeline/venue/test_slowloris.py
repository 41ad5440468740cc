"""The paper venue's REST server against slow and malformed peers (slowloris), over real sockets on
127.0.0.1: a crowd of connections that dribble a header byte at a time must never make a
well-behaved client (the order sender's own ``pipeline.runtime.http1.Connection``, a complete request at
once) go unanswered or be refused; a head or body that never completes is answered 408 at its deadline
(not before it); a body cut short by end of file, and a bare LF / bare CR line ending, are answered 400
(not the 408 of a deadline); an
idle connection is closed at its idle timeout; a peer that does not read its answers is reset.

Every test uses small deadlines passed to ``RestServer`` and bounds each wait (``WAIT_S``); the
venue thread, the slow clients' thread and every socket are stopped / closed even when a test fails.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from decimal import Decimal

import orjson
import pytest

from pipeline.runtime import http1
from pipeline.venue.orders import InstrumentRules
from pipeline.venue.rest import RestServer
from pipeline.venue.rest_api import PLACE, UNFILLED
from tests.support.venue import VenueStack, paper_credentials
from tests.support.wait import wait_until

WAIT_S = 3.0  # the longest any single wait in this file may take
D = Decimal


class Venue(VenueStack):
    """A ``VenueStack`` (BTCUSDT only, the real clock) with REST server options ``server_kwargs``;
    ``raw_get`` builds a signed request for the real clock."""

    def __init__(self, tmp_path, **server_kwargs) -> None:
        rules = {"BTCUSDT": InstrumentRules("BTCUSDT", D("0.1"), D("0.0001"))}
        super().__init__(paper_credentials(tmp_path / "paper.json"), lambda: time.time_ns() // 1_000_000,
                         rules=rules, name="test-venue-slowloris", server_kwargs=server_kwargs,
                         api_kwargs={"rate_limit_per_s": 10_000.0})  # connections are tested here, not rates
        self.sockets: list[socket.socket] = []

    @property
    def port(self) -> int:
        return self.rest.port

    def stats(self) -> dict[str, int]:
        return self.rest.stats()

    def headers(self, method: str = "GET", path: str = UNFILLED, body: str = "") -> dict[str, str]:
        return self.creds.headers(time.time_ns() // 1_000_000, method, path, "", body)

    def raw_get(self, path: str = UNFILLED) -> bytes:
        """A complete signed GET request, as bytes (CRLF line endings)."""
        return (f"GET {path} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in self.headers().items())
                + "\r\n").encode()

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S)
        self.sockets.append(s)
        return s

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        self.stop()


@pytest.fixture
def make_venue(tmp_path):
    made: list[Venue] = []

    def make(**server_kwargs) -> Venue:
        v = Venue(tmp_path, **server_kwargs)
        made.append(v)
        return v

    try:
        yield make
    finally:
        for v in made:
            v.close()


def read_until_closed(s: socket.socket, limit_s: float = WAIT_S) -> tuple[bytes, float]:
    """Everything the server sends until it closes (EOF or reset), and the seconds that took; fails
    the test when the connection is still open after ``limit_s``."""
    t0 = time.monotonic()
    out = b""
    while True:
        left = t0 + limit_s - time.monotonic()
        if left <= 0:
            pytest.fail(f"the server kept the connection open for {limit_s} s (got {out[:80]!r})")
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return out, time.monotonic() - t0
        except TimeoutError:
            continue
        if not chunk:
            return out, time.monotonic() - t0
        out += chunk


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:80]
    return int(answer[9:12])


def dribble_until_answered(s: socket.socket, byte: bytes, every_s: float, limit_s: float = WAIT_S) -> float:
    """Send ``byte`` every ``every_s`` until the server answers or closes; the seconds that took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if select.select([s], [], [], every_s)[0]:
            return time.monotonic() - t0
        try:
            s.send(byte)
        except OSError:
            return time.monotonic() - t0
    pytest.fail(f"no answer and no close within {limit_s} s")


# -- 1: a crowd of slow connections vs a well-behaved client -------------------------------------


class SlowCrowd:
    """``n`` connections that each send one byte of a never-ending head every ``every_s``, reopened
    (as a slowloris does) when the server closes or resets them. Runs in a thread until ``stop``."""

    HEAD = b"GET " + UNFILLED.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000

    def __init__(self, port: int, n: int, every_s: float) -> None:
        self.port, self.n, self.every_s = port, n, every_s
        self.reopened = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._socks: list[list] = []  # [socket, bytes sent]
        self._thread = threading.Thread(target=self._run, name="slowloris", daemon=True)

    def _open(self) -> list:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S)
        s.setblocking(False)
        return [s, 0]

    def start(self) -> None:
        for _ in range(self.n):
            self._socks.append(self._open())
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for slot in self._socks:
                    if self._stop.wait(self.every_s / self.n):
                        return
                    s, sent = slot
                    try:
                        if select.select([s], [], [], 0)[0] and not s.recv(65536):
                            raise ConnectionResetError  # closed (an answer, or EOF): reopen
                        s.send(self.HEAD[sent:sent + 1])
                        slot[1] = sent + 1
                    except OSError:
                        s.close()
                        slot[:] = self._open()
                        self.reopened += 1
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        for s, _ in self._socks:
            s.close()
        assert not self._thread.is_alive(), "slow crowd thread still running"


def test_a_slowloris_over_the_connection_cap_never_refuses_or_drops_a_well_behaved_client(make_venue):
    """Every request of the client's kept-alive and fresh connections answered 200 while the crowd
    presses on the cap (how long an answer took is printed: a time, for the benches to judge)."""
    venue = make_venue(max_connections=64, header_timeout_s=1.0, body_timeout_s=1.0, idle_timeout_s=15.0)
    keep_alive = http1.Connection(lambda: ("127.0.0.1", venue.port), timeout_s=WAIT_S)
    keep_alive.send("GET", UNFILLED, venue.headers())
    assert keep_alive.receive()[0] == 200
    crowd = SlowCrowd(venue.port, n=64 + 10, every_s=0.5)
    crowd.start()
    try:
        time.sleep(0.3)  # the crowd holds every slot (74 connections on a cap of 64)
        assert venue.stats()["evicted"] >= 10
        worst_s, answers, t_end = 0.0, 0, time.monotonic() + 2.5  # spans two header deadlines
        while time.monotonic() < t_end or answers < 20:
            fresh = http1.Connection(lambda: ("127.0.0.1", venue.port), timeout_s=WAIT_S)
            try:
                for conn in (keep_alive, fresh):  # the sender's reused connection, and a new one
                    t0 = time.perf_counter()
                    conn.send("GET", UNFILLED, venue.headers())
                    assert conn is fresh or conn.reused  # the keep-alive connection was never dropped
                    status, body = conn.receive()
                    worst_s = max(worst_s, time.perf_counter() - t0)
                    assert (status, orjson.loads(body)["code"]) == (200, "00000")
                    answers += 1
            finally:
                fresh.close()
            time.sleep(0.05)
        assert crowd.error is None
    finally:
        crowd.stop()
        keep_alive.close()
    st = venue.stats()
    assert st["connections_refused"] == 0
    assert st["evicted"] > 10 and crowd.reopened > 0  # the crowd kept pressing on the cap throughout
    print(f"worst answer {worst_s * 1e3:.1f} ms over {answers} requests; {st['evicted']} evicted, "
          f"{st['slow_closed']} cut at the header deadline")


def test_at_the_cap_a_new_connection_evicts_the_oldest_suspect_not_a_proven_idle_one(make_venue):
    venue = make_venue(max_connections=3, header_timeout_s=30.0, idle_timeout_s=30.0)
    proven = venue.connect()
    proven.sendall(venue.raw_get())
    assert status_of(proven.recv(65536)) == 200
    slow_a = venue.connect()
    slow_a.sendall(b"GET / HTTP/1.1\r\n")
    time.sleep(0.05)
    slow_b = venue.connect()  # connected, nothing sent: suspect too (never completed a request)
    time.sleep(0.05)
    newcomer = venue.connect()  # over the cap: slow_a (the oldest suspect) goes
    assert read_until_closed(slow_a, 1.0)[0] == b""
    newcomer.sendall(venue.raw_get())
    assert status_of(newcomer.recv(65536)) == 200
    last = venue.connect()  # over the cap again: slow_b goes, not the proven idle connections
    assert read_until_closed(slow_b, 1.0)[0] == b""
    assert not select.select([proven, newcomer], [], [], 0.1)[0]  # both still open, nothing sent
    proven.sendall(venue.raw_get())
    assert status_of(proven.recv(65536)) == 200
    assert venue.stats()["evicted"] == 2 and venue.stats()["connections_refused"] == 0
    # with no suspect left, the proven connection idle the longest goes
    last.sendall(venue.raw_get())
    assert status_of(last.recv(65536)) == 200
    venue.connect()
    assert read_until_closed(newcomer, 1.0)[0] == b""
    assert venue.stats()["evicted"] == 3


def test_a_new_connection_is_refused_503_only_when_every_connection_is_processing_a_request(make_venue):
    venue = make_venue(max_connections=1, latency_ms=800.0)
    busy = venue.connect()
    body = '{"symbol":"BTCUSDT"}'
    h = venue.headers("POST", PLACE, body)
    busy.sendall((f"POST {PLACE} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                  + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n" + body).encode())
    time.sleep(0.2)  # the place request sleeps ``latency_ms`` in the server: not evictable
    answer, _ = read_until_closed(venue.connect(), 1.0)
    assert status_of(answer) == 503
    assert venue.stats()["connections_refused"] == 1 and venue.stats()["evicted"] == 0
    busy.settimeout(WAIT_S)
    assert status_of(busy.recv(65536)) == 400  # the busy request was answered (a bad order), not cut


# -- 2, 3: head and body deadlines, a short body ------------------------------------------------


def test_a_head_that_never_completes_is_answered_408_and_closed_at_the_header_deadline(make_venue):
    venue = make_venue(header_timeout_s=0.5, body_timeout_s=30.0, idle_timeout_s=30.0)
    s = venue.connect()
    s.sendall(b"GET " + UNFILLED.encode() + b" HTTP/1.1\r\nX-Slow: ")
    took_s = dribble_until_answered(s, b"a", every_s=0.1)  # bytes keep coming: the deadline holds
    answer, _ = read_until_closed(s)
    assert took_s >= 0.4  # not before the deadline (a deadline per byte would never answer: WAIT_S fails it)
    assert status_of(answer) == 408 and b"Connection: close" in answer
    assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "40001"
    assert venue.stats()["slow_closed"] == 1 and venue.stats()["idle_closed"] == 0


def test_a_body_that_stalls_below_its_content_length_is_answered_408_at_the_body_deadline(make_venue):
    venue = make_venue(header_timeout_s=30.0, body_timeout_s=0.5, idle_timeout_s=30.0)
    s = venue.connect()
    s.sendall(f"POST {PLACE} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{".encode())
    took_s = dribble_until_answered(s, b" ", every_s=0.1)
    answer, _ = read_until_closed(s)
    assert took_s >= 0.4  # not before the deadline (a deadline per byte would never answer: WAIT_S fails it)
    assert status_of(answer) == 408 and venue.stats()["slow_closed"] == 1


@pytest.mark.parametrize("data", [
    f"POST {PLACE} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{\"symbol\":".encode(),  # short body
    f"POST {PLACE} HTTP/1.1\r\nHost: x\r\nContent-Le".encode(),  # a head cut short
])
def test_a_request_cut_short_by_end_of_file_is_answered_400_at_once(make_venue, data):
    venue = make_venue(header_timeout_s=30.0, body_timeout_s=30.0, idle_timeout_s=30.0)
    s = venue.connect()
    s.sendall(data)
    time.sleep(0.05)
    s.shutdown(socket.SHUT_WR)  # half-close: the server can still answer
    answer, _ = read_until_closed(s)  # 400, not the 408 of the 30 s deadlines (read_until_closed: WAIT_S)
    assert status_of(answer) == 400 and b"Connection: close" in answer
    assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "40001"
    assert venue.stats()["bad_requests"] == 1 and venue.stats()["slow_closed"] == 0


# -- 4: bare LF / CR -------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [
    b"GET /api/v2/spot/trade/unfilled-orders HTTP/1.1\n",  # the request line
    b"GET /api/v2/spot/trade/unfilled-orders HTTP/1.1\r\nHost: x\nX-A: 1",  # a header line
    b"\n",  # an empty line
    b"GET /api/v2/spot/trade/unfilled-orders HTTP/1.1\r\nHost: x\rX-A: 1",  # a bare CR
])
def test_a_bare_lf_or_cr_line_ending_is_answered_400_at_once_on_an_open_connection(make_venue, data):
    venue = make_venue(header_timeout_s=30.0, idle_timeout_s=30.0)
    s = venue.connect()
    s.sendall(data)  # and nothing more: no CRLF CRLF ever comes
    answer, _ = read_until_closed(s)  # 400, not the 408 of the 30 s header deadline (WAIT_S)
    assert status_of(answer) == 400 and b"bad line ending" in answer
    assert venue.stats()["bad_requests"] == 1


# -- 5: idle connections, slow readers, and clients the deadlines must leave alone ---------------------


def test_an_idle_connection_is_closed_at_the_idle_timeout(make_venue):
    venue = make_venue(idle_timeout_s=0.5, header_timeout_s=30.0)
    used, unused = venue.connect(), venue.connect()
    used.sendall(venue.raw_get())
    assert status_of(used.recv(65536)) == 200
    for s in (used, unused):
        answer, _ = read_until_closed(s)  # closed within WAIT_S, by the idle timeout (counted below)
        assert answer == b""
    assert venue.stats()["idle_closed"] == 2 and venue.stats()["slow_closed"] == 0


def test_a_client_sending_whole_requests_is_never_cut_by_the_deadlines(make_venue):
    venue = make_venue(idle_timeout_s=0.4, header_timeout_s=0.2, body_timeout_s=0.2)
    conn = http1.Connection(lambda: ("127.0.0.1", venue.port), timeout_s=1.0)
    try:
        for _ in range(10):  # 1.5 s on one connection: several times every deadline
            conn.send("GET", UNFILLED, venue.headers())
            assert conn.receive()[0] == 200
            time.sleep(0.15)
    finally:
        conn.close()
    assert venue.stats()["connections_total"] == 1
    assert venue.stats()["slow_closed"] == venue.stats()["idle_closed"] == venue.stats()["evicted"] == 0


def test_a_peer_that_does_not_read_its_answers_is_reset_at_the_write_deadline(make_venue):
    venue = make_venue(write_timeout_s=0.5, idle_timeout_s=30.0)
    s = socket.socket()
    venue.sockets.append(s)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.connect(("127.0.0.1", venue.port))
    s.setblocking(False)
    request = b"GET /nothing HTTP/1.1\r\n\r\n"  # a 404 each, never read
    t0 = time.monotonic()
    while venue.stats()["slow_closed"] == 0:
        assert time.monotonic() - t0 < WAIT_S, "the server kept writing to a peer that does not read"
        try:
            s.send(request * 1000)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break
    wait_until(lambda: venue.stats()["connections"] == 0, WAIT_S, what="the slow reader's connection closed")
    assert venue.stats()["slow_closed"] == 1


def test_rest_server_refuses_timeouts_that_are_not_positive(make_venue, tmp_path):
    from pipeline.venue.errors import VenueError

    venue = make_venue()
    for name in ("idle_timeout_s", "header_timeout_s", "body_timeout_s", "write_timeout_s"):
        for bad in (0.0, -1.0, float("inf"), float("nan")):
            with pytest.raises(VenueError, match=name):
                RestServer(venue.api, **{name: bad})
    rest = RestServer(venue.api)
    assert (rest.idle_timeout_s, rest.header_timeout_s, rest.body_timeout_s, rest.write_timeout_s,
            rest.max_connections) == (15.0, 2.0, 2.0, 5.0, 64)


def test_stopping_with_slow_and_idle_connections_open_is_prompt_and_logs_no_asyncio_error(make_venue, caplog):
    venue = make_venue(idle_timeout_s=30.0, header_timeout_s=30.0)
    idle, slow = venue.connect(), venue.connect()
    idle.sendall(venue.raw_get())
    assert status_of(idle.recv(65536)) == 200
    slow.sendall(b"GET / HTTP/1.1\r\n")
    time.sleep(0.05)
    venue.thread.stop()  # joins at most 10 s: a stop that waited for the 30 s timeouts leaves it alive
    assert not venue.thread.alive and venue.thread.error is None
    assert not [r for r in caplog.records if r.name == "asyncio" and r.levelno >= 40]
