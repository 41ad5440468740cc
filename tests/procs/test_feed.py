"""The feed stage (procs/feed.py) as a specification.

Bitget: the agent is driven in-process (a recording output port, ``do_work`` pumped by the test)
against a real WebSocket server on 127.0.0.1 (tests/procs/wsserver.py) that sends the frames each
test scripts; one end-to-end test runs the real supervisor, the feed process and a consumer
process reading the real ``md`` ring. ITCH: a synthetic session replayed from a BinaryFILE, and
MoldUDP64 over real UDP on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.runtime.agent import AgentContext
from pipeline.trading.bitget.book import Applied
from pipeline.trading.bitget.capture import OPEN, RECV, SEND, read_capture
from pipeline.trading.bitget.protocol import Subscription, subscribe_message, unsubscribe_message
from pipeline.runtime.config import load_config
from pipeline.runtime.errors import ConfigError
from pipeline.trading.itch import messages as M
from pipeline.trading.itch.book import L3Book
from pipeline.trading.itch.framing import decode_request, encode_binaryfile, encode_packet, iter_file_frames
from pipeline.trading.itch.synth import generate_binaryfile, generate_session
from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_CROSSED, BOOK_FLAG_HIDDEN_REPORTED, BOOK_FLAG_REBUILDING,
                                       BOOK_FLAG_SNAPSHOT, TRADE_DTYPE,
                                      TRADE_FLAG_HIDDEN, TRADE_SIDE_BUY, TRADE_SIDE_SELL, Kind)
from pipeline.runtime.runner import load_agent_class
from pipeline.runtime.portfile import read_port_file
from procs.feed import BitgetFeedAgent, BitgetFeedParams, ItchFeedAgent, ItchFeedParams, parse_params
from tests.support.configtext import BACK_OFF, INSTRUMENTS, process, ring
from tests.support.context import feed_context as make_ctx
from tests.support.frames import RefBook, ladder
from tests.support.frames import depth_text as depth
from tests.support.frames import trades_text as trades
from tests.support.paths import REPO_ROOT
from tests.support.ports import RecordingPort
from tests.support.wait import pump, settle, wait_until
from tests.support.wsserver import WsTestServer

BTC_BOOKS = {"instType": "SPOT", "channel": "books", "instId": "BTCUSDT"}


@pytest.fixture
def start_feed():
    """``start_feed(params, **ctx_kw) -> agent``: a started BitgetFeedAgent (small back-off,
    seeded jitter, BTCUSDT only unless told); every one is closed at teardown."""
    agents = []

    def start(params: dict, **kw) -> BitgetFeedAgent:
        base = {"backoff_initial_ms": 10, "backoff_max_ms": 40, "seed": 7, "instruments": ["BTCUSDT"]}
        ctx = make_ctx({**base, **params}, **kw)
        agent = BitgetFeedAgent()
        agent.on_start(ctx)
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        a.on_close()
        assert not a.net.is_alive(), "network thread still running after on_close"


def _stats(agent, key):
    return agent.ctx.stats.get(key, 0)


def _port(agent) -> RecordingPort:
    return agent.ctx.outputs["md"]


# ------------------------------------------------------------------------------------- pure parts
def test_read_port_file_accepts_plain_host_port_and_json(tmp_path):
    f = tmp_path / "venue.port"
    for text in ("8765\n", "127.0.0.1:8765", '{"port": 8765}'):
        f.write_text(text)
        assert read_port_file(f) == 8765
    f.write_text("0")
    with pytest.raises(ValueError):
        read_port_file(f)


@pytest.mark.parametrize("params", [
    {},  # neither url nor port_file
    {"url": "http://127.0.0.1:1"},
    {"url": "ws://127.0.0.1:1", "channels": ["books", "books15"]},
    {"url": "ws://127.0.0.1:1", "channels": ["ticker"]},
    {"url": "ws://127.0.0.1:1", "instruments": ["DOGEUSDT"]},
    {"url": "ws://127.0.0.1:1", "inst_type": "MARGIN"},
    {"url": "ws://127.0.0.1:1", "backoff_initial_ms": 500, "backoff_max_ms": 100},
    {"port_file": "/nonexistent/p", "url": "ws://127.0.0.1:9/"},  # no {port} placeholder
])
def test_bad_params_fail_the_start(params):
    with pytest.raises(ConfigError):
        BitgetFeedAgent().on_start(make_ctx(params))


def _named(ctx: AgentContext, name: str) -> AgentContext:
    """``ctx`` for a process called ``name``."""
    return AgentContext(config=ctx.config, process=msgspec.structs.replace(ctx.process, name=name), inputs=ctx.inputs,
                        outputs=ctx.outputs, log=ctx.log, clock=ctx.clock)


ITCH = "procs.feed:ItchFeedAgent"
WS = {"url": "ws://127.0.0.1:9/x"}


@pytest.mark.parametrize("name", ["feed", "feed_b"])
@pytest.mark.parametrize("agent, params, field", [
    (BitgetFeedAgent, {**WS, "ping_intervall_s": 5}, "unknown field `ping_intervall_s`"),
    (BitgetFeedAgent, {**WS, "instrument": ["BTCUSDT"]}, "unknown field `instrument`"),
    (BitgetFeedAgent, {**WS, "symbols": ["BTCUSDT"]}, "unknown field `symbols`"),  # the ITCH agent's name for it
    (ItchFeedAgent, {"port": 0, "sped": 2.0}, "unknown field `sped`"),
    (ItchFeedAgent, {"port": 0, "instruments": {"AAPL": 7}}, "unknown field `instruments`"),  # Bitget's name
])
def test_a_misspelt_param_fails_the_start_naming_the_process_and_the_field(name, agent, params, field):
    module = ITCH if agent is ItchFeedAgent else "procs.feed:BitgetFeedAgent"
    with pytest.raises(ConfigError) as err:
        agent().on_start(_named(make_ctx(params, module=module), name))
    assert str(err.value).startswith(f"{name}: bad params: Object contains ") and field in str(err.value)


@pytest.mark.parametrize("agent, params, field", [
    (BitgetFeedAgent, {"ping_interval_s": "30"}, "Expected `float`, got `str` - at `$.ping_interval_s`"),
    (BitgetFeedAgent, {"stale_after_s": 0}, "Expected `float` >= 0.001 - at `$.stale_after_s`"),
    (BitgetFeedAgent, {"backoff_jitter": -0.1}, "Expected `float` >= 0.0 - at `$.backoff_jitter`"),
    (BitgetFeedAgent, {"queue_frames": 8.5}, "Expected `int`, got `float` - at `$.queue_frames`"),
    (BitgetFeedAgent, {"resync_max_per_min": True}, "Expected `int`, got `bool` - at `$.resync_max_per_min`"),
    (BitgetFeedAgent, {"channels": "books"}, "Expected `array`, got `str` - at `$.channels`"),
    (BitgetFeedAgent, {"instruments": "BTCUSDT"}, "Expected `object | array | null`, got `str` - at `$.instruments`"),
    (BitgetFeedAgent, {"instruments": {"BTCUSDT": "1"}}, "Expected `int`, got `str` - at `$.instruments[...]`"),
    (BitgetFeedAgent, {"emit_trade_snapshots": 1}, "Expected `bool`, got `int` - at `$.emit_trade_snapshots`"),
    (BitgetFeedAgent, {"seed": "7"}, "Expected `int | null`, got `str` - at `$.seed`"),
    (BitgetFeedAgent, {"decode_in": "gpu"}, "Invalid enum value 'gpu' - at `$.decode_in`"),
    (BitgetFeedAgent, {"port_file": 8080}, "Expected `str`, got `int` - at `$.port_file`"),
    (ItchFeedAgent, {"port": "9000"}, "Expected `int | null`, got `str` - at `$.port`"),
    (ItchFeedAgent, {"port": 70_000}, "Expected `int` <= 65535 - at `$.port`"),
    (ItchFeedAgent, {"port": 0, "recv_buffer_bytes": 0}, "Expected `int` >= 1 - at `$.recv_buffer_bytes`"),
    (ItchFeedAgent, {"path": "x", "speed": "fast"}, "Invalid enum value 'fast' - at `$.speed`"),
    (ItchFeedAgent, {"path": "x", "speed": 0}, "Expected `float` > 0.0 - at `$.speed`"),
    (ItchFeedAgent, {"path": "x", "require_end": "no"}, "Expected `bool`, got `str` - at `$.require_end`"),
])
def test_an_ill_typed_param_fails_the_start_naming_the_process_and_the_field(agent, params, field):
    module = ITCH if agent is ItchFeedAgent else "procs.feed:BitgetFeedAgent"
    with pytest.raises(ConfigError) as err:
        agent().on_start(make_ctx({**(WS if agent is BitgetFeedAgent else {}), **params}, module=module))
    assert str(err.value) == f"feed: bad params: {field}"


def _plain(params: msgspec.Struct) -> dict:
    """``params`` as TOML would give them (tuples as lists)."""
    return msgspec.json.decode(msgspec.json.encode(params))


def test_the_typed_params_keep_the_documented_defaults():
    assert _plain(parse_params("feed", {}, BitgetFeedParams)) == {
        "url": "", "port_file": "", "inst_type": "SPOT", "channels": ["books15", "trade"], "instruments": None,
        "ping_interval_s": 30.0, "stale_after_s": 10.0, "backoff_initial_ms": 100.0, "backoff_max_ms": 5000.0,
        "backoff_jitter": 0.2, "seed": None, "open_timeout_s": 5.0, "resync_max_per_min": 30, "queue_frames": 8192,
        "max_msgs_per_s": 10.0, "record_path": "", "output": None, "emit_trade_snapshots": False,
        "decoder": "msgspec", "join_timeout_s": 2.0, "switch_interval_us": 100.0, "decode_in": "network"}
    assert _plain(parse_params("feed", {}, ItchFeedParams)) == {
        "path": None, "port": None, "speed": "max", "require_end": True, "skip_empty": False, "symbols": None,
        "midnight_epoch_ns": None, "session": None, "recv_buffer_bytes": 4 << 20, "port_file": "", "output": None,
        "rerequest_interval_ms": 20.0, "rerequest_max_messages": 1000, "rerequest_max": 10, "gap_timeout_ms": 500.0,
        "max_gap_messages": 100_000, "max_held_messages": 100_000}


@pytest.mark.parametrize("config", ["default.toml", "llm-7b.example.toml", "itch.toml"])
def test_the_shipped_configs_feed_params_load(config):
    kinds = {"procs.feed:BitgetFeedAgent": BitgetFeedParams, "procs.feed:ItchFeedAgent": ItchFeedParams}
    procs = [p for p in load_config(REPO_ROOT / "configs" / config).processes if p.module in kinds]
    assert procs, f"configs/{config} has no feed stage"
    for proc in procs:
        assert load_agent_class(proc.module).params_type is kinds[proc.module]  # what a check before start uses
        got = parse_params(proc.name, proc.params, kinds[proc.module])
        given = _plain(got)
        assert {k: given[k] for k in proc.params} == proc.params  # every value given arrived


# ------------------------------------------------------------------------------------- Bitget in-process
def test_subscribes_then_books15_snapshots_and_trades_become_book_and_trade_messages(start_feed):
    """One subscribe request for every instrument x channel; each books15 snapshot gives a BOOK with
    the top 15 levels a side; trades give TRADE messages; ts_origin_ns is the arrival stamp."""
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url, "instruments": ["BTCUSDT", "ETHUSDT"]})
        srv.wait_for(lambda: srv.subscribed(0), what="subscribe")
        subs = [Subscription("SPOT", ch, sym) for sym in ("BTCUSDT", "ETHUSDT") for ch in ("books15", "trade")]
        assert srv.conns[0].received[0] == subscribe_message(subs)

        btc_bids, btc_asks = ladder(100.0, -0.1, 20), ladder(100.5, 0.1, 20, size="2.25")
        frames = [
            depth(btc_bids, btc_asks, seq=5),
            depth(ladder(10.0, -0.1, 3), ladder(10.2, 0.1, 4), inst_id="ETHUSDT", seq=9, ts="1695710946999"),
            trades([("1695711090680", "100.4", "0.5", "buy", "1001"), ("1695711090681", "100.5", "0.25", "sell", "1002")]),
        ]
        pump(agent, lambda: _stats(agent, "frames") >= 4, what="the 4 subscribe acks")
        t_sent = srv.send(frames)
        pump(agent, lambda: _stats(agent, "books_emitted") == 2 and _stats(agent, "trades_emitted") == 2)

        port = _port(agent)
        btc, eth = port.books()
        assert (btc["instrument_id"], btc["n_bids"], btc["n_asks"], btc["seq"]) == (1, 15, 15, 5)
        assert btc["flags"] & BOOK_FLAG_SNAPSHOT
        assert btc["exch_ts_ns"] == 1695710946294 * 1_000_000
        assert list(btc["bid_px"]) == [float(p) for p, _ in btc_bids[:15]]
        assert list(btc["ask_px"]) == [float(p) for p, _ in btc_asks[:15]]
        assert set(btc["ask_sz"]) == {2.25} and set(btc["bid_sz"]) == {1.5}
        assert (eth["instrument_id"], eth["n_bids"], eth["n_asks"]) == (2, 3, 4)
        assert list(eth["bid_px"][:3]) == [10.0, 9.9, 9.8] and not eth["bid_px"][3:].any()
        t1, t2 = port.trades()
        assert (t1["side"], t1["trade_id"], t1["price"], t1["size"]) == (TRADE_SIDE_BUY, 1001, 100.4, 0.5)
        assert (t2["side"], t2["trade_id"], t2["price"]) == (TRADE_SIDE_SELL, 1002, 100.5)

        stamps = [(ts, written) for _, _, ts, written in port.msgs]
        assert all(t_sent <= ts <= written for ts, written in stamps), "arrival stamp: after the send, before the write"
        assert [ts for ts, _ in stamps] == sorted(ts for ts, _ in stamps)
        assert stamps[2][0] == stamps[3][0], "both trades of one frame carry that frame's arrival time"
        assert _stats(agent, "rejected") == 0 and _stats(agent, "connects") == 1


def test_pings_are_sent_and_pongs_keep_a_quiet_feed_alive(start_feed):
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url, "ping_interval_s": 0.05, "stale_after_s": 0.3})
        settle(agent, 0.7)
        assert srv.conns[0].received.count("ping") >= 5
        assert _stats(agent, "pongs") >= 5
        assert _stats(agent, "stale_timeouts") == 0 and len(srv.conns) == 1


def test_server_drop_reconnects_resubscribes_and_books_resume_only_after_a_fresh_snapshot(start_feed):
    ref = RefBook()

    def on_subscribe(conn, args):  # the first connection gets its snapshot; the second must ask again
        if conn.index == 0 or len(conn.ops("subscribe")) > 1:
            return [ref.snapshot(ladder(100.0 - conn.index, -0.1, 10), ladder(100.5, 0.1, 10))]
        return []

    with WsTestServer(on_subscribe=on_subscribe) as srv:
        agent = start_feed({"url": srv.url, "channels": ["books"]})
        pump(agent, lambda: _stats(agent, "books_emitted") == 1, what="first snapshot")
        srv.send([ref.update(bids=[["100.1", "3"]])])
        pump(agent, lambda: _stats(agent, "books_emitted") == 2, what="update")
        assert _port(agent).books()[1]["bid_px"][0] == 100.1

        srv.drop()
        pump(agent, lambda: _stats(agent, "reconnects") == 1 and srv.subscribed(1), what="reconnect")
        assert srv.conns[1].ops("subscribe")[0] == srv.conns[0].ops("subscribe")[0], "same subscription again"
        # an update consistent with the old book (seq and checksum follow on): not trusted across the gap
        srv.send([ref.update(asks=[["100.4", "1"]])])
        pump(agent, lambda: _stats(agent, "books_emitted") == 3, what="BOOK after the resync snapshot")
        books = _port(agent).books()
        assert books[2]["flags"] & BOOK_FLAG_SNAPSHOT and books[2]["seq"] == ref.seq
        assert books[2]["bid_px"][0] == 99.0, "the fresh snapshot of the second connection"
        assert _stats(agent, "books_dropped") == 1, "the update after the reconnect made no BOOK"
        assert _stats(agent, "resyncs") == 1 and srv.conns[1].ops("unsubscribe") == [[BTC_BOOKS]]
        assert _stats(agent, "connects") == 2 and _stats(agent, "disconnects") == 1


@pytest.mark.parametrize("fault", ["checksum", "seq_backwards"])
def test_checksum_mismatch_or_seq_going_back_invalidates_the_book_until_the_resync_snapshot(start_feed, fault):
    ref = RefBook()
    snapshots = iter([(100.0, 100.5), (200.0, 200.5), (300.0, 300.5)])

    def on_subscribe(conn, args):
        bid, ask = next(snapshots)
        return [ref.snapshot(ladder(bid, -0.5, 30), ladder(ask, 0.5, 30))]

    with WsTestServer(on_subscribe=on_subscribe) as srv:
        agent = start_feed({"url": srv.url, "channels": ["books"]})
        pump(agent, lambda: _stats(agent, "books_emitted") == 1)
        srv.send([ref.update(bids=[["100.0", "0"], ["99.75", "4"]], asks=[["100.75", "9"]])])
        pump(agent, lambda: _stats(agent, "books_emitted") == 2)
        good = _port(agent).books()[1]
        bids, asks = ref.top()
        assert list(good["bid_px"]) == bids and list(good["ask_px"]) == asks
        assert good["bid_sz"][0] == 4.0 and good["ask_sz"][1] == 9.0

        bad = (ref.update(asks=[["101.0", "2"]], checksum_delta=1) if fault == "checksum"
               else ref.update(asks=[["101.0", "2"]], seq=ref.seq - 5))
        srv.send([bad, ref.update(bids=[["99.5", "7"]])])  # the second is fine, but the book is invalid
        pump(agent, lambda: _stats(agent, "books_emitted") == 3, what="BOOK from the resync snapshot")
        counter = "checksum_failures" if fault == "checksum" else "seq_gaps"
        assert _stats(agent, counter) == 1 and _stats(agent, "resyncs") == 1
        assert _stats(agent, "books_dropped") == 1, "the update after the fault"
        fresh = _port(agent).books()[2]
        assert fresh["flags"] & BOOK_FLAG_SNAPSHOT and fresh["bid_px"][0] == 200.0 and fresh["ask_px"][0] == 200.5
        sent = srv.conns[0].received
        i_unsub = sent.index(unsubscribe_message([Subscription("SPOT", "books", "BTCUSDT")]))
        assert sent[i_unsub + 1] == subscribe_message([Subscription("SPOT", "books", "BTCUSDT")])
        assert len(srv.conns) == 1, "resynced on the same connection"


def test_resyncs_are_throttled_per_instrument(start_feed):
    ref = RefBook()
    with WsTestServer(on_subscribe=lambda c, a: [ref.snapshot(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5))]) as srv:
        agent = start_feed({"url": srv.url, "channels": ["books"], "resync_max_per_min": 1})
        pump(agent, lambda: _stats(agent, "books_emitted") == 1)
        srv.send([ref.update(bids=[["100.0", "2"]], checksum_delta=3)])
        pump(agent, lambda: _stats(agent, "books_emitted") == 2, what="first resync served")
        srv.send([ref.update(bids=[["100.0", "5"]], checksum_delta=3)])
        pump(agent, lambda: _stats(agent, "resyncs_throttled") == 1)
        srv.send([ref.update(bids=[["99.9", "5"]])])
        settle(agent, 0.1)
        assert _stats(agent, "resyncs") == 1 and _stats(agent, "books_emitted") == 2
        assert len(srv.conns[0].ops("unsubscribe")) == 1
        assert _stats(agent, "checksum_failures") == 2


MALFORMED = [
    "not json", "{", "[]", "42", "", "{}", '{"action":"snapshot"}', '{"event":"login"}',
    depth([["abc", "1"]], [["100.5", "1"]]),  # price not a number
    depth([["99.0", "1"], ["100.0", "1"]], [["100.5", "1"]]),  # bids not best first
    depth([["100.0", "1"]], [["100.5", "-1"]]),  # negative size
    depth([["100.0", "1", "x"]], [["100.5", "1"]]),  # a level that is not a pair
    depth([["100.0", "1"]], [["100.5", "1"]], seq="01"),
    depth([["100.0", "1"]], [["100.5", "1"]], checksum=2**40),
    depth([["100.0", "1"]], [["100.5", "1"]], action="partial"),
    '{"action":"snapshot","arg":{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"},"data":[]}',
    '{"action":"snapshot","arg":{"instType":"SPOT","channel":"ticker","instId":"BTCUSDT"},"data":[{}]}',
    trades([("1", "100", "1", "hold", "7")]),
    trades([("1", "100", "0", "buy", "7")]),
    b"\xff\xfe\x00binary",
    '{"action":"snapshot","arg":{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"},"data":[{"bids":[],"asks":[],"ts":"1"}]',
]


def test_malformed_frames_are_counted_by_reason_and_never_emit(start_feed):
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url})
        srv.wait_for(lambda: srv.subscribed(0))
        venue_error = '{"event":"error","code":"30005","msg":"instId doesn\'t exist","arg":{"instId":"X"}}'
        srv.send([*MALFORMED, depth([["1.0", "1"]], [["2.0", "1"]], inst_id="XRPUSDT"), venue_error, "pong"])
        pump(agent, lambda: _stats(agent, "pongs") == 1, what="the sentinel pong")
        s = agent.ctx.stats
        assert s["venue_errors"] == 1 and "30005" in agent.ctx.log.named("venue_error")[0]["detail"]
        assert s["rejected"] == len(MALFORMED)
        assert sum(v for k, v in s.items() if k.startswith("rej_")) == len(MALFORMED)
        assert "rej_internal" not in s, "a decoder bug"
        assert s["rej_bad_json"] >= 4 and s["rej_bad_number"] >= 2 and s["rej_unknown_channel"] == 1
        assert s["books_dropped"] == 1, "the unknown instrument"
        assert _port(agent).msgs == []
        assert len(srv.conns) == 1


_VALID = depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=1)
_BAD_NUMBERS = ["", ".", ".5", "5.", "01", "NaN", "inf", "-1", "1e5", " 1", "1_0", "0", "0x10", "1.2.3", "abc"]
_malformed = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=120).filter(lambda t: t != "pong"),
    st.binary(max_size=120).filter(lambda b: b != b"pong"),
    st.integers(1, len(_VALID) - 1).map(lambda k: _VALID[:k]),  # truncated
    st.tuples(st.sampled_from(_BAD_NUMBERS), st.integers(0, 4), st.booleans()).map(  # one bad price
        lambda t: depth([[t[0] if i == t[1] and t[2] else p, s] for i, (p, s) in enumerate(ladder(100.0, -0.1, 5))],
                        [[t[0] if i == t[1] and not t[2] else p, s] for i, (p, s) in enumerate(ladder(100.5, 0.1, 5))])),
)


@pytest.fixture
def quiet_feed(start_feed):
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url})
        srv.wait_for(lambda: srv.subscribed(0))
        yield srv, agent


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(_malformed, min_size=1, max_size=5))
def test_generated_malformed_frames_are_rejected_without_emitting(quiet_feed, frames):
    srv, agent = quiet_feed
    before, pongs = _stats(agent, "rejected"), _stats(agent, "pongs")
    srv.send([*frames, "pong"])
    pump(agent, lambda: _stats(agent, "pongs") == pongs + 1, what="the sentinel pong")
    assert _stats(agent, "rejected") == before + len(frames)
    assert "rej_internal" not in agent.ctx.stats
    assert _port(agent).msgs == []


def test_stale_feed_times_out_and_reconnects(start_feed):
    with WsTestServer(answer_ping=False) as srv:
        agent = start_feed({"url": srv.url, "stale_after_s": 0.15, "ping_interval_s": 30})
        pump(agent, lambda: _stats(agent, "stale_timeouts") >= 1 and _stats(agent, "reconnects") >= 1
             and srv.subscribed(1), timeout=5, what="stale timeout and reconnect")
        assert srv.conns[0].closed
        assert agent.ctx.log.named("ws_stale")


def test_inbox_overflow_counts_drops_and_resets_books_until_a_fresh_snapshot(start_feed):
    ref = RefBook()
    with WsTestServer(on_subscribe=lambda c, a: [ref.snapshot(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5))]) as srv:
        agent = start_feed({"url": srv.url, "channels": ["books"], "queue_frames": 10, "decode_in": "agent"})
        pump(agent, lambda: _stats(agent, "books_emitted") == 1)
        base = agent.net.counters.frames_in
        srv.send([ref.update(bids=[[f"{99.0 - i / 10:.1f}", "1"]]) for i in range(30)])  # nobody drains meanwhile
        srv.wait_for(lambda: agent.net.counters.frames_in == base + 30, what="30 frames in")
        pump(agent, lambda: not agent.inbox and _stats(agent, "queue_drops") == 20)
        assert _stats(agent, "books_emitted") == 11, "the 10 that fitted"
        srv.send([ref.update(asks=[["100.6", "2"]])])  # gap marker, then this update: not trusted
        pump(agent, lambda: _stats(agent, "books_emitted") == 12, what="BOOK from the resync snapshot")
        assert _stats(agent, "gap_resets") == 1 and _stats(agent, "resyncs") == 1
        assert _stats(agent, "checksum_failures") == 0, "reset before the update could be checked"
        assert _port(agent).books()[-1]["flags"] & BOOK_FLAG_SNAPSHOT


def test_record_mode_writes_the_capture_line_format(start_feed, tmp_path):
    path = tmp_path / "rec" / "bitget.capture"
    snap = depth(ladder(100.0, -0.1, 3), ladder(100.5, 0.1, 3), seq=3)
    with WsTestServer(on_subscribe=lambda c, a: [snap]) as srv:
        t0 = time.time()
        agent = start_feed({"url": srv.url, "record_path": str(path), "channels": ["books15"]})
        pump(agent, lambda: _stats(agent, "books_emitted") == 1)
        srv.send(["pong", trades([("1", "100.4", "0.5", "buy", "1")])])
        pump(agent, lambda: _stats(agent, "frames") == 4)
        agent.on_close()
        t1 = time.time()
    lines = list(read_capture(path))
    assert [ln.direction for ln in lines] == [OPEN, SEND, RECV, RECV, RECV, RECV]
    assert lines[1].text == subscribe_message([Subscription("SPOT", "books15", "BTCUSDT")])
    assert [ln.text for ln in lines[2:]] == [
        '{"event":"subscribe","arg":{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}}', snap, "pong",
        trades([("1", "100.4", "0.5", "buy", "1")])]
    times = [ln.receive_time_s for ln in lines]
    assert t0 <= times[0] and times == sorted(times) and times[-1] <= t1
    assert path.read_text().startswith(f"{srv.url} <-> ")


def test_port_file_is_read_at_each_attempt(start_feed, tmp_path):
    pf = tmp_path / "venue.port"
    with WsTestServer() as srv:
        agent = start_feed({"port_file": str(pf)})  # not there yet: attempts fail, with back-off
        pump(agent, lambda: _stats(agent, "connect_failures") >= 2)
        pf.write_text(f"{srv.port}\n")
        pump(agent, lambda: srv.subscribed(0) and _stats(agent, "connects") == 1, what="connect via the port file")


def test_on_close_stops_the_network_thread_and_closes_the_connection(start_feed):
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url})
        srv.wait_for(lambda: srv.subscribed(0))
        t = time.monotonic()
        agent.on_close()
        assert time.monotonic() - t < 2.0
        assert not agent.net.is_alive()
        srv.wait_for(lambda: srv.conns[0].closed, 2, what="server sees the close")
        assert _stats(agent, "disconnects") == 1


def test_a_full_output_ring_counts_out_drops(start_feed):
    with WsTestServer(on_subscribe=lambda c, a: [depth([["1.0", "1"]], [["2.0", "1"]], channel="books15")]) as srv:
        agent = start_feed({"url": srv.url, "channels": ["books15"]}, port=RecordingPort(accept=False))
        pump(agent, lambda: _stats(agent, "out_drops") == 1)
        assert _stats(agent, "books_emitted") == 0


# ------------------------------------------------------------------------------------- end to end
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_feed_process_books_reach_a_consumer_process_through_the_md_ring(pipe):
    """Supervisor + feed process (BitgetFeedAgent) + consumer process (BookCounter) over a real
    ``md`` ring, fed by the test's WebSocket server."""
    out = pipe.tmp / "md.txt"
    snap = lambda seq, bid: depth(ladder(bid, -0.1, 15), ladder(bid + 0.5, 0.1, 15), seq=seq)  # noqa: E731
    with WsTestServer(on_subscribe=lambda c, a: [snap(1, 100.0)]) as srv:
        pipe.write_config(
            ring("md", payload=512, capacity=1024, policy="drop")
            + process("feed", "procs.feed:BitgetFeedAgent", outputs=["md"], extra=BACK_OFF,
                      params=f'url = "{srv.url}", channels = ["books15", "trade"], backoff_initial_ms = 20, '
                             f'seed = 1, instruments = ["BTCUSDT"]')
            + process("books", "tests.support.agents:BookCounter", inputs=["md"], extra='wait = "blocking"\n',
                      params=f'out = "{out}"')
            + INSTRUMENTS)
        pipe.up()
        srv.wait_for(lambda: srv.subscribed(0), 10, what="the feed process to subscribe")
        srv.send([snap(seq, 100.0 + seq / 10) for seq in range(2, 51)]
                 + [trades([("1695711090680", "105.0", "0.5", "buy", "77")])])

        def lines():
            text = out.read_text() if out.exists() else ""
            return [ln.split() for ln in text.splitlines()]

        got = wait_until(lambda: (ls := lines()) and len(ls) == 51 and ls, 10, 0.02, "51 messages at the consumer")
        books = [ln for ln in got if ln[0] == "BOOK"]
        assert [int(b[2]) for b in books] == list(range(1, 51)), "every BOOK, in order"
        assert all(b[1] == "1" and b[3] == b[4] == "15" for b in books)
        assert float(books[-1][5]) == 105.0 and float(books[-1][6]) == 105.5
        assert got[-1][:5] == ["TRADE", "1", "77", "105.0", "0.5"]
        for ln in got:
            ts, read_ns = int(ln[-2]), int(ln[-1])
            assert 0 < ts <= read_ns, "ts_origin_ns is a monotonic stamp taken before the consumer read it"

        def feed_stats():
            st = pipe.procs()["feed"]["stage"]
            return st if st.get("books_emitted") == 50 else None

        st = wait_until(feed_stats, 5, 0.05, "feed counters in status")
        assert st["trades_emitted"] == 1 and st["rejected"] == 0 and st["reconnects"] == 0
        assert pipe.down() == 0
        srv.wait_for(lambda: srv.conns[0].closed, 5, what="the feed to close its connection on down")


# ------------------------------------------------------------------------------------- ITCH
SYMS = {"AAPL": 7, "MSFT": 8}


def _itch_agent(params, **kw) -> ItchFeedAgent:
    agent = ItchFeedAgent()
    agent.on_start(make_ctx({"symbols": SYMS, **params}, module="procs.feed:ItchFeedAgent", **kw))
    return agent


def test_itch_replay_emits_the_l3_book_state_after_every_change(tmp_path):
    path = tmp_path / "session.itch"
    path.write_bytes(generate_binaryfile(3, 3000, symbols=("AAPL", "MSFT", "SPY")))
    ref = L3Book(SYMS)
    expected = []  # (kind, payload or the executed shares, hidden) in order: a TRADE before the BOOK it changed
    n_msgs = 0
    for seq, (_, msg) in enumerate(iter_file_frames(path), 1):
        n_msgs += 1
        rec = M.decode(msg)
        iid = ref.apply_raw(msg, 0, len(msg), seq)
        if type(rec) is M.Trade and rec.stock_locate in {st.locate for st in ref.stocks() if st.instrument_id >= 0}:
            expected.append((Kind.TRADE, rec.shares, TRADE_FLAG_HIDDEN))
        if iid >= 0:
            if type(rec) is M.OrderExecuted or (type(rec) is M.OrderExecutedWithPrice and rec.printable == b"Y"):
                expected.append((Kind.TRADE, rec.executed_shares, 0))
            buf = bytearray(BOOK_DTYPE.itemsize)
            ref.write_payload(iid, buf)
            buf[2:4] = BOOK_FLAG_HIDDEN_REPORTED.to_bytes(2, "little")  # ITCH reports its non-displayed executions
            expected.append((Kind.BOOK, bytes(buf), 0))
    agent = _itch_agent({"path": str(path)}, batch=64)
    pump(agent, lambda: agent.ctx.stats["replay_done"], what="end of replay")
    assert agent.do_work() == 0
    got = [(k, p, 0) if k == Kind.BOOK else (k, float(np.frombuffer(p, TRADE_DTYPE, 1)[0]["size"]), p[3])
           for k, p, _, _ in _port(agent).msgs]
    n_books, n_hidden = sum(k == Kind.BOOK for k, _, _ in expected), sum(h for _, _, h in expected)
    assert n_books > 100 and n_hidden > 5 and len(expected) - n_books - n_hidden > 50
    assert got == expected, "payload for payload, the L3 book's state; each execution's TRADE before its BOOK"
    books = [p for k, p, _ in got if k == Kind.BOOK]
    last_aapl = [np.frombuffer(p, BOOK_DTYPE, 1)[0] for p in books if np.frombuffer(p, BOOK_DTYPE, 1)[0]["instrument_id"] == 7][-1]
    assert bytes(ref.book_payload(7))[4:] == last_aapl.tobytes()[4:]
    s = agent.ctx.stats
    assert s["messages"] == n_msgs and s["books_emitted"] == n_books and s["rejected"] == 0
    assert s["trades_emitted"] == len(expected) - n_books and s["hidden_trades"] == n_hidden
    agent.on_close()


@pytest.mark.parametrize("speed", [1.0, 4.0])
def test_itch_replay_paces_by_itch_timestamps_against_the_injected_clock(tmp_path, speed):
    path = tmp_path / "session.itch"
    path.write_bytes(generate_binaryfile(5, 500, symbols=("AAPL",)))
    stamps = [int.from_bytes(m[5:11], "big") for _, m in iter_file_frames(path)]
    t0 = stamps[0]
    now = [1_000]
    agent = _itch_agent({"path": str(path), "speed": speed, "symbols": {"AAPL": 7}}, batch=65536,
                        clock=lambda: now[0])
    for elapsed in (0, 1, 50_000, 400_000, 10**9):
        now[0] = 1_000 + elapsed
        agent.do_work()
        assert agent.ctx.stats["messages"] == sum(1 for t in stamps if t - t0 <= elapsed * speed), elapsed
    assert agent.do_work() == 0 and agent.ctx.stats["replay_done"] == 1
    agent.on_close()


def test_itch_replay_of_a_broken_file_counts_garbage_unknown_references_crossing_and_truncation(tmp_path):
    def R(loc, sym):
        return M.StockDirectory(loc, 0, 1, M.pad_alpha(sym, 8), b"Q", b"N", 100, b"N", b"C", b"  ", b"P",
                                b"N", b"N", b"1", b"N", 0, b"N")

    good = [M.encode(r) for r in (R(1, "AAPL"), M.AddOrder(1, 0, 5, 1, b"B", 100, M.pad_alpha("AAPL", 8), 1_000_000),
                                  M.OrderExecuted(1, 0, 6, 99, 10, 1),  # a reference never added
                                  M.AddOrder(1, 0, 7, 2, b"S", 100, M.pad_alpha("AAPL", 8), 999_900))]  # crosses
    data = encode_binaryfile([good[0], b"\xff" * 20, b"A" * 36, *good[1:]], end_of_session=False) + b"\x00\x24AB"
    path = tmp_path / "broken.itch"
    path.write_bytes(data)
    agent = _itch_agent({"path": str(path), "symbols": {"AAPL": 7}})
    pump(agent, lambda: agent.ctx.stats["replay_done"], what="end of replay")
    s = agent.ctx.stats
    assert (s["messages"], s["decode_errors"], s["unknown_refs"], s["crossed_books"]) == (6, 1, 1, 1)
    assert s["truncated"] == 1 and s["file_errors"] == 1 and s["books_emitted"] == 2 and s["rejected"] >= 2
    flags = [int(np.frombuffer(p, BOOK_DTYPE, 1)[0]["flags"]) for k, p, _, _ in _port(agent).msgs if k == Kind.BOOK]
    assert [bool(f & BOOK_FLAG_CROSSED) for f in flags] == [False, True]
    agent.on_close()


def test_itch_moldudp64_over_udp_re_requests_a_lost_packet_from_its_sender_and_recovers(tmp_path):
    msgs = [M.encode(r) for r in generate_session(11, 300, symbols=("AAPL",))]
    packets = [encode_packet("SESSION1", 1 + i, msgs[i:i + 10]) for i in range(0, len(msgs), 10)]
    agent = _itch_agent({"port": 0, "symbols": {"AAPL": 7}, "port_file": str(tmp_path / "itch.port")})
    assert (tmp_path / "itch.port").read_text().strip() == str(agent.port)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    tx.settimeout(5)
    try:
        for i, pkt in enumerate(packets):
            if i != 4:  # packet 4 lost on the way
                tx.sendto(pkt, ("127.0.0.1", agent.port))
        tx.sendto(b"short", ("127.0.0.1", agent.port))
        pump(agent, lambda: agent.ctx.stats["rerequests"] >= 1, what="a re-request")
        request, source = tx.recvfrom(64)
        assert decode_request(request) == (b"SESSION1  ", 41, 10) and source[1] == agent.port
        s = agent.ctx.stats
        assert s["gaps"] == 1 and s["rebuilding"] == 1 and s["messages"] == 40, "what follows the gap is held"
        tx.sendto(packets[4], source)  # the venue's answer
        pump(agent, lambda: s["messages"] == len(msgs), what="every message applied")
        assert (s["recovered"], s["unrecoverable"], s["rebuilding"], s["missing"], s["bad_datagrams"]) == (1, 0, 0, 0, 1)
        flags = [int(np.frombuffer(p, BOOK_DTYPE, 1)[0]["flags"]) for k, p, _, _ in _port(agent).msgs if k == Kind.BOOK]
        rebuilding = [bool(f & BOOK_FLAG_REBUILDING) for f in flags]
        assert any(rebuilding) and rebuilding[-1] is False and rebuilding.count(True) == sum(rebuilding)
    finally:
        tx.close()
        agent.on_close()


def test_idle_feed_parks_until_a_frame_arrives(start_feed):
    """With nothing in the inbox, wait_for_work sleeps for its timeout; a frame from the venue wakes
    it well before that (the network thread sets the event after each append)."""
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url, "instruments": ["BTCUSDT"], "decode_in": "agent"})
        srv.wait_for(lambda: srv.subscribed(0), what="subscribe")
        pump(agent, lambda: _stats(agent, "frames") >= 2, what="the subscribe acks")
        settle(agent, 0.05)
        t0 = time.monotonic()
        assert agent.wait_for_work(100_000_000) is False, "an empty inbox waits out the timeout"
        assert time.monotonic() - t0 >= 0.09
        threading.Timer(0.05, lambda: srv.send([depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=1)])).start()
        assert agent.wait_for_work(5_000_000_000) is True, "woken by the frame (a time-out returns False)"
        assert agent.do_work() >= 1


def test_by_default_the_network_thread_decodes_and_writes_without_the_agent_thread(start_feed):
    """decode_in = "network": BOOKs reach the ring while nobody calls do_work (no inbox, no hand-over);
    do_work only mirrors the network counters and never finds work."""
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url, "instruments": ["BTCUSDT"]})
        srv.wait_for(lambda: srv.subscribed(0), what="subscribe")
        srv.send([depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=s) for s in (1, 2, 3)])
        srv.wait_for(lambda: _stats(agent, "books_emitted") == 3, what="3 BOOKs written by the network thread")
        assert not agent.inbox and agent.do_work() == 0
        assert _stats(agent, "frames") >= 3 and agent.ctx.msgs_in >= 3
        assert agent.ctx.log.named("feed_starting")[0]["decode_in"] == "network"


def test_decode_in_must_name_a_thread(start_feed):
    with pytest.raises(ConfigError, match="decode_in"):
        start_feed({"url": "ws://127.0.0.1:9/x", "decode_in": "gpu"})


def _with_pseq(frame: str, pseq: int) -> str:
    d = json.loads(frame)
    d["data"][0]["pseq"] = pseq
    return json.dumps(d, separators=(",", ":"))


@pytest.mark.parametrize("channel", ["books15", "books"])
def test_keep_warm_decodes_the_latest_book_frame_privately_and_changes_no_output_book_or_counter(start_feed, channel):
    """keep_warm (the runner's hook while the feed idles): nothing before the first BOOK, nor on the
    first call after frames arrived; then the latest frame that made a BOOK is decoded and applied
    again on private books, and no message is written, no counter moves, and the real book (an
    incremental ``books`` book included: its seq check would refuse the same update twice) takes
    the next frame as if keep_warm never ran."""
    with WsTestServer() as srv:
        agent = start_feed({"url": srv.url, "instruments": ["BTCUSDT"], "channels": [channel]})
        srv.wait_for(lambda: srv.subscribed(0), what="subscribe")
        agent.keep_warm()  # no frame yet: nothing to warm, nothing raised
        if channel == "books15":
            first = [depth(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5), seq=1)]
            nxt = depth(ladder(100.1, -0.1, 5), ladder(100.6, 0.1, 5), seq=2)
        else:
            ref = RefBook()
            first = [ref.snapshot(ladder(100.0, -0.1, 5), ladder(100.5, 0.1, 5))]
            first.append(_with_pseq(ref.update(bids=[["99.95", "2"]]), ref.seq - 1))  # pseq as the venue sends it
            nxt = _with_pseq(ref.update(asks=[["100.55", "3"]]), ref.seq - 1)
        srv.send(first)
        srv.wait_for(lambda: _stats(agent, "books_emitted") == len(first), what="the first BOOKs")
        port = _port(agent)
        before = (dict(agent.ctx.stats), len(port.msgs), agent.ctx.msgs_out, agent.books.checksums_verified)
        assert agent._warm_frame is not None
        agent.keep_warm()
        assert sum(agent._warm_books.applied) == 0, "frames arrived since the last call: nothing to warm"
        for _ in range(50):
            agent.keep_warm()
        assert (dict(agent.ctx.stats), len(port.msgs), agent.ctx.msgs_out, agent.books.checksums_verified) == before
        warm = agent._warm_books
        assert warm.applied[Applied.EMITTED] == 50, "the private books made a BOOK each time"
        if channel == "books":
            assert warm.checksums_verified == 50, "the update applied to the copy of the book it made: checksum holds"
        assert bytes(agent._warm_buf) == bytes(port.msgs[-1][1]), "the private BOOK is the one the real book made"
        srv.send([nxt])
        srv.wait_for(lambda: _stats(agent, "books_emitted") == len(first) + 1, what="the next BOOK")
        assert _stats(agent, "seq_gaps") == 0 and _stats(agent, "checksum_failures") == 0 and _stats(agent, "rejected") == 0
        if channel == "books":
            assert list(port.books()[-1]["ask_px"][:2]) == ref.top()[1][:2]
