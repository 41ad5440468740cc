"""The end processes of ``bench.bridge``: ``python -m bench.bridge_ends ROLE SPEC_JSON``.

Every producer sends ``spec["n"]`` BOOK-sized messages (504 bytes, instrument 1) at
``spec["rate_per_s"]`` (paced against the monotonic clock, sleeping between sends), stamping each with CLOCK_MONOTONIC at
the send (one clock for every process of the machine, namespaces included); every consumer polls
without parking (each transport's non-blocking read in a loop) and records, per message, now - stamp
into ``spec["out"]`` (int64 ns, numpy .npy) after ``spec["warmup"]`` messages. Roles:

- ``ring-writer`` / ``ring-reader``: the shared-memory ring ``spec["ring"]`` (made by the driver);
- ``md-out`` / ``md-in``: the bridge's MdOutShell / MdInShell (``spec["security"]``);
- ``gateway`` / ``shard``: the shared gateway (parked on its socket between messages) and a shard
  sending one INTENT per message and polling until its EXEC is back; the shard records the round
  trip INTENT sent -> EXEC delivered. The gateway's order sender is left out (the bridge's hop is
  measured, not the venue's): each approved ORDER is answered ACKED at once through ``report``.

A consumer gives up after ``spec["timeout_s"]`` and writes what it has.
"""

from __future__ import annotations

import json
import signal
import struct
import sys
import time

import numpy as np
import zmq

from pipeline.runtime.bridge.aggregate import SharedGateway
from pipeline.runtime.bridge.session import ShardSession
from pipeline.runtime.bridge.mdsync import MdPublisher, MdSubscriber
from pipeline.runtime.bridge.params import SecurityParams
from pipeline.runtime.bridge.sockets import GatewayShell, MdInShell, MdOutShell, ShardShell
from pipeline.trading.messages import EXEC_STRUCT, ORDER_DTYPE, ExecType, Kind, OrderCmd, Side, decode_order
from pipeline.trading.risk.limits import RiskLimits, resolve_limits

PAYLOAD_BYTES = 504
_stop = False


class _Instrument:
    id, symbol, tick_size, lot_size = 1, "BTCUSDT", 0.1, 0.001


def _payload(i: int) -> bytes:
    return struct.pack("<HQ", 1, i) + bytes(PAYLOAD_BYTES - 10)


def _pace(spec):
    """Yield message numbers at the spec's rate."""
    step = 1_000_000_000 // spec["rate_per_s"]
    t0 = time.monotonic_ns()
    for i in range(spec["n"] + spec["warmup"]):
        wait_ns = t0 + i * step - time.monotonic_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)  # the producer sleeps: on a small box its core is the consumer's
        if _stop:
            return
        yield i


def _save(spec, lat: list[int]) -> None:
    np.save(spec["out"], np.asarray(lat, dtype=np.int64))


def _ring_writer(spec, ctx):
    from ringbuf.ring import Ring
    ring = Ring.attach(spec["ring"])
    w = ring.writer()
    time.sleep(spec["settle_s"])
    for i in _pace(spec):
        w.try_write(Kind.BOOK, _payload(i), time.monotonic_ns())
    ring.close()


def _ring_reader(spec, ctx):
    from ringbuf.ring import Ring
    ring = Ring.attach(spec["ring"])
    r = ring.reader()
    lat: list[int] = []
    seen = [0]

    def on(seq, ts, kind, payload):
        now = time.monotonic_ns()
        seen[0] += 1
        if seen[0] > spec["warmup"]:
            lat.append(now - ts)
    end = time.monotonic() + spec["timeout_s"]
    while len(lat) < spec["n"] and time.monotonic() < end and not _stop:
        r.poll(on, 64)
    _save(spec, lat)
    ring.close()


def _md_out(spec, ctx):
    shell = MdOutShell(ctx, spec["pub"], spec["snap"], SecurityParams(**spec["security"]), MdPublisher(1))
    end = time.monotonic() + spec["settle_s"]
    while time.monotonic() < end:
        shell.serve(time.monotonic_ns())
    for i in _pace(spec):
        shell.publish(Kind.BOOK, _payload(i), time.monotonic_ns())
        shell.serve(time.monotonic_ns())
    time.sleep(0.2)
    shell.close()


def _md_in(spec, ctx):
    shell = MdInShell(ctx, spec["pub"], spec["snap"], SecurityParams(**spec["security"]), MdSubscriber([1]),
                      snapshot_timeout_ns=500_000_000)
    lat: list[int] = []
    seen = [0]

    def deliver(kind, payload, ts):
        now = time.monotonic_ns()
        if kind == Kind.BOOK and len(payload) == PAYLOAD_BYTES:
            seen[0] += 1
            if seen[0] > spec["warmup"]:
                lat.append(now - ts)
        return True
    end = time.monotonic() + spec["timeout_s"]
    while len(lat) < spec["n"] and time.monotonic() < end and not _stop:
        shell.poll(deliver, time.monotonic_ns())
    _save(spec, lat)
    shell.close()


def _gateway(spec, ctx):
    lim = RiskLimits(max_order_lots=1e9, max_position_lots=1e9, max_notional=1e12, max_gross_notional=1e12,
                     max_net_notional=1e12, max_notional_per_min=1e12, max_orders_per_s=1_000_000,
                     max_open_orders=1_000_000, min_notional=0.0001)
    core = SharedGateway({1: [1]}, resolve_limits([_Instrument()], lim), lim, peer_timeout_ns=2_000_000_000,
                         heartbeat_ns=100_000_000, epoch=1)
    core.start(time.monotonic_ns())  # the sender left out: a flat account's state report
    core.on_report(EXEC_STRUCT.pack(0, ExecType.SYNC_DONE, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0), 0, time.monotonic_ns())
    shell = GatewayShell(ctx, spec["endpoint"], SecurityParams(**spec["security"]), core)
    while not _stop:
        zmq.select([shell.router], [], [], 0.001)  # the server parks on its socket (as the agent's wait_for_work)
        now = time.monotonic_ns()
        shell.poll(now)
        for payload, ts in core.take_orders():  # the sender left out: ACKED at once
            o = decode_order(payload)
            shell.report(EXEC_STRUCT.pack(1, ExecType.ACKED, o.side, 0, o.order_id, o.price, o.size, o.size, now, 0),
                         ts, now)
    shell.close()


def _shard(spec, ctx):
    core = ShardSession(1, [1], epoch=2, heartbeat_ns=100_000_000, peer_timeout_ns=2_000_000_000)
    shell = ShardShell(ctx, spec["endpoint"], SecurityParams(**spec["security"]), core)
    lat: list[int] = []
    sent: dict[int, int] = {}

    def deliver(payload, ts):
        oid = struct.unpack_from("<Q", payload, 8)[0]
        if oid in sent and oid > spec["warmup"]:
            lat.append(time.monotonic_ns() - sent[oid])
    end = time.monotonic() + spec["timeout_s"]
    while core.state != 1 and time.monotonic() < end:
        shell.poll(deliver, time.monotonic_ns())
    rec = np.zeros(1, ORDER_DTYPE)
    rec["instrument_id"], rec["cmd"], rec["side"], rec["tif"], rec["size"] = 1, OrderCmd.NEW, Side.BUY, 1, 0.001
    for i in _pace(spec):
        rec["order_id"], rec["price"] = i + 1, 100.0
        sent[i + 1] = time.monotonic_ns()
        shell.send_order(rec.tobytes(), sent[i + 1])
        until = time.monotonic() + 0.05
        while (i + 1) in core.pending and time.monotonic() < until:  # poll without parking until answered
            shell.poll(deliver, time.monotonic_ns())
    while len(lat) < spec["n"] and time.monotonic() < end:
        shell.poll(deliver, time.monotonic_ns())
    _save(spec, lat)
    shell.close()


ROLES = {"ring-writer": _ring_writer, "ring-reader": _ring_reader, "md-out": _md_out, "md-in": _md_in,
         "gateway": _gateway, "shard": _shard}


def _on_term(*_):
    global _stop
    _stop = True


def main(role: str, spec_json: str) -> int:
    signal.signal(signal.SIGTERM, _on_term)
    ctx = zmq.Context()
    ROLES[role](json.loads(spec_json), ctx)
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
