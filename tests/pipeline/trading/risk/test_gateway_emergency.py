"""The risk gateway's EMERGENCY with a side (pipeline/trading/risk/gateway.py, issue #30): exactly one
at-risk side bit pulls only that side's working orders, one CANCEL each; none or both pull everything with
one CANCEL_ALL; the cool-down as before."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.messages import (SIGNAL_DTYPE, SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID,
                                       SIGNAL_FLAG_OUT_OF_RANGE, SIGNAL_FLAG_WARMUP, Label, OrderCmd, OrderOrigin, Side)
from pipeline.trading.risk import CancelAllSent, DenyReason, EmergencyReceived
from pipeline.trading.risk.events import CancelSent
from tests.support.risk import MS, gateway, of, order, reason

BID, ASK = SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_AT_RISK_ASK


def signal(iid=1, label=Label.EMERGENCY, flags=0, seq=77, mid=100.0, spread=1.0) -> bytes:
    r = np.zeros(1, SIGNAL_DTYPE)
    r["instrument_id"], r["label"], r["flags"], r["feature_seq"] = iid, label, flags, seq
    r["ref_mid"], r["ref_spread"] = mid, spread
    return r.tobytes()


def quoting():
    """A gateway with two bids and one ask working on AAA, and a bid on BBB: (gateway, clock, ids)."""
    gw, clock = gateway()
    ids = {"bids": [order(gw, side=Side.BUY, price=99.5).order_id, order(gw, side=Side.BUY, price=99.0).order_id],
           "ask": order(gw, side=Side.SELL, price=100.5).order_id,
           "other": order(gw, iid=2, side=Side.BUY, price=99.9, size=0.5).order_id}
    return gw, clock, ids


@pytest.mark.parametrize("flags, pulled", [
    (BID, "bids"),
    (ASK, "ask"),
    (BID | SIGNAL_FLAG_WARMUP, "bids"),  # the warm-up bit does not change the side
    (0, "all"),  # no side: as before, everything
    (BID | ASK, "all"),  # both: no side is known either
])
def test_an_emergency_pulls_the_side_its_flags_name_and_only_that_side(flags, pulled):
    gw, clock, ids = quoting()
    events = gw.on_signal(signal(flags=flags), clock())
    working = gw.books[1].working
    if pulled == "all":
        (ca,) = of(events, CancelAllSent)
        assert (ca.cmd, ca.why, ca.origin, ca.origin_seq) == (OrderCmd.CANCEL_ALL, "emergency", OrderOrigin.FAST, 77)
        assert not of(events, CancelSent) and all(w.cancelling for w in working.values())
    else:
        want = ids["bids"] if pulled == "bids" else [ids["ask"]]
        cancels = of(events, CancelSent)
        assert [c.order_id for c in cancels] == want and not of(events, CancelAllSent)
        assert all((c.cmd, c.why, c.origin, c.origin_seq, c.instrument_id) == (
            OrderCmd.CANCEL, "emergency", OrderOrigin.FAST, 77, 1) for c in cancels)
        kept = [oid for oid, w in working.items() if not w.cancelling]
        assert sorted(kept) == sorted(set(working) - set(want))  # the other side keeps working
    assert not gw.books[2].working[ids["other"]].cancelling  # another instrument is never touched
    (em,) = of(events, EmergencyReceived)
    assert em.repeated is False and em.cooldown_until_ns == clock() + 1000 * MS
    assert reason(order(gw, side=Side.SELL, price=100.5)) == DenyReason.COOLDOWN  # the cool-down as before


def test_inside_the_cool_down_a_side_already_pulled_is_not_pulled_again_but_the_other_side_is():
    gw, clock, ids = quoting()
    gw.on_signal(signal(flags=BID), clock())
    clock.advance(100 * MS)
    again = gw.on_signal(signal(flags=BID, seq=78), clock())
    assert not of(again, CancelSent) and of(again, EmergencyReceived)[0].repeated is True
    other = gw.on_signal(signal(flags=ASK, seq=79), clock())
    assert [c.order_id for c in of(other, CancelSent)] == [ids["ask"]]
    assert of(other, EmergencyReceived)[0].repeated is False
    unsided = gw.on_signal(signal(seq=80), clock())  # everything is cancelling now: no CANCEL_ALL inside the cool-down
    assert not of(unsided, CancelAllSent) and of(unsided, EmergencyReceived)[0].repeated is True


def test_a_sided_emergency_with_nothing_on_that_side_cancels_nothing_and_still_cools_down():
    gw, clock = gateway()
    order(gw, side=Side.SELL, price=100.5)
    events = gw.on_signal(signal(flags=BID), clock())
    assert not of(events, CancelSent) and not of(events, CancelAllSent)
    assert of(events, EmergencyReceived)[0].repeated is False
    assert reason(order(gw, side=Side.BUY, price=99.5)) == DenyReason.COOLDOWN


def test_an_out_of_range_hold_pulls_nothing():
    gw, clock, _ = quoting()
    events = gw.on_signal(signal(label=Label.HOLD, flags=SIGNAL_FLAG_OUT_OF_RANGE), clock())
    assert not of(events, CancelSent) and not of(events, CancelAllSent) and not of(events, EmergencyReceived)
    assert not any(w.cancelling for w in gw.books[1].working.values())
