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
