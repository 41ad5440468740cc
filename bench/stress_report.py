"""The replay stress report (``bench.stress_replay``): per scenario the throughput, the p99 latency, and
the share of our orders the venue accepted against its real rules, with the rejections by code.

Orders: ``order_outcomes`` reads the sender's journal (``pipeline.trading.journal``) of a scenario after
its pipeline stopped: every order the sender journaled an intent for was sent (or tried: an unreachable
venue is a rejection with code ``unreachable``); the venue accepted it when the sender learnt an order
id or a live / filled / cancelled state for it; it rejected it with the code the sender journaled
(the venue's Bitget code, e.g. ``43012``; ``429`` rate limited); the rest are unresolved (an unknown
outcome still being queried, or never sent: the venue did not know it on reconciliation). Counted over
the whole run (since the pipeline started), not only the measured window.

Throughput is BOOKs written by the feed a second over the measured window; the p99 latencies are the
fast path's (frame received -> SIGNAL written; -> order request sent), HdrHistogram over the window.
"""

from __future__ import annotations

from collections import Counter

from bench import report
from bench.pipeline_report import VALIDITY_RULE, model_short, process_table, stage_table
from bench.stress_replay import NOISE, noise_of, not_applied, scenario_kind
from pipeline.trading.journal import CANCELLED, FILLED, LIVE, NEVER_SENT, PARTIAL, REJECTED, replay

#: the replay table's columns, in order (the smoke test checks them)
COLUMNS = ("scenario", "source", "noise", "throughput BOOKs/s", "SIGNAL p99 µs", "order sent p99 µs",
           "orders sent", "accepted by the venue", "valid share (accepted / sent)", "rejected by code",
           "unresolved", "venue book rule: valid / counted", "feed recovery")

_ACCEPTED = frozenset((LIVE, PARTIAL, FILLED, CANCELLED))


def order_outcomes(journal: bytes) -> dict:
    """What became of every order in a sender journal's bytes (see the module docstring): ``sent``,
    ``accepted``, ``rejected`` ({code: count}), ``unresolved``, ``never_sent`` (among the unresolved),
    ``torn`` (journal lines that did not decode, skipped)."""
    st, _ = replay(journal)
    rejected: Counter = Counter()
    accepted = unresolved = never_sent = 0
    for o in st.orders.values():
        if o.status == REJECTED:
            rejected[o.code or "?"] += 1
        elif o.status in _ACCEPTED or o.vid:
            accepted += 1
        else:
            unresolved += 1
            never_sent += int(o.status == NEVER_SENT)
    return {"sent": len(st.orders), "accepted": accepted, "rejected": dict(sorted(rejected.items())),
            "unresolved": unresolved, "never_sent": never_sent, "torn": st.torn}


def valid_share(outcomes: dict) -> float | None:
    """accepted / sent; None when nothing was sent."""
    return outcomes["accepted"] / outcomes["sent"] if outcomes.get("sent") else None


def recovery(stage: dict, kind: str) -> str:
    """The feed's own recovery counters in a few words: resyncs and checksum failures (Bitget), gaps,
    re-requests, recovered and unrecoverable gaps (ITCH)."""
    keys = (("resyncs", "checksum_failures", "reconnects") if kind != "itch"
            else ("gaps", "rerequests", "recovered", "unrecoverable"))
    return ", ".join(f"{k} {stage.get(k, 0)}" for k in keys)


def replay_row(r: dict) -> list[str]:
    """One result's cells, in ``COLUMNS`` order ('-' where there is no figure)."""
    sc = r["scenario"]
    kind = "itch" if "itch_file" in sc["faults"] else "bitget"
    speed = sc["faults"].get("itch_speed" if kind == "itch" else "speed")
    source = f"{kind} x{speed:g}"
    if "error" in r:
        return [sc["name"], source, "-", "FAILED", *["-"] * (len(COLUMNS) - 5), r["error"][:80].replace("|", "/")]
    o = r.get("orders") or {"sent": 0, "accepted": 0, "rejected": {}, "unresolved": 0, "never_sent": 0}
    share = valid_share(o)

    def us(st: dict) -> str:
        return f"{st['p99_us']:.0f}" if st.get("n") else "-"
    rejected = ", ".join(f"{code} {n}" for code, n in o["rejected"].items()) or "none"
    unresolved = f"{o['unresolved']}" + (f" ({o['never_sent']} never sent)" if o["never_sent"] else "")
    feed = (r["processes"].get("feed") or {}).get("stage") or {}
    venue = (r["processes"].get("venue") or {}).get("stage") or {}
    valid, invalid = venue.get("orders_valid", 0), venue.get("orders_invalid", 0)
    book_rule = f"{valid} / {valid + invalid}" if valid + invalid else "-"
    noise = r.get("noise") or "-"
    return [sc["name"], source, noise, f"{r['books_per_s']:.0f}", us(r["stages"]["signal"]),
            us(r["stages"]["order_sent"]), str(o["sent"]), str(o["accepted"]),
            f"{100 * share:.1f} %" if share is not None else "-", rejected, unresolved, book_rule,
            recovery(feed, kind)]


def replay_table(results: list[dict]) -> list[str]:
    """The markdown table of ``results``, one row each (``replay_row``)."""
    md = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return md + ["| " + " | ".join(replay_row(r)) + " |" for r in results]


def noise_lines(kind: str) -> list[str]:
    """The documented noise and how it is applied to a ``kind`` source, or why it is not."""
    out = []
    for noise, how in NOISE.items():
        applied, text = how[kind]
        out.append(f"- {noise}: {'applied' if applied else 'NOT APPLIED'}: {text}.")
    return out


def replay_markdown(machine: dict, results: list[dict], kind: str, path: str) -> list[str]:
    """report.md's lines: what was replayed, the noise, the table, then each scenario's stages and
    processes."""
    md = [f"# Pipeline stress from a real sequence {machine['date']}", "", report.machine_line(machine),
          f"Replayed: {kind} {path} at {machine.get('replay_speed', 1.0):g} x its original pace "
          "(a capture shorter than the window starts again). Every stage is a real process under the supervisor; "
          "latencies are from the feed's receive stamp of the venue frame, HdrHistogram over the measured window.", "",
          "## Noise (design document 000 section 4.3)", ""] + noise_lines(kind)
    skipped = not_applied(kind)
    if skipped:
        md += ["", f"Not run for this source: {', '.join(n for n, _ in skipped)} (no scenario fakes them)."]
    md += ["", "## Summary", "",
           "Valid share: the orders the venue accepted over the orders the sender sent, from the sender's journal, "
           "since the pipeline started (bench.stress_report); rejected by code: the venue's codes ('unreachable': "
           f"no answer). The venue's own book rule, counted by the venue beside it (valid / counted): {VALIDITY_RULE}.",
           ""] + replay_table(results) + [""]
    for r in results:
        if "error" in r:
            md += [f"## {r['scenario']['name']}: FAILED", "", r["error"], ""]
            continue
        md += [f"## {r['scenario']['name']} ({model_short(r)}, noise: {r.get('noise', '-')})", ""]
        md += stage_table(r) + [""] + process_table(r) + [""]
    return md


def annotate(r: dict, sc) -> dict:
    """Result ``r`` of replay scenario ``sc`` with its ``noise`` and ``kind`` (for the table)."""
    r["noise"], r["kind"] = noise_of(sc), scenario_kind(sc)
    return r
