"""Smoke test of the replay stress mode: ``python -m bench.pipeline --stress --replay CAPTURE --speed K`` runs
one scenario of the real Bitget capture through the whole pipeline, with order requests lost on their way
to the venue, and reports it in the replay table's columns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.stress_report import COLUMNS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_replay_scenario_reports_throughput_p99_and_the_accepted_share(tmp_path, capture_path):
    name = "bitget-order-drop-5pct"
    proc = subprocess.run([sys.executable, "-m", "bench.pipeline", "--stress", "--replay", str(capture_path), "--speed",
                           "10", "--seconds", "2", "--only", name, "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["replay"] == {"kind": "bitget", "path": str(capture_path), "speed": 10.0}
    [res] = doc["results"]
    assert "error" not in res, res.get("error")
    assert res["books_per_s"] > 0 and res["stages"]["signal"]["n"] > 0
    o = res["orders"]
    assert o["sent"] > 0 and o["accepted"] + sum(o["rejected"].values()) + o["unresolved"] == o["sent"], o
    # the lossy order path lost some (seed 1 loses the 10th order request: far fewer than a run sends)
    side = res["side"]
    assert side["order_requests"] > 20 and side["dropped"] > 0 and side["upstream_errors"] == 0, side
    report = (tmp_path / "report.md").read_text()
    assert "| " + " | ".join(COLUMNS) + " |" in report
    row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
    cells = dict(zip(COLUMNS, (c.strip() for c in row.strip("|").split("|"))))
    assert cells["source"] == "bitget x10" and cells["noise"] == "order_drop_prob 0.05"
    assert cells["orders sent"] == str(o["sent"]) and cells["accepted by the venue"] == str(o["accepted"])
    assert cells["valid share (accepted / sent)"] == f"{100 * o['accepted'] / o['sent']:.1f} %"
    assert "price jumps within +-3 ticks: applied" in report and "NOT APPLIED" not in report


@pytest.mark.parametrize("argv, says", [
    (["--replay", "x"], "go with --stress"),
    (["--stress", "--replay", "no/such/file"], "is not a file"),
    (["--stress", "--replay-itch", "synthetic", "--speed", "0"], "--speed must be above 0"),
])
def test_a_replay_that_cannot_run_is_refused_before_any_process_starts(argv, says, capsys):
    from bench.pipeline import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err
