"""The pipeline bench's report: the model of each row, SIGNALs by label, the tables per scenario
(stages, processes), the stress summary (what "valid against the venue's book" means:
``VALIDITY_RULE``), the verdicts against the issue's targets, and the whole report.md (``markdown``)."""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path

from bench import report
from bench.pipeline_config import MODEL, MODELS, REPO, Scenario, model_info, model_path
from bench.pipeline_figures import LABEL_KEYS
from bench.pipeline_limit import limit_line
from pipeline.venue.orders import DEFAULT_MAX_AWAY_TICKS

#: the share of a scenario's SIGNALs labelled EMERGENCY from which the report says the model calls
#: EMERGENCY on nearly every update
NEARLY_ALL = 0.9

#: What "valid against the venue's book" means (pipeline.venue.orders.OrderEngine.valid_against_book,
#: with the venue's default max_away_ticks, which the bench passes explicitly)
VALIDITY_RULE = (f"an order is valid against the venue's book when, on arrival at the venue, it does not cross the "
                 f"opposite best price (a buy priced strictly below the best ask, a sell strictly above the best "
                 f"bid) and is within max_away_ticks = {DEFAULT_MAX_AWAY_TICKS} ticks (the venue's default, "
                 f"pipeline.venue.orders.DEFAULT_MAX_AWAY_TICKS) of its own side's best price (|price - best bid| "
                 f"for a buy, |price - best ask| for a sell); counted by the venue for every order that passes its "
                 f"field checks (orders_valid / orders_invalid)")

# Targets of the issue, at 1,000 updates/s on this machine (tick to order request sent, fast path)
TARGET_P50_US = 100.0
TARGET_P99_US = 400.0
TARGET_PEER_RATIO = 3.0
LIMIT_RATIO_GOAL = 1.5  # order sent p50 within this many times the limit measured in the same run


def describe_model(sc: Scenario) -> dict:
    """``model_info`` of the file ``sc`` runs, without running it (the hand-set one is written to a
    temp folder to hash it; the same bytes every time)."""
    with tempfile.TemporaryDirectory(prefix="bench-model-") as tmp:
        return model_info(sc.model, model_path(sc, Path(tmp)))


def model_short(r: dict) -> str:
    """The model of a result in a few words: its kind, file and sha256."""
    m = r.get("model") or {}
    return f"{m.get('kind', '?')} model {m.get('path', '?')} (sha256 {m.get('sha256', '?')})"


def labels_line(r: dict) -> str:
    """The SIGNALs of a result by label, the EMERGENCY share, and whether that is nearly every update."""
    c = r.get("labels") or {}
    total = sum(c.values())
    if not total:
        return "no SIGNAL in the measured window"
    em = c.get("emergency", 0) / total
    text = (", ".join(f"{k.upper()} {c.get(k, 0):,}" for k in LABEL_KEYS)
            + f" of {total:,} SIGNALs (EMERGENCY {100 * em:.1f} %)")
    if em >= NEARLY_ALL:
        text += "; this model calls EMERGENCY on nearly every update at this pace"
    return text


def models_table(results: list[dict]) -> list[str]:
    """One row per scenario: the model file that produced it, its SIGNALs by label, order sent."""
    md = ["| scenario | model file (sha256) | HOLD | LEAN_BUY | LEAN_SELL | EMERGENCY | EMERGENCY share | "
          "order sent p50 / p99 µs (n) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = r.get("model") or {}
        who = f"{MODELS.get(m.get('kind'), m.get('kind', '?'))}: {m.get('path', '?')} ({m.get('sha256', '?')})"
        if "error" in r:
            md.append(f"| {r['scenario']['name']} | {who} | - | - | - | - | - | FAILED |")
            continue
        c = r["labels"]
        total = sum(c.values())
        share = f"{100 * c['emergency'] / total:.1f} %" if total else "-"
        o = r["stages"]["order_sent"]
        sent = f"{o['p50_us']:.0f} / {o['p99_us']:.0f} ({o['n']})" if o.get("n") else "- (0)"
        md.append(f"| {r['scenario']['name']} | {who} | {c['hold']:,} | {c['lean_buy']:,} | {c['lean_sell']:,} | "
                  f"{c['emergency']:,} | {share} | {sent} |")
    return md


def _fmt(st: dict, k: str) -> str:
    return f"{st[k]:.0f}" if st.get("n") else "-"


def stage_table(res: dict) -> list[str]:
    """A result's latency per stage: n, p50, p99, p99.9, max."""
    md = ["| stage (latency since the frame was received) | n | p50 µs | p99 µs | p99.9 µs | max µs |",
          "|---|---|---|---|---|---|"]
    for key, st in res["stages"].items():
        md.append(f"| {st['label']} | {st.get('n', 0)} | {_fmt(st, 'p50_us')} | {_fmt(st, 'p99_us')} | "
                  f"{_fmt(st, 'p999_us')} | {_fmt(st, 'max_us')} |")
    return md


def process_table(res: dict) -> list[str]:
    """A result's processes: core, wait, CPU, messages in and out, input drops, and the wake-ups (its
    threads' voluntary context switches over the window) in all and per message read."""
    md = ["| process | core | wait | CPU % | in | out | input drops | wake-ups | wake-ups / message in |",
          "|---|---|---|---|---|---|---|---|---|"]
    for n, p in res["processes"].items():
        w, per = p.get("wakeups"), p.get("wakeups_per_msg")
        md.append(f"| {n} | {p['core']} | {p['wait']} | {p['cpu_pct']} | {p['msgs_in']} | {p['msgs_out']} | "
                  f"{p['drops']} | {'-' if w is None else w} | {'-' if per is None else per} |")
    return md


def stress_row(r: dict) -> dict:
    """The stress figures of one run: throughput, p99, resyncs, signals, orders, denials, valid share."""
    pr = r["processes"]
    feed, fast, risk = pr["feed"]["stage"], pr["fast"]["stage"], pr["risk"]["stage"]
    sender, venue = pr["sender"]["stage"], pr["venue"]["stage"]
    valid, invalid = venue.get("orders_valid", 0), venue.get("orders_invalid", 0)
    return {"model": model_short(r), "labels": r.get("labels"), "valid": valid, "invalid": invalid,
            "books_per_s": r["books_per_s"], "signal_p99_us": r["stages"]["signal"].get("p99_us"),
            "order_sent_p99_us": r["stages"]["order_sent"].get("p99_us"),
            "resyncs": feed.get("resyncs", 0), "reconnects": feed.get("reconnects", 0),
            "checksum_failures": feed.get("checksum_failures", 0), "seq_gaps": feed.get("seq_gaps", 0),
            "signals": fast.get("signals", 0), "orders_sent": sender.get("sent", 0),
            "denied": {k[5:]: v for k, v in risk.items() if k.startswith("deny_") and v},
            "valid_share": (valid / (valid + invalid)) if valid + invalid else None}


def stress_section(results: list[dict]) -> list[str]:
    """The report's stress summary: what "valid" means (``VALIDITY_RULE``), then ``stress_table``."""
    return ["## Stress summary", "", f"Valid: {VALIDITY_RULE}. The last column is valid / (valid + invalid) over the "
            "orders the venue counted since it started; '-' when no order reached it. No pass / fail limit on this "
            "share is set in the bench.", ""] + stress_table(results) + [""]


def stress_table(results: list[dict]) -> list[str]:
    """One row per stress result (``stress_row``, also kept in the result as ``"stress"``)."""
    md = ["| scenario | model (sha256) | SIGNALs in the window: HOLD / LEAN_BUY / LEAN_SELL / EMERGENCY | BOOKs/s | "
          "SIGNAL p99 µs | order sent p99 µs | resyncs | reconnects | checksum / gap | signals since start | "
          "orders sent since start | denied by reason since start | "
          f"valid vs venue book since start (max_away_ticks {DEFAULT_MAX_AWAY_TICKS}) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        x = stress_row(r)
        r["stress"] = x

        def us(v):
            return f"{v:.0f}" if v is not None else "-"
        share = (f"{100 * x['valid_share']:.1f} % ({x['valid']} of {x['valid'] + x['invalid']})"
                 if x["valid_share"] is not None else "-")
        denied = ", ".join(f"{k} {v}" for k, v in sorted(x["denied"].items())) or "none"
        c = x["labels"] or {}
        labels = " / ".join(f"{c.get(k, 0):,}" for k in LABEL_KEYS)
        md.append(f"| {r['scenario']['name']} | {x['model']} | {labels} | {x['books_per_s']:.0f} | "
                  f"{us(x['signal_p99_us'])} | "
                  f"{us(x['order_sent_p99_us'])} | {x['resyncs']} | {x['reconnects']} | "
                  f"{x['checksum_failures']} / {x['seq_gaps']} | {x['signals']} | {x['orders_sent']} | {denied} | {share} |")
    return md


def shipped(r: dict) -> bool:
    """Whether result ``r`` ran the shipped model."""
    return r["scenario"].get("model", "shipped") == "shipped"


def verdicts(results: list[dict]) -> list[str]:
    """The report's verdict lines: the targets at 1,000 updates/s, the peers' ratios to the ring, the
    variants without the LLM / keep-warm / the fork server, the sweep and the instrument counts."""
    out = []
    ring = next((r for r in results if r["scenario"]["name"] == "ring-1k"), None)  # the whole pipeline, LLM included
    for name in ("ring-1k", "ring-1k-hand-set"):
        r = next((r for r in results if r["scenario"]["name"] == name), None)
        if r is None:
            out.append(f"- Tick to order request sent, fast path, full pipeline at 1,000 updates/s ({name}): "
                       "not run in this report.")
            continue
        o, who = r["stages"]["order_sent"], f"{name}, {model_short(r)}"
        if o.get("n"):
            out.append(f"- Tick to order request sent, fast path, 1,000 updates/s ({who}): p50 {o['p50_us']:.0f} µs "
                       f"(target <= {TARGET_P50_US:.0f}: {'MET' if o['p50_us'] <= TARGET_P50_US else 'MISSED'}), "
                       f"p99 {o['p99_us']:.0f} µs (target <= {TARGET_P99_US:.0f}: "
                       f"{'MET' if o['p99_us'] <= TARGET_P99_US else 'MISSED'}), n {o['n']}; venue CPU "
                       f"{r['processes'].get('venue', {}).get('cpu_pct', '-')} % of a core.")
        else:
            out.append(f"- Tick to order request sent, fast path ({who}): no fast-path order in the window "
                       "(nothing to judge).")
        lim = (r.get("limit") or {}).get("order_sent") or {}
        if lim.get("ratio") is not None:
            out.append(f"- Order sent p50 against the limit ({who}): {lim['ratio']:.2f}x {lim['limit_us']:.0f} µs "
                       f"(goal <= {LIMIT_RATIO_GOAL:g}x: {'MET' if lim['ratio'] <= LIMIT_RATIO_GOAL else 'MISSED'}).")
        out.append(f"- SIGNALs of {who}: {labels_line(r)}.")
    bases = [r for r in results if r["scenario"]["name"] in ("ring-1k", "ring-1k-hand-set")]
    for ring, peer in ((b, peer) for b in bases for peer in ("zmq", "mp-queue")):
        p = next((r for r in results if r["scenario"]["transport"] == peer and r["scenario"]["rate"] == 1_000
                  and r["scenario"]["instruments"] == 1 and r["scenario"]["llm"] and not r["scenario"]["faults"]
                  and r["scenario"].get("model", "shipped") == ring["scenario"].get("model", "shipped")), None)
        if p is None:
            continue
        for key in ("signal", "order_sent"):
            a, b = ring["stages"][key], p["stages"][key]
            if a.get("n") and b.get("n"):
                ratio = b["p50_us"] / a["p50_us"]
                out.append(f"- {key} p50 over {peer}: {b['p50_us']:.0f} µs vs ring {a['p50_us']:.0f} µs = {ratio:.2f}x "
                           f"(target >= {TARGET_PEER_RATIO:g}x: {'MET' if ratio >= TARGET_PEER_RATIO else 'MISSED'}; "
                           f"{model_short(ring)}).")
    for name, what in (("ring-1k-no-llm", "without the LLM hub on the shared cores"),
                       ("ring-1k-no-warm", "without keep-warm (no stage's keep_warm_us)"),
                       ("ring-1k-exec", "with every stage exec'd instead of forked from the fork server")):
        other = next((r for r in results if r["scenario"]["name"] == name), None)
        if other is not None and other["stages"]["order_sent"].get("n"):
            o = other["stages"]["order_sent"]
            out.append(f"- The same {what}: tick to order request sent p50 {o['p50_us']:.0f} µs, "
                       f"p99 {o['p99_us']:.0f} µs (n {o['n']}; {model_short(other)}).")
    out.append("- The sweep spreads the offered rate over 16 instruments; the venue publishes one update per instrument "
               "per synthetic step, so updates arrive in bursts of 16 and the later ones of a burst wait behind the "
               "earlier ones (hence the higher p50 than with one instrument).")
    for r in sorted((r for r in results if r["scenario"]["name"].startswith("sweep-")), key=lambda r: r["scenario"]["rate"]):
        sig = r["stages"]["signal"]
        out.append(f"- 16 instruments, {r['scenario']['rate']:,}/s offered: {r['books_per_s']:,.0f} BOOKs/s measured, "
                   f"drops {r['drops_total']}, SIGNAL p50 / p99 {sig.get('p50_us', float('nan')):.0f} / "
                   f"{sig.get('p99_us', float('nan')):.0f} µs, venue CPU {r['processes']['venue']['cpu_pct']} % "
                   f"({model_short(r)}).")
    out += rate_lines(results)
    for n in (1, 4, 16):
        r = next((r for r in results if r["scenario"]["instruments"] == n and r["scenario"]["rate"] == 1_000
                  and r["scenario"]["transport"] == "ring" and r["scenario"]["llm"] and not r["scenario"]["faults"]
                  and shipped(r)), None)
        if r is not None:
            sig = r["stages"]["signal"]
            cpu = sum(p["cpu_pct"] for k, p in r["processes"].items() if k != "venue")
            out.append(f"- {n} instrument(s) at 1,000/s: SIGNAL p50 / p99 {sig.get('p50_us', float('nan')):.0f} / "
                       f"{sig.get('p99_us', float('nan')):.0f} µs, pipeline CPU (venue excluded) {cpu:.0f} % of a core "
                       f"({model_short(r)}).")
    return out


#: the share of the offered rate the pipeline must deliver (BOOKs/s measured) to have kept up
KEEP_UP_SHARE = 0.95


def kept_up(r: dict) -> str:
    """Whether a rate scenario kept up: 0 ring drops and at least ``KEEP_UP_SHARE`` of the offered rate
    measured (a feed or venue that falls behind drops nothing in the rings and still does not keep up)."""
    short = r["books_per_s"] < KEEP_UP_SHARE * r["scenario"]["rate"]
    why = [f"{r['drops_total']} ring drops"] if r["drops_total"] else ["0 ring drops"]
    if short:
        why.append(f"{r['books_per_s'] / r['scenario']['rate']:.0%} of the offered rate delivered "
                   f"(< {KEEP_UP_SHARE:.0%})")
    return ", ".join(why) + (": DID NOT KEEP UP" if short or r["drops_total"] else ": KEPT UP")


def rate_lines(results: list[dict]) -> list[str]:
    """The ``--rates`` sweep (scenarios named ``rate-...``), by offered rate: BOOKs/s measured, drops
    per ring, whether it kept up (``kept_up``), SIGNAL p50 / p99 and the venue's CPU."""
    out = []
    for r in sorted((r for r in results if r["scenario"]["name"].startswith("rate-")),
                    key=lambda r: r["scenario"]["rate"]):
        sc, sig = r["scenario"], r["stages"]["signal"]
        drops = ", ".join(f"{k} {v}" for k, v in r["ring_drops"].items()) or "no ring"
        kept = kept_up(r)
        out.append(f"- {sc['rate']:,}/s offered over {sc['instruments']} instrument(s), venue source "
                   f"{sc.get('source', 'synthetic')}: {r['books_per_s']:,.0f} BOOKs/s measured; {kept} ({drops}); "
                   f"SIGNAL p50 / p99 {sig.get('p50_us', float('nan')):.0f} / {sig.get('p99_us', float('nan')):.0f} µs; "
                   f"venue CPU {r['processes'].get('venue', {}).get('cpu_pct', '-')} % of a core ({model_short(r)}).")
    return out


def markdown(machine: dict, results: list[dict], stress: bool, made: list[str]) -> tuple[list[str], list[str]]:
    """report.md's lines for ``results`` (a failed scenario: its ``error``), with the stress summary
    when ``stress`` and the plots ``made``; and the verdict lines. Each stress result gets its
    ``"stress"`` figures (``stress_table``)."""
    ok = [r for r in results if "error" not in r]
    md = [f"# Pipeline {'stress ' if stress else ''}benchmark {machine['date']}", "", report.machine_line(machine),
          "Every stage is a real process under the supervisor; latencies are from the feed's receive stamp of the "
          "venue frame (CLOCK_MONOTONIC, shared by all processes), recorded by each process's latency tap, "
          "HdrHistogram percentiles over the measured window only.", ""]
    head = len(md)
    md += ["## Models", "",
           f"The fast stage runs the {MODELS['shipped']} ({MODEL.relative_to(REPO)}) unless a row says otherwise; "
           f"the {MODELS['hand-set']} (bench.pipeline.write_bench_model: the same graph and size, weights set by hand "
           "to follow the book imbalance) runs beside it as its own scenario. SIGNALs by label over each measured "
           "window (the fast stage's counters):", ""] + models_table(results) + [""]
    md += limit_section(machine.get("limit"))
    for r in results:
        md += scenario_section(r)
    if stress:
        md += stress_section(ok)
    summary = verdicts(ok)
    if summary:
        md = md[:head] + ["## Verdicts", ""] + summary + [""] + md[head:]
    md += [f"![{m}]({m})" for m in made]
    return md, summary


def scenario_section(r: dict) -> list[str]:
    """One scenario's section: what it offered, its model, and its figures or its error."""
    sc = r["scenario"]
    md = [f"## {sc['name']}: {sc['rate']:,} updates/s offered, {sc['instruments']} instrument(s), "
          f"transport {sc['transport']}, venue source {sc.get('source', 'synthetic')}"
          + ("" if sc["llm"] else ", no LLM hub")
          + (f", faults {sc['faults']}" if sc["faults"] else ""), ""]
    m = r.get("model") or {}
    said = m.get("fast_stage_sha256_8")
    check = ("" if not said else f" (the fast stage reported sha256 {said}: "
             + ("the same file)" if str(m.get("sha256", "")).startswith(said) else "A DIFFERENT FILE)"))
    md += [f"Model: {m.get('label', sc.get('model', '?'))}{check}.", ""]
    if m.get("fast_provider"):
        md += [f"The fast stage's ONNX Runtime provider: {m['fast_provider']} (the stage's own word).", ""]
    if "error" in r:
        return md + [f"FAILED: {r['error'][:500]}", ""]
    md += [f"{r['books_per_s']:,.0f} BOOKs/s measured over {r['seconds']} s; venue CPU "
           f"{r['processes'].get('venue', {}).get('cpu_pct', '-')} % of a core; ring drops {r['drops_total']} "
           f"({', '.join(f'{k} {v}' for k, v in r['ring_drops'].items() if v) or 'none'}); load {r['load_avg']}; "
           f"plan: {r['plan']}.", "", f"SIGNALs by label: {labels_line(r)}.", ""]
    if r.get("limit"):
        md += ["Against the limit (measured in this run; see \"The limit\"):", ""]
        md += [f"- {limit_line(k, row)}" for k, row in r["limit"].items()] + [""]
    return md + stage_table(r) + [""] + process_table(r) + [""]


def limit_section(limit: dict | None) -> list[str]:
    """The report's "The limit" section: each stage's hot compute and the wake-up floor, measured in
    this run before the pipeline's windows (``bench.pipeline_limit``); [] when not measured."""
    if not limit:
        return []
    md = ["## The limit", "", "limit = sum of the stages' hot compute (p50) + hops x the wake-up floor (p50); "
          "SIGNAL written: feed + features + fast, 2 hops; order request sent: those + risk + sender, 4 hops "
          "(bench.pipeline_limit). Measured in this process before the pipeline's windows:", "",
          "| measured | p50 µs | p99 µs | n |", "|---|---|---|---|"]
    for v in [*limit["compute"].values(), limit["floor"]]:
        md.append(f"| {v['label']} | {v['p50_us']:.1f} | {v['p99_us']:.1f} | {v['n']} |")
    return md + [""]


def failed_result(sc: Scenario, error: str) -> dict:
    """The result of a scenario that could not be measured: its scenario, model and ``error``."""
    return {"scenario": asdict(sc), "model": describe_model(sc), "error": error[:2000]}
