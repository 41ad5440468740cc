"""`python -m pipeline report` on a temp journal written by ``pipeline.trading.journal``: the table, the
JSON, the options, and its errors as one line (no supervisor needed: it only reads the journal); and
`status` naming the instruments of the position / P&L lines by their configured symbols."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import pipeline.__main__ as cli
from pipeline.__main__ import main
from pipeline.trading.journal import Journal
from tests.support.configtext import INSTRUMENTS, dirs, process, ring
from tests.support.paths import REPO_ROOT
from tests.support.processes import child_env

RECORDS = [
    {"t": "intent", "oid": 1, "coid": "c1", "iid": 1, "sym": "BTCUSDT", "side": 1, "tif": 2, "px": 50_000.0,
     "sz": 0.0004, "oseq": 1, "ts_ms": 1000},
    {"t": "fill", "oid": 1, "tid": 1, "px": 50_000.0, "sz": 0.0004, "side": 1, "iid": 1, "ts_ms": 1000},
    {"t": "intent", "oid": 2, "coid": "c2", "iid": 1, "sym": "BTCUSDT", "side": 2, "tif": 3, "px": 50_100.0,
     "sz": 0.0002, "oseq": 2, "ts_ms": 2000},
    {"t": "fill", "oid": 2, "tid": 2, "px": 50_100.0, "sz": 0.0002, "side": 2, "iid": 1, "ts_ms": 2000},
]
# maker 0 bps, taker 10 bps: the post-only buy pays 0, the IOC sell 10.02 * 10 bp = 0.01002
# cash -20 + 10.02 = -9.98; long 0.0002 at the mid 50,050 = 10.01 -> gross 0.03, net 0.01998 (never below 0)


def setup(tmp_path):
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(dirs(tmp_path) + ring("orders", payload=128) + ring("exec", payload=128) + INSTRUMENTS
                   + process("sender", "procs.sender:SenderAgent", inputs=["orders"], outputs=["exec"])
                   + process("risk", "procs.risk:RiskAgent", inputs=["exec"], outputs=["orders"])
                   + "[processes.params.limits]\nmax_gross_notional = 100.0\n")
    j = Journal(tmp_path / "run" / "sender.journal")
    j.open()
    for rec in RECORDS:
        j.append(rec)
    j.close()
    return cfg


FEES = ["--maker-fee-bps", "0", "--taker-fee-bps", "10"]


def test_report_prints_the_table_with_estimated_fees_and_the_marks_used(tmp_path, capsys):
    cfg = setup(tmp_path)
    assert main(["--config", str(cfg), "report", *FEES, "--mid", "BTCUSDT=50050"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"journal {tmp_path / 'run' / 'sender.journal'}: 4 records, 2 fills"
    assert out[1].startswith("fees: ESTIMATED (the journal records none): maker 0 bps, taker 10 bps")
    assert out[2] == "marks: BTCUSDT at the mid given, 50,050"
    assert out[3] == "max drawdown against a capital of 100.00"  # the risk limits' max_gross_notional
    assert out[5].split() == ["BTCUSDT", "0.0002", "0.02", "0.03", "0.01", "2", "0", "-", "0.00%"]
    assert out[6].split() == ["total", "-", "0.02", "0.03", "0.01", "2", "0", "-", "0.00%"]


def test_report_json_through_the_real_entry_point(tmp_path):
    cfg = setup(tmp_path)
    r = subprocess.run([sys.executable, "-m", "pipeline", "--config", str(cfg), "report", "--json", *FEES,
                        "--mid", "1=50050", "--capital", "1000"], cwd=REPO_ROOT, env=child_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["journal"] == str(tmp_path / "run" / "sender.journal") and rep["fees_estimated"] is True
    assert (rep["maker_fee_bps"], rep["taker_fee_bps"], rep["capital"]) == (0.0, 10.0, 1000.0)
    btc = rep["instruments"]["BTCUSDT"]
    assert btc["position"] == pytest.approx(0.0002) and btc["fees"] == pytest.approx(0.01002)
    assert (btc["gross_pnl"], btc["net_pnl"]) == pytest.approx((0.03, 0.01998))
    assert rep["total"]["net_pnl"] == pytest.approx(0.01998) and rep["total"]["verdicts"]["win_rate"] == "N/A"


def test_report_errors_are_one_line(tmp_path, capsys):
    cfg = setup(tmp_path)
    assert main(["--config", str(cfg), "report", "--mid", "DOGE=1"]) == 2
    assert capsys.readouterr().err == "error: --mid 'DOGE=1': want SYMBOL=PRICE with SYMBOL one of BTCUSDT, ETHUSDT\n"
    assert main(["--config", str(cfg), "report", "--mid", "BTCUSDT=abc"]) == 2
    assert capsys.readouterr().err == ("error: --mid 'BTCUSDT=abc': want SYMBOL=PRICE with SYMBOL one of BTCUSDT, "
                                       "ETHUSDT\n")
    assert main(["--config", str(cfg), "report", "--capital", "0"]) == 2
    assert capsys.readouterr().err == "error: capital must be finite and > 0, got 0.0\n"
    missing = tmp_path / "nope.journal"
    assert main(["--config", str(cfg), "report", "--journal", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: {missing}: No such file or directory\n"


def test_status_names_the_instruments_of_the_position_lines_by_symbol(tmp_path, capsys, monkeypatch):
    cfg = setup(tmp_path)
    stage = {"state": "ACTIVE", "pos_lots_1": 2.0, "pos_lots_2": 0, "pnl_1": 0.02, "pnl_2": 0.0}
    proc = {"name": "risk", "state": "RUNNING", "pid": 7, "core": 1, "wait": "busy-spin", "restarts": 0,
            "msgs_in": 1, "msgs_out": 1, "depth": 0, "drops": 0, "crc_errors": 0, "p50_us": 1.0, "p99_us": 1.0,
            "heartbeat_age_ms": 1, "errors": 0, "last_error": "", "recoveries_ms": [], "stage": stage}
    snap = {"supervisor_pid": 1, "halted": False, "plan": "p", "launcher": "fork", "run_epoch": 1,
            "processes": [proc], "rings": []}
    monkeypatch.setattr(cli, "request", lambda cfg, req, **kw: {"ok": True, "status": snap})
    assert main(["--config", str(cfg), "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines if line.startswith(("BTCUSDT", "ETHUSDT"))] == [
        ["BTCUSDT", "(1)", "risk", "2.0", "0.02"], ["ETHUSDT", "(2)", "risk", "0", "0.00"]]
