"""`make up`'s own configuration, run for real (with this test's prefix and directories): the paper
venue, the feed, the feature engine and the fast path come up, BOOK messages flow into the md ring with
valid checksums, FEATURES into the feat ring and SIGNALs into sig_risk, nothing is rejected, and `down`
leaves nothing."""

from __future__ import annotations

import pytest

from pipeline.config import load_config
from tests.pipeline._support import REPO_ROOT, shm_entries, wait_until


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_default_config_runs_venue_feed_and_features_into_the_feat_ring(pipe):
    text = (REPO_ROOT / "configs" / "default.toml").read_text()
    for old, new in (('shm_prefix = "tp"', f'shm_prefix = "{pipe.prefix}"'),
                     ('run_dir = "run"', f'run_dir = "{pipe.run_dir}"'),
                     ('log_dir = "logs"', f'log_dir = "{pipe.log_dir}"'),
                     ('port_file = "run/venue.port"', f'port_file = "{pipe.run_dir}/venue.port"')):
        assert old in text, f"configs/default.toml no longer has {old!r}"
        text = text.replace(old, new)
    path = pipe.tmp / "default.toml"
    path.write_text(text)
    pipe.paths.append(path)
    pipe.cfg_path, pipe.cfg = path, load_config(path)

    status = pipe.up()
    assert {p["name"]: p["state"] for p in status["processes"]} == {"venue": "RUNNING", "feed": "RUNNING",
                                                                     "features": "RUNNING", "fast": "RUNNING"}

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
    assert pipe.down() == 0
    assert shm_entries(pipe.prefix) == []
