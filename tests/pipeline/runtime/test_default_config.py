"""`make up`'s own configuration, run for real (with this test's prefix and directories): every stage
comes up (paper venue, feed, features, fast, llm, risk, sender), BOOK messages flow into the md ring
with valid checksums, FEATURES into feat, SIGNALs into sig_risk and sig_llm, validated INSTRUCTIONs
into instr, the risk gateway syncs with the sender, nothing is rejected, an operator halt reaches the
gateway through the control ring, and `down` leaves nothing.

Two lines of the copy differ besides the paths: the operator's web server is off (the ops tests run it),
and the fast stage's LEAN thresholds are 0 so that every signal goes to the slow path. The deployed
model on the calibrated market never LEANs (no move beats its round trip) and says EMERGENCY on ~0.6 %
of updates, a few a minute at ~4 books/s: too few for this test to see the LLM answer in its time."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import load_config
from tests.support.paths import REPO_ROOT
from tests.support.shipped import use_shipped_config
from tests.support.shm import shm_entries
from tests.support.wait import wait_until


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_default_config_runs_every_stage_against_the_paper_venue(pipe):
    use_shipped_config(pipe, "default.toml", "tp", "run", "logs",
                       ('port_file = "run/venue.port"', f'port_file = "{pipe.run_dir}/venue.port"'),
                       ('venue_port_file = "run/venue.rest.port"', f'venue_port_file = "{pipe.run_dir}/venue.rest.port"'),
                       ("thresholds = { buy = 1.01, sell = 1.01,", "thresholds = { buy = 0.0, sell = 0.0,"))

    status = pipe.up()
    assert {p["name"]: p["state"] for p in status["processes"]} == dict.fromkeys(
        ("venue", "feed", "features", "fast", "llm", "risk", "sender"), "RUNNING")

    def feed_stats():
        return next(p for p in pipe.status()["processes"] if p["name"] == "feed")["stage"]

    wait_until(lambda: feed_stats().get("books_emitted", 0) >= 50, 30, 0.1, "50 BOOK messages from the feed")
    st = pipe.status()
    md = next(r for r in st["rings"] if r["name"] == "md")
    feed = feed_stats()
    assert md["write_cursor"] >= 50 and md["crc_errors"] == 0
    assert feed["checksum_failures"] == 0 and feed["rejected"] == 0 and feed["seq_gaps"] == 0
    assert feed["reconnects"] == 0
    venue = next(p for p in st["processes"] if p["name"] == "venue")["stage"]
    assert venue["connections"] == 1 and venue["subscriptions"] == 4  # 2 instruments x (books, trade)
    def feature_stats():
        return next(p for p in pipe.status()["processes"] if p["name"] == "features")["stage"]

    fs = wait_until(lambda: (s := feature_stats()).get("emitted", 0) >= 50 and s, 30, 0.1,
                    "50 FEATURES from the feature engine")
    feat = next(r for r in pipe.status()["rings"] if r["name"] == "feat")
    assert feat["write_cursor"] >= 50 and feat["crc_errors"] == 0
    assert fs["rejected"] == 0 and fs["books"] >= fs["emitted"] and fs.get("errors", 0) == 0
    def fast_stats():
        return next(p for p in pipe.status()["processes"] if p["name"] == "fast")["stage"]

    fa = wait_until(lambda: (s := fast_stats()).get("signals", 0) >= 50 and s, 30, 0.1, "50 SIGNALs from fast")
    sig = next(r for r in pipe.status()["rings"] if r["name"] == "sig_risk")
    assert sig["write_cursor"] >= 50 and sig["crc_errors"] == 0
    assert fa["provider"] in ("CPU", "CUDA") and fa["rejected"] == 0 and fa.get("errors", 0) == 0
    assert fa["hold"] + fa["lean_buy"] + fa["lean_sell"] + fa["emergency"] == fa["features"] >= fa["signals"]

    def stage(name):
        return next(p for p in pipe.status()["processes"] if p["name"] == name)["stage"]

    llm = wait_until(lambda: (s := stage("llm")).get("instructions", 0) >= 3 and s, 30, 0.1, "3 INSTRUCTIONs")
    assert llm["model"] == "SmolLM2-135M-Instruct.Q4_0.gguf" and llm["breaker"] == "closed" and llm["instr_drops"] == 0
    risk = wait_until(lambda: (s := stage("risk")).get("synced") == 1 and s, 30, 0.1, "the gateway synced")
    assert risk["state"] == "ACTIVE" and risk.get("errors", 0) == 0 and risk["rejected"] == 0
    sender = stage("sender")
    assert sender["malformed"] == 0 and sender["http_err"] == 0 and sender["torn"] == 0
    venue = stage("venue")
    assert venue["bad_signatures"] == 0 and venue["stale_timestamps"] == 0
    assert pipe.request({"cmd": "halt"})["ok"]
    wait_until(lambda: stage("risk")["state"] == "HALTED", 10, 0.05, "risk HALTED after the operator's halt")
    assert pipe.down() == 0
    assert shm_entries(pipe.prefix) == []


@pytest.mark.parametrize("name", ["default.toml", "llm-7b.example.toml"])
def test_every_shipped_config_decodes(name):
    cfg = load_config(REPO_ROOT / "configs" / name)
    assert [p.name for p in cfg.processes] == ["venue", "feed", "features", "fast", "llm", "risk", "sender"]
    llm = cfg.process("llm").params
    from pipeline.trading.llm.hub import parse_params
    from pipeline.trading.risk import decode_limits

    parse_params(llm)  # the stages' own strict decoders accept them
    decode_limits(cfg.process("risk").params["limits"])
    if name == "llm-7b.example.toml":
        assert cfg.gpu.require and llm["n_gpu_layers"] == 99 and llm["model_path"].endswith(".gguf")
        assert not llm["model_path"].startswith("models/generated"), "a real model by path, not the stand-in"
