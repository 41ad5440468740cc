"""The shared gateway's ledger is its sender's: nothing passes and no shard joins before the sender's
state report; a restarted gateway's positions are the venue's; an unasked report (the sender
restarted, or found a position apart from the venue) is applied, pushed to the shards, and makes
trading reduce until the operator resumes; CANCEL_ALL crosses from a shard to the sender."""

from __future__ import annotations

import pytest

from pipeline.runtime.bridge.aggregate import SharedGateway
from pipeline.runtime.bridge.frames import MsgType, RefuseReason, WelcomeCode, parse_control
from pipeline.runtime.bridge.session import SessionState, ShardSession
from pipeline.trading.messages import (
    EXEC_STRUCT, ControlCmd, ControlReason, ExecReason, ExecType, OrderCmd, Side, decode_order, pack_control,
)
from pipeline.trading.risk.checks import DenyReason, TradingState
from pipeline.trading.risk.gateway import RiskGateway
from tests.support.bridge import INSTRUMENTS, desk_specs, order_payload, paper_sender, state_item, synced

MS = 1_000_000
A, B = b"peer-a", b"peer-b"
LIMITS = dict(max_position_lots=400, max_order_lots=400, max_notional=1e9, max_gross_notional=1e9,
              max_net_notional=1e9, max_notional_per_min=1e9)


def gateway(epoch: int = 9) -> SharedGateway:
    specs, lim = desk_specs(**LIMITS)
    return SharedGateway({1: [1], 2: [2]}, specs, lim, peer_timeout_ns=500 * MS, heartbeat_ns=100 * MS, epoch=epoch)


def session(sid: int, ids, epoch: int = 3) -> ShardSession:
    return ShardSession(sid, ids, epoch=epoch, heartbeat_ns=100 * MS, peer_timeout_ns=500 * MS)


def deliver(gw: SharedGateway, peer: bytes, frames, now: int):
    hdr, body = parse_control(frames)
    return [parse_control(r) for r in gw.on_message(peer, hdr, body, now)]


def join(gw, peer, sess, now=0):
    (hdr, body), = deliver(gw, peer, sess.hello(now), now)
    return sess.on_message(hdr, body, now)


def buy(sess, oid, iid, price, size, side=Side.BUY):
    return sess.intent(order_payload(iid, oid, price, size, side), price, 0, oid)


def control(cmd: ControlCmd) -> bytes:
    return pack_control(cmd, ControlReason.OPERATOR, 1)


def venue_state():
    """The venue holds 300 lots of BTC (entry 100) and a working buy of 50 lots (order 7)."""
    return (state_item(1, ExecType.POSITION, price=100.0, size=0.3),
            state_item(1, ExecType.OPEN_ORDER, order_id=7, side=Side.BUY, price=99.0, size=0.05),
            state_item(2, ExecType.POSITION))


def test_no_shard_joins_and_nothing_passes_before_the_senders_state_report():
    gw, s1 = gateway(), session(1, [1])
    hello, = s1.tick(1)
    (h, _), = deliver(gw, A, hello, 1)  # not even started
    assert (h.msg_type, h.code) == (MsgType.REFUSED, RefuseReason.NOT_SYNCED)
    sync = decode_order(gw.start(0))
    assert sync.cmd == OrderCmd.SYNC
    (h, _), = deliver(gw, A, hello, 1)
    assert (h.msg_type, h.code) == (MsgType.REFUSED, RefuseReason.NOT_SYNCED)
    s1.on_message(h, b"", 1)
    assert s1.state == SessionState.JOINING and s1.stats["refused_not_synced"] == 1  # not final
    assert s1.tick(50 * MS) == [] and len(s1.tick(102 * MS)) == 1  # HELLO again at the next beat
    assert gw.stats["refused_not_synced"] == 2 and gw.stats["welcomed"] == 0
    # a fill the sender wrote before its state report: that report holds it; not applied, not sent on
    old_fill = EXEC_STRUCT.pack(1, ExecType.FILLED, Side.BUY, 0, 5, 100.0, 0.3, 0.0, 2, 50)
    assert gw.on_report(old_fill, 2, 2) == [] and gw.stats["reports_before_sync"] == 1
    for item in venue_state():
        assert gw.on_report(item, 2, 2) == []
    assert not gw.checks.synced  # collected, not applied before SYNC_DONE
    gw.on_report(state_item(0, ExecType.SYNC_DONE), 3, 3)
    assert gw.checks.synced and gw.stats["syncs"] == 1
    (w, body), = deliver(gw, A, s1.hello(4), 4)
    assert w.msg_type == MsgType.WELCOME


def test_a_restarted_gateways_ledger_is_the_venues_and_its_limits_count_it():
    # the venue holds 300 lots and a working buy of 50 (order 7): 50 more reach the 400-lot limit, 51 cross it
    gw, s1 = gateway(), session(1, [1])
    synced(gw, 0, venue_state())
    assert gw.position_lots(1) == pytest.approx(300) and gw.checks.open_count == 1
    assert gw.order_owner[7] == 1  # the order's owner: its instrument's shard
    join(gw, A, s1, 1)
    state = [EXEC_STRUCT.unpack(p) for p in s1.take_state()]  # its first WELCOME: not asked, not delivered
    assert state == []
    (h, _), = deliver(gw, A, buy(s1, 21, 1, 100.0, 0.051), 2)
    assert h.code == DenyReason.MAX_POSITION
    assert deliver(gw, A, buy(s1, 22, 1, 100.0, 0.05), 3) == []  # exactly at the limit: approved
    # the working order from before the restart fills: the report goes to its instrument's shard
    fill = EXEC_STRUCT.pack(1, ExecType.FILLED, Side.BUY, 0, 7, 99.0, 0.05, 0.0, 4, 70)
    (peer, frames), = gw.on_report(fill, 4, 4)
    assert peer == A and parse_control(frames)[0].seq == 7
    assert gw.position_lots(1) == pytest.approx(350) and 7 not in gw.checks.books[1].working
    # a report of an order this process never knew (not in the state report): to its instrument's shard
    late = EXEC_STRUCT.pack(1, ExecType.CANCELLED, Side.BUY, 0, 6, 99.0, 0.05, 0.0, 5, 0)
    (peer, frames), = gw.on_report(late, 5, 5)
    assert peer == A and parse_control(frames)[0].seq == 6


def test_a_shard_takes_a_restarted_gateways_state_and_does_not_resend_what_it_lists_as_open():
    old, s1 = gateway(epoch=9), session(1, [1])
    synced(old)
    join(old, A, s1, 0)
    buy(s1, 31, 1, 100.0, 0.01)                      # reached the sender, unanswered when the gateway died
    buy(s1, 32, 1, 100.0, 0.01)                      # never reached it
    new = gateway(epoch=10)                          # restarted: its ledger from the sender's report
    synced(new, 0, (state_item(1, ExecType.POSITION, price=100.0, size=0.2),
                    state_item(1, ExecType.OPEN_ORDER, order_id=31, side=Side.BUY, price=100.0, size=0.01)))
    s1.on_message(*parse_control(new.on_message(A, *parse_control(s1.hello(600 * MS)), 600 * MS)[0]), 600 * MS)
    assert s1.stats["gateway_restarts"] == 1
    state = [EXEC_STRUCT.unpack(p) for p in s1.take_state()]
    assert [(r[1], r[4]) for r in state] == [(ExecType.POSITION, 0), (ExecType.OPEN_ORDER, 31),
                                            (ExecType.SYNC_DONE, 0)]
    assert sorted(s1.pending) == [32]  # 31 is known there: not sent again


def test_an_unasked_state_report_with_a_mismatch_is_pushed_and_trading_reduces_until_resumed():
    gw, s1, s2 = gateway(), session(1, [1]), session(2, [2])
    synced(gw)
    join(gw, A, s1), join(gw, B, s2)
    # the sender restarted and found the venue at 300 lots where its journal said 0
    assert gw.on_report(state_item(1, ExecType.POSITION, price=100.0, size=0.3), 5, 5) == []
    assert not gw.checks.synced  # collecting: NOT_SYNCED meanwhile
    (h, _), = deliver(gw, B, buy(s2, 40, 2, 10.0, 0.1), 6)
    assert h.code == DenyReason.NOT_SYNCED
    gw.on_report(state_item(1, ExecType.POSITION_MISMATCH, price=0.0, size=0.3), 7, 7)
    pushes = gw.on_report(state_item(0, ExecType.SYNC_DONE), 8, 8)
    assert gw.checks.state == TradingState.REDUCING and gw.cause == "position_mismatch"
    assert sorted(p for p, _ in pushes) == [A, B] and gw.stats["state_pushes"] == 2
    frames = dict(pushes)[A]
    hdr, body = parse_control(frames)
    assert (hdr.msg_type, hdr.code) == (MsgType.WELCOME, WelcomeCode.STATE_CHANGED)
    s1.on_message(hdr, body, 9)
    pushed = s1.take_state()
    assert [EXEC_STRUCT.unpack(p)[1] for p in pushed] == [ExecType.POSITION, ExecType.POSITION_MISMATCH,
                                                          ExecType.SYNC_DONE]
    # the shard's local risk takes it as a restarted sender's report: the venue's position, and it reduces
    local = RiskGateway(INSTRUMENTS, desk_specs(**LIMITS)[1], clock=lambda: 9)
    local.start()
    local.on_exec(state_item(0, ExecType.SYNC_DONE))
    for p in pushed:
        local.on_exec(p)
    assert local.position_lots(1) == pytest.approx(300) and local.state == TradingState.REDUCING
    # at the shared gateway: a buy of instrument 1 would grow the position: denied; a sell reduces it
    (h, _), = deliver(gw, A, buy(s1, 41, 1, 100.0, 0.01), 10)
    assert h.code == DenyReason.REDUCING
    assert deliver(gw, A, buy(s1, 42, 1, 100.0, 0.01, side=Side.SELL), 11) == []
    gw.on_control(control(ControlCmd.RESUME))
    assert gw.checks.state == TradingState.ACTIVE
    assert deliver(gw, A, buy(s1, 43, 1, 99.9, 0.02), 12) == []  # below its own sell at 100
    assert [e for e, _ in gw.take_events()] == ["gateway_sync_requested", "gateway_synced", "gateway_sync_started",
                                                "gateway_synced", "gateway_state", "gateway_state"]


def test_an_account_changed_report_reduces_and_a_duplicate_ids_fill_is_never_applied():
    gw, s1 = gateway(), session(1, [1])
    synced(gw)
    join(gw, A, s1)
    deliver(gw, A, buy(s1, 51, 1, 100.0, 0.01), 1)
    paper_sender(gw, 2, fill=False)
    dup = EXEC_STRUCT.pack(1, ExecType.FILLED, Side.BUY, ExecReason.DUPLICATE, 51, 100.0, 0.01, 0.0, 3, 0)
    (peer, _), = gw.on_report(dup, 3, 3)
    assert peer == A and gw.position_lots(1) == 0 and gw.stats["duplicate_answers"] == 1
    gw.on_report(state_item(0, ExecType.SYNC_DONE, reason=ExecReason.ACCOUNT_CHANGED), 4, 4)
    assert gw.checks.state == TradingState.REDUCING and gw.cause == "venue_account_changed"


def test_bad_state_items_and_controls_are_counted_not_applied():
    gw = gateway()
    gw.start(0)
    gw.on_report(state_item(9, ExecType.POSITION, size=1.0), 1, 1)                      # unknown instrument
    gw.on_report(state_item(1, ExecType.POSITION, size=float("nan")), 1, 1)             # not finite
    gw.on_report(state_item(1, ExecType.OPEN_ORDER, order_id=3, side=0, size=1.0), 1, 1)  # no side
    gw.on_report(state_item(0, ExecType.SYNC_DONE), 2, 2)
    assert gw.stats["reports_bad"] == 3 and gw.position_lots(1) == 0 and gw.checks.open_count == 0
    gw.on_control(b"\x00" * 3)
    assert gw.stats["controls_bad"] == 1 and gw.checks.state == TradingState.ACTIVE


def test_halt_cancels_everything_at_the_sender_and_denies_new_orders():
    gw, s1 = gateway(), session(1, [1])
    synced(gw)
    join(gw, A, s1)
    gw.on_control(control(ControlCmd.KILL_SWITCH))
    (o,), _ = paper_sender(gw, 1)
    assert (o.cmd, o.instrument_id) == (OrderCmd.CANCEL_ALL, 0)
    (h, _), = deliver(gw, A, buy(s1, 61, 1, 100.0, 0.01), 2)
    assert h.code == DenyReason.HALTED and gw.checks.latched
    gw.on_control(control(ControlCmd.REDUCE_ONLY))  # latched: stays HALTED
    assert gw.checks.state == TradingState.HALTED


@pytest.mark.parametrize("iid, sent", [(1, [1]), (0, [1, 3]), (2, [])])
def test_a_cancel_all_goes_to_the_sender_for_the_shards_own_instruments_only(iid, sent):
    specs, lim = desk_specs(**LIMITS)
    specs[3] = specs[1]
    gw = SharedGateway({1: [1, 3], 2: [2]}, specs, lim, peer_timeout_ns=500 * MS, heartbeat_ns=100 * MS, epoch=9)
    synced(gw)
    s1 = session(1, [1, 3])
    join(gw, A, s1)
    frames = s1.cancel_all(order_payload(iid, 0, 0.0, 0.0, cmd=OrderCmd.CANCEL_ALL), 5)
    assert deliver(gw, A, frames, 1) == []  # no answer: the sender's CANCELLED reports are
    orders = [decode_order(p) for p, _ in gw.take_orders()]
    assert [(o.cmd, o.instrument_id) for o in orders] == [(OrderCmd.CANCEL_ALL, i) for i in sent]
    assert gw.stats["cancel_all_refused"] == (not sent)


def test_a_cancel_all_made_while_not_joined_goes_once_after_the_welcome():
    gw, s1 = gateway(), session(1, [1])
    synced(gw)
    assert s1.cancel_all(order_payload(1, 0, 0.0, 0.0, cmd=OrderCmd.CANCEL_ALL), 5) is None  # JOINING: held
    (w, body), = deliver(gw, A, s1.hello(1), 1)
    resend, _ = s1.on_message(w, body, 1)
    assert [parse_control(f)[0].msg_type for f in resend] == [MsgType.INTENT]
    assert s1.pending_cancel_all == []
    deliver(gw, A, resend[0], 2)
    assert [decode_order(p).cmd for p, _ in gw.take_orders()] == [OrderCmd.CANCEL_ALL]
    (w, body), = deliver(gw, A, s1.hello(3), 3)
    assert s1.on_message(w, body, 3) == ([], None)  # not again


def test_an_order_approved_before_an_unasked_state_report_and_acked_after_it_counts_again():
    gw, s1 = gateway(), session(1, [1])
    synced(gw)
    join(gw, A, s1)
    deliver(gw, A, buy(s1, 71, 1, 100.0, 0.01), 1)  # approved; still in the ring when the sender restarts
    assert gw.checks.open_count == 1
    gw.on_report(state_item(0, ExecType.SYNC_DONE), 2, 2)  # the restarted sender's report: nothing open yet
    assert gw.checks.open_count == 0
    (payload, _), = gw.take_orders()
    sent = decode_order(payload)
    ack = EXEC_STRUCT.pack(1, ExecType.ACKED, sent.side, 0, 71, sent.price, sent.size, sent.size, 3, 0)
    (peer, _), = gw.on_report(ack, 3, 3)
    assert peer == A and gw.checks.open_count == 1 and 71 in gw.checks.books[1].working
