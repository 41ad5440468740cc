"""Ring benchmark: one-way latency, burst throughput and idle CPU of ``ringbuf`` against its peers.

Usage::

    .venv/bin/python -m bench.ring              # full run (about 2 minutes); make bench-ring
    .venv/bin/python -m bench.ring --quick      # ~10x smaller counts: a smoke run
    .venv/bin/python -m bench.ring --out DIR    # write into DIR instead of bench/results/<UTC>-ring/

Every measurement runs a producer and a consumer in two fresh processes (multiprocessing 'spawn'),
the producer pinned to core 0 and the consumer to core 1 (``os.sched_setaffinity``):

- paced one-way latency: the producer sends one message every ``1/rate`` s, stamping each with
  ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, one clock for all processes) just before the send
  call; the consumer records ``now - stamp`` into an HdrHistogram (1 ns .. 10 s, 3 digits) as soon
  as the receive call returns. The producer waits for its next slot spinning on
  ``time.perf_counter_ns``; where the transport sends from a helper thread in the producer
  (``multiprocessing.Queue``'s feeder, zmq's I/O thread, both on the producer's core) it calls
  ``os.sched_yield()`` in that spin so the thread gets the GIL / the core (a pure spin costs
  Queue a ~3 ms p50 and zmq a ~3.6 ms p99). A producer that falls behind (preempted) restarts its
  schedule rather than sending a catch-up burst.
- burst throughput: the producer sends as fast as it can; msg/s = measured messages / (consumer's
  receipt of the final STOP message - the first measured message's stamp); the median of
  ``burst_repeats`` runs.
- idle CPU: no traffic for ``idle_s``; the consumer's CPU time (getrusage) over that wall time.
- floors (measured, no ring and no payload): a stamp handed over through one shared u64 mailbox,
  polled by a Python loop, or announced by a POSIX semaphore to a parked consumer: the least any
  busy-polled / any blocking transport can cost on this machine.

Warm-up messages go first in every run and are not measured. Each run gets a new ring / queue /
socket, removed in a ``finally``, and its child processes are killed and reaped in a ``finally``.

Messages are 80 bytes on every transport. The ring: its 16-byte slot header (ts_origin_ns, kind,
length, CRC-32C) + a 64-byte payload, in 128-byte slots. The peers: an 80-byte ``bytes`` frame, the
same 16-byte header layout (CRC field 0, nothing verified) + the same 64-byte payload, plus each
peer's own framing: ``multiprocessing.Queue`` pickles the bytes (+~20 B) behind a 4-byte length;
``Pipe.send_bytes`` adds a 4-byte length; zmq a 2-byte ZMTP frame header; a POSIX message queue none.

Results: ``results.json`` (every figure, the machine, the run plan), ``report.md`` (the table printed
to stdout), ``latency.png`` (percentile curves). Targets are checked against the measured figures;
the "naive busy-polled ring" row is quoted from the original design brief (not in this repository), not measured.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import posix_ipc
from hdrh.histogram import HdrHistogram

from bench.ring_ends import (CONSUMER_CORE, FULL, MESSAGE_BYTES, MQ_DEPTH, PRODUCER_CORE, QUICK, SLOT_SIZE, Plan, Spec,
                             child_main, floor_consumer, floor_producer, open_mq, open_pipe, open_queue, open_zmq,
                             peer_consumer, peer_producer, ring_consumer, ring_producer)
from bench.ring_report import Result, contended, cpu_account, machine_info, write_outputs
from ringbuf import Ring

RESULTS_ROOT = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------------- channels (parent side)
@dataclass
class Channel:
    """One run's transport instance: what each child gets, and how the parent tears it down."""

    producer_arg: Any
    consumer_arg: Any
    close: Callable[[], None]
    stats: Callable[[], dict] | None = None


def ring_channel(ctx, tag: str, capacity: int) -> Channel:
    name = f"bench-ring-{os.getpid()}-{tag}"
    ring = Ring.create(name, slot_size=SLOT_SIZE, capacity=capacity, full_policy="backpressure")

    def close() -> None:
        try:
            ring.close()
        finally:
            Ring.unlink(name)

    def stats() -> dict:
        s = ring.stats()
        keys = ("capacity", "written", "read", "dropped", "full_events", "crc_errors", "wakeups", "missed_wakeups")
        return {k: getattr(s, k) for k in keys}

    return Channel(name, name, close, stats)


def queue_channel(ctx, tag: str, capacity: int) -> Channel:
    q = ctx.Queue()
    return Channel((open_queue, q), (open_queue, q), lambda: (q.close(), q.cancel_join_thread()))


def pipe_channel(ctx, tag: str, capacity: int) -> Channel:
    r, w = ctx.Pipe(duplex=False)
    return Channel((open_pipe, w), (open_pipe, r), lambda: (r.close(), w.close()))


def zmq_channel(ctx, tag: str, capacity: int) -> Channel:
    tmp = tempfile.mkdtemp(prefix=f"bench-zmq-{os.getpid()}-")
    endpoint = f"ipc://{tmp}/{tag}.sock"
    return Channel((open_zmq, endpoint), (open_zmq, endpoint), lambda: shutil.rmtree(tmp, ignore_errors=True))


def mq_channel(ctx, tag: str, capacity: int) -> Channel:
    name = f"/bench-mq-{os.getpid()}-{tag}"
    posix_ipc.MessageQueue(name, posix_ipc.O_CREX, mode=0o600, max_messages=MQ_DEPTH, max_message_size=MESSAGE_BYTES).close()

    def close() -> None:
        try:
            posix_ipc.unlink_message_queue(name)
        except posix_ipc.ExistentialError:
            pass

    return Channel((open_mq, name), (open_mq, name), close)


def floor_channel(ctx, tag: str, capacity: int) -> Channel:
    name = f"/bench-floor-{os.getpid()}-{tag}"
    posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=4096).close_fd()
    try:
        posix_ipc.Semaphore(name + ".wake", posix_ipc.O_CREX, mode=0o600, initial_value=0).close()
    except BaseException:
        posix_ipc.unlink_shared_memory(name)
        raise
    return Channel(name, name, lambda: _unlink_floor(name))


def _unlink_floor(name: str) -> None:
    for unlink, n in ((posix_ipc.unlink_shared_memory, name), (posix_ipc.unlink_semaphore, name + ".wake")):
        try:
            unlink(n)
        except posix_ipc.ExistentialError:
            pass


# --------------------------------------------------------------------------------- the transports
@dataclass(frozen=True)
class Transport:
    name: str
    api: str
    channel: Callable[[Any, str, int], Channel]
    producer: Callable[[Any, Spec, Any], dict]
    consumer: Callable[[Any, Spec, Any], dict]
    burst: int  # messages in the full throughput run (0: no throughput run)
    latency: bool = True
    idle: bool = False  # also measure the consumer's idle CPU
    read: str = "spin"
    write: str = "single"
    pace: str = "spin"


TRANSPORTS: tuple[Transport, ...] = (
    Transport("ring busy-spin", "try_write / try_read spin", ring_channel, ring_producer, ring_consumer, 2_000_000, idle=True),
    Transport("ring blocking", "try_write / try_read, Reader.wait when empty", ring_channel, ring_producer, ring_consumer,
              2_000_000, idle=True, read="blocking"),
    Transport("ring batch-256", "try_write_batch(256) / try_read_batch(256) spin", ring_channel, ring_producer, ring_consumer,
              4_000_000, latency=False, read="batch", write="batch"),
    Transport("multiprocessing.Queue", "put / get (pickled bytes)", queue_channel, peer_producer, peer_consumer, 300_000,
              pace="yield"),
    Transport("multiprocessing.Pipe", "send_bytes / recv_bytes", pipe_channel, peer_producer, peer_consumer, 500_000),
    Transport("pyzmq PUSH/PULL ipc", "send / recv, ipc:// in a temp dir", zmq_channel, peer_producer, peer_consumer, 500_000,
              pace="yield"),
    Transport("posix_ipc.MessageQueue", f"blocking send / receive, {MQ_DEPTH} deep", mq_channel, peer_producer, peer_consumer, 300_000),
    Transport("floor: spin on a shm word", "u64 stores / Python loop polling a u64 (no ring, no payload; measured)", floor_channel,
              floor_producer, floor_consumer, 0),
    Transport("floor: semaphore wake", "u64 stores + sem post / parked sem.acquire (no ring, no payload; measured)", floor_channel,
              floor_producer, floor_consumer, 0, read="blocking"),
)


# ---------------------------------------------------------------------------------- orchestration
class BenchError(Exception):
    """A run that did not complete: a child failed or died, or it timed out."""


def run_pair(ctx, t: Transport, spec: Spec, tag: str, capacity: int, timeout_s: float) -> tuple[dict, dict, dict | None]:
    """One run: a fresh channel, consumer then producer started; returns both reports and the
    ring's counters. Children are killed and reaped, and the channel removed, whatever happens."""
    chan = t.channel(ctx, tag, capacity)
    try:
        ready, results = ctx.Event(), ctx.Queue()
        procs = {
            role: ctx.Process(target=child_main, args=(fn, role, arg, spec, core, ready, results), name=f"bench-{role}", daemon=True)
            for role, fn, arg, core in (
                ("consumer", t.consumer, chan.consumer_arg, CONSUMER_CORE),
                ("producer", t.producer, chan.producer_arg, PRODUCER_CORE),
            )
        }
        started = []
        try:
            for p in procs.values():
                p.start()
                started.append(p)
            got: dict[str, dict] = {}
            deadline = time.monotonic() + timeout_s
            while len(got) < 2:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"timed out after {timeout_s:.0f} s (got {sorted(got)})")
                try:
                    out = results.get(timeout=min(left, 1.0))
                except queue.Empty:
                    dead = [f"{r} exit {p.exitcode}" for r, p in procs.items() if r not in got and p.exitcode not in (None, 0)]
                    if dead:
                        raise BenchError("child died: " + ", ".join(dead)) from None
                    continue
                if "error" in out:
                    raise BenchError(f"{out['role']} failed:\n{out['error']}")
                got[out["role"]] = out
            for p in started:
                p.join(10)
            return got["producer"], got["consumer"], chan.stats() if chan.stats else None
        finally:
            for p in started:
                if p.is_alive():
                    p.kill()
                p.join(10)
            results.close()
            results.cancel_join_thread()
    finally:
        chan.close()


def _latency_figures(encoded: bytes) -> dict:
    h = HdrHistogram.decode(encoded)
    us = lambda ns: ns / 1000.0  # noqa: E731
    pcts = [100.0 * (1 - 10 ** (-k / 10)) for k in range(0, 51)]  # 0 % .. 99.999 %
    return {
        "p50_us": us(h.get_value_at_percentile(50)),
        "p99_us": us(h.get_value_at_percentile(99)),
        "p999_us": us(h.get_value_at_percentile(99.9)),
        "max_us": us(h.get_max_value()),
        "mean_us": us(h.get_mean_value()),
        "latency_count": h.get_total_count(),
        "curve": [(p, us(h.get_value_at_percentile(p))) for p in pcts],
    }


def measure(t: Transport, plan: Plan, ctx, log: Callable[[str], None]) -> Result:
    """All runs for one transport: paced latency, burst throughput, and idle CPU where asked."""
    res = Result(t.name, t.api)
    base = Spec(mode="paced", read=t.read, write=t.write, batch=plan.batch, pace=t.pace)
    slug = "".join(c if c.isalnum() else "-" for c in t.name.lower())
    runs = []
    if t.latency:
        runs.append(("paced", replace(base, warmup=plan.warmup, count=plan.latency_count, interval_ns=1_000_000_000 // plan.rate),
                     plan.latency_capacity, 3 * (plan.warmup + plan.latency_count) / plan.rate + 30))
    count = max(1000, int(t.burst * plan.burst_scale))
    burst = replace(base, mode="burst", warmup=plan.burst_warmup, count=count)
    runs += [(f"burst{i + 1}", burst, plan.burst_capacity, count / 20_000 + 30) for i in range(plan.burst_repeats if t.burst else 0)]
    if t.idle:
        runs.append(("idle", replace(base, mode="idle", idle_s=plan.idle_s), plan.latency_capacity, plan.idle_s + 30))
    for mode, spec, capacity, timeout_s in runs:
        t0 = time.monotonic()
        try:
            prod, cons, stats = run_pair(ctx, t, spec, f"{slug}-{mode}", capacity, timeout_s)
        except BenchError as exc:
            res.errors.append(f"{mode}: {exc}")
            log(f"  {t.name:24s} {mode:5s} FAILED: {str(exc).splitlines()[0]}")
            continue
        if stats is not None:
            res.ring_stats[mode] = stats
        cpu_pct = 100.0 * cons["cpu_s"] / cons["wall_s"] if cons["wall_s"] > 0 else None
        if mode != "idle" and cons["count"] != spec.count:
            res.errors.append(f"{mode}: consumer counted {cons['count']} of {spec.count} messages")
        if mode == "paced" and cons["hist"]:
            for k, v in _latency_figures(cons["hist"]).items():
                setattr(res, k, v)
            res.paced_cpu_pct = cpu_pct
            detail = f"p50 {res.p50_us:.2f} µs  p99 {res.p99_us:.2f} µs  max {res.max_us:.0f} µs"
        elif mode.startswith("burst"):
            res.burst_count = cons["count"]
            seconds = (cons["end_ns"] - cons["first_ts"]) / 1e9
            res.msg_per_s_runs.append(cons["count"] / seconds)
            res.msg_per_s = statistics.median(res.msg_per_s_runs)
            detail = f"{res.msg_per_s_runs[-1] / 1e6:.3f} M msg/s over {seconds:.2f} s"
        else:
            res.idle_cpu_pct = cpu_pct
            detail = f"consumer CPU {cpu_pct:.2f} % of a core over {cons['wall_s']:.1f} s idle"
        log(f"  {t.name:24s} {mode:5s} {detail}  ({time.monotonic() - t0:.1f} s)")
    return res


def remove_stale() -> list[str]:
    """Remove rings and message queues that a bench killed by SIGKILL left behind (their pid is gone)."""
    removed = []
    for folder, prefix in ((Path("/dev/shm"), "bench-ring-"), (Path("/dev/shm"), "bench-floor-"), (Path("/dev/mqueue"), "bench-mq-")):
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            pid = entry.name[len(prefix):].split("-", 1)[0]
            if not entry.name.startswith(prefix) or not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            if prefix == "bench-ring-":
                Ring.unlink(entry.name)
            elif prefix == "bench-floor-":
                _unlink_floor("/" + entry.name)
            else:
                try:
                    posix_ipc.unlink_message_queue("/" + entry.name)
                except posix_ipc.ExistentialError:
                    pass
            removed.append(entry.name)
    return removed


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: children reaped, rings unlinked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ring", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~10x smaller counts (a smoke run)")
    ap.add_argument("--out", type=Path, help="output directory (default: bench/results/<UTC>-ring/)")
    ap.add_argument("--rate", type=int, help="paced messages per second (default 20000)")
    ap.add_argument("--only", help="comma-separated transport names to run (default: all)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.rate:
        plan = replace(plan, rate=args.rate)
    selected = [t for t in TRANSPORTS if not args.only or t.name in {s.strip() for s in args.only.split(",")}]
    if not selected:
        ap.error(f"--only matched nothing; transports: {', '.join(t.name for t in TRANSPORTS)}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = args.out or RESULTS_ROOT / f"{stamp}-ring"
    out_dir.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    for name in remove_stale():
        log(f"removed stale {name} (its bench process is gone)")
    machine = machine_info()
    if len(machine["usable_cores"]) < 2:
        log(f"warning: only one usable core ({machine['usable_cores']}); producer and consumer share it")
    log(f"bench.ring ({'quick' if args.quick else 'full'}) -> {out_dir}")
    ctx = mp.get_context("spawn")
    t0, acct0 = time.monotonic(), cpu_account()
    results = {t.name: measure(t, plan, ctx, log) for t in selected}
    acct1 = cpu_account()
    machine["loadavg_end"] = list(os.getloadavg())
    machine["bench_wall_s"] = round(time.monotonic() - t0, 1)
    machine["other_cpu_s"] = round((acct1["machine_busy_s"] - acct0["machine_busy_s"]) - (acct1["own_s"] - acct0["own_s"]), 1)
    machine["steal_s"] = round(acct1["steal_s"] - acct0["steal_s"], 1)
    table, tlines, errors = write_outputs(out_dir, plan, machine, results, args.quick, log)
    print(table)
    print()
    print("\n".join(tlines))
    if contended(machine):
        print("\n" + contended(machine))
    if errors:
        print("\nerrors:\n" + "\n".join(errors))
    log(f"wrote {out_dir}/results.json, report.md, latency.png in {machine['bench_wall_s']} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
