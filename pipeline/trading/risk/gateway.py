"""The deterministic risk gateway, sans I/O: INSTRUCTION / SIGNAL / EXEC_REPORT / CONTROL payloads in,
decision events (``events``) out, the ORDERs to send riding on them. No clock of its own, no files, no
rings: ``procs.risk`` moves the bytes, writes the audit log and the counters.

``RiskGateway(instruments, limits, clock)``; feed it with ``on_control``, ``on_exec``, ``on_signal``,
``on_instruction`` (each takes a payload and returns the list of events it decided, in order) and call
``start()`` once first (it returns the SYNC request).

Here: the start, the EXEC_REPORTs and the SIGNALs. Position and open orders change only from
EXEC_REPORTs; POSITION / OPEN_ORDER / POSITION_MISMATCH reports collect a ``StateReport`` that SYNC_DONE
applies, replacing all position and open-order state (realized PnL is kept); until then new orders are
NOT_SYNCED. A state report that carries a POSITION_MISMATCH (the venue's position differed from the
sender's journal; the POSITION already is the venue's) or ends with SYNC_DONE reason ACCOUNT_CHANGED (a
reset venue) moves ACTIVE to REDUCING (``PositionMismatch`` / ``VenueAccountChanged`` events, cause
``position_mismatch`` / ``venue_account_changed``) until RESUME. An EMERGENCY SIGNAL pulls the
instrument's quotes at once and denies its new orders (COOLDOWN) for ``emergency_cooldown_ms``; what
it pulls follows its side bits (``SIGNAL_FLAG_AT_RISK_BID`` / ``SIGNAL_FLAG_AT_RISK_ASK``):

    exactly one side bit   a CANCEL (origin FAST, why "emergency") for each working order of that side
                           (bid: BUY orders, ask: SELL orders) not already cancelling; the other side's
                           orders keep working
    none, or both          one CANCEL_ALL (origin FAST, why "emergency"), none again inside the
                           cool-down while every order is already cancelling

Either way the live plan is dropped and ``EmergencyReceived`` says whether anything new was pulled
(``repeated``: inside the cool-down with nothing left to cancel). A SIGNAL with
``SIGNAL_FLAG_STALE_BOOK`` (its book rebuilding after a feed gap, crossed, or invalid) does its
EMERGENCY, if any, and nothing else: the instrument has no reference (``REF_STALE_BOOK``) until an
unflagged SIGNAL, so each new order is denied STALE_REF ("book stale"); cancels still go. Daily
PnL = realized (since start or ``reset_daily_pnl``) + unrealized at the latest ``ref_mid`` (average entry
price accounting).

A SIGNAL is 56 bytes, or 296 with the depth block (``SIGNAL_DEPTH_DTYPE``); the simple planner reads
only its first 56. With ``execution.planner == "depth"`` each SIGNAL also feeds the instrument's
``RealizedVol`` (at its ``ts_origin_ns``) and keeps its depth block for the liquidity gate (a 56-byte
one leaves the gate closed), and the parent orders run ``depth.DepthPlanner``'s machine.

Every REJECTED report is on record as a ``RejectReceived`` event (order id, reason and its name), whether
or not the order still works here: with the ``OrderApproved`` events, the audit log accounts for every
NEW order approved (in the sender's journal, or refused by it with a reason).

Bad input (wrong size, unknown codes, non-finite numbers) is a ``MessageRejected`` event, never an
exception. Nothing here raises after construction; ``RiskGateway.__init__`` raises ``ConfigError`` for
bad limits.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from pipeline.trading.messages import (EXEC_STRUCT, SIGNAL_DEPTH_BYTES, SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID,
                                       SIGNAL_FLAG_STALE_BOOK,
                                       SIGNAL_STRUCT, ExecReason, ExecType, Label, OrderCmd, OrderOrigin, Side)
from pipeline.trading.risk.checks import REF_STALE_BOOK, TradingState
from pipeline.trading.risk.events import (CancelAllSent, CancelSent, EmergencyReceived, Event, FillApplied,
                                          MessageRejected, PositionMismatch, RejectReceived, Synced, SyncRequested,
                                          SyncStarted, VenueAccountChanged)
from pipeline.trading.risk.depth import DepthPlanner
from pipeline.trading.risk.execution import ExecutionParams
from pipeline.trading.risk.ledger import StateReport, Working
from pipeline.trading.risk.limits import EPS, NS_PER_MS, RiskLimits, resolve_limits

# Plain module globals, not the imported names: CPython compiles a method call on an imported name as an
# attribute load (it takes the name for a module), a bound method made per call on the hot path.
EXEC_S = EXEC_STRUCT
SIGNAL_S = SIGNAL_STRUCT
_SIGNAL_BYTES = SIGNAL_STRUCT.size
_DEPTH_BYTES = SIGNAL_DEPTH_BYTES
_SIDE_BITS = SIGNAL_FLAG_AT_RISK_BID | SIGNAL_FLAG_AT_RISK_ASK
#: a SIGNAL's side bits -> the side of our orders at risk (exactly one bit; else both sides: CANCEL_ALL)
_AT_RISK = {SIGNAL_FLAG_AT_RISK_BID: Side.BUY, SIGNAL_FLAG_AT_RISK_ASK: Side.SELL}
#: an EXEC_REPORT's reason -> its name, for the audit log's RejectReceived
_REASON_NAMES = {int(r): r.name for r in ExecReason}


class RiskGateway(DepthPlanner):
    """The gateway's state and decisions (see the module docstring). ``clock`` returns monotonic ns
    (default ``time.monotonic_ns``); ``epoch``: the run's, in every order id; ``execution``: which
    planner runs (``execution.ExecutionParams``; default: the simple one).

    One object in layers, each its own module, each using only the ones below it: ``Ledger`` (positions,
    open orders, PnL) < ``PreTradeChecks`` < ``TradingStateMachine`` < ``Planner`` < ``DepthPlanner`` <
    ``RiskGateway``. The per-order path reads the state as plain attributes of ``self`` (no delegation on
    the hot path).

    Raises:
        ConfigError: bad limits (``resolve_limits``), risk_aversion outside [0.1, 2.0].
    """

    def __init__(self, instruments, limits: RiskLimits | None = None, clock: Callable[[], int] | None = None, *,
                 epoch: int = 0, execution: ExecutionParams | None = None):
        limits = limits or RiskLimits()
        if clock is None:
            clock = time.monotonic_ns
        super().__init__(resolve_limits(instruments, limits), limits, clock, epoch, execution or ExecutionParams())
        self._report: StateReport | None = None  # state report being collected
        self.cooldown_ns = limits.emergency_cooldown_ms * NS_PER_MS

    def start(self) -> list[Event]:
        """NOT_SYNCED, and the SYNC request to write."""
        self.synced = False
        self._report = StateReport(solicited=True)
        return [SyncRequested(ts_ns=self.clock(), cmd=OrderCmd.SYNC)]

    # ------------------------------------------------------------------------------------ exec reports
    def on_exec(self, payload) -> list[Event]:
        """An EXEC_REPORT payload (56 bytes)."""
        now = self.clock()
        if len(payload) != EXEC_S.size:
            return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why=f"size {len(payload)}")]
        iid, et, side, reason, oid, price, size, leaves, _vts, _fid = EXEC_S.unpack_from(payload, 0)
        if et == ExecType.SYNC_DONE:
            return self._apply_report(account_changed=reason == ExecReason.ACCOUNT_CHANGED)
        bk = self.books.get(iid)
        if bk is None:
            return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why=f"unknown instrument {iid}")]
        if not (math.isfinite(price) and math.isfinite(size) and math.isfinite(leaves)):
            return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="non-finite number")]
        out: list[Event] = []
        if et == ExecType.POSITION or et == ExecType.OPEN_ORDER or et == ExecType.POSITION_MISMATCH:
            report = self._report
            if report is None:  # unsolicited: the sender restarted and reports its state
                report = self._report = StateReport(solicited=False)
                self.synced = False
                out.append(SyncStarted(ts_ns=now, solicited=False))
            if et == ExecType.POSITION:
                report.positions[iid] = (size, price)
            elif et == ExecType.POSITION_MISMATCH:
                report.mismatch[iid] = (price, size)
            else:
                if side not in (Side.BUY, Side.SELL) or not size > 0:
                    return out + [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="bad OPEN_ORDER")]
                report.orders[oid] = (iid, side, price, leaves if leaves > 0 else size)
            return out
        w = bk.working.get(oid)
        if et == ExecType.ACKED or et == ExecType.UNKNOWN:
            status = "acked" if et == ExecType.ACKED else "unknown"
            if w is None:
                if side not in (Side.BUY, Side.SELL):
                    return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="bad side")]
                self.add_working(bk, Working(oid, side, price, leaves if leaves > 0 else size, bk.mid, None, status))
                self.seen_ids.add(oid)
            else:
                w.status = status
                if et == ExecType.ACKED and leaves > 0:
                    w.size = leaves
            return out
        if et == ExecType.FILLED:
            if reason == ExecReason.DUPLICATE:  # the answer to a repeated id is never a new fill
                if w is not None:
                    self.remove_working(bk, oid)
                return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="a FILLED answer to a duplicate id: "
                                                                           "not applied")]
            fside = side if side in (Side.BUY, Side.SELL) else (w.side if w is not None else 0)
            if fside == 0 or not size > 0:
                return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="bad fill")]
            self.apply_fill(bk, fside, price, size)
            if w is not None:
                if leaves > bk.spec.lot * EPS:
                    w.size = leaves
                else:
                    self.remove_working(bk, oid)
            out.append(FillApplied(ts_ns=now, instrument_id=iid, order_id=oid, side=fside, price=price, size=size,
                                   position=bk.position, realized_pnl=self.realized_pnl))
            if self.depth_mode:
                self.depth_fill(bk, w, size, out)
            self._check_daily_loss(out)
            return out
        if et == ExecType.REJECTED or et == ExecType.CANCELLED:
            if et == ExecType.REJECTED:  # on record: a NEW approved is sent, or refused with its reason
                out.append(RejectReceived(ts_ns=now, instrument_id=iid, order_id=oid, reason=reason,
                                          code=_REASON_NAMES.get(reason, str(reason)), leaves=leaves))
            if w is not None:
                self.remove_working(bk, oid)
                if self.depth_mode:
                    self.depth_gone(bk, w, out)
                # a cancel we asked for (reprice) frees room: top the live plan up (a venue reject does not,
                # so a price the venue refuses cannot loop)
                elif et == ExecType.CANCELLED and w.cancelling and bk.plan is not None and bk.plan.expires_ns >= now:
                    self._plan(bk, bk.plan, out)
            return out
        return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why=f"unknown exec_type {et}")]

    def _apply_report(self, account_changed: bool = False) -> list[Event]:
        """SYNC_DONE: the collected state report (none: an empty unsolicited one) replaces the ledger's state."""
        now = self.clock()
        report = self._report
        if report is None:
            report = StateReport(solicited=False)
        self._report = None
        self.replace_state(report)
        self.synced = True
        out: list[Event] = [Synced(ts_ns=now, positions={i: b.position for i, b in self.books.items()},
                                   open_orders=self.open_count, solicited=report.solicited)]
        mismatch = report.mismatch
        for iid, (ours, venue) in sorted(mismatch.items()):
            bk = self.books.get(iid)
            if bk is not None:
                out.append(PositionMismatch(ts_ns=now, instrument_id=iid, ours=ours, venue=venue,
                                            diff_lots=round((venue - ours) / bk.spec.lot, 6)))
        if account_changed:
            out.append(VenueAccountChanged(ts_ns=now))
        if (mismatch or account_changed) and self.state == TradingState.ACTIVE:
            self._set_state(TradingState.REDUCING, "venue_account_changed" if account_changed else "position_mismatch",
                            None, out)
        self._check_daily_loss(out)
        return out

    # ------------------------------------------------------------------------------------ signals
    def _emergency(self, bk, side: int | None, fseq: int, out: list) -> None:
        """The EMERGENCY of the module docstring: ``side`` the side at risk (Side.BUY: our bids), None
        for both."""
        now = self.clock()
        iid = bk.spec.id
        in_cooldown = bk.cooldown_until_ns > now
        bk.cooldown_until_ns = now + self.cooldown_ns
        self._retire(bk, "emergency", out)
        bk.plan = None
        if side is None:
            repeated = in_cooldown and all(w.cancelling for w in bk.working.values())
            for w in bk.working.values():
                w.cancelling = True
            if not repeated:
                out.append(CancelAllSent(ts_ns=now, cmd=OrderCmd.CANCEL_ALL, instrument_id=iid, origin_seq=fseq,
                                         why="emergency", origin=OrderOrigin.FAST))
        else:
            pulled = [w for w in bk.working.values() if w.side == side and not w.cancelling]
            repeated = in_cooldown and not pulled
            for w in pulled:
                w.cancelling = True
                out.append(CancelSent(ts_ns=now, cmd=OrderCmd.CANCEL, instrument_id=iid, order_id=w.order_id,
                                      origin_seq=fseq, why="emergency", origin=OrderOrigin.FAST))
        out.append(EmergencyReceived(ts_ns=now, instrument_id=iid, feature_seq=fseq,
                                     cooldown_until_ns=bk.cooldown_until_ns, repeated=repeated))

    def on_signal(self, payload, ts_origin_ns: int) -> list[Event]:
        """A SIGNAL payload (56 bytes, or 296 with the depth block); ``ts_origin_ns``: when its market
        data was received (the depth-aware planner's volatility grid runs on it)."""
        size = len(payload)
        if size != _SIGNAL_BYTES and size != _DEPTH_BYTES:
            return [MessageRejected(ts_ns=self.clock(), kind="SIGNAL", why=f"size {size}")]
        iid, label, flags, fseq, _ets, mid, spread, _p0, _p1, _p2, _p3 = SIGNAL_S.unpack_from(payload, 0)
        bk = self.books.get(iid)
        if bk is None:
            return [MessageRejected(ts_ns=self.clock(), kind="SIGNAL", why=f"unknown instrument {iid}")]
        out: list[Event] = []
        if label == Label.EMERGENCY:
            self._emergency(bk, _AT_RISK.get(flags & _SIDE_BITS), fseq, out)
        if flags & SIGNAL_FLAG_STALE_BOOK:  # no reference to trade on until an unflagged SIGNAL (STALE_REF)
            bk.ref_ns = REF_STALE_BOOK
            return out
        if not (math.isfinite(mid) and mid > 0 and math.isfinite(spread) and spread >= 0):
            out.append(MessageRejected(ts_ns=self.clock(), kind="SIGNAL", why="bad ref_mid / ref_spread"))
            return out
        prev_sigma = bk.sigma  # a move is judged against the volatility known before it
        if bk.mid > 0:
            d = mid - bk.mid
            a = self.limits.sigma_alpha
            bk.var = (1.0 - a) * bk.var + a * d * d
        depth = self.depth_mode
        if depth:
            prev_sigma = self.sigma_price(bk)
            self.vol[iid].update(ts_origin_ns, mid)
            self.depth[iid] = bytes(payload) if size == _DEPTH_BYTES else None
        bk.mid, bk.spread = mid, spread
        if bk.position and not bk.avg_px:  # a position without a known entry (set to the venue's): from here
            bk.avg_px = mid
        if ts_origin_ns > bk.ref_ns:
            bk.ref_ns = ts_origin_ns
        if depth:
            if bk.plan is not None or bk.working:
                self.depth_signal(bk, fseq, prev_sigma, out)
        elif bk.working:
            self._reprice(bk, fseq, prev_sigma, out)
        if (label == Label.LEAN_BUY or label == Label.LEAN_SELL) and self.limits.lean_lots:
            self._lean(bk, label, fseq, out)
        if bk.position:
            self._check_daily_loss(out)
        return out

