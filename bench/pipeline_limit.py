"""The limit this machine allows the fast path, measured in the pipeline bench's own run.

``limit = sum of the stages' hot compute + hops x the wake-up floor``, per fast-path figure:

- SIGNAL written: the feed (decode + book update + BOOK into a ring), the feature stage (features of a
  BOOK), the fast stage (its ONNX call with IO binding); 2 hops (md, feat);
- order request sent: those, the risk gateway's decision on a LEAN SIGNAL (order approved and its
  ORDER payload encoded), the sender's request build (the place body and its signature) and intent
  write (page cache, no fsync); 4 hops (md, feat, sig_risk, orders). Not counted: the socket send
  itself and each stage's own loop around these calls (ring read, tap, counters), so the limit is a
  floor under what the pipeline could reach.

The frame's receive stamp is the origin of every figure, so the venue -> feed socket wake-up is not
a hop here. Each compute figure is the p50 of an in-process loop on this machine (``measure_compute``:
the code paths of ``bench.feed``, ``bench.fast`` and the gateway / REST builders), the floor is the
p50 of ``bench.ring``'s "floor: semaphore wake" row (a u64 store + sem post to a parked process;
``measure_floor``), both measured before the pipeline's window in the same run. ``limits`` (pure)
turns them and a scenario's stage figures into rows: measured p50, limit, ratio.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench import report

#: fast-path figure -> (its stages' compute, in order; hops between processes on the way)
PATHS = {
    "signal": (("feed", "features", "fast"), 2),
    "order_sent": (("feed", "features", "fast", "risk", "sender"), 4),
}

#: what each compute key times (the report's words)
COMPUTE_LABELS = {
    "feed": "feed: books15 decode + book update + BOOK into a ring (msgspec)",
    "features": "features: one FEATURES record from a BOOK",
    "fast": "fast: the classifier's ONNX call (CPU, IO binding, batch 1)",
    "risk": "risk: decision on a LEAN SIGNAL, order approved, ORDER encoded",
    "sender": "sender: place request built (body + HMAC signature), its intent written (no fsync)",
}


# ------------------------------------------------------------------------------------- pure
def limit_us(compute_p50_us: dict, stages: tuple, hops: int, floor_p50_us: float) -> float:
    """``sum(compute_p50_us[s] for s in stages) + hops * floor_p50_us``.

    Raises:
        KeyError: a stage without a compute figure.
        ValueError: a negative figure or hop count.
    """
    parts = [float(compute_p50_us[s]) for s in stages]
    if hops < 0 or floor_p50_us < 0 or any(p < 0 for p in parts):
        raise ValueError(f"figures and hops must be >= 0: compute {parts}, hops {hops}, floor {floor_p50_us}")
    return sum(parts) + hops * float(floor_p50_us)


def limits(stages: dict, compute_p50_us: dict, floor_p50_us: float) -> dict:
    """Per fast-path figure of ``PATHS`` that ``stages`` (a scenario's ``stages``: key -> {"p50_us",
    "n", ...}) measured: {"p50_us", "limit_us", "ratio", "formula"}; a figure with no sample gets
    its limit and None for p50 and ratio.

    Raises:
        KeyError / ValueError: as ``limit_us``.
    """
    out = {}
    for key, (names, hops) in PATHS.items():
        lim = limit_us(compute_p50_us, names, hops, floor_p50_us)
        st = stages.get(key) or {}
        p50 = st.get("p50_us") if st.get("n") else None
        parts = " + ".join(f"{s} {compute_p50_us[s]:.1f}" for s in names)
        out[key] = {"p50_us": p50, "limit_us": round(lim, 2),
                    "ratio": None if p50 is None or lim <= 0 else round(p50 / lim, 2),
                    "formula": f"{parts} + {hops} x floor {floor_p50_us:.1f} = {lim:.1f} µs"}
    return out


def limit_line(key: str, row: dict) -> str:
    """One report line: "<figure> p50 X µs; limit = ... = L µs; ratio R"."""
    p50 = "no sample" if row["p50_us"] is None else f"p50 {row['p50_us']:.0f} µs"
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
    return f"{key}: {p50}; limit = sum of compute + hops x floor = {row['formula']}; ratio {ratio}"


# ------------------------------------------------------------------------------------- measured
def _risk_lean_ns(n: int) -> np.ndarray:
    """The gateway's decision on a LEAN_BUY SIGNAL with quoting on (``lean_lots = 1``, IOC): one
    approved order and its ORDER payload; the order is cancelled (untimed) before the next."""
    from pipeline.runtime.config import InstrumentConfig
    from pipeline.trading.messages import EXEC_DTYPE, SIGNAL_DTYPE, ExecType, Label
    from pipeline.trading.risk import OrderApproved, RiskGateway, RiskLimits, encode_order

    t = [10**12]
    lim = RiskLimits(lean_lots=1, tif="IOC", max_orders_per_s=1_000_000, max_notional_per_min=1e15,
                     min_notional=0.0, max_open_orders=1_000)
    gw = RiskGateway([InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001)], lim, lambda: t[0])
    gw.start()
    ex = np.zeros(1, EXEC_DTYPE)
    ex["exec_type"] = ExecType.SYNC_DONE
    gw.on_exec(ex.tobytes())
    sig = np.zeros(1, SIGNAL_DTYPE)
    sig["instrument_id"], sig["ref_spread"] = 1, 0.2
    pc = time.perf_counter_ns
    ns = np.zeros(n, np.int64)
    for i in range(n):
        t[0] += 20_000_000
        sig["label"] = Label.LEAN_BUY if i % 2 == 0 else Label.LEAN_SELL
        sig["feature_seq"], sig["ref_mid"] = i + 1, 50_000.0 + (i % 5) * 0.1
        payload = sig.tobytes()
        t0 = pc()
        events = gw.on_signal(payload, t[0])
        orders = [encode_order(e) for e in events if e.cmd]
        ns[i] = pc() - t0
        ok = [e for e in events if isinstance(e, OrderApproved)]
        if len(ok) != 1 or len(orders) != 1:
            raise RuntimeError(f"risk lean iteration {i}: expected one approved order, got {events}")
        ex["exec_type"], ex["instrument_id"], ex["order_id"] = ExecType.CANCELLED, 1, ok[0].order_id
        gw.on_exec(ex.tobytes())
    return ns


def _sender_build_ns(n: int) -> np.ndarray:
    """``rest.build_place`` (what the sender signs and sends for a new order) with a throwaway key, and
    its body appended to a temporary file without an fsync (the journal's intent write, page cache only)."""
    import tempfile

    from pipeline.trading.bitget import rest
    from pipeline.trading.bitget.signing import Credentials

    creds = Credentials("bench-key", "bench-secret", "bench-pass")
    pc = time.perf_counter_ns
    ns = np.zeros(n, np.int64)
    with tempfile.TemporaryFile() as f:
        fd = f.fileno()
        for i in range(n):
            t0 = pc()
            req = rest.build_place(creds, 1_700_000_000_000 + i, "BTCUSDT", 1, 1, 50_000.0 + (i % 9) * 0.1, 0.0001,
                                   f"bench{i}", 0.1, 0.0001)
            os.write(fd, req.body.encode() + b"\n")
            ns[i] = pc() - t0
    return ns


def measure_compute(model: Path, passes: int = 5) -> dict:
    """Each stage's hot compute on this machine, in this process: key -> ``report.percentiles_us``
    (p50_us, p99_us, n) plus its label (``COMPUTE_LABELS``).

    Raises:
        RuntimeError: a loop that did not do what it times (the gateway approved no order).
    """
    from bench.fast import bench_classifier, bench_features, book_payloads
    from bench.feed import bench_bitget, books15_synthetic
    from pipeline.trading.features import FEATURES_LEN, FeatureState, compute

    frames = books15_synthetic(400)
    payloads = book_payloads(frames)
    rows = np.zeros((len(payloads), FEATURES_LEN), np.float32)
    st = FeatureState(1, 0.1)
    for i, b in enumerate(payloads):
        compute(st, b, rows[i], i + 1)
    n = 400 * passes
    out = {"feed": bench_bitget(frames, passes)["ours_msgspec"], "features": bench_features(payloads, passes),
           "fast": bench_classifier(model, rows, passes),
           "risk": report.percentiles_us(_risk_lean_ns(n)[n // 10:]),
           "sender": report.percentiles_us(_sender_build_ns(n)[n // 10:])}
    return {k: {**v, "label": COMPUTE_LABELS[k]} for k, v in out.items()}


def measure_floor(count: int = 3_000, rate: int = 1_000) -> dict:
    """``bench.ring``'s "floor: semaphore wake" row, paced at ``rate`` for ``count`` messages (after
    a tenth as warm-up): p50_us, p99_us, n.

    Raises:
        RuntimeError: the run failed (its error).
    """
    import multiprocessing as mp

    from bench.ring import QUICK, TRANSPORTS, measure

    floor = next(t for t in TRANSPORTS if t.name == "floor: semaphore wake")
    plan = replace(QUICK, rate=rate, warmup=max(count // 10, 100), latency_count=count)
    res = measure(floor, plan, mp.get_context("spawn"), lambda line: None)
    if res.errors or not res.latency_count:
        raise RuntimeError(f"the wake-up floor was not measured: {res.errors}")
    return {"p50_us": res.p50_us, "p99_us": res.p99_us, "n": res.latency_count,
            "label": "floor: u64 store + sem post to a parked process (bench.ring)"}
