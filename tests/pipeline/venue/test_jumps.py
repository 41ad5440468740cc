"""Price jumps on replayed market data (``pipeline.venue.jumps``): a Bitget capture's shifted books still
pass the feed's own checksum and sit whole ticks from the recorded ones; an ITCH session's Add / Replace
prices move by whole $0.01 ticks, a stock's new orders alike, and its book stays free of rejections."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from pipeline.trading.bitget import Applied, BitgetBooks, make_decoder
from pipeline.trading.itch import messages as M
from pipeline.trading.itch.book import REJECTIONS
from pipeline.trading.messages import BOOK_DTYPE
from pipeline.venue.errors import VenueError
from pipeline.venue.itch_market import ItchVenueMarket, load_session
from pipeline.venue.jumps import ReplayJumps, price_tick, shift_itch_prices, with_jumps
from pipeline.venue.market import BookEvent, TradeEvent, VenueMarket
from pipeline.venue.sources import ReplaySource, make_source


def _offsets(shifted: list, plain: list, tick: Decimal) -> set:
    """The offsets in ticks of the shifted levels from the recorded ones (one side, same order)."""
    assert len(shifted) == len(plain) and [s for _, s in shifted] == [s for _, s in plain]
    return {(Decimal(a) - Decimal(b)) / tick for (a, _), (b, _) in zip(shifted, plain)}


def test_a_jumping_capture_passes_the_feeds_checksum_and_moves_by_whole_ticks(capture_path):
    src = make_source("replay", capture=capture_path, jump_prob=0.2, jump_ticks=3, seed=3)
    plain = ReplaySource.from_capture(capture_path)
    ids = {s: i for i, s in enumerate(src.inst_ids, 1)}
    venue, recorded = VenueMarket(src.inst_ids), VenueMarket(plain.inst_ids)
    decoder, books, out = make_decoder(), BitgetBooks(ids), np.zeros(1, BOOK_DTYPE)
    applied, last = {}, {}
    while not src.exhausted:
        for ev, rec in zip(src.take(1), plain.take(1)):
            if type(ev) is not BookEvent:
                continue
            ch = venue.apply_book(ev)
            recorded.apply_book(rec)
            if ch is None:
                continue
            res = books.apply(decoder.decode(venue.books_frame(ch).decode()), out)  # the feed's own check
            applied[res.name] = applied.get(res.name, 0) + 1
            tick = src.state.ticks[ev.inst_id]
            (b, a), (rb, ra) = venue.levels(ev.inst_id), recorded.levels(ev.inst_id)
            [off] = _offsets(b, rb, tick) | _offsets(a, ra, tick)  # the whole book by one offset
            assert off == int(off), (ev.inst_id, off)  # whole ticks
            assert abs(off - last.get(ev.inst_id, 0)) <= 3  # at most jump_ticks per event
            last[ev.inst_id] = off
    assert applied == {Applied.EMITTED.name: 443} and books.checksum_mismatches == 0
    assert books.checksums_verified == 443
    assert src.jumps > 40 and sum(1 for v in last.values() if v) >= 4  # ~ 0.2 * 443 draws


def test_jumps_are_seeded_counted_and_off_at_zero(capture_path):
    def run(seed):
        src = make_source("replay", capture=capture_path, jump_prob=0.05, jump_ticks=3, seed=seed)
        return src.take(10_000), src.jumps
    a, b, c = run(1), run(1), run(2)
    assert a == b and a != c and 5 < a[1] < 60  # ~ 0.05 * 443
    plain = ReplaySource.from_capture(capture_path)
    assert with_jumps(plain, 0.0, 3, 1) is plain


def test_a_jump_never_takes_a_price_to_zero_and_trades_move_with_the_book():
    j, tick = ReplayJumps(1.0, 3, seed=5, ticks={"X": 0.01}), Decimal("0.01")
    for i in range(200):  # every event jumps; the recorded book sits 1 tick above 0
        trade = {"ts": str(i), "price": "0.02", "size": "1", "side": "buy"}
        ev, tr = j.apply([BookEvent("X", True, [["0.01", "1"]], [["0.02", "1"]], i), TradeEvent("X", [trade], i)])
        off = j.offsets["X"]
        assert off >= 0 and ev.bids == [[f"{Decimal('0.01') + off * tick}", "1"]]
        assert tr.trades == [{**trade, "price": f"{Decimal('0.02') + off * tick}"}]
    assert j.jumps == 200 and max(j.offsets.values()) > 3
    assert price_tick(["1.5", "2.250", "3"]) == Decimal("0.001") and price_tick([]) == 1


@pytest.mark.parametrize("prob, ticks, field", [(1.5, 3, "jump_prob"), (-0.1, 3, "jump_prob"), (0.1, 0, "jump_ticks")])
def test_bad_jump_values_are_refused_naming_the_field(prob, ticks, field):
    with pytest.raises(VenueError, match=field):
        ReplayJumps(prob, ticks, seed=1)
    with pytest.raises(VenueError, match=f"itch_{field}"):
        shift_itch_prices([], prob, ticks, seed=1)


_PRICE_AT = {"A": 32, "F": 32, "U": 31}  # where the u32 price of an Add / Add MPID / Replace message is


def test_itch_jumps_move_a_stocks_new_orders_by_whole_cent_ticks_and_the_book_stays_consistent():
    plain, _ = load_session(None, seed=2, n_events=20_000)
    shifted, jumps = shift_itch_prices(plain, 0.01, 3, seed=7)
    assert len(shifted) == len(plain) and 50 < jumps < 150  # ~ 0.01 * the ~9,400 A / F / U messages
    offsets: dict[int, int] = {}
    order_offsets: dict[int, int] = {}
    moved = executions_moved = 0
    for s, p in zip(shifted, plain):
        rs, rp = M.decode(s), M.decode(p)
        kind = chr(p[0])
        if kind in _PRICE_AT:
            d = rs.price_p4 - rp.price_p4
            assert d % 100 == 0, (kind, d)  # whole $0.01 ticks
            prev = offsets.get(rp.stock_locate, 0)
            assert abs(d - prev) <= 300  # a jump moves 1..3 ticks
            offsets[rp.stock_locate] = order_offsets[rp.new_ref if kind == "U" else rp.order_ref] = d
            moved += d != 0
            at = _PRICE_AT[kind]
            assert s[:at] + s[at + 4:] == p[:at] + p[at + 4:]  # nothing else changes
        elif kind == "C":  # an execution's price moves with its order
            assert rs.exec_price_p4 - rp.exec_price_p4 == order_offsets[rp.order_ref]
            executions_moved += rs.exec_price_p4 != rp.exec_price_p4
        elif kind != "P":
            assert s == p
    assert moved > 1000 and executions_moved > 10 and len({v for v in offsets.values() if v}) >= 2
    stocks = {"AAPL": 1, "MSFT": 2}
    for msgs in (plain, shifted):
        market = ItchVenueMarket(msgs, stocks)
        market.on_published(1, len(msgs))
        assert sum(market.book.counts[e] for e in REJECTIONS) == 0  # no unknown reference, no over-execution
        for sym in stocks:
            bids, asks = market.levels(sym)
            assert bids and asks and all(Decimal(px) % Decimal("0.01") == 0 for px, _ in bids + asks)
    assert shift_itch_prices(plain, 0.0, 3, seed=7) == (plain, 0)
