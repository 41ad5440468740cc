"""The risk gateway (pipeline/trading/risk/gateway.py): EMERGENCY, sync and state reports, malformed input, the
venue's position, and a property: no approved order ever breaks a limit, judged by an independent model
of the limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.trading import messages
from pipeline.trading.messages import (EXEC_DTYPE, INSTRUCTION_DTYPE, ORDER_DTYPE, SIGNAL_DTYPE, Action, ControlCmd,
                                       ExecReason, ExecType, Label, OrderCmd, OrderOrigin, Side)
from pipeline.trading.risk import (CancelAllSent, DenyReason, EmergencyReceived, FillApplied, MessageRejected,
                                   OrderApproved, OrderDenied, PositionMismatch, RiskGateway, RiskLimits, StateChanged,
                                   Synced, SyncRequested, TradingState, VenueAccountChanged)
from tests.support.clock import ManualClock
from tests.support.risk import (BASE, INSTRUMENTS, MS, ctl, ex, fill, gateway, instr, of,
                                                 order, reason, sig)


def test_emergency_sends_one_cancel_all_at_once_even_when_halted():
    gw, clock = gateway()
    gw.on_instruction(instr(clock, target=3))
    gw.on_control(ctl(ControlCmd.HALT))
    events = gw.on_signal(sig(1, label=Label.EMERGENCY, seq=55), clock())
    assert isinstance(events[0], CancelAllSent) and events[0].instrument_id == 1 and events[0].origin_seq == 55
    assert events[0].origin == OrderOrigin.FAST
    assert of(events, EmergencyReceived)[0].repeated is False
    again = gw.on_signal(sig(1, label=Label.EMERGENCY, seq=56), clock())  # inside the cool-down: no second one
    assert not of(again, CancelAllSent) and of(again, EmergencyReceived)[0].repeated


def test_sync_replaces_position_and_open_orders():
    clock = ManualClock()
    gw = RiskGateway(INSTRUMENTS, RiskLimits(**BASE), clock)
    req = gw.start()
    assert [type(e) for e in req] == [SyncRequested] and req[0].cmd == OrderCmd.SYNC
    gw.on_exec(ex(ExecType.POSITION, iid=1, price=98.0, size=-4.0))
    gw.on_exec(ex(ExecType.OPEN_ORDER, iid=2, oid=31, side=Side.SELL, price=101.0, size=2.0, leaves=2.0))
    assert not gw.synced
    synced = of(gw.on_exec(ex(ExecType.SYNC_DONE)), Synced)[0]
    assert synced.positions == {1: -4.0, 2: 0.0} and synced.open_orders == 1 and synced.solicited
    assert gw.books[1].avg_px == 98.0 and 31 in gw.books[2].working and gw.synced
    # unsolicited (the sender restarted): not synced until its SYNC_DONE, then replaced again
    gw.on_signal(sig(1), clock())
    gw.on_exec(ex(ExecType.POSITION, iid=1, price=100.0, size=2.0))
    assert not gw.synced and reason(order(gw)) == DenyReason.NOT_SYNCED
    gw.on_exec(ex(ExecType.SYNC_DONE))
    assert gw.synced and gw.books[1].position == 2.0 and gw.open_count == 0
    assert reason(order(gw)) == "APPROVED"


def test_malformed_input_is_rejected_not_raised():
    gw, clock = gateway()
    assert of(gw.on_signal(b"x" * 10, 0), MessageRejected)
    assert of(gw.on_signal(sig(1, mid=float("nan")), clock()), MessageRejected)
    assert of(gw.on_signal(sig(9), clock()), MessageRejected)
    assert of(gw.on_instruction(b"x" * 47), MessageRejected)
    assert of(gw.on_instruction(instr(clock, action=9)), MessageRejected)
    assert of(gw.on_instruction(instr(clock, iid=9)), OrderDenied)[0].reason == DenyReason.NOT_ALLOWED


# ------------------------------------------------------------------------------------- property
def _check_independently(o, lim, spec, now, model):
    """Judge one approved order against the limits with the test's own model of the gateway's state."""
    tick, lot = spec.tick_size, spec.lot_size
    assert math.isfinite(o.price) and o.price > 0 and abs(o.price / tick - round(o.price / tick)) < 1e-6
    assert o.size > 0 and abs(o.size / lot - round(o.size / lot)) < 1e-6
    assert o.size <= lim.max_order_lots * lot + 1e-9
    assert model["state"] == "ACTIVE" or model["state"] == "REDUCING"
    mid, ref_ns = model["mid"][spec.id], model["ref_ns"][spec.id]
    assert ref_ns is not None and now - ref_ns <= lim.stale_ref_ms * MS
    assert abs(o.price - mid) / mid <= lim.collar_bps * 1e-4 + 1e-12
    notional = o.price * o.size
    assert lim.min_notional - 1e-9 <= notional <= lim.max_notional + 1e-9
    pos = model["pos"][spec.id]
    mine = [w for w in model["open"].values() if w["iid"] == spec.id]
    buys = sum(w["size"] for w in mine if w["side"] == Side.BUY)
    sells = sum(w["size"] for w in mine if w["side"] == Side.SELL)
    if o.side == Side.BUY:
        assert pos + buys + o.size <= lim.max_position_lots * lot + 1e-9
    else:
        assert pos - sells - o.size >= -lim.max_position_lots * lot - 1e-9
    if model["state"] == "REDUCING":
        assert (pos > 0 and o.side == Side.SELL and pos - sells - o.size >= -1e-9) or (
            pos < 0 and o.side == Side.BUY and pos + buys + o.size <= 1e-9)
    gross = 0.0
    for ins in INSTRUMENTS:
        p = model["pos"][ins.id]
        b = sum(w["size"] for w in model["open"].values() if w["iid"] == ins.id and w["side"] == Side.BUY)
        s = sum(w["size"] for w in model["open"].values() if w["iid"] == ins.id and w["side"] == Side.SELL)
        if ins.id == spec.id:
            b, s = (b + o.size, s) if o.side == Side.BUY else (b, s + o.size)
        gross += max(abs(p + b), abs(p - s)) * model["mid"][ins.id]
    assert gross <= lim.max_gross_notional + 1e-6
    assert len(model["open"]) < lim.max_open_orders
    assert sum(1 for t, _ in model["sent"] if t > now - 1_000 * MS) < lim.max_orders_per_s
    assert sum(n for t, n in model["sent"] if t > now - 60_000 * MS) + notional <= lim.max_notional_per_min + 1e-6
    assert o.order_id not in model["ids"]
    for w in mine:
        if w["side"] != o.side:
            assert (o.price < w["price"]) if o.side == Side.BUY else (o.price > w["price"])


# targets mostly within the position limits (so that orders are approved and the property is about
# them), some far beyond; a fresh reference before most instructions
ins_st = st.tuples(st.just("ins"), st.sampled_from([1, 2]), st.sampled_from([*Action, Action.BUY, Action.SELL]),
                   st.one_of(st.integers(-8, 8), st.integers(-8, 8), st.integers(-40, 40)),
                   st.integers(0, 3), st.integers(1, 3000), st.one_of(st.none(), st.floats(99, 101), st.floats(99, 101)))
op_st = st.one_of(
    st.tuples(st.just("sig"), st.sampled_from([1, 2]), st.floats(97, 103), st.floats(0.0, 2.0), st.integers(0, 700)),
    ins_st, ins_st,
    st.tuples(st.just("fill"), st.integers(0, 50), st.floats(0.1, 1.0)),
    st.tuples(st.just("cancelled"), st.integers(0, 50)),
    st.tuples(st.just("ctl"), st.sampled_from([ControlCmd.REDUCE_ONLY, ControlCmd.RESUME, ControlCmd.RESUME,
                                               ControlCmd.HALT])),
)
limits_st = st.builds(
    lambda pos, order_l, child, collar, gross, n_open, rate, per_min, min_n, max_n: RiskLimits(
        max_position_lots=float(pos), max_order_lots=float(order_l), max_child_lots=float(child), collar_bps=collar,
        stale_ref_ms=500, min_notional=min_n, max_notional=max_n, max_gross_notional=gross,
        max_open_orders=n_open, max_orders_per_s=rate, max_notional_per_min=per_min, daily_loss_limit=1e12,
        emergency_cooldown_ms=100, sigma_alpha=0.2),
    st.integers(1, 30), st.integers(1, 12), st.integers(1, 6), st.floats(20.0, 300.0), st.floats(100.0, 20000.0),
    st.integers(1, 12), st.integers(1, 20), st.floats(100.0, 20000.0), st.floats(0.0, 50.0), st.floats(60.0, 3000.0))


_TALLY = {"examples": 0, "approved": 0, "with_approval": 0}


# derandomize: the same 150 runs every time, so the exercised-share check below is a fixed fact of the
# code, not a draw (random draws approved in 15-55 % of runs, a fifth of them under the limit sometimes)
@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(limits=limits_st, init_pos=st.one_of(st.tuples(st.integers(-3, 3), st.integers(-10, 10)),
                                             st.tuples(st.integers(-15, 15), st.integers(-100, 100))),
       ops=st.lists(op_st, min_size=10, max_size=40))
def _no_approved_order_breaks_a_limit(limits, init_pos, ops):
    clock = ManualClock()
    gw = RiskGateway(INSTRUMENTS, limits, clock)
    gw.start()
    spec = {i.id: i for i in INSTRUMENTS}
    model = {"state": "ACTIVE", "mid": {1: 100.0, 2: 100.0}, "ref_ns": {1: None, 2: None}, "pos": {}, "open": {},
             "sent": [], "ids": set()}
    for iid, lots in zip((1, 2), init_pos):
        gw.on_exec(ex(ExecType.POSITION, iid=iid, price=100.0, size=lots * spec[iid].lot_size))
        model["pos"][iid] = lots * spec[iid].lot_size
    gw.on_exec(ex(ExecType.SYNC_DONE))
    approved = 0

    def absorb(events):
        nonlocal approved
        for e in events:
            if isinstance(e, OrderApproved):
                _check_independently(e, limits, spec[e.instrument_id], clock(), model)
                model["open"][e.order_id] = {"iid": e.instrument_id, "side": e.side, "size": e.size, "price": e.price}
                model["sent"].append((clock(), e.price * e.size))
                model["ids"].add(e.order_id)
                approved += 1
            elif isinstance(e, StateChanged):
                model["state"] = e.new

    for iid in (1, 2):  # a reference to start from, as a running gateway has
        model["mid"][iid], model["ref_ns"][iid] = 100.0, clock()
        absorb(gw.on_signal(sig(iid, mid=100.0, spread=0.5), clock()))
    for op in ops:
        if op[0] == "sig":
            _, iid, mid, spread, dt = op
            clock.advance_ms(dt)
            mid = round(mid, 2)
            model["mid"][iid], model["ref_ns"][iid] = mid, clock()
            absorb(gw.on_signal(sig(iid, mid=mid, spread=spread), clock()))
        elif op[0] == "ins":
            _, iid, action, target, off, ttl, fresh_mid = op
            if action in (Action.BUY, Action.SELL) and target and (target > 0) != (action == Action.BUY) and off:
                target = -target  # mostly a target on the action's side (else it plans nothing), sometimes not
            if fresh_mid is not None:  # a fresh reference just before the instruction
                model["mid"][iid], model["ref_ns"][iid] = round(fresh_mid, 2), clock()
                absorb(gw.on_signal(sig(iid, mid=round(fresh_mid, 2), spread=0.5), clock()))
            absorb(gw.on_instruction(instr(clock, iid=iid, action=action, target=target, offset_ticks=off,
                                           ttl_ms=ttl, seq=len(model["ids"]) + 1)))
        elif op[0] in ("fill", "cancelled") and model["open"]:
            oid = sorted(model["open"])[op[1] % len(model["open"])]
            w = model["open"].pop(oid)
            if op[0] == "fill":
                px = w["price"]
                model["pos"][w["iid"]] += w["size"] if w["side"] == Side.BUY else -w["size"]
                absorb(gw.on_exec(ex(ExecType.FILLED, iid=w["iid"], oid=oid, side=w["side"], price=px, size=w["size"])))
            else:
                absorb(gw.on_exec(ex(ExecType.CANCELLED, iid=w["iid"], oid=oid)))
        elif op[0] == "ctl":
            absorb(gw.on_control(ctl(op[1])))
    # the gateway's own books agree with the model
    for iid in (1, 2):
        assert gw.books[iid].position == pytest.approx(model["pos"][iid])
    assert gw.open_count == len(model["open"])
    _TALLY["examples"] += 1
    _TALLY["approved"] += approved
    _TALLY["with_approval"] += approved > 0


def test_no_approved_order_ever_breaks_a_limit():
    """The property over 150 generated runs, and that it was exercised: a gateway that denies every
    order would pass the property vacuously, so at least a fifth of the runs must approve an order
    (the limit fixed before looking)."""
    _TALLY.update(examples=0, approved=0, with_approval=0)
    _no_approved_order_breaks_a_limit()
    assert _TALLY["examples"] >= 100 and _TALLY["with_approval"] >= _TALLY["examples"] // 5, _TALLY


# ------------------------------------------------------------------------------------- the venue's position
def test_a_filled_answer_to_a_duplicate_id_is_never_applied_as_a_fill():
    """The phantom fill of a restart that kept the journal: a FILLED with reason DUPLICATE (an old
    sender's answer to a repeated id) must not move the position."""
    gw, _ = gateway()
    r = np.zeros(1, EXEC_DTYPE)
    r["instrument_id"], r["exec_type"], r["side"], r["order_id"] = 1, ExecType.FILLED, Side.BUY, 77
    r["price"], r["size"], r["reason"] = 100.0, 3.0, ExecReason.DUPLICATE
    out = gw.on_exec(r.tobytes())
    assert gw.books[1].position == 0.0 and of(out, MessageRejected) and not of(out, FillApplied)
    fill(gw, size=1.0)  # an ordinary fill still counts
    assert gw.books[1].position == 1.0


def test_a_state_report_with_a_position_mismatch_takes_the_venues_position_and_reduces():
    gw, clock = gateway()
    fill(gw, size=6.0)
    out = gw.on_exec(ex(ExecType.POSITION, iid=1, size=2.0, price=100.0))  # the venue's, after correction
    out += gw.on_exec(ex(ExecType.POSITION_MISMATCH, iid=1, size=2.0, price=6.0))
    out += gw.on_exec(ex(ExecType.SYNC_DONE))
    (m,) = of(out, PositionMismatch)
    assert (m.instrument_id, m.ours, m.venue, m.diff_lots) == (1, 6.0, 2.0, -4.0)
    assert gw.books[1].position == 2.0 and gw.state == TradingState.REDUCING
    assert of(out, StateChanged)[-1].cause == "position_mismatch"
    gw.on_signal(sig(1), clock())
    assert reason(order(gw, side=Side.BUY, size=1.0)) == DenyReason.REDUCING  # no risk-increasing order
    assert reason(order(gw, side=Side.SELL, price=100.5, size=1.0)) == "APPROVED"
    gw.on_control(ctl(ControlCmd.RESUME))
    assert gw.state == TradingState.ACTIVE


def test_a_state_report_from_a_new_venue_account_reduces():
    gw, _ = gateway()
    r = np.zeros(1, EXEC_DTYPE)
    r["exec_type"], r["reason"] = ExecType.SYNC_DONE, ExecReason.ACCOUNT_CHANGED
    gw.on_exec(ex(ExecType.POSITION, iid=1, size=0.0))
    out = gw.on_exec(r.tobytes())
    assert of(out, VenueAccountChanged) and gw.state == TradingState.REDUCING


# ------------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("view, dtype", [("SIGNAL_STRUCT", SIGNAL_DTYPE), ("INSTRUCTION_STRUCT", INSTRUCTION_DTYPE),
                                         ("ORDER_STRUCT", ORDER_DTYPE), ("EXEC_STRUCT", EXEC_DTYPE)])
def test_the_struct_views_read_the_bytes_the_numpy_layouts_write(view, dtype):
    """The struct views the gateway decodes and encodes with (pipeline.trading.messages'): a record with a
    distinct value in every field, written by numpy, reads back field by field through the struct (padding
    skipped)."""
    s = getattr(messages, view)
    assert s.size == dtype.itemsize
    rec = np.zeros(1, dtype)
    want = []
    for n in (n for n in dtype.names if not n.startswith("_")):
        count = int(np.prod(dtype[n].shape)) if dtype[n].shape else 1
        values = list(range(len(want) + 1, len(want) + 1 + count))
        rec[n] = values if dtype[n].shape else values[0]
        want += values
    assert [float(v) for v in s.unpack(rec.tobytes())] == [float(k) for k in want]
