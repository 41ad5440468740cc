"""The status snapshot (``status`` on the control socket: one JSON object) and its table view
(``python -m pipeline status``, and ``up``'s log when its output is not a terminal; on a terminal
``termview`` draws the same snapshot in place)."""

from __future__ import annotations

from pipeline.runtime import proctable as PT
from ringbuf import Ring

#: the ring counters a status snapshot shows, per ring
RING_FIELDS = ("write_cursor", "read_cursor", "depth", "dropped", "crc_errors", "full_events", "capacity", "full_policy")


def process_row(p, rec: PT.ProcRecord, inputs: list[Ring], now_ns: int) -> dict:
    """The status of process ``p`` (a ``core.Proc``) from its process-table record ``rec`` and its
    input rings."""
    ins = [r.stats() for r in inputs]
    beat_ns = rec.get(PT.OFF_HEARTBEAT_NS)
    return {
        "name": p.name, "state": p.state.value, "pid": p.pid if p.popen else 0, "core": p.core,
        "wait": p.wait, "restarts": p.restarts,
        "msgs_in": rec.get(PT.OFF_MSGS_IN), "msgs_out": rec.get(PT.OFF_MSGS_OUT),
        "depth": sum(s.depth for s in ins), "drops": sum(s.dropped for s in ins),
        "crc_errors": sum(s.crc_errors for s in ins),
        "p50_us": rec.get(PT.OFF_LAT_P50_NS) / 1000, "p99_us": rec.get(PT.OFF_LAT_P99_NS) / 1000,
        "heartbeat_age_ms": (now_ns - beat_ns) // 1_000_000 if beat_ns else None,
        "errors": rec.get(PT.OFF_ERRORS), "last_error": rec.last_error() or p.last_exit,
        "recoveries_ms": [round(x / 1e6, 1) for x in p.recoveries_ns],
        "stage": rec.stage_stats(),
    }


def ring_row(name: str, ring: Ring) -> dict:
    """The status of one ring: its name and ``RING_FIELDS``."""
    s = ring.stats()
    return {"name": name, **{k: getattr(s, k) for k in RING_FIELDS}}


def position_rows(st: dict) -> list[tuple[str, int, float, float | None]]:
    """(process, instrument id, position in lots, net P&L or None) for every instrument whose position a
    stage publishes in its stats (the risk stage: ``pos_lots_<id>``, ``pnl_<id>``), by process then id."""
    out = []
    for row in st["processes"]:
        stage = row.get("stage") or {}
        ids = sorted(int(k[9:]) for k in stage if k.startswith("pos_lots_") and k[9:].isdigit())
        out += [(row["name"], i, stage[f"pos_lots_{i}"], stage.get(f"pnl_{i}")) for i in ids]
    return out


def rates(row: dict, prev: dict[str, tuple[int, int]] | None, interval_s: float) -> tuple[float, float] | None:
    """(in/s, out/s) of a process row since ``prev`` (name -> (msgs_in, msgs_out)) ``interval_s`` ago;
    None without an earlier sample, or when the process restarted (its counters began again)."""
    pin, pout = (prev or {}).get(row["name"], (None, None))
    if not interval_s or pin is None or row["msgs_in"] < pin or row["msgs_out"] < pout:
        return None
    return (row["msgs_in"] - pin) / interval_s, (row["msgs_out"] - pout) / interval_s


def trading_word(st: dict) -> str:
    """The header's word for trading: HALTED (the supervisor halted it: operator, a FATAL stage, the
    latency guard), REDUCING (the latency guard), else trading."""
    guard = st.get("latency_guard") or {}
    return "HALTED" if st["halted"] else "REDUCING" if guard.get("level") == 1 else "trading"


def guard_lines(st: dict) -> list[str]:
    """The latency guard in words: its level and why (with how to lift it), then each budgeted stage's
    latest p99, its budgets, and how long it has been above the reduce budget; no lines when no stage
    has a budget."""
    g = st.get("latency_guard") or {}
    if not g.get("stages"):
        return []
    head = f"latency guard: {g['state']}"
    if g["level"]:
        head += f" for {g['for_ms'] / 1000:.1f} s: {g['reason']}; only an operator's resume lifts it"
    else:
        head += f" (acts when a stage's p99 stays above a budget for {g['window_ms']} ms)"
    per = []
    for name, s in g["stages"].items():
        halt = f"{s['halt_p99_us']:,}" if s["halt_p99_us"] else "-"
        text = f"{name} {s['p99_us']:,.0f} ({s['reduce_p99_us']:,} / {halt})"
        if s["samples"]:
            text += f" above for {s['above_ms'] / 1000:.1f} s"
        if s["breach"] != "OK":
            text += f" {s['breach']}"
        per.append(text + ("" if s["armed"] else " (arming)"))
    return [head, "  p99 us (reduce / halt budget): " + "  ".join(per)]


def format_status(st: dict, prev: dict[str, tuple[int, int]] | None = None, interval_s: float = 0.0, *,
                  symbols: dict[int, str] | None = None) -> str:
    """A status snapshot as a table; with ``prev`` counters and ``interval_s``, rates per second. Then
    the latency guard (``guard_lines``), per instrument the position (lots) and net P&L (quote currency:
    realized + unrealized at the risk gateway's latest mid, before fees) its risk stage publishes
    (``symbols``: id -> symbol, else ``#id``), the stage counters, the rings."""
    lines = [f"pipeline  supervisor pid {st['supervisor_pid']}  {trading_word(st)}  {st['plan']}  "
             f"launcher: {st['launcher']}",
             f"{'process':<10} {'state':<9} {'pid':>7} {'core':>4} {'rst':>4} {'in/s':>9} {'out/s':>9} {'depth':>6} "
             f"{'drops':>6} {'crc':>5} {'p50us':>8} {'p99us':>8}  last error"]
    for row in st["processes"]:
        r = rates(row, prev, interval_s)
        rin, rout = (f"{r[0]:9.0f}", f"{r[1]:9.0f}") if r else (f"{'-':>9}", f"{'-':>9}")
        lines.append(f"{row['name']:<10} {row['state']:<9} {row['pid']:>7} {row['core']:>4} {row['restarts']:>4} {rin} {rout} "
                     f"{row['depth']:>6} {row['drops']:>6} {row['crc_errors']:>5} {row['p50_us']:>8.1f} {row['p99_us']:>8.1f}  "
                     f"{(row['last_error'] or '')[:48]}")
    if not st["processes"]:
        lines.append("(no stage processes configured yet)")
    lines += guard_lines(st)
    positions = position_rows(st)
    if positions:
        lines.append(f"{'instrument':<16} {'process':<10} {'position lots':>14} {'net P&L':>14}")
    for name, iid, lots, pnl in positions:
        label = f"{(symbols or {}).get(iid, '#' + str(iid))} ({iid})"
        lines.append(f"{label:<16} {name:<10} {lots:>14} {'-' if pnl is None else format(pnl, ',.2f'):>14}")
    for row in st["processes"]:
        if row.get("stage"):
            lines.append(f"{row['name']:<10} " + " ".join(f"{k}={v}" for k, v in row["stage"].items()))
    for r in st["rings"]:
        lines.append(f"ring {r['name']:<10} {r['full_policy']:<12} depth {r['depth']:>6}/{r['capacity']:<7} "
                     f"written {r['write_cursor']:>10} dropped {r['dropped']:>6} crc_errors {r['crc_errors']:>5}")
    return "\n".join(lines)
