"""The risk gateway on a SIGNAL whose book is stale (SIGNAL_FLAG_STALE_BOOK: an ITCH book rebuilding after a
feed gap, crossed, or invalid): no new order of that instrument until an unflagged SIGNAL (STALE_REF,
"book stale"); its EMERGENCY still pulls; the other instrument trades on."""

from __future__ import annotations

from pipeline.trading.messages import SIGNAL_FLAG_STALE_BOOK, Label, Side
from pipeline.trading.risk import CancelAllSent, DenyReason, OrderDenied
from tests.pipeline.trading.risk.test_gateway_emergency import signal
from tests.support.risk import gateway, of, order, reason


def test_a_stale_book_signal_denies_new_orders_until_a_clean_signal_and_only_for_its_instrument():
    gw, clock = gateway()
    assert reason(order(gw)) == "APPROVED"
    gw.on_signal(signal(label=Label.LEAN_BUY, flags=SIGNAL_FLAG_STALE_BOOK), clock())
    denied = order(gw)
    assert isinstance(denied, OrderDenied) and denied.reason == DenyReason.STALE_REF and denied.detail == "book stale"
    assert reason(order(gw, iid=2, price=99.9, size=0.5)) == "APPROVED", "the other instrument is not stale"
    gw.on_signal(signal(label=Label.HOLD), clock())
    assert reason(order(gw, side=Side.SELL, price=100.5)) == "APPROVED", "an unflagged SIGNAL restores the reference"


def test_an_emergency_on_a_stale_book_still_pulls_the_orders():
    gw, clock = gateway()
    order(gw)
    out = gw.on_signal(signal(label=Label.EMERGENCY, flags=SIGNAL_FLAG_STALE_BOOK), clock())
    assert len(of(out, CancelAllSent)) == 1
