"""The paper venue's ITCH market (pipeline/venue/itch_market.py): sessions from any BinaryFILE with what
is broken counted, the replayed Level-3 book as the order engine's market (levels, executions as trades),
and the equity rules ($0.01 ticks, whole shares)."""

from __future__ import annotations

import gzip
from decimal import Decimal

import pytest

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.framing import encode_binaryfile
from pipeline.trading.itch.synth import generate_binaryfile
from pipeline.venue.errors import VenueError
from pipeline.venue.itch_market import ItchVenueMarket, load_session, rules
from pipeline.venue.order_fields import OrderRejected
from pipeline.venue.orders import OrderEngine


def R(locate, symbol):
    return M.StockDirectory(locate, 0, 1, M.pad_alpha(symbol, 8), b"Q", b"N", 100, b"N", b"C", b"  ", b"P",
                            b"N", b"N", b"1", b"N", 0, b"N")


def A(ref, side, shares, px_p4, loc=1, symbol="AAPL"):
    return M.AddOrder(loc, 0, 1_000, ref, side, shares, M.pad_alpha(symbol, 8), px_p4)


def session(*records) -> list[bytes]:
    return [M.encode(r) for r in records]


def market_and_engine(msgs):
    market = ItchVenueMarket(msgs, {"AAPLUSDT": 1}, {"AAPL": 1})
    engine = OrderEngine(rules(market.symbols), market.levels, lambda: 0)
    market.add_market_listener(engine)
    return market, engine


def place(engine, side, price, size="10", force="gtc", coid="c1"):
    return engine.place({"symbol": "AAPLUSDT", "side": side, "orderType": "limit", "force": force, "price": price,
                         "size": size, "clientOid": coid})


def test_the_replayed_book_is_the_engines_market_and_its_executions_fill_resting_orders():
    msgs = session(R(1, "AAPL"), A(1, b"B", 300, 1_000_100), A(2, b"S", 200, 1_000_300), A(3, b"B", 100, 1_000_000),
                   M.OrderExecuted(1, 0, 2_000, 2, 150, 7))
    market, engine = market_and_engine(msgs)
    market.on_published(1, 4)
    assert market.levels("AAPLUSDT") == ([["100.01", "300"], ["100", "100"]], [["100.03", "200"]])
    assert market.levels("AAPLUSDT", 1) == ([["100.01", "300"]], [["100.03", "200"]])
    with pytest.raises(OrderRejected):
        place(engine, "buy", "100.03", force="post_only", coid="x")  # post-only crossing the ITCH ask
    resting = place(engine, "sell", "100.02")
    assert resting.filled == 0
    market.on_published(5, 1)  # 150 shares of the ask at 100.03 executed: a trade through our ask
    assert resting.filled == Decimal("10") and engine.position("AAPLUSDT") == Decimal("-10")
    assert market.applied == 5 and market.listener_errors == 0


def test_orders_off_the_cent_tick_or_in_fractions_of_a_share_are_refused():
    market, engine = market_and_engine(session(R(1, "AAPL")))
    market.on_published(1, 1)
    for price, size in (("100.005", "10"), ("100.01", "1.5")):
        with pytest.raises(OrderRejected):
            place(engine, "buy", price, size=size, coid=f"{price}-{size}")
    assert place(engine, "buy", "100.01", size="7", coid="ok").size == Decimal("7")


def test_a_listener_that_raises_is_counted_and_the_market_goes_on():
    class Broken:
        def book_changed(self, symbol):
            raise RuntimeError("boom")

        def traded(self, symbol, trades):
            raise RuntimeError("boom")

    market = ItchVenueMarket(session(R(1, "AAPL"), A(1, b"B", 100, 1_000_000)), {"AAPL": 1})
    market.add_market_listener(Broken())
    market.on_published(1, 2)
    assert market.listener_errors == 1 and market.listener_failures == ["RuntimeError: boom"]
    assert market.levels("AAPL")[0] == [["100", "100"]]


def test_any_binaryfile_loads_with_truncation_and_oversized_frames_counted(tmp_path):
    good = generate_binaryfile(2, 300)
    whole = tmp_path / "whole.itch"
    whole.write_bytes(good)
    msgs, counts = load_session(str(whole))
    assert len(msgs) == counts["messages"] > 300 and counts["truncated"] == counts["oversized"] == 0

    cut = tmp_path / "cut.itch.gz"
    cut.write_bytes(gzip.compress(good[: len(good) // 2 + 3]))
    msgs, counts = load_session(str(cut))
    assert counts["truncated"] == 1 and 0 < len(msgs) < 300

    garbage = tmp_path / "garbage.itch"
    garbage.write_bytes(encode_binaryfile([b"\x07" * 2000, b"Z" * 30, M.encode(R(1, "AAPL"))]))
    msgs, counts = load_session(str(garbage))
    assert counts["oversized"] == 1 and len(msgs) == 2, "a frame no datagram holds is left out, the rest kept"

    with pytest.raises(VenueError, match="holds no message"):
        (tmp_path / "empty.itch").write_bytes(b"\x00\x00")
        load_session(str(tmp_path / "empty.itch"))
    with pytest.raises(VenueError, match="cannot be read"):
        load_session(str(tmp_path / "missing.itch"))


def test_without_a_path_the_session_is_the_synthetic_generators():
    msgs, counts = load_session(None, seed=3, n_events=50, symbols=("AAPL",))
    assert counts == {"messages": len(msgs), "truncated": 0, "oversized": 0, "read_errors": 0} and len(msgs) > 50


def test_make_itch_builds_the_publisher_and_with_itch_orders_the_market_from_the_venue_params(tmp_path):
    from pipeline.runtime.config import InstrumentConfig
    from pipeline.venue.itch_market import make_itch
    from procs.venue import parse_params

    inst = [InstrumentConfig(id=1, symbol="AAPLUSDT", tick_size=0.01, lot_size=1)]
    assert make_itch(parse_params("venue", {}), inst) == (None, None, {})
    with pytest.raises(VenueError, match="itch_orders needs the ITCH session on"):
        make_itch(parse_params("venue", {"itch_orders": True}), inst)
    p = parse_params("venue", {"itch_port_file": str(tmp_path / "feed.port"), "itch_events": 100, "itch_orders": True,
                               "itch_stocks": {"AAPL": 1}, "itch_speed": 0.5, "itch_drop_seqs": [3]})
    publisher, market, counts = make_itch(p, inst)
    assert market.inst_ids == ["AAPLUSDT"] and publisher.on_published == market.on_published
    assert publisher.speed == 0.5 and publisher.drop_seqs == {3} and counts["messages"] == len(market.messages) > 100
