"""The placement A/B of the pipeline bench (``bench.pipeline_placement``): the chain arm's plan, the
move of every thread, and the shared rule judged with this A/B's arms."""

from __future__ import annotations

import os
import threading

import pytest

from bench.pipeline_placement import ARMS, VERDICTS, chain_plan, set_cores
from bench.pipeline_sched import judge
from tests.bench.test_pipeline_sched import _run

NAMES = ["venue", "feed", "features", "fast", "risk", "sender", "llm"]


@pytest.mark.parametrize("cores, want", [
    ([0, 1], {"venue": 0, "llm": 0, "feed": 1, "features": 1, "fast": 1, "risk": 1, "sender": 1}),
    ([0, 1, 2], {"venue": 0, "llm": 1, "feed": 2, "features": 2, "fast": 2, "risk": 2, "sender": 2}),
    ([3], {n: 3 for n in NAMES}),
])
def test_the_chain_puts_the_hot_path_on_the_last_core_and_the_rest_elsewhere(cores, want):
    assert chain_plan(NAMES, cores) == want


def test_a_chain_needs_a_core():
    with pytest.raises(ValueError):
        chain_plan(NAMES, [])


def test_a_move_reaches_every_thread_of_a_process():
    before = os.sched_getaffinity(0)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    core = min(before)
    try:
        assert set_cores(os.getpid(), {core}) >= 2
        assert os.sched_getaffinity(t.native_id) == {core} and os.sched_getaffinity(0) == {core}
    finally:
        set_cores(os.getpid(), before)
        stop.set()
        t.join()
    assert os.sched_getaffinity(0) == before


@pytest.mark.parametrize("spread_us, chain_us, verdict", [
    (100.0, 80.0, "CHAIN FASTER"), (80.0, 100.0, "CHAIN SLOWER"), (100.0, 100.0, "INCONCLUSIVE")])
def test_the_shared_rule_names_this_ab_s_arms(spread_us, chain_us, verdict):
    lat, at, spans = _run(spread_us, chain_us)
    spans = {"spread": spans["other"], "chain": spans["fifo"]}
    f = judge(lat, at, spans, ARMS, VERDICTS)
    assert f["verdict"] == verdict and set(f["arms"]) == {"spread", "chain"}
