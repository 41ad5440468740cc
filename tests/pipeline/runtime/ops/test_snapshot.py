"""One snapshot of the pipeline (pipeline/runtime/ops/snapshot.py): the supervisor's status, every
ring's whole control block, CPU from /proc."""

from __future__ import annotations

import os

from pipeline.runtime.config import load_config
from pipeline.runtime.ops.snapshot import RING_FIELDS, cpu_seconds, cpu_seconds_from_stat, ring_ends, take_snapshot
from tests.support.ops import FakeSource
from tests.support.paths import REPO_ROOT


def test_cpu_seconds_are_utime_plus_stime_after_the_command_name():
    # a command name with spaces and parentheses; fields 14 and 15 are utime and stime
    line = "1234 (we ird) (name)) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1 0 100"
    assert cpu_seconds_from_stat(line, ticks_per_s=100) == 4.0
    assert cpu_seconds_from_stat("garbage", 100) is None
    assert cpu_seconds_from_stat("1 (x) S 1 2", 100) is None
    assert cpu_seconds_from_stat("1 (x) S 1 2 3 4 5 6 7 8 9 10 a b", 100) is None


def test_cpu_seconds_of_a_live_and_a_gone_process():
    sum(i * i for i in range(200_000))  # some CPU of our own
    assert cpu_seconds(os.getpid()) > 0
    assert cpu_seconds(0) is None
    assert cpu_seconds(2**22 + 12345) is None


def test_ring_ends_of_the_default_config():
    ends = ring_ends(load_config(REPO_ROOT / "configs" / "default.toml"))
    assert ends["md"] == ("feed", "features") and ends["exec"] == ("sender", "risk")
    assert ends["control"] == ("supervisor", "risk")


def test_a_snapshot_adds_cpu_and_whole_ring_blocks_to_the_status():
    cfg = load_config(REPO_ROOT / "configs" / "default.toml")
    src = FakeSource()
    src.snap["rings"][6]["stall_ns"] = 42
    snap = take_snapshot(src, cfg, 123, cpu=lambda pid: pid / 1000)
    assert snap["t_ns"] == 123 and snap["halted"] is False
    assert [p["cpu_s"] for p in snap["processes"]] == [p["pid"] / 1000 for p in src.snap["processes"]]
    orders = next(r for r in snap["rings"] if r["name"] == "orders")
    assert set(orders) == {"name", "producer", "consumer", *RING_FIELDS}
    assert (orders["producer"], orders["consumer"], orders["stall_ns"]) == ("risk", "sender", 42)
    assert snap["instruments"] == {i.id: i.symbol for i in cfg.instruments}
    assert [p["lat_hist"] for p in snap["processes"]] == [p["lat_hist"] for p in src.snap["processes"]]
