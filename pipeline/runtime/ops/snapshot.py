"""One snapshot of a running pipeline for the ops server: what the supervisor already reads (its
status: states, restarts, heartbeats, the process table's counters and stage stats), every ring's
whole control block, and each stage's CPU time from ``/proc/<pid>/stat``. Nothing here touches a
stage: the stages' own work is unchanged by a scrape.

``take_snapshot(source, cfg, now_ns)`` reads a duck-typed ``source`` (the ``Supervisor``: its
``status()``, its ``rings`` and ``halted``); the result is a plain JSON-able dict (see
``take_snapshot``) that the metrics, the health check and the dashboard are pure functions of.
"""

from __future__ import annotations

import os

from pipeline.runtime.config import Config

#: clock ticks a second, the unit of utime / stime in /proc/<pid>/stat
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: the ring counters a snapshot keeps (``ringbuf.RingStats`` fields)
RING_FIELDS = ("capacity", "full_policy", "depth", "written", "read", "dropped", "crc_errors", "full_events",
               "stall_ns")


def cpu_seconds_from_stat(text: str, ticks_per_s: int = CLOCK_TICKS) -> float | None:
    """User + system CPU seconds from the text of ``/proc/<pid>/stat`` (fields 14 and 15, counted
    after the parenthesised command name, which may itself hold spaces or parentheses); None when the
    text is not such a line."""
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 13:
        return None
    try:
        return (int(fields[11]) + int(fields[12])) / ticks_per_s
    except ValueError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """The CPU seconds process ``pid`` has used so far (its threads included); None when it is gone
    or unreadable."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return cpu_seconds_from_stat(f.read())
    except OSError:
        return None


def ring_ends(cfg: Config) -> dict[str, tuple[str, str]]:
    """ring name -> (producer, consumer) from the config ("supervisor" for the control ring; "" where none)."""
    ends = {r.name: ["", ""] for r in cfg.rings}
    if cfg.supervisor.control_ring in ends:
        ends[cfg.supervisor.control_ring][0] = "supervisor"
    for p in cfg.processes:
        for rn in p.outputs:
            ends[rn][0] = p.name
        for rn in p.inputs:
            ends[rn][1] = p.name
    return {k: (v[0], v[1]) for k, v in ends.items()}


def take_snapshot(source, cfg: Config, now_ns: int, *, cpu=cpu_seconds) -> dict:
    """The pipeline now, as one dict::

        t_ns          CLOCK_MONOTONIC of the snapshot
        halted        the supervisor's own halted flag (an operator halt / kill switch / a FATAL stage)
        processes     the supervisor's status rows (``status.process_row``), each with ``cpu_s`` and
                      ``lat_hist`` ({counts, sum_ns}: the process table's latency histogram) added
        rings         per ring: name, producer, consumer and ``RING_FIELDS``
        instruments   {id: symbol}
        latency_guard the supervisor's latency-budget guard (``supervisor.budget``: level, state, reason,
                      trips, stages {name: budgets, p99, above_ms...}); None when the status has none

    ``source`` is the supervisor (``status()``, ``rings``: name -> ``ringbuf.Ring``, ``halted``, ``table``
    and ``procs``: the process table and each process's record index);
    ``cpu(pid)`` gives a process's CPU seconds (None when unknown).

    Raises:
        Whatever ``source.status()`` or a ring's ``stats()`` raises (the server answers 503 then).
    """
    st = source.status()
    procs = []
    for row in st["processes"]:
        row = dict(row)
        row["cpu_s"] = cpu(row["pid"]) if row.get("pid") else None
        counts, sum_ns = source.table.record(source.procs[row["name"]].index).latency_histogram()
        row["lat_hist"] = {"counts": counts, "sum_ns": sum_ns}
        procs.append(row)
    ends = ring_ends(cfg)
    rings = []
    for name, ring in list(source.rings.items()):
        s = ring.stats()
        producer, consumer = ends.get(name, ("", ""))
        rings.append({"name": name, "producer": producer, "consumer": consumer,
                      **{k: getattr(s, k) for k in RING_FIELDS}})
    return {"t_ns": now_ns, "halted": bool(st.get("halted", source.halted)), "processes": procs, "rings": rings,
            "instruments": {i.id: i.symbol for i in cfg.instruments}, "latency_guard": st.get("latency_guard")}
