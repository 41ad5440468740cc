"""The shared risk gateway across shards and a shard's session: ownership, aggregate limits through
the project's pre-trade checks, idempotent resends, silent shards halted, bad input counted."""

from __future__ import annotations

import pytest

from pipeline.runtime.bridge.aggregate import (
    SessionState, ShardSession, ShardState, SharedGateway, check_ownership,
)
from pipeline.runtime.bridge.frames import MsgType, RefuseReason, parse_control
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import EXEC_STRUCT, ExecType, Side
from pipeline.trading.risk.checks import DenyReason
from tests.support.bridge import desk_specs, order_payload

MS = 1_000_000
A, B = b"peer-a", b"peer-b"


def gateway(shards=None, **limits) -> SharedGateway:
    specs, lim = desk_specs(**limits)
    return SharedGateway(shards or {1: [1], 2: [2]}, specs, lim, peer_timeout_ns=500 * MS,
                         heartbeat_ns=100 * MS, epoch=9)


def session(sid: int, ids) -> ShardSession:
    return ShardSession(sid, ids, epoch=3, heartbeat_ns=100 * MS, peer_timeout_ns=500 * MS)


def deliver(gw: SharedGateway, peer: bytes, frames, now: int):
    hdr, body = parse_control(frames)
    return [parse_control(r) for r in gw.on_message(peer, hdr, body, now)]


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
    (h, body), = deliver(gw, A, buy(s1, 11, 1, 100.0, 0.3), 1)
    assert h.code == 0 and EXEC_STRUCT.unpack(body)[1] == ExecType.FILLED
    assert gw.position_lots(1) == pytest.approx(300)
    # shard 2 does not own instrument 1: refused whatever the limits say
    (h, _), = deliver(gw, B, buy(s2, 12, 1, 100.0, 0.05), 2)
    assert h.code == DenyReason.NOT_ALLOWED


def test_aggregate_gross_limit_denies_the_shard_that_crosses_it():
    gw = gateway(max_gross_notional=150.0, max_order_lots=1e6, max_position_lots=1e6, max_notional=1e6, max_net_notional=1e6, max_notional_per_min=1e6)
    s1, s2 = session(1, [1]), session(2, [2])
    join(gw, A, s1), join(gw, B, s2)
    (h1, _), = deliver(gw, A, buy(s1, 21, 1, 100.0, 1.0), 1)     # 100 of gross: below 150 alone
    (h2, b2), = deliver(gw, B, buy(s2, 22, 2, 100.0, 1.0), 2)    # 100 alone, 200 together: denied
    assert (h1.code, h2.code) == (0, DenyReason.GROSS)
    assert EXEC_STRUCT.unpack(b2)[1] == ExecType.REJECTED
    assert gw.stats["deny_gross"] == 1


def test_resend_gets_the_same_answer_and_is_applied_once():
    gw, s1 = gateway(), session(1, [1])
    join(gw, A, s1)
    frames = buy(s1, 31, 1, 100.0, 0.01)
    first = deliver(gw, A, frames, 1)
    again = deliver(gw, A, frames, 2)
    assert first == again and gw.stats["resent"] == 1 and gw.stats["approved"] == 1
    assert gw.position_lots(1) == pytest.approx(10)
    out, delivered = s1.on_message(*first[0], 3)
    assert delivered is not None and s1.pending == {}
    out, dup = s1.on_message(*again[0], 4)
    assert dup is None and s1.stats["duplicate_exec"] == 1  # never delivered twice


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
    (h, _), = deliver(gw, A, resend[0], 505 * MS)
    assert h.code == 0 and gw.stats["approved"] == 1


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
    (h1, _), = deliver(gw, A, buy(s1, 71, 1, 100.0, 0.01), 1)
    (h2, b2), = deliver(gw, B, buy(s2, 71, 2, 100.0, 0.01), 2)
    assert (h1.code, h2.code) == (0, DenyReason.DUPLICATE)
    assert EXEC_STRUCT.unpack(b2)[0] == 2  # shard 2's own instrument in its own answer
