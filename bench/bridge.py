"""The bridge's hop cost against a local ring, one run: ``python -m bench.bridge [--quick] [--out DIR]``.

Scenarios (each one producer process and one consumer process, BOOK-sized messages of 504 bytes at
1,000/s, the first ``warmup`` discarded; ``bench.bridge_ends`` holds the ends):

- ``ring``: the shared-memory ring between two processes of one host (the single-host figure);
- ``bridge-loopback``: MdOutShell -> MdInShell over tcp 127.0.0.1, plain (one host);
- ``bridge-veth-curve``: the same between two network namespaces joined by a veth pair, CurveZMQ (the
  two-host picture on one machine; needs root and ip(8), else the row says why it did not run);
- ``order-rtt-loopback`` / ``order-rtt-veth-curve``: a shard's INTENT to the shared gateway and its
  EXEC back (round trip at the shard, the gateway's checks included).

Statistic, fixed before the first run: per scenario the one-way latency send -> delivered
(CLOCK_MONOTONIC, one clock for every namespace of the machine; round trip for the order rows),
p50 / p99 / p99.9 from an HdrHistogram (``bench.report.hdr_summary``); the bridge's hop cost is
reported as its p50 minus the ring's p50 in the same run. Figures only: no limit is judged, so there
is no verdict. Consumers poll without parking in every scenario (like for like).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.report import REPO, hdr_summary, machine_line, start, write
from pipeline.runtime.bridge import curve

PLAIN = {"mode": "plain-loopback"}


def _netns_reason() -> str:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip(8)"
    return ""


class Namespaces:
    """Two namespaces ``<tag>a`` (10.202.0.1) and ``<tag>b`` (10.202.0.2) joined by one veth pair;
    removed by ``close`` (deleting a namespace removes its end of the pair)."""

    def __init__(self, tag: str):
        self.a, self.b = f"{tag}a", f"{tag}b"
        for ns in (self.a, self.b):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", f"{tag}va", "netns", self.a, "type", "veth", "peer", "name", f"{tag}vb", "netns", self.b)
        for ns, dev, addr in ((self.a, f"{tag}va", "10.202.0.1/24"), (self.b, f"{tag}vb", "10.202.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")

    def close(self) -> None:
        for ns in (self.a, self.b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _end(role: str, spec: dict, ns: str | None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "bench.bridge_ends", role, json.dumps(spec)]
    if ns:
        argv = ["ip", "netns", "exec", ns, *argv]
    return subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _pair(consumer: tuple, producer: tuple, out: Path, timeout_s: float) -> np.ndarray:
    """Run a consumer and a producer end to completion (the producer, or a server, is stopped once
    the consumer is done); the consumer's latencies."""
    c = _end(*consumer)
    p = _end(*producer)
    try:
        c.wait(timeout_s + 30)
    finally:
        for proc in (p, c):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return np.load(out) if out.exists() else np.zeros(0, np.int64)


def run(quick: bool, tmp: Path) -> dict:
    n, warmup = (500, 50) if quick else (5_000, 200)
    base = {"n": n, "warmup": warmup, "rate_per_s": 1_000, "settle_s": 0.5, "timeout_s": n / 1_000 + 10}
    rows: dict[str, dict] = {}
    from ringbuf.ring import Ring
    ring_name = f"bbr{os.getpid()}"
    ring = Ring.create(ring_name, slot_size=576, capacity=4096, full_policy="drop", replace=True)
    try:
        spec = {**base, "ring": ring_name, "out": str(tmp / "ring.npy")}
        rows["ring"] = hdr_summary(_pair(("ring-reader", spec, None), ("ring-writer", spec, None), tmp / "ring.npy",
                                         spec["timeout_s"]), curve=())
    finally:
        ring.close()
        Ring.unlink(ring_name)
    lo = {**base, "pub": "tcp://127.0.0.1:7311", "snap": "tcp://127.0.0.1:7312", "security": PLAIN,
          "out": str(tmp / "lo.npy")}
    rows["bridge-loopback"] = hdr_summary(_pair(("md-in", lo, None), ("md-out", lo, None), tmp / "lo.npy",
                                                lo["timeout_s"]), curve=())
    olo = {**base, "endpoint": "tcp://127.0.0.1:7313", "security": PLAIN, "out": str(tmp / "olo.npy")}
    rows["order-rtt-loopback"] = _orders(olo, None, None, tmp / "olo.npy")
    why = _netns_reason()
    if why:
        rows["bridge-veth-curve"] = rows["order-rtt-veth-curve"] = {"n": 0, "not_run": why}
        return rows
    _veth_rows(base, tmp, rows)
    return rows


def _orders(spec: dict, gw_ns: str | None, shard_ns: str | None, out: Path) -> dict:
    gw = {**spec, "security": spec.get("gw_security", spec["security"])}
    return hdr_summary(_pair(("shard", spec, shard_ns), ("gateway", gw, gw_ns), out, spec["timeout_s"]), curve=())


def _veth_rows(base: dict, tmp: Path, rows: dict) -> None:
    keys = tmp / "keys"
    for name in ("server", "client"):
        curve.generate(keys, name)
    (keys / "allowed").mkdir()
    shutil.copy(keys / "client.key", keys / "allowed" / "client.key")
    server = {"mode": "curve", "secret_key_file": str(keys / "server.key_secret"),
              "authorized_keys_dir": str(keys / "allowed")}
    client = {"mode": "curve", "secret_key_file": str(keys / "client.key_secret"),
              "server_key_file": str(keys / "server.key")}
    ns = Namespaces(f"bb{os.getpid() % 10000}")
    try:
        md = {**base, "pub": "tcp://10.202.0.1:7321", "snap": "tcp://10.202.0.1:7322", "out": str(tmp / "veth.npy")}
        rows["bridge-veth-curve"] = hdr_summary(_pair(("md-in", {**md, "security": client}, ns.b),
                                                      ("md-out", {**md, "security": server}, ns.a),
                                                      tmp / "veth.npy", md["timeout_s"]), curve=())
        o = {**base, "endpoint": "tcp://10.202.0.1:7323", "security": client, "gw_security": server,
             "out": str(tmp / "oveth.npy")}
        rows["order-rtt-veth-curve"] = _orders(o, ns.a, ns.b, tmp / "oveth.npy")
    finally:
        ns.close()


def report(rows: dict, machine: dict, quick: bool) -> list[str]:
    md = ["# Bridge hop cost against a local ring", "", machine_line(machine),
          f"Mode: {'quick' if quick else 'full'}; 504-byte messages at 1,000/s; consumers poll without parking.", "",
          "| scenario | n | p50 µs | p99 µs | p99.9 µs | max µs |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if r.get("n"):
            md.append(f"| {name} | {r['n']} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | {r['p999_us']:.1f} | {r['max_us']:.1f} |")
        else:
            md.append(f"| {name} | 0 | not run: {r.get('not_run', 'no samples')} | | | |")
    ring = rows.get("ring", {})
    for name in ("bridge-loopback", "bridge-veth-curve"):
        if ring.get("n") and rows.get(name, {}).get("n"):
            md.append(f"\n{name}: hop cost over the ring, p50 {rows[name]['p50_us'] - ring['p50_us']:.1f} µs.")
    return md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bridge", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="500 messages a scenario (a smoke run, not figures)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out_dir, machine = start("bridge", args.out)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args.quick, Path(tmp))
    results = {"machine": machine, "quick": args.quick, "rows": rows, "wall_s": round(time.monotonic() - t0, 1)}
    write(out_dir, results, report(rows, machine, args.quick))
    return 0 if all(r.get("n") or r.get("not_run") for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
