"""Configuration: the shipped file loads; bad files are rejected with the field path; a bad file
stops ``up`` before anything is created."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import Config, load_config, parse_config
from pipeline.runtime.errors import ConfigError
from tests.support.configtext import process, ring
from tests.support.paths import REPO_ROOT
from tests.support.shm import shm_entries

RING_A = ring("a", payload=8, capacity=8, policy="drop")


def rejected(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "bad.toml")
    msg = str(info.value)
    assert msg.startswith("bad.toml: "), msg
    return msg


def test_default_config_loads():
    cfg = load_config(REPO_ROOT / "configs" / "default.toml")
    assert isinstance(cfg, Config)
    assert cfg.supervisor.shm_prefix == "tp"
    assert cfg.supervisor.control_ring == "control"
    assert cfg.ring("control").max_payload_bytes == 16
    assert {r.name for r in cfg.rings} >= {"md", "feat", "orders", "exec", "control"}
    assert [i.symbol for i in cfg.instruments] == ["BTCUSDT", "ETHUSDT"]
    assert cfg.gpu.require is False


def test_unknown_field_rejected_with_its_path():
    msg = rejected(RING_A.replace('full_policy = "drop"', 'full_policy = "drop"\ncolour = "red"'))
    assert "colour" in msg and "$.rings[0]" in msg, msg


def test_unknown_field_in_supervisor_rejected():
    msg = rejected('[supervisor]\nshm_prefix = "x"\npoll_interval = 5\n')
    assert "poll_interval" in msg and "$.supervisor" in msg, msg


@pytest.mark.parametrize(("text", "path", "bound"), [
    ('[supervisor]\npoll_interval_ms = 5000\n', "$.supervisor.poll_interval_ms", "<= 1000"),
    (ring("a", payload=70000), "$.rings[0].max_payload_bytes", "<= 65535"),
    (RING_A + process("p", "Idle", extra="heartbeat_timeout_ms = 0\n"), "$.processes[0].heartbeat_timeout_ms", ">= 1"),
    (RING_A + process("p", "Idle", extra="restart = { max_restarts = -1 }\n"), "$.processes[0].restart.max_restarts", ">= 0"),
    (RING_A + process("p", "Idle", extra="nice = -5\n"), "$.processes[0].nice", ">= 0"),  # would need privileges
    (RING_A + process("p", "Idle", extra="nice = 20\n"), "$.processes[0].nice", "<= 19"),
    (RING_A + process("p", "Idle", extra="keep_warm_us = -1\n"), "$.processes[0].keep_warm_us", ">= 0"),
], ids=["poll_interval_ms", "max_payload_bytes", "heartbeat_timeout_ms", "max_restarts", "nice_negative", "nice_20",
        "keep_warm_us"])
def test_out_of_bounds_value_rejected_with_its_path(text, path, bound):
    msg = rejected(text)
    assert path in msg and bound in msg, msg


@pytest.mark.parametrize(("extra", "path", "words"), [
    ('sched = "rr"\n', "$.processes[0].sched", "Invalid enum value 'rr'"),
    ('sched = "fifo"\nsched_priority = 0\n', "$.processes[0].sched_priority", ">= 1"),
    ('sched = "fifo"\nsched_priority = 100\n', "$.processes[0].sched_priority", "<= 99"),
], ids=["unknown_policy", "priority_0", "priority_100"])
def test_a_bad_scheduling_policy_or_priority_is_rejected_with_its_path(extra, path, words):
    msg = rejected(RING_A + process("p", "Idle", extra=extra))
    assert path in msg and words in msg, msg


def test_a_process_runs_sched_other_unless_it_asks_for_fifo():
    cfg = parse_config(RING_A + process("p", "Idle") + process("q", "Idle", extra='sched = "fifo"\nsched_priority = 20\n'))
    assert (cfg.process("p").sched, cfg.process("p").sched_priority) == ("other", 10)
    assert (cfg.process("q").sched, cfg.process("q").sched_priority) == ("fifo", 20)


def test_bad_shm_prefix_rejected():
    msg = rejected('[supervisor]\nshm_prefix = "Bad/Prefix"\n')
    assert "$.supervisor.shm_prefix" in msg, msg


def test_ring_with_two_producers_rejected():
    msg = rejected(RING_A + process("p", "Idle", outputs=["a"]) + process("q", "Idle", outputs=["a"]))
    assert "$.processes[1].outputs[0]" in msg and "'a'" in msg and "producer 'p'" in msg, msg


def test_ring_with_two_consumers_rejected():
    msg = rejected(RING_A + process("p", "Idle", inputs=["a"]) + process("q", "Idle", inputs=["a"]))
    assert "$.processes[1].inputs[0]" in msg and "consumer 'p'" in msg, msg


def test_supervisor_control_ring_counts_as_producer():
    msg = rejected('[supervisor]\ncontrol_ring = "a"\n' + RING_A + process("p", "Idle", outputs=["a"]))
    assert "$.processes[0].outputs[0]" in msg and "'supervisor'" in msg, msg


def test_unknown_ring_in_inputs_rejected():
    msg = rejected(RING_A + process("p", "Idle", inputs=["zz"]))
    assert "$.processes[0].inputs[0]" in msg and "unknown ring 'zz'" in msg, msg


def test_unknown_control_ring_rejected():
    msg = rejected('[supervisor]\ncontrol_ring = "nope"\n')
    assert "$.supervisor.control_ring" in msg, msg


def test_capacity_not_power_of_two_rejected():
    msg = rejected(ring("a", capacity=1000))
    assert "$.rings[0].capacity" in msg and "power of two" in msg, msg


@pytest.mark.parametrize("text", ["[supervisor\nshm_prefix = 'x'\n", "a = = 1\n", '[[rings]]\nname = "a\n'],
                         ids=["unclosed_table", "double_equals", "unterminated_string"])
def test_bad_toml_rejected(text):
    msg = rejected(text)
    assert "not valid TOML" in msg, msg


def test_unreadable_file_rejected(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_with_bad_config_exits_nonzero_before_creating_anything(pipe):
    text = pipe.config_text(ring("a") + ring("a") + process("p", "Idle", outputs=["a"]))  # duplicate ring
    path = pipe.tmp / "bad.toml"
    path.write_text(text)
    pipe.paths.append(path)
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0", config=path)
    assert r.returncode != 0
    assert "$.rings[1].name" in r.stderr and "duplicate ring name" in r.stderr, r.stderr
    assert shm_entries(pipe.prefix) == []
    assert not pipe.run_dir.exists()
    assert not pipe.log_dir.exists()
