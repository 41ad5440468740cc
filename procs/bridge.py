"""The bridge stages: local rings joined to ZeroMQ sockets between hosts (issue #28). Four agents,
each a thin shell over ``pipeline.runtime.bridge`` (frames, cores, sockets), configured by typed
params (``pipeline.runtime.bridge.params``; security: CurveZMQ key files, or plain tcp on 127.0.0.1):

- ``MdOutAgent`` (``procs.bridge:MdOutAgent``, the feed's host): every message of its input ring
  (``md``) published on PUB, one topic per instrument, a per-topic sequence in each; snapshots served
  on a ROUTER (the Clone pattern). Counters: published, snapshots_served, malformed, handshake_failed.
- ``MdInAgent`` (a receiving host): SUB + snapshot DEALER into its output ring (a local ``md``);
  gaps counted and resynced from a snapshot, sequences going backwards dropped (``mdsync``). Its
  last delivered sequences live in ``seq_file`` so that a restarted bridge counts what it missed as a
  gap. Counters: delivered, gaps, gap_msgs, backwards, resyncs, epoch_changes, snapshots, written,
  out_drops, malformed.
- ``ShardAgent`` (a strategy host): NEW and CANCEL ORDERs of its input ring (the local risk
  gateway's) sent as INTENTs to the shared gateway, CANCEL_ALLs too; the EXEC_REPORTs it forwards
  (the shared host's sender's) written to its output ring, each once. The local gateway's SYNC is
  answered with the shared gateway's state for this shard (its positions and working orders, then
  SYNC_DONE), which the WELCOME answering a HELLO carries: a restarted shard gets its positions back
  from the ledger that is the venue's. The state also comes unasked when the shared gateway
  restarted or replaced its ledger (``session``): the local risk takes it as a restarted sender's.
  Counters: ``session.ShardSession``'s, malformed, not_forwarded.
- ``GatewayAgent`` (the shared risk host): the aggregate limits over every shard
  (``aggregate.SharedGateway``: ownership, silent shards HALTED, idempotent answers); approved ORDERs
  (and the shards' CANCELs and CANCEL_ALLs) written to its output ring (``orders``, read by the host's
  ``procs.sender:SenderAgent``), the sender's EXEC_REPORTs read from its input ring (``exec``) and
  sent to the shard that owns each order. At its start it writes a SYNC to the sender (again at
  each pass until the ring takes it): its ledger is the sender's state report, reconciled with the
  venue, so after any restart its positions are the venue's; until that report no order passes and
  no shard is welcomed. The operator's CONTROLs come from ``control_input`` when named. An ORDER
  the ring refuses is answered to its shard as REJECTED (reason HALTED, counted
  ``orders_out_drops``), and the ledger forgets it. Counters: its core's, orders_out,
  orders_out_drops, reports_malformed, synced, state (0 ACTIVE, 1 REDUCING, 2 HALTED), open_orders,
  pos_lots_<instrument id>.

Nothing here raises on a received message: malformed input is counted and dropped (``sockets``).

Waiting: ``MdInAgent`` reads sockets only and parks on them (``wait_for_work``, at most 5 ms at a
time). ``MdOutAgent``, ``ShardAgent`` and ``GatewayAgent`` read a ring and a socket, which no one
wait covers: run them with ``wait = "back-off"`` (sleeps of at most 1 ms) or ``"busy-spin"``; a
blocking park on the ring would leave the socket unread for up to its bounded park (5 ms).
"""

from __future__ import annotations

import os

import zmq

from pipeline.runtime.agent import Agent
from pipeline.runtime.bridge.aggregate import SharedGateway
from pipeline.runtime.bridge.session import ShardSession
from pipeline.runtime.bridge.mdsync import MdPublisher, MdSubscriber, new_epoch
from pipeline.runtime.bridge.params import (
    GatewayParams, MdInParams, MdOutParams, ShardParams, check_security, shard_table,
)
from pipeline.runtime.bridge.sockets import GatewayShell, MdInShell, MdOutShell, SeqFile, ShardShell
from pipeline.runtime.config import parse_stage_params
from pipeline.trading.messages import EXEC_STRUCT, ExecReason, ExecType, Kind, OrderCmd, decode_order
from pipeline.trading.risk.limits import decode_limits, resolve_limits

_STATS_EVERY_NS = 50_000_000


class _BridgeAgent(Agent):
    params_type: type

    def _setup(self, ctx, server: bool, endpoints):
        """The params (typed, security checked against ``endpoints(params)``), a zmq context.
        Raises ConfigError: a bad param, naming the process and the field."""
        self.ctx = ctx
        p = parse_stage_params(ctx.name, ctx.params, self.params_type)
        check_security(ctx.name, p.security, endpoints(p), server=server)
        self.zctx = None
        self.shell = None
        self._stats_at = 0
        return p

    def _log(self, event: str, **fields) -> None:
        self.ctx.log.info(event, **fields)

    def _publish_stats(self, now: int, core_stats: dict) -> None:
        if now - self._stats_at >= _STATS_EVERY_NS:
            self._stats_at = now
            self.ctx.stats.update({k: v for k, v in core_stats.items() if v})
            self.ctx.stats.update({k: v for k, v in self.shell.stats.items() if v})

    def _context(self) -> zmq.Context:
        self.zctx = zmq.Context()
        return self.zctx

    def on_close(self) -> None:
        if self.shell is not None:
            self.shell.close()
        if self.zctx is not None:
            self.zctx.term()


class MdOutAgent(_BridgeAgent):
    params_type = MdOutParams

    def on_start(self, ctx) -> None:
        p = self._setup(ctx, True, lambda p: [p.pub_endpoint, p.snapshot_endpoint])
        self.inp = ctx.input(p.input or None)
        core = MdPublisher(new_epoch(), state_kinds=p.state_kinds)
        self.shell = MdOutShell(self._context(), p.pub_endpoint, p.snapshot_endpoint, p.security, core,
                                sndhwm=p.sndhwm, log=self._log)
        self._log("bridge_md_out", epoch=core.epoch, pub=p.pub_endpoint, snapshot=p.snapshot_endpoint,
                  security=p.security.mode)

    def do_work(self) -> int:
        n = self.inp.poll(self._on_msg, self.ctx.batch)
        self.ctx.received(n)
        now = self.ctx.clock()
        n += self.shell.serve(now)
        self._publish_stats(now, {"rejected": self.shell.core.rejected})
        return n

    def _on_msg(self, seq, ts_origin_ns, kind, payload) -> None:
        self.shell.publish(kind, payload, ts_origin_ns)


class MdInAgent(_BridgeAgent):
    params_type = MdInParams

    def on_start(self, ctx) -> None:
        p = self._setup(ctx, False, lambda p: [p.pub_endpoint, p.snapshot_endpoint])
        self.out = ctx.output(p.output or None)
        path = p.seq_file or os.path.join(ctx.config.supervisor.run_dir, f"{ctx.name}.mdseq")
        self.seqs = SeqFile(path)
        self.shell = MdInShell(self._context(), p.pub_endpoint, p.snapshot_endpoint, p.security,
                               MdSubscriber(p.instruments), snapshot_timeout_ns=p.snapshot_timeout_ms * 1_000_000,
                               seq_file=self.seqs, log=self._log)

    def do_work(self) -> int:
        now = self.ctx.clock()
        n = self.shell.poll(self._deliver, now, self.ctx.batch)
        self.ctx.received(n)
        self._publish_stats(now, self.shell.core.stats)
        return n

    def wait_for_work(self, timeout_ns: int) -> bool:
        socks = [s for s in (self.shell.sub, self.shell.dealer) if s is not None]
        return bool(zmq.select(socks, [], [], min(timeout_ns, 5_000_000) / 1e9)[0])

    def _deliver(self, kind: int, payload: bytes, ts: int) -> bool:
        return self.ctx.emit(self.out, kind, payload, ts)

    def on_close(self) -> None:
        super().on_close()
        if getattr(self, "seqs", None) is not None:
            self.seqs.close()


class ShardAgent(_BridgeAgent):
    params_type = ShardParams

    def on_start(self, ctx) -> None:
        p = self._setup(ctx, False, lambda p: [p.gateway_endpoint])
        self.inp = ctx.input(p.input or None)
        self.out = ctx.output(p.output or None)
        core = ShardSession(p.shard_id, p.instruments, epoch=new_epoch(), heartbeat_ns=p.heartbeat_ms * 1_000_000,
                            peer_timeout_ns=p.peer_timeout_ms * 1_000_000)
        self.shell = ShardShell(self._context(), p.gateway_endpoint, p.security, core, log=self._log)

    def do_work(self) -> int:
        n = self.inp.poll(self._on_order, self.ctx.batch)
        self.ctx.received(n)
        now = self.ctx.clock()
        n += self.shell.poll(self._deliver, now, self.ctx.batch)
        self._publish_stats(now, self.shell.core.stats)
        return n

    def _on_order(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind != Kind.ORDER:
            self.shell.stats["not_forwarded"] += 1
        elif len(payload) > 2 and payload[2] == OrderCmd.SYNC:
            # the local risk gateway's SYNC: its state is the shared gateway's ledger for this shard,
            # which the WELCOME answering a HELLO carries (delivered by the shell's poll)
            self.shell.stats["syncs"] = self.shell.stats.get("syncs", 0) + 1
            self.shell.request_state(self.ctx.clock())
        else:
            self.shell.send_order(payload, ts_origin_ns)

    def _deliver(self, payload: bytes, ts: int) -> None:
        self.ctx.emit(self.out, Kind.EXEC_REPORT, payload, ts)


class GatewayAgent(_BridgeAgent):
    params_type = GatewayParams

    def on_start(self, ctx) -> None:
        p = self._setup(ctx, True, lambda p: [p.endpoint])
        specs = resolve_limits(ctx.config.instruments, decode_limits(p.limits or None))
        core = SharedGateway(shard_table(ctx.name, p.shards), specs, decode_limits(p.limits or None),
                             peer_timeout_ns=p.peer_timeout_ms * 1_000_000, heartbeat_ns=p.heartbeat_ms * 1_000_000,
                             epoch=new_epoch())
        self.inp = ctx.input(p.input or None)
        self.out = ctx.output(p.output or None)
        self.ctl = ctx.input(p.control_input) if p.control_input else None
        self.shell = GatewayShell(self._context(), p.endpoint, p.security, core, log=self._log)
        self.shell.stats.update(orders_out=0, orders_out_drops=0)
        now = ctx.clock()
        self._sync: bytes | None = core.start(now)  # written at the first pass the ring takes it
        self.shell.log_events()

    def do_work(self) -> int:
        core = self.shell.core
        now = self.ctx.clock()
        if self._sync is not None and self.ctx.emit(self.out, Kind.ORDER, self._sync, now):
            self._sync = None
        n = self.inp.poll(self._on_report, self.ctx.batch)
        if self.ctl is not None:
            n += self.ctl.poll(self._on_control, self.ctx.batch)
        self.ctx.received(n)
        m = self.shell.poll(now, self.ctx.batch)
        self.ctx.received(m)
        for payload, ts in core.take_orders():
            self._send_order(payload, ts, now)
        self.shell.log_events()
        if now - self._stats_at >= _STATS_EVERY_NS:
            ck = core.checks
            self.ctx.stats.update(synced=int(ck.synced), state=int(ck.state), open_orders=ck.open_count,
                                  **{f"pos_lots_{i}": ck.position_lots(i) for i in ck.books})
        self._publish_stats(now, core.stats)
        return n + m

    def _on_control(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind == Kind.CONTROL:
            self.shell.core.on_control(payload)
        else:
            self.shell.core.stats["controls_bad"] += 1

    def _on_report(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind == Kind.EXEC_REPORT:
            self.shell.report(payload, ts_origin_ns, self.ctx.clock())
        else:
            self.shell.stats["reports_malformed"] += 1

    def _send_order(self, payload: bytes, ts: int, now: int) -> None:
        if self.ctx.emit(self.out, Kind.ORDER, payload, ts):
            self.shell.stats["orders_out"] += 1
            return
        self.shell.stats["orders_out_drops"] += 1  # the sender's ring refused it: never sent, answered so
        o = decode_order(payload)
        if o.cmd != OrderCmd.NEW:  # a CANCEL: the shard's pending cancel goes again after its next WELCOME
            return
        self.shell.report(EXEC_STRUCT.pack(o.instrument_id, ExecType.REJECTED, o.side, ExecReason.HALTED, o.order_id,
                                           o.price, o.size, 0.0, now, 0), ts, now)
