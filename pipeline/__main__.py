"""Command line: ``python -m pipeline up | down | status | restart NAME | halt | kill-switch | resume``.

``up`` runs the supervisor in the foreground (``make up``) with a live status view; the others talk
to it over the control socket. ``down`` with no supervisor answering cleans what a killed one left.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pipeline.config import load_config
from pipeline.control import request
from pipeline.errors import ControlError, PipelineError
from pipeline.log import open_event_log
from pipeline.supervisor import Supervisor, clean_stale, format_status


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
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
        if args.cmd == "up":
            sup = cfg.supervisor
            log = open_event_log("supervisor", sup.log_dir, sup.log_max_bytes, sup.log_backups)
            return Supervisor(cfg, args.config, log, out=sys.stdout).up(status_every_s=args.status_every, run_for_s=args.run_for)
        if args.cmd == "down":
            return _down(cfg)
        if args.cmd == "status":
            resp = request(cfg, {"cmd": "status"})
            print(format_status(resp["status"]))
            return 0
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


def _down(cfg) -> int:
    pid_file = Path(cfg.supervisor.run_dir) / "supervisor.pid"
    try:
        request(cfg, {"cmd": "down"}, timeout_ms=2_000)
    except ControlError:
        removed = clean_stale(cfg)
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
