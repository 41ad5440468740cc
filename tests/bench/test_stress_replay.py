"""Stress from real sequences (``bench.stress_replay``): the plan of a replay, the noise each source
gets (and the noise it cannot get, said rather than faked), and the config every scenario runs."""

from __future__ import annotations

import gzip

import pytest

from bench.stress_replay import (BITGET, DELAY_MEAN_MS, DELAY_SD_MS, ITCH, ITCH_JUMP_PROB, JUMP_PROB, JUMP_TICKS,
                                 NOISE, ORDER_DROP, PROXY_PORT_FILE, SYNTHETIC_ITCH, ReplayError, detect_kind, noise_of,
                                 not_applied, order_path, replay_config_text, replay_plan, scenario_kind)
from pipeline.runtime.config import parse_config
from procs.feed import BitgetFeedParams, ItchFeedParams
from procs.feed import parse_params as feed_params
from procs.venue import parse_params as venue_params


@pytest.mark.parametrize("head, kind", [
    (b"wss://ws.bitget.com/spot/v1/stream <-> 1649290076.511507\n", BITGET),
    (b'{"action":"snapshot"}\r\n', BITGET),
    (b"", BITGET),
    (gzip.compress(b"whatever")[:16], ITCH),
    (b"\x00\x0cS\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00O", ITCH),  # a BinaryFILE: 2-byte length, then 'S'
])
def test_the_source_is_told_by_content(head, kind):
    assert detect_kind(head) == kind


def test_every_documented_noise_is_applied_to_each_source_and_says_how():
    assert len(NOISE) == 4 and all(set(how) == {BITGET, ITCH} for how in NOISE.values())
    assert not_applied(BITGET) == [] and not_applied(ITCH) == []
    assert all(applied and how for per in NOISE.values() for applied, how in per.values())
    assert JUMP_TICKS == 3  # the documented +-3 ticks


def test_the_bitget_plan_runs_clean_then_each_noise_with_the_hand_set_model(capture_path):
    plan = replay_plan(BITGET, str(capture_path), 10.0, 2.0)
    names = [sc.name for sc in plan]
    assert names == ["bitget-clean", "bitget-clean-hand-set", "bitget-delay-gauss-0-50ms", "bitget-md-drop-0.1pct",
                     "bitget-md-drop-5pct", "bitget-md-drop-0.1pct-books", "bitget-md-drop-5pct-books",
                     "bitget-price-jumps-3ticks-books", "bitget-order-drop-0.1pct", "bitget-order-drop-5pct"]
    assert [sc.model for sc in plan] == ["shipped"] + ["hand-set"] * 9 and {sc.seconds for sc in plan} == {2.0}
    by = {sc.name: sc for sc in plan}
    assert {sc.faults["source"] for sc in plan} == {"replay"} and {sc.faults["speed"] for sc in plan} == {10.0}
    assert by["bitget-delay-gauss-0-50ms"].faults["delay_ms"] == DELAY_MEAN_MS == 2 * DELAY_SD_MS
    assert by["bitget-md-drop-0.1pct"].faults["drop_prob"] == 0.001 and by["bitget-md-drop-5pct"].faults["drop_prob"] == 0.05
    assert by["bitget-md-drop-5pct-books"].channels == ("books", "trade")
    assert by["bitget-order-drop-5pct"].faults[ORDER_DROP] == 0.05
    jumps = by["bitget-price-jumps-3ticks-books"]  # on the checksummed channel: the shifted books must verify
    assert (jumps.faults["jump_prob"], jumps.faults["jump_ticks"], jumps.channels) == (JUMP_PROB, 3, ("books", "trade"))
    assert noise_of(by["bitget-clean"]) == "none" and noise_of(by["bitget-md-drop-5pct"]) == "drop_prob 0.05"


def test_the_itch_plan_replays_a_file_or_the_synthetic_session(tmp_path):
    plan = replay_plan(ITCH, SYNTHETIC_ITCH, 0.01, None)
    assert [sc.name for sc in plan] == ["itch-clean", "itch-clean-hand-set", "itch-delay-gauss-0-50ms",
                                        "itch-md-drop-0.1pct", "itch-md-drop-5pct", "itch-price-jumps-3ticks",
                                        "itch-order-drop-0.1pct", "itch-order-drop-5pct"]
    assert {sc.faults["itch_file"] for sc in plan} == {""} and {scenario_kind(sc) for sc in plan} == {ITCH}
    by = {sc.name: sc for sc in plan}
    assert by["itch-md-drop-5pct"].faults["itch_drop_prob"] == 0.05 and plan[0].seconds == 5.0
    delay = by["itch-delay-gauss-0-50ms"].faults
    assert (delay["itch_delay_ms"], delay["itch_delay_jitter_ms"]) == (DELAY_MEAN_MS, DELAY_SD_MS)
    jumps = by["itch-price-jumps-3ticks"].faults
    assert (jumps["itch_jump_prob"], jumps["itch_jump_ticks"]) == (ITCH_JUMP_PROB, 3)
    assert noise_of(by["itch-price-jumps-3ticks"]) == f"itch_jump_prob {ITCH_JUMP_PROB:g}, itch_jump_ticks 3"
    f = tmp_path / "day.itch"
    f.write_bytes(b"\x00\x0cS")
    one = replay_plan(ITCH, str(f), 1.0, 1.0, {"ZVZZT": 7})[0]
    assert one.faults["itch_file"] == str(f) and one.faults["itch_stocks"] == {"ZVZZT": 7}


@pytest.mark.parametrize("kind, path, speed, why", [
    ("csv", SYNTHETIC_ITCH, 1.0, "replay kind"),
    (ITCH, SYNTHETIC_ITCH, 0.0, "--speed"),
    (BITGET, "no/such/capture", 1.0, "not a file"),
])
def test_a_replay_that_cannot_run_is_refused_with_its_reason(kind, path, speed, why):
    with pytest.raises(ReplayError, match=why):
        replay_plan(kind, path, speed, None)


def _check_params(cfg):
    """Every venue and feed param of ``cfg`` is one the stage takes (each fails its start otherwise)."""
    venue, feed = cfg.process("venue"), cfg.process("feed")
    venue_params("venue", venue.params)
    feed_params("feed", feed.params, ItchFeedParams if feed.module.endswith("ItchFeedAgent") else BitgetFeedParams)


def test_every_bitget_scenario_config_decodes_with_the_captures_instruments(tmp_path, capture_path):
    for i, sc in enumerate(replay_plan(BITGET, str(capture_path), 10.0, 1.0)):
        cfg = parse_config(replay_config_text(sc, tmp_path / sc.name, f"bq{i}"))
        _check_params(cfg)
        assert cfg.process("feed").module == "procs.feed:BitgetFeedAgent"
        syms = {i.symbol: i.tick_size for i in cfg.instruments}
        assert len(syms) == 8 and syms["STGUSDT"] == 0.001 and syms["CULTUSDT"] == 1e-08
        assert ORDER_DROP not in cfg.process("venue").params  # the bench's own fault, not the venue's
        to = cfg.process("sender").params["venue_port_file"]
        assert to.endswith(PROXY_PORT_FILE) == (ORDER_DROP in sc.faults), (sc.name, to)


def test_every_itch_scenario_config_decodes_with_the_itch_feed_and_book(tmp_path):
    for i, sc in enumerate(replay_plan(ITCH, SYNTHETIC_ITCH, 0.01, 1.0)):
        cfg = parse_config(replay_config_text(sc, tmp_path / sc.name, f"bi{i}"))
        _check_params(cfg)
        venue = cfg.process("venue").params
        assert venue["itch_orders"] is True and venue["itch_port_file"] == cfg.process("feed").params["port_file"]
        assert [(i.symbol, i.tick_size, i.lot_size) for i in cfg.instruments] == [("AAPLUSDT", 0.01, 1), ("MSFTUSDT", 0.01, 1)]


def test_the_order_path_is_lossy_only_where_the_scenario_drops_orders(tmp_path):
    clean, lossy = replay_plan(ITCH, SYNTHETIC_ITCH, 0.01, 1.0)[0], replay_plan(ITCH, SYNTHETIC_ITCH, 0.01, 1.0)[-1]
    with order_path(clean, tmp_path) as nothing:
        assert nothing is None
    with order_path(lossy, tmp_path) as stats:
        assert stats["dropped"] == 0 and (tmp_path / "run" / PROXY_PORT_FILE).is_file()
