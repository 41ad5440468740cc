"""The CLI against a running supervisor: status, restart NAME, halt / resume; and `up` refusing a
GPU demand it cannot meet."""

from __future__ import annotations

import pytest

from pipeline.runtime.gpu import probe_gpu
from tests.support.agents import count_lines, read_seqs
from tests.support.configtext import BACK_OFF, chain, control, process
from tests.support.processes import pid_gone
from tests.support.shm import shm_entries
from tests.support.wait import wait_until


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_restart_via_cli_replaces_one_process_and_loses_nothing(pipe):
    total = 4_000
    sink = pipe.tmp / "sink.txt"
    pipe.write_config(chain(total, 2_000))
    first = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    wait_until(lambda: count_lines(sink) >= 200, 10, what="flow")

    r = pipe.cli("status")
    assert r.returncode == 0, r
    for name in ("src", "relay", "sink"):
        assert name in r.stdout
    assert r.stdout.count("RUNNING") == 3 and "trading" in r.stdout

    r = pipe.cli("restart", "relay")
    assert r.returncode == 0, r
    assert r.stdout.strip() == "restart: ok"

    def relay_replaced():
        p = pipe.procs()
        return p if p["relay"]["state"] == "RUNNING" and p["relay"]["pid"] not in (0, first["relay"]) else None

    now = wait_until(relay_replaced, 10, 0.01, "the relay to come back with a new pid")
    assert now["relay"]["restarts"] == 1
    assert now["src"]["pid"] == first["src"] and now["sink"]["pid"] == first["sink"]
    assert now["src"]["restarts"] == now["sink"]["restarts"] == 0
    assert pid_gone(first["relay"])
    # the old relay was asked to stop (SIGTERM) and did so cleanly
    states = [e for e in pipe.log("supervisor") if e["event"] == "state" and e["pid"] == first["relay"]]
    assert [(e["frm"], e["to"]) for e in states][-2:] == [("RUNNING", "STOPPING"), ("STOPPING", "STOPPED")]
    assert states[-1]["why"] == "exit code 0"

    wait_until(lambda: count_lines(sink) >= total, 20, 0.05, f"{total} messages in the sink")
    assert read_seqs(sink) == list(range(total))

    r = pipe.cli("restart", "nosuch")
    assert r.returncode == 1 and "unknown process 'nosuch'" in r.stderr, r
    r = pipe.cli("halt")  # this config has no control ring
    assert r.returncode == 1 and "no control ring configured" in r.stderr, r
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_halt_and_resume_via_cli_reach_the_control_sink(pipe):
    out = pipe.tmp / "control.txt"
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF), supervisor='control_ring = "control"\n')
    first = pipe.up()
    assert first["halted"] is False

    r = pipe.cli("halt")
    assert r.returncode == 0 and r.stdout.strip() == "halt: ok", r
    wait_until(lambda: out.exists() and out.read_text() == "HALT OPERATOR\n", 5, 0.01, "HALT OPERATOR at the sink")
    assert pipe.status()["halted"] is True
    assert "HALTED" in pipe.cli("status").stdout

    r = pipe.cli("resume")
    assert r.returncode == 0 and r.stdout.strip() == "resume: ok", r
    wait_until(lambda: out.read_text() == "HALT OPERATOR\nRESUME OPERATOR\n", 5, 0.01, "RESUME OPERATOR at the sink")
    st = pipe.status()
    assert st["halted"] is False
    assert {p["name"]: p["pid"] for p in st["processes"]} == {p["name"]: p["pid"] for p in first["processes"]}
    sent = [(e["cmd"], e["reason"], e["ok"]) for e in pipe.log("supervisor") if e["event"] == "control_sent"]
    assert sent == [("HALT", "OPERATOR", True), ("RESUME", "OPERATOR", True)]
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_demanding_a_gpu_exits_nonzero_without_one(pipe):
    info, _ = probe_gpu(0)
    if info is not None:
        pytest.skip(f"this machine has a GPU ({info.name}): the no-GPU refusal cannot be shown here")
    pipe.write_config("[gpu]\nrequire = true\n" + control(), supervisor='control_ring = "control"\n')
    r = pipe.cli("up", "--run-for", "5", "--status-every", "0")
    assert r.returncode != 0, r
    assert "demands a GPU" in r.stderr and "gpu.require = true" in r.stderr, r.stderr
    assert shm_entries(pipe.prefix) == []
    assert not (pipe.run_dir / "supervisor.pid").exists()
    assert not (pipe.run_dir / "control.sock").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_kill_switch_via_cli_reaches_the_control_sink_and_marks_the_run_halted(pipe):
    out = pipe.tmp / "control.txt"
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF), supervisor='control_ring = "control"\n')
    first = pipe.up()
    assert first["halted"] is False

    r = pipe.cli("kill-switch")
    assert r.returncode == 0 and r.stdout.strip() == "kill-switch: ok", r
    wait_until(lambda: out.exists() and out.read_text() == "KILL_SWITCH OPERATOR\n", 5, 0.01,
               "KILL_SWITCH OPERATOR at the sink")
    assert pipe.status()["halted"] is True
    assert "HALTED" in pipe.cli("status").stdout
    sent = [(e["cmd"], e["reason"], e["ok"]) for e in pipe.log("supervisor") if e["event"] == "control_sent"]
    assert sent == [("KILL_SWITCH", "OPERATOR", True)]
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_kill_switch_without_a_control_ring_is_refused(pipe):
    pipe.write_config(process("bystander", "Idle", extra=BACK_OFF))
    pipe.up()
    r = pipe.cli("kill-switch")
    assert r.returncode == 1 and "no control ring configured" in r.stderr, r
    assert pipe.down() == 0
