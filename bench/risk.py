"""Risk decision micro-benchmark: ``python -m bench.risk``.

Times the pure decision of ``pipeline.risk.RiskGateway`` per order with ``time.perf_counter_ns``: one
48-byte INSTRUCTION payload in (decode, ttl, planner: delta, limit price, one child), every pre-trade
check (all pass: the longest path), the OrderApproved event and its 48-byte ORDER payload out. Between
timed iterations (untimed) a SIGNAL moves the reference and a CANCELLED report closes the order, so the
open-order book stays small; the injected clock advances 10 ms an iteration. Also times a denied order
(max position) and a SIGNAL without working orders.

Writes ``bench/results/<UTC timestamp>-risk/results.json`` and ``report.md``; prints the table.
Target: decision per order p99 <= 20 µs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench import report
from pipeline.config import InstrumentConfig
from pipeline.messages import EXEC_DTYPE, INSTRUCTION_DTYPE, SIGNAL_DTYPE, Action, ExecType
from pipeline.risk import OrderApproved, OrderDenied, RiskGateway, RiskLimits, encode_order

TARGET_P99_US = 20.0
INSTRUMENTS = [InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001),
               InstrumentConfig(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001)]


class Clock:
    def __init__(self):
        self.t = 10**12

    def __call__(self):
        return self.t


def _sig(mid: float, seq: int) -> bytes:
    r = np.zeros(1, SIGNAL_DTYPE)
    r["instrument_id"], r["feature_seq"], r["ref_mid"], r["ref_spread"] = 1, seq, mid, 0.2
    return r.tobytes()


def _instr(seq: int, issued: int, target: int) -> bytes:
    r = np.zeros(1, INSTRUCTION_DTYPE)
    r["instrument_id"], r["action"], r["target_lots"], r["signal_seq"] = 1, Action.BUY, target, seq
    r["issued_ns"], r["ttl_ms"], r["instruction_id"] = issued, 500, seq
    return r.tobytes()


def _cancelled(oid: int) -> bytes:
    r = np.zeros(1, EXEC_DTYPE)
    r["instrument_id"], r["exec_type"], r["order_id"] = 1, ExecType.CANCELLED, oid
    return r.tobytes()


def _gateway(clock, **over):
    lim = RiskLimits(**{"max_orders_per_s": 1_000, "max_notional_per_min": 1e12, "min_notional": 0.0,
                        "max_open_orders": 1_000, **over})
    gw = RiskGateway(INSTRUMENTS, lim, clock)
    gw.start()
    sync = np.zeros(1, EXEC_DTYPE)
    sync["exec_type"] = ExecType.SYNC_DONE
    gw.on_exec(sync.tobytes())
    gw.on_signal(_sig(50_000.0, 1), clock())
    return gw


def bench_approved(n: int) -> dict:
    clock = Clock()
    gw = _gateway(clock)
    rng = np.random.default_rng(1)
    mids = 50_000.0 + np.cumsum(rng.normal(0, 0.5, n)).round(1)
    pc = time.perf_counter_ns
    ns = np.zeros(n, np.int64)
    for i in range(n):
        clock.t += 10_000_000
        gw.on_signal(_sig(float(mids[i]), i + 2), clock.t)
        payload = _instr(i + 2, clock.t, 1)
        t0 = pc()
        events = gw.on_instruction(payload)
        orders = [encode_order(e) for e in events if e.cmd]
        ns[i] = pc() - t0
        ok = [e for e in events if isinstance(e, OrderApproved)]
        if len(ok) != 1 or len(orders) != 1:
            raise RuntimeError(f"iteration {i}: expected one approved order, got {events}")
        gw.on_exec(_cancelled(ok[0].order_id))
    return report.percentiles_us(ns[n // 10:])  # the first tenth: warm-up


def bench_denied(n: int) -> dict:
    clock = Clock()
    gw = _gateway(clock, max_position_lots=1.0)
    pc = time.perf_counter_ns
    ns = np.zeros(n, np.int64)
    for i in range(n):
        clock.t += 10_000_000
        gw.on_signal(_sig(50_000.0, i + 2), clock.t)
        payload = _instr(i + 2, clock.t, 5)
        t0 = pc()
        events = gw.on_instruction(payload)
        ns[i] = pc() - t0
        if not any(isinstance(e, OrderDenied) for e in events):
            raise RuntimeError(f"iteration {i}: expected a denial, got {events}")
    return report.percentiles_us(ns[n // 10:])


def bench_signal(n: int) -> dict:
    clock = Clock()
    gw = _gateway(clock)
    payloads = [_sig(50_000.0 + (i % 7) * 0.1, i + 2) for i in range(n)]
    pc = time.perf_counter_ns
    ns = np.zeros(n, np.int64)
    for i in range(n):
        clock.t += 1_000_000
        t0 = pc()
        gw.on_signal(payloads[i], clock.t)
        ns[i] = pc() - t0
    return report.percentiles_us(ns[n // 10:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    ap.add_argument("--iterations", type=int, default=None, help="per measurement (default 50 000; 5 000 with --quick)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    n = args.iterations or (5_000 if args.quick else 50_000)
    out_dir, machine = report.start("risk", args.out)
    res = {"approved": bench_approved(n), "denied": bench_denied(n), "signal": bench_signal(n)}
    ap_ = res["approved"]
    met = ap_["p99_us"] <= TARGET_P99_US
    results = {"machine": machine, "target_p99_us": TARGET_P99_US, "iterations": n, "target_met": met, **res}
    verdict = f"target p99 <= {TARGET_P99_US:g} µs: {'MET' if met else 'MISSED'}"
    rows = [("risk decision per order: INSTRUCTION -> planner -> every check -> ORDER payload (approved)", ap_, verdict),
            ("risk decision, denied (max position)", res["denied"], ""),
            ("SIGNAL update (reference, sigma), no working orders", res["signal"], "")]
    md = [f"# Risk decision benchmark {machine['date']}", "", report.machine_line(machine),
          f"{n} iterations each (first tenth dropped as warm-up); time.perf_counter_ns around the pure call.", "",
          "| measured | p50 | p99 | verdict |", "|---|---|---|---|"]
    md += [f"| {a} | {r['p50_us']:.2f} µs | {r['p99_us']:.2f} µs | {v} |" for a, r, v in rows]
    report.write(out_dir, results, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
