"""What a pipeline bench run measures and how its taps and status become figures: ``STAGES`` (each
stage's latency since the frame was received: the process and its tap codes), the fast stage's label
counters, and ``summarize`` (HdrHistogram per stage, CPU, ring drops, SIGNALs by label)."""

from __future__ import annotations

import os
from dataclasses import asdict

import numpy as np

from bench.pipeline_config import Scenario
from bench.report import hdr_summary
from pipeline.runtime.agent import (MARK_CANCEL_SENT, MARK_DECIDED, MARK_INTENT_SYNCED, MARK_ORDER_READ,
                                    MARK_ORDER_SENT, MARK_VENUE_ACK, mark_code)
from pipeline.trading.messages import Kind, OrderOrigin

LABEL_KEYS = ("hold", "lean_buy", "lean_sell", "emergency")  # the fast stage's label counters


def _fast(event: int) -> tuple[int, int]:
    """Tap codes of a mark for orders decided on a SIGNAL: origin FAST (lean, EMERGENCY) and RISK (reprice)."""
    return mark_code(event, OrderOrigin.FAST), mark_code(event, OrderOrigin.RISK)


#: (key, label, process, tap code(s))
STAGES = [
    ("book", "frame received -> BOOK written (feed)", "feed", Kind.BOOK),
    ("features", "-> FEATURES written (features)", "features", Kind.FEATURES),
    ("signal", "-> SIGNAL written (fast)", "fast", Kind.SIGNAL),
    ("decision", "-> order decision, fast path (risk wrote the ORDER)", "risk", _fast(MARK_DECIDED)),
    ("order_read", "-> new order read by the sender, fast path", "sender", _fast(MARK_ORDER_READ)),
    ("order_sent", "-> order request sent, fast path (sender)", "sender", _fast(MARK_ORDER_SENT)),
    ("intent_synced", "-> its journal intent fsync'd (after the send, on the journal's thread), fast path", "sender",
     _fast(MARK_INTENT_SYNCED)),
    ("cancel_sent", "-> cancel request sent, fast path (EMERGENCY, reprice)", "sender", _fast(MARK_CANCEL_SENT)),
    ("venue_ack", "-> venue ack read, fast path (sender)", "sender", _fast(MARK_VENUE_ACK)),
    ("instruction", "-> INSTRUCTION written (llm; slow path)", "llm", Kind.INSTRUCTION),
    ("llm_order_sent", "-> order request sent, LLM path (sender)", "sender", mark_code(MARK_ORDER_SENT, OrderOrigin.LLM)),
]


def label_counts(st0: dict, st1: dict) -> dict:
    """The fast stage's SIGNAL labels over the window (its counters at the end less those at the start)."""
    f0 = next((p["stage"] for p in st0["processes"] if p["name"] == "fast"), {}) or {}
    f1 = next((p["stage"] for p in st1["processes"] if p["name"] == "fast"), {}) or {}
    return {k: int(f1.get(k, 0)) - int(f0.get(k, 0)) for k in LABEL_KEYS}


def per_message(wakeups: int | None, msgs_in: int) -> float | None:
    """Wake-ups per message read (None without a count or a message): about 1 when a stage wakes for
    every message, well under 1 when it reads several per wake-up (batching), over 1 when it wakes for
    other things too (keep-warm, heartbeats, back-off sleeps)."""
    if wakeups is None or msgs_in <= 0:
        return None
    return round(wakeups / msgs_in, 3)


def summarize(sc: Scenario, taps: dict, st0: dict, st1: dict, cpu0: dict, cpu1: dict, seconds: float,
              load, model: dict | None = None, wakeups: dict | None = None) -> dict:
    """The figures of one run of ``sc``: ``taps`` (process -> its latency tap records inside the window),
    the status ``st0`` / ``st1`` and CPU ticks ``cpu0`` / ``cpu1`` at the window's ends, its length in
    ``seconds``, the load average, ``model`` (``model_info``; None: only its kind is known) and
    ``wakeups`` (process -> its threads' voluntary context switches over the window; None: not counted)."""
    stages = {}
    for key, label, proc, code in STAGES:
        rec = taps.get(proc)
        codes = code if isinstance(code, tuple) else (code,)
        if rec is None:
            lat = np.zeros(0, np.int64)
        else:
            lat = rec[np.isin(rec["code"], codes)]["lat_ns"]  # (sig_llm's copy is a SIGNAL_CTX: not counted)
        stages[key] = {"label": label, **hdr_summary(lat)}
    hz = os.sysconf("SC_CLK_TCK")
    procs0 = {p["name"]: p for p in st0["processes"]}
    procs = {}
    for p in st1["processes"]:
        n = p["name"]
        procs[n] = {"cpu_pct": round(100.0 * (cpu1.get(n, 0) - cpu0.get(n, 0)) / hz / seconds, 1),
                    "core": p["core"], "wait": p["wait"], "restarts": p["restarts"],
                    "drops": p["drops"] - procs0.get(n, {}).get("drops", 0),
                    "msgs_in": p["msgs_in"] - procs0.get(n, {}).get("msgs_in", 0),
                    "msgs_out": p["msgs_out"] - procs0.get(n, {}).get("msgs_out", 0),
                    "stage": p["stage"]}
        w = (wakeups or {}).get(n)
        procs[n]["wakeups"] = w
        procs[n]["wakeups_per_msg"] = per_message(w, procs[n]["msgs_in"])
    rings0 = {r["name"]: r for r in st0["rings"]}
    ring_drops = {r["name"]: r["dropped"] - rings0.get(r["name"], {}).get("dropped", 0) for r in st1["rings"]}
    books = stages["book"].get("n", 0)
    model = dict(model or {"kind": sc.model, "path": "?", "sha256": "?", "label": sc.model})
    model["fast_stage_sha256_8"] = (procs.get("fast", {}).get("stage") or {}).get("model")  # the stage's own word
    model["fast_provider"] = (procs.get("fast", {}).get("stage") or {}).get("provider")  # CPU / CUDA, its own word
    return {"scenario": asdict(sc), "model": model, "labels": label_counts(st0, st1),
            "seconds": round(seconds, 3), "books_per_s": round(books / seconds, 1),
            "stages": stages, "processes": procs, "ring_drops": ring_drops,
            "drops_total": int(sum(ring_drops.values())), "load_avg": load, "plan": st1.get("plan")}
