"""The paper venue's WebSocket server, seen by a real client on 127.0.0.1: the Bitget v2 public
dialect (ping, subscribe / unsubscribe, errors), books / books15 / trade pushes verified by the
feed's own decoder and ``BitgetBooks``, the replay of the shared real capture, the fault switches,
and the ``VenueAgent`` stage. Every receive is bounded (``_client.RECV_TIMEOUT_S``).

Synthetic venues here start paused (``start_paused=True``) and are driven with ``advance(n)``, so
what they publish is deterministic; only the pacing, stall and delay tests let the clock run.
"""

from __future__ import annotations

import json
import time

import orjson
import pytest
from websockets.exceptions import ConnectionClosed

from pipeline.trading.bitget import Applied, FrameKind, bitget_checksum
from pipeline.trading.bitget.protocol import resync_messages
from pipeline.venue.server import HOST, VenueServer
from pipeline.venue.service import VenueThread
from pipeline.venue.sources import ReplaySource
from tests.support.venue import START_MS, Client, Venues, sub, synthetic
from tests.support.wait import wait_until


def _data_frames(client: Client) -> list[dict]:
    return [json.loads(m) for m in client.raw if m.startswith('{"action"')]


# ------------------------------------------------------------------------------------ dialect


def test_binds_loopback_on_an_ephemeral_port_and_answers_ping_with_pong(venues, clients):
    server = venues.start(start_paused=True)
    assert server.port > 0 and server.url == f"ws://127.0.0.1:{server.port}/v2/ws/public"
    assert HOST == "127.0.0.1"
    c = clients(server)
    for _ in range(3):
        c.send("ping")
        assert c.recv() == "pong"


def test_subscribe_is_acknowledged_per_arg_and_unknown_instruments_or_channels_are_error_30001(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.send(orjson.dumps({"op": "subscribe", "args": [
        {"instType": "SPOT", "channel": "trade", "instId": "BTCUSDT"},
        {"instType": "SPOT", "channel": "trade", "instId": "NOPEUSDT"},
        {"instType": "SPOT", "channel": "candle1m", "instId": "BTCUSDT"},
        {"instType": "USDT-FUTURES", "channel": "trade", "instId": "BTCUSDT"},
    ]}).decode())
    assert c.recv() == '{"event":"subscribe","arg":{"instType":"SPOT","channel":"trade","instId":"BTCUSDT"}}'
    errors = [json.loads(c.recv()) for _ in range(3)]
    assert [e["event"] for e in errors] == ["error"] * 3
    assert [e["code"] for e in errors] == ["30001"] * 3
    assert [e["arg"]["instId"] for e in errors] == ["NOPEUSDT", "BTCUSDT", "BTCUSDT"]
    assert "doesn't exist" in errors[0]["msg"]
    # the feed's decoder reads them as ERROR events
    assert c.decoder.decode(c.raw[1]).kind == FrameKind.ERROR


@pytest.mark.parametrize("text, code", [
    ("not json", "30002"),
    ("[1, 2]", "30002"),
    ('{"op":"login","args":[]}', "30003"),
    ('{"op":"subscribe","args":[]}', "30016"),
    ('{"op":"subscribe","args":[{"channel":"books"}]}', "30016"),
])
def test_malformed_requests_get_an_error_event_and_the_connection_stays_up(venues, clients, text, code):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.send(text)
    err = json.loads(c.recv())
    assert err["event"] == "error" and err["code"] == code
    c.send("ping")
    assert c.recv() == "pong"
    assert server.stats()["errors_sent"] == 1


def test_unsubscribe_is_acknowledged_and_stops_the_pushes(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.subscribe(sub("books", "BTCUSDT"))
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    assert server.stats()["subscriptions"] == 1
    c.unsubscribe(sub("books", "BTCUSDT"))
    assert c.next().kind == FrameKind.UNSUBSCRIBED
    assert server.stats()["subscriptions"] == 0
    server.advance(5)
    c.send("ping")
    assert c.recv() == "pong"  # nothing was pushed in between


# ------------------------------------------------------------------------------------ books


def test_books_snapshot_then_updates_verify_with_bitget_books_and_equal_the_venue_book(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.subscribe(sub("books", "BTCUSDT"), sub("books", "ETHUSDT"))
    for inst in ("BTCUSDT", "ETHUSDT"):
        assert c.next().kind == FrameKind.SUBSCRIBED
        snap = c.next()
        assert snap.kind == FrameKind.SNAPSHOT and snap.inst_id == inst
        assert len(snap.books[0].bid_px) == 40 and len(snap.books[0].ask_px) == 40  # the full book
    first = json.loads(c.raw[1])
    bids, asks = first["data"][0]["bids"], first["data"][0]["asks"]
    assert first["data"][0]["checksum"] == bitget_checksum(bids[:25], asks[:25]) != 0

    steps = 300
    assert server.advance(steps) == steps
    for inst in ("BTCUSDT", "ETHUSDT"):
        c.until_seq("books", inst, server.seq(inst))
    c.quiet(0.05)
    assert c.ok(), c.applied
    assert c.books.checksums_verified == 2 * (steps + 1) and c.books.checksum_mismatches == 0
    for inst in ("BTCUSDT", "ETHUSDT"):
        seqs = c.seqs[("books", inst)]
        assert seqs == list(range(seqs[0], seqs[0] + steps + 1)), "seq must increase by one per update"
        assert c.book_equals_venue(server, inst)


def test_push_format_is_the_v2_one(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.subscribed(sub("books", "BTCUSDT"))
    server.advance(1)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    snap, upd = _data_frames(c)
    for frame, action in ((snap, "snapshot"), (upd, "update")):
        assert list(frame) == ["action", "arg", "data", "ts"] and frame["action"] == action
        assert frame["arg"] == {"instType": "SPOT", "channel": "books", "instId": "BTCUSDT"}
        (data,) = frame["data"]
        assert list(data) == ["asks", "bids", "checksum", "seq", "ts"]
        assert isinstance(data["ts"], str) and isinstance(frame["ts"], int) and isinstance(data["checksum"], int)
        assert all(isinstance(x, str) for lv in data["bids"] + data["asks"] for x in lv)
    assert snap["data"][0]["ts"] == str(START_MS) and upd["data"][0]["ts"] == str(START_MS + 20)
    asks = [float(p) for p, _ in upd["data"][0]["asks"]]
    bids = [float(p) for p, _ in upd["data"][0]["bids"]]
    assert asks == sorted(asks) and bids == sorted(bids, reverse=True)


def test_books15_pushes_a_top_15_snapshot_on_every_book_change(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.subscribed(sub("books15", "ETHUSDT"))
    server.advance(50)
    c.until_seq("books15", "ETHUSDT", server.seq("ETHUSDT"))
    frames = _data_frames(c)
    assert len(frames) == 51 and {f["action"] for f in frames} == {"snapshot"}
    assert all(len(f["data"][0]["bids"]) == 15 == len(f["data"][0]["asks"]) for f in frames)
    assert c.applied == {"EMITTED": 51} and c.books.checksums_verified == 51
    bids, asks = server.levels("ETHUSDT", 15)
    book = c.books.book("books15", "ETHUSDT")
    assert [list(x) for x in book.bids()] == bids and [list(x) for x in book.asks()] == asks


def test_trades_snapshot_on_subscribe_then_updates_as_v2_objects(venues, clients):
    server = venues.start(start_paused=True)
    c0 = clients(server)
    c0.subscribe(sub("trade", "BTCUSDT"))
    assert c0.next().kind == FrameKind.SUBSCRIBED  # no trade yet: no snapshot
    server.advance(100)
    c0.quiet(0.1)
    updates = _data_frames(c0)
    assert updates and {f["action"] for f in updates} == {"update"}
    for f in updates:
        for t in f["data"]:
            assert list(t) == ["ts", "price", "size", "side", "tradeId"] and t["side"] in ("buy", "sell")
    ids = [int(t["tradeId"]) for f in updates for t in f["data"]]
    assert ids == list(range(1, len(ids) + 1))

    c1 = clients(server)
    c1.subscribe(sub("trade", "BTCUSDT"))
    c1.next()
    snap = c1.next()
    assert snap.kind == FrameKind.TRADE and snap.snapshot
    frame = json.loads(c1.raw[-1])
    snap_ids = [int(t["tradeId"]) for t in frame["data"]]
    assert snap_ids == sorted(snap_ids, reverse=True) and snap_ids[0] == ids[-1]  # newest first
    assert len(snap_ids) == min(50, len(ids))


def test_same_seed_gives_the_same_frames_and_another_seed_does_not(venues, clients):
    def frames(seed):
        server = venues.start(synthetic(seed), start_paused=True)
        c = clients(server)
        c.subscribed(sub("books", "BTCUSDT"), sub("trade", "BTCUSDT"))
        server.advance(40)
        c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
        c.quiet(0.05)
        return sorted(m for m in c.raw if m.startswith('{"action"'))

    a, b, other = frames(3), frames(3), frames(4)
    assert a == b and len(a) > 40
    assert a != other


def test_paced_at_speed_publishes_at_the_market_rate_and_every_checksum_verifies(venues, clients):
    server = venues.start(synthetic(step_ms=20), speed=10.0, start_paused=True)  # 500 steps a second
    c = clients(server)
    c.subscribe(sub("books", "BTCUSDT"), sub("books15", "BTCUSDT"))
    c.until(lambda d: d.channel == "books15")
    t0 = time.monotonic()
    server.resume()
    c.until_seq("books", "BTCUSDT", 200, timeout=5)  # a hang guard: 0.4 s at the market rate
    elapsed = time.monotonic() - t0
    assert elapsed > 0.3, f"200 steps at 500 steps/s took {elapsed:.2f} s: faster than the market"
    server.pause()
    c.quiet(0.1)
    assert c.ok(), c.applied
    assert c.books.checksum_mismatches == 0 and c.books.checksums_verified > 200
    assert c.book_equals_venue(server, "BTCUSDT")


# ------------------------------------------------------------------------------------ replay


def _capture_counts(path) -> tuple[int, int, int, set]:
    """(books pushes, non-zero checksums, trades) in the capture, counted with the stdlib only."""
    books = nonzero = trades = 0
    insts = set()
    for line in path.read_text().splitlines():
        if line.startswith("wss://"):
            continue
        obj = json.loads(line.split(": ", 1)[1])
        arg = obj.get("arg", {})
        if "action" not in obj:
            continue
        if arg["channel"] == "books":
            books += 1
            nonzero += sum(1 for d in obj["data"] if d.get("checksum"))
            insts.add(arg["instId"])
        elif arg["channel"] == "trade":
            trades += len(obj["data"])
    return books, nonzero, trades, insts


def test_replay_of_the_shared_capture_is_served_as_v2_and_every_checksum_verifies(venues, clients, capture_path):
    n_books, n_nonzero, n_trades, insts = _capture_counts(capture_path)
    source = ReplaySource.from_capture(capture_path)
    assert set(source.inst_ids) == insts
    server = venues.start(source, speed=0, start_paused=True)  # as fast as possible once resumed
    c = clients(server, {iid: i + 1 for i, iid in enumerate(sorted(insts))})
    c.subscribe(*(sub(ch, iid) for iid in sorted(insts) for ch in ("books", "trade")))
    c.until(lambda d: d.kind == FrameKind.SUBSCRIBED and d.inst_id == sorted(insts)[-1] and d.channel == "trade")
    server.resume()
    c.until(lambda d: sum(c.applied.values()) == n_books, timeout=10, what="every books push of the capture")
    wait_until(lambda: server.stats()["replay_done"], 5, what="the end of the replay")
    c.quiet(0.1)
    assert c.ok(), c.applied
    assert c.books.checksums_verified == n_nonzero == 443 and c.books.checksum_mismatches == 0
    assert server.market.replay_checksum_disagreements == 0
    assert sum(len(t) for t in c.trades.values()) == n_trades
    frames = _data_frames(c)
    assert {f["arg"]["instType"] for f in frames} == {"SPOT"}
    trade_obj = next(f for f in frames if f["arg"]["channel"] == "trade")["data"][0]
    assert list(trade_obj) == ["ts", "price", "size", "side", "tradeId"]
    for iid in insts:
        assert c.book_equals_venue(server, iid)
    # the original strings are kept: a capture price like "0.00003530" reaches the client as it was
    assert any('"0.00003530"' in m for m in c.raw)

    late = clients(server, {iid: 1 for iid in insts})  # a subscriber after the end gets the final book
    late.subscribe(sub("books", "SUNUSDT"))
    late.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    assert late.ok() and late.books.checksums_verified == 1 and late.book_equals_venue(server, "SUNUSDT")


def test_replay_keeps_the_original_pace_scaled_by_speed(venues, clients, capture_path):
    source = ReplaySource.from_capture(capture_path)
    span_s = (source.frames[-1][0] - source.frames[0][0])
    speed = span_s / 0.4  # the whole capture in 0.4 s
    server = venues.start(source, speed=speed, start_paused=True)
    c = clients(server, {"SUNUSDT": 1})
    c.subscribe(sub("books", "SUNUSDT"))
    c.next()
    t0 = time.monotonic()
    server.resume()
    wait_until(lambda: server.stats()["replay_done"], 5, interval=0.002, what="the end of the replay")  # hang guard
    elapsed = time.monotonic() - t0
    assert elapsed > 0.3, f"a {span_s:.1f} s capture at x{speed:.0f} took {elapsed:.2f} s: faster than its pace"
    c.quiet(0.1)
    assert c.ok() and c.books.checksum_mismatches == 0 and c.books.checksums_verified > 0


def test_replay_loop_starts_again_with_snapshots(venues, clients, capture_path):
    server = venues.start(ReplaySource.from_capture(capture_path), speed=0, loop_replay=True, start_paused=True)
    c = clients(server, {"SUNUSDT": 1})
    c.subscribe(sub("books", "SUNUSDT"))
    c.next()
    server.resume()
    c.until(lambda d: server.stats()["replay_loops"] >= 2, timeout=10, what="two loops")
    server.pause()
    c.quiet(0.1)
    assert c.ok() and c.books.checksum_mismatches == 0
    assert c.kinds["SNAPSHOT"] >= 2


# ------------------------------------------------------------------------------------ faults


def test_drop_connections_cuts_every_client_and_new_ones_are_accepted(venues, clients):
    server = venues.start(start_paused=True)
    a, b = clients(server), clients(server)
    for c in (a, b):
        c.send("ping")
        assert c.recv() == "pong"
    assert server.stats()["connections"] == 2
    assert server.drop_connections() == 2
    for c in (a, b):
        with pytest.raises(ConnectionClosed) as info:
            c.recv()
        assert info.value.rcvd is None  # no close frame: an abnormal closure, like a network cut
    fresh = clients(server)
    fresh.send("ping")
    assert fresh.recv() == "pong"
    st = server.stats()
    assert st["connections"] == 1 and st["connections_total"] == 3 and st["faults_injected"] == 1


def test_graceful_drop_closes_with_1001(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.send("ping")
    c.recv()
    server.drop_connections(graceful=True)
    with pytest.raises(ConnectionClosed) as info:
        c.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1001


def test_corrupt_checksum_is_detected_by_bitget_books_and_a_resync_recovers(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.subscribe(sub("books", "BTCUSDT"))
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    server.advance(3)
    server.corrupt_checksum("BTCUSDT")
    server.advance(3)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    assert c.applied[Applied.CHECKSUM_MISMATCH.name] == 1 and c.applied[Applied.INVALID.name] == 2
    assert c.books.checksum_mismatches == 1
    (resync,) = c.books.take_resyncs()
    for text in resync_messages(resync):  # what the feed does: unsubscribe, subscribe
        c.send(text)
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    server.advance(5)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    assert c.books.book("books", "BTCUSDT").state == 1  # VALID again
    assert c.book_equals_venue(server, "BTCUSDT")
    assert server.stats()["faults_injected"] == 1


def test_skip_seq_jumps_the_next_update_and_going_back_is_a_gap(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)
    c.subscribe(sub("books", "BTCUSDT"))
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    server.skip_seq(5, "BTCUSDT")
    server.advance(2)
    c.until_seq("books", "BTCUSDT", server.seq("BTCUSDT"))
    s = c.seqs[("books", "BTCUSDT")]
    assert [b - a for a, b in zip(s, s[1:])] == [6, 1]  # the client sees the jump ...
    assert c.ok()  # ... which v2 allows: the book stays valid (its checksum still verifies)
    server.skip_seq(-3, "BTCUSDT")
    server.advance(1)
    c.until(lambda d: d.kind == FrameKind.UPDATE)
    assert c.applied[Applied.SEQ_GAP.name] == 1


def test_delay_holds_every_frame_back_by_n_ms(venues, clients):
    server = venues.start(start_paused=True)
    c = clients(server)

    def rtt() -> float:
        t = time.monotonic()
        c.send("ping")
        assert c.recv() == "pong"
        return time.monotonic() - t

    base = min(rtt() for _ in range(3))
    server.set_delay_ms(150)
    delayed = rtt()
    assert delayed >= 0.15 > base, (base, delayed)
    c.subscribe(sub("books", "BTCUSDT"))
    t = time.monotonic()
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    assert time.monotonic() - t >= 0.15
    server.set_delay_ms(0)
    # with the delay on every round trip takes >= 150 ms: one of three below it shows the delay off
    assert min(rtt() for _ in range(3)) < 0.15
    assert server.stats()["faults_injected"] == 1


def test_drop_probability_drops_pushes_but_not_answers(venues, clients):
    server = venues.start(start_paused=True, fault_seed=5)
    c = clients(server)
    c.subscribed(sub("books15", "BTCUSDT"))
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    server.set_drop_prob(1.0)
    server.advance(20)
    c.send("ping")
    assert c.recv() == "pong"  # nothing before the pong: every push was dropped
    assert server.stats()["frames_dropped"] == 20
    server.set_drop_prob(0.5)
    server.advance(100)
    server.set_drop_prob(0.0)
    server.advance(1)
    c.until_seq("books15", "BTCUSDT", server.seq("BTCUSDT"))
    got = len(c.seqs[("books15", "BTCUSDT")]) - 1  # after the first snapshot
    dropped = server.stats()["frames_dropped"] - 20
    assert got + dropped == 101 and 20 < dropped < 80
    s = c.seqs[("books15", "BTCUSDT")]
    assert max(b - a for a, b in zip(s, s[1:])) > 1  # the client sees the holes


def test_stall_stops_the_pushes_for_n_seconds_then_the_feed_resumes_consistently(venues, clients):
    server = venues.start(synthetic(step_ms=20), speed=2.0, start_paused=True)  # 100 updates a second
    c = clients(server)
    c.subscribe(sub("books", "BTCUSDT"))
    c.until(lambda d: d.kind == FrameKind.SNAPSHOT)
    server.resume()
    c.until_seq("books", "BTCUSDT", 10)
    server.stall(0.5)
    t_stall = time.monotonic()
    c.quiet(0.2)  # what was already queued
    seq_before = c.seqs[("books", "BTCUSDT")][-1]
    c.send("ping")
    assert c.recv() == "pong"  # the connection is alive, the feed is stale
    d = c.until(lambda d: d.kind == FrameKind.UPDATE, timeout=3)
    gap = time.monotonic() - t_stall
    assert gap >= 0.45, f"a push came {gap:.2f} s into a 0.5 s stall"
    assert d.books[0].seq == seq_before + 1  # the market clock stopped too: no hole
    c.until_seq("books", "BTCUSDT", seq_before + 10)
    server.pause()
    c.quiet(0.1)
    assert c.ok() and c.book_equals_venue(server, "BTCUSDT")
    assert server.stats()["faults_injected"] == 1


def test_a_client_that_does_not_read_is_disconnected_when_its_queue_fills(venues):
    from websockets.sync.client import connect

    server = venues.start(start_paused=True, max_queue=50)
    with connect(server.url, proxy=None, open_timeout=5, close_timeout=1) as ws:
        ws.send('{"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"},'
                '{"instType":"SPOT","channel":"books15","instId":"ETHUSDT"}]}')
        ws.recv(timeout=3)
        # transport buffers absorb some frames; keep pushing big frames until the queue overflows
        deadline = time.monotonic() + 5
        while not server.stats()["slow_disconnects"] and time.monotonic() < deadline:
            server.advance(200)
        assert server.stats()["slow_disconnects"] == 1


def test_faults_set_before_start_take_effect_from_the_start(clients):
    server = VenueServer(synthetic(), speed=5.0)
    server.stall(0.3)
    server.corrupt_checksum("BTCUSDT")
    venues = Venues()
    venues.threads.append(thread := VenueThread(server))
    t0 = time.monotonic()
    thread.start()
    try:
        c = clients(server)
        c.subscribe(sub("books", "BTCUSDT"))
        c.until(lambda d: d.kind == FrameKind.UPDATE, timeout=3)
        assert time.monotonic() - t0 >= 0.28
        assert c.applied[Applied.CHECKSUM_MISMATCH.name] == 1  # the first update carried the bad checksum
        assert server.stats()["faults_injected"] == 2
    finally:
        venues.stop_all()
