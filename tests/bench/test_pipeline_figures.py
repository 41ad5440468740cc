"""The pipeline bench's figures (``bench.pipeline_figures``): wake-ups per message read, per process,
the count that shows where a stage wakes for every message and where it batches."""

from __future__ import annotations

import pytest

from bench.pipeline_config import Scenario
from bench.pipeline_figures import per_message, summarize
from bench.pipeline_report import process_table


@pytest.mark.parametrize("wakeups, msgs_in, expected", [
    (1000, 1000, 1.0),  # a wake-up a message
    (250, 1000, 0.25),  # four messages a wake-up
    (3000, 1000, 3.0),  # woken for other things too
    (5, 0, None),  # nothing read: no ratio
    (None, 1000, None),  # not counted
])
def test_wake_ups_per_message_read(wakeups, msgs_in, expected):
    assert per_message(wakeups, msgs_in) == expected


def _status(msgs_in: int) -> dict:
    return {"processes": [{"name": "features", "core": 0, "wait": "blocking", "restarts": 0, "drops": 0,
                           "msgs_in": msgs_in, "msgs_out": msgs_in, "stage": {}}], "rings": [], "plan": "p"}


def test_each_process_carries_its_wake_ups_over_the_window_into_the_report():
    res = summarize(Scenario("x"), {}, _status(100), _status(1100), {"features": 0}, {"features": 100}, 1.0, (0, 0, 0),
                    wakeups={"features": 400})
    p = res["processes"]["features"]
    assert (p["msgs_in"], p["wakeups"], p["wakeups_per_msg"]) == (1000, 400, 0.4)
    assert "| features | 0 | blocking | 100.0 | 1000 | 1000 | 0 | 400 | 0.4 |" in process_table(res)
    unknown = summarize(Scenario("x"), {}, _status(0), _status(10), {}, {}, 1.0, (0, 0, 0))["processes"]["features"]
    assert unknown["wakeups"] is None and "| - | - |" in process_table({"processes": {"features": unknown}})[2]


def test_the_report_names_the_onnx_provider_the_fast_stage_says_it_used():
    from bench.pipeline_report import scenario_section

    st = {"processes": [{"name": "fast", "core": 1, "wait": "blocking", "restarts": 0, "drops": 0, "msgs_in": 0,
                         "msgs_out": 0, "stage": {"provider": "CUDA", "model": "abcdef01"}}], "rings": [], "plan": "p"}
    res = summarize(Scenario("x"), {}, st, st, {}, {}, 1.0, (0, 0, 0))
    assert res["model"]["fast_provider"] == "CUDA"
    assert "The fast stage's ONNX Runtime provider: CUDA (the stage's own word)." in scenario_section(res)
    st["processes"][0]["stage"] = {}  # a stage that did not say: no line
    assert "provider" not in "\n".join(scenario_section(summarize(Scenario("x"), {}, st, st, {}, {}, 1.0, (0, 0, 0))))
