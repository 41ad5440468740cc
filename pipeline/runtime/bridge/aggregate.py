"""Orders across hosts, sans I/O: the shared risk gateway's side (``SharedGateway``) and a strategy
shard's side (``ShardSession``). Times are ``now_ns`` arguments (an injected clock); nothing here
does I/O or raises on input.

Shared gateway. The config names each shard (id -> the instruments it owns; ``check_ownership``
refuses an instrument owned twice). A shard joins with HELLO naming its instruments: an unknown id,
a claim other than its config entry, or an instrument another shard owns is REFUSED (counted). Then
every INTENT (a NEW ORDER of the shard's local risk and its reference mid) runs the project's
pre-trade checks (``pipeline.trading.risk.checks.PreTradeChecks``) against ONE ledger for all shards,
so position, gross, net delta and rate limits hold in aggregate: each shard alone below a limit,
together above it, the order that crosses it is denied. A denied INTENT is answered at once with one
EXEC: REJECTED with the DenyReason in the header's code (counted ``deny_<reason>``). An approved one
is recorded as working in the ledger and its ORDER payload queued in ``orders_out`` for the host's
order sender (the shell writes them into its ``orders`` ring); no answer yet. The sender's
EXEC_REPORTs come back through ``on_report``: each updates the ledger (FILLED moves the position; a
terminal report ends the working order) and goes to the shard that owns the client order id (EXEC,
the header's code 0); while that shard is not live its reports are held and sent after its next
WELCOME. A CANCEL INTENT of an order the shard owns is queued for the sender once (its answer is the
sender's CANCELLED or REJECTED report); of any other order it is answered REJECTED NOT_ALLOWED.
Answers are kept by shard and client order id: a resend (after a reconnect) is counted ``resent``,
never applied or sent on twice, and gets the first answer again (the denial, or the sender's first
report once there is one); an order id another shard used is a DUPLICATE denial (the checks' own
rule). A FILLED report seen before (same order and fill id) is counted ``duplicate_fills``, not
applied or sent on. ``on_report`` of an order no shard sent (the sender's own start-up state report) is counted
``reports_unowned`` and not applied: the gateway's ledger starts flat and is the desk's truth.

Silent shards are treated as HALTED: a shard heard from (any valid message) no later than
``peer_timeout_ns`` ago is live; past it, the gateway marks it halted (counted ``shards_halted``): its
positions still count against the aggregate limits (nothing is assumed flat), and anything it sends
but HELLO is dropped unapplied (counted ``from_halted``) and answered REFUSED (HALTED_SILENT) until
it says HELLO again; it then sends its unanswered INTENTs again, decided as new. Every WELCOME
carries the shard's state in the ledger (``state_report``), the reports held for it follow. Messages from a peer that has not been welcomed as the shard
its header names are counted ``unknown_shard`` and dropped.

Shard session. HELLO until WELCOME (again every heartbeat while not welcomed); INTENTs wait in
``pending`` (client order id -> frames) until their EXEC, and are all sent again when a WELCOME
makes the session ACTIVE (a WELCOME while ACTIVE, the answer to an earlier HELLO, resends nothing).
The local risk's SYNC (``request_state``): a HELLO; the state report the next WELCOME carries (the
gateway's ledger for this shard: positions, working orders, SYNC_DONE) is then delivered as its answer,
so a restarted shard gets its positions back from the gateway. CANCEL INTENTs wait in ``pending_cancels`` until a terminal report of the order (and go again the same
way). Any EXEC of an order ends its pending INTENT; each report is delivered once, by (client order
id, exec type, fill id): a second copy (an answer to a resend, a held report) is counted
``duplicate_exec`` and not delivered. HEARTBEAT every ``heartbeat_ns``; the gateway silent for ``peer_timeout_ns``, or
answering REFUSED (HALTED_SILENT): LOST (counted ``peer_lost``), HELLO again. Any other REFUSED is
final (a claim the config must fix).
"""

from __future__ import annotations

import enum

from pipeline.runtime.bridge.frames import (
    Header, MsgType, RefuseReason, pack_header, pack_ids, pack_intent, unpack_ids, unpack_intent,
)
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import EXEC_STRUCT, ORDER_STRUCT, ExecType, OrderCmd
from pipeline.trading.risk.checks import DenyReason, PreTradeChecks
from pipeline.trading.risk.ledger import Working

#: reports after which an order no longer works (FILLED only when nothing is left)
_TERMINAL = (ExecType.REJECTED, ExecType.CANCELLED)
from pipeline.trading.risk.limits import EPS, InstrumentSpec, RiskLimits


def check_ownership(shards: dict[int, list[int]], known: set[int]) -> None:
    """Each instrument owned by one shard at most, and configured.

    Raises:
        ConfigError: naming the shard and the instrument (``$.shards.<id>``).
    """
    owner: dict[int, int] = {}
    for sid, ids in sorted(shards.items()):
        for i in ids:
            if i not in known:
                raise ConfigError(f"$.shards.{sid}: instrument {i} is not configured")
            if i in owner:
                raise ConfigError(f"$.shards.{sid}: instrument {i} is already owned by shard {owner[i]}")
            owner[i] = sid


class ShardState(enum.IntEnum):
    UNSEEN = 0
    LIVE = 1
    HALTED = 2


class _Shard:
    __slots__ = ("sid", "owns", "state", "peer", "heard_ns", "epoch", "held")

    def __init__(self, sid: int, owns: frozenset[int]):
        self.sid, self.owns = sid, owns
        self.state, self.peer, self.heard_ns, self.epoch = ShardState.UNSEEN, None, 0, 0
        self.held: list[list[bytes]] = []  # EXEC frames for it while it is not live


class SharedGateway:
    """The shared risk gateway's core. ``shards``: id -> owned instrument ids (checked by
    ``check_ownership``); ``specs`` / ``limits``: as the risk stage resolves them."""

    COUNTERS = ("intents", "approved", "denied", "resent", "welcomed", "refused", "unknown_shard",
                "shards_halted", "heartbeats_in", "from_halted", "cancels", "cancel_refused", "reports",
                "fills", "duplicate_fills", "reports_unowned", "reports_held")

    def __init__(self, shards: dict[int, list[int]], specs: dict[int, InstrumentSpec], limits: RiskLimits,
                 *, peer_timeout_ns: int, heartbeat_ns: int, epoch: int):
        check_ownership(shards, set(specs))
        self.shards = {sid: _Shard(sid, frozenset(ids)) for sid, ids in shards.items()}
        self.owner = {i: sid for sid, ids in shards.items() for i in ids}
        self.checks = PreTradeChecks(specs, limits)
        self.checks.synced = True  # the shared ledger starts flat and is the desk's truth
        self.peer_timeout_ns, self.heartbeat_ns, self.epoch = peer_timeout_ns, heartbeat_ns, epoch
        # (shard, client order id) -> (deny code, first EXEC payload or None while the sender has not
        # answered); kept for the process's life
        self.answers: dict[tuple[int, int], tuple[int, bytes | None]] = {}
        self.order_owner: dict[int, int] = {}  # client order id -> the shard that sent it (approved)
        self.orders_out: list[tuple[bytes, int]] = []  # (ORDER payload, ts_origin_ns) for the sender
        self._cancel_sent: set[int] = set()
        self._fills_seen: set[tuple[int, int]] = set()  # (order id, fill id) applied
        self.stats = dict.fromkeys(self.COUNTERS, 0)
        self._next_beat = 0
        self._beats = 0

    def on_message(self, peer: bytes, hdr: Header, body: bytes, now_ns: int) -> list[list[bytes]]:
        """The replies (each [header, body?], for ``peer``) to one decoded message from ``peer``;
        approved orders and cancels are queued in ``orders_out``."""
        if hdr.msg_type == MsgType.HELLO:
            return self._hello(peer, hdr, body, now_ns)
        sh = self.shards.get(hdr.shard_id)
        if sh is None or sh.peer != peer or sh.state == ShardState.UNSEEN:
            self.stats["unknown_shard"] += 1
            return []
        if sh.state == ShardState.HALTED:  # nothing applied: it must join again, then resend
            self.stats["from_halted"] += 1
            return [[pack_header(MsgType.REFUSED, code=RefuseReason.HALTED_SILENT, epoch=self.epoch, ts_ns=now_ns)]]
        sh.heard_ns = now_ns
        if hdr.msg_type == MsgType.HEARTBEAT:
            self.stats["heartbeats_in"] += 1
            return []
        if hdr.msg_type == MsgType.INTENT:
            return self._intent(sh, hdr, body, now_ns)
        self.stats["unknown_shard"] += 1  # a type a shard never sends: not a shard speaking
        return []

    def _hello(self, peer: bytes, hdr: Header, body: bytes, now_ns: int) -> list[bytes]:
        claim = set(unpack_ids(body))
        sh = self.shards.get(hdr.shard_id)
        if sh is None:
            why = RefuseReason.UNKNOWN_SHARD
        elif any(self.owner.get(i, hdr.shard_id) != hdr.shard_id for i in claim):
            why = RefuseReason.OWNED_ELSEWHERE
        elif claim != sh.owns:
            why = RefuseReason.CLAIM_MISMATCH
        else:
            sh.state, sh.peer, sh.heard_ns, sh.epoch = ShardState.LIVE, peer, now_ns, hdr.epoch  # again: a resync
            self.stats["welcomed"] += 1
            held, sh.held = sh.held, []
            state = self.state_report(sh.sid, now_ns)
            return [[pack_header(MsgType.WELCOME, epoch=self.epoch, count=len(state), ts_ns=now_ns), b"".join(state)],
                    *held]
        self.stats["refused"] += 1
        return [[pack_header(MsgType.REFUSED, code=why, epoch=self.epoch, ts_ns=now_ns)]]

    def _exec(self, code: int, oid: int, ts_ns: int, payload: bytes) -> list[bytes]:
        return [pack_header(MsgType.EXEC, code=code, epoch=self.epoch, seq=oid, ts_ns=ts_ns), payload]

    def _intent(self, sh: _Shard, hdr: Header, body: bytes, now_ns: int) -> list[list[bytes]]:
        order, ref_mid = unpack_intent(body)
        oid = order.order_id
        self.stats["intents"] += 1
        if order.cmd == OrderCmd.CANCEL:
            return self._cancel(sh, hdr, order, body, now_ns)
        done = self.answers.get((sh.sid, oid))
        if done is not None:
            self.stats["resent"] += 1
            code, payload = done
            return [] if payload is None else [self._exec(code, oid, hdr.ts_ns, payload)]
        code, payload = self._decide(sh, order, ref_mid, now_ns)
        self.stats["approved" if code == 0 else "denied"] += 1
        if code == 0:
            self.answers[(sh.sid, oid)] = (0, None)
            self.order_owner[oid] = sh.sid
            self.orders_out.append((body[:ORDER_STRUCT.size], hdr.ts_ns))
            return []
        self.answers[(sh.sid, oid)] = (code, payload)
        key = f"deny_{DenyReason(code).name.lower()}"
        self.stats[key] = self.stats.get(key, 0) + 1
        return [self._exec(code, oid, hdr.ts_ns, payload)]

    def _cancel(self, sh: _Shard, hdr: Header, order, body: bytes, now_ns: int) -> list[list[bytes]]:
        oid = order.order_id
        if self.order_owner.get(oid) != sh.sid:
            self.stats["cancel_refused"] += 1
            payload = EXEC_STRUCT.pack(order.instrument_id, ExecType.REJECTED, order.side, 0, oid, order.price,
                                       order.size, 0.0, now_ns, 0)
            return [self._exec(DenyReason.NOT_ALLOWED, oid, hdr.ts_ns, payload)]
        if oid in self._cancel_sent:
            self.stats["resent"] += 1
            return []
        self._cancel_sent.add(oid)
        self.stats["cancels"] += 1
        self.orders_out.append((body[:ORDER_STRUCT.size], hdr.ts_ns))
        return []

    def state_report(self, shard_id: int, now_ns: int) -> list[bytes]:
        """The shard's state in the ledger as EXEC_REPORT payloads, as a sender answers SYNC: a
        POSITION per owned instrument (size: the position, price: its average entry), an OPEN_ORDER
        per working order the shard sent (size: what is left), then SYNC_DONE."""
        out = []
        for iid in sorted(self.shards[shard_id].owns):
            bk = self.checks.books[iid]
            out.append(EXEC_STRUCT.pack(iid, ExecType.POSITION, 0, 0, 0, bk.avg_px, bk.position, 0.0, now_ns, 0))
            for oid, w in sorted(bk.working.items()):
                if self.order_owner.get(oid) == shard_id:
                    out.append(EXEC_STRUCT.pack(iid, ExecType.OPEN_ORDER, w.side, 0, oid, w.price, w.size, w.size,
                                                now_ns, 0))
        out.append(EXEC_STRUCT.pack(0, ExecType.SYNC_DONE, 0, 0, 0, 0.0, 0.0, 0.0, now_ns, 0))
        return out

    def take_orders(self) -> list[tuple[bytes, int]]:
        """The ORDER payloads (with their ts_origin_ns) queued for the sender since the last call."""
        out, self.orders_out = self.orders_out, []
        return out

    def on_report(self, payload: bytes, ts_ns: int, now_ns: int) -> tuple[bytes, list[bytes]] | None:
        """One EXEC_REPORT of the host's sender: the ledger updated; (peer, EXEC frames) for the shard
        that owns the order, or None (an order no shard sent; its shard not live: held).

        Raises:
            struct.error: a payload that is not an EXEC_REPORT (the shell counts it).
        """
        iid, etype, side, _, oid, price, size, leaves, _, fill_id = EXEC_STRUCT.unpack(payload)
        sid = self.order_owner.get(oid)
        if sid is None:
            self.stats["reports_unowned"] += 1
            return None
        if etype == ExecType.FILLED:
            if (oid, fill_id) in self._fills_seen:  # a fill reported again: applied once
                self.stats["duplicate_fills"] += 1
                return None
            self._fills_seen.add((oid, fill_id))
        self.stats["reports"] += 1
        ck = self.checks
        bk = ck.books.get(iid)
        if bk is not None:
            if etype == ExecType.FILLED and size > 0:
                self.stats["fills"] += 1
                ck.apply_fill(bk, side, price, size)
                w = bk.working.get(oid)
                if leaves <= bk.spec.lot * EPS:
                    ck.remove_working(bk, oid)
                elif w is not None:
                    w.size = leaves
            elif etype in _TERMINAL:
                ck.remove_working(bk, oid)
        code, first = self.answers.get((sid, oid), (0, None))
        if first is None:
            self.answers[(sid, oid)] = (code, bytes(payload))
        sh = self.shards[sid]
        frames = self._exec(0, oid, ts_ns, bytes(payload))
        if sh.state != ShardState.LIVE:
            self.stats["reports_held"] += 1
            sh.held.append(frames)
            return None
        return sh.peer, frames

    def _decide(self, sh: _Shard, order, ref_mid: float, now_ns: int) -> tuple[int, bytes]:
        iid, oid, side, price, size = order.instrument_id, order.order_id, order.side, order.price, order.size
        ck = self.checks
        bk = ck.books.get(iid)
        if bk is None or iid not in sh.owns or order.cmd != OrderCmd.NEW:
            code = DenyReason.NOT_ALLOWED
        else:
            bk.mid, bk.ref_ns = ref_mid, now_ns
            try:
                code, _ = ck.check(bk, oid, side, price, size, now_ns)
            except Exception:  # fail closed, as the risk stage does
                code = DenyReason.INTERNAL_ERROR
        if code:
            return int(code), EXEC_STRUCT.pack(iid, ExecType.REJECTED, side, 0, oid, price, size, 0.0, now_ns, 0)
        ck.add_working(bk, Working(oid, side, price, size, ref_mid, None, "pending"))
        ck.record_approved(oid, now_ns, price * size)
        return 0, b""

    def tick(self, now_ns: int) -> tuple[list[int], list[tuple[bytes, list[bytes]]]]:
        """(shards halted now for silence, heartbeats due: (peer, frames) per live shard)."""
        halted = []
        for sh in self.shards.values():
            if sh.state == ShardState.LIVE and now_ns - sh.heard_ns > self.peer_timeout_ns:
                sh.state = ShardState.HALTED
                self.stats["shards_halted"] += 1
                halted.append(sh.sid)
        beats = []
        if now_ns >= self._next_beat:
            self._next_beat = now_ns + self.heartbeat_ns
            self._beats += 1
            hb = pack_header(MsgType.HEARTBEAT, epoch=self.epoch, seq=self._beats, ts_ns=now_ns)
            beats = [(sh.peer, [hb]) for sh in self.shards.values() if sh.state == ShardState.LIVE]
        return halted, beats

    def position_lots(self, instrument_id: int) -> float:
        return self.checks.position_lots(instrument_id)

    def shard_state(self, shard_id: int) -> ShardState:
        return self.shards[shard_id].state


class SessionState(enum.IntEnum):
    JOINING = 0  # HELLO sent, no WELCOME yet
    ACTIVE = 1
    LOST = 2  # the gateway fell silent: HELLO again
    REFUSED = 3  # the gateway refused our claim: nothing is sent (a config error to fix)


class ShardSession:
    """A strategy shard's side of the shared gateway (see the module docstring)."""

    COUNTERS = ("intents", "sent", "resent", "execs", "duplicate_exec", "peer_lost", "refused", "welcomed",
                "unknown_peer")

    def __init__(self, shard_id: int, instruments: list[int], *, epoch: int, heartbeat_ns: int,
                 peer_timeout_ns: int):
        self.shard_id, self.instruments, self.epoch = shard_id, sorted(instruments), epoch
        self.heartbeat_ns, self.peer_timeout_ns = heartbeat_ns, peer_timeout_ns
        self.state = SessionState.JOINING
        self.refuse_code = 0
        self.pending: dict[int, list[bytes]] = {}  # NEW INTENTs by client order id
        self.pending_cancels: dict[int, list[bytes]] = {}
        self.delivered: set[tuple[int, int, int]] = set()  # (order id, exec type, fill id) delivered
        self.state_wanted = False
        self.state_out: list[bytes] = []  # the gateway's state report for the local risk, once asked
        self.heard_ns = 0
        self._next_beat = 0
        self._beats = 0
        self.stats = dict.fromkeys(self.COUNTERS, 0)

    def hello(self, now_ns: int) -> list[bytes]:
        return [pack_header(MsgType.HELLO, shard_id=self.shard_id, epoch=self.epoch, count=len(self.instruments),
                            ts_ns=now_ns), pack_ids(self.instruments)]

    def intent(self, order_payload, ref_mid: float, ts_origin_ns: int, order_id: int,
               cancel: bool = False) -> list[bytes] | None:
        """Queue one INTENT (a NEW; ``cancel``: the payload is a CANCEL); its frames to send now
        (ACTIVE) or None (sent after the next WELCOME)."""
        frames = [pack_header(MsgType.INTENT, shard_id=self.shard_id, epoch=self.epoch, seq=order_id,
                              ts_ns=ts_origin_ns), pack_intent(order_payload, ref_mid)]
        (self.pending_cancels if cancel else self.pending)[order_id] = frames
        self.stats["intents"] += 1
        if self.state != SessionState.ACTIVE:
            return None
        self.stats["sent"] += 1
        return frames

    def on_message(self, hdr: Header, body: bytes, now_ns: int) -> tuple[list[list[bytes]], bytes | None]:
        """(frames to send, an EXEC_REPORT payload to deliver or None) for one decoded message."""
        t = hdr.msg_type
        if t == MsgType.REFUSED and hdr.code == RefuseReason.HALTED_SILENT:
            if self.state == SessionState.ACTIVE:
                self.state = SessionState.LOST
                self.stats["peer_lost"] += 1
                self._next_beat = 0  # HELLO at the next tick
            return [], None
        if t == MsgType.REFUSED:
            self.state, self.refuse_code = SessionState.REFUSED, hdr.code
            self.stats["refused"] += 1
            return [], None
        if self.state == SessionState.REFUSED:
            return [], None
        self.heard_ns = now_ns
        if t == MsgType.WELCOME:
            self.stats["welcomed"] += 1
            if self.state_wanted and body:
                self.state_wanted = False
                self.state_out = [body[i:i + EXEC_STRUCT.size] for i in range(0, len(body), EXEC_STRUCT.size)]
            if self.state == SessionState.ACTIVE:  # an answer to an earlier HELLO: already resent
                return [], None
            self.state = SessionState.ACTIVE
            self.stats["resent"] += len(self.pending) + len(self.pending_cancels)
            return [*self.pending.values(), *self.pending_cancels.values()], None
        if t == MsgType.EXEC:
            _, etype, _, _, oid, _, _, leaves, _, fill_id = EXEC_STRUCT.unpack(body)
            self.pending.pop(oid, None)
            if etype in _TERMINAL or (etype == ExecType.FILLED and leaves <= 0):
                self.pending_cancels.pop(oid, None)
            key = (oid, etype, fill_id)
            if key in self.delivered:
                self.stats["duplicate_exec"] += 1
                return [], None
            self.delivered.add(key)
            self.stats["execs"] += 1
            return [], body
        if t != MsgType.HEARTBEAT:
            self.stats["unknown_peer"] += 1
        return [], None

    def request_state(self, now_ns: int) -> list[bytes] | None:
        """The local risk's SYNC: the shard's state is the gateway's (its ledger is the desk's truth).
        A HELLO now when ACTIVE (else the next one goes at the next beat); the state report that the
        WELCOME answering it carries is then in ``take_state``."""
        self.state_wanted = True
        return self.hello(now_ns) if self.state == SessionState.ACTIVE else None

    def take_state(self) -> list[bytes]:
        """The state report (EXEC_REPORT payloads ending with SYNC_DONE) received since the last call."""
        out, self.state_out = self.state_out, []
        return out

    def tick(self, now_ns: int) -> list[list[bytes]]:
        """Frames due: a HEARTBEAT (ACTIVE) or a HELLO (JOINING, LOST) every heartbeat_ns; LOST when
        the gateway has been silent for peer_timeout_ns."""
        if self.state == SessionState.ACTIVE and now_ns - self.heard_ns > self.peer_timeout_ns:
            self.state = SessionState.LOST
            self.stats["peer_lost"] += 1
        if now_ns < self._next_beat or self.state == SessionState.REFUSED:
            return []
        self._next_beat = now_ns + self.heartbeat_ns
        if self.state != SessionState.ACTIVE:
            return [self.hello(now_ns)]
        self._beats += 1
        return [[pack_header(MsgType.HEARTBEAT, shard_id=self.shard_id, epoch=self.epoch, seq=self._beats,
                             ts_ns=now_ns)]]
