"""``/metrics``: a snapshot (``ops.snapshot``) in the Prometheus text format, through prometheus-client.

A custom collector (``SnapshotCollector``) turns the counters the supervisor already reads into metric
families at scrape time; nothing is counted twice and no stage does any work for a scrape. Names follow
the Prometheus naming guide: prefix ``shmpipe_``, base units (seconds, not ms), ``_total`` on
counters, enums as one 0/1 gauge per state, labels that never hold an order id, a key or a token
(only stage, ring and instrument names, states and reasons).

Families (the label sets in braces):

- per stage ``{stage}``: ``shmpipe_stage_state{stage,state}``, ``shmpipe_stage_restarts_total``,
  ``shmpipe_stage_heartbeat_age_seconds``, ``shmpipe_stage_messages_total{stage,direction}`` (in /
  out), ``shmpipe_stage_cpu_seconds_total``, ``shmpipe_stage_errors_total``,
  ``shmpipe_stage_latency_window_seconds{stage,quantile}`` (p50 / p99 of the stage's latest 4096
  outputs, origin to output, as the process table holds them), ``shmpipe_stage_latency_seconds`` (a
  classic histogram of every output's latency, buckets 1 us .. 1 s, 1-2-5 per decade);
- per ring ``{ring}``: ``shmpipe_ring_depth_messages``, ``shmpipe_ring_capacity_messages``,
  ``shmpipe_ring_written_total``, ``shmpipe_ring_dropped_total``, ``shmpipe_ring_crc_errors_total``,
  ``shmpipe_ring_full_events_total``, ``shmpipe_ring_stall_seconds_total``;
- trading: ``shmpipe_trading_halted`` (the supervisor's flag); the risk gateway's
  ``shmpipe_risk_state{stage,state}``, ``shmpipe_risk_approvals_total``,
  ``shmpipe_risk_denials_total{stage,reason}`` (every ``DenyReason``), ``shmpipe_risk_open_orders``,
  ``shmpipe_position_lots{stage,instrument}``, ``shmpipe_net_pnl{stage,instrument}`` (quote currency);
- the LLM stage: ``shmpipe_llm_generations_started_total``, ``shmpipe_llm_generations_total{stage,outcome}``
  (instruction, dropped, probe, or the rejection reason), ``shmpipe_llm_signals_dropped_total{stage,why}``,
  ``shmpipe_llm_breaker_state{stage,state}``, ``shmpipe_llm_breaker_score``;
- the order sender: ``shmpipe_orders_total{stage,status}``, ``shmpipe_fills_total``, ``shmpipe_orders_open``;
- the latency-budget guard (when the supervisor has one): ``shmpipe_latency_guard_state{state}``,
  ``shmpipe_latency_guard_trips_total``, ``shmpipe_latency_budget_seconds{stage,level}``,
  ``shmpipe_latency_guard_above_seconds{stage}``;
- the ops server's own ``shmpipe_ops_requests_refused_total{code}``;
- the market-data feed: ``shmpipe_feed_checksum_failures_total``, ``shmpipe_feed_resyncs_total``,
  ``shmpipe_feed_reconnects_total``, ``shmpipe_feed_seq_gaps_total``,
  ``shmpipe_feed_clock_skew_seconds{stage,instrument}`` (exchange time minus receive time, sampled).

A stage's kind is read from its counters, not its module (a subclass of a stage is the same kind):
the feed publishes ``checksum_failures``, the risk gateway ``approved`` and a ``state``, the LLM stage
``breaker``, the order sender ``sent`` and ``acked``.
"""

from __future__ import annotations

import re
from typing import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from pipeline.runtime.proctable import LAT_BOUNDS_NS
from pipeline.trading.llm.breaker import BreakerState
from pipeline.trading.llm.schema import REASONS as LLM_REJECT_REASONS
from pipeline.trading.risk.checks import DenyReason, TradingState

#: the text format's content type (prometheus-client's)
METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST

#: the supervisor's process states (``supervisor.states.State``; not imported: the supervisor imports this
#: package, and its package would import it back; a test holds the two lists equal)
STAGE_STATES = ("STOPPED", "STARTING", "RUNNING", "BACKOFF", "STOPPING", "EXITED", "FATAL")
RISK_STATES = tuple(s.name for s in TradingState)
BREAKER_STATES = tuple(s.value for s in BreakerState)
DENY_REASONS = tuple(r.name.lower() for r in DenyReason)
#: the LLM stage's ``rej_<reason>`` counters: a rejected answer's reason, or a hung generation's late answer
LLM_REJECTIONS = tuple(LLM_REJECT_REASONS) + ("hung",)

#: order sender counters -> the ``status`` label of shmpipe_orders_total
ORDER_STATUSES = {"sent": "sent", "acked": "acked", "rejected": "rejected", "cancels": "cancelled",
                  "unknown": "unknown", "never_sent": "never_sent", "dups": "duplicate"}
#: LLM stage counters -> the ``outcome`` label of shmpipe_llm_generations_total (plus ``rej_<reason>``)
LLM_OUTCOMES = {"instructions": "instruction", "instr_drops": "dropped", "probes_valid": "probe"}
#: feed counters -> their counter family
FEED_COUNTERS = {"checksum_failures": "shmpipe_feed_checksum_failures", "resyncs": "shmpipe_feed_resyncs",
                 "reconnects": "shmpipe_feed_reconnects", "seq_gaps": "shmpipe_feed_seq_gaps"}


_WORD = re.compile(r"[A-Za-z_]{1,32}")


def _num(v) -> float | None:
    """``v`` as a float when it is a number (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _ids_with(stats: dict, prefix: str) -> list[int]:
    """The instrument ids of keys ``<prefix><id>`` in ``stats``, sorted."""
    n = len(prefix)
    return sorted(int(k[n:]) for k in stats if k.startswith(prefix) and k[n:].isdigit())


def stage_kind(stats: dict) -> str:
    """"feed", "risk", "llm", "sender" or "" from a stage's counters (see the module docstring)."""
    if "checksum_failures" in stats:
        return "feed"
    if "approved" in stats and stats.get("state") in RISK_STATES:
        return "risk"
    if "breaker" in stats:
        return "llm"
    if "sent" in stats and "acked" in stats:
        return "sender"
    return ""


def _enum(name: str, doc: str, label: str, states: tuple[str, ...], rows: list[tuple[str, str]]) -> GaugeMetricFamily:
    """One 0/1 gauge per (owner, state) for each (owner, current state) in ``rows``; a current state
    outside ``states`` gets its own series too when it is a plain word (letters and ``_``, at most 32),
    else the series ``unknown``."""
    g = GaugeMetricFamily(name, doc, labels=[label, "state"])
    for owner, current in rows:
        if current not in states:
            current = current if isinstance(current, str) and _WORD.fullmatch(current) else "unknown"
        for s in states + (() if current in states else (current,)):
            g.add_metric([owner, s], 1.0 if s == current else 0.0)
    return g


def stage_families(snap: dict) -> Iterator[Metric]:
    """The per-stage families."""
    procs = snap["processes"]
    yield _enum("shmpipe_stage_state", "The supervisor's state of each stage process (1 = current).", "stage",
                STAGE_STATES, [(p["name"], p["state"]) for p in procs])
    restarts = CounterMetricFamily("shmpipe_stage_restarts", "Restarts of the stage since the supervisor started.",
                                   labels=["stage"])
    age = GaugeMetricFamily("shmpipe_stage_heartbeat_age_seconds", "Time since the stage's last heartbeat.",
                            labels=["stage"])
    msgs = CounterMetricFamily("shmpipe_stage_messages", "Messages taken from inputs (in) and written to outputs "
                               "(out) by the stage's current process.", labels=["stage", "direction"])
    cpu = CounterMetricFamily("shmpipe_stage_cpu_seconds", "User + system CPU time of the stage's current process.",
                              labels=["stage"])
    errors = CounterMetricFamily("shmpipe_stage_errors", "Exceptions caught by the stage's runner.", labels=["stage"])
    lat = GaugeMetricFamily("shmpipe_stage_latency_window_seconds", "Origin-to-output latency of the stage's "
                            "latest 4096 outputs, at the quantile.", labels=["stage", "quantile"])
    for p in procs:
        n = p["name"]
        restarts.add_metric([n], p["restarts"])
        if p.get("heartbeat_age_ms") is not None:
            age.add_metric([n], p["heartbeat_age_ms"] / 1e3)
        msgs.add_metric([n, "in"], p["msgs_in"])
        msgs.add_metric([n, "out"], p["msgs_out"])
        if p.get("cpu_s") is not None:
            cpu.add_metric([n], p["cpu_s"])
        errors.add_metric([n], p.get("errors", 0))
        lat.add_metric([n, "0.5"], p["p50_us"] / 1e6)
        lat.add_metric([n, "0.99"], p["p99_us"] / 1e6)
    yield from (restarts, age, msgs, cpu, errors, lat)
    yield latency_histogram(procs)


def _le(bound_ns: int) -> str:
    """A bucket bound in seconds as the ``le`` label: ``1e-06`` ... ``1.0``."""
    return repr(bound_ns / 1e9)


def latency_histogram(procs: list[dict]) -> Metric:
    """``shmpipe_stage_latency_seconds``: every output's origin-to-output latency, a classic histogram with
    the process table's buckets (1 us .. 1 s, 1-2-5 per decade), counted by the stage's current process."""
    h = HistogramMetricFamily("shmpipe_stage_latency_seconds", "Origin-to-output latency of every output of the "
                              "stage's current process.", labels=["stage"])
    for p in procs:
        hist = p.get("lat_hist")
        if not hist:
            continue
        cum, buckets = 0, []
        for bound, n in zip(LAT_BOUNDS_NS + (None,), hist["counts"]):
            cum += n
            buckets.append((_le(bound) if bound is not None else "+Inf", cum))
        h.add_metric([p["name"]], buckets, sum_value=hist["sum_ns"] / 1e9)
    return h


def ring_families(snap: dict) -> Iterator[Metric]:
    """The per-ring families."""
    gauges = {"depth": ("shmpipe_ring_depth_messages", "Messages written and not yet read."),
              "capacity": ("shmpipe_ring_capacity_messages", "Slots in the ring.")}
    counters = {"written": ("shmpipe_ring_written", "Messages written."),
                "dropped": ("shmpipe_ring_dropped", "Messages refused on a full drop ring."),
                "crc_errors": ("shmpipe_ring_crc_errors", "Slots that failed their CRC-32C check (skipped)."),
                "full_events": ("shmpipe_ring_full_events", "Times a writer found a backpressure ring full and waited.")}
    fams = {k: GaugeMetricFamily(n, d, labels=["ring"]) for k, (n, d) in gauges.items()}
    fams |= {k: CounterMetricFamily(n, d, labels=["ring"]) for k, (n, d) in counters.items()}
    stall = CounterMetricFamily("shmpipe_ring_stall_seconds", "Time writers spent waiting for room in the ring.",
                                labels=["ring"])
    for r in snap["rings"]:
        for k, fam in fams.items():
            fam.add_metric([r["name"]], r[k])
        stall.add_metric([r["name"]], r["stall_ns"] / 1e9)
    yield from fams.values()
    yield stall


def risk_families(snap: dict, stages: list[tuple[str, dict]]) -> Iterator[Metric]:
    """The trading flag and the risk gateway's families (``stages``: (name, stats) of risk stages)."""
    yield GaugeMetricFamily("shmpipe_trading_halted", "1 while the supervisor has halted trading (operator halt, "
                            "kill switch or a FATAL stage) until resume.", value=1.0 if snap["halted"] else 0.0)
    yield _enum("shmpipe_risk_state", "The risk gateway's trading state (1 = current).", "stage", RISK_STATES,
                [(n, s["state"]) for n, s in stages])
    approvals = CounterMetricFamily("shmpipe_risk_approvals", "New orders the risk gateway approved.", labels=["stage"])
    denials = CounterMetricFamily("shmpipe_risk_denials", "New orders the risk gateway denied, by reason.",
                                  labels=["stage", "reason"])
    open_orders = GaugeMetricFamily("shmpipe_risk_open_orders", "Orders the risk gateway counts as working.",
                                    labels=["stage"])
    pos = GaugeMetricFamily("shmpipe_position_lots", "Position per instrument in lots, as the risk gateway holds it.",
                            labels=["stage", "instrument"])
    pnl = GaugeMetricFamily("shmpipe_net_pnl", "Net P&L per instrument in its quote currency (realized + unrealized "
                            "at the gateway's latest mid, before fees).", labels=["stage", "instrument"])
    symbols = snap["instruments"]
    for n, s in stages:
        approvals.add_metric([n], _num(s.get("approved")) or 0.0)
        for reason in DENY_REASONS:  # every reason from the start; a label value is never a stage's own string
            denials.add_metric([n, reason], _num(s.get("deny_" + reason)) or 0.0)
        if _num(s.get("open")) is not None:
            open_orders.add_metric([n], s["open"])
        for iid in _ids_with(s, "pos_lots_"):
            sym = symbols.get(iid, f"#{iid}")
            if _num(s[f"pos_lots_{iid}"]) is not None:
                pos.add_metric([n, sym], s[f"pos_lots_{iid}"])
            if _num(s.get(f"pnl_{iid}")) is not None:
                pnl.add_metric([n, sym], s[f"pnl_{iid}"])
    yield from (approvals, denials, open_orders, pos, pnl)


def llm_families(stages: list[tuple[str, dict]]) -> Iterator[Metric]:
    """The LLM stage's families (``stages``: (name, stats) of LLM stages)."""
    started = CounterMetricFamily("shmpipe_llm_generations_started", "Generations submitted to the model.",
                                  labels=["stage"])
    done = CounterMetricFamily("shmpipe_llm_generations", "Finished generations by outcome: instruction (written), "
                               "dropped (valid, output full), probe (a valid answer while the breaker is open: "
                               "scored, not sent), or the reason the answer was rejected.", labels=["stage", "outcome"])
    dropped = CounterMetricFamily("shmpipe_llm_signals_dropped", "Signals never sent to the model: replaced by a "
                                  "newer one while the model was busy (conflated).",
                                  labels=["stage", "why"])
    score = GaugeMetricFamily("shmpipe_llm_breaker_score", "The circuit breaker's latest once-a-second "
                              "score: 0.6 x success rate + 0.3 x on-time rate + 0.1 / (1 + anomalies) over its "
                              "window; absent while the window holds too few outcomes.", labels=["stage"])
    for n, s in stages:
        started.add_metric([n], _num(s.get("generations")) or 0.0)
        for key, outcome in LLM_OUTCOMES.items():
            done.add_metric([n, outcome], _num(s.get(key)) or 0.0)
        for reason in LLM_REJECTIONS:
            done.add_metric([n, reason], _num(s.get("rej_" + reason)) or 0.0)
        dropped.add_metric([n, "conflated"], _num(s.get("conflated")) or 0.0)
        if _num(s.get("score")) is not None:
            score.add_metric([n], s["score"])
    yield from (started, done, dropped)
    yield _enum("shmpipe_llm_breaker_state", "The LLM circuit breaker's state (1 = current).", "stage", BREAKER_STATES,
                [(n, s["breaker"]) for n, s in stages])
    yield score


def sender_families(stages: list[tuple[str, dict]]) -> Iterator[Metric]:
    """The order sender's families (``stages``: (name, stats) of sender stages)."""
    orders = CounterMetricFamily("shmpipe_orders", "Orders by what the order sender saw happen to them.",
                                 labels=["stage", "status"])
    fills = CounterMetricFamily("shmpipe_fills", "Fills the order sender received from the venue.", labels=["stage"])
    open_ = GaugeMetricFamily("shmpipe_orders_open", "Orders not yet terminal at the order sender.", labels=["stage"])
    for n, s in stages:
        for key, status in ORDER_STATUSES.items():
            orders.add_metric([n, status], _num(s.get(key)) or 0.0)
        fills.add_metric([n], _num(s.get("fills")) or 0.0)
        if _num(s.get("open")) is not None:
            open_.add_metric([n], s["open"])
    yield from (orders, fills, open_)


def feed_families(snap: dict, stages: list[tuple[str, dict]]) -> Iterator[Metric]:
    """The market-data feed's families (``stages``: (name, stats) of feed stages)."""
    docs = {"checksum_failures": "Book updates whose checksum did not match (the book was resynced).",
            "resyncs": "Fresh snapshots requested after a checksum failure or a sequence gap.",
            "reconnects": "Reconnections to the venue.", "seq_gaps": "Book updates with a sequence gap."}
    fams = {k: CounterMetricFamily(name, docs[k], labels=["stage"]) for k, name in FEED_COUNTERS.items()}
    skew = GaugeMetricFamily("shmpipe_feed_clock_skew_seconds", "Exchange timestamp minus local receive time of the "
                             "instrument's latest sampled book update.", labels=["stage", "instrument"])
    for n, s in stages:
        for k, fam in fams.items():
            fam.add_metric([n], _num(s.get(k)) or 0.0)
        for iid in _ids_with(s, "skew_ms_"):
            if _num(s[f"skew_ms_{iid}"]) is not None:
                skew.add_metric([n, snap["instruments"].get(iid, f"#{iid}")], s[f"skew_ms_{iid}"] / 1e3)
    yield from fams.values()
    yield skew


GUARD_STATES = ("OK", "REDUCING", "HALTED")


def guard_families(guard: dict | None) -> Iterator[Metric]:
    """The supervisor's latency-budget guard (``snap["latency_guard"]``; nothing when the status has none)."""
    if not guard:
        return
    state = GaugeMetricFamily("shmpipe_latency_guard_state", "The latency-budget guard's level (1 = current): "
                              "REDUCING or HALTED after a stage's p99 stayed over its budget, until an operator "
                              "resumes.", labels=["state"])
    current = guard.get("state") if guard.get("state") in GUARD_STATES else "OK"
    for s in GUARD_STATES:
        state.add_metric([s], 1.0 if s == current else 0.0)
    yield state
    yield CounterMetricFamily("shmpipe_latency_guard_trips", "Times the guard's level rose since the supervisor "
                              "started.", value=_num(guard.get("trips")) or 0.0)
    budget = GaugeMetricFamily("shmpipe_latency_budget_seconds", "A stage's p99 budget: above it through the guard's "
                               "window, trading goes REDUCING (reduce) or HALTED (halt; absent: never).",
                               labels=["stage", "level"])
    above = GaugeMetricFamily("shmpipe_latency_guard_above_seconds", "How long the stage's p99 has been above its "
                              "reduce budget (0: within it).", labels=["stage"])
    for name, st in sorted((guard.get("stages") or {}).items()):
        if _num(st.get("reduce_p99_us")):
            budget.add_metric([name, "reduce"], st["reduce_p99_us"] / 1e6)
        if _num(st.get("halt_p99_us")):
            budget.add_metric([name, "halt"], st["halt_p99_us"] / 1e6)
        above.add_metric([name], (_num(st.get("above_ms")) or 0.0) / 1e3)
    yield from (budget, above)


def ops_families(snap: dict) -> Iterator[Metric]:
    """The ops server's own refusals (``snap["ops"]``, when the server added it)."""
    refused = CounterMetricFamily("shmpipe_ops_requests_refused", "Requests the ops server refused, by HTTP status "
                                  "(400 malformed, an unwanted body or half sent, 401 no or wrong token, 403 not "
                                  "loopback / foreign Host or Origin, 404, 405, 408 too slow, 411, 413, 431, 503, "
                                  "505).", labels=["code"])
    counts = snap.get("ops", {}).get("refused", {})
    for code in sorted({401, 403, 404, 405, 503} | set(counts)):
        refused.add_metric([str(code)], counts.get(code, 0))
    yield refused


class SnapshotCollector:
    """A prometheus-client collector over one snapshot (registered per scrape)."""

    def __init__(self, snap: dict):
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        snap = self.snap
        by_kind: dict[str, list[tuple[str, dict]]] = {"feed": [], "risk": [], "llm": [], "sender": []}
        for p in snap["processes"]:
            stats = p.get("stage") or {}
            kind = stage_kind(stats)
            if kind:
                by_kind[kind].append((p["name"], stats))
        yield from stage_families(snap)
        yield from ring_families(snap)
        yield from risk_families(snap, by_kind["risk"])
        yield from llm_families(by_kind["llm"])
        yield from sender_families(by_kind["sender"])
        yield from feed_families(snap, by_kind["feed"])
        yield from guard_families(snap.get("latency_guard"))
        yield from ops_families(snap)


def render_metrics(snap: dict) -> bytes:
    """The Prometheus text exposition of ``snap`` (``METRICS_CONTENT_TYPE``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap))
    return generate_latest(registry)
