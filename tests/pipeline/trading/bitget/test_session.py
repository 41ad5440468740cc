"""The feed's state machine (``FeedSession``) driven directly through its injected ports: frames to
BOOK / TRADE payloads and counters, connection markers, resyncs under the throttle."""

from __future__ import annotations

from pipeline.trading.bitget.requests import resync_messages
from pipeline.trading.bitget.session import (BITGET_COUNTERS, MARK_CONNECTED, MARK_GAP, FeedSession,
                                             subscriptions)
from pipeline.trading.messages import Kind
from tests.support.frames import RefBook, ladder
from tests.support.frames import depth_text as depth
from tests.support.frames import trades_text as trades
from tests.support.ports import ListLog

MINUTE_NS = 60_000_000_000


class Ports:
    """The session's ports: an emit that records (or refuses), sends that record, a settable clock."""

    def __init__(self, accept: bool = True):
        self.accept = accept
        self.emitted: list[tuple[int, bytes, int]] = []
        self.sent: list[tuple[int, list[str]]] = []
        self.now_ns = 0
        self.log = ListLog()
        self.stats: dict = {}

    def emit(self, port, kind, payload, ts) -> bool:
        if self.accept:
            self.emitted.append((int(kind), bytes(payload), ts))
        return self.accept

    def send(self, conn_id, texts) -> bool:
        self.sent.append((conn_id, texts))
        return True


def _session(ports: Ports, channels=("books15", "trade"), resync_max_per_min: int = 30) -> FeedSession:
    s = FeedSession({"BTCUSDT": 1}, inst_type="SPOT", channels=list(channels), decoder="msgspec",
                    emit_trade_snapshots=False, resync_max_per_min=resync_max_per_min, stats=ports.stats,
                    log=ports.log, clock=lambda: ports.now_ns, emit=ports.emit, out="md", send=ports.send)
    s.start_counters()
    return s


def test_subscriptions_are_every_channel_of_every_instrument():
    subs = subscriptions("SPOT", ["books15", "trade"], {"BTCUSDT": 1, "ETHUSDT": 2})
    assert [(s.inst_id, s.channel) for s in subs] == [
        ("BTCUSDT", "books15"), ("BTCUSDT", "trade"), ("ETHUSDT", "books15"), ("ETHUSDT", "trade")]


def test_frames_become_book_and_trade_payloads_stamped_with_their_arrival():
    ports = Ports()
    s = _session(ports)
    assert list(ports.stats) == list(BITGET_COUNTERS) and not any(ports.stats.values())
    s.on_frame(111, depth(ladder(100.0, -0.1, 3), ladder(100.5, 0.1, 3), seq=1))
    s.on_frame(222, trades([("1695711090682", "100.1", "0.5", "buy", "9")]))
    s.on_frame(333, "pong")
    assert [(k, ts) for k, _, ts in ports.emitted] == [(Kind.BOOK, 111), (Kind.TRADE, 222)]
    assert s.warm_frame is not None
    st = ports.stats
    assert (st["frames"], st["books_emitted"], st["trades_emitted"], st["pongs"]) == (3, 1, 1, 1)


def test_a_full_ring_and_a_rejected_frame_are_counted():
    ports = Ports(accept=False)
    s = _session(ports)
    s.on_frame(1, depth(ladder(100.0, -0.1, 3), ladder(100.5, 0.1, 3), seq=1))
    s.on_frame(2, "{not json")
    st = ports.stats
    assert (st["out_drops"], st["books_emitted"], st["rejected"], st["rej_bad_json"]) == (1, 0, 1, 1)
    assert [f["reason"] for f in ports.log.named("frame_rejected")] == ["BAD_JSON"]


def test_a_gap_marker_resets_the_books_and_forgets_pending_resyncs():
    ports = Ports()
    s = _session(ports, channels=["books"])
    ref = RefBook()
    s.on_marker(MARK_CONNECTED, 7, 0)
    s.on_frame(1, ref.snapshot(ladder(100.0, -0.1, 3), ladder(100.5, 0.1, 3)))
    s.pending_resyncs[s.subs[0]] = None
    s.on_marker(MARK_GAP, 7, 5)
    assert not s.pending_resyncs and ports.stats["gap_resets"] == 1
    assert ports.log.named("inbox_overflow")[0]["queue_drops"] == 5
    s.on_frame(2, ref.update(bids=[["99.95", "2"]]))
    assert ports.stats["books_emitted"] == 1, "no BOOK from an update until a fresh snapshot"


def test_a_checksum_failure_resyncs_on_the_current_connection_within_the_throttle():
    ports = Ports()
    s = _session(ports, channels=["books"], resync_max_per_min=1)
    ref = RefBook()
    s.on_marker(MARK_CONNECTED, 3, 0)
    sub = s.subs[0]
    for attempt in range(2):
        s.on_frame(1, ref.snapshot(ladder(100.0, -0.1, 3), ladder(100.5, 0.1, 3)))
        s.on_frame(2, ref.update(bids=[["99.95", "2"]], checksum_delta=1))
        s.request_resyncs()
    assert ports.stats["checksum_failures"] == 2
    assert ports.sent == [(3, resync_messages(sub))], "one resync a minute: the second waits"
    assert ports.stats["resyncs"] == 1 and ports.stats["resyncs_throttled"] == 1
    s.send_resyncs()
    assert ports.stats["resyncs_throttled"] == 1, "a deferred resync is counted once"
    ports.now_ns = MINUTE_NS
    s.send_resyncs()
    assert ports.sent[-1] == (3, resync_messages(sub)) and not s.pending_resyncs
    assert [e["conn"] for e in ports.log.named("resync")] == [3, 3]
