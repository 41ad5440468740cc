"""The latency guard in a running supervisor (core.Supervisor over budget.LatencyGuard): a stage slowed
on purpose past its reduce budget, then past its halt budget, makes the supervisor write CONTROL
REDUCE_ONLY, then HALT, reason LATENCY_BUDGET, into the control ring, says why in its status and log,
stays there once the stage is fast again, and only the operator's resume lifts it.

Real processes: SeqSource -> SlowRelay (tests/support/slow.py) -> SeqSink, and a ControlSink recording
each CONTROL it reads as ``CMD REASON``."""

from __future__ import annotations

import time

import pytest

from tests.support.configtext import BACK_OFF, control, process, ring
from tests.support.processes import assert_nothing_left
from tests.support.slow import set_delay
from tests.support.wait import wait_until

# budgets far above what a loaded 2-core box does to the relay (its p99 a few ms; tens in a burst)
GUARD = """
[latency_guard]
window_ms = 600
min_samples = 2

[latency_guard.budgets]
relay = { reduce_p99_us = 200_000, halt_p99_us = 1_000_000 }
"""


def commands(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_slowed_stage_reduces_then_halts_trading_until_the_operator_resumes(pipe):
    delay, ctl = pipe.tmp / "delay", pipe.tmp / "control.txt"
    pipe.write_config(
        control(str(ctl)) + ring("a") + ring("b")
        + process("src", "SeqSource", outputs=["a"], extra=BACK_OFF, params="rate_per_s = 200")
        + process("relay", "tests.support.slow:SlowRelay", inputs=["a"], outputs=["b"],
                  extra=BACK_OFF + "heartbeat_timeout_ms = 10000\n",  # it beats between its slow batches
                  params=f'delay_file = "{delay}"')
        + process("sink", "SeqSink", inputs=["b"], extra=BACK_OFF, params='out = "$tmp/sink.txt"') + GUARD,
        supervisor='control_ring = "control"\n')
    pipe.up(run_for=80)

    def guard():
        return pipe.status()["latency_guard"]

    # fast: armed once its p99 is within budget (the slow outputs of a start are not judged), then sampled
    wait_until(lambda: guard()["stages"]["relay"]["armed"], 20, 0.05, "the relay armed")
    time.sleep(0.5)
    assert guard()["level"] == 0 and commands(ctl) == []

    set_delay(delay, 300)  # every output 300-600 ms late: over the reduce budget, under the halt one
    wait_until(lambda: commands(ctl) == ["REDUCE_ONLY LATENCY_BUDGET"], 15, 0.05, "REDUCE_ONLY from the guard")
    g = guard()
    assert g["state"] == "REDUCING" and g["reason"].startswith("relay p99 above 200,000 us for ")
    assert pipe.status()["halted"] is False

    set_delay(delay, 1200)  # now over the halt budget
    wait_until(lambda: commands(ctl)[-1:] == ["HALT LATENCY_BUDGET"], 15, 0.05, "HALT from the guard")
    st = pipe.status()
    assert st["halted"] is True and st["latency_guard"]["state"] == "HALTED"
    assert st["latency_guard"]["reason"].startswith("relay p99 above 1,000,000 us for ")

    set_delay(delay, 0)  # fast again: the guard stays where it is, and sends nothing more
    wait_until(lambda: pipe.procs()["relay"]["stage"]["delay_ms"] == 0, 5, 0.05, "the relay fast again")
    time.sleep(1.0)
    assert guard()["state"] == "HALTED" and commands(ctl) == ["REDUCE_ONLY LATENCY_BUDGET", "HALT LATENCY_BUDGET"]

    r = pipe.cli("resume")
    assert r.returncode == 0, r
    wait_until(lambda: commands(ctl)[-1:] == ["RESUME OPERATOR"], 10, 0.05, "the operator's RESUME")
    st = pipe.status()
    assert st["halted"] is False and st["latency_guard"]["level"] == 0 and st["latency_guard"]["reason"] == ""
    events = [e for e in pipe.log("supervisor") if e["event"] == "latency_guard"]
    assert [(e["cmd"], e["guard"]) for e in events] == [("REDUCE_ONLY", "REDUCING"), ("HALT", "HALTED")]
    assert all(e["reason"].startswith("relay p99 above ") for e in events)
    assert pipe.down() == 0
    assert_nothing_left(pipe)
