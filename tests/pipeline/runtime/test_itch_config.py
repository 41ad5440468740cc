"""configs/itch.toml run for real under the supervisor (with this test's prefix and directories): the
paper venue replays the synthetic ITCH session as MoldUDP64 over UDP, the ITCH feed writes BOOKs (and
TRADEs) into md, features and fast turn them into SIGNALs, and orders reach the paper venue, which
matches them against the replayed ITCH book.

Four lines of the copy differ besides the paths: the operator's web server is off, the fast stage runs
the bench's hand-set model (bench.pipeline_config.write_bench_model: LEAN on the 5-level imbalance; the
shipped model, trained on the calibrated crypto market, says HOLD on equity books outside its bounds) with
the stage's default LEAN thresholds (0.4; the shipped config's 1.01 never LEANs), and ``lean_lots = 1`` so
that a LEAN becomes an order. The venue drops two chosen packets (itch_drop_seqs): the
feed must re-request them and recover."""

from __future__ import annotations

import pytest

from bench.pipeline_config import write_bench_model
from pipeline.runtime.config import load_config
from tests.support.paths import REPO_ROOT
from tests.support.shipped import use_shipped_config
from tests.support.shm import shm_entries
from tests.support.wait import wait_until


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_itch_config_runs_every_stage_and_orders_reach_the_venue(pipe):
    model = write_bench_model(pipe.tmp / "bench-model.onnx")
    use_shipped_config(pipe, "itch.toml", "tpitch", "run/itch", "logs/itch",
                       ('"run/itch/', f'"{pipe.run_dir}/'),
                       ("itch_orders = true", "itch_orders = true, itch_drop_seqs = [400, 2000]"),
                       ('model_path = "models/generated/fast.onnx"', f'model_path = "{model}"'),
                       ("thresholds = { buy = 1.01, sell = 1.01,", "thresholds = { buy = 0.4, sell = 0.4,"),
                       ("lean_lots = 0", "lean_lots = 1"))

    status = pipe.up()
    assert {p["name"]: p["state"] for p in status["processes"]} == dict.fromkeys(
        ("venue", "feed", "features", "fast", "llm", "risk", "sender"), "RUNNING")

    def stage(name):
        return next(p for p in pipe.status()["processes"] if p["name"] == name)["stage"]

    feed = wait_until(lambda: (s := stage("feed")).get("books_emitted", 0) >= 200 and s, 40, 0.1, "200 ITCH BOOKs")
    md = next(r for r in pipe.status()["rings"] if r["name"] == "md")
    assert md["write_cursor"] >= 200 and md["crc_errors"] == 0
    assert feed["rejected"] == 0 and feed["decode_errors"] == 0 and feed["bad_datagrams"] == 0
    feed = wait_until(lambda: (s := stage("feed")).get("recovered", 0) >= 2 and s, 30, 0.1, "both gaps recovered")
    assert feed["gaps"] == 2 and feed["rerequests"] >= 2 and feed["unrecoverable"] == 0 and feed["invalid_stocks"] == 0
    fa = wait_until(lambda: (s := stage("fast")).get("signals", 0) >= 100 and s, 30, 0.1, "100 SIGNALs from fast")
    assert fa["rejected"] == 0 and fa.get("errors", 0) == 0, fa
    fa = wait_until(lambda: (s := stage("fast"))["lean_buy"] + s["lean_sell"] > 0 and s, 30, 0.1, "a LEAN")
    venue = wait_until(lambda: (s := stage("venue")).get("orders_placed", 0) >= 1 and s, 40, 0.1,
                       "a paper order placed at the venue")
    assert venue["bad_signatures"] == 0 and venue["itch_packets_dropped"] == 2 and venue["itch_requests"] >= 2
    risk = stage("risk")
    assert risk["state"] == "ACTIVE" and risk.get("errors", 0) == 0
    assert pipe.down() == 0
    assert shm_entries(pipe.prefix) == []


def test_the_itch_config_decodes_with_the_stages_own_decoders():
    cfg = load_config(REPO_ROOT / "configs" / "itch.toml")
    assert [p.name for p in cfg.processes] == ["venue", "feed", "features", "fast", "llm", "risk", "sender"]
    from pipeline.runtime.config import parse_stage_params
    from pipeline.trading.risk import decode_limits
    from procs.feed import ItchFeedParams
    from procs.venue import parse_params

    venue = parse_params("venue", cfg.process("venue").params)
    assert venue.itch_orders and venue.itch_speed > 0 and venue.itch_file == ""
    parse_stage_params("feed", cfg.process("feed").params, ItchFeedParams)
    decode_limits(cfg.process("risk").params["limits"])
    rules = {i.symbol: (i.tick_size, i.lot_size) for i in cfg.instruments}
    assert rules == {"AAPLUSDT": (0.01, 1), "MSFTUSDT": (0.01, 1)}
