"""Busy-spin and a process's other threads: parked, spinning bare and spinning with the GIL yielded, A/B in
interleaved windows. ``python -m bench.spin_ab [--rounds 10] [--window-s 2] [--quick] [--out DIR]``

Why: a run with a core per stage, every stage busy-spinning, was no faster than two shared cores. A
busy-spinning runner thread keeps the GIL; a second thread of its process (the feed's network thread,
which in ``decode_in = "network"`` does all the feed's work; a sender's journal thread; the venue's
server thread) that comes back from a blocking call (epoll, recv, fsync) waits for it until its switch
interval runs out and CPython forces a hand-over: ``sys.setswitchinterval`` (the feed sets 100 µs; 5 ms
by default) per hand-over, one or more per frame. The fix, ``ringbuf.idle.YieldSpin``: the busy-spin
idle pass is one ``os.sched_yield()``, made with the GIL released.

Four measurements, each in interleaved windows of one run (the first window of each is a warm-up, not
counted; the arms' windows rotate through every order, so none always follows another):

1. **feed**: the paper venue (pre-encoded source, 1,000 book updates/s, one instrument; its own core with
   the sink, the supervisor and this process) -> the feed (``bench.spin_stages.PhasedFeedAgent``: the real
   ``procs.feed.BitgetFeedAgent`` on the other core, ``decode_in = "network"``, keep-warm every 200 µs
   as a spinning bench stage has it) -> a parked sink (``BookSink``). The feed's idle is switched
   between ``park`` (``wait = "blocking"``: the agent's ``wait_for_work``), ``spin`` (the bare spin the
   runner ran before: ``ringbuf.BusySpin``) and ``yield`` (what the runner's ``busy-spin`` runs now:
   ``choose_wait``'s strategy). The hop timed per BOOK: the venue's send of the frame (``StampedVenueAgent``
   stamps each books15 frame as its server thread sends it) -> the sink reading the BOOK; matched by the
   frame's timestamp. Beside it, the feed's own receive stamp (``ts_origin_ns``) -> the sink: it is taken
   on the network thread once it holds the GIL again, so it hides the wait this measurement is about.
2. **venue**: a second pipeline run, the venue alone on the other core and its idle switched (its main
   thread's, as under ``wait = "busy-spin"``; ``park``: its own ``wait_for_work``), the feed parked with
   the sink: per depth frame, the wall-clock time of its send less its timestamp (the market time it
   was due, ms), less the run's least such value (a constant offset: the market clock starts before
   the server).
3. **ring**: the single-threaded busy-spin hop (a producer process writes a message every 0.5-1.5 ms
   into a ring; this process, on the other core, polls it as the runner's duty cycle does): ``spin``,
   ``yield`` (the runner's busy-spin, which alone in its process does not yield: what it costs a stage
   with no other thread) and ``always`` (a yield on every pass: what it would cost).
4. **thread**: the mechanism alone: a thread of this process blocked in ``recv`` on a datagram socket
   (another process sends a stamp every 0.5-1.5 ms) while the main thread parks, spins bare or spins
   yielding; switch interval 100 µs (the feed's) and 5 ms (CPython's default: the sender, the venue).

STATISTIC AND VERDICT RULE, fixed on 2026-12-01 before any full run of this measurement (only --quick
smoke runs, INCONCLUSIVE by rule, came before):

* per window, the p50 of the hop (µs); per arm, the median of its windows' p50s;
* d(A, B) = median(A) - median(B) with a 95 % percentile-bootstrap interval over windows (each arm's
  windows resampled, 2,000 resamples, seed 1);
* A/A control: the ``spin`` arm's windows split alternately in two halves, the same interval; which
  half comes first is arbitrary, so it counts both ways round: [-m, m], m its largest end in size;
* feed (judged): d(spin, yield): YIELD FASTER when the interval lies above m (so above 0 and clear of
  the A/A interval), YIELD SLOWER when below -m, else INCONCLUSIVE (``bench.report.ab_verdict``);
  d(park, yield) the same way, reported as a second verdict; the venue the same;
* ring (judged): non-inferiority with a margin of 10 % of the spin arm's median: NOT WORSE when the
  interval of d(spin, yield) lies above -margin and m is under the margin (the machine resolves it),
  WORSE when it lies below -margin and -m, else INCONCLUSIVE; d(spin, always) the same way, reported;
* thread: d(spin, yield) per switch interval with the feed's three-valued rule;
* fewer than ``MIN_WINDOWS`` windows an arm (a window with fewer than 20 samples is left out):
  INCONCLUSIVE. Quick mode (``--quick``) checks that everything runs and is always INCONCLUSIVE.

The A/A clauses above were amended on 2026-12-07 (issue #36), before any report was re-judged by them:
until then a verdict needed only the A/A interval to hold 0, however close it came to d's.

Writes ``bench/results/<UTC stamp>-spin-ab/results.json`` and ``report.md``; exit status 0 when the feed
verdict is YIELD FASTER, 1 YIELD SLOWER, 3 INCONCLUSIVE.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench import report
from bench.pipeline_config import ENCODED_LOOP_MS, KEY, REPO
from bench.spin_hops import ARMS, measure_ring, measure_thread, window_order, window_p50s

AA_ARM = "spin"
MIN_WINDOWS = 5
BOOTSTRAP = 2_000
RING_MARGIN = 0.10  # the ring's non-inferiority margin: this share of the spin arm's median hop
SWITCH_INTERVALS_S = (100e-6, 5e-3)


# ------------------------------------------------------------------------------------- pure
def median_diff_ci(a: list[float], b: list[float], n: int = BOOTSTRAP) -> tuple[float, float, float]:
    """(median(a) - median(b), the 95 % percentile-bootstrap interval's ends) of windows' p50s, the
    windows resampled (``bench.report.window_diff_ci``, each window one value)."""
    return report.window_diff_ci([[v] for v in a], [[v] for v in b], n)


def judge(p50s: dict[str, list[float]], a: str, b: str, *, margin_share: float | None = None) -> dict:
    """The rule of the module docstring for d(``a``, ``b``) over windows' p50s (µs): three-valued
    (``margin_share`` None: YIELD FASTER / YIELD SLOWER / INCONCLUSIVE) or non-inferiority with a margin
    of ``margin_share`` x median(``a``) (NOT WORSE / WORSE / INCONCLUSIVE)."""
    out = {"windows": {k: len(v) for k, v in p50s.items()},
           "median_us": {k: round(float(np.median(v)), 2) if v else None for k, v in p50s.items()}}
    aa = p50s.get(AA_ARM, [])
    if min(len(p50s[a]), len(p50s[b]), len(aa)) < MIN_WINDOWS:
        return {**out, "verdict": "INCONCLUSIVE", "why": f"fewer than {MIN_WINDOWS} windows an arm"}
    d, lo, hi = median_diff_ci(p50s[a], p50s[b])
    aa_d, aa_lo, aa_hi = median_diff_ci(aa[0::2], aa[1::2])
    out |= {"d_us": round(d, 2), "ci_us": [round(lo, 2), round(hi, 2)], "aa_d_us": round(aa_d, 2),
            "aa_ci_us": [round(aa_lo, 2), round(aa_hi, 2)]}
    if margin_share is not None:
        m = margin_share * float(np.median(p50s[a]))
        out["margin_us"] = round(m, 2)
        return {**out, **dict(zip(("verdict", "why"), non_inferior((lo, hi), (aa_lo, aa_hi), m, f"d({a}, {b})")))}
    verdict, why = report.ab_verdict((lo, hi), (aa_lo, aa_hi), (f"{b.upper()} FASTER", f"{b.upper()} SLOWER"),
                                     f"d({a}, {b})")
    return {**out, "verdict": verdict, "why": why}


def non_inferior(ci: tuple[float, float], aa_ci: tuple[float, float], margin: float, what: str) -> tuple[str, str]:
    """The ring's non-inferiority rule (module docstring): with m the A/A interval's largest end in size,
    NOT WORSE when ``ci`` lies above -``margin`` and m < ``margin``; WORSE when it lies below
    -max(margin, m); else INCONCLUSIVE. Returns (verdict, why)."""
    (lo, hi), (aa_lo, aa_hi) = ci, aa_ci
    m = max(abs(aa_lo), abs(aa_hi))
    if lo > -margin and m < margin:
        return "NOT WORSE", f"the interval of {what} lies above -{margin:.2f} µs and |A/A| <= {m:.2f} µs within it"
    if hi < -max(margin, m):
        return "WORSE", f"the interval of {what} lies below -{margin:.2f} µs and the A/A interval"
    if m >= margin:
        return "INCONCLUSIVE", f"the A/A interval reaches {m:.2f} µs, past the margin of {margin:.2f} µs"
    return "INCONCLUSIVE", f"the interval of {what} holds -{margin:.2f} µs"


def match_sends(book_ts_ms: np.ndarray, origin_ns: np.ndarray, send_ts_ms: np.ndarray,
                send_ns: np.ndarray) -> np.ndarray:
    """Per BOOK, when the venue sent its frame: the latest send of a frame with the BOOK's timestamp
    (ms) at or before the feed stamped it (``origin_ns``); -1 where none matches."""
    sends: dict[int, list[int]] = {}
    for ts, t in zip(send_ts_ms.tolist(), send_ns.tolist()):
        sends.setdefault(ts, []).append(t)
    out = np.full(book_ts_ms.size, -1, np.int64)
    for i, (ts, o) in enumerate(zip(book_ts_ms.tolist(), origin_ns.tolist())):
        best = -1
        for t in sends.get(ts, ()):
            if best < t <= o:
                best = t
        out[i] = best
    return out


# ------------------------------------------------------------------------------------- measured: the feed
def config_text(tmp: Path, prefix: str, phase_file: Path, cores: tuple[int, int], phased: str = "feed") -> str:
    """The run's config: the stamped venue (pre-encoded, 1,000 updates/s), the feed (keep-warm its own;
    its arm in ``phase_file``) and the parked sink; the ``phased`` stage (feed or venue) alone on
    ``cores[1]``, the other two on ``cores[0]``."""
    run, logs = tmp / "run", tmp / "logs"
    feed_core, venue_core = (cores[1], cores[0]) if phased == "feed" else (cores[0], cores[1])
    venue = {"source": "encoded", "encoded_units": ENCODED_LOOP_MS, "encoded_channels": ["books15", "trade"],
             "port": 0, "seed": 1, "step_ms": 1, "speed": 1.0, "port_file": str(run / "venue.port"),
             "rest_port_file": str(run / "venue.rest.port"), "key_file": str(KEY)}
    parts = [ct.supervisor(shm_prefix=prefix, run_dir=str(run), log_dir=str(logs), control_ring="control",
                           poll_interval_ms=10, heartbeat_interval_ms=100, stop_grace_ms=3000),
             ct.ring("control", 16, 64, "backpressure"), ct.ring("md", 512, 16384, "drop"),
             ct.process("venue", "bench.spin_stages:StampedVenueAgent", f"core = {venue_core}\n", wait="busy-spin",
                        params=venue),
             ct.process("feed", "bench.spin_stages:PhasedFeedAgent", f"core = {feed_core}\nkeep_warm_us = 0\n",
                        outputs=["md"], wait="busy-spin",
                        params={"port_file": str(run / "venue.port"), "channels": ["books15", "trade"],
                                "phase_file": str(phase_file), "warm_us": 200}),
             ct.process("sink", "bench.spin_stages:BookSink", f"core = {cores[0]}\n", inputs=["md"], wait="blocking",
                        params={"out": str(tmp / "sink.npy")}),
             ct.BTCUSDT]
    return ct.blocks(*parts)


class _Pipeline:
    """The run's supervisor (``python -m pipeline up``), always brought down with its processes and
    segments removed."""

    def __init__(self, cfg_path: Path):
        from pipeline.runtime.config import load_config

        self.cfg_path, self.cfg = cfg_path, load_config(cfg_path)
        self.out = cfg_path.with_suffix(".out")
        with open(self.out, "wb") as out:
            self.up = subprocess.Popen([sys.executable, "-m", "pipeline", "--config", str(cfg_path), "up",
                                        "--status-every", "0"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)

    def stage(self, name: str) -> dict:
        from pipeline.runtime.control import request

        st = request(self.cfg, {"cmd": "status"}, timeout_ms=5_000)["status"]
        return next(p for p in st["processes"] if p["name"] == name)

    def wait(self, predicate, timeout_s: float, what: str) -> None:
        """Poll ``predicate`` until true. Raises TimeoutError naming ``what``; RuntimeError when the
        supervisor exited."""
        from pipeline.runtime.errors import ControlError

        deadline = time.monotonic() + timeout_s
        while True:
            if self.up.poll() is not None:
                raise RuntimeError(f"the supervisor exited ({self.up.returncode}) waiting for {what}: "
                                   f"{self.out.read_text()[-2000:]}")
            try:
                if predicate():
                    return
            except (ControlError, StopIteration, KeyError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
            time.sleep(0.02)

    def close(self) -> None:
        from pipeline.runtime.supervisor import clean_stale

        try:
            if self.up.poll() is None:
                subprocess.run([sys.executable, "-m", "pipeline", "--config", str(self.cfg_path), "down"], cwd=REPO,
                               capture_output=True, timeout=60)
                try:
                    self.up.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.up.pid, 9)
                    self.up.wait()
        finally:
            clean_stale(self.cfg)


def measure_pipeline(rounds: int, window_s: float, cores: tuple[int, int], phased: str = "feed") -> dict:
    """One pipeline run with the windows of ``window_order(ARMS, rounds)``, the ``phased`` stage's (feed or
    venue) idle switched: per arm its spans, the sink's BOOKs with their venue send stamps, and every
    depth frame's send stamps (monotonic, the frame's ts in ms, wall clock).

    Raises:
        RuntimeError / TimeoutError: the pipeline did not come up or the feed did not switch.
    """
    spans: dict[str, list[tuple[int, int]]] = {k: [] for k in ARMS}
    old_aff = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory(prefix="bench-spin-") as d:
        tmp = Path(d)
        feed_phase = tmp / "phase"
        feed_phase.write_text("park")
        phase = feed_phase if phased == "feed" else tmp / "run" / "venue.phase"
        cfg = tmp / "spin.toml"
        cfg.write_text(config_text(tmp, f"sa{os.getpid() % 100000}", feed_phase, cores, phased))
        try:
            p = _Pipeline(cfg)
            try:
                p.wait(lambda: all(p.stage(n)["state"] == "RUNNING" for n in ("venue", "feed", "sink")), 90,
                       "every process RUNNING")
                for tid in [0] + [int(t) for t in os.listdir(f"/proc/{p.up.pid}/task")]:
                    os.sched_setaffinity(tid, {cores[0]})  # this process, the supervisor: off the phased stage's core
                p.wait(lambda: p.stage("sink")["stage"].get("books", 0) > 0, 30, "the first BOOK at the sink")
                for arm in window_order(ARMS, rounds):
                    want = ARMS[0] if arm == "warm-up" else arm
                    phase.write_text(want)
                    p.wait(lambda: p.stage(phased)["stage"].get("phase") == want, 10, f"the {phased}'s {want} phase")
                    t0 = time.monotonic_ns()
                    time.sleep(window_s)
                    if arm != "warm-up":
                        spans[arm].append((t0, time.monotonic_ns()))
            finally:
                p.close()
        finally:
            os.sched_setaffinity(0, old_aff)
        books = np.load(tmp / "sink.npy")
        sends = np.load(tmp / "run" / "venue.sends.npy")
    sent = match_sends(books[:, 2], books[:, 1], sends[:, 1], sends[:, 0])
    ok = sent >= 0
    return {"spans": spans, "read_ns": books[ok, 0], "full_ns": books[ok, 0] - sent[ok],
            "stamp_ns": books[ok, 0] - books[ok, 1], "books": int(books.shape[0]), "matched": int(ok.sum()),
            "sends": sends}


def venue_figures(m: dict) -> dict:
    """The venue measurement's figures: per depth frame, its send's wall-clock time minus its timestamp,
    less the run's least such value (the market clock starts before the server: a constant offset);
    windows by the send's monotonic stamp."""
    sends = m["sends"]
    late = sends[:, 2] - sends[:, 1] * 1_000_000
    late = late - late.min() if late.size else late
    p50s = {k: window_p50s(late, sends[:, 0], m["spans"][k]) for k in ARMS}
    return {"frames": int(sends.shape[0]), "window_p50_us": p50s, "spin_vs_yield": judge(p50s, "spin", "yield"),
            "park_vs_yield": judge(p50s, "park", "yield")}


def feed_figures(m: dict) -> dict:
    """The judged and the reported figures of the feed measurement."""
    at, spans = m["read_ns"], m["spans"]
    full = {k: window_p50s(m["full_ns"], at, spans[k]) for k in ARMS}
    stamp = {k: window_p50s(m["stamp_ns"], at, spans[k]) for k in ARMS}
    pooled = {}
    for k in ARMS:
        mask = np.zeros(at.size, bool)
        for a, b in spans[k]:
            mask |= (at >= a) & (at < b)
        p50, p99 = report.hdr_us(m["full_ns"][mask], (50.0, 99.0))
        s50, s99 = report.hdr_us(m["stamp_ns"][mask], (50.0, 99.0))
        pooled[k] = {"n": int(mask.sum()), "full_p50_us": round(p50, 1), "full_p99_us": round(p99, 1),
                     "stamp_p50_us": round(s50, 1), "stamp_p99_us": round(s99, 1)}
    return {"books": m["books"], "matched": m["matched"], "pooled": pooled, "window_p50_us": full,
            "stamp_window_p50_us": stamp, "spin_vs_yield": judge(full, "spin", "yield"),
            "park_vs_yield": judge(full, "park", "yield"), "stamp_spin_vs_yield": judge(stamp, "spin", "yield")}


# ------------------------------------------------------------------------------------- report
def _verdict_line(what: str, j: dict) -> str:
    return (f"{what}: d = {j.get('d_us', '-')} µs, 95 % interval {j.get('ci_us', '-')}; A/A {j.get('aa_d_us', '-')} µs, "
            f"interval {j.get('aa_ci_us', '-')}: **{j['verdict']}** ({j['why']}).")


def markdown(machine: dict, args, cores: tuple[int, int], f: dict, v: dict, ring: dict, thread: dict) -> list[str]:
    md = [f"# Busy-spin and the GIL: parked, spinning bare, spinning yielding (A/B) {machine['date']}", "",
          report.machine_line(machine),
          f"Each measurement one run of {args.rounds} rounds of interleaved windows an arm after a warm-up "
          f"({args.window_s:g} s in the pipeline runs, {args.window_s / 2:g} s ring, {args.window_s / 4:g} s thread). "
          f"Pipeline: the paper venue (pre-encoded, 1,000 updates/s) -> the feed -> a parked sink; the supervisor "
          f"and this process on core {cores[0]}. Rule fixed before the run (bench/spin_ab.py).", "",
          f"## Feed: venue send -> BOOK read by the sink, the feed's idle switched (the feed alone on core {cores[1]})",
          "",
          "| arm | windows | BOOKs | window p50s, median µs | pooled p50 / p99 µs | feed stamp -> sink: pooled p50 / p99 µs |",
          "|---|---|---|---|---|---|"]
    sv = f["spin_vs_yield"]
    for k in ARMS:
        pl = f["pooled"][k]
        med = sv["median_us"].get(k)
        md.append(f"| {k} | {len(f['window_p50_us'][k])} | {pl['n']:,} | {med if med is not None else '-'} | "
                  f"{pl['full_p50_us']:.0f} / {pl['full_p99_us']:.0f} | {pl['stamp_p50_us']:.0f} / {pl['stamp_p99_us']:.0f} |")
    md += ["", f"{f['matched']:,} of {f['books']:,} BOOKs matched to the venue's send of their frame.", "",
           _verdict_line("d(spin, yield), judged", sv), "", _verdict_line("d(park, yield)", f["park_vs_yield"]), "",
           _verdict_line("d(spin, yield) on the feed's own stamp (hides the wait for the GIL before the stamp)",
                         f["stamp_spin_vs_yield"]), "",
           "## Venue: a depth frame's timestamp -> its send, the venue's idle switched", "",
           f"A second run: the venue alone on core {cores[1]}, the feed (parked) and the sink on core {cores[0]}; "
           f"{v['frames']:,} frames; each figure less the run's least (a constant offset).", "",
           "| arm | windows | window p50s, median µs |", "|---|---|---|"]
    md += [f"| {k} | {len(v['window_p50_us'][k])} | {v['spin_vs_yield']['median_us'].get(k)} |" for k in ARMS]
    md += ["", _verdict_line("d(spin, yield), judged", v["spin_vs_yield"]), "",
           _verdict_line("d(park, yield)", v["park_vs_yield"]), "",
           "## Ring hop, one thread (busy-spin's cost where no other thread waits)", "",
           f"Windows' p50 median: spin (bare) {ring['median_us'].get('spin')} µs, yield (the runner's busy-spin, "
           f"alone in its process) {ring['median_us'].get('yield')} µs, always (a yield every pass) "
           f"{ring['median_us'].get('always')} µs.", "",
           _verdict_line(f"d(spin, yield), judged, non-inferiority margin {RING_MARGIN:.0%} of spin", ring), "",
           _verdict_line("d(spin, always), the same rule", ring["always"]), "",
           "## Thread hop: a thread blocked in recv while the main thread parks / spins / yields", "",
           "| switch interval | park µs | spin µs | yield µs | d(spin, yield) |", "|---|---|---|---|---|"]
    for key, j in thread.items():
        m = j["median_us"]
        md.append(f"| {key} | {m.get('park')} | {m.get('spin')} | {m.get('yield')} | {j.get('d_us', '-')} "
                  f"{j.get('ci_us', '')}: {j['verdict']} |")
    if args.quick:
        md += ["", "Quick mode: a check that everything runs; every verdict INCONCLUSIVE by rule."]
    return md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spin_ab", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="rounds of every arm's window (default 10)")
    ap.add_argument("--window-s", type=float, default=2.0, help="seconds a window (default 2)")
    ap.add_argument("--quick", action="store_true", help="1 round of 0.5 s windows: a check that it runs")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results/<stamp>-spin-ab)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.window_s = 1, 0.5
    allowed = sorted(os.sched_getaffinity(0))
    cores = (allowed[0], allowed[-1])  # one core only: both on it (said in the report's machine line)
    out_dir, machine = report.start("spin-ab", args.out)
    f = feed_figures(measure_pipeline(args.rounds, args.window_s, cores, "feed"))
    v = venue_figures(measure_pipeline(args.rounds, args.window_s, cores, "venue"))
    ring_p50s = measure_ring(args.rounds, args.window_s / 2, cores)
    ring = judge(ring_p50s, "spin", "yield", margin_share=RING_MARGIN)
    ring["always"] = judge(ring_p50s, "spin", "always", margin_share=RING_MARGIN)
    thread = {f"{s * 1e6:g} µs": judge(measure_thread(args.rounds, args.window_s / 4, cores, s), "spin", "yield")
              for s in SWITCH_INTERVALS_S}
    if args.quick:
        for j in (f["spin_vs_yield"], f["park_vs_yield"], f["stamp_spin_vs_yield"], v["spin_vs_yield"],
                  v["park_vs_yield"], ring, ring["always"], *thread.values()):
            j.update(verdict="INCONCLUSIVE", why="quick mode")
    report.write(out_dir, {"machine": machine, "rounds": args.rounds, "window_s": args.window_s, "quick": args.quick,
                           "cores": list(cores), "feed": f, "venue": v, "ring": ring, "thread": thread},
                 markdown(machine, args, cores, f, v, ring, thread))
    return {"YIELD FASTER": 0, "YIELD SLOWER": 1}.get(f["spin_vs_yield"]["verdict"], 3)


if __name__ == "__main__":
    raise SystemExit(main())
