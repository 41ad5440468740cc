"""The risk gateway's trading state machine, sans I/O: ACTIVE / REDUCING / HALTED and its transitions.

CONTROL HALT and KILL_SWITCH halt and send CANCEL_ALL for every configured instrument (each working
order is marked cancelling, each live plan dropped); KILL_SWITCH and a daily-loss breach latch
(REDUCE_ONLY does not lift them), only RESUME does. REDUCE_ONLY moves to REDUCING unless latched. A
daily-loss breach (realized + unrealized PnL at or below ``-daily_loss_limit``) halts, latched. Every
transition is a ``StateChanged`` event; its cause is the command (``halt``, ``kill_switch``, ``resume``,
``reduce_only``), followed by ``:`` and the CONTROL's reason when that is not OPERATOR
(``reduce_only:latency_budget``, ``halt:stage_fatal``). Malformed CONTROL is a ``MessageRejected``.
Nothing here raises.
(The state report's transitions to REDUCING are the gateway's: ``gateway.RiskGateway``.)
"""

from __future__ import annotations

from typing import Callable

from pipeline.trading.messages import ControlCmd, ControlReason, OrderCmd, unpack_control
from pipeline.trading.risk.checks import PreTradeChecks, TradingState
from pipeline.trading.risk.events import CancelAllSent, Event, MessageRejected, StateChanged
from pipeline.trading.risk.limits import InstrumentSpec, RiskLimits


class TradingStateMachine(PreTradeChecks):
    """The checks' state plus its transitions; ``clock`` (monotonic ns) stamps the events."""

    def __init__(self, specs: dict[int, InstrumentSpec], limits: RiskLimits, clock: Callable[[], int]):
        super().__init__(specs, limits)
        self.clock = clock

    def _set_state(self, new: TradingState, cause: str, latch: bool | None, out: list) -> None:
        old = self.state
        if latch is not None:
            self.latched = latch
        self.state = new
        out.append(StateChanged(ts_ns=self.clock(), old=old.name, new=new.name, cause=cause, latched=self.latched))

    def _retire(self, bk, why: str, out: list) -> None:
        """Hook: ``bk``'s live plan is dropped from outside (``why``); the depth-aware planner
        (``depth.DepthPlanner``) records its parent as CANCELLED. Nothing here."""

    def _cancel_everything(self, why: str, out: list) -> None:
        now = self.clock()
        for iid, bk in self.books.items():
            for w in bk.working.values():
                w.cancelling = True
            self._retire(bk, why, out)
            bk.plan = None
            out.append(CancelAllSent(ts_ns=now, cmd=OrderCmd.CANCEL_ALL, instrument_id=iid, origin_seq=0, why=why))

    def halt(self, cause: str, latch: bool) -> list[Event]:
        """HALTED (latched or not) and CANCEL_ALL for every instrument."""
        out: list[Event] = []
        self._set_state(TradingState.HALTED, cause, latch or self.latched, out)
        self._cancel_everything(cause, out)
        return out

    def on_control(self, payload) -> list[Event]:
        """A CONTROL payload (16 bytes)."""
        c = unpack_control(payload)
        if c is None:
            return [MessageRejected(ts_ns=self.clock(), kind="CONTROL", why="malformed")]
        cmd, reason = c[0], c[1]
        why = "" if reason == ControlReason.OPERATOR else ":" + reason.name.lower()
        out: list[Event] = []
        if cmd == ControlCmd.HALT:
            return self.halt("halt" + why, False)
        if cmd == ControlCmd.KILL_SWITCH:
            return self.halt("kill_switch" + why, True)
        if cmd == ControlCmd.RESUME:
            self._set_state(TradingState.ACTIVE, "resume" + why, False, out)
        elif cmd == ControlCmd.REDUCE_ONLY:
            if self.latched:
                out.append(StateChanged(ts_ns=self.clock(), old=self.state.name, new=self.state.name,
                                        cause="reduce_only_ignored_latched" + why, latched=True))
            else:
                self._set_state(TradingState.REDUCING, "reduce_only" + why, None, out)
        return out

    def _check_daily_loss(self, out: list) -> None:
        if self.state != TradingState.HALTED or not self.latched:
            if self.pnl() <= -self.limits.daily_loss_limit:
                out.extend(self.halt("daily_loss", True))
