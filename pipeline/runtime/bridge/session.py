"""A strategy shard's side of the shared risk gateway (``aggregate.SharedGateway``), sans I/O: times are
``now_ns`` arguments; nothing here does I/O or raises on input.

HELLO until WELCOME (again every heartbeat while not welcomed); INTENTs wait in ``pending`` (client
order id -> frames) until their EXEC, and are all sent again when a WELCOME makes the session ACTIVE
(a WELCOME while ACTIVE, the answer to an earlier HELLO or a pushed state, resends nothing). CANCEL
INTENTs wait in ``pending_cancels`` until a terminal report of the order (and go again the same way).
A CANCEL_ALL (of one instrument, or 0: each the shard owns) is sent at once when ACTIVE, else held and
sent once after the next WELCOME. Any EXEC of an order ends its pending INTENT; each report is
delivered once, by (client order id, exec type, fill id): a second copy (an answer to a resend, a held
report) is counted ``duplicate_exec`` and not delivered.

The shard's state (positions, working orders, SYNC_DONE; ``take_state``) reaches the local risk
gateway as a state report from the gateway's ledger, which is its sender's, reconciled with the
venue: when the local risk asks (its SYNC, ``request_state``: a HELLO, answered by a WELCOME with the
state), when a WELCOME comes from another gateway than the last (it restarted; it welcomes no one
before its ledger is its sender's), and when the gateway pushes it (WELCOME STATE_CHANGED: its ledger
was replaced by a state report of its sender; POSITION_MISMATCH items in it make the local risk
reduce). The local risk takes an unasked state report as it takes a restarted sender's.

HEARTBEAT every ``heartbeat_ns``; the gateway silent for ``peer_timeout_ns``, or answering REFUSED
HALTED_SILENT: LOST (counted ``peer_lost``), HELLO again; REFUSED NOT_SYNCED (the gateway has no state
report of its sender yet): HELLO again at the next beat. Any other REFUSED is final (a claim the
config must fix).
"""

from __future__ import annotations

import enum

from pipeline.runtime.bridge.frames import (
    Header, MsgType, RefuseReason, WelcomeCode, pack_header, pack_ids, pack_intent,
)
from pipeline.trading.messages import EXEC_STRUCT, ExecType

#: reports after which an order no longer works (FILLED only when nothing is left)
_TERMINAL = (ExecType.REJECTED, ExecType.CANCELLED)


class SessionState(enum.IntEnum):
    JOINING = 0  # HELLO sent, no WELCOME yet
    ACTIVE = 1
    LOST = 2  # the gateway fell silent: HELLO again
    REFUSED = 3  # the gateway refused our claim: nothing is sent (a config error to fix)


class ShardSession:
    """A strategy shard's side of the shared gateway (see the module docstring)."""

    COUNTERS = ("intents", "sent", "resent", "execs", "duplicate_exec", "peer_lost", "refused", "welcomed",
                "unknown_peer", "refused_not_synced", "state_pushed", "cancel_alls", "gateway_restarts")

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
        self.state_out: list[bytes] = []  # the gateway's state report for the local risk
        self.pending_cancel_all: list[list[bytes]] = []  # CANCEL_ALL INTENTs made while not ACTIVE
        self.gateway_epoch = 0  # the epoch of the gateway that welcomed us last (0: none yet)
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

    def cancel_all(self, order_payload, ts_origin_ns: int) -> list[bytes] | None:
        """One CANCEL_ALL INTENT (the local risk's ORDER payload); its frames to send now (ACTIVE), or
        None: held and sent once after the next WELCOME. Never resent after that: cancelling again is
        the local risk's to decide."""
        frames = [pack_header(MsgType.INTENT, shard_id=self.shard_id, epoch=self.epoch, seq=0, ts_ns=ts_origin_ns),
                  pack_intent(order_payload, 0.0)]
        self.stats["cancel_alls"] += 1
        if self.state != SessionState.ACTIVE:
            self.pending_cancel_all.append(frames)
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
        if t == MsgType.REFUSED and hdr.code == RefuseReason.NOT_SYNCED:  # HELLO again at the next beat
            self.stats["refused_not_synced"] += 1
            if self.state == SessionState.ACTIVE:
                self.state = SessionState.LOST
            return [], None
        if t == MsgType.REFUSED:
            self.state, self.refuse_code = SessionState.REFUSED, hdr.code
            self.stats["refused"] += 1
            return [], None
        if self.state == SessionState.REFUSED:
            return [], None
        self.heard_ns = now_ns
        if t == MsgType.WELCOME:
            return self._welcome(hdr, body), None
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

    def _welcome(self, hdr: Header, body: bytes) -> list[list[bytes]]:
        """A WELCOME: its state delivered when asked for, when it says STATE_CHANGED, or when it comes
        from another gateway than the last (a restarted one: its ledger is its sender's state report);
        a pending NEW the state lists as open is known there and not sent again. Then, joining: every
        pending INTENT and held CANCEL_ALL (a WELCOME while ACTIVE resends nothing)."""
        restarted = self.gateway_epoch not in (0, hdr.epoch)
        self.gateway_epoch = hdr.epoch
        if hdr.code == WelcomeCode.STATE_CHANGED:
            self.stats["state_pushed"] += 1
        else:
            self.stats["welcomed"] += 1
            self.stats["gateway_restarts"] += restarted
        if body and (self.state_wanted or restarted or hdr.code == WelcomeCode.STATE_CHANGED):
            self.state_wanted = False
            self.state_out = [body[i:i + EXEC_STRUCT.size] for i in range(0, len(body), EXEC_STRUCT.size)]
            for item in self.state_out:
                _, etype, _, _, oid, *_ = EXEC_STRUCT.unpack(item)
                if etype == ExecType.OPEN_ORDER:
                    self.pending.pop(oid, None)
        if self.state == SessionState.ACTIVE:  # an answer to an earlier HELLO, or a push: already resent
            return []
        self.state = SessionState.ACTIVE
        self.stats["resent"] += len(self.pending) + len(self.pending_cancels)
        held, self.pending_cancel_all = self.pending_cancel_all, []
        self.stats["sent"] += len(held)
        return [*self.pending.values(), *self.pending_cancels.values(), *held]

    def request_state(self, now_ns: int) -> list[bytes] | None:
        """The local risk's SYNC: the shard's state is the gateway's (its ledger is the venue's, by its sender).
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
