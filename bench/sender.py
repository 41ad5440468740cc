"""The order sender's journal ordering, A/B in one run: ``python -m bench.sender``.

Two order senders run side by side under the supervisor against one paper venue, identical but for
``journal_sync``: ``sender_after`` (``after_send``, the default: the intent written, the request sent,
the fsync later by the group commit) and ``sender_before`` (``before_send``: the intent written and
fsync'd, then the request). Each has its own ``orders`` ring and its own journal in ``--journal-dir``
(the repository's ``run/`` by default: the disk the pipeline's journal is on). A source stage
(``OrderSource`` below) writes NEW orders, ``--rate`` a second in all, alternately to the two rings in
the pattern A B B A (so neither arm is always first after an idle gap): each a one-lot IOC buy far
below the market (it never fills; the venue cancels it at once), stamped with the moment it is
written. Both senders keep their default placement (``auto`` core and wait, the default config's
keep-warm), so they share the machine's cores with the venue and the source exactly alike.

Measured per order from each sender's latency tap: ORDER read -> request sent (the sender's marks
``order_read`` and ``order_sent``, matched by the ORDER's origin stamp), the figure the journal's
ordering changes; ORDER written -> request sent (from the source's stamp: ring hop and wake-up
included); for ``after_send`` also request sent -> intent fsync'd (how long its durability lagged).
The first tenth of each arm is dropped as warm-up.

The statistic and the verdict, fixed before the first run (2026-12-01): d = p50(before) - p50(after)
of ORDER read -> request sent, in µs, with a 95 % percentile-bootstrap interval (2,000 resamples of
each arm's orders, seed 1). Verdict: AFTER FASTER when the interval's lower end is above 0, AFTER
SLOWER when its upper end is below 0, INCONCLUSIVE otherwise (never counted as a win).

Writes ``bench/results/<UTC timestamp>-sender/results.json`` and ``report.md``; prints the table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench import report
from bench.report import median_diff_ci
from pipeline.runtime.agent import Agent
from pipeline.trading.messages import ORDER_STRUCT, Kind, OrderCmd, OrderOrigin, Side, TimeInForce

REPO = Path(__file__).resolve().parents[1]
ARMS = ("after", "before")  # sender_after: journal_sync = "after_send"; sender_before: "before_send"
PATTERN = (0, 1, 1, 0)  # A B B A: which arm gets each order of a group of four


class OrderSource(Agent):
    """Bench source stage: one NEW ORDER every ``1 / rate_per_s`` s (after ``delay_s``), to its outputs
    in the order of ``PATTERN`` (outputs sorted by name): instrument 1, a one-lot IOC buy at ``price``
    (far below the market: never fills), a fresh order id each, stamped with the time it is written."""

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.outs = [ctx.output(name) for name in sorted(ctx.outputs)]
        self.period_ns = int(1e9 / float(ctx.params.get("rate_per_s", 100)))
        self.next_ns = ctx.clock() + int(float(ctx.params.get("delay_s", 2.0)) * 1e9)
        self.price = float(ctx.params.get("price", 1.0))
        self.size = float(ctx.params.get("size", 0.0001))
        self.base = (os.getpid() & 0xFFFF) << 32
        self.n = 0

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now < self.next_ns:
            return 0
        self.next_ns += self.period_ns
        self.n += 1
        out = self.outs[PATTERN[self.n % len(PATTERN)] % len(self.outs)]
        payload = ORDER_STRUCT.pack(1, OrderCmd.NEW, Side.BUY, TimeInForce.IOC, OrderOrigin.FAST, 0, self.base + self.n,
                                    self.price, self.size, self.n, now)
        self.ctx.emit(out, Kind.ORDER, payload, self.ctx.clock())
        return 1

    def wait_for_work(self, timeout_ns: int) -> bool:
        left = min(timeout_ns, self.next_ns - self.ctx.clock())
        if left > 0:
            time.sleep(left / 1e9)
        return True

    def on_close(self) -> None:
        pass


def ab_config(*, prefix: str, tmp: Path, journal_dir: Path, key: Path | str, rate: float, window_us: int) -> str:
    """The run's config: the paper venue, the two senders (each its own orders ring, exec ring and
    journal), the source."""
    run = tmp / "run"
    parts = [ct.supervisor(shm_prefix=prefix, run_dir=str(run), log_dir=str(tmp / "logs"), control_ring="control"),
             ct.ring("control", 16, 64, "backpressure")]
    for arm in ARMS:
        parts += [ct.ring(f"orders_{arm}", 64, 4096, "backpressure"), ct.ring(f"exec_{arm}", 64, 4096, "drop")]
    parts.append(ct.process("venue", "procs.venue:VenueAgent", wait="back-off",
                            params={"port": 0, "seed": 1, "port_file": str(run / "venue.port"),
                                    "rest_port_file": str(run / "venue.rest.port"), "key_file": str(key),
                                    "rate_limit_per_s": 10000.0}))
    for arm in ARMS:
        parts.append(ct.process(f"sender_{arm}", "procs.sender:SenderAgent", report.default_place("sender"),
                                inputs=[f"orders_{arm}"], outputs=[f"exec_{arm}"],
                                params={"input": f"orders_{arm}", "output": f"exec_{arm}",
                                        "venue_port_file": str(run / "venue.rest.port"), "key_file": str(key),
                                        "journal_path": str(journal_dir / f"{prefix}-{arm}.journal"),
                                        "rate_limit_per_s": 10000, "endpoint_rate_scale": 1000.0, "journal_sync": f"{arm}_send",
                                        "sync_window_us": window_us}))
    parts.append(ct.process("source", "bench.sender:OrderSource", outputs=[f"orders_{a}" for a in ARMS],
                            params={"rate_per_s": rate, "delay_s": 3.0}))
    parts.append(ct.BTCUSDT)
    return ct.blocks(*parts)


def matched(rec: np.ndarray, first: int, then: int) -> np.ndarray:
    """Per ORDER: the time from its ``first`` mark to its ``then`` mark (ns), matched by origin stamp;
    in the order they happened. Orders missing either mark are left out."""
    a = rec[rec["code"] == first]
    b = rec[rec["code"] == then]
    at_first = dict(zip((a["at_ns"] - a["lat_ns"]).tolist(), a["at_ns"].tolist()))
    return np.array([at - at_first[o] for o, at in zip((b["at_ns"] - b["lat_ns"]).tolist(), b["at_ns"].tolist())
                     if o in at_first], dtype=np.int64)


def verdict(lo_us: float, hi_us: float) -> str:
    """The rule of the module docstring."""
    return "AFTER FASTER" if lo_us > 0 else "AFTER SLOWER" if hi_us < 0 else "INCONCLUSIVE"


def run_ab(seconds: float, rate: float, journal_dir: Path, window_us: int) -> dict:
    """One run of both arms; per arm its figures (see the module docstring) and its raw path timings."""
    from pipeline.runtime.agent import (LATENCY_DIR_ENV, MARK_INTENT_SYNCED, MARK_ORDER_READ, MARK_ORDER_SENT,
                                        mark_code)

    read, sent, synced = (mark_code(m, OrderOrigin.FAST) for m in (MARK_ORDER_READ, MARK_ORDER_SENT,
                                                                    MARK_INTENT_SYNCED))
    journal_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"bs{os.getpid() % 100000}"
    with tempfile.TemporaryDirectory(prefix="bench-sender-") as tmpname:
        tmp = Path(tmpname)
        (tmp / "lat").mkdir()
        cfg = tmp / "sender.toml"
        cfg.write_text(ab_config(prefix=prefix, tmp=tmp, journal_dir=journal_dir, key=REPO / "secrets" / "paper.json",
                                 rate=rate, window_us=window_us))
        try:
            proc = report.run_pipeline_for(cfg, seconds + 5.0, {**os.environ, LATENCY_DIR_ENV: str(tmp / "lat")})
            recs = {arm: tmp / "lat" / f"sender_{arm}.lat.npy" for arm in ARMS}
            if proc.returncode != 0 or not all(f.exists() for f in recs.values()):
                raise RuntimeError(f"sender A/B run failed (rc {proc.returncode}): {proc.stdout[-1500:]} "
                                   f"{proc.stderr[-1500:]}")
            recs = {arm: np.load(f) for arm, f in recs.items()}
        finally:
            for arm in ARMS:
                (journal_dir / f"{prefix}-{arm}.journal").unlink(missing_ok=True)
    out = {}
    for arm, rec in recs.items():
        path = matched(rec, read, sent)
        path = path[path.size // 10:]
        s = rec[rec["code"] == sent]
        total = s["lat_ns"][s.size // 10:]
        out[arm] = {"read_to_sent": report.percentiles_us(path), "written_to_sent": report.percentiles_us(total),
                    "raw_read_to_sent_ns": path}
        if arm == "after":
            lag = matched(rec, sent, synced)
            lag = lag[lag.size // 10:]
            # an intent fsync'd before its request left (the order waited in the outbox) has no lag
            out[arm]["sent_to_synced"] = {**report.percentiles_us(lag[lag >= 0]),
                                          "synced_before_sent": int((lag < 0).sum())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds (default 30; 4 with --quick)")
    ap.add_argument("--rate", type=float, default=100.0, help="orders a second, both arms together (default 100)")
    ap.add_argument("--sync-window-us", type=int, default=2000, help="the after_send arm's sync_window_us (2000)")
    ap.add_argument("--journal-dir", type=Path, default=REPO / "run", help="where the two journals are written")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    seconds = args.seconds or (4.0 if args.quick else 30.0)
    out_dir, machine = report.start("sender", args.out)
    res = run_ab(seconds, args.rate, args.journal_dir, args.sync_window_us)
    jdir = Path(args.journal_dir).resolve()
    jdir_shown = str(jdir.relative_to(REPO)) if jdir.is_relative_to(REPO) else "a directory outside the repository"
    after, before = res["after"], res["before"]
    d, lo, hi = median_diff_ci(before.pop("raw_read_to_sent_ns"), after.pop("raw_read_to_sent_ns"))
    v = verdict(lo, hi)
    results = {"machine": machine, "seconds": seconds, "rate_per_s": args.rate, "sync_window_us": args.sync_window_us,
               "journal_dir": jdir_shown, "after_send": after, "before_send": before,
               "p50_diff_us": d, "p50_diff_ci95_us": [lo, hi], "verdict": v}
    rows = [("ORDER read -> request sent, after_send (intent written, request, fsync later)", after["read_to_sent"]),
            ("ORDER read -> request sent, before_send (intent written and fsync'd, then request)",
             before["read_to_sent"]),
            ("ORDER written -> request sent, after_send (ring hop and wake-up included)", after["written_to_sent"]),
            ("ORDER written -> request sent, before_send", before["written_to_sent"]),
            (f"after_send: request sent -> intent fsync'd (sync_window_us {args.sync_window_us})",
             after["sent_to_synced"])]
    md = [f"# Order sender: journal fsync before or after the send, A/B in one run, {machine['date']}", "",
          report.machine_line(machine),
          f"{seconds:g} s, {args.rate:g} orders/s in all, alternated A B B A between the two senders; journals in "
          f"{jdir_shown}/; first tenth of each arm dropped.", "",
          "| measured | p50 µs | p99 µs | n |", "|---|---|---|---|"]
    md += [f"| {name} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | {r['n']} |" for name, r in rows]
    md += ["", f"p50(before) - p50(after), ORDER read -> request sent: {d:.1f} µs, 95 % bootstrap interval "
               f"[{lo:.1f}, {hi:.1f}] µs: **{v}** (rule fixed in bench/sender.py's docstring)."]
    report.write(out_dir, results, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
