"""The dashboard's document (pipeline/runtime/ops/dashboard.py): the process graph of a config, rates
from two snapshots, the latency history, positions, risk, breaker and the newest denials."""

from __future__ import annotations

import copy

import msgspec

from pipeline.runtime.config import load_config
from pipeline.runtime.ops.dashboard import History, dashboard_doc, denial_rows, graph, ring_rows, stage_rows
from pipeline.runtime.ops.health import health
from tests.support.ops import snapshot
from tests.support.paths import REPO_ROOT


def test_the_default_graph_reads_left_to_right_with_the_feedback_rings_as_back_edges():
    g = graph(load_config(REPO_ROOT / "configs" / "default.toml"))
    col = {n["name"]: n["col"] for n in g["nodes"]}
    assert col == {"venue": 0, "feed": 0, "features": 1, "fast": 2, "llm": 3, "risk": 4, "sender": 5, "supervisor": 3}
    edges = {e["ring"]: (e["from"], e["to"], e["back"]) for e in g["edges"]}
    assert edges == {"md": ("feed", "features", False), "feat": ("features", "fast", False),
                     "sig_risk": ("fast", "risk", False), "sig_llm": ("fast", "llm", False),
                     "instr": ("llm", "risk", False), "pos": ("risk", "llm", True), "orders": ("risk", "sender", False),
                     "exec": ("sender", "risk", True), "control": ("supervisor", "risk", False)}
    rows = {}
    for n in g["nodes"]:
        rows.setdefault(n["col"], []).append(n["row"])
    assert all(sorted(r) == list(range(len(r))) for r in rows.values()), "rows number each column from 0"


def test_the_graph_does_not_depend_on_the_order_of_the_processes_in_the_config():
    """The bench's configs list the llm stage last: it is still drawn between fast and risk."""
    cfg = load_config(REPO_ROOT / "configs" / "default.toml")
    shuffled = msgspec.structs.replace(cfg, processes=list(reversed(cfg.processes)))
    col = {n["name"]: n["col"] for n in graph(shuffled)["nodes"]}
    assert col == {n["name"]: n["col"] for n in graph(cfg)["nodes"]}
    back = {e["ring"] for e in graph(shuffled)["edges"] if e["back"]}
    assert back == {"pos", "exec"}


def _later(snap: dict, dt_s: float) -> dict:
    nxt = copy.deepcopy(snap)
    nxt["t_ns"] += int(dt_s * 1e9)
    for p in nxt["processes"]:
        p["msgs_in"] += 500
        p["msgs_out"] += 250
        p["cpu_s"] += 0.25
    for r in nxt["rings"]:
        r["written"] += 1000
    return nxt


def test_rates_are_differences_over_the_interval():
    a = snapshot()
    b = _later(a, 0.5)
    rows = {r["name"]: r for r in stage_rows(b, a)}
    assert rows["fast"]["in_per_s"] == 1000 and rows["fast"]["out_per_s"] == 500 and rows["fast"]["cpu_pct"] == 50.0
    assert {r["name"]: r["written_per_s"] for r in ring_rows(b, a)}["md"] == 2000


def test_no_rate_without_an_earlier_snapshot_or_across_a_restart():
    a = snapshot()
    assert all(r["in_per_s"] is None for r in stage_rows(a, None))
    b = _later(a, 1.0)
    b["processes"][3]["pid"] += 1  # fast restarted: its counters begin again
    b["processes"][3]["msgs_in"] = 5
    rows = {r["name"]: r for r in stage_rows(b, a)}
    assert rows["fast"]["in_per_s"] is None and rows["fast"]["cpu_pct"] is None
    assert rows["feed"]["in_per_s"] == 500


def test_history_keeps_the_latest_points_per_stage():
    h = History(points=3)
    snap = snapshot()
    for i in range(5):
        for p in snap["processes"]:
            p["p99_us"] = 1000.0 + i
        h.add(snap)
    assert h.doc()["risk"]["p99_us"] == [1002.0, 1003.0, 1004.0]
    assert len(h.doc()["risk"]["p50_us"]) == 3


def test_denials_show_age_symbol_side_and_reason_never_an_order_id():
    snap = snapshot()
    rows = denial_rows([{"ts_ns": snap["t_ns"] - 2_500_000_000, "instrument_id": 2, "side": 1, "price": 100.5,
                         "size": 0.01, "code": "MAX_POSITION", "detail": "position 20 + 1 > 20"}], snap)
    assert rows == [{"age_s": 2.5, "instrument": "ETHUSDT", "side": "BUY", "price": 100.5, "size": 0.01,
                     "reason": "MAX_POSITION", "detail": "position 20 + 1 > 20"}]


def test_the_document_has_every_part_the_page_draws():
    snap = snapshot()
    h = History()
    h.add(snap)
    doc = dashboard_doc(snap, None, h, [], health(snap), {"nodes": [], "edges": []})
    assert set(doc) == {"t_ns", "halted", "health", "graph", "stages", "spark", "rings", "positions", "risk", "llm",
                        "denials", "latency_guard"}
    assert doc["latency_guard"] == {"state": "OK", "reason": ""}
    assert doc["positions"] == [{"stage": "risk", "instrument": "BTCUSDT", "lots": 3.0, "pnl": 12.5},
                                {"stage": "risk", "instrument": "ETHUSDT", "lots": -1.0, "pnl": -0.75}]
    assert doc["risk"][0]["denials_by_reason"] == {"rate": 4, "stale_ref": 1}
    assert doc["llm"] == [{"stage": "llm", "breaker": "closed", "score": 0.875, "generations": 10, "instructions": 7}]
    assert doc["health"] == {"ok": True, "why": []}
