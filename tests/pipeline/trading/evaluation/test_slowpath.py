"""The slow path in the evaluation: an INSTRUCTION reaches the gateway after the generation's measured
time, in simulated time; the stage's conflation and minimum gap."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.trading.evaluation.decisions import Decisions, compute_features, marks_of
from pipeline.trading.evaluation.replay import Tape
from pipeline.trading.evaluation.simulator import VariantRun
from pipeline.trading.evaluation.slowpath import SlowPath
from pipeline.trading.llm.breaker import BreakerConfig
from pipeline.trading.llm.hub import LlmParams, Outcome
from pipeline.trading.messages import Label
from tests.pipeline.trading.evaluation.test_simulator import INS, LIMITS, MS, T0, book, params


class FakeHub:
    """Answers every signal with BUY to 2 lots, after ``gen_ms`` of "measured" generation."""

    def __init__(self, gen_ms: float):
        self.gen_ns = int(gen_ms * MS)
        self.asked: list[tuple[int, int | None]] = []

    def decide(self, sig, position_lots, *, deadline_ns):
        self.asked.append((int(sig["feature_seq"]), position_lots))
        d = SimpleNamespace(inst=int(sig["instrument_id"]), act="BUY", off=0, lots=2, ttl=5_000, conf=90)
        return Outcome(decision=d, finish="stop", gen_ns=self.gen_ns)


def _run(gen_ms: float, min_gap_ms: int, buys_at: list[int]):
    tape = Tape((INS,), [book(T0 + k * 10 * MS, 100.0, 5, 100.2, 5, k + 1) for k in range(6)])
    table = compute_features(tape)
    labels = np.zeros(len(table), np.uint8)
    labels[buys_at] = Label.LEAN_BUY
    d = Decisions(labels, np.zeros((len(table), 4), np.float32), labels.astype(float))
    hub = FakeHub(gen_ms)
    slow = SlowPath(hub, LlmParams(min_gap_ms=min_gap_ms), [INS], table, d)
    lim = LIMITS.__class__(**{**{f: getattr(LIMITS, f) for f in LIMITS.__struct_fields__}, "lean_lots": 0})
    run = VariantRun(tape, table, marks_of(table), d, lim, params(100), slow)
    res = run.run()
    return run, res, hub


def test_the_instruction_reaches_the_gateway_after_the_generation_time():
    run, res, hub = _run(gen_ms=7, min_gap_ms=0, buys_at=[1])
    assert hub.asked == [(2, 0)]  # the signal of book seq 2, the gateway flat
    assert res.counts["llm"] == {"conflated": 0, "generations": 1, "instructions": 1, "probes": 0,
                                 "probes_valid": 0, "signals": 1}
    assert res.counts["gateway"]["InstructionPlanned"] == 1
    (first,) = run.ex.engine.orders.values()
    # decided at T0 + 10 ms + 7 ms (the generation), at the exchange 100 µs later: BUY to 2 lots
    assert first.c_ms == (T0 + 17 * MS + 100_000) // MS and float(first.size) == pytest.approx(2.0)


def test_conflation_and_the_minimum_gap():
    run, res, hub = _run(gen_ms=1, min_gap_ms=25, buys_at=[0, 1, 2, 3])
    # T0: a generation starts; T0+10 and T0+20 wait for the gap (the newer replaces the older); at
    # T0+25 the newest (seq 3) starts; T0+30 (seq 4) waits until T0+50
    assert [s for s, _ in hub.asked] == [1, 3, 4]
    assert res.counts["llm"]["conflated"] == 1 and res.counts["llm"]["generations"] == 3


def test_the_tiny_gguf_in_process():
    """The real hub (the generated stand-in, seed fixed): every generation ends in an INSTRUCTION or a
    counted rejection, and takes measured time."""
    from pipeline.trading.evaluation.variants import REPO

    gguf = REPO / "models" / "generated" / "tiny.gguf"
    assert gguf.is_file(), f"{gguf} missing: `make test` makes it (`make model`)"
    tape = Tape((INS,), [book(T0 + k * 10 * MS, 100.0, 5, 100.2, 5, k + 1) for k in range(30)])
    table = compute_features(tape)
    labels = np.full(len(table), Label.LEAN_BUY, np.uint8)
    d = Decisions(labels, np.zeros((len(table), 4), np.float32), labels.astype(float))
    slow = SlowPath.load(str(gguf), {"n_ctx": 2048, "max_tokens": 96, "min_gap_ms": 100}, [INS], table, d, seed=3)
    res = VariantRun(tape, table, marks_of(table), d, LIMITS, params(100), slow).run()
    c = res.counts["llm"]
    assert c["signals"] == 30 and c["generations"] >= 3  # a start at most every 100 ms over 290 ms
    assert c["instructions"] + sum(v for k, v in c.items() if k.startswith("rej_")) == c["generations"]
    assert slow.timings()["gen_s"] > 0


class FailingThenValidHub(FakeHub):
    """Its first ``n_bad`` answers do not validate (invalid JSON); then every answer is FakeHub's."""

    def __init__(self, gen_ms: float, n_bad: int):
        super().__init__(gen_ms)
        self.n_bad = n_bad

    def decide(self, sig, position_lots, *, deadline_ns):
        if len(self.asked) < self.n_bad:
            self.asked.append((int(sig["feature_seq"]), position_lots))
            return Outcome(reason="invalid_json", finish="invalid", gen_ns=self.gen_ns)
        return super().decide(sig, position_lots, deadline_ns=deadline_ns)


def test_an_open_breaker_turns_generations_into_probes_whose_answers_never_reach_the_gateway():
    n_books = 12  # one every 500 ms: 6 s of signals, every one LEAN_BUY
    tape = Tape((INS,), [book(T0 + k * 500 * MS, 100.0, 5, 100.2, 5, k + 1) for k in range(n_books)])
    table = compute_features(tape)
    labels = np.full(len(table), Label.LEAN_BUY, np.uint8)
    d = Decisions(labels, np.zeros((len(table), 4), np.float32), labels.astype(float))
    hub = FailingThenValidHub(gen_ms=1, n_bad=2)
    quick = BreakerConfig(min_outcomes=1, trip_samples=1)  # the first sample's score (2 invalid answers) trips it
    slow = SlowPath(hub, LlmParams(min_gap_ms=0, breaker=quick), [INS], table, d)
    lim = LIMITS.__class__(**{**{f: getattr(LIMITS, f) for f in LIMITS.__struct_fields__}, "lean_lots": 0})
    res = VariantRun(tape, table, marks_of(table), d, lim, params(100), slow).run()
    c = res.counts["llm"]
    assert c["generations"] == n_books and c["rej_invalid_json"] == 2  # generations go on while OPEN
    assert c["probes"] >= 8 and c["probes_valid"] == c["probes"], c  # valid answers after the trip: probes
    assert c["instructions"] == c["generations"] - 2 - c["probes"], c
    assert res.counts["gateway"].get("InstructionPlanned", 0) == c["instructions"]
