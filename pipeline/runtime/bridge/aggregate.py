"""The shared risk gateway's core across hosts, sans I/O (``SharedGateway``; a shard's side is
``session.ShardSession``). Times are ``now_ns`` arguments (an injected clock); nothing here does I/O or
raises on input.

The config names each shard (id -> the instruments it owns; ``check_ownership`` refuses an instrument
owned twice). The ledger is the venue's: ``start`` returns the SYNC for the host's order sender, whose
state report (positions and open orders, reconciled with the venue at its start) replaces the ledger
at its SYNC_DONE; until then every new order is NOT_SYNCED and every HELLO is REFUSED NOT_SYNCED (no
shard is welcomed with a state that is a guess). A state report the sender sends unasked (it
restarted, or found a position apart from the venue) is collected the same way (NOT_SYNCED meanwhile)
and pushed to every live shard when applied (WELCOME STATE_CHANGED). A POSITION_MISMATCH in it, or a
SYNC_DONE saying ACCOUNT_CHANGED, moves ACTIVE to REDUCING (``cause``) until the operator's RESUME
(``on_control``, which also takes HALT, KILL_SWITCH and REDUCE_ONLY). An open order of the report, and
any report of an order this process did not approve, belongs to the shard owning its instrument;
a report read before the state report's SYNC_DONE is counted, not applied or sent on (the report
already holds its effect).

A shard joins with HELLO naming its instruments: an unknown id, a claim other than its config entry,
or an instrument another shard owns is REFUSED (counted). Then every INTENT (a NEW ORDER of the
shard's local risk and its reference mid) runs the project's pre-trade checks
(``pipeline.trading.risk.checks.PreTradeChecks``) against ONE ledger for all shards, so position,
gross, net delta and rate limits hold in aggregate: each shard alone below a limit, together above
it, the order that crosses it is denied. A denied INTENT is answered at once with one EXEC: REJECTED
with the DenyReason in the header's code (counted ``deny_<reason>``). An approved one is recorded as
working in the ledger and its ORDER payload queued in ``orders_out`` for the host's order sender (the
shell writes them into its ``orders`` ring); no answer yet. The sender's EXEC_REPORTs come back
through ``on_report``: each updates the ledger (FILLED moves the position, unless it answers an id
sent twice, reason DUPLICATE; a terminal report ends the working order) and goes to the shard that
owns the order (EXEC, the header's code 0); while that shard is not live its reports are held and
sent after its next WELCOME. A CANCEL INTENT of an order the shard owns is queued for the sender once
(its answer is the sender's CANCELLED or REJECTED report); of any other order it is answered REJECTED
NOT_ALLOWED. A CANCEL_ALL INTENT of an instrument the shard owns (0: each it owns) goes to the sender
as one CANCEL_ALL per instrument; of another: counted ``cancel_all_refused``, nothing sent. Answers
are kept by shard and client order id: a resend (after a reconnect) is counted ``resent``, never
applied or sent on twice, and gets the first answer again (the denial, or the sender's first report
once there is one); an order id another shard used is a DUPLICATE denial (the checks' own rule). A
FILLED report seen before (same order and fill id) is counted ``duplicate_fills``, not applied or
sent on.

Silent shards are treated as HALTED: a shard heard from (any valid message) no later than
``peer_timeout_ns`` ago is live; past it, the gateway marks it halted (counted ``shards_halted``): its
positions still count against the aggregate limits (nothing is assumed flat), and anything it sends
but HELLO is dropped unapplied (counted ``from_halted``) and answered REFUSED (HALTED_SILENT) until
it says HELLO again; it then sends its unanswered INTENTs again, decided as new. Every WELCOME
carries the shard's state in the ledger (``state_report``), the reports held for it follow. Messages
from a peer that has not been welcomed as the shard its header names are counted ``unknown_shard``
and dropped. What to log (state changes, syncs, refused cancel-alls) is in ``take_events``.
"""

from __future__ import annotations

import enum

import math

from pipeline.runtime.bridge.frames import (
    Header, MsgType, RefuseReason, WelcomeCode, pack_header, unpack_ids, unpack_intent,
)
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import (
    EXEC_STRUCT, ORDER_STRUCT, ControlCmd, ExecReason, ExecType, OrderCmd, OrderOrigin, Side, unpack_control,
)
from pipeline.trading.risk.checks import DenyReason, PreTradeChecks, TradingState
from pipeline.trading.risk.ledger import StateReport, Working
from pipeline.trading.risk.limits import EPS, InstrumentSpec, RiskLimits

#: reports after which an order no longer works (FILLED only when nothing is left)
_TERMINAL = (ExecType.REJECTED, ExecType.CANCELLED)
#: reports of an order working at the venue
_LIVE = (ExecType.ACKED, ExecType.UNKNOWN)
#: the sender's state report: these, then SYNC_DONE
_STATE_ITEMS = (ExecType.POSITION, ExecType.OPEN_ORDER, ExecType.POSITION_MISMATCH)


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
                "fills", "duplicate_fills", "reports_unowned", "reports_held", "syncs", "refused_not_synced",
                "state_pushes", "position_mismatches", "account_changed", "duplicate_answers", "cancel_alls",
                "cancel_all_refused", "reports_bad", "controls", "controls_bad", "reports_before_sync")

    def __init__(self, shards: dict[int, list[int]], specs: dict[int, InstrumentSpec], limits: RiskLimits,
                 *, peer_timeout_ns: int, heartbeat_ns: int, epoch: int):
        check_ownership(shards, set(specs))
        self.shards = {sid: _Shard(sid, frozenset(ids)) for sid, ids in shards.items()}
        self.owner = {i: sid for sid, ids in shards.items() for i in ids}
        self.checks = PreTradeChecks(specs, limits)
        self.checks.synced = False  # until the sender's state report (``start``): NOT_SYNCED
        self._report: StateReport | None = None  # the sender's state report being collected
        self.cause = ""  # why the trading state is what it is
        self.events: list[tuple[str, dict]] = []  # (event, fields) for the shell's log, taken by take_events
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
        elif not self.checks.synced:  # its state would be a guess: it joins once the ledger is the venue's
            self.stats["refused_not_synced"] += 1
            return [[pack_header(MsgType.REFUSED, code=RefuseReason.NOT_SYNCED, epoch=self.epoch, ts_ns=now_ns)]]
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
        if order.cmd == OrderCmd.CANCEL_ALL:
            return self._cancel_all(sh, hdr, order)
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

    def _cancel_all(self, sh: _Shard, hdr: Header, order) -> list[list[bytes]]:
        """A CANCEL_ALL of one instrument the shard owns (instrument 0: each it owns) goes to the sender,
        one per instrument, every time (cancelling again is harmless); of an instrument it does not own:
        counted ``cancel_all_refused``, nothing sent. No answer: the sender's CANCELLED reports are."""
        iid = order.instrument_id
        ids = sorted(sh.owns) if iid == 0 else [iid]
        if iid != 0 and iid not in sh.owns:
            self.stats["cancel_all_refused"] += 1
            self.events.append(("gateway_cancel_all_refused", {"shard": sh.sid, "instrument": iid}))
            return []
        self.stats["cancel_alls"] += 1
        for i in ids:
            self.orders_out.append((ORDER_STRUCT.pack(i, OrderCmd.CANCEL_ALL, 0, 0, order.origin, 0, 0, 0.0, 0.0,
                                                      order.origin_seq, order.decided_ns), hdr.ts_ns))
        return []

    def state_report(self, shard_id: int, now_ns: int,
                     mismatch: dict[int, tuple[float, float]] | None = None) -> list[bytes]:
        """The shard's state in the ledger as EXEC_REPORT payloads, as a sender answers SYNC: a
        POSITION per owned instrument (size: the position, price: its average entry), a
        POSITION_MISMATCH per owned instrument in ``mismatch`` (instrument -> (journal's, venue's
        size), as the sender reports it), an OPEN_ORDER per working order the shard sent (size: what
        is left), then SYNC_DONE."""
        out = []
        for iid in sorted(self.shards[shard_id].owns):
            bk = self.checks.books[iid]
            out.append(EXEC_STRUCT.pack(iid, ExecType.POSITION, 0, 0, 0, bk.avg_px, bk.position, 0.0, now_ns, 0))
            if mismatch and iid in mismatch:
                ours, venue = mismatch[iid]
                out.append(EXEC_STRUCT.pack(iid, ExecType.POSITION_MISMATCH, 0, 0, 0, ours, venue, 0.0, now_ns, 0))
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

    def start(self, now_ns: int) -> bytes:
        """NOT_SYNCED, and the SYNC ORDER payload for the host's sender: its state report (the venue's
        positions and open orders, reconciled) replaces the ledger at its SYNC_DONE."""
        self.checks.synced = False
        self._report = StateReport(solicited=True)
        self.events.append(("gateway_sync_requested", {}))
        return ORDER_STRUCT.pack(0, OrderCmd.SYNC, 0, 0, OrderOrigin.RISK, 0, 0, 0.0, 0.0, 0, now_ns)

    def on_report(self, payload: bytes, ts_ns: int, now_ns: int) -> list[tuple[bytes, list[bytes]]]:
        """One EXEC_REPORT of the host's sender: the ledger updated; the (peer, frames) to send: the
        report to the shard that owns the order (by the order's id, else its instrument's owner: an
        order sent before this process started), or, at a state report's SYNC_DONE, the new state to
        every live shard (WELCOME STATE_CHANGED). Nothing for an order no shard owns, a shard not live
        (held), a state report item (collected), or a report read before the state report's SYNC_DONE
        (counted ``reports_before_sync``: the state report already holds its effect, and the shard
        gets that state when it joins).

        Raises:
            struct.error: a payload that is not an EXEC_REPORT (the shell counts it).
        """
        iid, etype, side, reason, oid, price, size, leaves, _, fill_id = EXEC_STRUCT.unpack(payload)
        if etype in _STATE_ITEMS:
            self._state_item(iid, etype, side, oid, price, size, leaves)
            return []
        if etype == ExecType.SYNC_DONE:
            return self._apply_report(reason == ExecReason.ACCOUNT_CHANGED, now_ns)
        if not self.checks.synced:  # written before the state report, which already holds its effect
            self.stats["reports_before_sync"] += 1
            return []
        sid = self.order_owner.get(oid)
        if sid is None:
            sid = self.owner.get(iid)
            if sid is None or oid == 0:
                self.stats["reports_unowned"] += 1
                return []
            self.order_owner[oid] = sid
        if etype == ExecType.FILLED:
            if (oid, fill_id) in self._fills_seen:  # a fill reported again: applied once
                self.stats["duplicate_fills"] += 1
                return []
            self._fills_seen.add((oid, fill_id))
        self.stats["reports"] += 1
        ck = self.checks
        bk = ck.books.get(iid)
        if bk is not None:
            if etype == ExecType.FILLED and reason == ExecReason.DUPLICATE:
                self.stats["duplicate_answers"] += 1  # the answer to an id sent twice: never a new fill
                ck.remove_working(bk, oid)
            elif etype == ExecType.FILLED and size > 0:
                self.stats["fills"] += 1
                ck.apply_fill(bk, side, price, size)
                w = bk.working.get(oid)
                if leaves <= bk.spec.lot * EPS:
                    ck.remove_working(bk, oid)
                elif w is not None:
                    w.size = leaves
            elif etype in _TERMINAL:
                ck.remove_working(bk, oid)
            elif etype in _LIVE and oid not in bk.working and side in (Side.BUY, Side.SELL) and size > 0:
                # working at the venue but not in the ledger (approved before a state report replaced it,
                # sent after): it counts again, as the risk stage's ledger does it
                ck.add_working(bk, Working(oid, side, price, leaves if leaves > 0 else size, bk.mid, None, "acked"))
        code, first = self.answers.get((sid, oid), (0, None))
        if first is None:
            self.answers[(sid, oid)] = (code, bytes(payload))
        sh = self.shards[sid]
        frames = self._exec(0, oid, ts_ns, bytes(payload))
        if sh.state != ShardState.LIVE:
            self.stats["reports_held"] += 1
            sh.held.append(frames)
            return []
        return [(sh.peer, frames)]

    def _state_item(self, iid: int, etype: int, side: int, oid: int, price: float, size: float,
                    leaves: float) -> None:
        """A POSITION / OPEN_ORDER / POSITION_MISMATCH of the sender's state report, collected until
        its SYNC_DONE (one unasked: the sender restarted; NOT_SYNCED meanwhile). An unconfigured
        instrument, a non-finite number or a bad OPEN_ORDER is counted ``reports_bad``, not collected."""
        if iid not in self.checks.books or not all(map(math.isfinite, (price, size, leaves))):
            self.stats["reports_bad"] += 1
            return
        rep = self._report
        if rep is None:
            rep = self._report = StateReport(solicited=False)
            self.checks.synced = False
            self.events.append(("gateway_sync_started", {"solicited": False}))
        if etype == ExecType.POSITION:
            rep.positions[iid] = (size, price)
        elif etype == ExecType.POSITION_MISMATCH:
            rep.mismatch[iid] = (price, size)
        elif side in (Side.BUY, Side.SELL) and size > 0:
            rep.orders[oid] = (iid, side, price, leaves if leaves > 0 else size)
        else:
            self.stats["reports_bad"] += 1

    def _apply_report(self, account_changed: bool, now_ns: int) -> list[tuple[bytes, list[bytes]]]:
        """SYNC_DONE: the collected state report replaces every position and working order (an
        order's owner: its instrument's shard); a POSITION_MISMATCH or ACCOUNT_CHANGED moves ACTIVE
        to REDUCING (the cause in ``cause``) until RESUME; every live shard gets its new state."""
        rep, self._report = self._report or StateReport(solicited=False), None
        ck = self.checks
        ck.replace_state(rep)
        for oid, (iid, *_rest) in rep.orders.items():
            if iid in self.owner:
                self.order_owner[oid] = self.owner[iid]
        ck.synced = True
        self.stats["syncs"] += 1
        self.stats["position_mismatches"] += len(rep.mismatch)
        self.stats["account_changed"] += account_changed
        self.events.append(("gateway_synced", {
            "solicited": rep.solicited, "open_orders": ck.open_count,
            "positions_lots": {i: ck.position_lots(i) for i in sorted(ck.books)},
            "mismatch": {i: {"ours": o, "venue": v} for i, (o, v) in sorted(rep.mismatch.items())}}))
        if (rep.mismatch or account_changed) and ck.state == TradingState.ACTIVE:
            self._set_state(TradingState.REDUCING, "venue_account_changed" if account_changed else "position_mismatch")
        out = []
        for sh in self.shards.values():
            if sh.state == ShardState.LIVE:
                state = self.state_report(sh.sid, now_ns, rep.mismatch)
                self.stats["state_pushes"] += 1
                out.append((sh.peer, [pack_header(MsgType.WELCOME, code=WelcomeCode.STATE_CHANGED, epoch=self.epoch,
                                                  count=len(state), ts_ns=now_ns), b"".join(state)]))
        return out

    def on_control(self, payload) -> None:
        """A CONTROL payload (the operator's): HALT / KILL_SWITCH -> HALTED (a kill switch latched: only
        RESUME ends it) and one CANCEL_ALL of every instrument for the sender; REDUCE_ONLY -> REDUCING
        (ignored while latched); RESUME -> ACTIVE. Malformed: counted ``controls_bad``."""
        c = unpack_control(payload)
        if c is None:
            self.stats["controls_bad"] += 1
            return
        cmd, reason = c[0], c[1]
        self.stats["controls"] += 1
        why = f"{cmd.name.lower()}:{reason.name.lower()}"
        ck = self.checks
        if cmd in (ControlCmd.HALT, ControlCmd.KILL_SWITCH):
            ck.latched = ck.latched or cmd == ControlCmd.KILL_SWITCH
            self._set_state(TradingState.HALTED, why)
            self.orders_out.append((ORDER_STRUCT.pack(0, OrderCmd.CANCEL_ALL, 0, 0, OrderOrigin.RISK, 0, 0, 0.0, 0.0,
                                                      0, c[2]), c[2]))
        elif cmd == ControlCmd.RESUME:
            ck.latched = False
            self._set_state(TradingState.ACTIVE, why)
        elif not ck.latched:
            self._set_state(TradingState.REDUCING, why)

    def _set_state(self, new: TradingState, cause: str) -> None:
        old, self.checks.state, self.cause = self.checks.state, new, cause
        self.events.append(("gateway_state", {"old": old.name, "new": new.name, "cause": cause,
                                              "latched": self.checks.latched}))

    def take_events(self) -> list[tuple[str, dict]]:
        """The (event, fields) to log since the last call."""
        out, self.events = self.events, []
        return out

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
