"""What the ring bench reports (``bench.ring``): a transport's ``Result``, the targets it is checked
against, the quoted reference, the machine and the other work on it during the run, and the
outputs: results.json, report.md (the table also printed) and latency.png."""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import posix_ipc
import zmq

from bench.ring_ends import CONSUMER_CORE, MESSAGE_BYTES, MQ_DEPTH, PAYLOAD_BYTES, PRODUCER_CORE, SLOT_SIZE, Plan

# Other processes' CPU time during the bench above which the results are flagged: 5 % of the cores'
# time (/proc/stat counts by ticks, getrusage exactly: the difference is a few % either way), at least 3 s.
CONTENTION_FRACTION, CONTENTION_MIN_S = 0.05, 3.0
NAIVE_RING = {"p50_us": 1.3, "msg_per_s": 0.82e6}  # quoted from the original design brief, not in this repository ("a plain busy-polled ring")


@dataclass
class Result:
    """Everything measured for one transport (None: not measured)."""

    transport: str
    api: str
    p50_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    latency_count: int = 0
    curve: list[tuple[float, float]] = field(default_factory=list)  # (percentile, µs)
    paced_cpu_pct: float | None = None  # consumer CPU during the paced run, % of a core
    msg_per_s: float | None = None  # median of the throughput runs
    msg_per_s_runs: list[float] = field(default_factory=list)
    burst_count: int = 0  # measured messages per throughput run
    idle_cpu_pct: float | None = None  # consumer CPU with no traffic, % of a core
    ring_stats: dict[str, dict] = field(default_factory=dict)  # run -> ring counters after it
    errors: list[str] = field(default_factory=list)


RING_SPIN, RING_BLOCKING, RING_BATCH = "ring busy-spin", "ring blocking", "ring batch-256"

#: (label, transport, Result field, comparison, bound)
TARGETS = (
    ("busy-spin p50 <= 1.0 µs", RING_SPIN, "p50_us", "<=", 1.0),
    ("busy-spin p99 <= 2.0 µs", RING_SPIN, "p99_us", "<=", 2.0),
    ("single-message >= 1.5 M msg/s", RING_SPIN, "msg_per_s", ">=", 1.5e6),
    ("batch >= 3 M msg/s", RING_BATCH, "msg_per_s", ">=", 3e6),
    ("blocking p50 <= 8 µs", RING_BLOCKING, "p50_us", "<=", 8.0),
    ("blocking idle CPU near zero (<= 1 % of a core)", RING_BLOCKING, "idle_cpu_pct", "<=", 1.0),
)


def machine_info() -> dict:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = sorted(os.sched_getaffinity(0))
    return {
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "producer_core": PRODUCER_CORE if PRODUCER_CORE in usable else usable[PRODUCER_CORE % len(usable)],
        "consumer_core": CONSUMER_CORE if CONSUMER_CORE in usable else usable[CONSUMER_CORE % len(usable)],
        "python": platform.python_version(),
        "python_build": sys.version,
        "kernel": platform.release(),
        "loadavg": list(os.getloadavg()),
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "libzmq": zmq.zmq_version(),
        "pyzmq": zmq.pyzmq_version(),
        "posix_ipc": posix_ipc.VERSION,
        "mq_depth": MQ_DEPTH,
    }


def cpu_account() -> dict:
    """CPU seconds so far: the whole machine's busy and steal time (/proc/stat), and this process's
    own plus its reaped children's (getrusage); their difference over a run is everyone else's work."""
    hz = os.sysconf("SC_CLK_TCK")
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy, steal = (f[0] + f[1] + f[2] + f[5] + f[6]) / hz, (f[7] / hz if len(f) > 7 else 0.0)
    except (OSError, ValueError, IndexError):
        busy = steal = float("nan")
    own = sum(ru.ru_utime + ru.ru_stime for ru in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))
    return {"machine_busy_s": busy, "steal_s": steal, "own_s": own}


def check_targets(results: dict[str, Result]) -> list[dict]:
    out = []
    for label, name, attr, op, bound in TARGETS:
        value = getattr(results[name], attr) if name in results else None
        met = value is not None and (value <= bound if op == "<=" else value >= bound)
        out.append({"target": label, "transport": name, "field": attr, "op": op, "bound": bound, "measured": value, "met": met})
    return out


def _us(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def _rate(v: float | None) -> str:
    return "–" if v is None else f"{v / 1e6:.3f} M"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None or b == 0 else f"{a / b:.1f}×"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def markdown_table(results: dict[str, Result]) -> str:
    spin, blk = results.get(RING_SPIN), results.get(RING_BLOCKING)
    spin_p50 = spin.p50_us if spin else None
    blk_p50 = blk.p50_us if blk else None
    ring_rate = spin.msg_per_s if spin else None
    head = ("| transport | p50 µs | p99 µs | p99.9 µs | max µs | p50 ÷ ring spin p50 | p50 ÷ ring blocking p50 "
            "| msg/s | ring single-msg ÷ this | consumer CPU % paced | consumer CPU % idle |")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in results.values():
        rows.append(
            f"| {r.transport} | {_us(r.p50_us)} | {_us(r.p99_us)} | {_us(r.p999_us)} | {_us(r.max_us)} "
            f"| {_ratio(r.p50_us, spin_p50)} | {_ratio(r.p50_us, blk_p50)} | {_rate(r.msg_per_s)} "
            f"| {_ratio(ring_rate, r.msg_per_s)} | {_pct(r.paced_cpu_pct)} | {_pct(r.idle_cpu_pct)} |"
        )
    n = NAIVE_RING
    rows.append(
        f"| naive busy-polled ring (quoted from the original design brief (not in this repository), not measured) | {_us(n['p50_us'])} | – | – | – "
        f"| {_ratio(n['p50_us'], spin_p50)} | {_ratio(n['p50_us'], blk_p50)} | {_rate(n['msg_per_s'])} "
        f"| {_ratio(ring_rate, n['msg_per_s'])} | – | – |"
    )
    return "\n".join(rows)


def target_lines(targets: list[dict]) -> list[str]:
    lines = []
    for t in targets:
        v = t["measured"]
        shown = "not measured" if v is None else (f"{v / 1e6:.3f} M msg/s" if t["field"] == "msg_per_s"
                                                  else f"{v:.2f} %" if t["field"].endswith("pct") else f"{v:.2f} µs")
        status = "N/A   " if v is None else "MET   " if t["met"] else "MISSED"
        lines.append(f"{status} ring {t['target']}: measured {shown} ({t['transport']})")
    return lines


def notes(plan: Plan, machine: dict) -> list[str]:
    cores = machine["usable_cores"]
    pin = (f"producer pinned to core {machine['producer_core']}, consumer to core {machine['consumer_core']}"
           if len(cores) > 1 else f"ONLY ONE USABLE CORE ({cores[0]}): producer and consumer share it")
    return [
        f"{machine['cpu_model']}, {machine['cpu_count']} cores, Python {machine['python']}, kernel {machine['kernel']}, "
        f"load average {' '.join(f'{x:.2f}' for x in machine['loadavg'])}, {machine['date_utc']}.",
        f"Each run: a producer and a consumer process (multiprocessing spawn), {pin}.",
        f"Messages: {MESSAGE_BYTES} bytes on every transport: the ring's 16-byte slot header (with CRC-32C) + 64-byte payload "
        f"in {SLOT_SIZE}-byte slots; peers send one 80-byte frame (the same header layout, CRC not computed, + the same "
        "payload) plus their own framing (Queue: pickle + 4-byte length; Pipe: 4-byte length; zmq: 2-byte frame header; mq: none).",
        f"Latency: paced at {plan.rate:,} msg/s, {plan.warmup:,} warm-up + {plan.latency_count:,} measured messages, "
        "one-way from the producer's perf_counter_ns() before the send call to the consumer's just after the receive "
        f"call returned (HdrHistogram 1 ns..10 s, 3 digits). Ring: {plan.latency_capacity} slots, backpressure.",
        f"Throughput: burst after {plan.burst_warmup:,} warm-up messages; msg/s = measured messages / (consumer's receipt "
        f"of STOP - first measured message's stamp); median of {plan.burst_repeats} run(s), each in JSON msg_per_s_runs. Ring: {plan.burst_capacity} slots, backpressure (nothing dropped); "
        f"the busy-spin and blocking rows use try_write / try_read, the batch row try_write_batch({plan.batch}) / "
        f"try_read_batch({plan.batch}) with one stamp per batch.",
        f"Idle CPU: consumer's getrusage CPU time over {plan.idle_s} s with no traffic, as % of one core. "
        "Paced CPU: the same over the whole paced run.",
        "Paced producers wait for their next slot by spinning on perf_counter_ns; the Queue and zmq producers call "
        "os.sched_yield() in that spin, so that their sending thread (Queue's feeder, zmq's I/O thread) gets the GIL / "
        "the core (a pure spin gives Queue a ~3 ms p50 and zmq a ~3.6 ms p99).",
        "Floor rows (measured): a one-message u64 mailbox in shared memory (producer waits for the consumer's ack), "
        "polled by a Python loop or announced by a posix_ipc.Semaphore post to a parked consumer: the least a "
        "busy-polled / a blocking transport can cost here. No payload, no CRC.",
        "Peers receive with their blocking call (no spinning); compare them with the ring's blocking row as well as its "
        "busy-spin row. The 'naive busy-polled ring' row is quoted from the original design brief (not in this repository), not measured here.",
        f"Other work on the machine during the bench: {max(0.0, machine.get('other_cpu_s', 0.0)):.1f} CPU-s "
        f"(machine busy time from /proc/stat minus this bench's own from getrusage; raw {machine.get('other_cpu_s', 0.0):+.1f}) "
        f"over {machine.get('bench_wall_s', 0):.0f} s; steal {machine.get('steal_s', 0):.1f} s. Above "
        f"{contention_limit_s(machine):.1f} CPU-s the figures count as taken under contention (flagged on stdout and above the table).",
        "This VM pauses processes for 0.2-15 ms now and then (measured in the original design brief, not in this repository): p99.9 and max describe the machine as much as the code.",
    ]


def plot(results: dict[str, Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    for r in results.values():
        if r.curve:
            xs = [1.0 / (1.0 - p / 100.0) for p, _ in r.curve]
            ax.plot(xs, [max(v, 1e-3) for _, v in r.curve], marker=".", markersize=3, label=f"{r.transport} (p50 {_us(r.p50_us)} µs)")
    ax.axhline(NAIVE_RING["p50_us"], color="grey", linestyle=":", label="naive ring p50 1.3 µs (quoted, not measured)")
    ticks = [1, 2, 10, 100, 1000, 10_000, 100_000]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("one-way latency (µs)")
    ax.set_title(f"One-way latency, {MESSAGE_BYTES}-byte messages, paced, producer and consumer on separate cores")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def contention_limit_s(machine: dict) -> float:
    return max(CONTENTION_MIN_S, CONTENTION_FRACTION * machine.get("bench_wall_s", 0) * len(machine["usable_cores"]))


def contended(machine: dict) -> str:
    """A warning when other processes used the cores during the bench, else ''."""
    if machine.get("other_cpu_s", 0) <= contention_limit_s(machine):
        return ""
    return (f"WARNING: other processes used {machine['other_cpu_s']:.1f} CPU-s during this {machine['bench_wall_s']:.0f} s "
            "bench, on the same cores: the figures were taken under contention; rerun on a quiet machine.")


def write_outputs(out_dir: Path, plan: Plan, machine: dict, results: dict[str, Result], quick: bool,
                  log: Callable[[str], None]) -> tuple[str, list[str], list[str]]:
    """Write results.json, report.md and latency.png; returns the table, the target lines, the errors."""
    targets = check_targets(results)
    table = markdown_table(results)
    tlines = target_lines(targets)
    note_lines = notes(plan, machine)
    errors = [f"{r.transport}: {e}" for r in results.values() for e in r.errors]
    ring_stats = [f"- {r.transport} {mode}: {s}" for r in results.values() for mode, s in r.ring_stats.items()]
    warning = [contended(machine), ""] if contended(machine) else []
    report = "\n".join(
        [f"# Ring benchmark {machine['date_utc']}{' (quick)' if quick else ''}", "", *warning, table, "",
         "## Targets", "", *[f"- {line}" for line in tlines], "",
         "## Notes", "", *[f"- {line}" for line in note_lines], "",
         "## Ring counters after each run", "", *ring_stats, ""]
        + (["## Errors", "", *[f"- {e}" for e in errors], ""] if errors else [])
    )
    doc = {
        "machine": machine,
        "plan": asdict(plan) | {"quick": quick, "message_bytes": MESSAGE_BYTES, "payload_bytes": PAYLOAD_BYTES, "slot_size": SLOT_SIZE},
        "transports": {name: asdict(r) for name, r in results.items()},
        "reference_quoted_from_design": {"naive busy-polled ring": NAIVE_RING},
        "targets": targets,
        "notes": note_lines,
        "contention_warning": contended(machine) or None,
        "errors": errors,
    }
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "report.md").write_text(report)
    try:
        plot(results, out_dir / "latency.png")
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the picture
        errors.append(f"plot: {exc}")
        log(f"plot failed: {exc}")
    return table, tlines, errors
