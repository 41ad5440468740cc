"""Three hosts in three network namespaces joined by veth pairs (addresses only inside them), the
bridge between them over CurveZMQ with keys made by the setup command:

    ns G (shared gateway, md in) --veth 10.201.1.0/24-- ns A (shard 1, md out)
         \\--veth 10.201.2.0/24-- ns B (shard 2)

Shown: orders from both shards reach the one gateway and are decided once; the aggregate gross
limit holds across shards (each shard alone below it, together above: denied); shard B's link down
for 2 s is detected on both sides within the configured bound, heals, and no order is lost or
decided / reported twice; the md-in bridge SIGKILLed and started again resyncs from a snapshot with
the gap counted exactly. The md-in host runs under a real supervisor (md_in -> ring -> a sink), which
restarts the killed bridge; the other hosts are bare processes (``tests.support.bridgehost``) driving
the same shells. Skipped only where namespaces cannot be
made (not root, no ``ip``); namespaces and processes are removed whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.runtime.bridge.sockets import SeqFile
from pipeline.trading.messages import ExecType
from tests.support.configtext import INSTRUMENTS, process, ring
from tests.support.paths import REPO_ROOT as REPO
from tests.support.processes import child_env

TIMEOUT_MS, HEARTBEAT_MS = 400, 100
DETECT_SLACK_MS = 400  # scheduling on a loaded 2-core box, on top of the configured bound
TAG = f"{os.getpid() % 100000:05d}"
NS = {n: f"mh{TAG}{n}" for n in "GAB"}


def sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=True)


def _can_make_namespaces() -> str:
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no ip(8) command"
    probe = f"mh{TAG}p"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def build_topology() -> None:
    for ns in NS.values():
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    for n, net in (("A", 1), ("B", 2)):
        g_if, x_if = f"mh{TAG}g{n}", f"mh{TAG}{n}g"
        sh("ip", "link", "add", g_if, "netns", NS["G"], "type", "veth", "peer", "name", x_if, "netns", NS[n])
        sh("ip", "-n", NS["G"], "addr", "add", f"10.201.{net}.1/24", "dev", g_if)
        sh("ip", "-n", NS[n], "addr", "add", f"10.201.{net}.2/24", "dev", x_if)
        sh("ip", "-n", NS["G"], "link", "set", g_if, "up")
        sh("ip", "-n", NS[n], "link", "set", x_if, "up")


def teardown() -> None:
    for ns in NS.values():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Hosts:
    """The bridge hosts started, by name; each stopped (SIGTERM, then SIGKILL) by ``stop_all``."""

    def __init__(self, tmp: Path, keys: Path):
        self.tmp, self.keys, self.procs = tmp, keys, {}

    def sec(self, me: str, server: str | None = None, allowed: str | None = None) -> dict:
        out = {"mode": "curve", "secret_key_file": str(self.keys / f"{me}.key_secret")}
        if server:
            out["server_key_file"] = str(self.keys / f"{server}.key")
        if allowed:
            out["authorized_keys_dir"] = str(self.keys / allowed)
        return out

    def start(self, name: str, ns: str, role: str, spec: dict) -> None:
        spec = {**spec, "status": str(self.tmp / f"{name}.json")}
        log = open(self.tmp / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.support.bridgehost", role, json.dumps(spec)],
            cwd=REPO, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)})
        log.close()

    def status(self, name: str) -> dict:
        try:
            return json.loads((self.tmp / f"{name}.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait(self, what: str, cond, timeout_s: float = 8.0) -> None:
        end = time.monotonic() + timeout_s
        while not cond():
            for name, p in self.procs.items():
                assert p.poll() is None, f"{name} died: {(self.tmp / f'{name}.out').read_text()[-2000:]}"
            assert time.monotonic() < end, f"timed out waiting for {what}"
            time.sleep(0.02)

    def wait_value(self, what: str, get, timeout_s: float = 8.0):
        """``get()``'s first truthy value (``wait``'s checks meanwhile)."""
        box = []

        def ready() -> bool:
            value = get()
            if value:
                box.append(value)
            return bool(value)
        self.wait(what, ready, timeout_s)
        return box[-1]

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(3)


def start_md_in_pipeline(pipe, h: Hosts, md: dict, seq_file: Path, sink: Path) -> None:
    """A supervisor in namespace G running md_in (the bridge, restart back-off 500 ms) -> ring md ->
    a BookCounter sink; registered with ``pipe`` so its cleanup (down, kill, shm) covers it."""
    sec = h.sec("mdin", server="mdout")
    keys = f'secret_key_file = "{sec["secret_key_file"]}", server_key_file = "{sec["server_key_file"]}"'
    eps = f'pub_endpoint = "{md["pub"]}", snapshot_endpoint = "{md["snap"]}"'
    pipe.write_config(
        ring("md", payload=512, capacity=1024, policy="drop")
        + process("md_in", "procs.bridge:MdInAgent", outputs=["md"],
                  extra='wait = "back-off"\nrestart = { backoff_initial_ms = 500 }\n',
                  params=f'{eps}, instruments = [1], seq_file = "{seq_file}", security = {{ {keys} }}')
        + process("sink", "BookCounter", inputs=["md"], extra='wait = "back-off"\n', params=f'out = "{sink}"')
        + INSTRUMENTS)
    out = open(pipe.tmp / "supervisor-0.out", "ab")
    sup = subprocess.Popen(["ip", "netns", "exec", NS["G"], sys.executable, "-m", "pipeline", "--config",
                            str(pipe.cfg_path), "up", "--run-for", "60", "--status-every", "0"],
                           cwd=REPO, env=child_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    pipe.supervisors.append(sup)
    pipe.sup = sup
    h.wait("the md-in pipeline RUNNING", lambda: (st := pipe.try_status()) and st["processes"]
           and all(p["state"] == "RUNNING" for p in st["processes"]), 20)


def order(path: Path, oid: int, iid: int, price: float, size: float) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"oid": oid, "iid": iid, "price": price, "size": size}) + "\n")


@pytest.fixture
def hosts(tmp_path):
    why = _can_make_namespaces()
    if why:
        pytest.skip(why)
    keys = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "pipeline.runtime.bridge.curve", str(keys), "gateway", "shard1", "shard2",
                    "mdout", "mdin"], cwd=REPO, check=True, capture_output=True)
    for folder, names in (("shards", ("shard1", "shard2")), ("readers", ("mdin",))):
        (keys / folder).mkdir()
        for n in names:
            shutil.copy(keys / f"{n}.key", keys / folder / f"{n}.key")
    h = Hosts(tmp_path, keys)
    try:
        build_topology()
        yield h
    finally:
        h.stop_all()
        teardown()


def test_two_shards_one_gateway_across_namespaces(hosts, pipe, tmp_path):
    h = hosts
    common = {"timeout_ms": TIMEOUT_MS, "heartbeat_ms": HEARTBEAT_MS}
    limits = {"max_gross_notional": 1000.0, "max_order_lots": 1e6, "max_position_lots": 1e6, "max_notional": 1e6,
              "max_net_notional": 1e6, "max_notional_per_min": 1e6, "max_orders_per_s": 10_000, "max_open_orders": 10_000}
    h.start("gateway", NS["G"], "gateway", {**common, "endpoint": "tcp://*:7000", "limits": limits,
                                            "shards": {"1": [1], "2": [2]}, "security": h.sec("gateway", allowed="shards")})
    orders = {s: tmp_path / f"orders{s}.jsonl" for s in (1, 2)}
    for s, ns, net in ((1, NS["A"], 1), (2, NS["B"], 2)):
        orders[s].write_text("")
        h.start(f"shard{s}", ns, "shard", {**common, "shard_id": s, "instruments": [s], "orders": str(orders[s]),
                                           "endpoint": f"tcp://10.201.{net}.1:7000",
                                           "security": h.sec(f"shard{s}", server="gateway")})
    md = {"pub": "tcp://10.201.1.2:7100", "snap": "tcp://10.201.1.2:7101", "instrument": 1}
    h.start("mdout", NS["A"], "mdout", {**md, "every_ms": 10, "security": h.sec("mdout", allowed="readers")})
    seq_file = tmp_path / "md_in.seq"
    sink = tmp_path / "sink.txt"
    start_md_in_pipeline(pipe, h, md, seq_file, sink)
    h.wait("both shards welcomed", lambda: all(h.status(f"shard{s}").get("state") == "ACTIVE" for s in (1, 2)))

    # aggregate gross 1000: shard 1 holds 400, shard 2 400 then 400 more (800 alone, 1200 together)
    order(orders[1], 1, 1, 100.0, 4.0)
    h.wait("order 1", lambda: h.status("shard1").get("reported"))
    order(orders[2], 2, 2, 100.0, 4.0)
    order(orders[2], 3, 2, 100.0, 4.0)
    h.wait("orders 2, 3", lambda: len(h.status("shard2").get("reported", [])) == 2)
    assert h.status("shard1")["reported"] == [[1, ExecType.FILLED]]
    assert h.status("shard2")["reported"] == [[2, ExecType.FILLED], [3, ExecType.REJECTED]]
    h.wait("the gateway's denial in its status", lambda: h.status("gateway")["stats"].get("deny_gross") == 1)

    # shard B's link down for 2 s while it keeps sending small orders (1 lot, notional 1 each)
    small = list(range(100, 160))

    def send_small():
        for oid in small:
            order(orders[2], oid, 2, 100.0, 0.01)
            time.sleep(0.05)
    sender = threading.Thread(target=send_small)
    sender.start()
    time.sleep(0.5)
    down_ns = time.monotonic_ns()
    sh("ip", "-n", NS["B"], "link", "set", f"mh{TAG}Bg", "down")
    time.sleep(2.0)
    sh("ip", "-n", NS["B"], "link", "set", f"mh{TAG}Bg", "up")
    sender.join()
    h.wait("every small order reported", lambda: len(h.status("shard2").get("reported", [])) == 2 + len(small), 15)
    s2 = h.status("shard2")
    gw = h.wait_value("the gateway's status after the last order",
                      lambda: (g := h.status("gateway"))["stats"]["intents"] >= 3 + len(small) and g)
    bound_ns = (TIMEOUT_MS + DETECT_SLACK_MS) * 1_000_000
    assert s2["lost_ns"] and 0 < s2["lost_ns"][0] - down_ns <= bound_ns, "the shard saw its gateway go silent"
    assert gw["halted_ns"]["2"] and 0 < gw["halted_ns"]["2"][0] - down_ns <= bound_ns, "the gateway halted the shard"
    assert "1" not in gw["halted_ns"], "shard 1's link stayed up"
    reported = [oid for oid, _ in s2["reported"][2:]]
    assert sorted(reported) == small and len(set(reported)) == len(small)  # none lost, none twice
    assert all(t == ExecType.FILLED for _, t in s2["reported"][2:])
    assert gw["stats"]["approved"] == 2 + len(small)  # each decided once, resends answered from memory
    assert all(gw["decided"][f"2:{oid}"] == 0 for oid in small)
    assert gw["positions"]["2"] == pytest.approx(400 + len(small))
    assert gw["positions"]["1"] == pytest.approx(4000)

    # the md-in bridge SIGKILLed; its supervisor starts it again: a snapshot, the gap counted exactly
    def tags():
        text = sink.read_text() if sink.exists() else ""
        return [int(ln.split()[2]) for ln in text.splitlines()]
    h.wait("md flowing through the ring", lambda: len(tags()) > 20)
    old_pid = pipe.pids()["md_in"]
    os.kill(old_pid, signal.SIGKILL)
    time.sleep(0.25)  # inside the restart back-off: the dead bridge's last saved sequences
    seqs = SeqFile(str(seq_file))
    saved = seqs.load()[1][1]
    seqs.close()
    before = len(tags())
    h.wait("md_in restarted by its supervisor", lambda: pipe.pids()["md_in"] not in (old_pid, 0)
           and len(tags()) > before)
    first = tags()[before]  # the snapshot's state (its BOOK's seq is the topic's sequence: one instrument)
    assert first - saved >= 20  # >= 0.5 s down at one book per 10 ms
    st = h.wait_value("md_in counters", lambda: (s := pipe.procs()["md_in"]["stage"]).get("snapshots") and s)
    assert (st["gaps"], st["gap_msgs"], st["snapshots"]) == (1, first - saved, 1)
    assert tags()[:before] == sorted(set(tags()[:before])) and tags()[before:] == sorted(set(tags()[before:]))
    assert pipe.down() == 0
