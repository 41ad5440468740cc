"""The ledger (pipeline/trading/risk/ledger.py): EXEC_REPORTs maintain open orders and position; fills keep the
average entry price and realize PnL; a state report replaces positions and open orders."""

from __future__ import annotations

from pipeline.trading.messages import ExecType, Side
from pipeline.trading.risk import MessageRejected, OrderApproved, RiskLimits, resolve_limits
from pipeline.trading.risk.ledger import Ledger, StateReport, Working
from tests.support.risk import BASE, INSTRUMENTS, ex, gateway, instr, of


def test_exec_reports_maintain_open_orders_and_position():
    gw, clock = gateway()
    placed = of(gw.on_instruction(instr(clock, target=7)), OrderApproved)
    a, b = placed[0].order_id, placed[1].order_id
    assert gw.open_count == 2  # pending from the moment they are sent
    gw.on_exec(ex(ExecType.ACKED, oid=a, side=Side.BUY, price=99.5, size=5.0, leaves=5.0))
    gw.on_exec(ex(ExecType.FILLED, oid=a, side=Side.BUY, price=99.5, size=2.0, leaves=3.0))
    assert gw.books[1].position == 2.0 and gw.books[1].working[a].size == 3.0 and gw.open_count == 2
    gw.on_exec(ex(ExecType.FILLED, oid=a, side=Side.BUY, price=99.5, size=3.0, leaves=0.0))
    assert gw.books[1].position == 5.0 and a not in gw.books[1].working
    gw.on_exec(ex(ExecType.UNKNOWN, oid=b, side=Side.BUY, price=99.5, size=2.0, leaves=2.0))
    assert gw.open_count == 1 and gw.books[1].working[b].status == "unknown"
    gw.on_exec(ex(ExecType.REJECTED, oid=b))
    assert gw.open_count == 0
    assert gw.books[1].avg_px == 99.5
    assert of(gw.on_exec(b"short"), MessageRejected) and of(gw.on_exec(ex(ExecType.ACKED, iid=99)), MessageRejected)


# ------------------------------------------------------------------------------------- the ledger alone
def _ledger() -> Ledger:
    return Ledger(resolve_limits(INSTRUMENTS, RiskLimits(**BASE)))


def test_a_fill_keeps_the_average_entry_and_realizes_what_it_closes():
    led = _ledger()
    bk = led.books[1]
    led.apply_fill(bk, Side.BUY, 100.0, 2.0)
    led.apply_fill(bk, Side.BUY, 103.0, 1.0)
    assert (bk.position, bk.avg_px, led.realized_pnl) == (3.0, 101.0, 0.0)
    led.apply_fill(bk, Side.SELL, 105.0, 4.0)  # closes 3 at +4 each and flips: 1 short from 105
    assert (bk.position, bk.avg_px, led.realized_pnl) == (-1.0, 105.0, 12.0)
    bk.mid = 104.0
    assert led.pnl() == 13.0 and led.position_lots(1) == -1.0
    led.apply_fill(bk, Side.BUY, 104.0, 1.0)
    assert (bk.position, bk.avg_px, led.realized_pnl) == (0.0, 0.0, 13.0)
    led.reset_daily_pnl()
    assert led.pnl() == 0.0


def test_unrealized_pnl_is_position_times_mid_minus_entry_and_zero_while_either_is_unknown():
    bk = _ledger().books[1]
    assert bk.unrealized_pnl() == 0.0  # flat
    bk.position, bk.avg_px = -2.0, 105.0
    assert bk.unrealized_pnl() == 0.0  # no mid yet
    bk.mid = 104.0
    assert bk.unrealized_pnl() == 2.0  # short 2 from 105, mid 104
    bk.avg_px = 0.0  # a position set to the venue's, entry unknown
    assert bk.unrealized_pnl() == 0.0


def test_a_state_report_replaces_positions_and_open_orders_and_keeps_realized_pnl():
    led = _ledger()
    led.realized_pnl = 7.0
    led.add_working(led.books[1], Working(5, Side.BUY, 99.0, 1.0, 0.0, None, "pending"))
    led.apply_fill(led.books[2], Side.BUY, 100.0, 0.3)
    led.replace_state(StateReport(solicited=True, positions={1: (-2.0, 101.0)},
                                  orders={31: (2, Side.SELL, 101.0, 0.2), 32: (9, Side.BUY, 1.0, 1.0)}))
    b1, b2 = led.books[1], led.books[2]
    assert (b1.position, b1.avg_px, b1.working) == (-2.0, 101.0, {})
    assert (b2.position, b2.avg_px, list(b2.working)) == (0.0, 0.0, [31])  # not reported: flat
    assert led.open_count == 1 and 31 in led.seen_ids and 32 not in led.seen_ids  # instrument 9: not ours
    assert led.realized_pnl == 7.0
    led.forget_order(2, 31)
    assert led.open_count == 0 and not b2.working


def test_every_rejected_report_is_on_record_with_its_reason_whether_or_not_the_order_works_here():
    # the audit log's account of every NEW approved: sent (journaled by the sender) or refused with a reason
    from pipeline.trading.messages import ExecReason
    from pipeline.trading.risk import RejectReceived

    gw, clock = gateway()
    a = of(gw.on_instruction(instr(clock, target=7)), OrderApproved)[0].order_id
    [rej] = of(gw.on_exec(ex(ExecType.REJECTED, oid=a, reason=ExecReason.HALTED)), RejectReceived)
    assert (rej.order_id, rej.reason, rej.code) == (a, ExecReason.HALTED, "HALTED") and a not in gw.books[1].working
    [again] = of(gw.on_exec(ex(ExecType.REJECTED, oid=a + 999, reason=ExecReason.MALFORMED)), RejectReceived)
    assert (again.order_id, again.code) == (a + 999, "MALFORMED")  # not working here: on record all the same
    assert not of(gw.on_exec(ex(ExecType.CANCELLED, oid=a)), RejectReceived)
