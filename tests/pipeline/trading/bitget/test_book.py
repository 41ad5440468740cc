"""Order books and payloads: the checksum rule (golden values and string pitfalls), snapshot +
update merging, seq and checksum integrity (invalidate, resync, recover), books15, BOOK / TRADE
payload contents and their layout against ``pipeline.trading.messages``."""

from __future__ import annotations


import crc32c
import numpy as np
import pytest

from pipeline.trading.bitget.book import (
    BOOK_STRUCT,
    BOOK_STRUCTS,
    TRADE_STRUCT,
    Applied,
    BitgetBooks,
    BookState,
    bitget_checksum,
    checksum_string,
)
from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.protocol import FrameKind, Subscription, make_decoder
from pipeline.trading.messages import BOOK_DTYPE, BOOK_FLAG_SNAPSHOT, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL
from tests.support.frames import depth_frame, trade_frame

# --------------------------------------------------------------------------------- layout pins


def test_book_struct_is_the_book_dtype_byte_for_byte():
    values = list(range(60))
    raw = BOOK_STRUCT.pack(0x0102, 0x0304, 15, 14, 0x1122334455667788, 0x0A0B0C0D0E0F1011, *map(float, values))
    assert len(raw) == BOOK_DTYPE.itemsize == 504
    rec = np.frombuffer(raw, BOOK_DTYPE)[0]
    assert (rec["instrument_id"], rec["flags"], rec["n_bids"], rec["n_asks"]) == (0x0102, 0x0304, 15, 14)
    assert (rec["seq"], rec["exch_ts_ns"]) == (0x1122334455667788, 0x0A0B0C0D0E0F1011)
    assert rec["bid_px"].tolist() == values[0:15] and rec["bid_sz"].tolist() == values[15:30]
    assert rec["ask_px"].tolist() == values[30:45] and rec["ask_sz"].tolist() == values[45:60]


@pytest.mark.parametrize("nb", [0, 1, 7, 14, 15])
@pytest.mark.parametrize("na", [0, 2, 15])
def test_padded_book_structs_pack_the_book_struct_bytes_with_zeros(nb, na):
    bids = [(1000.0 - i, 1.0 + i) for i in range(nb)]
    asks = [(1001.0 + i, 2.0 + i) for i in range(na)]
    hdr = (7, BOOK_FLAG_SNAPSHOT, nb, na, 42, 1695710946294000000)
    zb, za = [0.0] * (15 - nb), [0.0] * (15 - na)
    ref = BOOK_STRUCT.pack(*hdr, *[p for p, _ in bids], *zb, *[s for _, s in bids], *zb,
                           *[p for p, _ in asks], *za, *[s for _, s in asks], *za)
    out = bytearray(b"\xff" * 504)  # stale bytes must be overwritten, the pads included
    BOOK_STRUCTS[nb][na].pack_into(out, 0, *hdr, *[p for p, _ in bids], *[s for _, s in bids],
                                   *[p for p, _ in asks], *[s for _, s in asks])
    assert bytes(out) == ref


def test_trade_struct_is_the_trade_dtype_byte_for_byte():
    raw = TRADE_STRUCT.pack(7, TRADE_SIDE_SELL, 2**64 - 1, 1695709835822000000, 26293.4, 0.0013)
    assert len(raw) == TRADE_DTYPE.itemsize == 40 and raw[3:8] == bytes(5)
    rec = np.frombuffer(raw, TRADE_DTYPE)[0]
    assert (rec["instrument_id"], rec["side"], rec["trade_id"]) == (7, TRADE_SIDE_SELL, 2**64 - 1)
    assert (rec["exch_ts_ns"], rec["price"], rec["size"]) == (1695709835822000000, 26293.4, 0.0013)


# ------------------------------------------------------------------------------------ checksum


def crc32_ieee_bitwise(data: bytes) -> int:
    """Reference IEEE CRC-32 (reflected poly 0xEDB88320), one bit at a time, as a signed int32."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return crc - 2**32 if crc >= 2**31 else crc


SPEC_1 = ([["43231.1", "4"], ["43231", "6"]], [["43232.8", "9"], ["43232.9", "8"]])
SPEC_2 = ([["3366.1", "7"]], [["3366.8", "9"], ["3368", "8"], ["3372", "8"]])


def test_checksum_string_matches_the_venue_examples():
    assert checksum_string(*SPEC_1) == "43231.1:4:43232.8:9:43231:6:43232.9:8"  # bid1:ask1:bid2:ask2
    assert checksum_string(*SPEC_2) == "3366.1:7:3366.8:9:3368:8:3372:8"  # missing bids skipped


def test_checksum_golden_values_are_signed_ieee_crc32():
    assert bitget_checksum(*SPEC_1) == -1504501796  # CRC 2790465500 >= 2**31: reported negative
    assert bitget_checksum(*SPEC_2) == 831078360
    for spec in (SPEC_1, SPEC_2):
        text = checksum_string(*spec).encode()
        assert bitget_checksum(*spec) == crc32_ieee_bitwise(text)
        assert bitget_checksum(*spec) % 2**32 != crc32c.crc32c(text)  # not CRC-32C


def test_checksum_uses_the_original_strings_trailing_zeros_included():
    as_sent = ([["0.0100", "1.50"]], [["0.0200", "3"]])
    normalised = ([["0.01", "1.5"]], [["0.02", "3"]])
    assert checksum_string(*as_sent) == "0.0100:1.50:0.0200:3"
    assert bitget_checksum(*as_sent) == -466963937
    assert bitget_checksum(*normalised) == 1689386104  # what a float round trip would give: wrong


def test_checksum_covers_only_the_top_25_levels_a_side():
    bids = [[f"{100 - i}.5", "1"] for i in range(30)]
    asks = [[f"{101 + i}.5", "2"] for i in range(30)]
    assert bitget_checksum(bids, asks) == bitget_checksum(bids[:25], asks[:25])
    assert bitget_checksum(bids, asks) != bitget_checksum(bids[:24], asks[:25])
    assert checksum_string([], asks[:2]) == "101.5:2:102.5:2"


# ------------------------------------------------------------------------------- books channel

IDS = {"BTCUSDT": 7, "ETHUSDT": 8}
SUB = Subscription("SPOT", "books", "BTCUSDT")


class Feed:
    """Decoder + books + a BOOK buffer, fed one frame at a time (what the feed process does)."""

    def __init__(self, **kw) -> None:
        self.decoder = make_decoder()
        self.books = BitgetBooks(IDS, **kw)
        self.out = np.zeros(1, BOOK_DTYPE)

    def push(self, frame: bytes) -> Applied:
        self.out.view(np.uint8)[:] = 0xAB  # so an untouched buffer shows
        d = self.decoder.decode(frame)
        assert d.reason == 0, d.detail
        return self.books.apply(d, self.out)

    @property
    def written(self) -> bool:
        return not (self.out.view(np.uint8) == 0xAB).all()

    @property
    def rec(self):
        return self.out[0]


def snap(bids, asks, **kw) -> bytes:
    return depth_frame(bids, asks, checksum=bitget_checksum(bids, asks), **kw)


def upd(bids, asks, book_after, **kw) -> bytes:
    """An update whose checksum is that of ``book_after`` = (bids, asks) best first."""
    return depth_frame(bids, asks, action="update", checksum=bitget_checksum(*book_after), **kw)


BIDS0 = [["100.5", "1.0"], ["100.4", "2"], ["100.0", "3"]]
ASKS0 = [["100.6", "0.5"], ["100.7", "1"], ["101", "4.00"]]


def test_snapshot_fills_the_book_payload():
    f = Feed()
    assert f.push(snap(BIDS0, ASKS0, seq=42, ts="1695710946294")) == Applied.EMITTED
    r = f.rec
    assert (r["instrument_id"], r["flags"], r["n_bids"], r["n_asks"]) == (7, BOOK_FLAG_SNAPSHOT, 3, 3)
    assert (r["seq"], r["exch_ts_ns"]) == (42, 1695710946294 * 1_000_000)  # exact integer ms -> ns
    assert r["bid_px"][:3].tolist() == [100.5, 100.4, 100.0] and r["bid_sz"][:3].tolist() == [1, 2, 3]
    assert r["ask_px"][:3].tolist() == [100.6, 100.7, 101] and r["ask_sz"][:3].tolist() == [0.5, 1, 4]
    assert not r["bid_px"][3:].any() and not r["ask_sz"][3:].any()  # zero past n_bids / n_asks
    book = f.books.book("books", "BTCUSDT")
    assert book.state == BookState.VALID and book.checksums_verified == 1
    assert book.bids() == [tuple(b) for b in BIDS0] and book.asks() == [tuple(a) for a in ASKS0]


def test_update_deletes_on_size_zero_replaces_and_inserts_in_order():
    f = Feed()
    f.push(snap(BIDS0, ASKS0))
    after = (
        [["100.5", "1.0"], ["100.45", "9"], ["100.0", "3.5"]],  # 100.4 deleted, 100.45 new, 100.0 replaced
        [["100.55", "2"], ["100.6", "0.5"], ["100.7", "1"], ["101", "4.00"]],
    )
    frame = upd([["100.4", "0"], ["100.0", "3.5"], ["100.45", "9"], ["99", "0"]], [["100.55", "2"]], after)
    assert f.push(frame) == Applied.EMITTED
    assert f.rec["flags"] == 0 and (f.rec["n_bids"], f.rec["n_asks"]) == (3, 4)
    assert f.rec["bid_px"][:3].tolist() == [100.5, 100.45, 100.0] and f.rec["bid_sz"][:3].tolist() == [1, 9, 3.5]
    assert f.rec["ask_px"][:4].tolist() == [100.55, 100.6, 100.7, 101]
    book = f.books.book("books", "BTCUSDT")
    assert (book.bids(), book.asks()) == ([tuple(b) for b in after[0]], [tuple(a) for a in after[1]])
    assert book.checksums_verified == 2


def test_levels_are_keyed_by_number_but_keep_the_latest_text_for_the_checksum():
    f = Feed()
    f.push(snap([["0.0100", "5"]], [["0.0200", "1.50"]]))
    # the venue re-sends the same price as "0.01": one level, whose text is now "0.01:6"
    assert f.push(upd([["0.01", "6"]], [], ([["0.01", "6"]], [["0.0200", "1.50"]]))) == Applied.EMITTED
    book = f.books.book("books", "BTCUSDT")
    assert book.bids() == [("0.01", "6")] and book.asks() == [("0.0200", "1.50")]
    # a checksum built from normalised strings does not match: the original text is what counts
    frame = depth_frame([], [["0.02", "1.5"]], action="update", checksum=bitget_checksum([["0.01", "6"]], [["0.02", "1.5"]]))
    assert f.push(frame) == Applied.EMITTED  # "0.02" replaced "0.0200" at the same price...
    assert book.asks() == [("0.02", "1.5")]
    bad = depth_frame([], [], action="update", checksum=bitget_checksum([["0.01", "6"]], [["0.0200", "1.50"]]))
    assert f.push(bad) == Applied.CHECKSUM_MISMATCH  # ...so the old text no longer matches


def test_checksum_mismatch_invalidates_until_a_fresh_snapshot():
    f = Feed()
    f.push(snap(BIDS0, ASKS0))
    wrong = depth_frame([["100.5", "1.1"]], [], action="update", checksum=12345)
    assert f.push(wrong) == Applied.CHECKSUM_MISMATCH
    assert not f.written
    book = f.books.book("books", "BTCUSDT")
    assert book.state == BookState.INVALID and book.checksum_mismatches == 1
    assert f.books.take_resyncs() == [SUB]  # resubscribe for a fresh snapshot
    assert f.books.take_resyncs() == []
    # later updates, even with a matching checksum, produce nothing and ask for nothing more
    assert f.push(upd([["100.5", "2"]], [], ([["100.5", "2"]], []))) == Applied.INVALID
    assert not f.written and f.books.take_resyncs() == []
    assert f.books.applied[Applied.INVALID] == 1
    # the fresh snapshot restores it
    assert f.push(snap(BIDS0, ASKS0)) == Applied.EMITTED
    assert f.written and f.rec["flags"] == BOOK_FLAG_SNAPSHOT and book.state == BookState.VALID
    assert f.push(upd([["100.5", "0"]], [], (BIDS0[1:], ASKS0))) == Applied.EMITTED


def test_seq_gap_by_pseq_invalidates():
    f = Feed()
    f.push(snap(BIDS0, ASKS0, seq=10))
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=11, pseq=10)) == Applied.EMITTED
    assert f.rec["seq"] == 11
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=14, pseq=12)) == Applied.SEQ_GAP  # 11 -> (12) 14: a push lost
    assert not f.written and f.books.take_resyncs() == [SUB]
    assert f.books.book("books", "BTCUSDT").seq_gaps == 1
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=15, pseq=14)) == Applied.INVALID


def test_seq_may_jump_without_pseq_but_never_go_back():
    f = Feed()
    f.push(snap(BIDS0, ASKS0, seq=395681152))
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=395681167)) == Applied.EMITTED  # real jump of 15
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=395681167)) == Applied.EMITTED  # repeat: idempotent
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=395681160)) == Applied.SEQ_GAP  # out of order
    assert f.books.take_resyncs() == [SUB]


def test_a_snapshot_resets_the_seq_baseline():
    f = Feed()
    f.push(snap(BIDS0, ASKS0, seq=500))
    assert f.push(snap(BIDS0, ASKS0, seq=7)) == Applied.EMITTED  # after a resubscribe
    assert f.push(upd([], [], (BIDS0, ASKS0), seq=8, pseq=7)) == Applied.EMITTED


def test_an_update_before_any_snapshot_is_dropped_and_asks_for_one_resync():
    f = Feed()
    assert f.push(upd([["1", "1"]], [], ([["1", "1"]], []))) == Applied.AWAITING_SNAPSHOT
    assert f.push(upd([["1", "2"]], [], ([["1", "2"]], []))) == Applied.AWAITING_SNAPSHOT
    assert not f.written and f.books.take_resyncs() == [SUB]


def test_reset_after_a_reconnect_waits_for_new_snapshots():
    f = Feed()
    f.push(snap(BIDS0, ASKS0))
    f.books.reset()
    assert f.books.book("books", "BTCUSDT").state == BookState.AWAITING_SNAPSHOT
    assert f.push(upd([], [], (BIDS0, ASKS0))) == Applied.AWAITING_SNAPSHOT
    assert f.push(snap(BIDS0, ASKS0)) == Applied.EMITTED


def test_zero_checksum_is_not_checked_and_only_top_15_reach_the_payload():
    f = Feed()
    bids = [[f"{1000 - i}", f"{i + 1}"] for i in range(40)]
    asks = [[f"{1001 + i}", f"{i + 1}"] for i in range(3)]
    assert f.push(depth_frame(bids, asks, checksum=0)) == Applied.EMITTED
    assert (f.rec["n_bids"], f.rec["n_asks"]) == (15, 3)
    assert f.rec["bid_px"].tolist() == [1000 - i for i in range(15)]
    assert f.books.book("books", "BTCUSDT").checksums_verified == 0


def test_unknown_instruments_are_counted_and_dropped():
    f = Feed()
    assert f.push(snap(BIDS0, ASKS0, inst_id="DOGEUSDT")) == Applied.UNKNOWN_INSTRUMENT
    assert not f.written and f.books.applied[Applied.UNKNOWN_INSTRUMENT] == 1


def test_non_book_frames_are_not_applied():
    f = Feed()
    d = f.decoder.decode("pong")
    assert f.books.apply(d, f.out) == Applied.NOT_A_BOOK


def test_each_instrument_has_its_own_book():
    f = Feed()
    f.push(snap(BIDS0, ASKS0, inst_id="ETHUSDT"))
    assert f.rec["instrument_id"] == 8
    assert f.push(upd([], [], (BIDS0, ASKS0))) == Applied.AWAITING_SNAPSHOT  # BTCUSDT never synced


def test_bad_instrument_maps_are_refused():
    for bad in ({"": 1}, {"BTCUSDT": -1}, {"BTCUSDT": 70000}, {"BTCUSDT": True}, {1: 1}):
        with pytest.raises(BitgetError):
            BitgetBooks(bad)


# ------------------------------------------------------------------------------------- books15


def test_books15_emits_every_push_as_a_snapshot():
    f = Feed()
    for seq in (1, 5):
        assert f.push(depth_frame(BIDS0, ASKS0, channel="books15", seq=seq)) == Applied.EMITTED
        assert f.rec["flags"] == BOOK_FLAG_SNAPSHOT and f.rec["seq"] == seq
    assert f.push(depth_frame(BIDS0[:1], ASKS0, channel="books15", seq=6)) == Applied.EMITTED
    assert f.rec["n_bids"] == 1 and f.rec["bid_px"][1] == 0.0


def test_books15_book_lists_are_the_last_push_without_its_empty_levels():
    f = Feed()
    book = None
    for bids, asks in ((BIDS0, ASKS0), ([["100.5", "1"], ["100.4", "0"], ["100.3", "2"]], [["100.6", "0"], ["100.7", "3"]])):
        assert f.push(depth_frame(bids, asks, channel="books15")) == Applied.EMITTED
        book = f.books.book("books15", "BTCUSDT")
        live_b = [(p, s) for p, s in bids if float(s)]
        live_a = [(p, s) for p, s in asks if float(s)]
        assert book.bids() == live_b and book.asks() == live_a
        assert (book.bid_px, book.bid_sz) == ([float(p) for p, _ in live_b], [float(s) for _, s in live_b])
        assert (book.ask_px, book.ask_sz) == ([float(p) for p, _ in live_a], [float(s) for _, s in live_a])
        assert book.top() == (book.bid_px, book.bid_sz, book.ask_px, book.ask_sz)
        assert (f.rec["n_bids"], f.rec["n_asks"]) == (len(live_b), len(live_a))
        assert f.rec["bid_px"][: len(live_b)].tolist() == book.bid_px and not f.rec["bid_px"][len(live_b):].any()
        assert f.rec["ask_sz"][: len(live_a)].tolist() == book.ask_sz and not f.rec["ask_sz"][len(live_a):].any()
    f.books.reset()
    assert (book.bids(), book.asks(), book.bid_px, book.ask_sz) == ([], [], [], [])


def test_books15_drops_a_stale_push_without_invalidating():
    f = Feed()
    f.push(depth_frame(BIDS0, ASKS0, channel="books15", seq=9))
    assert f.push(depth_frame(BIDS0, ASKS0, channel="books15", seq=8)) == Applied.STALE
    assert not f.written
    assert f.push(depth_frame(BIDS0, ASKS0, channel="books15", seq=10)) == Applied.EMITTED


def test_books15_checksum_mismatch_drops_that_push_and_needs_no_resubscribe():
    f = Feed()
    assert f.push(depth_frame(BIDS0, ASKS0, channel="books15", checksum=bitget_checksum(BIDS0, ASKS0))) == Applied.EMITTED
    assert f.push(depth_frame(BIDS0, ASKS0, channel="books15", checksum=1)) == Applied.CHECKSUM_MISMATCH
    assert not f.written and f.books.take_resyncs() == []
    assert f.books.book("books15", "BTCUSDT").state == BookState.INVALID
    assert f.push(depth_frame(BIDS0, ASKS0, channel="books15")) == Applied.EMITTED  # the next push is whole


# -------------------------------------------------------------------------------------- trades

TRADES = [
    {"ts": "1695709835822", "price": "26293.4", "size": "0.0013", "side": "buy", "tradeId": "1000000002"},
    {"ts": "1695709835800", "price": "26293.1", "size": "0.5", "side": "sell", "tradeId": "1000000001"},
]


def test_trade_update_fills_trade_payloads_oldest_first():
    f = Feed()
    d = f.decoder.decode(trade_frame(TRADES, inst_id="ETHUSDT"))
    assert d.kind == FrameKind.TRADE
    assert f.books.fill_trades(d) == 2
    recs = f.books.trade_records[:2]
    assert recs["instrument_id"].tolist() == [8, 8]
    assert recs["side"].tolist() == [TRADE_SIDE_SELL, TRADE_SIDE_BUY]
    assert recs["trade_id"].tolist() == [1000000001, 1000000002]
    assert recs["exch_ts_ns"].tolist() == [1695709835800_000000, 1695709835822_000000]
    assert recs["price"].tolist() == [26293.1, 26293.4] and recs["size"].tolist() == [0.5, 0.0013]


def test_trade_snapshots_are_old_trades_and_skipped_unless_asked_for():
    frame = trade_frame(TRADES, action="snapshot")
    f = Feed()
    assert f.books.fill_trades(f.decoder.decode(frame)) == 0 and f.books.trade_snapshots_skipped == 2
    g = Feed(emit_trade_snapshots=True)
    assert g.books.fill_trades(g.decoder.decode(frame)) == 2


def test_trades_beyond_the_buffer_are_counted_and_dropped():
    f = Feed()
    out = np.zeros(1, TRADE_DTYPE)
    assert f.books.fill_trades(f.decoder.decode(trade_frame(TRADES)), out) == 1
    assert f.books.trades_truncated == 1 and out[0]["trade_id"] == 1000000001


def test_trades_of_unknown_instruments_and_non_trades_give_nothing():
    f = Feed()
    assert f.books.fill_trades(f.decoder.decode(trade_frame(TRADES, inst_id="DOGEUSDT"))) == 0
    assert f.books.fill_trades(f.decoder.decode(snap(BIDS0, ASKS0))) == 0


def test_a_resync_subscription_uses_the_venue_spelling_of_the_inst_type():
    f = Feed()
    f.push(snap(BIDS0, ASKS0, inst_type="usdt-futures"))
    f.push(depth_frame([], [], action="update", checksum=1, inst_type="usdt-futures"))
    assert f.books.take_resyncs() == [Subscription("USDT-FUTURES", "books", "BTCUSDT")]
