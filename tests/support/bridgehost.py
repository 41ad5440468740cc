"""One bridge host of the namespace test, run inside a network namespace:
``python -m tests.support.bridgehost ROLE SPEC_JSON``. It drives one shell of
``pipeline.runtime.bridge.sockets`` (CurveZMQ keys from the spec's files) until SIGTERM and writes
its status as JSON to ``spec["status"]`` every 20 ms (atomically):

- ``shard``: a shard session; it sends the orders appended (one JSON object a line: oid, iid, price,
  size) to ``spec["orders"]``; status: its counters and state, every order id reported, in order.
- ``mdout``: publishes a BOOK for ``spec["instrument"]`` every ``spec["every_ms"]``, its ``seq`` the
  count so far (the tag); status: its counters and the last tag.
- ``mdin``: subscribes (its sequences kept in ``spec["seq_file"]``); status: its counters and every
  tag delivered.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import time

import numpy as np
import zmq

from pipeline.runtime.bridge.session import ShardSession
from pipeline.runtime.bridge.mdsync import MdPublisher, MdSubscriber, new_epoch
from pipeline.runtime.bridge.params import SecurityParams
from pipeline.runtime.bridge.sockets import MdInShell, MdOutShell, SeqFile, ShardShell
from pipeline.trading.messages import BOOK_DTYPE, Kind
from tests.support.bridge import order_payload

MS = 1_000_000
_stop = False


def _on_term(*_):
    global _stop
    _stop = True


def _write(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _shard(ctx, spec, sec):
    core = ShardSession(spec["shard_id"], spec["instruments"], epoch=new_epoch(),
                        heartbeat_ns=spec["heartbeat_ms"] * MS, peer_timeout_ns=spec["timeout_ms"] * MS)
    shell = ShardShell(ctx, spec["endpoint"], sec, core)
    reported: list[tuple[int, int]] = []
    lost_ns: list[int] = []
    pos = 0

    def step(now):
        nonlocal pos
        with open(spec["orders"], "rb") as f:
            f.seek(pos)
            for line in f:
                if not line.endswith(b"\n"):
                    break
                pos += len(line)
                o = json.loads(line)
                shell.send_order(order_payload(o["iid"], o["oid"], o["price"], o["size"]), now)
        lost = core.stats["peer_lost"]
        # an EXEC_REPORT: exec_type u8 at 2, order_id u64 at 8
        shell.poll(lambda p, ts: reported.append((struct.unpack_from("<Q", p, 8)[0], p[2])), now)
        if core.stats["peer_lost"] != lost:
            lost_ns.append(now)
        return {"stats": {**core.stats, **shell.stats}, "state": core.state.name, "reported": reported,
                "pending": len(core.pending), "lost_ns": lost_ns}
    return shell, step


def _mdout(ctx, spec, sec):
    shell = MdOutShell(ctx, spec["pub"], spec["snap"], sec, MdPublisher(new_epoch()))
    every, nxt, tag = spec["every_ms"] * MS, 0, 0

    def step(now):
        nonlocal nxt, tag
        if now >= nxt:
            nxt = now + every
            tag += 1
            book = np.zeros(1, BOOK_DTYPE)
            book["instrument_id"], book["seq"], book["n_bids"], book["n_asks"] = spec["instrument"], tag, 1, 1
            book["bid_px"][0, 0], book["ask_px"][0, 0] = 100.0, 100.1
            shell.publish(Kind.BOOK, book.tobytes(), now)
        shell.serve(now)
        return {"stats": shell.stats, "tag": tag}
    return shell, step


def _mdin(ctx, spec, sec):
    seqs = SeqFile(spec["seq_file"])
    shell = MdInShell(ctx, spec["pub"], spec["snap"], sec, MdSubscriber([spec["instrument"]]),
                      snapshot_timeout_ns=500 * MS, seq_file=seqs)
    tags: list[int] = []

    def step(now):
        shell.poll(lambda k, p, ts: tags.append(int(np.frombuffer(p, BOOK_DTYPE, 1)[0]["seq"])) or True, now)
        return {"stats": {**shell.core.stats, **shell.stats}, "live": shell.core.live, "tags": tags}
    return shell, step


ROLES = {"shard": _shard, "mdout": _mdout, "mdin": _mdin}


def main(role: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    signal.signal(signal.SIGTERM, _on_term)
    sec = SecurityParams(**spec["security"])
    ctx = zmq.Context()
    shell, step = ROLES[role](ctx, spec, sec)
    last = 0
    while not _stop:
        now = time.monotonic_ns()
        doc = step(now)
        if now - last >= 20 * MS:
            last = now
            _write(spec["status"], doc)
        time.sleep(0.001)
    _write(spec["status"], step(time.monotonic_ns()))
    shell.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
