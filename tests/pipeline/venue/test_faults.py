"""Stress-mode faults of the paper venue (issue #8): Gaussian delay jitter that keeps frame order,
synthetic price jumps that still verify, timed disconnects / seq gaps / bad checksums on the
market clock, and the order side's count of orders valid / invalid against the book as it arrived.

The sans-I/O parts (``DelayFault``, ``FaultTimer``, ``SyntheticMarket``, ``OrderEngine``) are tested
directly; the server parts with a real WebSocket client on 127.0.0.1 whose depth pushes go through
``BitgetBooks`` (the feed's own checks). Venues start paused and are driven by ``advance(n)``, which
moves market time by n synthetic steps (20 ms each), so every timed fault fires at a known step.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest
from websockets.exceptions import ConnectionClosed

from pipeline.trading.bitget import Applied, FrameKind
from pipeline.venue.errors import VenueError
from pipeline.venue.order_fields import InstrumentRules, OrderRejected
from pipeline.venue.orders import OrderEngine
from pipeline.runtime.portfile import read_port_file
from pipeline.venue.faults import (
    GAP_SEQ,
    MAX_JITTER_DELAY_MS,
    DelayFault,
    FaultInjector,
    FaultParams,
    FaultTimer,
    TimedFault,
)
from pipeline.venue.server import VenueServer
from pipeline.venue.sources import SyntheticSource, make_source
from pipeline.venue.synthetic import SyntheticMarket, SyntheticParams
from procs.venue import FAULT_STATS, PUBLISHED_STATS, VALIDITY_STATS, VenueAgent
from tests.support.context import venue_context
from tests.support.venue import SPECS, START_MS, Client, RestVenue, sub, synthetic
from tests.support.wait import wait_until

D = Decimal


def _diffs(seqs: list[int]) -> list[int]:
    return [b - a for a, b in zip(seqs, seqs[1:])]


# ------------------------------------------------------------------------------------ jitter


def test_jittered_delays_are_gaussian_around_delay_ms_and_clipped_to_0_50_ms():
    narrow = DelayFault(delay_ms=20.0, jitter_ms=5.0, seed=3)
    draws = [narrow.draw_ms() for _ in range(20_000)]
    assert all(0.0 <= d <= MAX_JITTER_DELAY_MS == 50.0 for d in draws)
    mean = sum(draws) / len(draws)
    sd = math.sqrt(sum((d - mean) ** 2 for d in draws) / len(draws))
    assert abs(mean - 20.0) < 0.2 and abs(sd - 5.0) < 0.2
    assert len(set(draws)) > 19_000  # a draw per frame, not one value

    wide = DelayFault(delay_ms=25.0, jitter_ms=50.0, seed=3)  # much of the bell lies outside: clipped
    draws = [wide.draw_ms() for _ in range(5_000)]
    assert min(draws) == 0.0 and max(draws) == 50.0
    assert all(0.0 <= d <= 50.0 for d in draws)

    same, other = DelayFault(20.0, 5.0, seed=3), DelayFault(20.0, 5.0, seed=4)
    replay = DelayFault(20.0, 5.0, seed=3)
    first = [same.draw_ms() for _ in range(100)]
    assert first == [replay.draw_ms() for _ in range(100)]  # seeded
    assert first != [other.draw_ms() for _ in range(100)]


def test_a_jittered_frame_is_never_due_before_the_frame_queued_ahead_of_it():
    fault = DelayFault(delay_ms=10.0, jitter_ms=10.0, seed=9)
    now, last, held = 100.0, 0.0, 0
    for _ in range(5_000):
        now += 0.0002  # frames queued 0.2 ms apart: their own draws would often overtake
        due = fault.due_s(now, last)
        assert due >= last, "a frame overtook an earlier one"
        assert now <= due <= now + 0.050 + 1e-12 or due == last  # its own draw, or held behind the earlier frame
        held += due == last
        last = due
    assert held > 1_000  # order is kept by holding frames back, not by luck
    # without jitter the delay is the fixed delay_ms, and off means "send now" (due 0)
    assert DelayFault(delay_ms=150.0).due_s(1.0, 0.0) == pytest.approx(1.15)
    assert DelayFault().due_s(1.0, 0.5) == 0.0


@pytest.mark.parametrize("kwargs", [{"jitter_ms": 50.5}, {"jitter_ms": -1.0}, {"jitter_ms": float("nan")},
                                    {"delay_ms": -1.0}])
def test_bad_delay_values_are_refused(kwargs):
    with pytest.raises(VenueError):
        DelayFault(**kwargs)
    with pytest.raises(VenueError):
        VenueServer(synthetic(), **({"delay_jitter_ms": kwargs["jitter_ms"]} if "jitter_ms" in kwargs
                                    else {"delay_ms": kwargs["delay_ms"]}))


def test_a_jittered_venue_delivers_every_frame_in_order_and_counts_them(venues, clients):
    server = venues.start(start_paused=True, delay_ms=3.0, delay_jitter_ms=3.0, fault_seed=11)
    c = clients(server)
    c.subscribed(sub("books", "BTCUSDT"))
    server.advance(150)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    c.quiet(0.1)
    seqs = c.seqs[("books", "BTCUSDT")]
    assert len(seqs) == 151 and _diffs(seqs) == [1] * 150  # nothing overtook, nothing was lost
    assert c.ok() and c.books.checksums_verified == 151 and c.book_equals_venue(server, "BTCUSDT")
    st = server.stats()
    assert st["jitter_frames"] == st["frames_sent"] == 152  # the ack, the snapshot, 150 updates
    assert st["faults_injected"] == 1  # jitter switched on (at construction)
    server.set_delay_jitter_ms(0.0)
    c.send("ping")
    assert c.recv() == "pong"
    assert server.stats()["jitter_frames"] == 152  # off: the pong was not jittered


# ------------------------------------------------------------------------------------ jumps


def _quiet_params(**kw) -> SyntheticParams:
    """A model whose steps change nothing but the (unpublished) pressure: every book change is a jump."""
    return SyntheticParams(lo_per_step=0, mo_prob=0.0, cancel_frac=0.0, **kw)


def test_a_jump_shifts_the_whole_book_by_1_to_jump_ticks_ticks_either_way():
    m = SyntheticMarket(5, tick_size=0.1, lot_size=0.001, params=_quiet_params(jump_prob=0.3, jump_ticks=3))
    seen = set()
    for _ in range(400):
        bids, asks = dict(m.bids), dict(m.asks)
        r = m.step()
        k = r.jump_ticks
        if k:
            seen.add(k)
            assert 1 <= abs(k) <= 3
            assert m.bids == {p + k: s for p, s in bids.items()} and m.asks == {p + k: s for p, s in asks.items()}
        else:
            assert (m.bids, m.asks) == (bids, asks)
        for price, lots in r.changed_bids.items():  # the changed levels, applied, give the new book
            assert m.bids.get(price, 0) == lots
        for price, lots in r.changed_asks.items():
            assert m.asks.get(price, 0) == lots
        assert set(r.changed_bids) >= set(bids) | set(m.bids) if k else not r.changed_bids
    assert seen == {-3, -2, -1, 1, 2, 3}
    assert 80 < m.jumps < 160  # ~ 0.3 * 400


def test_jumps_are_seeded_and_leave_the_rest_of_the_model_unchanged():
    """The full model with jumps is the model without them, translated by the jumps so far: the
    jumps have their own random stream and the dynamics are relative to the best prices."""
    plain = SyntheticMarket(8, tick_size=0.1, lot_size=0.001)
    jumpy = SyntheticMarket(8, tick_size=0.1, lot_size=0.001, params=SyntheticParams(jump_prob=0.2, jump_ticks=3))
    twin = SyntheticMarket(8, tick_size=0.1, lot_size=0.001, params=SyntheticParams(jump_prob=0.2, jump_ticks=3))
    shift = 0
    for _ in range(300):
        plain.step()
        r = jumpy.step()
        twin.step()
        shift += r.jump_ticks
        assert jumpy.pressure == plain.pressure
        assert jumpy.bids == {p + shift: s for p, s in plain.bids.items()}
        assert jumpy.asks == {p + shift: s for p, s in plain.asks.items()}
        assert jumpy.best_bid() < jumpy.best_ask()
    assert jumpy.jumps > 30 and (twin.bids, twin.asks, twin.jumps) == (jumpy.bids, jumpy.asks, jumpy.jumps)


def test_jumps_are_published_as_ordinary_updates_whose_checksums_verify(venues, clients):
    source = SyntheticSource(SPECS, seed=4, step_ms=20, start_ms=START_MS, jump_prob=0.2, jump_ticks=3)
    server = venues.start(source, start_paused=True)
    c = clients(server)
    c.subscribed(sub("books", "BTCUSDT"), sub("books", "ETHUSDT"))
    server.advance(200)
    for inst in ("BTCUSDT", "ETHUSDT"):
        c.until_seq("books", inst, server.seq(inst))
    c.quiet(0.05)
    assert c.ok(), c.applied
    assert c.books.checksums_verified == 2 * 201 and c.books.checksum_mismatches == 0
    for inst in ("BTCUSDT", "ETHUSDT"):
        assert c.book_equals_venue(server, inst)
        assert _diffs(c.seqs[("books", inst)]) == [1] * 200  # a jump is no gap
    st = server.stats()
    assert st["jumps"] == source.jumps > 40  # ~ 0.2 * 200 * 2 instruments
    assert st["faults_injected"] == source.jumps
    # a jump's update moves every level of the book (deletes the old prices, sets the new ones: at
    # least 20 a side, the model's least depth); an ordinary step touches a few levels near the touch
    frames = [json.loads(m) for m in c.raw if m.startswith('{"action":"update"') and '"BTCUSDT"' in m]
    assert len(frames) == 200
    moved_all = sum(len(f["data"][0]["bids"]) > 20 and len(f["data"][0]["asks"]) > 20 for f in frames)
    assert moved_all == source.markets["BTCUSDT"].jumps > 0


def test_jump_values_are_validated_for_a_synthetic_source_and_a_replay(capture_path):
    with pytest.raises(VenueError, match="jump_prob"):
        SyntheticSource(SPECS, seed=1, jump_prob=1.5)
    with pytest.raises(VenueError, match="jump_ticks"):
        SyntheticSource(SPECS, seed=1, jump_prob=0.1, jump_ticks=0)
    with pytest.raises(VenueError, match="jump_ticks"):  # a replay's jumps: pipeline.venue.jumps (test_jumps)
        make_source("replay", capture=capture_path, jump_prob=0.1, jump_ticks=0)
    with pytest.raises(VenueError, match="encoded source's frames are fixed"):
        make_source("encoded", capture=capture_path, jump_prob=0.1)


# ------------------------------------------------------------------------------------ timed faults


def test_a_fault_timer_fires_once_per_period_and_skips_missed_periods():
    t = FaultTimer(1.0)
    assert [t.due(ms) for ms in (0, 999, 1000, 1000, 1999, 2000)] == [False, False, True, False, False, True]
    assert t.due(5500) and not t.due(5999) and t.due(6000)  # 3000..5000 were missed: fired once for them
    assert t.fired == 4
    late = FaultTimer(0.5, start_ms=1200.0)  # started at 1.2 s: fires at 1.7 s, 2.2 s, ...
    assert [late.due(ms) for ms in (1500, 1700, 2100, 2200)] == [False, True, False, True]
    off = FaultTimer(0.0)
    assert not any(off.due(ms) for ms in range(0, 100_000, 1000))
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(VenueError, match="every_s"):
            FaultTimer(bad)


def test_gap_every_s_steps_the_seq_of_the_update_due_at_each_period_back_and_the_books_see_a_gap(venues, clients):
    server = venues.start(synthetic(step_ms=20), start_paused=True, gap_every_s=1.0)  # every 50 steps
    c = clients(server)
    c.subscribed(sub("books", "BTCUSDT"))
    server.advance(120)
    c.until(lambda d: len(c.seqs.get(("books", "BTCUSDT"), ())) == 121, what="the snapshot and 120 updates")
    diffs = _diffs(c.seqs[("books", "BTCUSDT")])
    assert len(diffs) == 120
    assert [i + 1 for i, d in enumerate(diffs) if d != 1] == [50, 100]  # the updates at 1.0 s and 2.0 s
    assert {diffs[49], diffs[99]} == {1 + GAP_SEQ} and GAP_SEQ < -1  # back: v2 allows a forward jump
    # the first is a gap to the books (this client does not resync: the second lands on an INVALID book)
    assert c.applied[Applied.SEQ_GAP.name] == 1
    st = server.stats()
    assert st["gaps"] == 2 and st["faults_injected"] == 2


def test_bad_checksum_every_s_corrupts_the_update_due_at_each_period(venues, clients):
    server = venues.start(synthetic(step_ms=20), start_paused=True, bad_checksum_every_s=0.5)  # every 25 steps
    c = clients(server)
    c.subscribed(sub("books", "BTCUSDT"))
    server.advance(24)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    assert c.ok() and server.stats()["bad_checksums"] == 0
    server.advance(1)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    assert c.applied[Applied.CHECKSUM_MISMATCH.name] == 1
    assert c.books.checksum_mismatches == 1 and c.books.checksums_verified == 25
    st = server.stats()
    assert st["bad_checksums"] == 1 and st["faults_injected"] == 1
    server.advance(50)  # two more periods
    assert server.stats()["bad_checksums"] == 3


def test_disconnect_every_s_cuts_every_connection_at_each_period(venues, clients):
    server = venues.start(synthetic(step_ms=20), start_paused=True, disconnect_every_s=0.4)  # every 20 steps
    a, b = clients(server), clients(server)
    for c in (a, b):
        c.subscribed(sub("books", "BTCUSDT"))
    server.advance(19)
    for c in (a, b):
        c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
        c.send("ping")
        assert c.recv() == "pong"
    assert server.stats()["disconnects"] == 0
    server.advance(1)
    for c in (a, b):
        with pytest.raises(ConnectionClosed) as info:
            c.recv()  # the cut comes before the update due at 0.4 s
        assert info.value.rcvd is None  # an abnormal closure, like a network cut
    assert server.stats()["disconnects"] == 1
    fresh = clients(server)
    fresh.subscribed(sub("books", "BTCUSDT"))
    server.advance(19)
    fresh.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    server.advance(1)
    with pytest.raises(ConnectionClosed):
        fresh.recv()
    st = server.stats()
    assert st["disconnects"] == 2 and st["faults_injected"] == 2 and st["connections_total"] == 3
    wait_until(lambda: server.stats()["connections"] == 0, 3, what="the cut connections to be forgotten")


def test_timed_faults_can_be_switched_while_running_and_count_from_then(venues):
    server = venues.start(synthetic(step_ms=20), start_paused=True)
    server.advance(10)  # market time 0.2 s
    server.set_timed_faults(gap_every_s=1.0)
    assert server.timed_faults == {"gap_every_s": 1.0}
    server.advance(49)  # 1.18 s
    assert server.stats()["gaps"] == 0
    server.advance(1)  # 1.2 s: one period after it was switched on
    assert server.stats()["gaps"] == 1
    server.set_timed_faults(gap_every_s=0.0)
    assert server.timed_faults == {}
    server.advance(200)
    assert server.stats()["gaps"] == 1
    with pytest.raises(VenueError, match="disconnect_every_s"):
        server.set_timed_faults(disconnect_every_s=-1.0, gap_every_s=1.0)
    assert server.timed_faults == {}  # a bad value changes nothing


# ------------------------------------------------------------------------------------ order validity


class Book:
    def __init__(self) -> None:
        self.bids = [["99.9", "1"], ["99.8", "2"]]
        self.asks = [["100.1", "1"], ["100.2", "2"]]

    def levels(self, symbol: str, n: int | None = None):
        return (self.bids[:n], self.asks[:n]) if n is not None else (list(self.bids), list(self.asks))


def _engine(book: Book, **kw) -> OrderEngine:
    rules = {"BTCUSDT": InstrumentRules("BTCUSDT", D("0.1"), D("0.001"))}
    return OrderEngine(rules, book.levels, lambda: 1_700_000_000_000, **kw)


def _order(side: str, price: str, force: str = "post_only", **kw) -> dict:
    return {"symbol": "BTCUSDT", "side": side, "orderType": "limit", "force": force, "price": price, "size": "0.01",
            **kw}


@pytest.mark.parametrize(("side", "price", "valid"), [
    ("buy", "99.9", True),  # at its own best
    ("buy", "100.0", True),  # inside the spread
    ("buy", "94.9", True),  # 50 ticks behind the best bid
    ("buy", "94.8", False),  # 51 ticks: too far from the book
    ("buy", "100.1", False),  # at the best ask: it would take liquidity
    ("buy", "100.3", False),  # through the best ask
    ("sell", "100.1", True),
    ("sell", "100.0", True),
    ("sell", "105.1", True),
    ("sell", "105.2", False),
    ("sell", "99.9", False),
    ("sell", "99.0", False),
])
def test_an_order_is_valid_when_it_neither_crosses_nor_strays_from_the_book(side, price, valid):
    eng = _engine(Book())
    assert eng.valid_against_book("BTCUSDT", side, D(price)) is valid
    try:
        eng.place(_order(side, price))
    except OrderRejected as e:
        assert not valid and e.code == "43027"  # a crossing post_only is refused, and still counted
    assert eng.book_checks == {"orders_valid": int(valid), "orders_invalid": int(not valid)}


def test_validity_is_judged_against_the_book_when_the_order_arrives():
    book = Book()
    eng = _engine(book, max_away_ticks=5)
    eng.place(_order("buy", "99.9", clientOid="a"))  # valid now
    book.asks = [["99.8", "1"]]  # the market moved down through our price: a stale quote
    book.bids = [["99.5", "3"]]
    eng.place(_order("buy", "99.9", force="gtc", clientOid="b"))  # crosses the new best ask: a taker
    eng.place(_order("buy", "99.0", clientOid="c"))  # 5 ticks behind the new best bid
    eng.place(_order("buy", "98.9", clientOid="d"))  # 6 ticks
    assert eng.book_checks == {"orders_valid": 2, "orders_invalid": 2}
    assert eng.counters["orders_placed"] == 4
    with pytest.raises(OrderRejected):
        eng.place(_order("buy", "99.95", clientOid="e"))  # off the tick: refused before the book check
    with pytest.raises(OrderRejected):
        eng.place(_order("buy", "99.0", clientOid="a"))  # a duplicate: not a new decision
    assert eng.book_checks == {"orders_valid": 2, "orders_invalid": 2}
    book.asks, book.bids = [], []  # an empty book: nothing to cross, nothing to stray from
    eng.place(_order("sell", "1.0", clientOid="f"))
    assert eng.book_checks["orders_valid"] == 3


@pytest.mark.parametrize("bad", [-1, 1.5, True, "5"])
def test_max_away_ticks_must_be_an_integer_at_least_0(bad):
    with pytest.raises(VenueError, match="max_away_ticks"):
        _engine(Book(), max_away_ticks=bad)


def test_the_rest_api_reports_orders_valid_and_invalid_against_the_live_synthetic_book(tmp_path):
    venue = RestVenue(tmp_path)
    try:
        bid, ask = venue.best()
        assert venue.place(price=str(bid), force="post_only", clientOid="v1")[0] == 200
        status, doc = venue.place(price=str(ask), force="post_only", clientOid="i1")
        assert (status, doc["code"]) == (400, "43027")
        assert venue.place(price=str(bid - 100), clientOid="i2")[0] == 200  # 1,000 ticks away
        st = venue.rest.stats()
        assert (st["orders_valid"], st["orders_invalid"], st["orders_placed"]) == (1, 2, 2)
    finally:
        venue.close()


# ------------------------------------------------------------------------------------ the stage


def test_the_venue_stage_runs_every_stress_fault_and_publishes_each_counter(tmp_path):
    ctx = venue_context(tmp_path, "seed = 5, speed = 10.0, delay_ms = 2.0, delay_jitter_ms = 2.0, jump_prob = 0.2, "
                         "jump_ticks = 2, gap_every_s = 0.2, bad_checksum_every_s = 0.3, disconnect_every_s = 1.0, "
                         "max_away_ticks = 10")
    agent = VenueAgent()
    agent.on_start(ctx)
    try:
        assert agent.server.timed_faults == {"disconnect_every_s": 1.0, "gap_every_s": 0.2,
                                             "bad_checksum_every_s": 0.3}
        assert agent.engine.max_away_ticks == 10
        port = read_port_file(tmp_path / "run" / "venue.port")
        c = Client(f"ws://127.0.0.1:{port}/v2/ws/public")
        try:
            c.subscribe(sub("books", "BTCUSDT"))
            c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
        finally:
            c.close()

        def counted():
            agent._next_stats_ns = 0
            agent.do_work()
            return all(ctx.stats[k] > 0 for k in FAULT_STATS) and ctx.stats

        st = wait_until(counted, 5, interval=0.02, what="every stress fault to fire")  # 10x: 1 s market in 0.1 s
        assert set(st) == set(PUBLISHED_STATS) and set(FAULT_STATS) | set(VALIDITY_STATS) <= set(st)
        assert st["faults_injected"] >= 1 + sum(st[k] for k in ("jumps", "disconnects", "gaps", "bad_checksums"))
    finally:
        agent.on_close()
    assert agent.thread.error is None


@pytest.mark.parametrize(("params", "words"), [
    ("delay_jitter_ms = 60.0", "delay_jitter_ms"),
    ("jump_prob = 1.5", "jump_prob"),
    ('jump_prob = "often"', "jump_prob"),
    ("jump_ticks = 0", "jump_ticks"),
    ("gap_every_s = -1.0", "gap_every_s"),
    ("bad_checksum_every_s = true", "bad_checksum_every_s"),
    ("disconnect_every_s = nan", "disconnect_every_s"),
    ("max_away_ticks = -1", "max_away_ticks"),
    ("jump_probability = 0.1", "unknown venue params"),
])
def test_bad_stress_params_fail_the_start(tmp_path, params, words):
    agent = VenueAgent()
    with pytest.raises(VenueError, match=words):
        agent.on_start(venue_context(tmp_path, params))


# ------------------------------------------------------------------------------------ the injector


def _injector(**params) -> tuple[FaultInjector, dict]:
    stats = dict.fromkeys(("faults_injected", "frames_dropped", "jitter_frames", "disconnects", "gaps",
                           "bad_checksums"), 0)
    return FaultInjector(FaultParams(**params), stats), stats


def test_the_injector_counts_a_jitter_set_at_construction_once_and_a_switch_turned_on():
    faults, stats = _injector(delay_jitter_ms=5.0)
    assert stats["faults_injected"] == 1
    faults.set_delay(delay_ms=0.0)  # off: not a fault
    faults.set_drop_prob(0.0)
    assert stats["faults_injected"] == 1
    faults.set_delay(delay_ms=3.0)
    faults.set_drop_prob(0.5)
    assert stats["faults_injected"] == 3 and faults.delay.delay_ms == 3.0 and faults.drop_prob == 0.5
    faults.count("gaps")
    faults.count()
    assert stats["faults_injected"] == 5 and stats["gaps"] == 1


@pytest.mark.parametrize(("params", "words"), [({"delay_ms": -1.0}, "delay_ms"), ({"drop_prob": 1.5}, "drop_prob"),
                                               ({"gap_every_s": -2.0}, "gap_every_s")])
def test_the_injector_refuses_a_bad_switch_naming_it(params, words):
    with pytest.raises(VenueError, match=words):
        _injector(**params)


def test_drops_are_seeded_and_counted():
    a, stats = _injector(drop_prob=0.3, seed=7)
    b, _ = _injector(drop_prob=0.3, seed=7)
    draws = [a.drops_push() for _ in range(2_000)]
    assert draws == [b.drops_push() for _ in range(2_000)]
    assert stats["frames_dropped"] == sum(draws) and 450 < sum(draws) < 750


def test_a_jittered_frame_due_time_is_counted_and_a_fixed_one_is_not():
    fixed, stats = _injector(delay_ms=10.0)
    assert fixed.frame_due_s(1.0, 0.0) == pytest.approx(1.010) and stats["jitter_frames"] == 0
    jittered, stats = _injector(delay_ms=10.0, delay_jitter_ms=2.0)
    due = jittered.frame_due_s(1.0, 0.0)
    assert 1.0 <= due <= 1.0 + MAX_JITTER_DELAY_MS / 1000.0 and stats["jitter_frames"] == 1


def test_timed_faults_fire_on_the_market_clock_in_order_and_a_clock_going_back_keeps_counting():
    faults, _ = _injector(disconnect_every_s=1.0, gap_every_s=0.5)
    assert faults.timed_due(400.0) is TimedFault.NONE
    assert faults.timed_due(500.0) == TimedFault.GAP
    assert faults.timed_due(1000.0) == TimedFault.DISCONNECT | TimedFault.GAP
    assert faults.timed_due(1200.0) is TimedFault.NONE
    assert faults.timed_due(300.0) == TimedFault.GAP  # a replay looped: 1200 + 300 = 1500 ms of fault time
    faults.set_timed_faults(bad_checksum_every_s=0.1, gap_every_s=0.0)
    assert faults.timed_periods_s() == {"disconnect_every_s": 1.0, "bad_checksum_every_s": 0.1}
    assert faults.timed_due(400.0) == TimedFault.BAD_CHECKSUM  # counted from the switch (1500 ms)


def test_a_bad_timed_fault_period_changes_none_of_them():
    faults, _ = _injector(gap_every_s=1.0)
    with pytest.raises(VenueError, match="disconnect_every_s"):
        faults.set_timed_faults(gap_every_s=2.0, disconnect_every_s=float("inf"))
    assert faults.timed_periods_s() == {"gap_every_s": 1.0}
