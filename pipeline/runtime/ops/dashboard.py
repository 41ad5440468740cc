"""What the dashboard page shows, as one JSON document pushed over its WebSocket once a second: a pure
function of two consecutive snapshots (``ops.snapshot``; rates are their differences), the latency
history and the newest denials.

The document::

    t_ns, halted, health {ok, why}, latency_guard {state, reason} (None without one)
    graph {nodes [{name, col, row}], edges [{ring, from, to, back}]}   the process graph
    stages [{name, state, pid, restarts, in_per_s, out_per_s, cpu_pct, p50_us, p99_us,
             heartbeat_age_ms, last_error}]
    spark {stage: {p50_us: [...], p99_us: [...]}}                          the latest HISTORY_POINTS
    rings [{name, producer, consumer, policy, depth, capacity, written_per_s, dropped, crc_errors,
            full_events, stall_ms}]
    positions [{stage, instrument, lots, pnl}]
    risk [{stage, state, approved, denied, denials_by_reason {reason: n}}]
    llm [{stage, breaker, score, generations, instructions}]
    denials [{age_s, instrument, side, price, size, reason, detail}]      the newest, oldest first
"""

from __future__ import annotations

import collections

from pipeline.runtime.config import Config
from pipeline.runtime.ops.metrics import stage_kind

HISTORY_POINTS = 120
SIDES = {1: "BUY", 2: "SELL"}


def flow_order(names: list[str], edges: list[dict]) -> list[str]:
    """The processes in the order data flows through them: each next one the process with the fewest
    inputs from processes not yet placed, then the most from placed ones (then config order), so that
    a cycle (risk <-> sender, risk <-> llm) is cut where it costs the fewest edges drawn backwards."""
    order: list[str] = []
    left = list(names)

    def key(n: str) -> tuple[int, int, int]:
        ins = [e["from"] for e in edges if e["to"] == n and e["from"] != n]
        return sum(f in left for f in ins), -sum(f not in left for f in ins), names.index(n)

    while left:
        pick = min(left, key=key)
        order.append(pick)
        left.remove(pick)
    return order


def graph(cfg: Config) -> dict:
    """The process graph for drawing: a node per process (and ``supervisor`` when it writes a control
    ring), an edge per ring from its producer to its consumer. Columns are the longest path from a
    process without inputs over the edges that go forward in ``flow_order`` (an edge to an earlier
    process, such as exec from the sender back to risk, is a back edge); rows number the nodes of a
    column in config order."""
    order = [p.name for p in cfg.processes]
    edges = []
    ctl = cfg.supervisor.control_ring
    for p in cfg.processes:
        for rn in p.inputs:
            producer = "supervisor" if rn == ctl else next((q.name for q in cfg.processes if rn in q.outputs), "")
            if producer:
                edges.append({"ring": rn, "from": producer, "to": p.name})
    pos = {n: i for i, n in enumerate(flow_order(order, edges))}
    for e in edges:
        e["back"] = e["from"] != "supervisor" and pos[e["from"]] >= pos[e["to"]]
    col = dict.fromkeys(order, 0)
    for _ in order:  # longest path over the forward edges (a DAG: at most len(order) rounds)
        for e in edges:
            if not e["back"] and e["from"] in col:
                col[e["to"]] = max(col[e["to"]], col[e["from"]] + 1)
    nodes = [{"name": n, "col": col[n]} for n in order]
    if any(e["from"] == "supervisor" for e in edges):
        target = min(col[e["to"]] for e in edges if e["from"] == "supervisor")
        nodes.append({"name": "supervisor", "col": max(target - 1, 0)})
    rows: dict[int, int] = collections.Counter()
    for nd in nodes:
        nd["row"] = rows[nd["col"]]
        rows[nd["col"]] += 1
    return {"nodes": nodes, "edges": edges}


class History:
    """Each stage's latest ``points`` (p50, p99) latencies in µs, one point per sample."""

    def __init__(self, points: int = HISTORY_POINTS):
        self.points = points
        self.p50: dict[str, collections.deque] = {}
        self.p99: dict[str, collections.deque] = {}

    def add(self, snap: dict) -> None:
        for p in snap["processes"]:
            n = p["name"]
            if n not in self.p50:
                self.p50[n] = collections.deque(maxlen=self.points)
                self.p99[n] = collections.deque(maxlen=self.points)
            self.p50[n].append(round(p["p50_us"], 1))
            self.p99[n].append(round(p["p99_us"], 1))

    def doc(self) -> dict:
        return {n: {"p50_us": list(self.p50[n]), "p99_us": list(self.p99[n])} for n in self.p50}


def _per_s(cur: float | None, old: float | None, dt_s: float) -> float | None:
    """(cur - old) / dt_s; None without both values, a positive interval, or when the counter went back
    (a restarted process counts again from 0)."""
    if cur is None or old is None or dt_s <= 0 or cur < old:
        return None
    return (cur - old) / dt_s


def stage_rows(snap: dict, prev: dict | None) -> list[dict]:
    """The stages' table: state, rates and CPU share since ``prev`` (None: no rates yet)."""
    dt_s = (snap["t_ns"] - prev["t_ns"]) / 1e9 if prev else 0.0
    old = {p["name"]: p for p in prev["processes"]} if prev else {}
    rows = []
    for p in snap["processes"]:
        o = old.get(p["name"], {})
        same = o.get("pid") == p["pid"]
        cpu = _per_s(p.get("cpu_s"), o.get("cpu_s") if same else None, dt_s)
        rows.append({"name": p["name"], "state": p["state"], "pid": p["pid"], "restarts": p["restarts"],
                     "in_per_s": _per_s(p["msgs_in"], o.get("msgs_in") if same else None, dt_s),
                     "out_per_s": _per_s(p["msgs_out"], o.get("msgs_out") if same else None, dt_s),
                     "cpu_pct": None if cpu is None else round(100 * cpu, 1),
                     "p50_us": round(p["p50_us"], 1), "p99_us": round(p["p99_us"], 1),
                     "heartbeat_age_ms": p.get("heartbeat_age_ms"), "last_error": (p.get("last_error") or "")[:160]})
    return rows


def ring_rows(snap: dict, prev: dict | None) -> list[dict]:
    """The rings' table, with the write rate since ``prev``."""
    dt_s = (snap["t_ns"] - prev["t_ns"]) / 1e9 if prev else 0.0
    old = {r["name"]: r for r in prev["rings"]} if prev else {}
    return [{"name": r["name"], "producer": r["producer"], "consumer": r["consumer"], "policy": r["full_policy"],
             "depth": r["depth"], "capacity": r["capacity"],
             "written_per_s": _per_s(r["written"], old.get(r["name"], {}).get("written"), dt_s),
             "dropped": r["dropped"], "crc_errors": r["crc_errors"], "full_events": r["full_events"],
             "stall_ms": round(r["stall_ns"] / 1e6, 3)} for r in snap["rings"]]


def trading_rows(snap: dict) -> dict:
    """positions, risk and llm rows from the stages' counters."""
    symbols = snap["instruments"]
    positions, risk, llm = [], [], []
    for p in snap["processes"]:
        s = p.get("stage") or {}
        kind = stage_kind(s)
        if kind == "risk":
            ids = sorted(int(k[9:]) for k in s if k.startswith("pos_lots_") and k[9:].isdigit())
            positions += [{"stage": p["name"], "instrument": symbols.get(i, f"#{i}"), "lots": s[f"pos_lots_{i}"],
                           "pnl": s.get(f"pnl_{i}")} for i in ids]
            reasons = {k[5:]: v for k, v in s.items() if k.startswith("deny_")}
            risk.append({"stage": p["name"], "state": s["state"], "approved": s.get("approved", 0),
                         "denied": s.get("denied", 0), "denials_by_reason": reasons})
        elif kind == "llm":
            llm.append({"stage": p["name"], "breaker": s.get("breaker"), "score": s.get("score"),
                        "generations": s.get("generations", 0), "instructions": s.get("instructions", 0)})
    return {"positions": positions, "risk": risk, "llm": llm}


def denial_rows(denials: list[dict], snap: dict) -> list[dict]:
    """Audit-log denials (``audit.denials_in``) as the page shows them: age, symbol, side, reason."""
    out = []
    for d in denials:
        ts = d.get("ts_ns")
        age = round((snap["t_ns"] - ts) / 1e9, 1) if isinstance(ts, int) else None
        iid = d.get("instrument_id")
        out.append({"age_s": age, "instrument": snap["instruments"].get(iid, f"#{iid}"),
                    "side": SIDES.get(d.get("side"), str(d.get("side"))), "price": d.get("price"),
                    "size": d.get("size"), "reason": d.get("code"), "detail": (d.get("detail") or "")[:120]})
    return out


def dashboard_doc(snap: dict, prev: dict | None, history: History, denials: list[dict], health: tuple[int, dict],
                  graph_doc: dict) -> dict:
    """The document the page renders (module docstring)."""
    guard = snap.get("latency_guard") or {}
    return {"t_ns": snap["t_ns"], "halted": snap["halted"],
            "health": {"ok": health[1]["ok"], "why": health[1]["why"]}, "graph": graph_doc,
            "latency_guard": {"state": guard.get("state"), "reason": guard.get("reason", "")} if guard else None,
            "stages": stage_rows(snap, prev), "spark": history.doc(), "rings": ring_rows(snap, prev),
            **trading_rows(snap), "denials": denial_rows(denials, snap)}
