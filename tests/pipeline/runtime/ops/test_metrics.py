"""``/metrics`` (pipeline/runtime/ops/metrics.py): a snapshot as Prometheus families, parsed back with
prometheus-client's own parser; names after the Prometheus naming guide; no key, token or order id."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.runtime.ops.metrics import BREAKER_STATES, DENY_REASONS, STAGE_STATES, render_metrics, stage_kind
from pipeline.runtime.supervisor.states import State
from tests.support.ops import latency_guard, snapshot

#: every family, with its type, that a snapshot of the whole graph gives
FAMILIES = {
    "shmpipe_stage_state": "gauge", "shmpipe_stage_restarts": "counter", "shmpipe_stage_heartbeat_age_seconds": "gauge",
    "shmpipe_stage_messages": "counter", "shmpipe_stage_cpu_seconds": "counter", "shmpipe_stage_errors": "counter",
    "shmpipe_stage_latency_window_seconds": "gauge", "shmpipe_stage_latency_seconds": "histogram",
    "shmpipe_ring_depth_messages": "gauge", "shmpipe_ring_capacity_messages": "gauge", "shmpipe_ring_written": "counter",
    "shmpipe_ring_dropped": "counter", "shmpipe_ring_crc_errors": "counter", "shmpipe_ring_full_events": "counter",
    "shmpipe_ring_stall_seconds": "counter",
    "shmpipe_trading_halted": "gauge", "shmpipe_risk_state": "gauge", "shmpipe_risk_approvals": "counter",
    "shmpipe_risk_denials": "counter", "shmpipe_risk_open_orders": "gauge", "shmpipe_position_lots": "gauge",
    "shmpipe_net_pnl": "gauge",
    "shmpipe_llm_generations_started": "counter", "shmpipe_llm_generations": "counter",
    "shmpipe_llm_signals_dropped": "counter", "shmpipe_llm_breaker_state": "gauge", "shmpipe_llm_breaker_score": "gauge",
    "shmpipe_orders": "counter", "shmpipe_fills": "counter", "shmpipe_orders_open": "gauge",
    "shmpipe_feed_checksum_failures": "counter", "shmpipe_feed_resyncs": "counter", "shmpipe_feed_reconnects": "counter",
    "shmpipe_feed_seq_gaps": "counter", "shmpipe_feed_clock_skew_seconds": "gauge",
    "shmpipe_ops_requests_refused": "counter",
    "shmpipe_latency_guard_state": "gauge", "shmpipe_latency_guard_trips": "counter",
    "shmpipe_latency_budget_seconds": "gauge", "shmpipe_latency_guard_above_seconds": "gauge",
}
LABELS = {"stage", "state", "direction", "quantile", "ring", "reason", "instrument", "outcome", "why", "status", "code",
          "level", "le"}


def parse(snap: dict) -> dict:
    """{family name: {(sample name, frozenset(labels)): value}} and the families' types."""
    out = {}
    for fam in text_string_to_metric_families(render_metrics(snap).decode()):
        out[fam.name] = (fam.type, {(s.name, frozenset(s.labels.items())): s.value for s in fam.samples})
    return out


def value(fams: dict, family: str, sample: str | None = None, **labels) -> float:
    return fams[family][1][(sample or family, frozenset(labels.items()))]


def test_every_family_is_there_with_its_type():
    fams = parse(snapshot())
    assert {k: t for k, (t, _) in fams.items()} == FAMILIES


def test_names_follow_the_naming_guide():
    """Prefix, snake case, base units (no _ms / _us / _ns), counters' samples end in _total, and only
    the declared labels: none of them an order id."""
    fams = parse(snapshot())
    for name, (kind, samples) in fams.items():
        assert re.fullmatch(r"shmpipe_[a-z][a-z0-9_]*", name), name
        assert not re.search(r"_(ms|us|ns|millis|micros)(_|$)", name), name
        for sample_name, labels in samples:
            if kind == "counter":
                assert sample_name == name + "_total", sample_name
            if kind == "histogram":
                assert sample_name in (name + "_bucket", name + "_count", name + "_sum"), sample_name
            assert {k for k, _ in labels} <= LABELS, (name, labels)
            assert not any("order" in k or k.endswith("_id") for k, _ in labels)


def test_stage_families_carry_the_status_rows():
    snap = snapshot()
    fams = parse(snap)
    risk = next(p for p in snap["processes"] if p["name"] == "risk")
    assert value(fams, "shmpipe_stage_state", stage="risk", state="RUNNING") == 1.0
    assert value(fams, "shmpipe_stage_state", stage="risk", state="FATAL") == 0.0
    assert value(fams, "shmpipe_stage_messages", "shmpipe_stage_messages_total", stage="risk", direction="in") == risk["msgs_in"]
    assert value(fams, "shmpipe_stage_cpu_seconds", "shmpipe_stage_cpu_seconds_total", stage="risk") == risk["cpu_s"]
    assert value(fams, "shmpipe_stage_heartbeat_age_seconds", stage="risk") == pytest.approx(0.020)
    assert value(fams, "shmpipe_stage_latency_window_seconds", stage="risk", quantile="0.99") == pytest.approx(5.005e-3)


def test_ring_families_are_in_base_units():
    snap = snapshot()
    snap["rings"][6]["stall_ns"] = 1_500_000_000
    snap["rings"][6]["full_events"] = 4
    fams = parse(snap)
    assert value(fams, "shmpipe_ring_stall_seconds", "shmpipe_ring_stall_seconds_total", ring="orders") == 1.5
    assert value(fams, "shmpipe_ring_full_events", "shmpipe_ring_full_events_total", ring="orders") == 4
    assert value(fams, "shmpipe_ring_dropped", "shmpipe_ring_dropped_total", ring="feat") == 1
    assert value(fams, "shmpipe_ring_depth_messages", ring="md") == 3


def test_trading_families_from_the_stages_counters():
    fams = parse(snapshot())
    assert value(fams, "shmpipe_risk_state", stage="risk", state="ACTIVE") == 1.0
    assert value(fams, "shmpipe_risk_denials", "shmpipe_risk_denials_total", stage="risk", reason="rate") == 4
    assert value(fams, "shmpipe_risk_denials", "shmpipe_risk_denials_total", stage="risk", reason="stale_ref") == 1
    zero = [r for r in DENY_REASONS if r not in ("rate", "stale_ref")]
    assert zero and all(value(fams, "shmpipe_risk_denials", "shmpipe_risk_denials_total", stage="risk", reason=r) == 0
                        for r in zero), "every deny reason is there from the start"
    assert value(fams, "shmpipe_position_lots", stage="risk", instrument="BTCUSDT") == 3.0
    assert value(fams, "shmpipe_net_pnl", stage="risk", instrument="ETHUSDT") == -0.75
    assert value(fams, "shmpipe_orders", "shmpipe_orders_total", stage="sender", status="acked") == 38
    assert value(fams, "shmpipe_orders", "shmpipe_orders_total", stage="sender", status="cancelled") == 3
    assert value(fams, "shmpipe_fills", "shmpipe_fills_total", stage="sender") == 12
    assert value(fams, "shmpipe_llm_generations", "shmpipe_llm_generations_total", stage="llm", outcome="instruction") == 7
    assert value(fams, "shmpipe_llm_generations", "shmpipe_llm_generations_total", stage="llm", outcome="timeout") == 2
    assert value(fams, "shmpipe_llm_breaker_state", stage="llm", state="closed") == 1.0
    assert value(fams, "shmpipe_llm_breaker_score", stage="llm") == 0.875
    assert value(fams, "shmpipe_feed_clock_skew_seconds", stage="feed", instrument="BTCUSDT") == pytest.approx(-1.25e-3)
    assert value(fams, "shmpipe_feed_checksum_failures", "shmpipe_feed_checksum_failures_total", stage="feed") == 2
    assert value(fams, "shmpipe_trading_halted") == 0.0


def test_an_unknown_state_gets_its_own_series():
    snap = snapshot()
    snap["processes"][5]["stage"]["state"] = "HALTED"
    snap["processes"][4]["stage"]["breaker"] = "probing"
    snap["halted"] = True
    fams = parse(snap)
    assert value(fams, "shmpipe_risk_state", stage="risk", state="HALTED") == 1.0
    assert value(fams, "shmpipe_llm_breaker_state", stage="llm", state="probing") == 1.0
    assert value(fams, "shmpipe_llm_breaker_state", stage="llm", state="closed") == 0.0
    assert value(fams, "shmpipe_trading_halted") == 1.0


def test_no_string_a_stage_publishes_reaches_the_metrics():
    """Only numbers of known counters are read: a key, a secret or an order id a stage put in its
    stats would not be exposed (the stats are JSON the stage writes)."""
    snap = snapshot()
    secret = "sk-live-0123456789abcdef"
    for p in snap["processes"]:
        p["stage"].update({"api_key": secret, "note": secret, "order_12345": 1, f"deny_{secret}": 0})
        p["last_error"] = f"ConnectionError: {secret}"
    text = render_metrics(snap).decode()
    assert secret not in text and "12345" not in text


def test_a_stage_without_counters_has_only_the_supervisors_families():
    snap = snapshot()
    snap["processes"] = [dict(snap["processes"][0], stage={})]
    fams = parse(snap)
    assert value(fams, "shmpipe_stage_state", stage="venue", state="RUNNING") == 1.0
    assert fams["shmpipe_risk_denials"][1] == {} and fams["shmpipe_orders"][1] == {}


def test_stage_kinds_come_from_the_counters():
    assert [stage_kind(p["stage"]) for p in snapshot()["processes"]] == ["", "feed", "", "", "llm", "risk", "sender"]


def test_the_state_list_is_the_supervisors():
    assert STAGE_STATES == tuple(s.value for s in State)


@pytest.mark.parametrize("published", ["sk-live-0123456789", "a b", "x" * 40, 7, None])
def test_a_state_that_is_not_a_plain_word_shows_as_unknown(published):
    snap = snapshot()
    snap["processes"][4]["stage"]["breaker"] = published
    fams = parse(snap)
    assert value(fams, "shmpipe_llm_breaker_state", stage="llm", state="unknown") == 1.0
    states = {dict(labels)["state"] for _, labels in fams["shmpipe_llm_breaker_state"][1]}
    assert states == {*BREAKER_STATES, "unknown"}


def test_the_latency_guard_families():
    snap = snapshot()
    snap["latency_guard"] = latency_guard(1)
    fams = parse(snap)
    assert value(fams, "shmpipe_latency_guard_state", state="REDUCING") == 1.0
    assert value(fams, "shmpipe_latency_guard_state", state="OK") == 0.0
    assert value(fams, "shmpipe_latency_guard_trips", "shmpipe_latency_guard_trips_total") == 1
    assert value(fams, "shmpipe_latency_budget_seconds", stage="fast", level="reduce") == 0.05
    assert value(fams, "shmpipe_latency_budget_seconds", stage="fast", level="halt") == 0.25
    assert ("shmpipe_latency_budget_seconds", frozenset({"stage": "feed", "level": "halt"}.items())) not in \
        fams["shmpipe_latency_budget_seconds"][1], "halt_p99_us 0: never, no series"
    assert value(fams, "shmpipe_latency_guard_above_seconds", stage="fast") == 1.5
    assert "fast p99 above" not in render_metrics(snap).decode(), "the reason is words: in /health, not a label"


def test_without_a_guard_in_the_status_there_is_no_guard_family():
    snap = snapshot()
    snap["latency_guard"] = None
    assert not any(name.startswith("shmpipe_latency") for name in parse(snap))


def test_stage_latency_is_a_classic_histogram_from_1us_to_1s():
    """Cumulative buckets at the process table's bounds, +Inf the whole count, the sum in seconds."""
    fams = parse(snapshot())
    risk = {dict(labels).get("le"): v for (name, labels), v in fams["shmpipe_stage_latency_seconds"][1].items()
            if name == "shmpipe_stage_latency_seconds_bucket" and ("stage", "risk") in labels}
    les = sorted((float(k) for k in risk if k != "+Inf"))
    assert les[0] == 1e-6 and les[-1] == 1.0 and len(les) == 19
    assert all(round(b / a, 9) in (2.0, 2.5) for a, b in zip(les, les[1:])), "1-2-5 per decade"
    # risk (index 5): 50 outputs in (20, 50] us, 20 in (50, 100] us, 5 in (100, 200] us, 1 above 1 s
    assert (risk["2e-05"], risk["5e-05"], risk["0.0001"], risk["0.0002"], risk["1.0"], risk["+Inf"]) == (
        0, 50, 70, 75, 75, 76)
    assert value(fams, "shmpipe_stage_latency_seconds", "shmpipe_stage_latency_seconds_count", stage="risk") == 76
    assert value(fams, "shmpipe_stage_latency_seconds", "shmpipe_stage_latency_seconds_sum",
                 stage="risk") == pytest.approx(2.0025)
