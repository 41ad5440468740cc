"""Risk decision micro-benchmark: ``python -m bench.risk``.

Times the pure decision of ``pipeline.trading.risk.RiskGateway`` per order with ``time.perf_counter_ns``: one
48-byte INSTRUCTION payload in (decode, ttl, planner: delta, limit price, one child), every pre-trade
check (all pass: the longest path), the OrderApproved event and its 48-byte ORDER payload out. Between
timed iterations (untimed) a SIGNAL moves the reference and a CANCELLED report closes the order, so the
open-order book stays small; the injected clock advances 10 ms an iteration. Also times a denied order
(max position) and a SIGNAL without working orders.

(b) EMERGENCY in to cancel request sent, through the processes: the paper venue, the risk gateway and
the order sender run as real processes under the supervisor (ring transport), three times: with the
default placement (every process ``auto``: cores shared, blocking waits; risk and sender kept warm
with the default config's ``keep_warm_us``), (b-) the same without keep-warm, and (b') with the risk
gateway and the sender each on a core of their own, busy-spinning and keeping their hot paths warm
(``keep_warm_us = 200``; the venue and the source share those cores). In each, a
source stage (``EmergencySource`` below) writes one EMERGENCY SIGNAL into ``sig_risk`` every
``1 / rate`` s with ``ts_origin_ns`` = the moment it writes it; the gateway answers each with a
CANCEL_ALL (cool-down 0), and the sender's latency tap stamps when the cancel-all request is written
to the venue's socket. The source also stamps when its write has ended (the SIGNAL is in the
gateway's input ring: "EMERGENCY in", what the target counts from); the report gives the latency
from that stamp and from the origin stamp (taken before the write, which a source that wakes every
20 ms does cold: ~20 µs here), matched per SIGNAL (``from_ring``).

(c) the sender's journal: one intent record appended and fsync'd, one every 5 ms, in the run
directory (the disk the pipeline's journal is on): the fsync alone, which the sender now runs after the
send, on the journal's own thread (``journal_sync = "after_send"``).

Writes ``bench/results/<UTC timestamp>-risk/results.json`` and ``report.md``; prints the table.
Targets: decision per order p99 <= 20 µs; EMERGENCY-in to cancel-request-sent p50 <= 100 µs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench import report
from pipeline.runtime.agent import Agent
from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.messages import EXEC_DTYPE, INSTRUCTION_DTYPE, SIGNAL_DTYPE, Action, ExecType
from pipeline.trading.risk import OrderApproved, OrderDenied, RiskGateway, RiskLimits, encode_order

REPO = Path(__file__).resolve().parents[1]
TARGET_P99_US = 20.0
TARGET_EMERGENCY_P50_US = 100.0
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


def bench_journal(n: int, journal_dir: Path, pace_s: float = 0.005) -> dict:
    """(c): the sender's journal: one intent record (as the sender writes before a place request)
    appended and fsync'd, one every ``pace_s`` (an order every few ms), in ``journal_dir`` (the
    repository's run directory by default: the disk the pipeline's journal is on)."""
    from pipeline.trading.journal import Journal

    journal_dir.mkdir(parents=True, exist_ok=True)
    path = journal_dir / f"bench-journal-{os.getpid()}.journal"
    j = Journal(path)
    try:
        j.open()
        ns = np.zeros(n, np.int64)
        pc = time.perf_counter_ns
        for i in range(n):
            time.sleep(pace_s)
            rec = {"t": "intent", "oid": i + 1, "coid": f"c{i + 1}", "iid": 1, "sym": "BTCUSDT", "side": 1, "tif": 3,
                   "px": 50_000.0, "sz": 0.0001, "oseq": i, "ts_ms": int(time.time() * 1000)}
            t0 = pc()
            j.append(rec, sync=True)
            ns[i] = pc() - t0
    finally:
        j.close()
        path.unlink(missing_ok=True)
    return {**report.percentiles_us(ns[n // 10:]), "dir": str(journal_dir)}


SOURCE_WRITTEN = 199  # tap code: the source's own SIGNAL write finished (its latency: the write's duration)


class EmergencySource(Agent):
    """Bench source stage: one EMERGENCY SIGNAL (instrument 1, mid 50,000) every ``1 / rate_per_s``
    seconds into its only output, stamped with the time it is written; also answers nothing else."""

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.out = next(iter(ctx.outputs.values()))
        self.period_ns = int(1e9 / float(ctx.params.get("rate_per_s", 50)))
        self.next_ns = ctx.clock() + int(float(ctx.params.get("delay_s", 1.0)) * 1e9)
        self.seq = 0
        self.rec = np.zeros(1, SIGNAL_DTYPE)
        self.rec["instrument_id"], self.rec["label"], self.rec["ref_mid"], self.rec["ref_spread"] = 1, 3, 50_000.0, 0.1

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now < self.next_ns:
            return 0
        self.next_ns += self.period_ns
        self.seq += 1
        self.rec["feature_seq"] = self.seq
        t = self.ctx.clock()
        self.ctx.emit(self.out, 4, self.rec.tobytes(), t)  # Kind.SIGNAL
        self.ctx.mark(SOURCE_WRITTEN, t)
        return 1

    def wait_for_work(self, timeout_ns: int) -> bool:
        left = min(timeout_ns, self.next_ns - self.ctx.clock())
        if left > 0:
            time.sleep(left / 1e9)
        return True

    def on_close(self) -> None:
        pass


def emergency_config(*, prefix: str, tmp: Path, key: Path | str, rate: float, spin: bool, warm: bool) -> str:
    """The config of (b): the paper venue, the risk gateway (cool-down 0), the sender and the
    ``EmergencySource`` writing ``rate`` EMERGENCY SIGNALs a second; run and log folders under
    ``tmp``; placement as ``bench_emergency`` says."""
    run = tmp / "run"
    return ct.blocks(
        ct.supervisor(shm_prefix=prefix, run_dir=str(run), log_dir=str(tmp / "logs"), control_ring="control"),
        ct.ring("sig_risk", 64, 4096, "drop"), ct.ring("orders", 128, 4096, "backpressure"),
        ct.ring("exec", 128, 4096, "backpressure"), ct.ring("control", 16, 64, "backpressure"),
        ct.process("venue", "procs.venue:VenueAgent", wait="back-off",
                   params={"port": 0, "seed": 1, "port_file": str(run / "venue.port"),
                           "rest_port_file": str(run / "venue.rest.port"), "key_file": str(key),
                           "rate_limit_per_s": 10000.0}),
        ct.process("risk", "procs.risk:RiskAgent", report.placement("risk", 0 if spin else None, warm=warm),
                   inputs=["control", "exec", "sig_risk"], outputs=["orders"],
                   params={"limits": {"emergency_cooldown_ms": 0, "stale_ref_ms": 60000}}),
        ct.process("sender", "procs.sender:SenderAgent", report.placement("sender", 1 if spin else None, warm=warm),
                   inputs=["orders"], outputs=["exec"],
                   params={"venue_port_file": str(run / "venue.rest.port"), "key_file": str(key),
                           "journal_path": str(run / "sender.journal"), "rate_limit_per_s": 10000,
                           "endpoint_rate_scale": 1000.0}),
        ct.process("source", "bench.risk:EmergencySource", outputs=["sig_risk"],
                   params={"rate_per_s": rate, "delay_s": 2.0}),
        ct.BTCUSDT)


def from_ring(sent: np.ndarray, written: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cancel-all request sent (tap records of the sender), matched to its SIGNAL by origin time:
    (latency from the SIGNAL's origin stamp, taken before the source writes it; latency from the
    moment the source's write ended, the SIGNAL in the ring; that write's duration), in ns. A request
    whose SIGNAL's write-end stamp comes after it (the source descheduled between its write and its
    stamp) keeps its latency from origin, an upper bound, in both. Requests without a matching
    SIGNAL are left out."""
    ends = dict(zip((written["at_ns"] - written["lat_ns"]).tolist(), written["at_ns"].tolist()))
    origin = (sent["at_ns"] - sent["lat_ns"]).tolist()
    rows = [(at - o, at - ends[o] if ends[o] <= at else at - o, ends[o] - o)
            for o, at in zip(origin, sent["at_ns"].tolist()) if o in ends]
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return a[:, 0], a[:, 1], a[:, 2]


def bench_emergency(seconds: float, rate: float = 50.0, *, spin: bool = False, warm: bool = True) -> dict:
    """(b): EMERGENCY SIGNAL written -> cancel-all request sent, through venue, risk and sender processes.

    ``spin``: the risk gateway and the sender each pinned to a core of their own (0 and 1) and
    busy-spinning, the venue and the source sharing those cores with ``auto`` placement; otherwise
    every process ``auto`` (cores shared, blocking waits), kept warm as the default config has it
    unless ``warm`` is False."""
    import tempfile

    from pipeline.runtime.agent import LATENCY_DIR_ENV, MARK_CANCEL_SENT, MARK_DECIDED, mark_code
    from pipeline.trading.messages import OrderOrigin

    with tempfile.TemporaryDirectory(prefix="bench-risk-") as tmpname:
        tmp = Path(tmpname)
        (tmp / "lat").mkdir()
        cfg = tmp / "risk.toml"
        cfg.write_text(emergency_config(prefix=f"br{os.getpid() % 100000}", tmp=tmp, key=REPO / "secrets" / "paper.json",
                                        rate=rate, spin=spin, warm=warm))
        env = {**os.environ, LATENCY_DIR_ENV: str(tmp / "lat")}
        proc = report.run_pipeline_for(cfg, seconds + 4.0, env)
        f = tmp / "lat" / "sender.lat.npy"
        if proc.returncode != 0 or not f.exists():
            raise RuntimeError(f"emergency run failed (rc {proc.returncode}): {proc.stdout[-1500:]} {proc.stderr[-1500:]}")
        rec = np.load(f)
        sent = rec[rec["code"] == mark_code(MARK_CANCEL_SENT, OrderOrigin.FAST)]
        risk = np.load(tmp / "lat" / "risk.lat.npy")
        src = np.load(tmp / "lat" / "source.lat.npy")
    lat, in_ring, write = from_ring(sent, src[src["code"] == SOURCE_WRITTEN])
    skip = min(len(lat) // 10, 10)
    nan = {"p50_us": float("nan"), "p99_us": float("nan"), "n": 0}
    out = report.percentiles_us(lat[skip:].tolist()) if len(lat) > skip else dict(nan)
    out["in_ring"] = report.percentiles_us(in_ring[skip:].tolist()) if len(in_ring) > skip else dict(nan)
    out["source_write"] = report.percentiles_us(write[skip:].tolist()) if len(write) > skip else dict(nan)
    dec = risk["lat_ns"][risk["code"] == mark_code(MARK_DECIDED, OrderOrigin.FAST)]
    out["decision_p50_us"] = float(np.percentile(dec, 50) / 1000) if len(dec) else float("nan")
    out.update(seconds=seconds, rate_per_s=rate, spin=spin, warm=warm)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    ap.add_argument("--iterations", type=int, default=None, help="per measurement (default 50 000; 5 000 with --quick)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-processes", action="store_true", help="skip (b), the run through the processes")
    args = ap.parse_args(argv)
    n = args.iterations or (5_000 if args.quick else 50_000)
    out_dir, machine = report.start("risk", args.out)
    res = {"approved": bench_approved(n), "denied": bench_denied(n), "signal": bench_signal(n),
           "journal": bench_journal(100 if args.quick else 400, REPO / "run")}
    if not args.no_processes:
        res["emergency"] = bench_emergency(3.0 if args.quick else 8.0)
        res["emergency_spin"] = bench_emergency(3.0 if args.quick else 8.0, spin=True)
        res["emergency_cold"] = bench_emergency(3.0 if args.quick else 8.0, warm=False)
    ap_ = res["approved"]
    met = ap_["p99_us"] <= TARGET_P99_US
    results = {"machine": machine, "target_p99_us": TARGET_P99_US, "iterations": n, "target_met": met, **res}
    verdict = f"target p99 <= {TARGET_P99_US:g} µs: {'MET' if met else 'MISSED'}"
    rows = [("risk decision per order: INSTRUCTION -> planner -> every check -> ORDER payload (approved)", ap_, verdict),
            ("risk decision, denied (max position)", res["denied"], ""),
            ("SIGNAL update (reference, sigma), no working orders", res["signal"], ""),
            ("(c) sender journal: one intent record appended and fsync'd (one every 5 ms, on the run directory's "
             "disk): the fsync alone (now after the send)", res["journal"], "")]
    md = [f"# Risk decision benchmark {machine['date']}", "", report.machine_line(machine),
          f"{n} iterations each (first tenth dropped as warm-up); time.perf_counter_ns around the pure call.", "",
          "| measured | p50 | p99 | verdict |", "|---|---|---|---|"]
    em, sp = res.get("emergency"), res.get("emergency_spin")
    if em is not None:
        best = min(em["in_ring"]["p50_us"], sp["in_ring"]["p50_us"])
        ok = best <= TARGET_EMERGENCY_P50_US
        results["emergency_target_met"] = ok
        mid = (em["in_ring"]["p50_us"] + sp["in_ring"]["p50_us"]) / 2
        verdict_b = (f"target p50 <= {TARGET_EMERGENCY_P50_US:g} µs from EMERGENCY in: {'MET' if ok else 'MISSED'} "
                     f"(best of the two placements (b), (b'): {best:.0f} µs; their median: {mid:.0f} µs)")
        rows.append((f"(b) EMERGENCY SIGNAL in the gateway's input ring (the source's write ended) -> cancel-all "
                     f"request sent, venue + risk + sender processes, default placement (cores shared, blocking "
                     f"waits, {report.default_place('risk').strip() or 'no keep-warm'}; {em['n']} signals; the gateway wrote the CANCEL_ALL at p50 {em['decision_p50_us']:.0f} µs "
                     f"from origin)", em["in_ring"], ""))
        rows.append((f"(b) the same from the SIGNAL's origin stamp, taken before the source's write (the write took "
                     f"p50 {em['source_write']['p50_us']:.1f} µs)", em, ""))
        cold = res["emergency_cold"]
        results["emergency_cold_over_warm_p50"] = cold["in_ring"]["p50_us"] / em["in_ring"]["p50_us"]
        rows.append((f"(b-) EMERGENCY in -> cancel-all request sent, as (b) without keep-warm ({cold['n']} signals; "
                     f"CANCEL_ALL written at p50 {cold['decision_p50_us']:.0f} µs from origin)", cold["in_ring"],
                     f"{results['emergency_cold_over_warm_p50']:.2f}x (b): what keep-warm saves"))
        rows.append((f"(b') EMERGENCY in -> cancel-all request sent, the risk gateway on core 0 and the sender on core "
                     f"1, each busy-spinning with keep_warm_us = 200 (venue and source share those cores; {sp['n']} "
                     f"signals; CANCEL_ALL written at p50 {sp['decision_p50_us']:.0f} µs from origin)",
                     sp["in_ring"], verdict_b))
        rows.append((f"(b') the same from the SIGNAL's origin stamp (the source's write took p50 "
                     f"{sp['source_write']['p50_us']:.1f} µs)", sp, ""))
    md += [f"| {a} | {r['p50_us']:.2f} µs | {r['p99_us']:.2f} µs | {v} |" for a, r, v in rows]
    report.write(out_dir, results, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
