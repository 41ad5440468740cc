"""The bridge's zmq shells on real sockets over tcp 127.0.0.1: market data with snapshots and a
resync after a gap, orders from two shards through one gateway, Curve refusing unknown keys and
plain peers (counted), and malformed multipart frames counted and dropped, never raised."""

from __future__ import annotations

import struct
import time

import pytest
import zmq

from pipeline.runtime.bridge import curve
from pipeline.runtime.bridge.aggregate import SharedGateway
from pipeline.runtime.bridge.session import SessionState, ShardSession
from pipeline.runtime.bridge.frames import MsgType, pack_header
from pipeline.runtime.bridge.mdsync import MdPublisher, MdSubscriber
from pipeline.runtime.bridge.params import SecurityParams
from pipeline.runtime.bridge.sockets import GatewayShell, MdInShell, MdOutShell, ShardShell
from pipeline.trading.messages import EXEC_STRUCT, ExecType, Kind
from tests.support.bridge import desk_specs, free_port, order_payload, sender_reports, synced

PLAIN = SecurityParams(mode="plain-loopback")  # this test says so: loopback only
MS = 1_000_000


def ep() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def pump(step, done, timeout_s: float = 3.0) -> None:
    end = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < end, "timed out"
        step()
        time.sleep(0.001)


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.term()


def book(instrument: int, tag: int) -> bytes:
    return struct.pack("<HH", instrument, tag) + bytes(20)


def test_market_data_snapshot_then_stream_then_a_gap_resynced(zctx):
    pub_ep, snap_ep = ep(), ep()
    out = MdOutShell(zctx, pub_ep, snap_ep, PLAIN, MdPublisher(epoch=7))
    got = []
    inn = MdInShell(zctx, pub_ep, snap_ep, PLAIN, MdSubscriber([1]), snapshot_timeout_ns=500 * MS)
    try:
        out.publish(Kind.BOOK, book(1, 0), 5)  # before the subscriber joined: reaches it by the snapshot
        def step():
            out.serve(time.monotonic_ns())
            inn.poll(lambda k, p, ts: got.append((k, p)) or True, time.monotonic_ns())
        pump(step, lambda: inn.core.live)
        assert got == [(Kind.BOOK, book(1, 0))]
        time.sleep(0.2)  # the SUB's subscription reaches the PUB
        for tag in (1, 2):
            out.publish(Kind.BOOK, book(1, tag), 5)
        pump(step, lambda: len(got) == 3)
        out.core.publish(Kind.BOOK, book(1, 3), 5)  # numbered, never sent: a drop at the PUB
        out.publish(Kind.BOOK, book(1, 4), 5)
        pump(step, lambda: inn.core.stats["snapshots"] == 2 and inn.core.live)
        assert (inn.core.stats["gaps"], inn.core.stats["gap_msgs"]) == (1, 1)
        assert got[-1] == (Kind.BOOK, book(1, 4))  # the snapshot's state after the gap
        out.pub.send_multipart([b"M\x00\x01", b"garbage"])            # malformed: counted, dropped
        out.pub.send_multipart([b"M\x00\x01"])
        out.publish(Kind.BOOK, book(1, 5), 5)
        pump(step, lambda: got[-1] == (Kind.BOOK, book(1, 5)))
        assert inn.stats["malformed"] == 2
        rogue = zctx.socket(zmq.DEALER)
        rogue.linger = 0
        rogue.connect(snap_ep)
        rogue.send_multipart([b"x", b"y", b"z"])
        rogue.send_multipart([pack_header(MsgType.INTENT)])
        pump(step, lambda: out.stats["malformed"] == 2)
        rogue.close()
    finally:
        inn.close()
        out.close()


def test_orders_from_two_shards_meet_one_aggregate_limit(zctx):
    gw_ep = ep()
    specs, lim = desk_specs(max_gross_notional=150.0, max_order_lots=1e6, max_position_lots=1e6,
                            max_notional=1e6, max_net_notional=1e6, max_notional_per_min=1e6)
    gw = GatewayShell(zctx, gw_ep, PLAIN, SharedGateway({1: [1], 2: [2]}, specs, lim, peer_timeout_ns=500 * MS,
                                                         heartbeat_ns=50 * MS, epoch=1))
    synced(gw.core)
    shards = [ShardShell(zctx, gw_ep, PLAIN, ShardSession(s, [s], epoch=2, heartbeat_ns=50 * MS,
                                                          peer_timeout_ns=500 * MS)) for s in (1, 2)]
    reports = []
    def step():
        now = time.monotonic_ns()
        gw.poll(now)
        for payload, ts in gw.core.take_orders():  # the host's sender, a double
            for rep in sender_reports(payload, now):
                gw.report(rep, ts, now)
        for sh in shards:
            sh.poll(lambda p, ts: reports.append(EXEC_STRUCT.unpack(p)), now)
    try:
        pump(step, lambda: all(s.core.state == SessionState.ACTIVE for s in shards))
        shards[0].send_order(order_payload(1, 101, 100.0, 1.0), 1)
        pump(step, lambda: len(reports) == 2)
        shards[1].send_order(order_payload(2, 102, 100.0, 1.0), 1)
        pump(step, lambda: len(reports) == 3)
        assert [(r[4], r[1]) for r in reports] == [(101, ExecType.ACKED), (101, ExecType.FILLED),
                                                   (102, ExecType.REJECTED)]
        assert gw.core.stats["deny_gross"] == 1
        gw.report(b"\x00" * 7, 0, time.monotonic_ns())  # not an EXEC_REPORT: counted, dropped
        assert gw.stats["reports_malformed"] == 1 and gw.stats["malformed"] == 1
        rogue = zctx.socket(zmq.DEALER)
        rogue.linger = 0
        rogue.connect(gw_ep)
        rogue.send_multipart([b"\x00" * 5])                                           # malformed
        rogue.send_multipart([pack_header(MsgType.INTENT, shard_id=1), b"\x00" * 56])  # not that shard's peer
        pump(step, lambda: gw.stats["malformed"] == 2 and gw.core.stats["unknown_shard"] == 1)
        rogue.close()
    finally:
        for s in (*shards, gw):
            s.close()


def test_curve_admits_known_keys_and_counts_failed_handshakes(zctx, tmp_path):
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    for name in ("gateway", "shard1", "stranger"):
        curve.generate(keys, name)
    allowed.mkdir()
    (allowed / "shard1.key").write_bytes((keys / "shard1.key").read_bytes())
    assert (keys / "shard1.key_secret").stat().st_mode & 0o777 == 0o600
    server_sec = SecurityParams(secret_key_file=str(keys / "gateway.key_secret"), authorized_keys_dir=str(allowed))
    def client_sec(name):
        return SecurityParams(secret_key_file=str(keys / f"{name}.key_secret"), server_key_file=str(keys / "gateway.key"))
    gw_ep = ep()
    specs, lim = desk_specs()
    gw = GatewayShell(zctx, gw_ep, server_sec, SharedGateway({1: [1], 2: [2]}, specs, lim, peer_timeout_ns=500 * MS,
                                                              heartbeat_ns=50 * MS, epoch=1))
    synced(gw.core)
    good = ShardShell(zctx, gw_ep, client_sec("shard1"), ShardSession(1, [1], epoch=2, heartbeat_ns=50 * MS,
                                                                      peer_timeout_ns=500 * MS))
    bad = ShardShell(zctx, gw_ep, client_sec("stranger"), ShardSession(2, [2], epoch=3, heartbeat_ns=50 * MS,
                                                                       peer_timeout_ns=500 * MS))
    plain = ShardShell(zctx, gw_ep, PLAIN, ShardSession(2, [2], epoch=4, heartbeat_ns=50 * MS, peer_timeout_ns=500 * MS))
    def step():
        now = time.monotonic_ns()
        gw.poll(now)
        for sh in (good, bad, plain):
            sh.poll(lambda p, ts: None, now)
    try:
        pump(step, lambda: good.core.state == SessionState.ACTIVE and gw.stats["handshake_failed"] >= 2)
        assert gw.core.stats["welcomed"] == 1  # the stranger's and the plain peer's HELLOs never arrived
        assert bad.core.state != SessionState.ACTIVE and plain.core.state != SessionState.ACTIVE
    finally:
        for s in (good, bad, plain, gw):
            s.close()


def test_secret_key_file_readable_by_others_is_refused(tmp_path):
    _, secret = curve.generate(tmp_path, "x")
    secret.chmod(0o640)
    with pytest.raises(Exception, match="must be 0600"):
        curve.load_secret(secret)


def test_a_subscriber_joining_a_busy_publisher_misses_nothing_between_snapshot_and_stream(zctx):
    """The snapshot is asked for only once the SUB receives (its subscription is in place): whatever
    the publisher sends meanwhile is held, then replayed after the snapshot, so no gap appears."""
    pub_ep, snap_ep = ep(), ep()
    out = MdOutShell(zctx, pub_ep, snap_ep, PLAIN, MdPublisher(epoch=7))
    got = []
    inn = MdInShell(zctx, pub_ep, snap_ep, PLAIN, MdSubscriber([1]), snapshot_timeout_ns=2_000 * MS)
    tag = 0
    try:
        def step():
            nonlocal tag
            tag += 1
            out.serve(time.monotonic_ns())  # a snapshot, then at once a book past it, read before its end
            out.publish(Kind.BOOK, book(1, tag), 5)
            time.sleep(0.002)
            inn.poll(lambda k, p, ts: got.append(struct.unpack_from("<H", p, 2)[0]) or True, time.monotonic_ns())
        pump(step, lambda: len(got) >= 50)
        assert (inn.core.stats["gaps"], inn.core.stats["resyncs"]) == (0, 0)
        assert got == list(range(got[0], got[0] + len(got)))  # the snapshot's book, then every one after it
    finally:
        inn.close()
        out.close()


def test_the_snapshot_waits_for_the_subscription_or_half_the_timeout_of_silence(zctx):
    pub_ep, snap_ep = ep(), ep()
    out = MdOutShell(zctx, pub_ep, snap_ep, PLAIN, MdPublisher(epoch=7))
    inn = MdInShell(zctx, pub_ep, snap_ep, PLAIN, MdSubscriber([1]), snapshot_timeout_ns=1_000 * MS)
    try:
        inn.poll(lambda *a: True, 0)
        time.sleep(0.1)
        inn.poll(lambda *a: True, 400 * MS)  # a silent publisher, before half the timeout: not yet
        assert inn.stats["snapshot_requests"] == 0
        inn.poll(lambda *a: True, 501 * MS)
        assert inn.stats["snapshot_requests"] == 1
    finally:
        inn.close()
    inn = MdInShell(zctx, pub_ep, snap_ep, PLAIN, MdSubscriber([1]), snapshot_timeout_ns=1_000 * MS)
    try:
        inn.poll(lambda *a: True, 0)
        assert inn.stats["snapshot_requests"] == 0
        pump(lambda: out.publish(Kind.BOOK, book(1, 1), 5) and inn.poll(lambda *a: True, 1), lambda: inn._sub_seen)
        assert inn.stats["snapshot_requests"] == 1  # the first stream message: the subscription is in place
    finally:
        inn.close()
        out.close()
