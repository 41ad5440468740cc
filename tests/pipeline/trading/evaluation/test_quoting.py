"""The quoting scenario's resting orders: a bid and an ask where the planner puts passive orders,
through the gateway's checks; re-placed once gone; none in the EMERGENCY cool-down, beyond the
position limit, while the gateway is not ACTIVE, or again too soon after a denial."""

from __future__ import annotations

import pytest

from pipeline.trading.evaluation.quoting import QUOTE_RETRY_NS, Quoter
from pipeline.trading.messages import ControlCmd, Label, OrderOrigin, Side
from pipeline.trading.risk import OrderApproved, OrderDenied
from tests.support.risk import ctl, fill, gateway, of, sig


def test_a_bid_and_an_ask_rest_at_the_planner_s_passive_prices():
    gw, clock = gateway()
    q = Quoter(gw, 2)
    evs = q.on_book(1)
    placed = of(evs, OrderApproved)
    # AAA: mid 100, spread 1, tick 0.5, sigma 0: the touch, 99.5 / 100.5, 2 lots of 1
    assert [(e.side, e.price, e.size, e.origin) for e in placed] == [(Side.BUY, 99.5, 2.0, OrderOrigin.LLM),
                                                                       (Side.SELL, 100.5, 2.0, OrderOrigin.LLM)]
    assert placed[0].price == gw.limit_price(gw.books[1], Side.BUY, 0)
    assert q.on_book(1) == []  # both rest: nothing to do
    assert q.counts["quotes_placed"] == 2 and len({e.order_id for e in placed}) == 2


def test_a_quote_being_cancelled_is_placed_again_at_the_next_book():
    gw, clock = gateway()
    q = Quoter(gw, 1)
    q.on_book(1)
    bid = next(w for w in gw.books[1].working.values() if w.side == Side.BUY)
    bid.cancelling = True  # a cancel went out for it
    clock.advance_ms(50)
    gw.on_signal(sig(1), clock())
    again = of(q.on_book(1), OrderApproved)
    assert [(e.side, e.price) for e in again] == [(Side.BUY, 99.5)] and again[0].order_id != bid.order_id


def test_no_quote_in_the_emergency_cool_down_and_quotes_again_after_it():
    gw, clock = gateway()  # cool-down 1000 ms
    q = Quoter(gw, 1)
    q.on_book(1)
    gw.on_signal(sig(1, label=Label.EMERGENCY), clock())  # cancels both
    assert q.on_book(1) == [] and q.counts["skipped_cooldown"] == 1
    clock.advance_ms(1001)
    gw.on_signal(sig(1), clock())
    assert len(of(q.on_book(1), OrderApproved)) == 2


def test_the_position_limit_stops_the_side_that_would_pass_it():
    gw, clock = gateway(max_position_lots=2.0)
    q = Quoter(gw, 2)
    evs = q.on_book(1)
    bid = of(evs, OrderApproved)[0]
    fill(gw, side=Side.BUY, price=99.5, size=2.0, oid=bid.order_id)  # long 2: the limit
    assert gw.books[1].position == 2.0
    assert q.on_book(1) == [] and q.counts["skipped_position"] == 1  # no second bid; the ask still rests


def test_a_denied_side_waits_before_asking_again_and_nothing_while_halted():
    gw, clock = gateway(max_orders_per_s=1)
    q = Quoter(gw, 1)
    evs = q.on_book(1)
    assert [type(e) for e in evs] == [OrderApproved, OrderDenied] and evs[1].code == "RATE"
    assert q.on_book(1) == []  # the ask waits QUOTE_RETRY_NS
    clock.advance(QUOTE_RETRY_NS + 1_000_000_000)
    gw.on_signal(sig(1), clock())
    assert [(type(e), e.side) for e in q.on_book(1)] == [(OrderApproved, Side.SELL)]
    assert q.counts == {"quotes_placed": 2, "quotes_denied": 1, "skipped_cooldown": 0, "skipped_position": 0}
    gw.on_control(ctl(ControlCmd.HALT))
    assert q.on_book(2) == []
    with pytest.raises(ValueError, match="quote_lots must be >= 1"):
        Quoter(gw, 0)
