"""The pipeline bench's two-host scenario (issue #28): tick -> order sent through the bridge, beside the
single-host figure of the same run, and the bridge's own hop cost.

``python -m bench.pipeline_twohost [--quick] [--seconds S] [--out DIR]`` runs, in one process:

1. the single-host pipeline (``bench.pipeline.run_scenario``: venue, feed, features, fast, risk, sender
   on this host, no slow path) for ``--seconds``;
2. the same graph split over two hosts, each a network namespace joined to the other by a veth pair
   (addresses only inside them), the bridge between them over CurveZMQ (keys made by
   ``pipeline.runtime.bridge.curve``, the key command)::

       host F (10.202.1.1): venue -> feed -> md -> md_out ==PUB/SUB==> md_in -> md -> features -> fast
                            gateway -> orders -> sender -> venue    <==   -> risk -> orders -> shard
                            sender -> exec -> gateway =====EXEC=====>  shard -> exec -> risk
                                                          host S (10.202.1.2)

   Host F is the feed and shared risk gateway + sender host, host S a strategy shard; each runs under
   its own supervisor. Every stage stamps its latency since the feed's receive time of the venue frame
   (``ts_origin_ns``, carried across the bridge in each message's header; CLOCK_MONOTONIC is one clock
   for every namespace of the machine).

Figures (HdrHistogram, ``bench.report.hdr_summary``), each over the same measured window:

- ``order_sent``: frame received -> order request sent, fast path (the sender's tap), single-host and
  two-host; their p50 difference is what the two bridge hops add end to end;
- the bridge's own hop cost, each from two taps of the two-host run: market data (``md_in`` wrote the
  BOOK minus ``feed`` wrote it) and orders (``gateway`` wrote the ORDER minus ``risk`` decided it).

A scenario that cannot run (no root for namespaces, a pipeline that did not come up) is a row that says
why. Results: ``results.json`` and ``report.md`` in ``bench/results/<UTC>-pipeline-twohost/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench.pipeline import _status, run_scenario
from bench.pipeline_config import (KEY, RINGS, RISK_LIMITS, VENUE_RATE_LIMIT_PER_S, Scenario, _instruments, _place,
                                   fast_params, model_path, venue_params)
from bench.pipeline_figures import STAGES
from bench.report import hdr_summary, start, write
from pipeline.runtime.agent import LATENCY_DIR_ENV, MARK_DECIDED, mark_code
from pipeline.runtime.config import load_config
from pipeline.trading.messages import Kind, OrderOrigin

REPO = Path(__file__).resolve().parents[1]
ADDR = {"F": "10.202.1.1", "S": "10.202.1.2"}
MD_PORT, SNAP_PORT, GW_PORT = 7300, 7301, 7302
PEER_TIMEOUT_MS = 2_000  # the bridge's silence bound here: a bench measures latency, not failover
_STAGE = {key: (proc, code) for key, _, proc, code in STAGES}
FAST = (OrderOrigin.FAST, OrderOrigin.RISK)
#: (key, label, process, tap codes) of the two-host run beyond bench.pipeline's STAGES
HOPS = [
    ("md_written_f", "BOOK written (feed, host F)", "feed", (Kind.BOOK,)),
    ("md_written_s", "BOOK written (md_in, host S)", "md_in", (Kind.BOOK,)),
    ("decided_s", "order decision, fast path (risk, host S)", "risk", tuple(mark_code(MARK_DECIDED, o) for o in FAST)),
    ("order_written_f", "ORDER written (gateway, host F)", "gateway", (Kind.ORDER,)),
]


# ------------------------------------------------------------------------------------- configs
def _sup(tmp: Path, host: str, prefix: str) -> str:
    control = {"control_ring": "control"} if host == "S" else {}  # the risk stage's control ring is on S
    return ct.supervisor(shm_prefix=f"{prefix}{host.lower()}", run_dir=str(tmp / host / "run"),
                         log_dir=str(tmp / host / "logs"), **control, poll_interval_ms=10, heartbeat_interval_ms=100,
                         stop_grace_ms=3000)


def _sec(keys: Path, me: str, *, server: str = "", allowed: str = "") -> dict:
    out = {"mode": "curve", "secret_key_file": str(keys / f"{me}.key_secret")}
    if server:
        out["server_key_file"] = str(keys / f"{server}.key")
    if allowed:
        out["authorized_keys_dir"] = str(keys / allowed)
    return out


def twohost_configs(sc: Scenario, tmp: Path, keys: Path, prefix: str) -> dict[str, str]:
    """The config text of host F and host S (see the module docstring) for scenario ``sc``: run and
    log folders under ``tmp/F`` and ``tmp/S``, shm prefixes ``prefix`` + f / s, keys in ``keys``."""
    run_f = tmp / "F" / "run"
    rings = {r[0]: ct.ring(*r) for r in RINGS}
    shard_of = {"1": [i + 1 for i in range(sc.instruments)]}
    f = [
        ct.process("venue", "procs.venue:VenueAgent", wait="back-off", params=venue_params(sc, run_f)),
        ct.process("feed", "procs.feed:BitgetFeedAgent", _place(sc, "feed"), outputs=["md"], wait="back-off",
                   params={"port_file": str(run_f / "venue.port"), "channels": list(sc.channels)}),
        ct.process("md_out", "procs.bridge:MdOutAgent", inputs=["md"], wait="back-off", heartbeat_timeout_ms=5000,
                   params={"pub_endpoint": f"tcp://{ADDR['F']}:{MD_PORT}",
                           "snapshot_endpoint": f"tcp://{ADDR['F']}:{SNAP_PORT}",
                           "security": _sec(keys, "md_out", allowed="readers")}),
        ct.process("gateway", "procs.bridge:GatewayAgent", inputs=["exec"], outputs=["orders"], wait="back-off",
                   heartbeat_timeout_ms=5000,
                   params={"endpoint": f"tcp://{ADDR['F']}:{GW_PORT}", "shards": shard_of, "limits": RISK_LIMITS,
                           "peer_timeout_ms": PEER_TIMEOUT_MS,
                           "security": _sec(keys, "gateway", allowed="shards")}),
        ct.process("sender", "procs.sender:SenderAgent", _place(sc, "sender"), inputs=["orders"], outputs=["exec"], heartbeat_timeout_ms=5000,
                   params={"venue_port_file": str(run_f / "venue.rest.port"), "key_file": str(KEY),
                           "journal_path": str(run_f / "sender.journal"), "rate_limit_per_s": 10000,
                           "timeout_ms": 500, "endpoint_rate_scale": VENUE_RATE_LIMIT_PER_S / 10.0}),
    ]
    s = [
        ct.process("md_in", "procs.bridge:MdInAgent", outputs=["md"], wait="back-off", heartbeat_timeout_ms=5000,
                   params={"pub_endpoint": f"tcp://{ADDR['F']}:{MD_PORT}",
                           "snapshot_endpoint": f"tcp://{ADDR['F']}:{SNAP_PORT}",
                           "security": _sec(keys, "md_in", server="md_out")}),
        ct.process("features", "procs.features:FeatureAgent", _place(sc, "features"), inputs=["md"], outputs=["feat"]),
        ct.process("fast", "procs.fast:FastAgent", _place(sc, "fast"), inputs=["feat"], outputs=["sig_risk"],
                   params=fast_params(model_path(sc, tmp))),
        ct.process("risk", "procs.risk:RiskAgent", _place(sc, "risk"), inputs=["control", "exec", "sig_risk", "instr"], outputs=["orders"],
                   params={"audit_path": str(tmp / "S" / "logs" / "risk_audit.jsonl"), "limits": RISK_LIMITS}),
        ct.process("shard", "procs.bridge:ShardAgent", inputs=["orders"], outputs=["exec"], wait="back-off",
                   heartbeat_timeout_ms=5000,
                   params={"peer_timeout_ms": PEER_TIMEOUT_MS, "shard_id": 1, "instruments": shard_of["1"], "gateway_endpoint": f"tcp://{ADDR['F']}:{GW_PORT}",
                           "security": _sec(keys, "shard", server="gateway")}),
    ]
    inst = _instruments(sc.instruments)
    return {
        "F": "\n" + ct.blocks(_sup(tmp, "F", prefix), *(rings[r] for r in ("md", "orders", "exec")), *f, *inst),
        "S": "\n" + ct.blocks(_sup(tmp, "S", prefix), *(rings[r] for r in ("md", "feat", "sig_risk", "instr", "orders",
                                                                          "exec", "control")), *s, *inst),
    }


# ------------------------------------------------------------------------------------- namespaces
def namespaces_unavailable() -> str:
    """Why network namespaces cannot be made here ("" when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no ip(8) command"
    return ""


class Namespaces:
    """Hosts F and S: two namespaces, one veth pair; removed by ``close`` whatever happened."""

    def __init__(self, tag: str):
        self.ns = {h: f"bt{tag}{h}" for h in ADDR}

    def __enter__(self) -> Namespaces:
        try:
            for ns in self.ns.values():
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            f_if, s_if = f"{self.ns['F']}v", f"{self.ns['S']}v"
            _ip("link", "add", f_if, "netns", self.ns["F"], "type", "veth", "peer", "name", s_if, "netns", self.ns["S"])
            for h, dev in (("F", f_if), ("S", s_if)):
                _ip("-n", self.ns[h], "addr", "add", f"{ADDR[h]}/24", "dev", dev)
                _ip("-n", self.ns[h], "link", "set", dev, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


# ------------------------------------------------------------------------------------- the run
def _make_keys(keys: Path) -> None:
    subprocess.run([sys.executable, "-m", "pipeline.runtime.bridge.curve", str(keys), "md_out", "md_in", "gateway",
                    "shard"], cwd=REPO, check=True, capture_output=True)
    for folder, name in (("readers", "md_in"), ("shards", "shard")):
        (keys / folder).mkdir()
        shutil.copy(keys / f"{name}.key", keys / folder / f"{name}.key")


def _all_running(cfgs: dict) -> bool:
    for cfg in cfgs.values():
        st = _status(cfg)
        names = {p.name for p in cfg.processes}
        if not st or {p["name"] for p in st["processes"]} != names or any(
                p["state"] != "RUNNING" for p in st["processes"]):
            return False
    return True


def _read_taps(lat_dir: Path, t0: int, t1: int) -> dict:
    taps = {}
    for f in lat_dir.glob("*.lat.npy"):
        rec = np.load(f)
        taps[f.name[: -len(".lat.npy")]] = rec[(rec["at_ns"] >= t0) & (rec["at_ns"] <= t1)]
    return taps


def _lat(taps: dict, proc: str, codes) -> np.ndarray:
    rec = taps.get(proc)
    if rec is None or not len(rec):
        return np.zeros(0, np.int64)
    return rec["lat_ns"][np.isin(rec["code"], np.asarray(codes, dtype=rec["code"].dtype))]


def run_twohost(sc: Scenario, tmp: Path) -> dict:
    """Run the two-host graph for ``sc.seconds``; {key: hdr_summary} of ``order_sent`` and ``HOPS``.

    Raises:
        RuntimeError: a host's pipeline did not come up (its output in the message).
    """
    keys = tmp / "keys"
    _make_keys(keys)
    lat_dir = tmp / "lat"
    lat_dir.mkdir()
    prefix = f"b2{os.getpid() % 10000}"
    texts = twohost_configs(sc, tmp, keys, prefix)
    env = {**os.environ, LATENCY_DIR_ENV: str(lat_dir), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    cfgs, ups = {}, {}
    with Namespaces(str(os.getpid() % 10000)) as nss:
        try:
            for h in ("F", "S"):
                (tmp / h).mkdir(exist_ok=True)
                path = tmp / h / "bench.toml"
                path.write_text(texts[h])
                cfgs[h] = load_config(path)
                out = open(tmp / h / "up.out", "wb")
                ups[h] = subprocess.Popen(["ip", "netns", "exec", nss.ns[h], sys.executable, "-m", "pipeline",
                                           "--config", str(path), "up", "--status-every", "0"], cwd=REPO, env=env,
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                out.close()
            deadline = time.monotonic() + 90
            while not _all_running(cfgs):
                dead = [h for h, up in ups.items() if up.poll() is not None]
                if dead or time.monotonic() > deadline:
                    why = "; ".join(f"{h}: {(tmp / h / 'up.out').read_text()[-1500:]}" for h in (dead or ups))
                    raise RuntimeError(f"two-host pipeline did not come up: {why}")
                time.sleep(0.2)
            time.sleep(2.0)  # warm-up: books across the bridge, the risk's SYNC through the shard, first signals
            t0 = time.monotonic_ns()
            time.sleep(sc.seconds)
            t1 = time.monotonic_ns()
        finally:
            for h, path in ((h, tmp / h / "bench.toml") for h in ups):
                subprocess.run([sys.executable, "-m", "pipeline", "--config", str(path), "down"], cwd=REPO,
                               capture_output=True, timeout=60)
            for up in ups.values():
                try:
                    up.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(up.pid, signal.SIGKILL)
                    up.wait()
    taps = _read_taps(lat_dir, t0, t1)
    proc, codes = _STAGE["order_sent"]
    out = {"order_sent": hdr_summary(_lat(taps, proc, codes))}
    for key, _, proc, codes in HOPS:
        out[key] = hdr_summary(_lat(taps, proc, codes))
    return out


# ------------------------------------------------------------------------------------- report
def _p50(row: dict | None) -> float | None:
    return row.get("p50_us") if row and row.get("n") else None


def hop_costs(single: dict, two: dict) -> dict:
    """p50 differences (µs; None where a side has no sample): ``end_to_end`` (two-host order_sent
    minus single-host), ``md_hop`` (md_in's BOOK minus feed's), ``order_hop`` (gateway's ORDER minus
    risk's decision)."""
    def diff(a, b):
        return None if a is None or b is None else round(a - b, 1)
    return {"end_to_end": diff(_p50(two.get("order_sent")), _p50(single.get("order_sent"))),
            "md_hop": diff(_p50(two.get("md_written_s")), _p50(two.get("md_written_f"))),
            "order_hop": diff(_p50(two.get("order_written_f")), _p50(two.get("decided_s")))}


def report(results: dict) -> list[str]:
    """report.md's lines of ``results`` (``machine``, ``quick``, ``seconds``, ``single``, ``two`` (or
    ``two_not_run``), ``hops``)."""
    m = results["machine"]
    md = ["# Pipeline bench: two hosts (network namespaces) vs one", "",
          f"Machine: {m['cores']} cores, Python {m['python']}, {m['platform']}; load {m['load_avg']}. "
          f"{'Quick smoke run, not figures. ' if results['quick'] else ''}"
          f"Window {results['seconds']} s per run; latencies since the feed's receive stamp of the venue frame.", "",
          "| run | stage | n | p50 µs | p99 µs | p99.9 µs | max µs |", "|---|---|---|---|---|---|---|"]

    def row(run: str, label: str, r: dict | None) -> str:
        if not r or not r.get("n"):
            return f"| {run} | {label} | 0 | | | | |"
        return (f"| {run} | {label} | {r['n']} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | {r['p999_us']:.1f} | "
                f"{r['max_us']:.1f} |")
    md.append(row("single host", "order request sent, fast path", results["single"].get("order_sent")))
    if results.get("two_not_run"):
        md.append(f"| two hosts | not run: {results['two_not_run']} | | | | | |")
    else:
        two = results["two"]
        md.append(row("two hosts", "order request sent, fast path", two.get("order_sent")))
        for key, label, _, _ in HOPS:
            md.append(row("two hosts", label, two.get(key)))
        hops = results["hops"]
        md += [""] + [f"{name}: p50 {'n/a' if v is None else f'{v:.1f} µs'}." for name, v in (
            ("Two bridge hops end to end (two-host minus single-host order sent)", hops["end_to_end"]),
            ("Bridge hop, market data (md_in BOOK minus feed BOOK)", hops["md_hop"]),
            ("Bridge hop, orders (gateway ORDER minus risk decision)", hops["order_hop"]))]
    return md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline_twohost", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 2 s window per run (a smoke run, not figures)")
    ap.add_argument("--seconds", type=float, default=None, help="the measured window per run (default 10)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 10.0)
    sc = Scenario("twohost", rate=1_000, instruments=1, seconds=seconds, llm=False, model="hand-set", warm=False)
    out_dir, machine = start("pipeline-twohost", args.out)
    single = run_scenario(sc)
    results = {"machine": machine, "quick": args.quick, "seconds": seconds,
               "single": {"order_sent": single["stages"]["order_sent"]}}
    why = namespaces_unavailable()
    if why:
        results["two_not_run"] = why
    else:
        with tempfile.TemporaryDirectory(prefix="bench-twohost-") as tmpname:
            tmp = Path(tmpname)
            try:
                results["two"] = run_twohost(sc, tmp)
            except RuntimeError as exc:
                results["two_not_run"] = str(exc)[:2000]
    if "two" in results:
        results["hops"] = hop_costs(results["single"], results["two"])
    write(out_dir, results, report(results))
    return 0 if "two" in results and results["two"]["order_sent"].get("n") else 1


if __name__ == "__main__":
    sys.exit(main())
