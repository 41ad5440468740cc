"""The circuit breaker as design document 000 section 2.5 states it, on an injected clock: a score over
a 60 s window sampled once a second; OPEN after 3 consecutive samples below 0.72; HALF_OPEN after 30
consecutive samples at or above 0.85; in HALF_OPEN, rounds of 5 requests: more than 40 % failed reopens,
none failed closes, else another round; a window without evidence neither trips nor recovers.

The transition tables run a script on a fresh breaker: ``5bad`` records five invalid answers (an
anomaly, on time), ``5ok`` five good answers, ``5late`` five timeouts (late, no anomaly), ``5slow``
five valid answers that came late; ``w2.5`` moves the clock 2.5 s in 100 ms steps, polling after each
(as the stage does); ``j10`` jumps 10 s and polls once. The breaker is created and first polled at
t = 0, so its samples fall at t = 1, 2, 3, ... s; an outcome counts from the next sample. Transitions
are written ``t:old>new`` (C, O, H), t in seconds."""

from __future__ import annotations

import re

import msgspec
import pytest

from pipeline.trading.llm.breaker import BreakerConfig, BreakerState, CircuitBreaker
from tests.support.clock import ManualClock

S = 1_000_000_000
T0 = 1_000 * S
SHORT = {"C": "closed", "O": "open", "H": "half_open"}
OUTCOMES = {"ok": (True, True, False), "bad": (False, True, True), "late": (False, False, False),
            "slow": (True, False, False)}


def drive(script: str, **cfg) -> tuple[CircuitBreaker, str]:
    """Run ``script`` (see the module docstring); the breaker and its transitions as ``t:old>new ...``."""
    clk = ManualClock(T0)
    b = CircuitBreaker(BreakerConfig(**cfg), clk)
    seen = b.poll()
    for tok in script.split():
        if tok[0] == "w":
            for _ in range(round(float(tok[1:]) * 10)):
                clk.advance_ms(100)
                seen += b.poll()
        elif tok[0] == "j":
            clk.advance_s(float(tok[1:]))
            seen += b.poll()
        else:
            n, what = re.fullmatch(r"(\d*)(ok|bad|late|slow)", tok).groups()
            success, on_time, anomaly = OUTCOMES[what]
            for _ in range(int(n or 1)):
                seen += b.record(success=success, on_time=on_time, anomaly=anomaly)
    letter = {v: k for k, v in SHORT.items()}
    return b, " ".join(f"{(t.at_ns - T0) / S:g}:{letter[t.old.value]}>{letter[t.new.value]}" for t in seen)


# ------------------------------------------------------------------------------------- CLOSED -> OPEN
@pytest.mark.parametrize("script, cfg, want, state", [
    # three consecutive samples below 0.72 (t = 1, 2, 3), not two
    ("w0.5 5bad w2.4", {}, "", "C"),
    ("w0.5 5bad w2.5", {}, "3:C>O", "O"),
    # sampled once a second, not per generation: 400 more failures between samples change nothing
    ("5bad w0.9 200bad w0.9 200bad w0.9", {}, "", "C"),
    # timeouts: late, no anomaly (0.1)
    ("5late w3", {}, "3:C>O", "O"),
    # a sample at or above the threshold restarts the count: 5 bad + 50 ok scores 0.862 at t = 3
    ("5bad w2.5 50ok w1", {}, "", "C"),
    # fewer than min_outcomes (5) in the window: no score, never below
    ("4bad w10", {}, "", "C"),
    ("4bad w10", {"min_outcomes": 4}, "3:C>O", "O"),
    # the configured thresholds rule: 5 bad + 11 ok scores 0.729 (above 0.72, below 0.75)
    ("5bad 11ok w5", {}, "", "C"),
    ("5bad 11ok w5", {"trip_below": 0.75}, "3:C>O", "O"),
    ("w0.5 5bad w3.5", {"trip_samples": 4}, "4:C>O", "O"),
    ("5bad w1.5", {"sample_ms": 500}, "1.5:C>O", "O"),
])
def test_closed_opens_after_consecutive_samples_below_the_threshold(script, cfg, want, state):
    b, got = drive(script, **cfg)
    assert got == want and b.state.value == SHORT[state]


# ------------------------------------------------------------------------------------- the window
@pytest.mark.parametrize("script, cfg, want", [
    # outcomes recorded at t = 57.5 and 0 share the samples at t = 58, 59, 60: three below, OPEN
    ("4bad w57.5 1bad w3", {}, "60:C>O"),
    # at t = 58.5 only two shared samples (59, 60): at t = 61 the four from t = 0 have left (60 samples)
    ("4bad w58.5 1bad w3", {}, ""),
    ("4bad w58.5 1bad w3", {"window_samples": 61}, "61:C>O"),
    # nothing generated for a while: the window empties, the next failures need their own three samples
    ("5ok w61 5bad w2.9", {}, ""),
    ("5ok w61 5bad w3", {}, "64:C>O"),
])
def test_the_window_holds_the_last_60_samples_whatever_is_generated_meanwhile(script, cfg, want):
    assert drive(script, **cfg)[1] == want


def test_the_score_weights_success_on_time_and_anomalies():
    b, _ = drive("2ok 1late 1bad w1", min_outcomes=1)
    assert b.score() == pytest.approx(0.6 * 2 / 4 + 0.3 * 3 / 4 + 0.1 / (1 + 1))
    assert b.counts() == {"outcomes": 4, "ok": 2, "on_time": 3, "anomalies": 1}
    b, _ = drive("3ok 1bad 2bad w1", min_outcomes=1)
    assert b.score() == pytest.approx(0.6 * 3 / 6 + 0.3 * 1.0 + 0.1 / (1 + 3))


def test_the_score_is_a_sample_none_before_the_first_and_without_evidence():
    b, _ = drive("5ok w0.9")
    assert b.score() is None, "recorded, but not sampled yet"
    b, _ = drive("5ok w1")
    assert b.score() == pytest.approx(1.0)
    b, _ = drive("5ok w61")
    assert b.score() is None and b.counts()["outcomes"] == 0 and b.state is BreakerState.CLOSED


def test_samples_are_counted_from_the_first_use_not_the_creation():
    clk = ManualClock(T0)
    b = CircuitBreaker(BreakerConfig(), clk)
    assert CircuitBreaker(BreakerConfig(), lambda: 1 // 0).state is BreakerState.CLOSED, "creating reads no clock"
    clk.advance_ms(500)
    for _ in range(5):
        b.record(success=False, on_time=True, anomaly=True)  # the first use: samples at 1.5, 2.5, 3.5 s
    clk.advance_ms(2999)
    assert b.poll() == [] and b.samples == 2
    clk.advance_ms(1)
    assert [t.at_ns for t in b.poll()] == [T0 + 3_500_000_000]


def test_a_late_poll_takes_the_missed_samples_in_order_at_their_own_ticks():
    b, got = drive("5bad j10")
    assert got == "3:C>O" and b.samples == 10
    b, got = drive("5bad j3.5 100ok j60")  # OPEN at 3, the probes lift the score from t = 4: 30 samples
    assert got == "3:C>O 33:O>H"
    b, got = drive("5ok j1000000")  # a long silence costs no work per missed sample once the window is empty
    assert got == "" and b.samples == 1_000_000 and b.score() is None


# ------------------------------------------------------------------------------------- OPEN -> HALF_OPEN
@pytest.mark.parametrize("script, cfg, want, state", [
    # OPEN at 3; from t = 3.5 the probes lift the score to 0.888: samples t = 4..33 at or above 0.85
    ("5bad w3.5 100ok w29.4", {}, "3:C>O", "O"),
    ("5bad w3.5 100ok w29.5", {}, "3:C>O 33:O>H", "H"),
    # 30 good probes only reach 0.831: never half-open while the five failures are in the window
    ("5bad w3.5 30ok w50", {}, "3:C>O", "O"),
    # a dip to 0.812 at t = 24 restarts the 30 samples: from t = 25 to 54
    ("5bad w3.5 100ok w20 10late w1 200ok w29.4", {}, "3:C>O", "O"),
    ("5bad w3.5 100ok w20 10late w1 200ok w29.5", {}, "3:C>O 54:O>H", "H"),
    # OPEN and no probes: no evidence, no recovery, however long; then probes from t = 300
    ("5bad w300", {}, "3:C>O", "O"),
    ("5bad w300 10ok w31", {}, "3:C>O 330:O>H", "H"),
    ("5bad w3.5 100ok w10", {"half_open_samples": 10}, "3:C>O 13:O>H", "H"),
    ("5bad w3.5 100ok w40", {"half_open_at": 0.9}, "3:C>O", "O"),
])
def test_open_half_opens_only_after_the_score_held_for_30_samples(script, cfg, want, state):
    b, got = drive(script, **cfg)
    assert got == want and b.state.value == SHORT[state]


# ------------------------------------------------------------------------------------- HALF_OPEN
#: to HALF_OPEN at t = 2: one failure opens at t = 1, a hundred good probes half-open at t = 2
QUICK = {"trip_samples": 1, "half_open_samples": 1, "min_outcomes": 1}
TO_HALF = "1bad w1 100ok w1"


@pytest.mark.parametrize("probes, want, state, round_n", [
    ("4ok", "", "H", 4),
    ("5ok", "2:H>C", "C", 0),
    # the third failure of a round: more than 40 % of 5, decided at once
    ("bad bad bad", "2:H>O", "O", 0),
    ("ok ok bad bad bad", "2:H>O", "O", 0),
    ("bad ok bad ok bad", "2:H>O", "O", 0),
    ("late late late", "2:H>O", "O", 0),
    ("slow slow slow", "2:H>O", "O", 0),  # valid but late: a failed probe
    # one or two failures in a round of 5: neither reopens nor closes; the next round decides
    ("bad 4ok", "", "H", 0),
    ("bad bad 3ok", "", "H", 0),
    ("bad 4ok 5ok", "2:H>C", "C", 0),
    ("bad bad 3ok 4ok bad", "", "H", 0),
    ("bad bad 3ok ok bad bad bad", "2:H>O", "O", 0),
])
def test_half_open_judges_rounds_of_5_requests(probes, want, state, round_n):
    b, got = drive(f"{TO_HALF} {probes}", **QUICK)
    assert got == f"1:C>O 2:O>H {want}".strip() and b.state.value == SHORT[state] and b.round_n == round_n


@pytest.mark.parametrize("probes, cfg, want", [
    ("bad bad", {"reopen_fail_pct": 20}, "2:H>O"),  # 2 of 5 = 40 %: more than 20
    ("bad bad 3ok", {}, ""),  # ... not more than 40
    ("3ok", {"half_open_round": 3}, "2:H>C"),
    ("bad 2ok", {"half_open_round": 3, "reopen_fail_pct": 40}, ""),  # 1 of 3 = 33 %
    ("bad bad", {"half_open_round": 3, "reopen_fail_pct": 40}, "2:H>O"),  # 2 of 3 = 67 %
])
def test_the_half_open_rules_follow_their_config_fields(probes, cfg, want):
    assert drive(f"{TO_HALF} {probes}", **QUICK, **cfg)[1] == f"1:C>O 2:O>H {want}".strip()


def test_each_transition_says_why_and_the_breaker_keeps_the_reason_and_whether_answers_reach_risk():
    clk = ManualClock(T0)
    b = CircuitBreaker(BreakerConfig(), clk)
    assert (b.state, b.why, b.live()) == (BreakerState.CLOSED, "start", True)
    for _ in range(5):
        b.record(success=False, on_time=True, anomaly=True)
    clk.advance_s(3)
    (t,) = b.poll()
    assert (t.old, t.new, t.at_ns) == (BreakerState.CLOSED, BreakerState.OPEN, T0 + 3 * S)
    assert t.why == "score below 0.72 for 3 s (3 samples)" == b.why and t.score == round(0.3 + 0.1 / 6, 4)
    assert not b.live() and b.poll() == [], "each transition is returned once"
    for _ in range(100):
        b.record(success=True, on_time=True, anomaly=False)
    clk.advance_s(31)
    assert b.live(), "time applied by live() too"
    (t,) = b.poll()
    assert t.new is BreakerState.HALF_OPEN and t.why == "score at or above 0.85 for 30 s (30 samples)" == b.why
    assert t.at_ns == T0 + 33 * S
    for i in range(5):
        got = b.record(success=True, on_time=True, anomaly=False)
    assert got[0].new is BreakerState.CLOSED and b.why == "a round of 5 half-open requests all succeeded"
    assert b.counts()["outcomes"] == 105, "the window is kept across transitions"
    b2, _ = drive(f"{TO_HALF} bad bad bad", **QUICK)
    assert b2.why == "3 of 5 half-open requests failed (more than 40 %)"




# ------------------------------------------------------------------------------------- config
def test_the_defaults_are_the_documents():
    c = BreakerConfig()
    assert (c.sample_ms, c.window_samples, c.trip_below, c.trip_samples) == (1000, 60, 0.72, 3)
    assert (c.half_open_at, c.half_open_samples, c.half_open_round, c.reopen_fail_pct) == (0.85, 30, 5, 40)


@pytest.mark.parametrize("field, value, message", [
    ("trip_below", 1.5, "Expected `float` <= 1.0 - at `$.trip_below`"),
    ("half_open_at", -0.1, "Expected `float` >= 0.0 - at `$.half_open_at`"),
    ("sample_ms", 0, "Expected `int` >= 1 - at `$.sample_ms`"),
    ("window_samples", 0, "Expected `int` >= 1 - at `$.window_samples`"),
    ("trip_samples", 0, "Expected `int` >= 1 - at `$.trip_samples`"),
    ("half_open_samples", 3601, "Expected `int` <= 3600 - at `$.half_open_samples`"),
    ("half_open_round", 0, "Expected `int` >= 1 - at `$.half_open_round`"),
    ("reopen_fail_pct", 100, "Expected `int` <= 99 - at `$.reopen_fail_pct`"),
    ("min_outcomes", 0, "Expected `int` >= 1 - at `$.min_outcomes`"),
    ("cooldown_s", 10.0, "Object contains unknown field `cooldown_s`"),
])
def test_a_bad_threshold_is_an_error_naming_the_field(field, value, message):
    with pytest.raises(msgspec.ValidationError) as err:
        msgspec.convert({field: value}, BreakerConfig)
    assert str(err.value) == message
