"""``procs.venue:VenueAgent``: the paper venue as a stage. In-process (the agent protocol driven by
hand, as the runner would) and under the real supervisor (``make up`` style, bounded)."""

from __future__ import annotations


import pytest

from pipeline.trading.bitget import FrameKind
from pipeline.venue.errors import VenueConfigError, VenueError
from pipeline.runtime.portfile import read_port_file
from procs.venue import PUBLISHED_STATS, VenueAgent, parse_params
from tests.support.configtext import BACK_OFF, INSTRUMENTS, process
from tests.support.context import venue_context
from tests.support.paths import CAPTURE_PATH
from tests.support.venue import Client, sub
from tests.support.wait import wait_until


def test_agent_serves_paper_instruments_writes_the_port_file_and_publishes_counters(tmp_path):
    ctx = venue_context(tmp_path, "seed = 3, speed = 5.0")
    agent = VenueAgent()
    agent.on_start(ctx)
    try:
        port_file = tmp_path / "run" / "venue.port"
        port = read_port_file(port_file)
        assert agent.server.inst_ids == ["BTCUSDT", "ETHUSDT"]  # SOLUSDT is not a paper instrument
        c = Client(f"ws://127.0.0.1:{port}/v2/ws/public")
        try:
            c.subscribe(sub("books", "BTCUSDT"))
            c.until_seq("books", "BTCUSDT", agent.server.seq("BTCUSDT") + 5)
            assert c.ok() and c.books.checksums_verified >= 5
            assert agent.do_work() == 0
            agent._next_stats_ns = 0
            agent.do_work()
            assert set(ctx.stats) == set(PUBLISHED_STATS)
            assert ctx.stats["connections"] == 1 and ctx.stats["subscriptions"] == 1
            assert ctx.stats["frames_sent"] >= 6 and ctx.stats["book_events"] > 0
        finally:
            c.close()
    finally:
        agent.on_close()
    assert not agent.thread.alive and agent.thread.error is None
    assert not port_file.exists()


def test_agent_can_also_send_itch_over_moldudp64(tmp_path):
    import socket

    from pipeline.trading.itch.framing import decode_packet

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(3)
        ctx = venue_context(tmp_path, f"itch_port = {rx.getsockname()[1]}, itch_events = 300, itch_rate = 0")
        agent = VenueAgent()
        agent.on_start(ctx)
        try:
            count = 0
            while not (p := decode_packet(rx.recv(65536))).is_end_of_session:
                count += len(p.messages)
            assert count == len(agent.itch.stream.messages) > 300
            agent._next_stats_ns = 0
            agent.do_work()
            assert ctx.stats["itch_msgs"] == count
        finally:
            agent.on_close()


def test_agent_sends_itch_delayed_and_jumping_when_asked_and_counts_both(tmp_path):
    import socket

    from pipeline.trading.itch.framing import decode_packet

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(3)
        ctx = venue_context(tmp_path, f"itch_port = {rx.getsockname()[1]}, itch_events = 300, itch_rate = 0, "
                                      "itch_delay_ms = 20.0, itch_delay_jitter_ms = 10.0, itch_jump_prob = 0.2")
        agent = VenueAgent()
        agent.on_start(ctx)
        try:
            while not decode_packet(rx.recv(65536)).is_end_of_session:
                pass
            agent._next_stats_ns = 0
            agent.do_work()
            assert ctx.stats["itch_delayed_packets"] >= ctx.stats["itch_msgs"] // 100 > 0
            assert ctx.stats["itch_jumps"] == agent.itch_counts["jumps"] > 10  # ~ 0.2 * ~150 Add / Replace
        finally:
            agent.on_close()
    p = parse_params("venue", {"source": "replay", "capture": "c", "jump_prob": 0.1})  # a replay jumps too
    assert (p.jump_prob, p.jump_ticks) == (0.1, 3)
    for field, bad in (("itch_delay_ms", -1.0), ("itch_delay_jitter_ms", 50.5), ("itch_jump_prob", 1.5),
                       ("itch_jump_ticks", 0)):
        with pytest.raises(VenueConfigError, match=rf"venue: .*\$\.{field}"):
            parse_params("venue", {field: bad})


def test_agent_refuses_unknown_params(tmp_path):
    with pytest.raises(VenueError, match="unknown venue params"):
        VenueAgent().on_start(venue_context(tmp_path, "prot = 1"))


def test_agent_replays_a_capture(tmp_path, capture_path):
    ctx = venue_context(tmp_path, f'source = "replay", capture = "{CAPTURE_PATH}", speed = 100.0, loop = true, '
                         f'port_file = "{tmp_path / "p"}"')
    agent = VenueAgent()
    agent.on_start(ctx)
    try:
        c = Client(f"ws://127.0.0.1:{read_port_file(tmp_path / 'p')}/v2/ws/public", {"SUNUSDT": 1})
        try:
            c.subscribe(sub("books", "SUNUSDT"))
            c.until(lambda d: d.kind == FrameKind.UPDATE)
            assert c.ok()
        finally:
            c.close()
    finally:
        agent.on_close()


def test_agent_raises_on_every_call_once_its_server_thread_is_gone(tmp_path):
    agent = VenueAgent()
    agent.on_start(venue_context(tmp_path, ""))
    agent.thread.stop()
    agent._next_stats_ns = 0
    for _ in range(3):
        with pytest.raises(VenueError, match="thread ended"):
            agent.do_work()
    agent.on_close()


@pytest.mark.multiprocess
def test_supervised_venue_serves_clients_and_reports_its_counters(pipe):
    pipe.write_config(process("venue", "procs.venue:VenueAgent", extra=BACK_OFF, params="seed = 2, speed = 2.0")
                      + INSTRUMENTS)
    pipe.up(run_for=60)
    port = wait_until(lambda: pipe.run_dir.joinpath("venue.port").exists() and read_port_file(pipe.run_dir / "venue.port"),
                      10, what="the port file")
    c = Client(f"ws://127.0.0.1:{port}/v2/ws/public")
    try:
        c.subscribe(sub("books", "ETHUSDT"), sub("trade", "ETHUSDT"))
        c.until(lambda d: d.kind == FrameKind.UPDATE and len(c.seqs[("books", "ETHUSDT")]) > 10, timeout=5)
        assert c.ok()
        stage = wait_until(lambda: (s := pipe.procs()["venue"]["stage"]).get("subscriptions") == 2 and s, 5,
                           what="the venue's counters in status")
        assert stage["connections"] == 1 and stage["frames_sent"] > 10
    finally:
        c.close()
    assert pipe.down() == 0
    assert not (pipe.run_dir / "venue.port").exists()


def test_a_bad_or_unknown_param_is_a_config_error_naming_the_process_so_the_start_is_not_retried(tmp_path):
    from pipeline.runtime.errors import ConfigError

    with pytest.raises(ConfigError, match="venue: unknown venue params"):  # the runner's permanent kind
        VenueAgent().on_start(venue_context(tmp_path, "prot = 1"))
    with pytest.raises(ConfigError, match="jump_prob"):
        VenueAgent().on_start(venue_context(tmp_path, "jump_prob = 1.5"))


def test_the_params_are_a_frozen_struct_that_names_a_bad_field():
    from pipeline.runtime.runner import load_agent_class
    from pipeline.venue.errors import VenueConfigError
    from procs.venue import VenueParams, parse_params

    assert load_agent_class("procs.venue:VenueAgent").params_type is VenueParams  # what a check before start uses
    p = parse_params("venue", {"seed": 2, "speed": 2, "gap_every_s": 1.5})
    assert (p.seed, p.speed, p.gap_every_s, p.source, p.key_file) == (2, 2.0, 1.5, "synthetic", "secrets/paper.json")
    with pytest.raises(VenueConfigError, match=r"venue: unknown venue params \['prot'\]"):
        parse_params("venue", {"prot": 1})
    for params, field in (({"loop": 1}, "loop"), ({"port": "80"}, "port"), ({"max_notional": -1.0}, "max_notional"),
                          ({"account_path": 5}, "account_path")):
        with pytest.raises(VenueConfigError, match=rf"venue: .*\$\.{field}"):
            parse_params("venue", params)


def test_agent_serves_the_calibrated_market_when_asked(tmp_path):
    from pipeline.venue.synthetic import CALIBRATED

    ctx = venue_context(tmp_path, 'market = "calibrated", speed = 20.0')
    agent = VenueAgent()
    agent.on_start(ctx)
    try:
        src = agent.server.source
        assert src.params == CALIBRATED and src.step_ms == 550
        c = Client(f"ws://127.0.0.1:{read_port_file(tmp_path / 'run' / 'venue.port')}/v2/ws/public")
        try:
            c.subscribe(sub("books", "BTCUSDT"))
            c.until_seq("books", "BTCUSDT", agent.server.seq("BTCUSDT") + 3)
            assert c.ok() and c.books.checksums_verified >= 3
        finally:
            c.close()
    finally:
        agent.on_close()


def test_agent_refuses_an_unknown_market_naming_the_field(tmp_path):
    with pytest.raises(VenueError, match="venue: market must be one of"):  # at the params check, named
        VenueAgent().on_start(venue_context(tmp_path, 'market = "realistic"'))


def test_make_ups_venue_serves_the_calibrated_market_at_bitgets_spot_fees():
    from pipeline.runtime.config import load_config
    from pipeline.venue.fees import BITGET_SPOT_STANDARD
    from procs.venue import fee_schedule, parse_params
    from tests.support.paths import REPO_ROOT

    p = parse_params("venue", load_config(REPO_ROOT / "configs" / "default.toml").process("venue").params)
    assert p.market == "calibrated" and p.source == "synthetic" and p.step_ms is None  # the market's own 550 ms
    assert fee_schedule(p) == BITGET_SPOT_STANDARD
