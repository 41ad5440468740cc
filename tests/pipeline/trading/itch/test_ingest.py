"""The ITCH feed's ingestion core: replay pacing, and MoldUDP64 datagrams (malformed, foreign, duplicate,
gap) into the book and BOOK payloads through the injected emit."""

from __future__ import annotations

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.book import L3Book
from pipeline.trading.itch.ingest import ITCH_COUNTERS, MoldDatagrams, ReplayPacer, start_counters
from pipeline.trading.itch.framing import encode_packet
from pipeline.trading.itch.synth import generate_session
from pipeline.trading.messages import Kind
from tests.support.ports import ListLog


def _msg(ts_ns: int) -> bytes:
    return M.encode(M.SystemEvent(0, 0, ts_ns, b"O"))


def test_the_pacer_holds_each_message_until_its_recorded_distance_divided_by_speed():
    p = ReplayPacer(2.0)
    assert p.due(_msg(1_000), 50), "the first message sets the origin"
    assert not p.due(_msg(1_000 + 400), 50 + 199)
    assert p.due(_msg(1_000 + 400), 50 + 200)


def test_mold_datagrams_feed_the_book_once_each_and_count_what_they_drop():
    session = generate_session(3, 200, symbols=["AAPL"])
    raw = [M.encode(r) for r in session]
    emitted, log, stats = [], ListLog(), {}
    start_counters(stats)
    ing = MoldDatagrams(L3Book({"AAPL": 1}), session="S1", stats=stats, log=log, clock=lambda: 0,
                        emit=lambda port, kind, payload, ts: emitted.append((kind, ts)) or True, out="md")
    assert list(stats) == list(ITCH_COUNTERS)
    half = len(raw) // 2
    ing.on_datagram(encode_packet("S1", 1, raw[:half]), 10)
    ing.on_datagram(encode_packet("S1", 1, raw[:half]), 11)  # a duplicate
    ing.on_datagram(encode_packet("XX", 1 + half, raw[half:]), 12)  # another session
    ing.on_datagram(b"short", 13)
    ing.on_datagram(encode_packet("S1", 3 + half, raw[half + 2:]), 14)  # two messages lost
    assert (stats["datagrams"], stats["bad_datagrams"], stats["foreign"]) == (5, 1, 1)
    assert stats["duplicates"] == half and (stats["gaps"], stats["missing"]) == (1, 2)
    assert stats["messages"] == len(raw) - 2
    assert emitted and {k for k, _ in emitted} == {Kind.BOOK} and {ts for _, ts in emitted} <= {10, 14}
    assert stats["books_emitted"] == len(emitted)
    assert [e["missing"] for e in log.named("mold_gap")] == [2]
