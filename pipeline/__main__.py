"""Command line: ``python -m pipeline up | down | status | restart NAME | halt | kill-switch | resume | report``.

``up`` runs the supervisor in the foreground (``make up``) with a live status view; ``report`` reads
the order sender's journal (only reads it: a running sender is not disturbed) and prints the P&L and
the evaluation's metrics per instrument (``pipeline.trading.evaluation.journal_report``); the others
talk to it over the control socket. ``down`` with no supervisor answering cleans what a killed one left
(under the run lock: never what a live supervisor that holds it is using).

Exit status: 0 done; 1 the supervisor refused the request, or ``down`` could not finish; 2 an error
stopped the command, printed as one line ``error: ...`` on stderr (a config error, another
supervisor already running, a stage that cannot start and why, a file that cannot be created with
its path and the OS's reason, no supervisor answering, a journal that cannot be read, a bad ``--mid``
or ``--capital``); never a traceback for these.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pipeline.runtime.config import load_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ControlError, PipelineError
from pipeline.runtime.log import open_event_log
from pipeline.runtime.supervisor import PID_FILE, RunLock, RunLockHeld, Supervisor, clean_stale, format_status
from pipeline.trading.evaluation.journal_report import (DEFAULT_MAKER_FEE_BPS, DEFAULT_TAKER_FEE_BPS, build_report,
                                                        format_report, parse_journal, read_journal, risk_capital,
                                                        sender_journal_path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/default.toml", help="TOML config (default: %(default)s)")
    common = argparse.ArgumentParser(add_help=False)  # --config is accepted after the command too
    common.add_argument("--config", default=argparse.SUPPRESS, help="TOML config")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", parents=[common], help="create the rings, start and supervise every process (foreground)")
    up.add_argument("--status-every", type=float, default=1.0, help="seconds between status views (0: none)")
    up.add_argument("--run-for", type=float, default=None, help="stop after this many seconds")
    sub.add_parser("down", parents=[common], help="stop every process and remove every segment")
    sub.add_parser("status", parents=[common], help="print the supervisor's status table")
    rs = sub.add_parser("restart", parents=[common], help="restart one process while the others keep running")
    rs.add_argument("name")
    sub.add_parser("halt", parents=[common], help="tell the risk gateway to stop trading (CONTROL HALT)")
    sub.add_parser("kill-switch", parents=[common],
                   help="tell the risk gateway to halt, cancel every working order and stay halted (CONTROL KILL_SWITCH)")
    sub.add_parser("resume", parents=[common], help="tell the risk gateway to resume (CONTROL RESUME)")
    _add_report_parser(sub, common)
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
        if args.cmd == "up":
            sup = cfg.supervisor
            try:
                log = open_event_log("supervisor", sup.log_dir, sup.log_max_bytes, sup.log_backups)
            except OSError as exc:
                print(f"error: cannot open the supervisor log in {sup.log_dir}: {exc.strerror or exc}"
                      + (f" ({exc.filename})" if exc.filename else ""), file=sys.stderr)
                return 2
            return Supervisor(cfg, args.config, log, out=sys.stdout).up(status_every_s=args.status_every, run_for_s=args.run_for)
        if args.cmd == "down":
            return _down(cfg)
        if args.cmd == "status":
            resp = request(cfg, {"cmd": "status"})
            print(format_status(resp["status"], symbols={i.id: i.symbol for i in cfg.instruments}))
            return 0
        if args.cmd == "report":
            return _report(cfg, args)
        req = {"cmd": args.cmd}
        if args.cmd == "restart":
            req["name"] = args.name
        resp = request(cfg, req)
        if not resp.get("ok"):
            print(f"error: {resp.get('error')}", file=sys.stderr)
            return 1
        print(f"{args.cmd}: ok")
        return 0
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the command needed; one line, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def _add_report_parser(sub, common) -> None:
    rp = sub.add_parser("report", parents=[common],
                        help="P&L and the evaluation's metrics per instrument from the order sender's journal (read only)")
    rp.add_argument("--journal", default=None,
                    help="the journal file (default: the sender's journal_path in the config, else <run_dir>/<name>.journal)")
    rp.add_argument("--maker-fee-bps", type=float, default=DEFAULT_MAKER_FEE_BPS,
                    help="fee estimate for post-only orders' fills (default: %(default)s, the evaluation's: Bitget spot)")
    rp.add_argument("--taker-fee-bps", type=float, default=DEFAULT_TAKER_FEE_BPS,
                    help="fee estimate for the other fills (default: %(default)s, the evaluation's: Bitget spot)")
    rp.add_argument("--capital", type=float, default=None,
                    help="capital the drawdown is measured against (default: the risk limits' max_gross_notional)")
    rp.add_argument("--mid", action="append", default=[], metavar="SYMBOL=PRICE",
                    help="the latest mid of an instrument, to value its open position (default: its last fill price)")
    rp.add_argument("--json", action="store_true", help="print the report as one JSON object")


def _report(cfg, args) -> int:
    """``report``: the journal's metrics as a table (or JSON). Returns the exit status: 2 for a bad
    ``--mid`` / ``--capital`` (one line on stderr); OSError (the journal cannot be read) and ConfigError
    (no sender in the config and no ``--journal``) go to ``main``'s handlers."""
    ids = {i.symbol: i.id for i in cfg.instruments}
    mids = {}
    for text in args.mid:
        sym, _, price = text.partition("=")
        iid = ids.get(sym) or (int(sym) if sym.isdigit() and int(sym) in ids.values() else None)
        try:
            value = float(price)
        except ValueError:
            value = None
        if iid is None or value is None:
            print(f"error: --mid {text!r}: want SYMBOL=PRICE with SYMBOL one of {', '.join(ids)}", file=sys.stderr)
            return 2
        mids[iid] = value
    path = Path(args.journal) if args.journal else sender_journal_path(cfg)
    capital = args.capital if args.capital is not None else risk_capital(cfg)
    try:
        rep = build_report(parse_journal(read_journal(path)), {v: k for k, v in ids.items()}, capital=capital,
                           maker_fee_bps=args.maker_fee_bps, taker_fee_bps=args.taker_fee_bps, mids=mids)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"journal": str(path), **rep}, indent=2) if args.json else format_report(rep, source=str(path)))
    return 0


def _down(cfg) -> int:
    """Ask the supervisor to go down and wait for it; with none answering, clean what a killed one
    left, holding the run lock meanwhile (a supervisor that holds it is alive: nothing is touched).
    Returns the exit status.

    Raises:
        StartupError: the run's pid file cannot be opened or locked for a reason other than another
            holder (the path and the OS's reason).
    """
    pid_file = Path(cfg.supervisor.run_dir) / PID_FILE
    try:
        request(cfg, {"cmd": "down"}, timeout_ms=2_000)
    except ControlError:
        lock = RunLock(cfg.supervisor.run_dir)
        try:
            lock.acquire(create=False, write_pid=False)
        except FileNotFoundError:
            pass  # no pid file: no supervisor holds the lock
        except RunLockHeld as exc:  # a live supervisor that does not answer: touch nothing of it
            who = f"pid {exc.pid}" if exc.pid else "pid unknown"
            print(f"error: a supervisor ({who}) holds the run lock {pid_file} but did not answer `down` on "
                  f"{cfg.control_endpoint()} (hung?); nothing was cleaned: try again, or stop it with SIGTERM",
                  file=sys.stderr)
            return 1
        try:
            removed = clean_stale(cfg, keep_pid_file=lock.held)
            if lock.release(unlink=True):
                removed.append(str(pid_file))
        finally:
            lock.release()
        print("no supervisor running; " + (f"cleaned: {', '.join(removed)}" if removed else "nothing to clean"))
        return 0
    deadline = time.monotonic() + cfg.supervisor.stop_grace_ms / 1000 + 10
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_file.exists():
        print("error: the supervisor did not finish stopping in time", file=sys.stderr)
        return 1
    print("down: every process stopped, every segment removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
