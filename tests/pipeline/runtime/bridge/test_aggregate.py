"""The shared risk gateway across shards and a shard's session: ownership, aggregate limits through
the project's pre-trade checks, idempotent resends, silent shards halted, bad input counted."""

from __future__ import annotations

import pytest

from pipeline.runtime.bridge.aggregate import ShardState, SharedGateway, check_ownership
from pipeline.runtime.bridge.session import SessionState, ShardSession
from pipeline.runtime.bridge.frames import MsgType, RefuseReason, parse_control
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import EXEC_STRUCT, ExecType, OrderCmd, Side
from pipeline.trading.risk.checks import DenyReason
from tests.support.bridge import desk_specs, order_payload, paper_sender, state_item, synced

MS = 1_000_000
A, B = b"peer-a", b"peer-b"


def gateway(shards=None, **limits) -> SharedGateway:
    """A gateway synced with its sender (a flat account)."""
    gw = unsynced(shards, **limits)
    synced(gw)
    return gw


def unsynced(shards=None, epoch=9, **limits) -> SharedGateway:
    specs, lim = desk_specs(**limits)
    return SharedGateway(shards or {1: [1], 2: [2]}, specs, lim, peer_timeout_ns=500 * MS,
                         heartbeat_ns=100 * MS, epoch=epoch)


def session(sid: int, ids) -> ShardSession:
    return ShardSession(sid, ids, epoch=3, heartbeat_ns=100 * MS, peer_timeout_ns=500 * MS)


def deliver(gw: SharedGateway, peer: bytes, frames, now: int):
    hdr, body = parse_control(frames)
    return [parse_control(r) for r in gw.on_message(peer, hdr, body, now)]


def execute(gw: SharedGateway, peer: bytes, frames, now: int, fill: bool = True):
    """Deliver ``frames``; the gateway's own replies plus what the host's sender (a double) answered
    through it, all as parsed [(header, body)] for ``peer``."""
    replies = deliver(gw, peer, frames, now)
    _, routed = paper_sender(gw, now, fill=fill)
    return replies + [parse_control(f) for p, f in routed if p == peer]


def join(gw, peer, sess, now=0):
    (hdr, _), = deliver(gw, peer, sess.hello(now), now)
    return sess.on_message(hdr, b"", now)


def buy(sess, oid, iid, price, size):
    return sess.intent(order_payload(iid, oid, price, size, Side.BUY), price, 0, oid)


def test_ownership_table_refuses_an_instrument_owned_twice_or_unknown():
    check_ownership({1: [1], 2: [2]}, {1, 2})
    with pytest.raises(ConfigError, match=r"shards.2: instrument 1 is already owned by shard 1"):
        check_ownership({1: [1], 2: [1, 2]}, {1, 2})
    with pytest.raises(ConfigError, match="instrument 7 is not configured"):
        check_ownership({1: [7]}, {1, 2})


@pytest.mark.parametrize("sid, claim, why", [
    (3, [2], RefuseReason.UNKNOWN_SHARD),
    (2, [1, 2], RefuseReason.OWNED_ELSEWHERE),   # shard 2 claims shard 1's instrument
    (1, [], RefuseReason.CLAIM_MISMATCH),
])
def test_hello_with_a_bad_claim_is_refused(sid, claim, why):
    gw, sess = gateway(), session(sid, claim)
    (hdr, _), = deliver(gw, A, sess.hello(0), 0)
    assert (hdr.msg_type, hdr.code) == (MsgType.REFUSED, why)
    sess.on_message(hdr, b"", 0)
    assert sess.state == SessionState.REFUSED and sess.tick(10**9) == []
    assert gw.stats["refused"] == 1


def test_aggregate_position_limit_holds_across_shards():
    # 0.3 BTC is 300 lots: each shard alone stays below the 400-lot limit, together they would not
    gw = gateway(shards={1: [1], 2: []}, max_position_lots=400, max_order_lots=400, max_notional=1e9,
                 max_gross_notional=1e9, max_net_notional=1e9, max_notional_per_min=1e9)
    s1, s2 = session(1, [1]), session(2, [])
    join(gw, A, s1), join(gw, B, s2)
    (h, ack), (_, fill) = execute(gw, A, buy(s1, 11, 1, 100.0, 0.3), 1)
    assert h.code == 0 and [EXEC_STRUCT.unpack(b)[1] for b in (ack, fill)] == [ExecType.ACKED, ExecType.FILLED]
    assert gw.position_lots(1) == pytest.approx(300)  # the sender's fill, not the approval, moved it
    # shard 2 does not own instrument 1: refused whatever the limits say
    (h, _), = deliver(gw, B, buy(s2, 12, 1, 100.0, 0.05), 2)
    assert h.code == DenyReason.NOT_ALLOWED


def test_aggregate_gross_limit_denies_the_shard_that_crosses_it():
    gw = gateway(max_gross_notional=150.0, max_order_lots=1e6, max_position_lots=1e6, max_notional=1e6, max_net_notional=1e6, max_notional_per_min=1e6)
    s1, s2 = session(1, [1]), session(2, [2])
    join(gw, A, s1), join(gw, B, s2)
    assert deliver(gw, A, buy(s1, 21, 1, 100.0, 1.0), 1) == []  # 100 of gross: below 150 alone; working
    (h2, b2), = deliver(gw, B, buy(s2, 22, 2, 100.0, 1.0), 2)    # 100 alone, 200 together: denied
    assert h2.code == DenyReason.GROSS and gw.stats["approved"] == 1
    assert EXEC_STRUCT.unpack(b2)[1] == ExecType.REJECTED
    assert gw.stats["deny_gross"] == 1


def test_resend_gets_the_same_answer_and_is_applied_once():
    gw, s1 = gateway(), session(1, [1])
    join(gw, A, s1)
    frames = buy(s1, 31, 1, 100.0, 0.01)
    first = execute(gw, A, frames, 1)
    again = execute(gw, A, frames, 2)
    assert gw.stats["resent"] == 1 and gw.stats["approved"] == 1 and gw.stats["fills"] == 1
    assert again == first[:1]  # the sender's first report again; nothing sent to the sender twice
    assert gw.position_lots(1) == pytest.approx(10)
    delivered = [s1.on_message(h, b, 3)[1] for h, b in first]
    assert all(d is not None for d in delivered) and s1.pending == {}
    out, dup = s1.on_message(*again[0], 4)
    assert dup is None and s1.stats["duplicate_exec"] == 1  # never delivered twice


def test_approved_orders_go_to_the_sender_once_and_its_reports_to_the_owning_shard():
    gw = gateway(max_order_lots=1e6, max_position_lots=1e6)
    s1, s2 = session(1, [1]), session(2, [2])
    join(gw, A, s1), join(gw, B, s2)
    assert deliver(gw, A, buy(s1, 81, 1, 100.0, 0.01), 1) == []
    assert deliver(gw, B, buy(s2, 82, 2, 100.0, 0.01), 1) == []
    deliver(gw, A, s1.pending[81], 2)  # a resend before the sender answered: not sent on again
    sent, routed = paper_sender(gw, 3, fill=False)
    assert [(o.order_id, o.cmd) for o in sent] == [(81, OrderCmd.NEW), (82, OrderCmd.NEW)]
    assert sorted((p, parse_control(f)[0].seq) for p, f in routed) == [(A, 81), (B, 82)]
    # a cancel of its own order goes to the sender once; of another shard's: REJECTED NOT_ALLOWED
    cancel = s1.intent(order_payload(1, 81, 100.0, 0.01, cmd=OrderCmd.CANCEL), 100.0, 0, 81, cancel=True)
    assert deliver(gw, A, cancel, 4) == [] and deliver(gw, A, cancel, 5) == []
    steal = s1.intent(order_payload(2, 82, 100.0, 0.01, cmd=OrderCmd.CANCEL), 100.0, 0, 82, cancel=True)
    (h, _), = deliver(gw, A, steal, 6)
    assert h.code == DenyReason.NOT_ALLOWED and gw.stats["cancel_refused"] == 1
    sent, routed = paper_sender(gw, 7)
    assert [(o.order_id, o.cmd) for o in sent] == [(81, OrderCmd.CANCEL)]
    (peer, frames), = routed
    hdr, body = parse_control(frames)
    assert peer == A and EXEC_STRUCT.unpack(body)[1] == ExecType.CANCELLED
    s1.on_message(hdr, body, 8)
    assert 81 not in s1.pending_cancels and gw.checks.open_count == 1  # 82 still works


def test_reports_for_a_shard_that_is_not_live_are_held_until_it_joins_again():
    gw, s1 = gateway(), session(1, [1])
    join(gw, A, s1)
    deliver(gw, A, buy(s1, 91, 1, 100.0, 0.01), 1)
    gw.tick(501 * MS)
    assert gw.shard_state(1) == ShardState.HALTED
    _, routed = paper_sender(gw, 502 * MS)
    assert routed == [] and gw.stats["reports_held"] == 2
    assert gw.position_lots(1) == pytest.approx(10)  # the ledger moved all the same
    welcome, *held = deliver(gw, A, s1.hello(503 * MS), 503 * MS)
    assert welcome[0].msg_type == MsgType.WELCOME
    assert [EXEC_STRUCT.unpack(b)[1] for _, b in held] == [ExecType.ACKED, ExecType.FILLED]


def test_a_silent_shard_is_halted_and_must_join_again_before_anything_applies():
    gw, s1 = gateway(), session(1, [1])
    join(gw, A, s1)
    halted, _ = gw.tick(400 * MS)
    assert halted == []
    halted, _ = gw.tick(501 * MS)
    assert halted == [1] and gw.shard_state(1) == ShardState.HALTED
    frames = buy(s1, 41, 1, 100.0, 0.01)
    (h, _), = deliver(gw, A, frames, 502 * MS)
    assert (h.msg_type, h.code) == (MsgType.REFUSED, RefuseReason.HALTED_SILENT)
    assert gw.stats["from_halted"] == 1 and gw.stats["intents"] == 0
    s1.on_message(h, b"", 502 * MS)
    assert s1.state == SessionState.LOST
    hello = s1.tick(503 * MS)
    assert parse_control(hello[0])[0].msg_type == MsgType.HELLO
    (w, _), = deliver(gw, A, hello[0], 504 * MS)
    resend, _ = s1.on_message(w, b"", 504 * MS)
    assert resend == [frames]  # the unanswered intent goes again and is decided as new
    assert deliver(gw, A, resend[0], 505 * MS) == [] and gw.stats["approved"] == 1


def test_messages_from_an_unwelcomed_peer_are_counted_and_dropped():
    gw, s1 = gateway(), session(1, [1])
    join(gw, A, s1)
    assert deliver(gw, B, buy(s1, 51, 1, 100.0, 0.01), 1) == []  # right shard id, wrong peer
    other = session(2, [2])
    other.intent(order_payload(2, 52, 100.0, 0.01), 100.0, 0, 52)
    assert deliver(gw, A, other.pending[52], 1) == []  # another shard's id, not welcomed
    assert gw.stats["unknown_shard"] == 2 and gw.stats["intents"] == 0


def test_session_detects_a_silent_gateway_and_joins_again():
    s1 = session(1, [1])
    assert parse_control(s1.tick(0)[0])[0].msg_type == MsgType.HELLO
    gw = gateway()
    join(gw, A, s1, now=0)
    assert s1.state == SessionState.ACTIVE
    assert buy(s1, 61, 1, 100.0, 0.01) is not None
    s1.tick(400 * MS)
    assert s1.state == SessionState.ACTIVE
    s1.tick(501 * MS)
    assert s1.state == SessionState.LOST and s1.stats["peer_lost"] == 1
    assert buy(s1, 62, 1, 100.0, 0.01) is None  # held until the next WELCOME
    assert sorted(s1.pending) == [61, 62]


def test_an_order_id_another_shard_used_is_a_duplicate_not_the_other_shards_answer():
    gw = gateway(max_order_lots=1e6, max_position_lots=1e6)
    s1, s2 = session(1, [1]), session(2, [2])
    join(gw, A, s1), join(gw, B, s2)
    assert deliver(gw, A, buy(s1, 71, 1, 100.0, 0.01), 1) == []  # approved: to the sender
    (h2, b2), = deliver(gw, B, buy(s2, 71, 2, 100.0, 0.01), 2)
    assert h2.code == DenyReason.DUPLICATE
    assert EXEC_STRUCT.unpack(b2)[0] == 2  # shard 2's own instrument in its own answer


def test_the_rate_window_counts_every_shards_approved_orders():
    gw = gateway(max_orders_per_s=2, max_order_lots=1e6, max_position_lots=1e6)
    s1, s2 = session(1, [1]), session(2, [2])
    join(gw, A, s1), join(gw, B, s2)
    assert deliver(gw, A, buy(s1, 101, 1, 100.0, 0.01), 1 * MS) == []
    assert deliver(gw, B, buy(s2, 102, 2, 100.0, 0.01), 2 * MS) == []  # one each: two in the last second
    (h, _), = deliver(gw, A, buy(s1, 103, 1, 100.0, 0.01), 3 * MS)
    assert h.code == DenyReason.RATE
    assert deliver(gw, A, buy(s1, 104, 1, 100.0, 0.01), 1002 * MS) == []  # the window moved on


def test_a_restarted_shard_gets_its_positions_and_working_orders_back_from_the_gateway():
    gw = gateway(max_order_lots=1e6, max_position_lots=1e6)
    s1, s2 = session(1, [1]), session(2, [2])
    join(gw, A, s1), join(gw, B, s2)
    execute(gw, A, buy(s1, 111, 1, 100.0, 0.3), 1)                 # filled: 300 lots
    execute(gw, A, buy(s1, 112, 1, 99.0, 0.1), 2, fill=False)      # working
    execute(gw, B, buy(s2, 113, 2, 50.0, 0.2), 3)                  # shard 2's: not in shard 1's state
    again = ShardSession(1, [1], epoch=4, heartbeat_ns=100 * MS, peer_timeout_ns=500 * MS)  # a new process
    assert again.request_state(4) is None  # not joined yet: the state comes with the first WELCOME
    (w, body), = deliver(gw, b"peer-a2", again.tick(5)[0], 5)
    again.on_message(w, body, 5)
    state = [EXEC_STRUCT.unpack(p) for p in again.take_state()]
    assert [(r[0], r[1], r[4]) for r in state] == [(1, ExecType.POSITION, 0), (1, ExecType.OPEN_ORDER, 112),
                                                   (0, ExecType.SYNC_DONE, 0)]
    assert (state[0][6], state[0][5]) == pytest.approx((0.3, 100.0))  # size, average entry
    assert (state[1][2], state[1][5], state[1][7]) == (Side.BUY, 99.0, pytest.approx(0.1))
    assert again.take_state() == []  # delivered once
    # asked again while ACTIVE: a HELLO, answered with the state as it is now
    hello = again.request_state(6)
    (w, body), = deliver(gw, b"peer-a2", hello, 6)
    again.on_message(w, body, 6)
    assert len(again.take_state()) == 3 and again.state == SessionState.ACTIVE
