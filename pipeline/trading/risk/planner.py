"""The risk gateway's execution planner, sans I/O: INSTRUCTION (and the fast path's LEAN SIGNALs) ->
child limit orders, each through the pre-trade checks; reprice / cancel on a move.

- an INSTRUCTION is discarded (``InstructionExpired``) when ``clock() > issued_ns + ttl_ms``; HOLD does
  nothing; CANCEL cancels the instrument's working orders; FLATTEN targets 0; BUY only buys, SELL only
  sells (an instruction whose target is already reached, counting open orders, plans nothing);
- wanted delta (base units) = ``target_lots * lot_size - (position + signed open size)``, where the open
  size leaves out orders being cancelled; working orders on the other side are cancelled first;
- limit price = mid -/+ (``max(spread / 2, sigma * risk_aversion * 0.3)`` + ``limit_offset_ticks * tick``),
  rounded to the tick away from crossing (buy: floor, sell: ceil); sigma (price units, ``sigma_price``)
  is the gateway's own EWMA (``sigma_alpha``) of the squared per-SIGNAL move of ``ref_mid`` (the
  depth-aware planner, ``depth.DepthPlanner``, uses the realized volatility instead); risk_aversion
  must lie in [0.1, 2.0] (design document 000 section 3.3: ``Planner`` raises ``ConfigError`` naming
  ``params.limits.risk_aversion``);
- split into children of at most ``min(max_child_lots, max_order_lots)`` lots (at least 1), each through
  the pre-trade checks (``submit``); planning stops at the first denied child (the others would meet the
  same limit);
- a SIGNAL that moves the mid more than ``max(reprice_sigmas * sigma, tick)`` (sigma as it was before
  this SIGNAL) from where a working order was planned cancels it, and, while the instruction that
  planned it is still live (its ttl), plans the remainder again at the new mid (cancel + new); the
  gateway re-plans a live instruction on the CANCELLED report of such a cancel too (a REJECTED one does
  not, so a price the venue refuses cannot loop);
- a LEAN_BUY / LEAN_SELL SIGNAL plans toward +/- ``lean_lots`` (origin FAST) for ``lean_ttl_ms``, its
  limit price ``lean_offset_ticks`` further from the mid (the plan's ``limit_offset_ticks``), unless an
  LLM instruction's plan is live;
- reduce-only (``OrderApproved.reduce_only``, the ORDER's ``ORDER_FLAG_REDUCE_ONLY``, the venue's
  ``reduceOnly``): a new order of a USDT-FUTURES instrument is reduce-only when reducing the position is
  what it means: a FLATTEN instruction's children (reprices included), and every order planned while
  the gateway is REDUCING (latency guard, operator, a position mismatch). It is then checked as one
  (``check(..., reduce_only=True)``: REDUCE_ONLY when it would open, grow or flip the position, counting
  the open orders on its side). Spot orders never are (spot has no reduce-only: the REDUCING check
  alone holds them); BUY / SELL / LEAN orders outside REDUCING are not (they may open a position). An
  EMERGENCY only cancels (a side's orders or CANCEL_ALL), so it places nothing to flag.

Order ids: ``order_id_for(instrument_id, origin_seq, leg, epoch)`` with ``epoch`` the run's (given to
the gateway: new at every ``up``, so ids never repeat across runs) and ``origin_seq`` = the INSTRUCTION's
``signal_seq`` (the venue sequence of the book it answers: unique per instrument, and unchanged when
the hub restarts, unlike ``instruction_id``) and ``leg`` = 0, 1, ... in planning order, continued by
re-plans of the same instruction. Replaying an instruction after a crash gives the same ids, which the
duplicate check denies.

Hooks the depth-aware planner overrides (``depth.DepthPlanner``): ``_launch`` (a new plan: planned at
once here), ``sigma_price``, and ``_retire`` (``state.TradingStateMachine``'s: a live plan dropped from
outside). ``Plan.arrival_mid`` is the mid when the plan was made.

Bad INSTRUCTION input is a ``MessageRejected`` event, never an exception.
"""

from __future__ import annotations

import math
from typing import Callable

from pipeline.trading.messages import (INSTRUCTION_STRUCT, Action, Label, OrderCmd, OrderOrigin, Side, TimeInForce,
                                       order_id_for)
from pipeline.trading.risk.checks import DenyReason, TradingState
from pipeline.trading.risk.events import (CancelSent, Event, InstructionExpired, InstructionPlanned, MessageRejected,
                                          OrderApproved, OrderDenied)
from pipeline.trading.risk.execution import check_risk_aversion
from pipeline.trading.risk.ledger import Book, Working
from pipeline.trading.risk.limits import NS_PER_MS, PERP, InstrumentSpec, RiskLimits, decimals_of
from pipeline.trading.risk.state import TradingStateMachine

# Plain module globals, not the imported names: CPython compiles a method call on an imported name as an
# attribute load (it takes the name for a module), a bound method made per call on the hot path.
INSTRUCTION_S = INSTRUCTION_STRUCT


class Plan:
    """A live instruction: what the planner re-plans on reprice until ``expires_ns``. With the depth-aware
    planner it is also the parent order: ``state`` (``execution.ParentState``, 0 for the simple
    planner) and ``filled`` (base units its children filled). ``arrival_mid``: the reference mid when
    it was made (the evaluation's slippage is measured against it)."""

    __slots__ = ("instrument_id", "action", "target_lots", "offset_ticks", "origin_seq", "expires_ns", "next_leg",
                 "origin", "state", "filled", "arrival_mid")

    def __init__(self, instrument_id, action, target_lots, offset_ticks, origin_seq, expires_ns,
                 origin=OrderOrigin.LLM):
        self.instrument_id, self.action, self.target_lots = instrument_id, action, target_lots
        self.offset_ticks, self.origin_seq, self.expires_ns, self.next_leg = offset_ticks, origin_seq, expires_ns, 0
        self.origin = origin
        self.state = 0
        self.filled = 0.0
        self.arrival_mid = 0.0


class Planner(TradingStateMachine):
    """The state machine plus the planner: ``epoch`` (the run's, in every order id), the ``tif`` of new
    orders, and each instrument's price / size decimals."""

    def __init__(self, specs: dict[int, InstrumentSpec], limits: RiskLimits, clock: Callable[[], int], epoch: int):
        check_risk_aversion(limits.risk_aversion)  # ConfigError outside [0.1, 2.0]
        super().__init__(specs, limits, clock)
        self.epoch = epoch
        self.tif = int(TimeInForce[limits.tif])
        self._dec = {i: (decimals_of(s.tick), decimals_of(s.lot)) for i, s in specs.items()}

    # ------------------------------------------------------------------------------------ instructions
    def on_instruction(self, payload) -> list[Event]:
        """An INSTRUCTION payload (48 bytes)."""
        now = self.clock()
        if len(payload) != INSTRUCTION_S.size:
            return [MessageRejected(ts_ns=now, kind="INSTRUCTION", why=f"size {len(payload)}")]
        iid, action, _f, off_ticks, target, sseq, issued, ttl_ms, _conf, inst_id = INSTRUCTION_S.unpack_from(payload, 0)
        try:
            act = Action(action)
        except ValueError:
            return [MessageRejected(ts_ns=now, kind="INSTRUCTION", why=f"unknown action {action}")]
        if off_ticks < 0:
            return [MessageRejected(ts_ns=now, kind="INSTRUCTION", why="negative limit_offset_ticks")]
        expires = issued + ttl_ms * NS_PER_MS
        if now > expires:
            return [InstructionExpired(ts_ns=now, instrument_id=iid, instruction_id=inst_id, signal_seq=sseq,
                                       age_ms=(now - issued) / NS_PER_MS, ttl_ms=ttl_ms)]
        bk = self.books.get(iid)
        if bk is None:
            return [OrderDenied(ts_ns=now, instrument_id=iid, order_id=0, side=0, price=0.0, size=0.0,
                                origin_seq=sseq, reason=DenyReason.NOT_ALLOWED, code="NOT_ALLOWED",
                                detail=f"instrument {iid} is not configured")]
        out: list[Event] = []
        if act == Action.HOLD:
            out.append(InstructionPlanned(ts_ns=now, instrument_id=iid, instruction_id=inst_id, signal_seq=sseq,
                                          action=act.name, target_lots=target, delta=0.0, children=0))
            return out
        if act == Action.CANCEL:
            self._retire(bk, "instruction", out)
            bk.plan = None
            n = 0
            for w in bk.working.values():
                if not w.cancelling:
                    w.cancelling = True
                    n += 1
                    out.append(CancelSent(ts_ns=now, cmd=OrderCmd.CANCEL, instrument_id=iid, order_id=w.order_id,
                                          origin_seq=sseq, why="instruction", origin=OrderOrigin.LLM))
            out.insert(0, InstructionPlanned(ts_ns=now, instrument_id=iid, instruction_id=inst_id, signal_seq=sseq,
                                             action=act.name, target_lots=target, delta=0.0, children=n))
            return out
        if act == Action.FLATTEN:
            target = 0
        plan = Plan(iid, act, target, off_ticks, sseq, expires)
        plan.arrival_mid = bk.mid
        self._retire(bk, "replaced", out)
        bk.plan = plan
        head = len(out)
        delta, children = self._launch(bk, plan, out, OrderOrigin.LLM)
        out.insert(head, InstructionPlanned(ts_ns=now, instrument_id=iid, instruction_id=inst_id, signal_seq=sseq,
                                            action=act.name, target_lots=target, delta=delta, children=children))
        return out

    # ------------------------------------------------------------------------------------ parent hooks
    def _launch(self, bk: Book, plan: Plan, out: list, origin: int) -> tuple[float, int]:
        """Start a new plan: the simple planner plans it at once (the depth-aware one overrides)."""
        return self._plan(bk, plan, out, origin)

    def sigma_price(self, bk: Book) -> float:
        """The sigma (price units) of the offset: the simple planner's EWMA of the per-SIGNAL move."""
        return bk.sigma

    def wanted(self, bk: Book, plan: Plan) -> float:
        """The plan's wanted delta (base units, signed; module docstring), open orders not being
        cancelled counted as done; 0 when the target is reached in the plan's direction."""
        open_signed = 0.0
        for w in bk.working.values():
            if not w.cancelling:
                open_signed += w.size if w.side == Side.BUY else -w.size
        delta = plan.target_lots * bk.spec.lot - (bk.position + open_signed)
        if plan.action == Action.BUY and delta < 0 or plan.action == Action.SELL and delta > 0:
            return 0.0
        return delta

    def _plan(self, bk: Book, plan: Plan, out: list, origin: int = OrderOrigin.RISK) -> tuple[float, int]:
        """Plan (and check) the child orders that move ``bk`` to the plan's target. Returns (delta, children)."""
        spec = bk.spec
        lot = spec.lot
        delta = self.wanted(bk, plan)
        n_lots = int(round(abs(delta) / lot))
        if n_lots == 0:
            return 0.0, 0
        side = Side.BUY if delta > 0 else Side.SELL
        now = self.clock()
        other = [w for w in bk.working.values() if w.side != side and not w.cancelling]
        if other:  # the other side's working orders no longer serve the target
            for w in other:
                w.cancelling = True
                out.append(CancelSent(ts_ns=now, cmd=OrderCmd.CANCEL, instrument_id=spec.id, order_id=w.order_id,
                                      origin_seq=plan.origin_seq, why="other_side", origin=origin))
            return self._plan(bk, plan, out, origin)
        price = self.limit_price(bk, side, plan.offset_ticks)
        child = max(1, int(min(spec.max_child_lots, spec.max_order_lots)))
        pdec, sdec = self._dec[spec.id]
        n = 0
        while n_lots > 0:
            lots = min(child, n_lots)
            n_lots -= lots
            leg = plan.next_leg
            plan.next_leg += 1
            oid = order_id_for(spec.id, plan.origin_seq, leg, self.epoch)
            n += 1
            if not self.submit(bk, oid, side, price, round(lots * lot, sdec), plan, leg, out, origin):
                break  # the rest would meet the same limit: one denial says it
        return delta, n

    def limit_price(self, bk: Book, side: int, offset_ticks: int) -> float:
        """The planner's passive limit price (0.0 when there is no reference mid)."""
        spec = bk.spec
        if not bk.mid > 0:
            return 0.0
        off = max(bk.spread / 2.0, self.sigma_price(bk) * self.limits.risk_aversion * 0.3) + offset_ticks * spec.tick
        t = spec.tick
        if side == Side.BUY:
            k = math.floor((bk.mid - off) / t + 1e-9)
        else:
            k = math.ceil((bk.mid + off) / t - 1e-9)
        return round(k * t, self._dec[spec.id][0])

    # ------------------------------------------------------------------------------------ child orders
    def submit(self, bk: Book, oid: int, side: int, price: float, size: float, plan: Plan | None, leg: int,
               out: list, origin: int = OrderOrigin.LLM) -> bool:
        """Check one new order; append OrderApproved (and record it as open) or OrderDenied. A
        perpetual's order is reduce-only (checked as one, flagged) by the module docstring's rule."""
        now = self.clock()
        reduce_only = bk.spec.product == PERP and (self.state == TradingState.REDUCING or (
            plan is not None and plan.action == Action.FLATTEN))
        try:
            reason, detail = self.check(bk, oid, side, price, size, now, reduce_only)
        except Exception as exc:  # fail closed
            reason, detail = DenyReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:200]
        iid = bk.spec.id
        seq = plan.origin_seq if plan is not None else 0
        if reason:
            out.append(OrderDenied(ts_ns=now, instrument_id=iid, order_id=oid, side=side, price=price, size=size,
                                   origin_seq=seq, reason=reason, code=reason.name, detail=detail))
            if reason == DenyReason.DAILY_LOSS:
                out.extend(self.halt("daily_loss", True))
            return False
        self.add_working(bk, Working(oid, side, price, size, bk.mid, plan, "pending"))
        self.record_approved(oid, now, price * size)
        out.append(OrderApproved(ts_ns=now, cmd=OrderCmd.NEW, instrument_id=iid, order_id=oid, side=side, tif=self.tif,
                                 price=price, size=size, origin_seq=seq, leg=leg, origin=origin,
                                 reduce_only=reduce_only))
        return True

    # ------------------------------------------------------------------------------------ signals
    def _lean(self, bk: Book, label: int, fseq: int, out: list) -> None:
        """Fast-path quoting: plan toward +/- ``lean_lots`` (origin FAST), ``lean_offset_ticks`` further
        from the mid, unless an LLM plan is live."""
        now = self.clock()
        live = bk.plan
        if live is not None and live.expires_ns >= now and live.origin != OrderOrigin.FAST:
            return
        buy = label == Label.LEAN_BUY
        lots = self.limits.lean_lots
        plan = Plan(bk.spec.id, Action.BUY if buy else Action.SELL, lots if buy else -lots,
                    self.limits.lean_offset_ticks, fseq, now + self.limits.lean_ttl_ms * NS_PER_MS, OrderOrigin.FAST)
        plan.arrival_mid = bk.mid
        self._retire(bk, "replaced", out)
        bk.plan = plan
        self._launch(bk, plan, out, OrderOrigin.FAST)

    def _reprice(self, bk: Book, fseq: int, sigma: float, out: list) -> None:
        thresh = max(self.limits.reprice_sigmas * sigma, bk.spec.tick)
        moved = []
        for w in bk.working.values():
            if w.planned_mid <= 0:  # reported by the sender before we had a mid: measure from now on
                w.planned_mid = bk.mid
            elif not w.cancelling and abs(bk.mid - w.planned_mid) > thresh:
                moved.append(w)
        if not moved:
            return
        now = self.clock()
        live = bk.plan is not None and bk.plan.expires_ns >= now
        for w in moved:
            w.cancelling = True
            out.append(CancelSent(ts_ns=now, cmd=OrderCmd.CANCEL, instrument_id=bk.spec.id, order_id=w.order_id,
                                  origin_seq=fseq, why="reprice" if live else "moved"))
        if live:
            self._plan(bk, bk.plan, out)
