"""`up` start-up (pipeline/runtime/supervisor/core.py): `down` during start-up, start-up
errors that retrying cannot fix (fail at once, the stage and the cause on the console), files that
cannot be created (one line, no traceback), the control endpoint (ipc:// only), and the run epoch.

Real supervisor processes against a private config (own shm prefix, run and log dirs under
tmp_path); the ``pipe`` fixture kills and removes everything even when a test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time

import pytest

from pipeline.runtime.config import Config, SupervisorConfig, parse_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ConfigError, ControlError
from pipeline.runtime.runepoch import EPOCH_FILE, read_run_epoch
from tests.support.configtext import BACK_OFF, control, process, ring
from tests.support.paths import REPO_ROOT
from tests.support.processes import assert_nothing_left, pid_gone
from tests.support.shm import shm_entries
from tests.support.wait import wait_until

FAST_MODEL = REPO_ROOT / "models" / "generated" / "fast.onnx"
PAPER_INSTRUMENT = '[[instruments]]\nid = 1\nsymbol = "BTCUSDT"\nvenue = "paper"\ntick_size = 0.1\nlot_size = 0.0001\n\n'


def _fast_stage(model_path) -> str:
    """The real fast-path stage (procs.fast) on the CPU, reading ``feat``, writing ``sig_risk``."""
    return (ring("feat", payload=1024, capacity=64) + ring("sig_risk", payload=64, capacity=64)
            + process("fast", "procs.fast:FastAgent", inputs=["feat"], outputs=["sig_risk"], extra=BACK_OFF,
                      params=f'model_path = "{model_path}", providers = "cpu"'))


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_down_during_start_up_is_answered_and_stops_the_start(pipe):
    """A stage stuck in back-off while `up` waits for it: `down` reaches the supervisor (the old one
    did not answer during start-up, so `down` "cleaned" a live run under it)."""
    pipe.write_config(control() + process(
        "crasher", "CrashAtStart",
        extra="ready_timeout_ms = 20000\nrestart = { backoff_initial_ms = 60000, backoff_max_ms = 60000 }\n"),
        supervisor='control_ring = "control"\n')
    sup = pipe.start(run_for=60)
    wait_until(lambda: any(e["event"] == "state" and e["stage"] == "crasher" and e["to"] == "BACKOFF"
                           for e in pipe.log("supervisor")), 20, 0.05, "the crasher in back-off")
    r = pipe.cli("down", timeout=20)
    assert r.returncode == 0, r
    assert "down: every process stopped, every segment removed" in r.stdout, r
    assert sup.wait(10) == 2  # stopped by `down`, long before its back-off (60 s) or its run (60 s) ended
    assert "start-up stopped" in pipe.sup_output(sup)
    assert_nothing_left(pipe)


# ------------------------------------------------------------------------------------------ item 8: start-up errors
@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_missing_model_fails_up_at_once_naming_the_stage_and_the_path(pipe):
    missing = pipe.tmp / "models" / "nosuch-fast.onnx"
    pipe.write_config(control() + _fast_stage(missing), supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "30", "--status-every", "0", timeout=60)
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err.startswith("error: process fast cannot start: StartupError:"), err
    assert str(missing) in err and "does not exist" in err and "not retried" in err, err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert len([e for e in pipe.log("fast") if e["event"] == "start_failed"]) == 1  # started once, not retried
    sup_log = pipe.log("supervisor")
    assert [e["stage"] for e in sup_log if e["event"] == "start_failed_permanently"] == ["fast"]
    assert any(e["event"] == "control_sent" and e["reason"] == "STAGE_FATAL" for e in sup_log)
    assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_key_file_readable_by_others_fails_up_at_once_naming_the_file_and_the_mode(pipe):
    key = pipe.tmp / "paper-key.json"
    key.write_text(json.dumps({"api_key": "paper-k", "secret": "s" * 32, "passphrase": "p" * 12}))
    os.chmod(key, 0o644)
    pipe.write_config(PAPER_INSTRUMENT + process("venue", "procs.venue:VenueAgent", extra=BACK_OFF,
                                                 params=f'port = 0, seed = 1, key_file = "{key}"'))
    r = pipe.cli("up", "--run-for", "30", "--status-every", "0", timeout=60)
    assert r.returncode == 2, r  # not the 30 s run, nor "did not report ready" (what it was)
    err = r.stderr.strip()
    assert err.startswith("error: process venue cannot start: ConfigError:"), err
    assert f"credentials file {key} has mode 0644" in err and "0600" in err, err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert len([e for e in pipe.log("venue") if e["event"] == "start_failed"]) == 1
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o644  # reported, not "fixed" behind the user's back
    assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_restart_that_cannot_succeed_goes_fatal_at_once_and_halts(pipe):
    """Up with a good model; the model is then removed and the stage restarted: one failed start,
    FATAL with the path as its last error, trading halted, the others untouched."""
    assert FAST_MODEL.is_file(), f"{FAST_MODEL} missing: `make test` makes it (`make model`)"
    model = pipe.tmp / "fast.onnx"
    shutil.copyfile(FAST_MODEL, model)
    out = pipe.tmp / "control.txt"
    pipe.write_config(control(str(out)) + _fast_stage(model), supervisor='control_ring = "control"\n')
    first = {p["name"]: p["pid"] for p in pipe.up(timeout=60)["processes"]}
    model.unlink()
    r = pipe.cli("restart", "fast")
    assert r.returncode == 0, r

    def fast_fatal():
        p = pipe.procs()["fast"]
        return p if p["state"] == "FATAL" else None

    fatal = wait_until(fast_fatal, 20, 0.05, "fast FATAL")
    assert fatal["restarts"] == 1, fatal  # not retried
    assert "does not exist" in fatal["last_error"], fatal
    assert pipe.status()["halted"] is True
    wait_until(lambda: out.exists() and out.read_text() == "HALT STAGE_FATAL\n", 5, 0.02, "HALT STAGE_FATAL at the sink")
    assert len([e for e in pipe.log("fast") if e["event"] == "start_failed"]) == 1
    assert pipe.procs()["ctl"]["pid"] == first["ctl"]
    time.sleep(0.3)
    assert pipe.procs()["fast"]["state"] == "FATAL" and pipe.procs()["fast"]["restarts"] == 1
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_run_dir_that_cannot_be_created_is_one_line_naming_the_path(pipe):
    blocker = pipe.tmp / "afile"
    blocker.write_text("not a directory\n")
    pipe.run_dir = blocker / "run"
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0")
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err == f"error: cannot create the run directory {pipe.run_dir}: Not a directory", err
    assert shm_entries(pipe.prefix) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_log_dir_that_cannot_be_created_is_one_line_naming_the_path(pipe):
    blocker = pipe.tmp / "afile"
    blocker.write_text("not a directory\n")
    pipe.log_dir = blocker / "logs"
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0")
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err.startswith(f"error: cannot open the supervisor log in {pipe.log_dir}:") and "Not a directory" in err, err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert shm_entries(pipe.prefix) == []


# ------------------------------------------------------------------------------------------ item 9: the control endpoint
@pytest.mark.parametrize("ep", ["tcp://127.0.0.1:5555", "tcp://0.0.0.0:5555", "tcp://*:5555", "ws://127.0.0.1:1"])
def test_a_non_ipc_control_endpoint_is_rejected_naming_the_field(ep):
    with pytest.raises(ConfigError, match=r"\$\.supervisor\.control_endpoint: must be ipc://PATH"):
        parse_config(f'[supervisor]\ncontrol_endpoint = "{ep}"\n', "x.toml")


def test_an_ipc_control_endpoint_is_accepted():
    cfg = parse_config('[supervisor]\ncontrol_endpoint = "ipc:///tmp/x/control.sock"\n')
    assert cfg.control_endpoint() == "ipc:///tmp/x/control.sock"


def test_the_client_refuses_a_tcp_endpoint_that_bypassed_validation():
    cfg = Config(supervisor=SupervisorConfig(control_endpoint="tcp://127.0.0.1:5555"))  # no _check
    with pytest.raises(ControlError, match="only ipc://"):
        request(cfg, {"cmd": "status"}, 100)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_with_a_tcp_control_endpoint_is_refused_before_anything_exists(pipe):
    path = pipe.tmp / "tcp.toml"
    path.write_text(pipe.config_text(control(), supervisor='control_ring = "control"\ncontrol_endpoint = "tcp://127.0.0.1:5555"\n'))
    pipe.paths.append(path)
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0", config=path)
    assert r.returncode == 2, r
    assert "$.supervisor.control_endpoint: must be ipc://PATH" in r.stderr, r.stderr
    assert shm_entries(pipe.prefix) == [] and not pipe.run_dir.exists()


# ------------------------------------------------------------------------------------------ the run epoch
@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_up_writes_a_fresh_run_epoch_before_any_stage_kept_across_restarts(pipe):
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF), supervisor='control_ring = "control"\n')
    st = pipe.up()
    path = pipe.run_dir / EPOCH_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    epoch = read_run_epoch(pipe.run_dir)
    assert path.read_text() == f"{epoch}\n" and 0 < epoch < 1 << 64
    assert st["run_epoch"] == epoch
    log = pipe.log("supervisor")
    i_epoch = next(i for i, e in enumerate(log) if e["event"] == "run_epoch")
    i_lock = next(i for i, e in enumerate(log) if e["event"] == "run_lock_taken")
    i_first_start = next(i for i, e in enumerate(log) if e["event"] == "state" and e["to"] == "STARTING")
    assert i_lock < i_epoch < i_first_start
    assert log[i_epoch]["epoch"] == epoch

    old = {p["name"]: p["pid"] for p in st["processes"]}["bystander"]
    r = pipe.cli("restart", "bystander")
    assert r.returncode == 0, r
    wait_until(lambda: (p := pipe.procs()["bystander"])["state"] == "RUNNING" and p["pid"] != old, 10, 0.02,
               "bystander restarted")
    assert pid_gone(old)
    assert read_run_epoch(pipe.run_dir) == epoch  # a stage restart keeps it
    assert pipe.status()["run_epoch"] == epoch
    assert pipe.down() == 0
    assert not path.exists()

    st2 = pipe.up()
    assert read_run_epoch(pipe.run_dir) == st2["run_epoch"] != epoch  # a new `up`: a new epoch
    assert pipe.down() == 0
    assert_nothing_left(pipe)


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_killed_supervisors_stale_epoch_and_pid_are_replaced_by_the_next_up(pipe):
    pipe.write_config(control(), supervisor='control_ring = "control"\n')
    st = pipe.up()
    epoch = st["run_epoch"]
    pipe.sup.kill()
    assert pipe.sup.wait(5) == -9
    wait_until(lambda: all(pid_gone(p["pid"]) for p in st["processes"]), 5, 0.02, "the runners to die")
    assert read_run_epoch(pipe.run_dir) == epoch  # left behind by the killed one
    st2 = pipe.up()  # the kernel dropped the dead one's lock: this one takes it at once
    assert st2["run_epoch"] != epoch and read_run_epoch(pipe.run_dir) == st2["run_epoch"]
    assert int((pipe.run_dir / "supervisor.pid").read_text()) == pipe.sup.pid
    stale = [e for e in pipe.log("supervisor") if e["event"] == "stale_run_cleaned"]
    assert len(stale) == 1 and str(pipe.run_dir / EPOCH_FILE) in stale[0]["removed"]
    assert pipe.down() == 0
    assert_nothing_left(pipe)
