"""The evaluation's market sources: the synthetic market through the feed's book building, captures
and ITCH files (through the ITCH feed's own book: the same TRADE / BOOK payloads) with their bad input
counted per reason (never a crash)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.bitget.capture import RECV, format_line
from pipeline.trading.evaluation.replay import (CAPTURE_LOT_NOTIONAL, SYNTH_START_MS, EvaluationError, TapeInstrument,
                                               capture_tape, itch_tape, synthetic_parts, synthetic_tape)
from pipeline.trading.itch import messages as M
from pipeline.trading.itch.framing import encode_binaryfile
from pipeline.trading.itch.synth import generate_binaryfile
from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_HIDDEN_REPORTED, OFF_TRADE_FLAGS, TRADE_DTYPE,
                                       TRADE_FLAG_HIDDEN, TRADE_SIDE_BUY, Kind)
from pipeline.venue.market import BookEvent, TradeEvent, VenueMarket

BTC = TapeInstrument(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001)
ETH = TapeInstrument(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001)


def _book(payload: bytes):
    return np.frombuffer(payload, BOOK_DTYPE, 1)[0]


# ------------------------------------------------------------------------------------- synthetic
def test_synthetic_tape_is_the_venue_book_and_deterministic():
    a = synthetic_tape([BTC, ETH], seed=3, steps=50)
    b = synthetic_tape([BTC, ETH], seed=3, steps=50)
    c = synthetic_tape([BTC, ETH], seed=4, steps=50)
    assert a.events == b.events
    assert a.events != c.events
    # one snapshot BOOK per instrument at step 0, then one BOOK per instrument per step (51 each)
    assert a.books == 2 * 51
    assert not a.bad
    assert a.counts["checksums_verified"] == 102
    first = a.events[0]
    assert first.kind == Kind.BOOK and first.ts_ns == SYNTH_START_MS * 1_000_000
    # the last BOOK of BTC equals the venue's own book rebuilt from the same seeded source
    from pipeline.venue.sources import InstrumentSpec, SyntheticSource

    src = SyntheticSource([InstrumentSpec("BTCUSDT", 0.1, 0.0001)], seed=3, start_ms=SYNTH_START_MS)
    vm = VenueMarket(["BTCUSDT"])
    for ev in src.initial_events():
        vm.apply_book(ev)
    for _ in range(50):
        for ev in src.take(1):
            (vm.apply_book if isinstance(ev, BookEvent) else vm.apply_trades)(ev)
    bids, asks = vm.levels("BTCUSDT", 15)
    last = _book([e for e in a.events if e.kind == Kind.BOOK and e.instrument_id == 1][-1].payload)
    assert last["bid_px"][:15].tolist() == [float(p) for p, _ in bids]
    assert last["ask_sz"][:15].tolist() == [float(s) for _, s in asks]
    assert last["exch_ts_ns"] == (SYNTH_START_MS + 50 * 20) * 1_000_000
    # within a step, the trades come before the book that shows them
    kinds = [e.kind for e in a.events if e.ts_ns == last["exch_ts_ns"] and e.instrument_id == 1]
    assert kinds[-1] == Kind.BOOK and set(kinds[:-1]) <= {Kind.TRADE}


def test_synthetic_tape_in_worker_processes_is_the_same_tape():
    one = synthetic_tape([BTC, ETH], seed=9, steps=40)
    two = synthetic_tape([BTC, ETH], seed=9, steps=40, workers=2)
    assert two.events == one.events and two.counts == one.counts and two.source == one.source


def test_synthetic_tape_refuses_no_steps():
    with pytest.raises(EvaluationError, match="at least one step"):
        synthetic_tape([BTC], seed=1, steps=0)
    with pytest.raises(EvaluationError, match="workers must be >= 1"):
        synthetic_tape([BTC], seed=1, steps=1, workers=0)


# ------------------------------------------------------------------------------------- captures
def bad_capture(path) -> None:
    """A capture with a garbage line, a frame that is not JSON, a checksum failure (then an update on
    the invalid book), a fresh snapshot, a seq gap, and one trade."""
    vm = VenueMarket(["BTCUSDT"])
    lines = ["wss://example <-> 1.0\n"]
    t = [10.0]

    def recv(frame: bytes) -> None:
        t[0] += 0.1
        lines.append(format_line(t[0], RECV, frame.decode()))

    snap = BookEvent("BTCUSDT", True, [["100.0", "1.0"], ["99.9", "2.0"]], [["100.1", "1.5"], ["100.2", "3.0"]], 1000)
    recv(vm.books_frame(vm.apply_book(snap)))  # 1 BOOK
    recv(vm.books_frame(vm.apply_book(BookEvent("BTCUSDT", False, [["100.0", "1.2"]], [], 1001))))  # 2 BOOK
    lines.append("this is not a capture line\n")  # garbage_line
    recv(b'{"action":"update","arg":{"instType":"SPOT","channel":"books","instId":"BTCUSDT"},"data":[{')  # bad JSON
    vm.corrupt_next_checksum()
    recv(vm.books_frame(vm.apply_book(BookEvent("BTCUSDT", False, [["100.0", "1.3"]], [], 1002))))  # mismatch
    recv(vm.books_frame(vm.apply_book(BookEvent("BTCUSDT", False, [["100.0", "1.4"]], [], 1003))))  # invalid book
    recv(vm.books_snapshot_frame("BTCUSDT"))  # 3 BOOK: a fresh snapshot
    vm.skip_seq(-5)
    recv(vm.books_frame(vm.apply_book(BookEvent("BTCUSDT", False, [["100.0", "1.5"]], [], 1004))))  # seq gap
    trades = vm.apply_trades(TradeEvent("BTCUSDT", [{"ts": "1005", "price": "100.1", "size": "0.5", "side": "buy"}],
                                        1005))
    recv(vm.trades_frame(trades))  # 1 TRADE
    path.write_text("".join(lines))


def test_capture_bad_input_is_counted_not_fatal(tmp_path):
    p = tmp_path / "bad.capture"
    bad_capture(p)
    tape = capture_tape([p])
    assert tape.bad == {"garbage_line": 1, "frame_bad_json": 1, "checksum_mismatch": 1, "invalid": 1, "seq_gap": 1}
    assert [e.kind for e in tape.events] == [Kind.BOOK, Kind.BOOK, Kind.BOOK, Kind.TRADE]
    assert tape.instruments == (TapeInstrument(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.1),)
    second = _book(tape.events[1].payload)
    assert (second["n_bids"], second["n_asks"]) == (2, 2)
    assert second["bid_px"][:2].tolist() == [100.0, 99.9] and second["bid_sz"][:2].tolist() == [1.2, 2.0]
    tr = np.frombuffer(tape.events[3].payload, TRADE_DTYPE, 1)[0]
    assert (tr["side"], tr["price"], tr["size"]) == (TRADE_SIDE_BUY, 100.1, 0.5)
    assert tape.events[3].ts_ns == 10_800_000_000  # the receive time of the 8th received frame (10.0 + 8 x 0.1 s)


def test_capture_shared_file_replays(tmp_path, capture_path):
    tape = capture_tape([capture_path])
    assert len(tape.instruments) == 8 and tape.books > 400 and not tape.bad
    # v1 frames carry no seq: each instrument's BOOKs are numbered 1, 2, ... as the paper venue numbers them
    seqs: dict[int, list[int]] = {}
    for e in tape.events:
        if e.kind == Kind.BOOK:
            seqs.setdefault(e.instrument_id, []).append(int(_book(e.payload)["seq"]))
    assert all(v == list(range(1, len(v) + 1)) for v in seqs.values())
    # lots worth at least CAPTURE_LOT_NOTIONAL: AVAX (about 90 USDT then) is sized in 0.0001, traded in 0.1
    avax = tape.instruments[0]
    mid = next(float(_book(e.payload)["bid_px"][0] + _book(e.payload)["ask_px"][0]) / 2 for e in tape.events
               if e.kind == Kind.BOOK and e.instrument_id == avax.id)
    assert avax.symbol == "AVAXUSDT" and avax.tick_size == 0.0001 and avax.lot_size == 0.1
    assert 0.1 * mid >= CAPTURE_LOT_NOTIONAL > 0.01 * mid


def test_capture_unreadable_or_empty_is_a_clear_error(tmp_path):
    with pytest.raises(EvaluationError, match="nope.capture"):
        capture_tape([tmp_path / "nope.capture"])
    empty = tmp_path / "empty.capture"
    empty.write_text("garbage\n")
    with pytest.raises(EvaluationError, match="no book or trade push"):
        capture_tape([empty])


# ------------------------------------------------------------------------------------- ITCH
def _itch_session() -> list:
    ts = 34_200_000_000_000  # 09:30
    return [
        M.StockDirectory(stock_locate=1, tracking_number=0, timestamp_ns=ts, stock=b"AAPL    ", market_category=b"Q",
                         financial_status=b"N", round_lot_size=100, round_lots_only=b"N", issue_classification=b"C",
                         issue_sub_type=b"Z ", authenticity=b"P", short_sale_threshold=b"N", ipo_flag=b" ",
                         luld_ref_price_tier=b"1", etp_flag=b"N", etp_leverage_factor=0, inverse_indicator=b"N"),
        M.AddOrder(stock_locate=1, tracking_number=0, timestamp_ns=ts + 1, order_ref=1, side=b"B", shares=100,
                   stock=b"AAPL    ", price_p4=1_000_000),
        M.AddOrder(stock_locate=1, tracking_number=0, timestamp_ns=ts + 2, order_ref=2, side=b"S", shares=50,
                   stock=b"AAPL    ", price_p4=1_000_500),
        M.OrderExecuted(stock_locate=1, tracking_number=0, timestamp_ns=ts + 3, order_ref=2, executed_shares=20,
                        match_no=7),
        M.OrderDelete(stock_locate=1, tracking_number=0, timestamp_ns=ts + 4, order_ref=9),  # unknown ref
        M.OrderDelete(stock_locate=1, tracking_number=0, timestamp_ns=ts + 5, order_ref=1),
    ]


def test_itch_books_and_trades(tmp_path):
    p = tmp_path / "s.itch"
    p.write_bytes(encode_binaryfile([M.encode(r) for r in _itch_session()]))
    tape = itch_tape(p)
    assert tape.instruments == (TapeInstrument(id=1, symbol="AAPL", tick_size=0.01, lot_size=1.0),)
    assert [e.kind for e in tape.events] == [Kind.BOOK, Kind.BOOK, Kind.TRADE, Kind.BOOK, Kind.BOOK]
    tr = np.frombuffer(tape.events[2].payload, TRADE_DTYPE, 1)[0]
    assert (tr["side"], tr["price"], tr["size"]) == (TRADE_SIDE_BUY, 100.05, 20.0)  # a buyer took the ask
    after = _book(tape.events[3].payload)
    assert after["ask_sz"][0] == 30.0 and after["bid_px"][0] == 100.0
    assert tape.events[4].ts_ns == 34_200_000_000_005
    assert tape.bad == {"itch_unknown_ref": 1}


def test_itch_truncated_and_undecodable_messages_are_counted(tmp_path):
    msgs = [M.encode(r) for r in _itch_session()]
    msgs.insert(3, b"Z" + bytes(10))  # an unknown message type
    data = encode_binaryfile(msgs, end_of_session=False)
    p = tmp_path / "cut.itch"
    p.write_bytes(data[:-3])  # the last frame (the good delete) cut short
    tape = itch_tape(p)
    assert tape.bad == {"truncated_frame": 1, "itch_unknown_ref": 1, "itch_decode_error": 1}
    assert [e.kind for e in tape.events] == [Kind.BOOK, Kind.BOOK, Kind.TRADE, Kind.BOOK]
    with pytest.raises(EvaluationError, match="lists no"):
        itch_tape(p, symbols=["MSFT"])


def test_the_itch_tape_is_what_the_live_itch_feed_writes(tmp_path):
    from procs.feed import ItchFeedAgent
    from tests.support.context import feed_context
    from tests.support.wait import pump

    p = tmp_path / "synth.itch"
    p.write_bytes(generate_binaryfile(5, 1500, symbols=("AAPL", "MSFT", "SPY")))
    tape = itch_tape(p, symbols=["AAPL", "MSFT"])
    agent = ItchFeedAgent()
    agent.on_start(feed_context({"path": str(p), "midnight_epoch_ns": 0,
                                 "symbols": {i.symbol: i.id for i in tape.instruments}},
                                module="procs.feed:ItchFeedAgent", batch=4096))
    pump(agent, lambda: agent.ctx.stats["replay_done"], what="the end of the replay")
    live = [(k, bytes(payload)) for k, payload, _, _ in agent.ctx.outputs["md"].msgs]
    agent.on_close()
    replayed = [(e.kind, e.payload) for e in tape.events]
    hidden = [pl for k, pl in replayed if k == Kind.TRADE and pl[OFF_TRADE_FLAGS] & TRADE_FLAG_HIDDEN]
    assert tape.books > 100 and len(hidden) >= 3 and len(replayed) - tape.books - len(hidden) >= 20
    assert all(pl[2:4] == BOOK_FLAG_HIDDEN_REPORTED.to_bytes(2, "little") for k, pl in replayed if k == Kind.BOOK)
    assert replayed == live, "payload for payload, in the feed's order: each message's TRADEs before its BOOK"
    assert [e.ts_ns for e in tape.events if e.kind == Kind.TRADE] == [
        int(np.frombuffer(pl, TRADE_DTYPE, 1)[0]["exch_ts_ns"]) for k, pl in replayed if k == Kind.TRADE]


def _who(ins: TapeInstrument, events: list) -> tuple:
    """A ``per_instrument`` step: which process ran it, over what."""
    import os

    return os.getpid(), ins.symbol, len(events), sorted({e.instrument_id for e in events})


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_synthetic_parts_is_the_tape_with_each_instrument_s_work_done_where_it_was_replayed(workers):
    import os

    one = synthetic_tape([BTC, ETH], seed=9, steps=40)
    sp = synthetic_parts([BTC, ETH], seed=9, steps=40, workers=workers, per_instrument=_who)
    assert sp.tape.events == one.events and sp.tape.counts == one.counts and sp.tape.source == one.source
    assert [type(e.kind) for e in sp.tape.events] == [type(e.kind) for e in one.events]  # Kind, as replayed
    assert sp.processes == min(workers, 2)
    for part, ins in zip(sp.parts, (BTC, ETH)):
        assert part.instrument == ins
        mine = [k for k, e in enumerate(one.events) if e.instrument_id == ins.id]
        assert part.positions.tolist() == mine  # 41 BOOKs and the trades, in the tape's order
        pid, symbol, n, ids = part.result
        assert (symbol, n, ids) == (ins.symbol, len(mine), [ins.id])  # (replay_s, result_s: wall times, not results)
    pids = [p.result[0] for p in sp.parts]
    assert pids[0] == os.getpid()  # the first instrument in this process, the other in a forked one
    assert (pids[1] == os.getpid()) == (workers == 1)


def test_synthetic_parts_refuses_what_synthetic_tape_refuses():
    with pytest.raises(EvaluationError, match="workers must be >= 1"):
        synthetic_parts([BTC], seed=1, steps=1, workers=0)
    with pytest.raises(EvaluationError, match="at least one step"):
        synthetic_parts([BTC], seed=1, steps=0)
