"""The depth-aware planner (design document 000 section 3.3) over the simple one, sans I/O: each live
plan is a parent order run by ``execution``'s state machine, gated on the SIGNAL's displayed depth,
priced and repriced with the grid-sampled realized volatility (``volatility.RealizedVol``).

``DepthPlanner(specs, limits, clock, epoch, execution)``: with ``execution.planner == "simple"`` every
method here gives the simple planner's behaviour (``planner.Planner``), unchanged. With ``"depth"``:

- a new plan (INSTRUCTION or LEAN) starts in WAIT_LIQUIDITY (``ParentChanged`` with ``old`` "") and
  takes the gate at once (one whose target the position already holds is FILLED from the start,
  silently: nothing to trade); a LEAN repeating the live lean parent's target renews its ttl instead of
  replacing it (no churn of parents on a run of LEAN SIGNALs);
- each SIGNAL (``depth_signal``, after the gateway took its mid): the live parent past its ttl
  EXPIRES (children cancelled, why "expired"); a child of the live parent that the mid left by more
  than ``max(reprice_sigmas * sigma, tick)`` since its submission (sigma as it was before this
  SIGNAL) moves the parent (MOVED: children cancelled, why "reprice", back to WAIT_LIQUIDITY); any
  other working order left that far behind is cancelled (why "moved"); then a waiting parent takes
  the gate (its submission's origin: the plan's own for its first children, RISK for a reprice);
- fills (``depth_fill``) of the live parent's children: PART_FILL, or ALL_FILLED once the position
  reached the target in the plan's direction; a child gone at the venue (``depth_gone``): a waiting
  parent takes the gate again, a working one with no child left is CANCELLED (CHILDREN_GONE);
- a parent dropped from outside (CANCEL instruction, a newer plan, HALT / kill switch / daily loss,
  EMERGENCY) is CANCELLED with that ``why``; whoever dropped it cancels what it chooses (a newer plan
  keeps the old children working: they count toward it). A child the checks deny with none approved
  cancels the parent (why "denied").

sigma (price units) = ``RealizedVol.sigma_price(mid, sigma_horizon_ms / 1000)``: the annualized
realized volatility of the last ``vol_window_s`` on a ``vol_grid_ms`` grid (SIGNAL ``ts_origin_ns``
timestamps), converted to one standard deviation of the mid over the horizon. The offset stays
``max(spread / 2, sigma * risk_aversion * 0.3)``. Nothing here raises after construction.
"""

from __future__ import annotations

import math
from typing import Callable

from pipeline.trading.messages import Action, Label, OrderCmd, OrderOrigin, Side
from pipeline.trading.risk.events import CancelSent, OrderApproved, ParentChanged
from pipeline.trading.risk.execution import (TERMINAL, Act, ExecutionParams, ParentState, Trigger, liquidity_ok,
                                             transition)
from pipeline.trading.risk.ledger import Book, Working
from pipeline.trading.risk.limits import NS_PER_MS, NS_PER_S, InstrumentSpec, RiskLimits
from pipeline.trading.risk.planner import Plan, Planner
from pipeline.trading.risk.volatility import SECONDS_PER_YEAR, RealizedVol

_WAIT, _SUBM, _PART = ParentState.WAIT_LIQUIDITY, ParentState.SUBMITTED, ParentState.PARTIAL_FILLED


class DepthPlanner(Planner):
    """The simple planner plus the depth-aware one (module docstring); ``depth_mode`` says which runs.
    ``vol`` (instrument -> ``RealizedVol``) and ``depth`` (instrument -> the latest SIGNAL-with-depth
    payload, None before one) are kept in both modes' objects but fed only in depth mode."""

    def __init__(self, specs: dict[int, InstrumentSpec], limits: RiskLimits, clock: Callable[[], int], epoch: int,
                 execution: ExecutionParams):
        super().__init__(specs, limits, clock, epoch)
        self.execution = execution
        self.depth_mode = execution.planner == "depth"
        self.vol = {i: RealizedVol(execution.vol_window_s * NS_PER_S, execution.vol_grid_ms * NS_PER_MS,
                                   execution.vol_min_returns) for i in specs}
        self.depth: dict[int, bytes | None] = {i: None for i in specs}
        self.horizon_s = execution.sigma_horizon_ms / 1000.0
        self._root_h = math.sqrt(self.horizon_s / SECONDS_PER_YEAR)  # sigma_price's conversion, precomputed
        self.ratio = execution.liquidity_ratio

    # ------------------------------------------------------------------------------------ hooks
    def sigma_price(self, bk: Book) -> float:
        if not self.depth_mode:
            return bk.sigma
        return bk.mid * self.vol[bk.spec.id].annualized * self._root_h  # RealizedVol.sigma_price, inlined

    def _launch(self, bk: Book, plan: Plan, out: list, origin: int) -> tuple[float, int]:
        if not self.depth_mode:
            return self._plan(bk, plan, out, origin)
        left = self.left(bk, plan)
        if int(round(abs(left) / bk.spec.lot)) == 0:  # nothing to trade: no parent to run (and no event)
            plan.state = ParentState.FILLED
            return 0.0, 0
        plan.state = _WAIT
        out.append(ParentChanged(ts_ns=self.clock(), instrument_id=bk.spec.id, origin_seq=plan.origin_seq, old="",
                                 new=_WAIT.name, trigger="NEW", left=left))
        return self._gate(bk, plan, out, origin)

    def _retire(self, bk: Book, why: str, out: list) -> None:
        plan = bk.plan
        if self.depth_mode and plan is not None and plan.state and plan.state not in TERMINAL:
            self._step(bk, plan, Trigger.CANCEL, out, why)

    def _lean(self, bk: Book, label: int, fseq: int, out: list) -> None:
        plan = bk.plan
        if self.depth_mode and plan is not None and plan.origin == OrderOrigin.FAST and plan.state in (_WAIT, _SUBM,
                                                                                                      _PART):
            lots = self.limits.lean_lots
            if plan.target_lots == (lots if label == Label.LEAN_BUY else -lots):
                plan.expires_ns = self.clock() + self.limits.lean_ttl_ms * NS_PER_MS
                return
        super()._lean(bk, label, fseq, out)

    # ------------------------------------------------------------------------------------ the machine
    def left(self, bk: Book, plan: Plan) -> float:
        """What the parent still wants to trade (base units, signed): target - position, 0 once the
        position reached the target in the plan's direction."""
        d = plan.target_lots * bk.spec.lot - bk.position
        if plan.action == Action.BUY and d < 0 or plan.action == Action.SELL and d > 0:
            return 0.0
        return d

    def _step(self, bk: Book, plan: Plan, trigger: Trigger, out: list, why: str = "") -> Act:
        """One transition of ``plan`` (an event when its state changes) and its act's cancels."""
        old = plan.state
        new, act = transition(old, trigger)
        if new != old:
            plan.state = new
            out.append(ParentChanged(ts_ns=self.clock(), instrument_id=bk.spec.id, origin_seq=plan.origin_seq,
                                     old=ParentState(old).name, new=new.name, trigger=trigger.name, why=why,
                                     filled=plan.filled, left=self.left(bk, plan)))
        if act == Act.CANCEL_CHILDREN or act == Act.CANCEL_AND_REPRICE:
            now = self.clock()
            why_c = "reprice" if act == Act.CANCEL_AND_REPRICE else "expired"
            for w in bk.working.values():
                if w.plan is plan and not w.cancelling:
                    w.cancelling = True
                    out.append(CancelSent(ts_ns=now, cmd=OrderCmd.CANCEL, instrument_id=bk.spec.id, order_id=w.order_id,
                                          origin_seq=plan.origin_seq, why=why_c))
        return act

    def _gate(self, bk: Book, plan: Plan, out: list, origin: int) -> tuple[float, int]:
        """WAIT_LIQUIDITY: submit the wanted size when the gate holds (``execution.liquidity_ok``);
        (delta, children) as ``_plan``."""
        spec = bk.spec
        if int(round(abs(self.left(bk, plan)) / spec.lot)) == 0:
            self._step(bk, plan, Trigger.ALL_FILLED, out)
            return 0.0, 0
        delta = self.wanted(bk, plan)
        n_lots = int(round(abs(delta) / spec.lot))
        if n_lots == 0:  # open orders already cover it
            return delta, 0
        side = Side.BUY if delta > 0 else Side.SELL
        price = self.limit_price(bk, side, plan.offset_ticks)
        if not price > 0 or not liquidity_ok(self.depth[spec.id], side, abs(price - bk.mid) / spec.tick,
                                             n_lots * spec.lot, self.ratio):
            return delta, 0  # LIQUIDITY_SHORT: stays waiting
        self._step(bk, plan, Trigger.LIQUIDITY_OK, out)
        head = len(out)
        delta, n = self._plan(bk, plan, out, origin)
        if not any(type(e) is OrderApproved for e in out[head:]):
            self._step(bk, plan, Trigger.CANCEL, out, "denied")
        return delta, n

    # hot path: once per SIGNAL of an instrument with a live parent or working orders, depth mode only
    def depth_signal(self, bk: Book, fseq: int, sigma_before: float, out: list) -> None:
        """The SIGNAL's part of the machine (module docstring); ``bk.mid`` is already this SIGNAL's."""
        plan = bk.plan
        live = plan is not None and plan.state != 0 and plan.state not in TERMINAL
        if live and self.clock() > plan.expires_ns:
            self._step(bk, plan, Trigger.TTL_PASSED, out)
            live = False
        if bk.working:
            thresh = max(self.limits.reprice_sigmas * sigma_before, bk.spec.tick)
            mid, moved, orphans = bk.mid, False, []
            for w in bk.working.values():
                if w.planned_mid <= 0:  # reported by the sender before we had a mid: measure from now on
                    w.planned_mid = mid
                elif not w.cancelling and abs(mid - w.planned_mid) > thresh:
                    if live and w.plan is plan:
                        moved = True
                    else:
                        orphans.append(w)
            if orphans:
                now = self.clock()
                for w in orphans:
                    w.cancelling = True
                    out.append(CancelSent(ts_ns=now, cmd=OrderCmd.CANCEL, instrument_id=bk.spec.id,
                                          order_id=w.order_id, origin_seq=fseq, why="moved"))
            if moved:
                self._step(bk, plan, Trigger.MOVED, out)
        if live and plan.state == _WAIT:
            self._gate(bk, plan, out, plan.origin if plan.next_leg == 0 else OrderOrigin.RISK)

    def depth_fill(self, bk: Book, w: Working | None, size: float, out: list) -> None:
        """A fill of ``size`` (base units) of working order ``w`` (None: not ours to track)."""
        plan = bk.plan
        if w is None or plan is None or w.plan is not plan or plan.state not in (_WAIT, _SUBM, _PART):
            return
        plan.filled += size
        done = int(round(abs(self.left(bk, plan)) / bk.spec.lot)) == 0
        self._step(bk, plan, Trigger.ALL_FILLED if done else Trigger.PART_FILL, out)

    def depth_gone(self, bk: Book, w: Working, out: list) -> None:
        """Working order ``w`` ended at the venue (CANCELLED / REJECTED) and was removed."""
        plan = bk.plan
        if plan is None or w.plan is not plan:
            return
        if plan.state == _WAIT:
            self._gate(bk, plan, out, OrderOrigin.RISK)
        elif plan.state in (_SUBM, _PART) and not any(x.plan is plan and not x.cancelling
                                                      for x in bk.working.values()):
            self._step(bk, plan, Trigger.CHILDREN_GONE, out, "venue")
