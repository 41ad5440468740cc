"""Helpers of the venue server tests: venues run in a thread, and a real WebSocket client whose
every receive is bounded by a timeout and whose depth pushes go through ``pipeline.trading.bitget``'s
decoder and ``BitgetBooks`` (the feed's own integrity checks)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from websockets.sync.client import connect

from pipeline.trading.bitget import Applied, BitgetBooks, FrameKind, Subscription, make_decoder, subscribe_message
from pipeline.trading.bitget.protocol import unsubscribe_message
from pipeline.trading.messages import BOOK_DTYPE
from pipeline.venue.server import VenueServer, VenueThread
from pipeline.venue.sources import InstrumentSpec, SyntheticSource

REPO_ROOT = Path(__file__).resolve().parents[3]
CAPTURE_PATH = REPO_ROOT.parent / "shared" / "data" / "bitget" / "BITGET.ws.1.0"
SPECS = [InstrumentSpec("BTCUSDT", 0.1, 0.0001), InstrumentSpec("ETHUSDT", 0.01, 0.001)]
IDS = {"BTCUSDT": 1, "ETHUSDT": 2}
START_MS = 1_700_000_000_000
RECV_TIMEOUT_S = 3.0


def synthetic(seed: int = 7, step_ms: int = 20) -> SyntheticSource:
    return SyntheticSource(SPECS, seed=seed, step_ms=step_ms, start_ms=START_MS)


def sub(channel: str, inst_id: str, inst_type: str = "SPOT") -> Subscription:
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
