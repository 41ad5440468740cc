"""The bridge's thin zmq shells: sockets around the sans-I/O cores (``mdsync``, ``aggregate``).

Every receive is non-blocking and bounded (``limit`` messages a call); every message is decoded by
``frames`` inside a guard: a malformed one (``FrameError``, or any decoding error) is counted
``malformed``, logged (the first 10, then every 1000th) and dropped, never raised. Failed Curve
handshakes are counted from the server sockets' monitors (``handshake_failed``). Sockets linger 0;
DEALER / ROUTER use ZMTP heartbeats (``heartbeat_ms``, timeout ``peer_timeout_ms``) so a dead TCP
connection is dropped and re-made instead of waiting out the kernel's retransmissions.

- ``MdOutShell``: PUB (bound) + snapshot ROUTER (bound).
- ``MdInShell``: SUB + snapshot DEALER (connected); while SYNCING the stream is held and the snapshot
  asked for once the subscription is known to be in place (see ``MdInShell.poll``); a snapshot not
  complete within its timeout is asked again on a fresh DEALER; the last delivered sequence per
  topic goes to a ``SeqFile`` after each delivery.
- ``ShardShell``: DEALER to the gateway, with IMMEDIATE: a send while no connection is up fails at
  once (counted ``send_deferred``) instead of queueing behind a dead link; what matters is kept by
  the session (pending INTENTs, the next HELLO / HEARTBEAT). ``GatewayShell``: ROUTER for every shard.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Callable

import zmq

from pipeline.runtime.bridge import curve
from pipeline.runtime.bridge.aggregate import SharedGateway
from pipeline.runtime.bridge.session import ShardSession
from pipeline.runtime.bridge.frames import FrameError, MsgType, pack_header, pack_ids, parse_control, parse_md
from pipeline.runtime.bridge.mdsync import MdPublisher, MdSubscriber, Verdict
from pipeline.runtime.bridge.params import SecurityParams
from pipeline.trading.messages import OrderCmd, decode_order

Log = Callable[..., None]
_DECODE_ERRORS = (FrameError, struct.error, ValueError, KeyError, IndexError)


def _nolog(event: str, **fields) -> None:
    return None


class _Shell:
    """What every shell shares: the context, security, counters, the malformed-message guard."""

    def __init__(self, ctx: zmq.Context, sec: SecurityParams, log: Log | None):
        self.ctx, self.sec, self.log = ctx, sec, log or _nolog
        self.stats: dict[str, int] = {"malformed": 0, "handshake_failed": 0}
        self._auth = None
        self._monitors: list[curve.HandshakeMonitor] = []
        self._socks: list[zmq.Socket] = []

    def _socket(self, kind: int, endpoint: str, *, server: bool, hb_ms: int = 0, timeout_ms: int = 0,
                immediate: bool = False) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.linger = 0
        if immediate:
            s.setsockopt(zmq.IMMEDIATE, 1)
        if hb_ms:
            s.setsockopt(zmq.HEARTBEAT_IVL, hb_ms)
            s.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
            s.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1_000)
        if self.sec.mode == "curve":
            if server:
                if self._auth is None:
                    self._auth = curve.start_authenticator(self.ctx, self.sec.authorized_keys_dir)
                curve.make_server(s, self.sec.secret_key_file)
            else:
                curve.make_client(s, self.sec.secret_key_file, self.sec.server_key_file)
        if server:
            self._monitors.append(curve.HandshakeMonitor(s))
            s.bind(endpoint)
        else:
            s.connect(endpoint)
        self._socks.append(s)
        return s

    def _bad(self, where: str, exc: Exception) -> None:
        n = self.stats["malformed"] = self.stats["malformed"] + 1
        if n <= 10 or n % 1000 == 0:
            self.log("bridge_malformed", where=where, count=n, error=f"{type(exc).__name__}: {exc}"[:200])

    def poll_monitors(self) -> None:
        for m in self._monitors:
            if m.poll():
                self.stats["handshake_failed"] = sum(x.failed for x in self._monitors)
                self.log("bridge_handshake_failed", count=self.stats["handshake_failed"])

    def _drop(self, s: zmq.Socket) -> None:
        self._socks.remove(s)
        s.close(linger=0)

    def close(self) -> None:
        for m in self._monitors:
            m.close()
        for s in self._socks:
            s.close(linger=0)
        self._socks = []
        if self._auth is not None:
            self._auth.stop()
            self._auth = None


def _recv(sock: zmq.Socket) -> list[bytes] | None:
    try:
        return sock.recv_multipart(zmq.NOBLOCK)
    except zmq.Again:
        return None


class MdOutShell(_Shell):
    """PUB + snapshot ROUTER around an ``MdPublisher``."""

    def __init__(self, ctx, pub_endpoint: str, snapshot_endpoint: str, sec: SecurityParams, core: MdPublisher,
                 *, sndhwm: int = 100_000, log: Log | None = None):
        super().__init__(ctx, sec, log)
        self.core = core
        self.pub = self._socket(zmq.PUB, pub_endpoint, server=True)
        self.pub.sndhwm = sndhwm
        self.snap = self._socket(zmq.ROUTER, snapshot_endpoint, server=True)
        self.stats.update(published=0, snapshots_served=0)

    def publish(self, kind: int, payload, ts_origin_ns: int) -> bool:
        frames = self.core.publish(kind, payload, ts_origin_ns)
        if frames is None:
            return False
        self.pub.send_multipart(frames, copy=False)
        self.stats["published"] += 1
        return True

    def serve(self, now_ns: int, limit: int = 16) -> int:
        """Answer up to ``limit`` snapshot requests."""
        n = 0
        while n < limit:
            msg = _recv(self.snap)
            if msg is None:
                break
            n += 1
            try:
                hdr, body = parse_control(msg[1:])
                if hdr.msg_type != MsgType.SNAP_REQ:
                    raise FrameError(f"message type {hdr.msg_type} on the snapshot socket")
                wanted = list(struct.unpack(f"<{len(body) // 2}H", body))
            except _DECODE_ERRORS as exc:
                self._bad("snapshot", exc)
                continue
            for reply in self.core.snapshot(wanted, now_ns):
                self.snap.send_multipart([msg[0], *reply])
            self.stats["snapshots_served"] += 1
        self.poll_monitors()
        return n


class SeqFile:
    """The last delivered sequence per topic, in a small mapped file, kept across restarts: epoch u64,
    then up to ``SLOTS`` pairs (instrument u64, seq u64)."""

    SLOTS = 4096

    def __init__(self, path: str):
        size = 16 * (self.SLOTS + 1)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._q = memoryview(self._map).cast("Q")
        self._slot = {int(self._q[2 + 2 * k]): k for k in range(self.SLOTS) if self._q[2 + 2 * k]}

    def load(self) -> tuple[int, dict[int, int]]:
        return int(self._q[0]), {i: int(self._q[3 + 2 * k]) for i, k in self._slot.items()}

    def save_epoch(self, epoch: int) -> None:
        self._q[0] = epoch

    def save(self, instrument: int, seq: int) -> None:
        k = self._slot.get(instrument)
        if k is None:
            if len(self._slot) >= self.SLOTS:
                return
            k = self._slot[instrument] = len(self._slot)
            self._q[2 + 2 * k] = instrument
        self._q[3 + 2 * k] = seq

    def close(self) -> None:
        self._q.release()
        self._map.close()


class MdInShell(_Shell):
    """SUB + snapshot DEALER around an ``MdSubscriber``; deliveries go to ``deliver(kind, payload, ts)``.
    While SYNCING, stream messages are held (at most ``MAX_HELD``; beyond, they wait in the SUB socket)."""

    MAX_HELD = 65_536

    def __init__(self, ctx, pub_endpoint: str, snapshot_endpoint: str, sec: SecurityParams, core: MdSubscriber,
                 *, snapshot_timeout_ns: int, seq_file: SeqFile | None = None, log: Log | None = None):
        super().__init__(ctx, sec, log)
        self.core, self.snapshot_endpoint, self.timeout_ns, self.seqs = core, snapshot_endpoint, snapshot_timeout_ns, seq_file
        self.sub = self._socket(zmq.SUB, pub_endpoint, server=False)
        if core.instruments:
            for i in core.instruments:
                self.sub.setsockopt(zmq.SUBSCRIBE, struct.pack(">cH", b"M", i))
        else:
            self.sub.setsockopt(zmq.SUBSCRIBE, b"M")
        self.dealer: zmq.Socket | None = None
        self._asked_ns: int | None = None
        self._syncing_since: int | None = None
        self._sub_seen = False
        self._held: list = []
        if seq_file is not None:
            epoch, last = seq_file.load()
            if epoch:
                core.restore(epoch, last)
        self.stats.update(snapshot_requests=0, written=0, out_drops=0, held_dropped=0)

    def _ask(self, now_ns: int) -> None:
        if self.dealer is not None:
            self._drop(self.dealer)  # a fresh socket: nothing stale queued on the old one
        self.dealer = self._socket(zmq.DEALER, self.snapshot_endpoint, server=False)
        wanted = self.core.request()
        try:
            self.dealer.send_multipart([pack_header(MsgType.SNAP_REQ, ts_ns=now_ns), pack_ids(wanted)], zmq.NOBLOCK)
        except zmq.Again:  # asked again after the snapshot timeout
            pass
        self._asked_ns = now_ns
        self.stats["snapshot_requests"] += 1
        self.log("bridge_snapshot_requested", instruments=wanted, resyncs=self.core.stats["resyncs"])

    def _write(self, deliver, instrument: int, kind: int, payload: bytes, ts: int, seq: int) -> None:
        if deliver(kind, payload, ts):
            self.stats["written"] += 1
        else:
            self.stats["out_drops"] += 1
        if self.seqs is not None:
            self.seqs.save(instrument, seq)

    def poll(self, deliver, now_ns: int, limit: int = 256) -> int:
        """Read up to ``limit`` messages of each socket: LIVE, the stream's; SYNCING, the stream's into
        the held list and the snapshot's, then the held ones through the subscriber (Clone: a message
        up to the snapshot's sequence is dropped, the next ones delivered in order). The snapshot is
        asked for once the SUB has received anything (so its subscription is in place at the
        publisher and nothing between the snapshot and the stream is missed), or after half the
        snapshot timeout of silence (a quiet publisher)."""
        if self.core.live:
            return self._poll_stream(deliver, now_ns, limit)
        if self._syncing_since is None:
            self._syncing_since = now_ns
        n = self._hold(limit)
        if self._asked_ns is None:
            if self._held or self._sub_seen or now_ns - self._syncing_since > self.timeout_ns // 2:
                self._ask(now_ns)
        elif now_ns - self._asked_ns > self.timeout_ns:
            self._ask(now_ns)
        if self._asked_ns is not None:
            n += self._poll_snapshot(deliver, limit)
            if self.core.live:
                self._replay(deliver, now_ns)
        return n

    def _hold(self, limit: int) -> int:
        n = 0
        while n < limit and len(self._held) < self.MAX_HELD:
            msg = _recv(self.sub)
            if msg is None:
                break
            n += 1
            self._sub_seen = True
            try:
                self._held.append(parse_md(msg))
            except _DECODE_ERRORS as exc:
                self._bad("md", exc)
        return n

    def _replay(self, deliver, now_ns: int) -> None:
        held, self._held = self._held, []
        for k, (instrument, hdr, payload) in enumerate(held):
            if self._apply(deliver, instrument, hdr, payload, now_ns):
                self.stats["held_dropped"] += len(held) - k - 1  # the next snapshot stands for them
                return

    def _apply(self, deliver, instrument: int, hdr, payload: bytes, now_ns: int) -> bool:
        """One stream message through the subscriber; True when it asks for a resync."""
        v = self.core.on_md(instrument, hdr)
        if v == Verdict.DELIVER:
            self._write(deliver, instrument, hdr.code, payload, hdr.ts_ns, hdr.seq)
            return False
        if v == Verdict.RESYNC:
            self.log("bridge_gap", instrument=instrument, seq=hdr.seq, gaps=self.core.stats["gaps"],
                     gap_msgs=self.core.stats["gap_msgs"], epoch_changes=self.core.stats["epoch_changes"])
            self._asked_ns, self._syncing_since = None, now_ns
            return True
        return False

    def _poll_stream(self, deliver, now_ns: int, limit: int) -> int:
        n = 0
        while n < limit and self.core.live:
            msg = _recv(self.sub)
            if msg is None:
                break
            n += 1
            try:
                instrument, hdr, payload = parse_md(msg)
            except _DECODE_ERRORS as exc:
                self._bad("md", exc)
                continue
            self._apply(deliver, instrument, hdr, payload, now_ns)
        return n

    def _poll_snapshot(self, deliver, limit: int) -> int:
        n = 0
        while n < limit and not self.core.live:
            msg = _recv(self.dealer)
            if msg is None:
                break
            n += 1
            try:
                if len(msg) == 3:
                    instrument, hdr, payload = parse_md(msg)
                    if hdr.msg_type != MsgType.SNAP_ITEM:
                        raise FrameError("MD on the snapshot socket")
                    if self.core.on_item(instrument, hdr, payload):
                        self._write(deliver, instrument, hdr.code, payload, hdr.ts_ns, hdr.seq)
                    elif self.seqs is not None:
                        self.seqs.save(instrument, hdr.seq)
                    continue
                hdr, _ = parse_control(msg)
            except _DECODE_ERRORS as exc:
                self._bad("snapshot", exc)
                continue
            if hdr.msg_type == MsgType.SNAP_END:
                self.core.on_end(hdr)
                self._syncing_since = None
                if self.seqs is not None:
                    self.seqs.save_epoch(hdr.epoch)
                self.log("bridge_synced", epoch=hdr.epoch, items=hdr.count, gaps=self.core.stats["gaps"],
                         gap_msgs=self.core.stats["gap_msgs"])
        return n


class ShardShell(_Shell):
    """DEALER to the shared gateway around a ``ShardSession``."""

    def __init__(self, ctx, endpoint: str, sec: SecurityParams, core: ShardSession, *, log: Log | None = None):
        super().__init__(ctx, sec, log)
        self.core = core
        hb, to = core.heartbeat_ns // 1_000_000, core.peer_timeout_ns // 1_000_000
        self.dealer = self._socket(zmq.DEALER, endpoint, server=False, hb_ms=hb, timeout_ms=to, immediate=True)
        self.stats.update(not_forwarded=0, send_deferred=0)
        self._state = core.state

    def _send(self, frames: list[bytes]) -> bool:
        # no live connection (IMMEDIATE): nothing is queued behind a dead link; an INTENT stays pending
        # and goes again after the next WELCOME, a HELLO or HEARTBEAT goes again at the next beat
        try:
            self.dealer.send_multipart(frames, zmq.NOBLOCK)
            return True
        except zmq.Again:
            self.stats["send_deferred"] += 1
            return False

    def send_order(self, payload, ts_origin_ns: int) -> bool:
        """One ORDER of the local risk gateway: a NEW or a CANCEL becomes an INTENT (sent now or after
        the next WELCOME; its price is the INTENT's ref_mid), a CANCEL_ALL too (one not sent for want of
        a connection is held for the next WELCOME); anything else is counted ``not_forwarded``."""
        try:
            order = decode_order(payload)
        except _DECODE_ERRORS as exc:
            self._bad("order", exc)
            return False
        if order.cmd == OrderCmd.CANCEL_ALL:
            frames = self.core.cancel_all(payload, ts_origin_ns)
            if frames is not None and not self._send(frames):
                self.core.pending_cancel_all.append(frames)
            return True
        if order.cmd not in (OrderCmd.NEW, OrderCmd.CANCEL):
            self.stats["not_forwarded"] += 1
            return False
        frames = self.core.intent(payload, order.price, ts_origin_ns, order.order_id,
                                  cancel=order.cmd == OrderCmd.CANCEL)
        if frames is not None:
            self._send(frames)
        return True

    def request_state(self, now_ns: int) -> None:
        """The local risk's SYNC: the state report comes with the next WELCOME (``ShardSession.request_state``)."""
        frames = self.core.request_state(now_ns)
        if frames is not None:
            self._send(frames)

    def poll(self, deliver, now_ns: int, limit: int = 256) -> int:
        """Read up to ``limit`` messages; EXEC_REPORTs (and a state report: asked for, pushed, or from a
        restarted gateway) to ``deliver(payload, ts)``; heartbeats / HELLOs due."""
        n = 0
        while n < limit:
            msg = _recv(self.dealer)
            if msg is None:
                break
            n += 1
            try:
                hdr, body = parse_control(msg)
                out, report = self.core.on_message(hdr, body, now_ns)
            except _DECODE_ERRORS as exc:
                self._bad("gateway", exc)
                continue
            for frames in out:
                self._send(frames)
            if report is not None:
                deliver(report, hdr.ts_ns)
            for state in self.core.take_state():
                deliver(state, hdr.ts_ns)
        for frames in self.core.tick(now_ns):
            self._send(frames)
        if self.core.state != self._state:
            self.log("bridge_session", state=self.core.state.name, was=self._state.name,
                     refuse_code=self.core.refuse_code, **self.core.stats)
            self._state = self.core.state
        return n


class GatewayShell(_Shell):
    """ROUTER for every shard around a ``SharedGateway``."""

    def __init__(self, ctx, endpoint: str, sec: SecurityParams, core: SharedGateway, *, log: Log | None = None):
        super().__init__(ctx, sec, log)
        self.core = core
        hb, to = core.heartbeat_ns // 1_000_000, core.peer_timeout_ns // 1_000_000
        self.router = self._socket(zmq.ROUTER, endpoint, server=True, hb_ms=hb, timeout_ms=to)
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.stats["reports_malformed"] = 0

    def report(self, payload, ts_ns: int, now_ns: int) -> None:
        """One EXEC_REPORT of the host's sender to the shard that owns its order, or a state report's
        pushes (``on_report``); a payload that is not an EXEC_REPORT is counted ``reports_malformed``
        and dropped. The core's events are logged."""
        try:
            out = self.core.on_report(bytes(payload), ts_ns, now_ns)
        except _DECODE_ERRORS as exc:
            self.stats["reports_malformed"] += 1
            self._bad("report", exc)
            return
        for peer, frames in out:
            self._send(peer, frames)
        self.log_events()

    def log_events(self) -> None:
        """Log what the core decided that an operator must see (syncs, state changes)."""
        for event, fields in self.core.take_events():
            self.log(event, **fields)

    def poll(self, now_ns: int, limit: int = 256) -> int:
        n = 0
        while n < limit:
            msg = _recv(self.router)
            if msg is None:
                break
            n += 1
            try:
                hdr, body = parse_control(msg[1:])
                replies = self.core.on_message(msg[0], hdr, body, now_ns)
            except _DECODE_ERRORS as exc:
                self._bad("shard", exc)
                continue
            for frames in replies:
                self._send(msg[0], frames)
        halted, beats = self.core.tick(now_ns)
        for sid in halted:
            self.log("bridge_shard_halted", shard=sid, why="silent", treated_as="halted")
        for peer, frames in beats:
            self._send(peer, frames)
        self.poll_monitors()
        return n

    def _send(self, peer: bytes, frames: list[bytes]) -> None:
        try:
            self.router.send_multipart([peer, *frames], zmq.NOBLOCK)
        except zmq.ZMQError:  # the peer is gone or full: its resend after a reconnect gets the answer again
            self.stats["send_failed"] = self.stats.get("send_failed", 0) + 1
