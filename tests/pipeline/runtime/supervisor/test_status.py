"""The status table (``format_status``): per instrument the position and net P&L the risk stage publishes
in its stage stats (``pos_lots_<id>``, ``pnl_<id>``), on a snapshot written out by hand."""

from __future__ import annotations

from pipeline.runtime.supervisor.status import format_status, position_rows


def row(name, stage):
    return {"name": name, "state": "RUNNING", "pid": 100, "core": 1, "wait": "busy-spin", "restarts": 0,
            "msgs_in": 10, "msgs_out": 5, "depth": 0, "drops": 0, "crc_errors": 0, "p50_us": 1.0, "p99_us": 2.0,
            "heartbeat_age_ms": 3, "errors": 0, "last_error": "", "recoveries_ms": [], "stage": stage}


def snapshot(risk_stage):
    return {"supervisor_pid": 42, "halted": False, "plan": "plan", "launcher": "fork", "run_epoch": 1,
            "processes": [row("feed", {"frames": 7}), row("risk", risk_stage)], "rings": []}


RISK = {"state": "ACTIVE", "synced": 1, "pos_lots_1": 3.0, "pos_lots_2": -4, "pnl_1": 1234.5, "pnl_2": -0.04,
        "pos_lots_x": 9}


def test_position_and_net_pnl_per_instrument_from_the_risk_stage():
    assert position_rows(snapshot(RISK)) == [("risk", 1, 3.0, 1234.5), ("risk", 2, -4, -0.04)]
    lines = format_status(snapshot(RISK), symbols={1: "BTCUSDT", 2: "ETHUSDT"}).splitlines()
    i = lines.index(next(line for line in lines if line.startswith("instrument")))
    assert lines[i].split() == ["instrument", "process", "position", "lots", "net", "P&L"]
    assert lines[i + 1].split() == ["BTCUSDT", "(1)", "risk", "3.0", "1,234.50"]
    assert lines[i + 2].split() == ["ETHUSDT", "(2)", "risk", "-4", "-0.04"]
    assert lines[i - 1].startswith("risk ") and lines[i + 3].startswith("feed ")  # after the processes, before the stats


def test_without_symbols_or_a_pnl_the_lines_say_what_they_know():
    stage = {"pos_lots_2": 1.5, "pos_lots_1": 0}  # pnl_<id> cut off (the status record keeps the first keys)
    lines = format_status(snapshot(stage)).splitlines()
    i = lines.index(next(line for line in lines if line.startswith("instrument")))
    assert [line.split() for line in lines[i + 1:i + 3]] == [["#1", "(1)", "risk", "0", "-"],
                                                             ["#2", "(2)", "risk", "1.5", "-"]]
    assert not any(line.startswith("instrument") for line in format_status(snapshot({"state": "ACTIVE"})).splitlines())


GUARD_OK = {"level": 0, "state": "OK", "reason": "", "for_ms": 0, "trips": 0, "window_ms": 5_000, "min_samples": 10,
            "stages": {"features": {"reduce_p99_us": 50_000, "halt_p99_us": 250_000, "p99_us": 812.4, "above_ms": 0,
                                    "samples": 0, "lowest_p99_us": 0.0, "breach": "OK", "armed": True},
                       "fast": {"reduce_p99_us": 40_000, "halt_p99_us": 0, "p99_us": 0.0, "above_ms": 0, "samples": 0,
                                "lowest_p99_us": 0.0, "breach": "OK", "armed": False}}}
REASON = "features p99 above 50,000 us for 5.0 s (51 samples, lowest 61,000 us)"


def with_guard(guard, halted=False):
    return {**snapshot(RISK), "halted": halted, "latency_guard": guard}


def test_the_latency_guard_says_its_level_why_and_each_budget():
    lines = format_status(with_guard(GUARD_OK)).splitlines()
    assert lines[0].split()[4] == "trading"
    i = lines.index(next(line for line in lines if line.startswith("latency guard")))
    assert lines[i] == "latency guard: OK (acts when a stage's p99 stays above a budget for 5000 ms)"
    assert lines[i + 1] == "  p99 us (reduce / halt budget): features 812 (50,000 / 250,000)  fast 0 (40,000 / -) (arming)"
    slow = {**GUARD_OK["stages"]["features"], "p99_us": 70_000.0, "above_ms": 5_300, "samples": 54,
            "lowest_p99_us": 61_000.0, "breach": "REDUCING"}
    reducing = {**GUARD_OK, "level": 1, "state": "REDUCING", "reason": REASON, "for_ms": 3_200, "trips": 1,
                "stages": {**GUARD_OK["stages"], "features": slow}}
    lines = format_status(with_guard(reducing)).splitlines()
    assert lines[0].split()[4] == "REDUCING"
    i = lines.index(next(line for line in lines if line.startswith("latency guard")))
    assert lines[i] == f"latency guard: REDUCING for 3.2 s: {REASON}; only an operator's resume lifts it"
    assert "features 70,000 (50,000 / 250,000) above for 5.3 s REDUCING  fast" in lines[i + 1]
    halted = {**reducing, "level": 2, "state": "HALTED"}
    assert format_status(with_guard(halted, halted=True)).splitlines()[0].split()[4] == "HALTED"


def test_without_budgets_the_guard_has_no_lines():
    for guard in (None, {**GUARD_OK, "stages": {}}):
        text = format_status(with_guard(guard))
        assert "latency guard" not in text and text.splitlines()[0].split()[4] == "trading"
