"""``python -m bench.chaos`` (``make chaos``): run the scenarios (``--only``, ``--quick``) and write
report.md and results.json (``bench.chaos``'s docstring says what they hold); the exit status is
``exit_status``'s."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec

from bench import report
from bench.chaos import __doc__ as chaos_doc
from bench.chaos.flow import ledger_table
from bench.chaos.harness import FAIL, INCONCLUSIVE, PASS, VERDICTS, ChaosPipeline, Row, exit_status
from bench.chaos.registry import scenarios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=chaos_doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter scenarios (what the tests run)")
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out_dir, machine = report.start("chaos", args.out)
    rows: list[Row] = []
    for name, fn in scenarios():
        if args.only and name not in args.only.split(","):
            continue
        print(f"-- {name}", flush=True)
        t0 = time.monotonic()
        try:
            row = fn(ChaosPipeline, args.quick)
        except Exception as exc:  # a scenario that cannot run is a failure, reported as such
            row = Row(scenario=name, injected="(did not run)", did=f"{type(exc).__name__}: {exc}"[:500], figure="-",
                      verdict=FAIL)
        row.details["seconds"] = round(time.monotonic() - t0, 1)
        print(f"   {row.verdict}: {row.figure}", flush=True)
        rows.append(row)
    n = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    md = [f"# Chaos report {machine['date']}", "", report.machine_line(machine),
          f"{n[PASS]} of {len(rows)} scenarios passed, {n[FAIL]} failed, {n[INCONCLUSIVE]} inconclusive"
          + (" (quick mode)" if args.quick else "") + ".",
          "", "| scenario | injected | what the pipeline did | measured | verdict |", "|---|---|---|---|---|"]
    md += [f"| {r.scenario} | {r.injected} | {r.did} | {r.figure} | {r.verdict} |" for r in rows]
    md += ledger_table(rows)
    report.write(out_dir, {"machine": machine, "quick": args.quick, "verdicts": n,
                           "rows": [msgspec.to_builtins(r) for r in rows]}, md)
    return exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
