"""The Level-3 book: what each message does, what is rejected, the BOOK payload, and invariants.

Invariants checked over generated sessions: no negative (or zero) sizes anywhere, executed or
cancelled shares never exceed what the order has left, levels equal the sum of their orders, the
book never locks or crosses on a consistent session, and the vectorized path builds the same book
as the streaming one. Bad input is counted and never raises out of ``apply``.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from pipeline.trading.itch import framing as F
from pipeline.trading.itch import messages as M
from pipeline.trading.itch import synth
from pipeline.trading.itch import vectorized as V
from pipeline.trading.itch.book import BOOK_STRUCT, NO_BOOK, BookEvent, L3Book
from pipeline.trading.itch.errors import BookError
from pipeline.trading.messages import BOOK_DTYPE

AAPL, MSFT, IBM = 1, 2, 3  # stock_locates
IID_AAPL, IID_MSFT = 10, 11  # instrument ids from the config
SYMBOLS = {"AAPL": IID_AAPL, "MSFT": IID_MSFT}


def R(locate: int, symbol: str):
    return M.StockDirectory(locate, 0, 1, M.pad_alpha(symbol, 8), b"Q", b"N", 100, b"N", b"C", b"  ", b"P",
                            b"N", b"N", b"1", b"N", 0, b"N")


def A(loc, ref, side, shares, px, ts=1_000):
    return M.AddOrder(loc, 0, ts, ref, side, shares, b"AAPL    ", px)


def E(loc, ref, n, ts=2_000):
    return M.OrderExecuted(loc, 0, ts, ref, n, 99)


def C(loc, ref, n, px):
    return M.OrderExecutedWithPrice(loc, 0, 2_000, ref, n, 99, b"Y", px)


def X(loc, ref, n):
    return M.OrderCancel(loc, 0, 3_000, ref, n)


def D(loc, ref):
    return M.OrderDelete(loc, 0, 4_000, ref)


def U(loc, orig, new, shares, px):
    return M.OrderReplace(loc, 0, 5_000, orig, new, shares, px)


def new_book(**kw) -> L3Book:
    book = L3Book(SYMBOLS, **kw)
    for loc, sym in ((AAPL, "AAPL"), (MSFT, "MSFT"), (IBM, "IBM")):
        book.apply(R(loc, sym))
    return book


def levels(book: L3Book, loc: int):
    return book.stock(loc).top(1000)


def state(book: L3Book):
    """Everything observable: orders, levels per stock, counts."""
    orders = {ref: book.order(ref) for ref in book._orders}
    lv = {st.locate: st.top(1000) for st in book.stocks()}
    return orders, lv, book.stats()


# ------------------------------------------------------------------------------ message semantics


def test_adds_aggregate_by_price_and_top_is_best_first():
    b = new_book()
    assert b.apply(A(AAPL, 1, b"B", 100, 1_000_000)) == IID_AAPL
    b.apply(A(AAPL, 2, b"B", 200, 1_000_000))
    b.apply(A(AAPL, 3, b"B", 50, 999_900))
    b.apply(M.AddOrderMpid(AAPL, 0, 1, 4, b"S", 70, b"AAPL    ", 1_000_100, b"GSCO"))
    b.apply(A(AAPL, 5, b"S", 30, 1_000_200))
    assert levels(b, AAPL) == ([(1_000_000, 300), (999_900, 50)], [(1_000_100, 70), (1_000_200, 30)])
    st = b.stock(AAPL)
    assert (st.best_bid(), st.best_ask()) == (1_000_000, 1_000_100)
    assert b.order(4) == (AAPL, b"S", 70, 1_000_100)
    assert b.counts[BookEvent.APPLIED] == 5


def test_execution_reduces_the_order_and_removes_it_when_none_remain():
    b = new_book()
    b.apply(A(AAPL, 1, b"B", 100, 1_000_000))
    b.apply(A(AAPL, 2, b"B", 200, 1_000_000))
    assert b.apply(E(AAPL, 1, 40)) == IID_AAPL
    assert b.order(1)[2] == 60 and levels(b, AAPL)[0] == [(1_000_000, 260)]
    b.apply(C(AAPL, 1, 60, 1_000_300))  # C's price does not move the order's level
    assert b.order(1) is None and levels(b, AAPL)[0] == [(1_000_000, 200)]
    b.apply(E(AAPL, 2, 200))
    assert levels(b, AAPL) == ([], []) and b.n_orders == 0


def test_cancel_is_partial_and_cancelling_the_rest_removes_the_order():
    b = new_book()
    b.apply(A(AAPL, 1, b"S", 100, 1_000_000))
    b.apply(X(AAPL, 1, 30))
    assert b.order(1)[2] == 70 and levels(b, AAPL)[1] == [(1_000_000, 70)]
    b.apply(X(AAPL, 1, 70))
    assert b.order(1) is None and levels(b, AAPL)[1] == []


def test_delete_removes_the_order_and_an_emptied_level():
    b = new_book()
    b.apply(A(AAPL, 1, b"S", 100, 1_000_000))
    b.apply(A(AAPL, 2, b"S", 100, 1_000_100))
    b.apply(D(AAPL, 1))
    assert b.order(1) is None and levels(b, AAPL)[1] == [(1_000_100, 100)]


def test_replace_moves_the_order_to_a_new_ref_price_and_size_on_the_same_side():
    b = new_book()
    b.apply(A(AAPL, 1, b"S", 100, 1_000_000))
    b.apply(A(AAPL, 2, b"S", 50, 1_000_100))
    assert b.apply(U(AAPL, 1, 9, 300, 1_000_100)) == IID_AAPL
    assert b.order(1) is None and b.order(9) == (AAPL, b"S", 300, 1_000_100)
    assert levels(b, AAPL) == ([], [(1_000_100, 350)])
    assert b.counts[BookEvent.APPLIED] == 3  # one per message


def test_trades_and_other_messages_do_not_touch_the_book():
    b = new_book()
    b.apply(A(AAPL, 1, b"B", 100, 1_000_000))
    before = state(b)[:2]
    assert b.apply(M.Trade(AAPL, 0, 1, 0, b"B", 500, b"AAPL    ", 1_000_000, 7)) == NO_BOOK
    assert b.apply(M.CrossTrade(AAPL, 0, 1, 2**40, b"AAPL    ", 1_000_000, 8, b"O")) == NO_BOOK
    assert b.apply(M.BrokenTrade(AAPL, 0, 1, 7)) == NO_BOOK
    assert b.apply(M.Noii(AAPL, 0, 1, 1, 2, b"B", b"AAPL    ", 1, 2, 3, b"O", b"L")) == NO_BOOK
    assert state(b)[:2] == before
    assert b.counts[BookEvent.NO_BOOK_EFFECT] == 3 + 4  # the three R plus these


def test_directory_maps_locates_to_configured_instruments_and_ignores_the_rest():
    b = new_book()
    assert b.directory == {AAPL: "AAPL", MSFT: "MSFT", IBM: "IBM"}
    assert b.stock(IBM) is None  # not configured, not tracked
    assert b.apply(A(IBM, 1, b"B", 100, 1_000_000)) == NO_BOOK
    assert b.apply(E(IBM, 1, 100)) == NO_BOOK
    assert b.counts[BookEvent.IGNORED] == 2 and b.n_orders == 0
    assert b.apply(A(MSFT, 2, b"B", 100, 1_000_000)) == IID_MSFT


def test_track_all_keeps_books_of_unconfigured_stocks_but_publishes_none():
    b = new_book(track_all=True)
    assert b.apply(A(IBM, 1, b"B", 100, 1_000_000)) == NO_BOOK
    assert b.apply(A(77, 2, b"B", 100, 1_000_000)) == NO_BOOK  # no R seen for 77 either
    assert b.stock(IBM).top() == ([(1_000_000, 100)], []) and b.stock(77).symbol == ""
    assert b.counts[BookEvent.APPLIED] == 2


def test_trading_action_and_system_events_are_recorded():
    b = new_book()
    b.apply(M.StockTradingAction(AAPL, 0, 1, b"AAPL    ", b"H", b" ", b"LUDP"))
    assert b.trading_state[AAPL] == b"H" and b.stock(AAPL).trading_state == b"H"
    b.apply(M.SystemEvent(0, 0, 1, b"Q"))
    assert b.system_event == b"Q" and not b.ended
    b.apply(M.SystemEvent(0, 0, 2, b"C"))
    assert b.ended


def test_a_locked_or_crossed_update_is_kept_and_counted():
    b = new_book()
    b.apply(A(AAPL, 1, b"S", 100, 1_000_000))
    b.apply(A(AAPL, 2, b"B", 100, 1_000_000))  # locks
    assert b.stock(AAPL).is_crossed() and b.counts[BookEvent.CROSSED] == 1
    assert b.counts[BookEvent.APPLIED] == 2  # mirrored, not matched
    b.apply(D(AAPL, 1))
    assert not b.stock(AAPL).is_crossed()


# ------------------------------------------------------------------------------------ rejections

REJECTED = [
    ("execute an unknown ref", [E(AAPL, 99, 1)], BookEvent.UNKNOWN_REF),
    ("cancel an unknown ref", [X(AAPL, 99, 1)], BookEvent.UNKNOWN_REF),
    ("delete an unknown ref", [D(AAPL, 99)], BookEvent.UNKNOWN_REF),
    ("replace an unknown ref", [U(AAPL, 99, 100, 1, 1)], BookEvent.UNKNOWN_REF),
    ("execute more than remains", [E(AAPL, 1, 101)], BookEvent.OVER_EXECUTION),
    ("execute-with-price more than remains", [C(AAPL, 1, 500, 1)], BookEvent.OVER_EXECUTION),
    ("cancel more than remains", [X(AAPL, 1, 101)], BookEvent.OVER_CANCEL),
    ("add a live ref again", [A(AAPL, 1, b"S", 5, 1_000_500)], BookEvent.DUPLICATE_REF),
    ("replace onto a live ref", [U(AAPL, 1, 2, 10, 999_000)], BookEvent.DUPLICATE_REF),
    ("add with side Z", [A(AAPL, 7, b"Z", 5, 1)], BookEvent.INVALID_SIDE),
    ("add 0 shares", [A(AAPL, 7, b"B", 0, 1)], BookEvent.INVALID_SHARES),
    ("replace to 0 shares", [U(AAPL, 1, 7, 0, 1)], BookEvent.INVALID_SHARES),
    ("execute through another locate", [E(MSFT, 1, 1)], BookEvent.LOCATE_MISMATCH),
    ("not a record", [None], BookEvent.MALFORMED),
    ("a record with a field of the wrong type", [E(AAPL, 1, "ten")], BookEvent.MALFORMED),
]


@pytest.mark.parametrize("what,messages,event", REJECTED, ids=[r[0] for r in REJECTED])
def test_inconsistent_input_is_rejected_counted_and_leaves_the_book_unchanged(what, messages, event):
    b = new_book()
    b.apply(A(AAPL, 1, b"B", 100, 1_000_000))
    b.apply(A(AAPL, 2, b"S", 100, 1_000_100))
    orders, lv, _ = state(b)
    for m in messages:
        assert b.apply(m) == NO_BOOK
    assert b.counts[event] == len(messages)
    assert b.rejected == len(messages)
    assert state(b)[:2] == (orders, lv)
    assert b.audit() == []


@pytest.mark.parametrize("raw,reason", [
    (M.encode(A(AAPL, 5, b"B", 1, 1))[:-3], M.DecodeReason.TRUNCATED),
    (b"Z" * 30, M.DecodeReason.UNKNOWN_TYPE),
    (b"", M.DecodeReason.EMPTY),
])
def test_bytes_that_do_not_decode_are_counted_by_apply_raw(raw, reason):
    b = new_book()
    assert b.apply_raw(raw) == NO_BOOK
    assert b.counts[BookEvent.DECODE_ERROR] == 1 and b.decode_rejects[reason] == 1
    assert b.apply_raw(M.encode(A(AAPL, 5, b"B", 1, 1))) == IID_AAPL
    assert b.apply_raw(None) == NO_BOOK and b.counts[BookEvent.MALFORMED] == 1


def test_a_wrong_framed_length_is_a_decode_error():
    b = new_book()
    raw = M.encode(D(AAPL, 1))
    assert b.apply_raw(raw + b"\x00", 0, len(raw) + 1) == NO_BOOK
    assert b.decode_rejects[M.DecodeReason.WRONG_LENGTH] == 1


# ---------------------------------------------------------------------------------- BOOK payload


def test_book_payload_layout_golden():
    b = new_book(midnight_epoch_ns=1_700_000_000 * 10**9)
    b.apply(A(AAPL, 1, b"B", 300, 1_000_000, ts=34_200 * 10**9))
    b.apply(A(AAPL, 2, b"B", 200, 999_900))
    b.apply(A(AAPL, 3, b"S", 100, 1_000_100, ts=34_201 * 10**9), seq=42)
    p = b.book_payload(IID_AAPL)
    assert p.dtype == BOOK_DTYPE and p.shape == (1,)
    raw = p.tobytes()
    assert len(raw) == 504
    assert raw[:8] == bytes.fromhex("0a00" "0000" "0200" "0100")  # iid 10, flags 0, 2 bids, 1 ask
    assert struct.unpack_from("<QQ", raw, 8) == (42, 1_700_000_000 * 10**9 + 34_201 * 10**9)
    assert struct.unpack_from("<2d", raw, 24) == (100.0, 99.99)  # bid_px
    assert struct.unpack_from("<2d", raw, 144) == (300.0, 200.0)  # bid_sz
    assert struct.unpack_from("<d", raw, 264) == (100.01,)  # ask_px
    assert struct.unpack_from("<d", raw, 384) == (100.0,)  # ask_sz
    r = p[0]
    assert (r["bid_px"][2:] == 0).all() and (r["ask_px"][1:] == 0).all() and (r["ask_sz"][1:] == 0).all()


def test_payload_keeps_the_best_15_levels_best_first():
    b = new_book()
    for i in range(20):
        b.apply(A(AAPL, 100 + i, b"B", 10 + i, 900_000 + 100 * i))
        b.apply(A(AAPL, 200 + i, b"S", 10 + i, 1_000_000 + 100 * i))
    r = b.book_payload(IID_AAPL)[0]
    assert r["n_bids"] == r["n_asks"] == 15
    assert r["bid_px"].tolist() == [(900_000 + 100 * i) / 1e4 for i in range(19, 4, -1)]
    assert r["ask_px"].tolist() == [(1_000_000 + 100 * i) / 1e4 for i in range(15)]
    assert r["ask_sz"].tolist() == [float(10 + i) for i in range(15)]


def test_payload_without_midnight_has_no_exchange_time_and_unseen_symbols_are_empty():
    b = L3Book(SYMBOLS)
    r = b.book_payload(IID_MSFT)[0]  # configured, no R yet
    assert r["instrument_id"] == IID_MSFT and r["n_bids"] == r["n_asks"] == 0 and r["exch_ts_ns"] == 0
    b.apply(R(MSFT, "MSFT"))
    b.apply(A(MSFT, 1, b"B", 1, 1, ts=123))
    assert b.book_payload(IID_MSFT)[0]["exch_ts_ns"] == 0


def test_payload_written_in_place_and_errors_on_unconfigured_ids():
    b = new_book()
    b.apply(A(AAPL, 1, b"B", 1, 10_000))
    slot = bytearray(600)
    assert b.write_payload(IID_AAPL, slot, 16) == BOOK_STRUCT.size == 504
    assert np.frombuffer(bytes(slot[16:520]), dtype=BOOK_DTYPE)[0]["bid_px"][0] == 1.0
    out = np.zeros(1, dtype=BOOK_DTYPE)
    assert b.book_payload(IID_AAPL, out) is out and out[0]["bid_sz"][0] == 1.0
    with pytest.raises(BookError):
        b.book_payload(99)
    with pytest.raises(BookError):
        b.book_payload(IID_AAPL, np.zeros(2, dtype=BOOK_DTYPE))
    with pytest.raises(BookError):
        L3Book({"A": 1, "B": 1})
    with pytest.raises(BookError):
        L3Book({"A": 70_000})


def test_a_symbol_that_moves_to_another_locate_follows_it():
    b = new_book()
    b.apply(A(AAPL, 1, b"B", 1, 10_000))
    b.apply(R(9, "AAPL"))
    assert b.stock(AAPL).instrument_id == NO_BOOK and b.stock(9).instrument_id == IID_AAPL
    assert b.apply(A(AAPL, 2, b"B", 1, 10_000)) == NO_BOOK
    assert b.book_payload(IID_AAPL)[0]["n_bids"] == 0


# ----------------------------------------------------------------------- invariants over sessions

SEEDS = [1, 2, 3, 4]


def _session(seed: int, n: int = 12_000):
    return synth.generate_session(seed, n, include_all_types=seed % 2 == 0)


@pytest.mark.parametrize("seed", SEEDS)
def test_streaming_a_consistent_session_never_rejects_never_crosses_never_goes_negative(seed):
    book = L3Book({"AAPL": 1, "SPY": 2}, track_all=True)
    for i, rec in enumerate(_session(seed)):
        n = getattr(rec, "executed_shares", None) or getattr(rec, "cancelled_shares", None)
        if n is not None:
            assert n <= book.order(rec.order_ref)[2]  # never more than the order has left
        book.apply(rec, i + 1)
        st = book.stock(rec.stock_locate)
        if st is not None:
            assert not st.is_crossed()
        if i % 2_000 == 0:
            assert book.audit() == []
    assert book.audit() == []
    assert book.rejected == 0 and book.counts[BookEvent.CROSSED] == 0
    assert all(o[2] > 0 for o in book._orders.values())
    assert all(s > 0 for st in book.stocks() for side in (st.bids, st.asks) for s in side.size.values())
    assert book.ended


@pytest.mark.parametrize("seed", SEEDS)
def test_vectorized_path_builds_the_same_book_as_the_streaming_path(seed):
    buf = synth.session_binaryfile(_session(seed))
    stream = L3Book({"AAPL": 1, "SPY": 2}, track_all=seed % 2 == 0, midnight_epoch_ns=10**18)
    changed_stream = set()
    for i, (off, msg) in enumerate(F.iter_frames(buf)):
        iid = stream.apply_raw(buf, off, len(msg), seq=i + 1)
        if iid >= 0:
            changed_stream.add(iid)
    vec = L3Book({"AAPL": 1, "SPY": 2}, track_all=seed % 2 == 0, midnight_epoch_ns=10**18)
    changed_vec = vec.apply_decoded(V.decode_buffer(buf))
    assert changed_vec == changed_stream == {1, 2}
    assert state(vec) == state(stream)
    for iid in (1, 2):
        assert vec.book_payload(iid).tobytes() == stream.book_payload(iid).tobytes()
    assert vec.audit() == []


def test_vectorized_path_counts_bad_frames_like_the_streaming_path():
    recs = _session(5, 2_000)
    msgs = [M.encode(r) for r in recs]
    msgs[100] = b"Z" + msgs[100][1:]
    msgs[200] = msgs[200] + b"\x00"
    buf = F.encode_binaryfile(msgs)
    stream = L3Book({"AAPL": 1}, track_all=True)
    for i, (off, msg) in enumerate(F.iter_frames(buf)):
        stream.apply_raw(buf, off, len(msg), seq=i + 1)
    vec = L3Book({"AAPL": 1}, track_all=True)
    vec.apply_decoded(V.decode_buffer(buf))
    assert vec.counts[BookEvent.DECODE_ERROR] == stream.counts[BookEvent.DECODE_ERROR] == 2
    assert state(vec) == state(stream)


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_a_damaged_session_is_counted_never_raises_and_never_breaks_the_invariants(seed):
    """Drop, repeat and garble messages of a consistent session; the book must stay sound."""
    rng = random.Random(seed)
    book = L3Book({"AAPL": 1, "MSFT": 2}, track_all=True)
    damaged = 0
    for i, rec in enumerate(_session(seed, 6_000)):
        raw = M.encode(rec)
        roll = rng.random()
        if roll < 0.04:
            damaged += 1
            continue  # lost: later messages name an order the book never saw
        if roll < 0.06:
            book.apply_raw(raw, seq=i)  # repeated: duplicate refs, double executions
        elif roll < 0.08:
            raw = raw[: rng.randrange(1, len(raw))]  # truncated
        elif roll < 0.10 and len(raw) > 23:
            b = bytearray(raw)
            b[rng.randrange(11, len(b))] = rng.randrange(256)  # a garbled body byte
            raw = bytes(b)
        book.apply_raw(raw, seq=i)
        if i % 500 == 0:
            assert book.audit() == []
    assert book.audit() == []
    assert book.rejected > 0
    assert sum(book.counts) > 6_000 - damaged - 1
