"""The pipeline bench: the real processes under the supervisor, against the paper venue, measured end to end.

``python -m bench.pipeline`` (``make bench-pipeline``; ``--stress`` is ``make stress``) runs, for each
scenario, the whole graph of ``configs/default.toml`` (venue, feed, features, fast, llm, risk, sender)
as real OS processes with their configured wait strategies and core plan, in a private shm prefix and
run folder, with ``SHMPIPE_LATENCY_DIR`` set so every runner records each output's latency since
``ts_origin_ns`` (the feed's receive stamp of the venue frame) and the stages' marks
(``pipeline.runtime.agent.LatencyTap``). A scenario:

1. writes the config (offered rate -> the venue's synthetic ``step_ms`` / ``speed``; instruments; the
   transport: ring, pyzmq or multiprocessing.Queue), starts ``python -m pipeline up``;
2. waits until every process is RUNNING, lets it warm up, then measures for ``seconds``: status (ring
   drops, stage counters) and each process's CPU time (``/proc/<pid>/stat``) at both ends;
3. stops the pipeline and reads the taps: only records stamped inside the window count.

Per stage (HdrHistogram p50 / p99 / p99.9 / max, count), all from the frame's receive time:
BOOK written (feed), FEATURES written (features), SIGNAL written (fast), order decision (risk wrote an
ORDER; fast-path origin), order request sent / venue ack (sender; fast-path origin), and the slow path:
INSTRUCTION written (llm) and order request sent for LLM-origin orders. Results go to
``bench/results/<UTC>-pipeline/`` (or ``--out``): ``results.json``, ``report.md`` and PNG plots.

Orders on the fast path: the default config's gateway only cancels on the fast path (``lean_lots = 0``).
The bench turns fast-path quoting on (``lean_lots = 1``) with immediate-or-cancel passive orders, so each
LEAN signal can send an order as soon as the previous one is answered (an IOC order priced half the spread
or more from the mid on its own side, ``risk_aversion = 2``, the gateway's most, and 20 ticks further,
``lean_offset_ticks``, so it does not cross and the venue cancels it at once, never filling it: the
position stays at zero and the lean target is never reached), throttled by the gateway to
``max_orders_per_s = 100``: a steady stream of orders whose tick-to-request latency is measured. A live
LLM plan takes precedence over lean quoting, so the bench bounds the hub's ttl to 100-250 ms.

The model: every scenario runs the shipped model (``models/generated/fast.onnx``, made by ``make model``
/ ``python -m pipeline.trading.model``; what ``make up`` runs) unless it says otherwise, and the plans run one
scenario (``ring-1k-hand-set``; ``clean-hand-set`` in the stress plan) with ``write_bench_model``'s
hand-set MLP beside it: the shipped model's graph and size (same inference cost) with weights set by
hand to follow the book imbalance, so that run has LEAN signals at a known rate. The shipped model runs
with the thresholds its model card chose (``fast_params``), as ``make up`` applies them, and LEANs on a
small share of updates by design: the report counts each label per scenario (the fast stage's
counters over the measured window) and names the model file (path and sha256) of every row.
"Fast path" orders are those the gateway decided on a SIGNAL: lean orders and EMERGENCY cancels (origin
FAST) and reprices of working orders after a price move (origin RISK). The
sender writes each intent, sends, then fsyncs on the journal's own thread (group commit), as in
production: the fsync is no longer part of the order-sent latency (its own row follows the send).

Stress (``--stress``): the same pipeline with faults injected at the venue (frame delay, frame drops,
price jumps, disconnects, sequence gaps, bad checksums); per scenario throughput, p99, resyncs, signals,
orders sent, orders denied by reason, and the share of orders that were valid against the venue's book
when they arrived, by the venue's own rule (``VALIDITY_RULE``; its default ``max_away_ticks``).

Stress from a real sequence (``--stress --replay FILE [--speed K]``; ``--replay-itch FILE`` forces ITCH,
``--replay-itch synthetic`` replays the venue's synthetic ITCH session; ``--itch-stocks``): a Bitget capture
or an ITCH BinaryFILE replayed by the venue at its original timestamps times ``K``, clean and under each
documented noise the venue (or, for lost order requests, the bench's lossy order path) can inject into
that source; per scenario throughput, p99 latency and the share of orders the venue accepted, with the
rejections by code, from the sender's journal (``bench.stress_replay``, ``bench.stress_report``,
``bench.stress_proxy``).

Every percentile is HdrHistogram's (``bench.report.hdr_summary``: 1 ns to 60 s, 3 significant digits).

Isolation (``--isolation``; ``--rounds``, ``--window-s``): the same config in one run with the llm stage
running the real default model, switched between generating back to back and stopped in interleaved
windows; the fast path's SIGNAL p50 / p99 under each and their ratio, judged by a rule fixed in
``bench.pipeline_isolation`` (p99 ratio <= 1.5 holds).

The limit: before the first scenario the bench measures, in its own process, each fast-path stage's hot
compute and the wake-up floor per hop (``bench.pipeline_limit``; ``--no-limit`` skips it) and prints
beside each scenario's SIGNAL written and order request sent "limit = sum of compute + hops x floor" and
the ratio of the measured p50 to it.

The venue's source (``--source``): ``synthetic`` (each scenario's default: the market model, stepped live
in the venue) or ``encoded`` (the model's frames built when the venue starts and looped,
``pipeline.venue.sources.EncodedSource``: the venue's CPU stays small). Every scenario reports the venue's
CPU (process CPU seconds over the window's wall time) beside its figures. ``--rates R1,R2,..
--instruments N`` runs only that sweep (source encoded unless ``--source`` says otherwise), with the ring
drops of each ring and whether it kept up (0 drops).

SCHED_FIFO (``--sched fifo``): the hot-path stages switched between SCHED_OTHER and SCHED_FIFO in
interleaved windows of one run, judged by a rule fixed in ``bench.pipeline_sched``. Placement
(``--placement chain``): the hot-path stages on one core against the supervisor's round-robin plan,
the same way (``bench.pipeline_placement``). Keep-warm (``--keep-warm 50,200,1000``): the default
config with and without ``keep_warm_us`` at each offered rate, runs in ABBA order
(``bench.pipeline_keepwarm``).

Modules: ``bench.pipeline_config`` (the scenario and its config), ``bench.pipeline_figures`` (the stages
measured, ``summarize``), ``bench.pipeline_report`` (report.md), ``bench.pipeline_plots`` (the PNGs),
``bench.pipeline_isolation`` (the isolation measurement), ``bench.pipeline_limit`` (the limit),
``bench.pipeline_sched`` (the SCHED_FIFO A/B), ``bench.stress_replay`` / ``bench.stress_report`` /
``bench.stress_proxy`` (the replay stress).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager, ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from bench import report, stress_replay, stress_report
from bench.pipeline_config import MODEL, REPO, Scenario, config_text, model_info, model_path
from bench.pipeline_figures import summarize
from bench.pipeline_limit import limit_line, limits, measure_compute, measure_floor
from bench.pipeline_plots import plots
from bench.pipeline_report import failed_result, labels_line, markdown, model_short
from bench.stress_replay import ReplayError
from pipeline.runtime.agent import LATENCY_DIR_ENV
from pipeline.runtime.config import load_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ControlError


# ------------------------------------------------------------------------------------- one run
def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime (clock ticks)
    except (OSError, IndexError, ValueError):
        return 0


def _wakeups(pid: int) -> int:
    """The voluntary context switches of every thread of ``pid`` so far (each one a sleep that ended in
    a wake-up: a park on a ring or socket, a back-off sleep); 0 when it cannot be read."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches")), 0)
    except (OSError, ValueError):
        return total
    return total


def _status(cfg) -> dict | None:
    try:
        return request(cfg, {"cmd": "status"}, timeout_ms=3_000)["status"]
    except (ControlError, KeyError):
        return None


def _status_for_measure(cfg, what: str, total_s: float = 20.0) -> dict:
    """The status, asked again until ``total_s`` has passed: a supervisor on a core that busy-spinning
    stages starve may take seconds to answer.

    Raises:
        RuntimeError: no answer in time (the scenario is reported as not measured)."""
    deadline = time.monotonic() + total_s
    while True:
        st = _status(cfg)
        if st is not None:
            return st
        if time.monotonic() >= deadline:
            raise RuntimeError(f"no status from the supervisor for {total_s:.0f} s ({what})")



def run_scenario(sc: Scenario, keep_dir: Path | None = None, make_config: Callable = config_text,
                 collect: Callable[[Path], dict] | None = None,
                 side: Callable[[Scenario, Path], AbstractContextManager] | None = None,
                 raw_taps: tuple[str, ...] = ()) -> dict:
    """Run one scenario; its figures (see the module docstring). ``make_config(sc, tmp, prefix)``: its
    config text (default ``config_text``; a replay's: ``bench.stress_replay.replay_config_text``);
    ``collect(tmp)``: more figures read from the scenario's folder once its pipeline is down (merged
    into the result); ``side(sc, tmp)``: a context entered before the pipeline starts and left once it
    is down (the lossy order path, ``bench.stress_proxy``), whose value (a dict of counters, or None)
    becomes the result's ``"side"``. ``raw_taps``: processes whose taps over the measured window go
    into the result's ``"raw"`` (name -> array; not JSON: the caller takes them out).

    Raises:
        RuntimeError: the pipeline did not come up (its output is in the message).
    """
    with tempfile.TemporaryDirectory(prefix="bench-pipe-") as tmpname:
        tmp = Path(tmpname)
        lat_dir = tmp / "lat"
        lat_dir.mkdir()
        prefix = f"bp{os.getpid() % 100000}{int(time.time() * 1000) % 100000}"
        cfg_path = tmp / "bench.toml"
        cfg_path.write_text(make_config(sc, tmp, prefix))
        model = model_info(sc.model, model_path(sc, tmp))
        cfg = load_config(cfg_path)
        env = {**os.environ, LATENCY_DIR_ENV: str(lat_dir), "PYTHONUNBUFFERED": "1"}
        stack = ExitStack()
        side_stats = stack.enter_context(side(sc, tmp)) if side is not None else None
        out = open(tmp / "up.out", "wb")
        up = subprocess.Popen([sys.executable, "-m", "pipeline", "--config", str(cfg_path), "up", "--status-every", "0"],
                              cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        try:
            names = {p.name for p in cfg.processes}
            deadline = time.monotonic() + 90
            st = None
            while time.monotonic() < deadline:
                st = _status(cfg)
                if st and all(p["state"] == "RUNNING" for p in st["processes"]) and {p["name"] for p in st["processes"]} == names:
                    break
                if up.poll() is not None:
                    break
                time.sleep(0.2)
            else:
                st = None
            if not st or up.poll() is not None:
                raise RuntimeError(f"{sc.name}: the pipeline did not come up: {(tmp / 'up.out').read_text()[-3000:]}")
            time.sleep(2.0)  # warm-up: books, first signals, the sender's sync
            st0 = _status_for_measure(cfg, "before the measured window")
            pids = {p["name"]: p["pid"] for p in st0["processes"]}
            cpu0 = {n: _cpu_ticks(pid) for n, pid in pids.items()}
            wake0 = {n: _wakeups(pid) for n, pid in pids.items()}
            t0 = time.monotonic_ns()
            time.sleep(sc.seconds)
            t1 = time.monotonic_ns()
            cpu1 = {n: _cpu_ticks(pid) for n, pid in pids.items()}
            wake1 = {n: _wakeups(pid) for n, pid in pids.items()}
            st1 = _status_for_measure(cfg, "after the measured window")
            load = os.getloadavg()
        finally:
            subprocess.run([sys.executable, "-m", "pipeline", "--config", str(cfg_path), "down"], cwd=REPO,
                           capture_output=True, timeout=60)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
            stack.close()
        if keep_dir is not None:
            keep_dir.mkdir(parents=True, exist_ok=True)
            for f in [*(tmp / "logs").glob("*"), *lat_dir.glob("*.npy"), cfg_path]:
                (keep_dir / f.name).write_bytes(f.read_bytes())
        taps = window_taps(lat_dir, t0, t1)
        extra = collect(tmp) if collect is not None else {}
        extra |= {"raw": {n: taps[n] for n in raw_taps if n in taps}} if raw_taps else {}
        if side is not None:
            extra["side"] = None if side_stats is None else dict(side_stats)
    return {**summarize(sc, taps, st0, st1, cpu0, cpu1, (t1 - t0) / 1e9, load, model,
                        wakeups={n: wake1[n] - wake0[n] for n in wake0}), **extra}


def window_taps(lat_dir: Path, t0: int, t1: int) -> dict[str, np.ndarray]:
    """Each process's latency tap in ``lat_dir`` (``<name>.lat.npy``), the records stamped in [t0, t1]."""
    taps = {}
    for f in lat_dir.glob("*.lat.npy"):
        rec = np.load(f)
        taps[f.name[: -len(".lat.npy")]] = rec[(rec["at_ns"] >= t0) & (rec["at_ns"] <= t1)]
    return taps


def ab_main(args) -> int | None:
    """The A/B runs of ``--sched``, ``--keep-warm``, ``--placement``, ``--isolation``: the exit code of
    the one asked for, or None when none is."""
    source = args.source or "synthetic"
    if args.sched:
        from bench import pipeline_sched

        return pipeline_sched.main(args.rounds, args.window_s, args.out, args.model, source, args.priority)
    if args.keep_warm:
        from bench import pipeline_keepwarm

        rates = [int(r) for r in args.keep_warm.split(",")]
        return pipeline_keepwarm.main(rates, args.seconds or 6.0, args.out, args.model, run_scenario)
    if args.placement:
        from bench import pipeline_placement

        return pipeline_placement.main(args.rounds, args.window_s, args.out, args.model, source)
    if args.isolation:
        from bench import pipeline_isolation

        return pipeline_isolation.main(args.rounds, args.window_s, args.out, args.model)
    return None


def default_plan(quick: bool, seconds: float | None) -> list[Scenario]:
    s = seconds or (3.0 if quick else 5.0)
    if quick:
        return [Scenario("ring-1k", 1_000, seconds=s), Scenario("ring-1k-hand-set", 1_000, seconds=s, model="hand-set"),
                Scenario("zmq-1k", 1_000, transport="zmq", seconds=s),
                Scenario("ring-1k-no-llm", 1_000, seconds=s, llm=False),
                Scenario("ring-1k-no-llm-hand-set", 1_000, seconds=s, llm=False, model="hand-set")]
    # the target scenario (1 instrument at 1,000/s), then the rate sweep over 16 instruments: the paper
    # venue's Python market model tops out near 1,000 updates/s for one instrument (one step per ms), but
    # spreads higher rates over 16 markets up to ~5,000/s; past that the load generator saturates first
    plan = [Scenario("ring-1k", 1_000, seconds=s), Scenario("ring-1k-hand-set", 1_000, seconds=s, model="hand-set")]
    plan += [Scenario(f"sweep-{r}", r, instruments=16, seconds=s) for r in (200, 1_000, 5_000, 10_000, 20_000)]
    plan += [Scenario("zmq-1k", 1_000, transport="zmq", seconds=s),
             Scenario("mpq-1k", 1_000, transport="mp-queue", seconds=s),
             # the peers with orders flowing (the shipped model sends none at this pace): their order-sent ratio
             Scenario("zmq-1k-hand-set", 1_000, transport="zmq", seconds=s, model="hand-set"),
             Scenario("mpq-1k-hand-set", 1_000, transport="mp-queue", seconds=s, model="hand-set")]
    plan += [Scenario("ring-1k-4inst", 1_000, instruments=4, seconds=s)]  # 1 and 16: ring-1k, sweep-1000
    plan += [Scenario("ring-1k-no-llm", 1_000, seconds=s, llm=False)]
    # the order path's two last stages on a core each, spinning and kept warm; the other five share them
    plan += [Scenario("ring-1k-spin", 1_000, seconds=s, spin=("risk", "sender"))]
    plan += [Scenario("ring-1k-no-warm", 1_000, seconds=s, warm=False)]
    plan += [Scenario("ring-1k-exec", 1_000, seconds=s, launcher="exec")]  # every stage a fresh interpreter
    return plan


def rate_plan(rates: list[int], instruments: int, seconds: float, source: str, model: str) -> list[Scenario]:
    """The sweep of ``--rates``: one scenario per offered rate over ``instruments``, the venue's
    ``source``, the fast stage's ``model``; named ``rate-<rate>-<instruments>i-<source>``."""
    return [Scenario(f"rate-{r}-{instruments}i-{source}", r, instruments=instruments, seconds=seconds, source=source,
                     model=model) for r in rates]


def stress_plan(seconds: float | None) -> list[Scenario]:
    """The clean run with the shipped model, then every scenario with the hand-set model: the faults
    are judged by the orders the pipeline sends under them, and the shipped model sends none at this
    pace (its label counts say so in the clean row)."""
    s = seconds or 5.0
    h = "hand-set"
    return [
        Scenario("clean", 1_000, seconds=s),
        Scenario("clean-hand-set", 1_000, seconds=s, model=h),
        Scenario("delay-gauss-25ms", 1_000, seconds=s, model=h, faults={"delay_ms": 25.0, "delay_jitter_ms": 10.0}),
        Scenario("drop-0.1pct", 1_000, seconds=s, model=h, faults={"drop_prob": 0.001}),
        Scenario("drop-5pct", 1_000, seconds=s, model=h, faults={"drop_prob": 0.05}),
        Scenario("price-jumps-3ticks", 1_000, seconds=s, model=h, faults={"jump_prob": 0.01, "jump_ticks": 3}),
        Scenario("disconnect-every-2s", 1_000, seconds=s, model=h, faults={"disconnect_every_s": 2.0}),
        # a lost `books` update: the next checksum no longer matches the feed's book -> invalid, resync
        Scenario("gaps-drop-1pct-books", 1_000, seconds=s, model=h, faults={"drop_prob": 0.01},
                 channels=("books", "trade")),
        # a forward seq jump is legal in v2 (seq "increases", not necessarily by 1): no resync expected
        Scenario("seq-jump-every-1s", 1_000, seconds=s, model=h, faults={"gap_every_s": 1.0},
                 channels=("books", "trade")),
        Scenario("bad-checksum-every-1s", 1_000, seconds=s, model=h, faults={"bad_checksum_every_s": 1.0},
                 channels=("books", "trade")),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two short scenarios (a smoke run)")
    ap.add_argument("--stress", action="store_true", help="the stress scenarios (faults at the venue)")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per scenario")
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-limit", action="store_true",
                    help="skip the limit (each stage's hot compute and the wake-up floor, bench.pipeline_limit)")
    ap.add_argument("--isolation", action="store_true",
                    help="the real model generating against it stopped, interleaved (bench.pipeline_isolation)")
    ap.add_argument("--rounds", type=int, default=20, help="--isolation / --sched: rounds of windows")
    ap.add_argument("--window-s", type=float, default=3.0, help="--isolation / --sched: seconds a window")
    ap.add_argument("--model", default="shipped", choices=["shipped", "hand-set"],
                    help="the fast stage's classifier (bench.pipeline_config.MODELS): --isolation's, --rates'")
    ap.add_argument("--source", default=None, choices=["synthetic", "encoded"],
                    help="the venue's market source for every scenario (default: each scenario's, synthetic)")
    ap.add_argument("--rates", default=None,
                    help="comma-separated offered rates (updates/s): run only this sweep over --instruments")
    ap.add_argument("--instruments", type=int, default=16, help="--rates: instruments the rate is spread over")
    ap.add_argument("--sched", default=None, choices=["fifo"],
                    help="A/B: the hot-path stages under SCHED_FIFO against SCHED_OTHER in interleaved windows of "
                         "one run (bench.pipeline_sched; --rounds, --window-s, --model, --source, --priority)")
    ap.add_argument("--priority", type=int, default=10, help="--sched fifo: the SCHED_FIFO priority (1..99)")
    ap.add_argument("--keep-warm", default=None, metavar="RATES",
                    help="A/B: the default config with and without keep_warm_us at each comma-separated offered "
                         "rate, runs in ABBA order (bench.pipeline_keepwarm; --seconds, --model)")
    ap.add_argument("--placement", default=None, choices=["chain"],
                    help="A/B: the hot-path stages on one core against the supervisor's round-robin plan in "
                         "interleaved windows of one run (bench.pipeline_placement; --rounds, --window-s, --model, "
                         "--source)")
    ap.add_argument("--replay", default=None, metavar="FILE",
                    help="--stress: replay FILE (a Bitget capture or an ITCH BinaryFILE, told apart by content) "
                         "with the documented noise (bench.stress_replay)")
    ap.add_argument("--replay-itch", default=None, metavar="FILE",
                    help="--stress: replay FILE as ITCH ('synthetic': the venue's synthetic session)")
    ap.add_argument("--speed", type=float, default=None,
                    help="--replay / --replay-itch: times the original pace (default 1; the synthetic ITCH session 0.01)")
    ap.add_argument("--itch-stocks", default=None,
                    help="--replay-itch: comma-separated ITCH stocks to trade (default AAPL,MSFT)")
    args = ap.parse_args(argv)
    if args.replay or args.replay_itch:
        if not args.stress:
            ap.error("--replay / --replay-itch go with --stress")
        try:
            return replay_main(args)
        except ReplayError as exc:
            ap.error(str(exc))
    if args.stress and args.source == "encoded":
        ap.error("--stress injects faults into the frames the venue builds: it needs --source synthetic")
    ab = ab_main(args)
    if ab is not None:
        return ab
    out_dir, machine = report.start("stress" if args.stress else "pipeline", args.out)
    plan = stress_plan(args.seconds) if args.stress else default_plan(args.quick, args.seconds)
    if args.rates:
        plan = rate_plan([int(r) for r in args.rates.split(",")], args.instruments, args.seconds or 5.0,
                         args.source or "encoded", args.model)
    elif args.source:
        plan = [replace(s, source=args.source) for s in plan]
    if args.only:
        keep = set(args.only.split(","))
        plan = [s for s in plan if s.name in keep]
    machine["limit"] = limit = None if args.no_limit else measure_limit(MODEL)
    results = [run_and_say(sc, limit) for sc in plan]
    ok = [r for r in results if "error" not in r]
    made = plots(out_dir, ok) if ok else []
    md, summary = markdown(machine, results, args.stress, made)
    report.write(out_dir, {"machine": machine, "results": results, "verdicts": summary}, md)
    return 0


def replay_main(args) -> int:
    """``--stress --replay FILE`` / ``--replay-itch FILE``: ``bench.stress_replay.replay_plan`` (``--only``,
    ``--seconds``, ``--speed``, ``--itch-stocks``), each scenario run with its replay config and the
    sender journal's order outcomes; report.md from ``bench.stress_report.replay_markdown``.

    Raises:
        ReplayError: the file is missing or unreadable, a bad speed (``replay_plan``, ``capture_instruments``).
    """
    path = args.replay_itch or args.replay
    if args.replay_itch:
        kind = stress_replay.ITCH
    elif not Path(path).is_file():
        raise ReplayError(f"replay file {path!r} is not a file")
    else:
        with open(path, "rb") as f:
            kind = stress_replay.detect_kind(f.read(64))
    synthetic = kind == stress_replay.ITCH and path == stress_replay.SYNTHETIC_ITCH
    speed = args.speed if args.speed is not None else (stress_replay.SYNTHETIC_ITCH_SPEED if synthetic else 1.0)
    stocks = ({s: i for i, s in enumerate(args.itch_stocks.split(","), 1)} if args.itch_stocks else None)
    plan = stress_replay.replay_plan(kind, path, speed, args.seconds, stocks)
    if kind == stress_replay.BITGET:
        stress_replay.capture_instruments(path)  # unreadable: an error now, not one per scenario
    if args.only:
        keep = set(args.only.split(","))
        plan = [s for s in plan if s.name in keep]
    out_dir, machine = report.start("stress-replay", args.out)
    machine["replay_speed"] = speed

    def collect(tmp: Path) -> dict:
        journal = tmp / "run" / stress_replay.JOURNAL
        return {"orders": stress_report.order_outcomes(journal.read_bytes() if journal.is_file() else b"")}
    results = [stress_report.annotate(run_and_say(sc, make_config=stress_replay.replay_config_text, collect=collect,
                                                  side=stress_replay.order_path), sc) for sc in plan]
    md = stress_report.replay_markdown(machine, results, kind, path)
    report.write(out_dir, {"machine": machine, "replay": {"kind": kind, "path": path, "speed": speed},
                           "results": results}, md)
    return 0


def measure_limit(model: Path | None) -> dict | None:
    """Each fast-path stage's hot compute (in this process, ``model``'s ONNX call) and the wake-up
    floor per hop, measured now (before any pipeline window), printed; None without a model file.

    Raises:
        RuntimeError: the floor's run failed (``bench.pipeline_limit.measure_floor``)."""
    if model is None or not model.is_file():
        print("-- limit: no model file to time; not computed", flush=True)
        return None
    compute = measure_compute(model)
    floor = measure_floor()
    print("-- limit: hot compute p50 " + ", ".join(f"{k} {v['p50_us']:.1f}" for k, v in compute.items())
          + f" µs; wake-up floor p50 {floor['p50_us']:.1f} µs (p99 {floor['p99_us']:.0f})", flush=True)
    return {"compute": compute, "floor": floor, "model": str(model.name)}


def run_and_say(sc: Scenario, limit: dict | None = None, **run) -> dict:
    """``run_scenario(sc, **run)`` with a line before and after on stdout; a scenario that did not come up
    gives ``failed_result``. With ``limit`` (``measure_limit``) the result gets its ``"limit"`` rows
    (``bench.pipeline_limit.limits``)."""
    print(f"-- {sc.name}: {sc.rate}/s, {sc.instruments} instrument(s), {sc.transport}, {sc.seconds:g} s, "
          f"{sc.model} model, {sc.source} venue", flush=True)
    try:
        res = run_scenario(sc, **run)
    except RuntimeError as exc:
        print(f"   FAILED: {exc}", flush=True)
        return failed_result(sc, str(exc))
    if limit is not None:
        res["limit"] = limits(res["stages"], {k: v["p50_us"] for k, v in limit["compute"].items()},
                              limit["floor"]["p50_us"])
        for key, row in res["limit"].items():
            print(f"   {limit_line(key, row)}", flush=True)
    o = res["stages"]["order_sent"]
    drops = ", ".join(f"{k} {v}" for k, v in res["ring_drops"].items() if v) or "none"
    print(f"   venue CPU {res['processes'].get('venue', {}).get('cpu_pct', '-')} % of a core; ring drops: {drops}",
          flush=True)
    print(f"   {res['books_per_s']:.0f} books/s, drops {res['drops_total']}, order sent p50 "
          f"{o.get('p50_us', float('nan')):.0f} µs p99 {o.get('p99_us', float('nan')):.0f} µs (n {o.get('n', 0)}); "
          f"{model_short(res)}: {labels_line(res)}", flush=True)
    return res


if __name__ == "__main__":
    sys.exit(main())
