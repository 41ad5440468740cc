"""Doubles for the ops server's tests: a snapshot as ``pipeline.runtime.ops.snapshot.take_snapshot``
returns it (``snapshot``: the default graph's stages with their real counter names), a supervisor
stand-in it can read (``FakeSource``), and a recording control plane (``FakeControl``)."""

from __future__ import annotations

import copy

from ringbuf.ring import RingStats

STAGES = ("venue", "feed", "features", "fast", "llm", "risk", "sender")

#: each stage's own counters (``ctx.stats``) as the stages publish them
STAGE_STATS = {
    "venue": {"connections": 1, "subscriptions": 4, "frames_sent": 900},
    "feed": {"frames": 1302, "rejected": 0, "books_emitted": 870, "trades_emitted": 1045, "resyncs": 2,
             "reconnects": 1, "checksum_failures": 2, "seq_gaps": 0, "skew_ms_1": -1.25, "skew_ms_2": -0.5},
    "features": {"books": 878, "trades": 1055, "emitted": 878, "rejected": 0, "out_drops": 0},
    "fast": {"provider": "CPU", "model": "466e6c0a", "features": 878, "signals": 878, "hold": 868},
    "llm": {"model": "tiny.gguf (stand-in)", "breaker": "closed", "score": 0.875, "signals": 10, "conflated": 3,
            "generations": 10, "instructions": 7, "instr_drops": 1, "probes": 0, "probes_valid": 0,
            "rej_timeout": 2},
    "risk": {"state": "ACTIVE", "synced": 1, "open": 2, "approved": 40, "denied": 5, "expired": 0, "cancels": 3,
             "fills": 12, "rejected": 0, "pos_lots_1": 3.0, "pos_lots_2": -1.0, "pnl_1": 12.5, "pnl_2": -0.75,
             "deny_rate": 4, "deny_stale_ref": 1},
    "sender": {"sent": 40, "acked": 38, "rejected": 1, "fills": 12, "cancels": 3, "unknown": 0, "dups": 0,
               "never_sent": 0, "open": 2},
}


def process_row(name: str, i: int) -> dict:
    """A status row (``pipeline.runtime.supervisor.status.process_row``) with ``cpu_s``."""
    return {"name": name, "state": "RUNNING", "pid": 1000 + i, "core": i % 2, "wait": "blocking", "restarts": 0,
            "msgs_in": 100 * i, "msgs_out": 90 * i, "depth": 0, "drops": 0, "crc_errors": 0, "p50_us": 300.0 + i,
            "p99_us": 5000.0 + i, "heartbeat_age_ms": 20, "errors": 0, "last_error": "", "recoveries_ms": [],
            "stage": copy.deepcopy(STAGE_STATS[name]), "cpu_s": 1.5 * i,
            "lat_hist": {"counts": [0] * 5 + [10 * i, 20, 5] + [0] * 11 + [1], "sum_ns": 2_000_000_000 + 500_000 * i}}


RINGS = (("md", "feed", "features", "drop", 8192), ("feat", "features", "fast", "drop", 4096),
         ("sig_risk", "fast", "risk", "drop", 4096), ("sig_llm", "fast", "llm", "drop", 1024),
         ("instr", "llm", "risk", "backpressure", 1024), ("pos", "risk", "llm", "drop", 1024),
         ("orders", "risk", "sender", "backpressure", 4096), ("exec", "sender", "risk", "backpressure", 4096),
         ("control", "supervisor", "risk", "backpressure", 64))


def snapshot(t_ns: int = 10_000_000_000) -> dict:
    """A whole snapshot of the default graph, every stage RUNNING, trading on."""
    rings = [{"name": n, "producer": p, "consumer": c, "capacity": cap, "full_policy": pol, "depth": 3,
              "written": 1000 + k, "read": 997 + k, "dropped": k, "crc_errors": 0, "full_events": 0, "stall_ns": 0}
             for k, (n, p, c, pol, cap) in enumerate(RINGS)]
    return {"t_ns": t_ns, "halted": False, "processes": [process_row(n, i) for i, n in enumerate(STAGES)],
            "rings": rings, "instruments": {1: "BTCUSDT", 2: "ETHUSDT"}, "latency_guard": latency_guard()}


def latency_guard(level: int = 0) -> dict:
    """The supervisor's latency guard as its status shows it (pipeline/runtime/supervisor/budget.py)."""
    state = ("OK", "REDUCING", "HALTED")[level]
    return {"level": level, "state": state, "reason": "" if not level else "fast p99 above 50,000 us for 5.0 s",
            "for_ms": 0, "trips": level, "window_ms": 5000, "min_samples": 10,
            "stages": {"fast": {"reduce_p99_us": 50_000, "halt_p99_us": 250_000, "p99_us": 900.0,
                                "above_ms": 1500 if level else 0, "samples": 40, "lowest_p99_us": 700.0,
                                "breach": state, "armed": True},
                       "feed": {"reduce_p99_us": 40_000, "halt_p99_us": 0, "p99_us": 300.0, "above_ms": 0,
                                "samples": 40, "lowest_p99_us": 250.0, "breach": "OK", "armed": True}}}


def ring_stats(row: dict) -> RingStats:
    """A ``RingStats`` with the counters of a snapshot's ring row."""
    return RingStats(name=row["name"], slot_size=64, capacity=row["capacity"], full_policy=row["full_policy"],
                     write_cursor=row["written"], read_cursor=row["read"], depth=row["depth"], written=row["written"],
                     read=row["read"], dropped=row["dropped"], full_events=row["full_events"],
                     stall_ns=row["stall_ns"], crc_errors=row["crc_errors"], wakeups=0, missed_wakeups=0,
                     writer_pid=0, reader_pid=0, writer_heartbeat_ns=0, reader_heartbeat_ns=0)


class _Ring:
    def __init__(self, row: dict):
        self.row = row

    def stats(self) -> RingStats:
        return ring_stats(self.row)


class _Record:
    def __init__(self, row: dict):
        self.row = row

    def latency_histogram(self) -> tuple[list[int], int]:
        return list(self.row["lat_hist"]["counts"]), self.row["lat_hist"]["sum_ns"]


class _Table:
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def record(self, index: int) -> _Record:
        return _Record(self.rows[index])


class _Proc:
    def __init__(self, index: int):
        self.index = index


class FakeSource:
    """What ``take_snapshot`` reads of a supervisor: ``status()``, ``rings``, ``halted``, ``table`` and
    ``procs`` (each process's record index); built from ``snap`` (change ``snap`` to change what it
    reports)."""

    def __init__(self, snap: dict | None = None):
        self.snap = snap or snapshot()
        self.halted = False
        self.fail: Exception | None = None  # raised by status() when set

    def status(self) -> dict:
        if self.fail is not None:
            raise self.fail
        rows = [{k: v for k, v in p.items() if k not in ("cpu_s", "lat_hist")} for p in self.snap["processes"]]
        return {"supervisor_pid": 1, "halted": self.halted, "plan": "", "launcher": "fork-server", "run_epoch": 1,
                "processes": rows, "rings": [], "latency_guard": self.snap.get("latency_guard")}

    @property
    def rings(self) -> dict:
        return {r["name"]: _Ring(r) for r in self.snap["rings"]}

    @property
    def table(self) -> _Table:
        return _Table(self.snap["processes"])

    @property
    def procs(self) -> dict:
        return {p["name"]: _Proc(i) for i, p in enumerate(self.snap["processes"])}


class FakeControl:
    """A control plane that records each request and answers ``answer``."""

    def __init__(self, answer: dict | None = None):
        self.requests: list[dict] = []
        self.answer = answer or {"ok": True}

    def __call__(self, req: dict) -> dict:
        self.requests.append(req)
        return dict(self.answer)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, timeout_s: float = 10.0) -> dict[str, dict[tuple, float]]:
    """``/metrics`` of the ops server on ``port``, parsed by prometheus-client's parser:
    {family: {(sample name, sorted label pairs): value}}."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as resp:
        text = resp.read().decode()
    return {f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
            for f in text_string_to_metric_families(text)}
