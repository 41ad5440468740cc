"""The ITCH feed's ingestion core: replay pacing, and MoldUDP64 datagrams (malformed, foreign, duplicate)
into the book and BOOK payloads through the injected emit; gaps re-requested and their BOOKs flagged
rebuilding until they close; an unrecoverable gap invalidates only the stock that contradicts its book;
crossed books flagged."""

from __future__ import annotations

from pipeline.trading.itch import messages as M
import numpy as np

from pipeline.trading.itch.executions import ExecutionBook
from pipeline.trading.itch.ingest import ITCH_COUNTERS, MoldDatagrams, ReplayPacer, start_counters
from pipeline.trading.itch.framing import encode_packet
from pipeline.trading.itch.recovery import RecoveryParams
from pipeline.trading.itch.synth import generate_session
from pipeline.trading.messages import BOOK_DTYPE, BOOK_FLAG_CROSSED, BOOK_FLAG_INVALID, BOOK_FLAG_REBUILDING, Kind
from tests.support.ports import ListLog


def _msg(ts_ns: int) -> bytes:
    return M.encode(M.SystemEvent(0, 0, ts_ns, b"O"))


def test_the_pacer_holds_each_message_until_its_recorded_distance_divided_by_speed():
    p = ReplayPacer(2.0)
    assert p.due(_msg(1_000), 50), "the first message sets the origin"
    assert not p.due(_msg(1_000 + 400), 50 + 199)
    assert p.due(_msg(1_000 + 400), 50 + 200)


def _mold(symbols=None, **kw):
    emitted, log, stats, requests = [], ListLog(), {}, []
    start_counters(stats)
    book = ExecutionBook(symbols or {"AAPL": 1}, on_trade=lambda p: None)
    ing = MoldDatagrams(book, session="S1", stats=stats, log=log, clock=lambda: 0,
                        emit=lambda port, kind, payload, ts: emitted.append((kind, bytes(payload), ts)) or True,
                        out="md", request=lambda first, n: requests.append((first, n)), **kw)
    return ing, emitted, log, stats, requests


def _books(emitted):
    return [np.frombuffer(p, BOOK_DTYPE, 1)[0] for k, p, _ in emitted if k == Kind.BOOK]


def test_mold_datagrams_feed_the_book_once_each_and_count_what_they_drop():
    session = generate_session(3, 200, symbols=["AAPL"])
    raw = [M.encode(r) for r in session]
    ing, emitted, log, stats, requests = _mold()
    assert list(stats) == list(ITCH_COUNTERS)
    half = len(raw) // 2
    ing.on_datagram(encode_packet("S1", 1, raw[:half]), 10)
    ing.on_datagram(encode_packet("S1", 1, raw[:half]), 11)  # a duplicate
    ing.on_datagram(encode_packet("XX", 1 + half, raw[half:]), 12)  # another session
    ing.on_datagram(b"short", 13)
    ing.on_datagram(encode_packet("S1", 1 + half, raw[half:]), 14)
    assert (stats["datagrams"], stats["bad_datagrams"], stats["foreign"]) == (5, 1, 1)
    assert stats["duplicates"] == half and stats["gaps"] == 0 and not requests
    assert stats["messages"] == len(raw)
    assert emitted and {k for k, _, _ in emitted} == {Kind.BOOK} and {ts for _, _, ts in emitted} <= {10, 14}
    assert stats["books_emitted"] == len(emitted)


def test_a_gap_is_re_requested_its_books_flagged_rebuilding_until_it_closes_and_the_book_ends_right():
    session = generate_session(5, 400, symbols=["AAPL", "MSFT"])
    raw = [M.encode(r) for r in session]
    ref = ExecutionBook({"AAPL": 1, "MSFT": 2}, on_trade=lambda p: None)
    for seq, m in enumerate(raw, 1):
        ref.apply_raw(m, 0, len(m), seq)
    ing, emitted, log, stats, requests = _mold({"AAPL": 1, "MSFT": 2})
    packets = [(1 + i, raw[i:i + 20]) for i in range(0, len(raw), 20)]
    lost = packets[5]
    for seq, msgs in packets[:5] + packets[6:9]:  # packet 5 dropped
        ing.on_datagram(encode_packet("S1", seq, msgs), seq)
    first = lost[0]
    assert requests == [(first, 20)] and stats["rerequests"] == 1 and stats["gaps"] == 1
    before = len(emitted)
    flagged = _books(emitted[before - 2:])
    assert sorted(b["instrument_id"] for b in flagged) == [1, 2]
    assert all(b["flags"] & BOOK_FLAG_REBUILDING for b in flagged), "a BOOK per stock says: rebuilding"
    ing.on_datagram(encode_packet("S1", *lost), 10**6)  # the retransmission
    catch_up = _books(emitted[before:])
    assert len(catch_up) > 4
    assert all(b["flags"] & BOOK_FLAG_REBUILDING for b in catch_up[:-2]), "the BOOKs in between are flagged"
    assert sorted(b["instrument_id"] for b in catch_up[-2:]) == [1, 2]
    assert not any(b["flags"] & BOOK_FLAG_REBUILDING for b in catch_up[-2:]), "closed: clean BOOKs"
    for seq, msgs in packets[9:]:
        ing.on_datagram(encode_packet("S1", seq, msgs), 2 * 10**6)
    assert stats["recovered"] == 1 and stats["unrecoverable"] == 0 and stats["rebuilding"] == 0
    assert stats["messages"] == len(raw) and ing.book.audit() == []
    for iid in (1, 2):
        assert ing.book.book_payload(iid).tobytes() == ref.book_payload(iid).tobytes()


def _R(locate, symbol):
    return M.StockDirectory(locate, 0, 1, M.pad_alpha(symbol, 8), b"Q", b"N", 100, b"N", b"C", b"  ", b"P",
                            b"N", b"N", b"1", b"N", 0, b"N")


def _A(loc, ref, side, px, symbol):
    return M.AddOrder(loc, 0, 1_000, ref, side, 100, M.pad_alpha(symbol, 8), px)


def test_an_unrecoverable_gap_invalidates_only_the_stock_whose_messages_contradict_its_book():
    recs = [_R(1, "AAPL"), _R(2, "MSFT"), _A(1, 1, b"B", 1_000_000, "AAPL"), _A(2, 2, b"B", 2_000_000, "MSFT"),
            _A(1, 3, b"S", 1_010_000, "AAPL"),  # seq 5: lost for good
            _A(2, 4, b"S", 2_010_000, "MSFT"),
            M.OrderExecuted(1, 0, 2_000, 3, 50, 9),  # AAPL executes the order it never saw: a contradiction
            M.OrderExecuted(2, 0, 2_000, 4, 50, 10)]
    raw = [M.encode(r) for r in recs]
    ing, emitted, log, stats, requests = _mold({"AAPL": 1, "MSFT": 2}, recovery=RecoveryParams(gap_timeout_ns=100))
    ing.on_datagram(encode_packet("S1", 1, raw[:4]), 0)
    ing.on_datagram(encode_packet("S1", 6, raw[5:]), 10)
    assert requests == [(5, 1)] and stats["gaps"] == 1
    ing.poll(50)
    assert stats["unrecoverable"] == 0
    ing.poll(110)  # past the bound: given up
    assert stats["unrecoverable"] == 1 and stats["missing"] == 1
    assert stats["invalid_stocks"] == 1 and stats["invalid"] == "AAPL"
    last = {int(b["instrument_id"]): int(b["flags"]) for b in _books(emitted)}
    assert last[1] & BOOK_FLAG_INVALID and not last[1] & BOOK_FLAG_REBUILDING
    assert last[2] & (BOOK_FLAG_INVALID | BOOK_FLAG_REBUILDING) == 0, "the other stock stays valid"
    assert [e["symbol"] for e in log.named("itch_stock_invalid")] == ["AAPL"]
    ing.on_datagram(encode_packet("S1", 9, [M.encode(M.SystemEvent(0, 0, 5, b"O"))]), 200)
    assert stats["invalid_stocks"] == 0 and stats["invalid"] == "" and ing.book.stale_flags[1] == 0


def test_a_crossed_book_carries_its_flag():
    recs = [_R(1, "AAPL"), _A(1, 1, b"B", 1_000_000, "AAPL"), _A(1, 2, b"S", 1_000_000, "AAPL")]
    ing, emitted, log, stats, requests = _mold()
    ing.on_datagram(encode_packet("S1", 1, [M.encode(r) for r in recs]), 0)
    flags = [int(b["flags"]) for b in _books(emitted)]
    assert [f & BOOK_FLAG_CROSSED for f in flags] == [0, BOOK_FLAG_CROSSED] and stats["crossed_books"] == 1
