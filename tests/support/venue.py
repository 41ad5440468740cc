"""The paper venue in tests: venues run in a thread, a real WebSocket client whose every receive is
bounded by a timeout and whose depth pushes go through ``pipeline.trading.bitget``'s decoder and
``BitgetBooks`` (the feed's own integrity checks), the order engine's public book, and a REST venue
(paused market + order engine + REST server) with a signed keep-alive client and manual clocks."""

from __future__ import annotations

import http.client
import time
from collections import Counter
from decimal import Decimal

import numpy as np
import orjson
import pytest
from websockets.sync.client import connect

from pipeline.trading.bitget import Applied, BitgetBooks, FrameKind, Subscription, make_decoder, subscribe_message
from pipeline.trading.bitget.protocol import unsubscribe_message
from pipeline.trading.bitget.signing import (Credentials, generate_paper_credentials, load_credentials,
                                             query_string)
from pipeline.trading.messages import BOOK_DTYPE
from pipeline.venue.order_fields import InstrumentRules
from pipeline.venue.orders import OrderEngine
from pipeline.venue.rest import RestServer
from pipeline.venue.rest_api import PLACE, RestApi
from pipeline.venue.server import VenueServer
from pipeline.venue.service import VenueThread
from pipeline.venue.sources import InstrumentSpec, SyntheticSource
from tests.support.clock import ManualClock
from tests.support.ports import ListLog

D = Decimal
SPECS = [InstrumentSpec("BTCUSDT", 0.1, 0.0001), InstrumentSpec("ETHUSDT", 0.01, 0.001)]
IDS = {"BTCUSDT": 1, "ETHUSDT": 2}
START_MS = 1_700_000_000_000
RECV_TIMEOUT_S = 3.0
#: the wall clock (ms) of the order engine's tests
T0_MS = 1_700_000_000_000
#: the order engine's tests' rules: BTC lot 0.001, ETH lot 0.01
RULES = {"BTCUSDT": InstrumentRules("BTCUSDT", D("0.1"), D("0.001")),
         "ETHUSDT": InstrumentRules("ETHUSDT", D("0.01"), D("0.01"))}
#: the rules of the paper instruments (``SPECS``) as the REST venue checks orders
PAPER_RULES = {"BTCUSDT": InstrumentRules("BTCUSDT", D("0.1"), D("0.0001")),
               "ETHUSDT": InstrumentRules("ETHUSDT", D("0.01"), D("0.001"))}


# ------------------------------------------------------------------------------------- market data
def synthetic(seed: int = 7, step_ms: int = 20) -> SyntheticSource:
    """The synthetic market of the paper instruments (``SPECS``) from ``START_MS``."""
    return SyntheticSource(SPECS, seed=seed, step_ms=step_ms, start_ms=START_MS)


def sub(channel: str, inst_id: str, inst_type: str = "SPOT") -> Subscription:
    """A subscription of ``channel`` / ``inst_id``."""
    return Subscription(inst_type, channel, inst_id)


class Venues:
    """Starts venue servers in threads; stops every one at teardown."""

    def __init__(self) -> None:
        self.threads: list[VenueThread] = []

    def start(self, source=None, **kwargs) -> VenueServer:
        server = VenueServer(source if source is not None else synthetic(), **kwargs)
        thread = VenueThread(server)
        self.threads.append(thread)
        thread.start()
        return server

    def stop_all(self) -> None:
        for t in self.threads:
            t.stop()
        for t in self.threads:
            assert not t.alive, "venue thread still running after stop"
            assert t.error is None, f"venue thread failed: {t.error!r}"


class Client:
    """One connection to a venue. ``recv`` returns raw text; ``next`` decodes a frame and applies
    depth pushes to ``books`` (counting ``Applied`` codes in ``applied``)."""

    def __init__(self, url: str, instruments: dict[str, int] | None = None) -> None:
        self.ws = connect(url, proxy=None, open_timeout=5, close_timeout=2, compression=None, max_size=None, legacy=True)
        self.decoder = make_decoder()
        self.books = BitgetBooks(instruments or IDS)
        self.out = np.zeros(1, BOOK_DTYPE)
        self.applied: Counter = Counter()
        self.kinds: Counter = Counter()
        self.seqs: dict[tuple[str, str], list[int]] = {}
        self.trades: dict[str, list] = {}
        self.raw: list[str] = []

    def close(self) -> None:
        self.ws.close()

    def send(self, text: str) -> None:
        self.ws.send(text)

    def subscribe(self, *subs: Subscription) -> None:
        self.ws.send(subscribe_message(subs))

    def subscribed(self, *subs: Subscription) -> None:
        """Subscribe and wait for the last ack: the venue has then queued every initial snapshot,
        so whatever it publishes next comes after them."""
        self.subscribe(*subs)
        last = subs[-1]
        self.until(lambda d: d.kind == FrameKind.SUBSCRIBED and (d.channel, d.inst_id) == (last.channel, last.inst_id),
                   what=f"the ack of {last}")

    def unsubscribe(self, *subs: Subscription) -> None:
        self.ws.send(unsubscribe_message(subs))

    def recv(self, timeout: float = RECV_TIMEOUT_S) -> str:
        msg = self.ws.recv(timeout=timeout)
        self.raw.append(msg)
        return msg

    def next(self, timeout: float = RECV_TIMEOUT_S):
        d = self.decoder.decode(self.recv(timeout))
        assert d.kind != FrameKind.REJECTED, f"venue sent a malformed frame: {d.reason.name} {d.detail}"
        self.kinds[d.kind.name] += 1
        if d.kind in (FrameKind.SNAPSHOT, FrameKind.UPDATE):
            for lv in d.books:
                self.seqs.setdefault((d.channel, d.inst_id), []).append(lv.seq)
            self.applied[self.books.apply(d, self.out).name] += 1
        elif d.kind == FrameKind.TRADE:
            t = d.trades
            self.trades.setdefault(d.inst_id, []).extend(zip(t.ts_ms, t.price, t.size, t.side, t.trade_id))
        return d

    def until(self, predicate, timeout: float = RECV_TIMEOUT_S, what: str = "frame"):
        """Receive until ``predicate(decoded)``; return that frame. Fails the test on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            try:
                d = self.next(left)
            except TimeoutError:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            if predicate(d):
                return d

    def until_seq(self, channel: str, inst_id: str, seq: int, timeout: float = RECV_TIMEOUT_S):
        """Receive until a depth push of ``channel`` / ``inst_id`` with ``seq`` >= the given one."""
        return self.until(lambda d: d.channel == channel and d.inst_id == inst_id and d.books is not None
                          and d.books[-1].seq >= seq, timeout, f"{channel} {inst_id} seq {seq}")

    def quiet(self, quiet_s: float = 0.15, limit_s: float = RECV_TIMEOUT_S) -> int:
        """Receive until nothing comes for ``quiet_s``; return how many frames came."""
        n = 0
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                self.next(quiet_s)
            except TimeoutError:
                return n
            n += 1
        pytest.fail(f"frames kept coming for {limit_s} s")

    def book_equals_venue(self, server: VenueServer, inst_id: str, channel: str = "books") -> bool:
        book = self.books.book(channel, inst_id)
        bids, asks = server.levels(inst_id)
        return [list(x) for x in book.bids()] == bids and [list(x) for x in book.asks()] == asks

    def ok(self) -> bool:
        """No depth push was refused by the books."""
        return set(self.applied) <= {Applied.EMITTED.name}


# ------------------------------------------------------------------------------------- the order engine
class Book:
    """The public book the engine reads: symbol -> (bids, asks), [price, size] strings, best first."""

    def __init__(self) -> None:
        self.books = {"BTCUSDT": ([["99.9", "1"], ["99.8", "2"]], [["100.1", "1"], ["100.2", "2"], ["100.5", "5"]]),
                      "ETHUSDT": ([["9.99", "3"]], [["10.01", "3"]])}

    def levels(self, symbol: str, n: int | None = None):
        bids, asks = self.books[symbol]
        return (bids[:n], asks[:n]) if n is not None else (list(bids), list(asks))

    def set(self, symbol: str, bids: list, asks: list) -> None:
        self.books[symbol] = (bids, asks)


def venue_clock(ms: int = T0_MS) -> ManualClock:
    """The venue's wall clock (ms), standing at ``ms`` until the test moves it."""
    return ManualClock(ms, unit="ms")


def paper_credentials(path) -> Credentials:
    """New paper credentials written to ``path`` (a JSON key file), loaded back."""
    generate_paper_credentials(path)
    return load_credentials(path)


class VenueStack:
    """A paused synthetic market + an order engine (``rules``, the clock ``now_ms``) + the REST server,
    on one loop in a thread. ``records`` / ``on_event``: the engine restores an account from those
    records and reports its events there. ``api_kwargs`` go to ``RestApi``, ``server_kwargs`` to
    ``RestServer``; both log to ``log`` (a ``ListLog``)."""

    def __init__(self, creds: Credentials, now_ms, *, rules: dict = PAPER_RULES, records=None, on_event=None,
                 name: str = "test-venue", api_kwargs: dict | None = None, server_kwargs: dict | None = None) -> None:
        self.creds = creds
        self.market = VenueServer(synthetic(), start_paused=True)
        self.engine = OrderEngine(rules, self.market.market.levels, now_ms, max_notional=1_000_000)
        if records is not None:
            self.engine.restore(records)
        if on_event is not None:
            self.engine.on_event = on_event
        self.market.add_market_listener(self.engine)
        self.log = ListLog()
        self.api = RestApi(self.engine, creds, log=self.log, **(api_kwargs or {}))
        self.rest = RestServer(self.api, log=self.log, **(server_kwargs or {}))
        self.thread = VenueThread(self.market, name=name, extra=[self.rest])
        self.thread.start()

    def stop(self) -> None:
        """Stop the venue's thread; it must end cleanly."""
        self.thread.stop()
        assert not self.thread.alive and self.thread.error is None


class RestVenue(VenueStack):
    """A ``VenueStack`` with new paper credentials in ``tmp_path``, the venue's wall clock ``clock``
    (ms) and the rate limiter's monotonic clock ``mono_clock`` (ns) moved by the test, and a signed
    keep-alive client. Every response body is kept in ``bodies`` (for the secret scan)."""

    def __init__(self, tmp_path, **rest_kwargs) -> None:
        self.clock = venue_clock()
        self.mono_clock = ManualClock(1_000_000_000)
        super().__init__(paper_credentials(tmp_path / "paper.json"), self.clock,
                         api_kwargs={"now_ms": self.clock, "mono_ns": self.mono_clock, **rest_kwargs})
        self.conn = self.connect()
        self.bodies: list[bytes] = []

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.rest.port, timeout=5)

    def close(self) -> None:
        self.conn.close()
        self.stop()

    def request(self, method: str, path: str, *, params: dict | None = None, body: dict | None = None,
                creds: Credentials | None = None, ts_ms: int | None = None, tamper=None,
                conn: http.client.HTTPConnection | None = None) -> tuple[int, dict]:
        """Send a signed request (``tamper(headers, text)`` may change it first); the status and the
        answer, which must have the venue's envelope, stamped with the venue's clock."""
        query = query_string(params)
        text = orjson.dumps(body).decode() if body is not None else ""
        headers = (creds or self.creds).headers(self.clock.now if ts_ms is None else ts_ms, method, path, query, text)
        if tamper is not None:
            headers, text = tamper(headers, text)
        c = conn or self.conn
        c.request(method, path + (f"?{query}" if query else ""), body=text.encode() if text else None, headers=headers)
        resp = c.getresponse()
        raw = resp.read()
        self.bodies.append(raw)
        doc = orjson.loads(raw)
        assert set(doc) == {"code", "msg", "requestTime", "data"} and doc["requestTime"] == self.clock.now
        assert (resp.status == 200) == (doc["code"] == "00000")
        return resp.status, doc

    def place(self, **fields) -> tuple[int, dict]:
        body = {"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc", "price": "100.0",
                "size": "0.01", **fields}
        return self.request("POST", PLACE, body=body)

    def best(self, symbol: str = "BTCUSDT") -> tuple[D, D]:
        bids, asks = self.market.levels(symbol, 1)
        return D(bids[0][0]), D(asks[0][0])

    def secrets(self) -> tuple[str, str]:
        return self.creds.secret, self.creds.passphrase
