"""The pre-trade checks (pipeline/trading/risk/checks.py): each check trips alone (and its twin passes), and an
exception inside a check is a denial."""

from __future__ import annotations

import pytest

from pipeline.trading.messages import ControlCmd, ExecType, Label, Side
from pipeline.trading.risk import (Book, CancelAllSent, DenyReason, OrderApproved, RiskGateway, RiskLimits,
                                   StateChanged, TradingState, resolve_limits)
from pipeline.trading.risk.checks import PreTradeChecks
from tests.support.clock import ManualClock
from tests.support.risk import (BASE, INSTRUMENTS, MS, T0, ctl, ex, fill, gateway, of, order,
                                                 reason, sig)


def test_a_plain_order_within_every_limit_is_approved():
    gw, _ = gateway()
    ev = order(gw)
    assert isinstance(ev, OrderApproved) and ev.price == 99.5 and ev.size == 1.0 and gw.open_count == 1


def test_halted_denies_new_orders_and_resume_lifts_it():
    gw, _ = gateway()
    gw.on_control(ctl(ControlCmd.HALT))
    assert reason(order(gw)) == DenyReason.HALTED
    gw.on_control(ctl(ControlCmd.RESUME))
    assert reason(order(gw)) == "APPROVED"


def test_not_synced_until_sync_done():
    clock = ManualClock()
    gw = RiskGateway(INSTRUMENTS, RiskLimits(**BASE), clock)
    gw.start()
    gw.on_signal(sig(1), clock())
    assert reason(order(gw)) == DenyReason.NOT_SYNCED
    gw.on_exec(ex(ExecType.SYNC_DONE))
    assert reason(order(gw)) == "APPROVED"


def test_emergency_cooldown_denies_the_instrument_only_until_it_passes():
    gw, clock = gateway()
    gw.on_signal(sig(1, label=Label.EMERGENCY), clock())
    assert reason(order(gw)) == DenyReason.COOLDOWN
    assert reason(order(gw, iid=2, price=99.99, size=1.0)) == "APPROVED"
    clock.advance_ms(1001)
    gw.on_signal(sig(1), clock())
    assert reason(order(gw)) == "APPROVED"


def test_allow_list():
    gw, _ = gateway(allowed=["BBB"])
    assert reason(order(gw)) == DenyReason.NOT_ALLOWED
    assert reason(order(gw, iid=2, price=99.99, size=1.0)) == "APPROVED"


@pytest.mark.parametrize("price", [100.2, float("nan"), float("inf"), -99.5, 0.0])
def test_price_sanity(price):
    gw, _ = gateway()
    assert reason(order(gw, price=price)) == DenyReason.BAD_PRICE
    assert reason(order(gw, price=100.5)) == "APPROVED"


def test_price_beyond_the_precision_limit_is_denied():
    gw, _ = gateway(max_price_decimals=1)
    assert reason(order(gw, iid=2, price=99.99, size=1.0)) == DenyReason.BAD_PRICE
    assert reason(order(gw, iid=2, price=99.9, size=1.0)) == "APPROVED"


@pytest.mark.parametrize("size", [1.5, 0.0, -1.0, float("nan"), 11.0])
def test_size_sanity_and_max_order_size(size):
    gw, _ = gateway()
    assert reason(order(gw, size=size)) == DenyReason.BAD_SIZE
    assert reason(order(gw, size=10.0)) == "APPROVED"


def test_stale_or_missing_reference():
    clock = ManualClock()
    gw = RiskGateway(INSTRUMENTS, RiskLimits(**BASE), clock)
    gw.start()
    gw.on_exec(ex(ExecType.SYNC_DONE))
    assert reason(order(gw)) == DenyReason.STALE_REF  # no SIGNAL yet
    gw.on_signal(sig(1), clock())
    clock.advance_ms(1001)
    assert reason(order(gw)) == DenyReason.STALE_REF
    gw.on_signal(sig(1), clock() - 900 * MS)  # the market data is 900 ms old: fresh enough
    assert reason(order(gw)) == "APPROVED"


def test_price_collar_against_the_reference_mid():
    gw, _ = gateway(collar_bps=50.0)
    assert reason(order(gw, side=Side.SELL, price=101.0)) == DenyReason.COLLAR  # 100 bps
    assert reason(order(gw, side=Side.SELL, price=100.5)) == "APPROVED"  # 50 bps


def test_reduce_only_passes_only_orders_that_shrink_the_position():
    gw, _ = gateway()
    fill(gw, size=3.0)
    gw.on_control(ctl(ControlCmd.REDUCE_ONLY))
    assert gw.state.name == "REDUCING"
    assert reason(order(gw, side=Side.BUY)) == DenyReason.REDUCING
    assert reason(order(gw, side=Side.SELL, price=100.5, size=4.0)) == DenyReason.REDUCING  # would flip
    assert reason(order(gw, side=Side.SELL, price=100.5, size=2.0)) == "APPROVED"
    assert reason(order(gw, side=Side.SELL, price=100.5, size=2.0)) == DenyReason.REDUCING  # 2 + 2 open > 3


def test_min_and_max_notional_per_order():
    gw, _ = gateway(min_notional=150.0, max_notional=500.0)
    assert reason(order(gw, size=1.0)) == DenyReason.MIN_NOTIONAL  # 99.5
    assert reason(order(gw, size=6.0)) == DenyReason.MAX_NOTIONAL  # 597
    assert reason(order(gw, size=5.0)) == "APPROVED"  # 497.5


def test_max_position_counts_fills_and_open_orders_on_that_side():
    gw, _ = gateway(max_open_orders=50)
    fill(gw, size=10.0)
    assert reason(order(gw, size=5.0)) == "APPROVED"  # 10 + 5
    assert reason(order(gw, size=6.0)) == DenyReason.MAX_POSITION  # 10 + 5 + 6 > 20
    assert reason(order(gw, size=5.0)) == "APPROVED"  # 10 + 5 + 5 = 20
    # the sell side is judged on its own: 10 - 10 - 10 = -10 is within 20
    assert reason(order(gw, side=Side.SELL, price=100.5, size=10.0)) == "APPROVED"


def test_gross_exposure_over_instruments():
    gw, _ = gateway(max_gross_notional=1500.0)
    fill(gw, iid=2, size=6.0, price=100.0)  # BBB: 6 units at mid 100 = 600
    assert reason(order(gw, size=10.0)) == DenyReason.GROSS  # + 1000
    assert reason(order(gw, size=9.0)) == "APPROVED"  # + 900


def test_max_open_orders():
    gw, _ = gateway(max_open_orders=2)
    assert [reason(order(gw)) for _ in range(3)] == ["APPROVED", "APPROVED", DenyReason.MAX_OPEN]


def test_order_rate_throttle_is_a_sliding_second():
    gw, clock = gateway(max_orders_per_s=3)
    assert [reason(order(gw)) for _ in range(4)] == ["APPROVED"] * 3 + [DenyReason.RATE]
    clock.advance_ms(1000)
    gw.on_signal(sig(1), clock())
    assert reason(order(gw)) == "APPROVED"


def test_rolling_notional_cap_per_minute():
    gw, clock = gateway(max_notional_per_min=1000.0)
    assert [reason(order(gw, size=5.0)) for _ in range(3)] == ["APPROVED", "APPROVED", DenyReason.NOTIONAL_RATE]
    clock.advance_ms(60_000)
    gw.on_signal(sig(1), clock())
    assert reason(order(gw, size=5.0)) == "APPROVED"


def test_duplicate_order_id():
    gw, _ = gateway()
    assert reason(order(gw, oid=42)) == "APPROVED"
    assert reason(order(gw, oid=42)) == DenyReason.DUPLICATE
    assert reason(order(gw, oid=43)) == "APPROVED"


def test_self_trade_prevention_against_our_working_order_on_the_other_side():
    gw, _ = gateway()
    gw.on_exec(ex(ExecType.ACKED, oid=5, side=Side.SELL, price=100.0, size=1.0, leaves=1.0))
    assert reason(order(gw, side=Side.BUY, price=100.0)) == DenyReason.SELF_TRADE
    assert reason(order(gw, side=Side.BUY, price=99.5)) == "APPROVED"


def test_daily_loss_halts_and_denies_until_a_new_day():
    gw, _ = gateway()
    fill(gw, size=10.0, price=100.0, oid=1)
    events = fill(gw, side=Side.SELL, size=10.0, price=49.5, oid=2)  # realized -505
    assert gw.realized_pnl == pytest.approx(-505.0)
    assert gw.state.name == "HALTED" and gw.latched
    assert of(events, StateChanged)[0].cause == "daily_loss" and len(of(events, CancelAllSent)) == 2
    gw.on_control(ctl(ControlCmd.RESUME))
    ev = order(gw)
    assert reason(ev) == DenyReason.DAILY_LOSS and gw.state.name == "HALTED"
    gw.reset_daily_pnl()
    gw.on_control(ctl(ControlCmd.RESUME))
    assert reason(order(gw)) == "APPROVED"


def test_unrealized_loss_at_the_reference_mid_counts():
    gw, clock = gateway()
    fill(gw, size=10.0, price=100.0)
    events = gw.on_signal(sig(1, mid=49.0), clock())  # 10 x -51 = -510
    assert gw.pnl() == pytest.approx(-510.0) and gw.state.name == "HALTED"
    assert of(events, StateChanged)[0].cause == "daily_loss"


def test_an_exception_inside_a_check_is_a_denial(monkeypatch):
    gw, _ = gateway()

    def boom(self):
        raise ZeroDivisionError("x")

    monkeypatch.setattr(Book, "open_sizes", boom)
    ev = order(gw)
    assert reason(ev) == DenyReason.INTERNAL_ERROR and "ZeroDivisionError" in ev.detail and gw.open_count == 0


def test_the_checks_judge_on_the_ledger_and_the_state_alone_and_record_nothing():
    """``PreTradeChecks`` stands without the layers above it (state machine, planner, gateway)."""
    chk = PreTradeChecks(resolve_limits(INSTRUMENTS, RiskLimits(**BASE)), RiskLimits(**BASE))
    bk = chk.books[1]
    assert chk.check(bk, 1, Side.BUY, 99.5, 1.0, T0) == (DenyReason.NOT_SYNCED, "")
    chk.synced = True
    assert chk.check(bk, 1, Side.BUY, 99.5, 1.0, T0) == (DenyReason.STALE_REF, "no reference")
    bk.mid, bk.spread, bk.ref_ns = 100.0, 1.0, T0
    assert chk.check(bk, 1, Side.BUY, 99.5, 1.0, T0) == (0, "")
    assert chk.open_count == 0 and not chk.seen_ids and not chk._rate  # a check records nothing
    chk.state = TradingState.HALTED
    assert chk.check(bk, 1, Side.BUY, 99.5, 1.0, T0) == (DenyReason.HALTED, "halted")
