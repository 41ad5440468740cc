"""The deterministic risk gateway, sans I/O: INSTRUCTION / SIGNAL / EXEC_REPORT / CONTROL payloads in,
decision events out (the ORDERs to send ride on them). No clock of its own, no files, no rings:
``procs.risk`` moves the bytes, writes the audit log and the counters.

``RiskGateway(instruments, limits, clock)``; feed it with ``on_control``, ``on_exec``, ``on_signal``,
``on_instruction`` (each takes a payload and returns the list of events it decided, in order) and call
``start()`` once first (it returns the SYNC request). An event that carries an ORDER to write has
``cmd`` set (``OrderApproved``, ``CancelSent``, ``CancelAllSent``, ``SyncRequested``); ``encode_order``
packs it into the 48-byte ORDER payload, ``origin`` (``OrderOrigin``) included: FAST for the EMERGENCY
cancel-all, LLM for an instruction's orders and cancels, RISK for the gateway's own (reprice, cancel on a
move, HALT / KILL_SWITCH / daily-loss cancel-alls, SYNC).

Execution planner (INSTRUCTION -> child limit orders):

- discarded (``InstructionExpired``) when ``clock() > issued_ns + ttl_ms``; HOLD does nothing; CANCEL
  cancels the instrument's working orders; FLATTEN targets 0; BUY only buys, SELL only sells (an
  instruction whose target is already reached, counting open orders, plans nothing);
- wanted delta (base units) = ``target_lots * lot_size - (position + signed open size)``, where the open
  size leaves out orders being cancelled; working orders on the other side are cancelled first;
- limit price = mid -/+ (``max(spread / 2, sigma * risk_aversion * 0.3)`` + ``limit_offset_ticks * tick``),
  rounded to the tick away from crossing (buy: floor, sell: ceil); sigma is the gateway's own EWMA
  (``sigma_alpha``) of the squared per-SIGNAL move of ``ref_mid``;
- split into children of at most ``min(max_child_lots, max_order_lots)`` lots (at least 1), each through the pre-trade checks;
  planning stops at the first denied child (the others would meet the same limit);
- a SIGNAL that moves the mid more than ``max(reprice_sigmas * sigma, tick)`` (sigma as it was before
  this SIGNAL) from where a working order
  was planned cancels it, and, while the instruction that planned it is still live (its ttl), plans the
  remainder again at the new mid (cancel + new); the CANCELLED report of such a cancel re-plans a live
  instruction too (a REJECTED one does not, so a price the venue refuses cannot loop).

Order ids: ``order_id_for(instrument_id, origin_seq, leg, epoch)`` with ``epoch`` the run's (given to
the gateway: new at every ``up``, so ids never repeat across runs) and ``origin_seq`` = the INSTRUCTION's
``signal_seq`` (the venue sequence of the book it answers: unique per instrument, and unchanged when
the hub restarts, unlike ``instruction_id``) and ``leg`` = 0, 1, ... in planning order, continued by
re-plans of the same instruction. Replaying an instruction after a crash gives the same ids, which the
duplicate check denies.

Pre-trade checks of each new order, in this order, each its own ``DenyReason``: HALTED, NOT_SYNCED,
COOLDOWN, NOT_ALLOWED, STALE_REF, BAD_PRICE, BAD_SIZE, COLLAR, REDUCING, MIN_NOTIONAL, MAX_NOTIONAL,
MAX_POSITION, GROSS, MAX_OPEN, RATE, NOTIONAL_RATE, DUPLICATE, SELF_TRADE, DAILY_LOSS. An exception in a
check is a denial (INTERNAL_ERROR). Cancels are never checked. Open orders count from the moment they
are approved (pending) until a terminal EXEC_REPORT; orders being cancelled still count (conservative).

State: ACTIVE / REDUCING / HALTED. A state report that carries a POSITION_MISMATCH (the venue's position
differed from the sender's journal; the POSITION already is the venue's) or ends with SYNC_DONE reason
ACCOUNT_CHANGED (a reset venue) moves ACTIVE to REDUCING (``PositionMismatch`` / ``VenueAccountChanged``
events, cause ``position_mismatch`` / ``venue_account_changed``) until RESUME. CONTROL HALT and
KILL_SWITCH halt and send CANCEL_ALL for every
configured instrument; KILL_SWITCH and a daily-loss breach latch (REDUCE_ONLY does not lift them), only
RESUME does. Position and open orders change only from EXEC_REPORTs; POSITION / OPEN_ORDER reports
collect a state snapshot that SYNC_DONE applies, replacing all position and open-order state (realized
PnL is kept); until then new orders are NOT_SYNCED. Daily PnL = realized (since start or
``reset_daily_pnl``) + unrealized at the latest ``ref_mid`` (average entry price accounting).

Bad input (wrong size, unknown codes, non-finite numbers) is a ``MessageRejected`` event, never an
exception. Nothing here raises after construction; ``RiskGateway.__init__`` / ``resolve_limits`` raise
``ConfigError`` for bad limits.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from typing import Annotated, Any, Callable, Literal

import msgspec

from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import (EXEC_STRUCT, INSTRUCTION_STRUCT, ORDER_STRUCT, SIGNAL_STRUCT, Action, ControlCmd, ExecReason, ExecType, Label, OrderCmd,
                               OrderOrigin, Side, TimeInForce, order_id_for, unpack_control)

# ---------------------------------------------------------------------------------------------- layouts
# struct views of the layouts declared in pipeline.trading.messages (pinned against the numpy dtypes by a test)
SIGNAL_S = SIGNAL_STRUCT
INSTRUCTION_S = INSTRUCTION_STRUCT
ORDER_S = ORDER_STRUCT
EXEC_S = EXEC_STRUCT
assert (SIGNAL_S.size, INSTRUCTION_S.size, ORDER_S.size, EXEC_S.size) == (56, 48, 48, 56)

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
_EPS = 1e-9  # relative tolerance of the tick / lot / limit comparisons


class DenyReason(enum.IntEnum):
    """Why a new order was denied (``OrderDenied.reason``); counted as ``deny_<name lower>``."""

    HALTED = 1  # kill switch, halt or daily loss: no new orders
    NOT_SYNCED = 2  # no SYNC_DONE since start / since a state report began
    COOLDOWN = 3  # the instrument had an EMERGENCY signal less than emergency_cooldown_ms ago
    NOT_ALLOWED = 4  # the instrument is not configured or not in limits.allowed
    BAD_PRICE = 5  # not finite, not positive, off tick or beyond the tick's precision
    BAD_SIZE = 6  # not finite, not positive, off the lot step, or over max_order_lots
    STALE_REF = 7  # no SIGNAL for the instrument, or the latest is older than stale_ref_ms
    COLLAR = 8  # price further than collar_bps from the reference mid
    REDUCING = 9  # REDUCING state and the order would not reduce the position
    MIN_NOTIONAL = 10
    MAX_NOTIONAL = 11
    MAX_POSITION = 12  # position + open orders on that side + this order beyond max_position_lots
    GROSS = 13  # worst-case gross exposure over instruments beyond max_gross_notional
    MAX_OPEN = 14  # open orders (all instruments) at max_open_orders
    RATE = 15  # max_orders_per_s orders already sent in the last second
    NOTIONAL_RATE = 16  # notional sent in the last minute + this beyond max_notional_per_min
    DUPLICATE = 17  # order id already used
    SELF_TRADE = 18  # would cross our own working order on the other side
    DAILY_LOSS = 19  # realized + unrealized PnL at or below -daily_loss_limit (also halts)
    INTERNAL_ERROR = 20  # a check raised: fail closed


class TradingState(enum.IntEnum):
    ACTIVE = 0
    REDUCING = 1
    HALTED = 2


# ---------------------------------------------------------------------------------------------- limits
PerInstrument = float | dict[str, float]  # one value, or {symbol: value} with an optional "*" default
NonNeg = Annotated[float, msgspec.Meta(ge=0)]
Pos = Annotated[float, msgspec.Meta(gt=0)]


class RiskLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The gateway's limits and planner settings (the risk stage's ``params.limits`` table).

    Lots are ``lot_size`` units of the instrument, notionals are price x base size (quote currency).
    ``PerInstrument`` fields take a number or a ``{symbol = number}`` table (``"*"``: the default).
    """

    allowed: list[str] | None = None  # symbols that may trade; None: every configured instrument
    max_position_lots: PerInstrument = 100.0  # |position + open orders on one side|
    max_order_lots: PerInstrument = 50.0  # one order's size (sanity)
    max_child_lots: PerInstrument = 10.0  # the planner's child order size
    collar_bps: Pos = 50.0  # |price - ref_mid| / ref_mid
    stale_ref_ms: Annotated[int, msgspec.Meta(ge=1)] = 2_000
    min_notional: NonNeg = 1.0
    max_notional: Pos = 10_000.0
    max_gross_notional: Pos = 50_000.0
    max_open_orders: Annotated[int, msgspec.Meta(ge=1)] = 20
    max_orders_per_s: Annotated[int, msgspec.Meta(ge=1)] = 20
    max_notional_per_min: Pos = 200_000.0
    daily_loss_limit: Pos = 1_000.0
    emergency_cooldown_ms: Annotated[int, msgspec.Meta(ge=0)] = 2_000
    max_price_decimals: Annotated[int, msgspec.Meta(ge=0, le=12)] = 8  # precision the venue accepts
    max_size_decimals: Annotated[int, msgspec.Meta(ge=0, le=12)] = 8
    # planner
    risk_aversion: NonNeg = 1.0
    sigma_alpha: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.05
    reprice_sigmas: Pos = 2.0
    tif: Literal["GTC", "POST_ONLY", "IOC"] = "POST_ONLY"
    # fast-path quoting: a LEAN_BUY / LEAN_SELL SIGNAL targets +/- lean_lots for lean_ttl_ms, unless an
    # LLM instruction's plan is live (the slower, better-informed advice wins); 0 = the fast path only cancels
    lean_lots: Annotated[int, msgspec.Meta(ge=0)] = 0
    lean_ttl_ms: Annotated[int, msgspec.Meta(ge=1)] = 1_000


def decode_limits(table: Any) -> RiskLimits:
    """``RiskLimits`` from a params table (None: the defaults).

    Raises:
        ConfigError: unknown field, wrong type or out-of-bounds value; the message names the field.
    """
    if table is None:
        return RiskLimits()
    try:
        return msgspec.convert(table, RiskLimits)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"risk: params.limits: {exc}") from None


def _per(value: PerInstrument, symbol: str, field: str) -> float:
    if isinstance(value, dict):
        if symbol in value:
            v = value[symbol]
        elif "*" in value:
            v = value["*"]
        else:
            raise ConfigError(f"risk: params.limits.{field}: no value for {symbol!r} and no '*' default")
    else:
        v = value
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
        raise ConfigError(f"risk: params.limits.{field}: {symbol}: must be a positive number, got {v!r}")
    return float(v)


def _decimals(step: float) -> int:
    """Decimals needed to write ``step`` exactly (0.1 -> 1, 0.25 -> 2, 5 -> 0), at most 12."""
    for d in range(13):
        if abs(round(step, d) - step) <= step * 1e-9:
            return d
    return 12


class InstrumentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An instrument with its per-instrument limits resolved."""

    id: int
    symbol: str
    tick: float
    lot: float
    allowed: bool
    max_position_lots: float
    max_order_lots: float
    max_child_lots: float


def resolve_limits(instruments, limits: RiskLimits) -> dict[int, InstrumentSpec]:
    """Per-instrument specs from config instruments (anything with id, symbol, tick_size, lot_size).

    Raises:
        ConfigError: a per-instrument table lacks an instrument, or ``allowed`` names an unknown symbol.
    """
    symbols = {i.symbol for i in instruments}
    if limits.allowed is not None:
        unknown = sorted(set(limits.allowed) - symbols)
        if unknown:
            raise ConfigError(f"risk: params.limits.allowed: unknown symbols {unknown}")
    for field in ("max_position_lots", "max_order_lots", "max_child_lots"):
        v = getattr(limits, field)
        if isinstance(v, dict):
            extra = sorted(set(v) - symbols - {"*"})
            if extra:
                raise ConfigError(f"risk: params.limits.{field}: unknown symbols {extra}")
    out = {}
    for i in instruments:
        out[i.id] = InstrumentSpec(
            id=i.id, symbol=i.symbol, tick=float(i.tick_size), lot=float(i.lot_size),
            allowed=limits.allowed is None or i.symbol in limits.allowed,
            max_position_lots=_per(limits.max_position_lots, i.symbol, "max_position_lots"),
            max_order_lots=_per(limits.max_order_lots, i.symbol, "max_order_lots"),
            max_child_lots=_per(limits.max_child_lots, i.symbol, "max_child_lots"))
    return out


# ---------------------------------------------------------------------------------------------- events
class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="ev", tag=True):
    """A decision. ``cmd`` is nonzero when it carries an ORDER to write (see ``encode_order``)."""

    ts_ns: int  # the gateway clock at the decision
    cmd: int = 0


class OrderApproved(Event, frozen=True, kw_only=True):
    instrument_id: int
    order_id: int
    side: int
    tif: int
    price: float
    size: float
    origin_seq: int
    leg: int
    origin: int = OrderOrigin.LLM  # OrderOrigin: LLM (an instruction) or RISK (re-planned after a price move)


class OrderDenied(Event, frozen=True, kw_only=True):
    instrument_id: int
    order_id: int
    side: int
    price: float
    size: float
    origin_seq: int
    reason: DenyReason
    code: str  # reason.name, for people reading the audit log
    detail: str = ""


class CancelSent(Event, frozen=True, kw_only=True):
    instrument_id: int
    order_id: int
    origin_seq: int
    why: str  # "instruction", "other_side", "reprice", "moved"
    origin: int = OrderOrigin.RISK  # LLM for "instruction" / "other_side"


class CancelAllSent(Event, frozen=True, kw_only=True):
    instrument_id: int
    origin_seq: int
    why: str  # "emergency", "halt", "kill_switch", "daily_loss"
    origin: int = OrderOrigin.RISK  # FAST for "emergency"


class SyncRequested(Event, frozen=True, kw_only=True):
    pass


class InstructionExpired(Event, frozen=True, kw_only=True):
    instrument_id: int
    instruction_id: int
    signal_seq: int
    age_ms: float
    ttl_ms: int


class InstructionPlanned(Event, frozen=True, kw_only=True):
    instrument_id: int
    instruction_id: int
    signal_seq: int
    action: str
    target_lots: int
    delta: float  # wanted change, base units (0: nothing to do)
    children: int


class StateChanged(Event, frozen=True, kw_only=True):
    old: str
    new: str
    cause: str
    latched: bool


class Synced(Event, frozen=True, kw_only=True):
    positions: dict[int, float]
    open_orders: int
    solicited: bool


class SyncStarted(Event, frozen=True, kw_only=True):
    solicited: bool


class FillApplied(Event, frozen=True, kw_only=True):
    instrument_id: int
    order_id: int
    side: int
    price: float
    size: float
    position: float
    realized_pnl: float


class EmergencyReceived(Event, frozen=True, kw_only=True):
    instrument_id: int
    feature_seq: int
    cooldown_until_ns: int
    repeated: bool  # inside the cool-down: no second CANCEL_ALL


class PositionMismatch(Event, frozen=True, kw_only=True):
    """The sender found the venue's position differing from its journal's: the venue's is taken and
    trading is REDUCING until an operator resumes."""

    instrument_id: int
    ours: float  # base units, as the journal had it
    venue: float  # base units, the venue's (now the gateway's)
    diff_lots: float  # venue - ours, in lots


class VenueAccountChanged(Event, frozen=True, kw_only=True):
    """The sender found the venue answering for another account (a reset venue): its journal was
    started afresh; trading is REDUCING until an operator resumes."""


class MessageRejected(Event, frozen=True, kw_only=True):
    kind: str
    why: str


def encode_order(ev: Event, decided_ns: int | None = None) -> bytes:
    """The ORDER payload (48 bytes) of an event with ``cmd`` set.

    Raises:
        ValueError: the event carries no order.
    """
    t = ev.ts_ns if decided_ns is None else decided_ns
    if isinstance(ev, OrderApproved):
        return ORDER_S.pack(ev.instrument_id, OrderCmd.NEW, ev.side, ev.tif, ev.origin, ev.order_id, ev.price,
                            ev.size, ev.origin_seq, t)
    if isinstance(ev, CancelSent):
        return ORDER_S.pack(ev.instrument_id, OrderCmd.CANCEL, 0, 0, ev.origin, ev.order_id, 0.0, 0.0, ev.origin_seq, t)
    if isinstance(ev, CancelAllSent):
        return ORDER_S.pack(ev.instrument_id, OrderCmd.CANCEL_ALL, 0, 0, ev.origin, 0, 0.0, 0.0, ev.origin_seq, t)
    if isinstance(ev, SyncRequested):
        return ORDER_S.pack(0, OrderCmd.SYNC, 0, 0, OrderOrigin.RISK, 0, 0.0, 0.0, 0, t)
    raise ValueError(f"{type(ev).__name__} carries no order")


# ---------------------------------------------------------------------------------------------- state
class Working:
    """One open order as the gateway sees it. ``status``: "pending" (sent, no report yet), "acked",
    "unknown"; ``cancelling``: a CANCEL / CANCEL_ALL was sent for it."""

    __slots__ = ("order_id", "side", "price", "size", "planned_mid", "plan", "status", "cancelling")

    def __init__(self, order_id, side, price, size, planned_mid, plan, status):
        self.order_id, self.side, self.price, self.size = order_id, side, price, size
        self.planned_mid, self.plan, self.status, self.cancelling = planned_mid, plan, status, False


class Plan:
    """A live instruction: what the planner re-plans on reprice until ``expires_ns``."""

    __slots__ = ("instrument_id", "action", "target_lots", "offset_ticks", "origin_seq", "expires_ns", "next_leg",
                 "origin")

    def __init__(self, instrument_id, action, target_lots, offset_ticks, origin_seq, expires_ns,
                 origin=OrderOrigin.LLM):
        self.instrument_id, self.action, self.target_lots = instrument_id, action, target_lots
        self.offset_ticks, self.origin_seq, self.expires_ns, self.next_leg = offset_ticks, origin_seq, expires_ns, 0
        self.origin = origin


class Book:
    """Per-instrument state: reference, volatility, position, open orders."""

    __slots__ = ("spec", "mid", "spread", "ref_ns", "var", "position", "avg_px", "working", "cooldown_until_ns",
                 "plan")

    def __init__(self, spec: InstrumentSpec):
        self.spec = spec
        self.mid = 0.0
        self.spread = 0.0
        self.ref_ns = -1  # ts_origin_ns of the latest SIGNAL; -1: none
        self.var = 0.0
        self.position = 0.0  # base units, signed
        self.avg_px = 0.0
        self.working: dict[int, Working] = {}
        self.cooldown_until_ns = -1
        self.plan: Plan | None = None

    @property
    def sigma(self) -> float:
        return math.sqrt(self.var)

    def open_sizes(self) -> tuple[float, float]:
        """(open buy size, open sell size), base units, every open order (cancelling included)."""
        b = s = 0.0
        for w in self.working.values():
            if w.side == Side.BUY:
                b += w.size
            else:
                s += w.size
        return b, s


class RiskGateway:
    """The gateway's state and decisions (see the module docstring). ``clock`` returns monotonic ns."""

    def __init__(self, instruments, limits: RiskLimits | None = None, clock: Callable[[], int] | None = None, *,
                 epoch: int = 0):
        self.limits = limits or RiskLimits()
        self.epoch = epoch
        if clock is None:
            import time
            clock = time.monotonic_ns
        self.clock = clock
        self.specs = resolve_limits(instruments, self.limits)
        self.books: dict[int, Book] = {i: Book(s) for i, s in self.specs.items()}
        self.state = TradingState.ACTIVE
        self.latched = False
        self.synced = False
        self._snapshot: dict | None = None  # state report being collected
        self.seen_ids: set[int] = set()
        self._rate: deque[int] = deque()  # send times of the last second
        self._notional: deque[tuple[int, float]] = deque()  # (send time, notional) of the last minute
        self._notional_sum = 0.0
        self.realized_pnl = 0.0
        self.open_count = 0
        self.tif = int(TimeInForce[self.limits.tif])
        self.collar = self.limits.collar_bps * 1e-4
        self.stale_ns = self.limits.stale_ref_ms * NS_PER_MS
        self.cooldown_ns = self.limits.emergency_cooldown_ms * NS_PER_MS
        self._dec = {i: (_decimals(s.tick), _decimals(s.lot)) for i, s in self.specs.items()}

    # ------------------------------------------------------------------------------------ start / control
    def start(self) -> list[Event]:
        """NOT_SYNCED, and the SYNC request to write."""
        self.synced = False
        self._snapshot = {"pos": {}, "orders": {}, "solicited": True}
        return [SyncRequested(ts_ns=self.clock(), cmd=OrderCmd.SYNC)]

    def _set_state(self, new: TradingState, cause: str, latch: bool | None, out: list) -> None:
        old = self.state
        if latch is not None:
            self.latched = latch
        self.state = new
        out.append(StateChanged(ts_ns=self.clock(), old=old.name, new=new.name, cause=cause, latched=self.latched))

    def _cancel_everything(self, why: str, out: list) -> None:
        now = self.clock()
        for iid, bk in self.books.items():
            for w in bk.working.values():
                w.cancelling = True
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
        cmd = c[0]
        out: list[Event] = []
        if cmd == ControlCmd.HALT:
            return self.halt("halt", False)
        if cmd == ControlCmd.KILL_SWITCH:
            return self.halt("kill_switch", True)
        if cmd == ControlCmd.RESUME:
            self._set_state(TradingState.ACTIVE, "resume", False, out)
        elif cmd == ControlCmd.REDUCE_ONLY:
            if self.latched:
                out.append(StateChanged(ts_ns=self.clock(), old=self.state.name, new=self.state.name,
                                        cause="reduce_only_ignored_latched", latched=True))
            else:
                self._set_state(TradingState.REDUCING, "reduce_only", None, out)
        return out

    def reset_daily_pnl(self) -> None:
        """Start a new trading day: realized PnL back to 0."""
        self.realized_pnl = 0.0

    # ------------------------------------------------------------------------------------ pnl
    def pnl(self) -> float:
        """Realized + unrealized PnL (quote currency); unrealized at the latest ref_mid (entry price
        if no mid yet; a position whose entry is not known, one set to the venue's, counts from the
        first mid after it)."""
        u = 0.0
        for bk in self.books.values():
            if bk.position and bk.mid > 0 and bk.avg_px > 0:
                u += bk.position * (bk.mid - bk.avg_px)
        return self.realized_pnl + u

    def _check_daily_loss(self, out: list) -> None:
        if self.state != TradingState.HALTED or not self.latched:
            if self.pnl() <= -self.limits.daily_loss_limit:
                out.extend(self.halt("daily_loss", True))

    # ------------------------------------------------------------------------------------ exec reports
    def on_exec(self, payload) -> list[Event]:
        """An EXEC_REPORT payload (56 bytes)."""
        now = self.clock()
        if len(payload) != EXEC_S.size:
            return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why=f"size {len(payload)}")]
        iid, et, side, reason, oid, price, size, leaves, _vts, _fid = EXEC_S.unpack_from(payload, 0)
        if et == ExecType.SYNC_DONE:
            return self._apply_snapshot(account_changed=reason == ExecReason.ACCOUNT_CHANGED)
        bk = self.books.get(iid)
        if bk is None:
            return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why=f"unknown instrument {iid}")]
        if not (math.isfinite(price) and math.isfinite(size) and math.isfinite(leaves)):
            return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="non-finite number")]
        out: list[Event] = []
        if et == ExecType.POSITION or et == ExecType.OPEN_ORDER or et == ExecType.POSITION_MISMATCH:
            snap = self._snapshot
            if snap is None:  # unsolicited: the sender restarted and reports its state
                snap = self._snapshot = {"pos": {}, "orders": {}, "solicited": False}
                self.synced = False
                out.append(SyncStarted(ts_ns=now, solicited=False))
            if et == ExecType.POSITION:
                snap["pos"][iid] = (size, price)
            elif et == ExecType.POSITION_MISMATCH:
                snap.setdefault("mismatch", {})[iid] = (price, size)
            else:
                if side not in (Side.BUY, Side.SELL) or not size > 0:
                    return out + [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="bad OPEN_ORDER")]
                snap["orders"][oid] = (iid, side, price, leaves if leaves > 0 else size)
            return out
        w = bk.working.get(oid)
        if et == ExecType.ACKED or et == ExecType.UNKNOWN:
            status = "acked" if et == ExecType.ACKED else "unknown"
            if w is None:
                if side not in (Side.BUY, Side.SELL):
                    return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="bad side")]
                self._add_working(bk, Working(oid, side, price, leaves if leaves > 0 else size, bk.mid, None, status))
                self.seen_ids.add(oid)
            else:
                w.status = status
                if et == ExecType.ACKED and leaves > 0:
                    w.size = leaves
            return out
        if et == ExecType.FILLED:
            if reason == ExecReason.DUPLICATE:  # the answer to a repeated id is never a new fill
                if w is not None:
                    self._remove_working(bk, oid)
                return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="a FILLED answer to a duplicate id: "
                                                                           "not applied")]
            fside = side if side in (Side.BUY, Side.SELL) else (w.side if w is not None else 0)
            if fside == 0 or not size > 0:
                return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why="bad fill")]
            self._apply_fill(bk, fside, price, size)
            if w is not None:
                if leaves > bk.spec.lot * _EPS:
                    w.size = leaves
                else:
                    self._remove_working(bk, oid)
            out.append(FillApplied(ts_ns=now, instrument_id=iid, order_id=oid, side=fside, price=price, size=size,
                                   position=bk.position, realized_pnl=self.realized_pnl))
            self._check_daily_loss(out)
            return out
        if et == ExecType.REJECTED or et == ExecType.CANCELLED:
            if w is not None:
                self._remove_working(bk, oid)
                # a cancel we asked for (reprice) frees room: top the live plan up (a venue reject does not,
                # so a price the venue refuses cannot loop)
                if et == ExecType.CANCELLED and w.cancelling and bk.plan is not None and bk.plan.expires_ns >= now:
                    self._plan(bk, bk.plan, out)
            return out
        return [MessageRejected(ts_ns=now, kind="EXEC_REPORT", why=f"unknown exec_type {et}")]

    def _apply_fill(self, bk: Book, side: int, price: float, size: float) -> None:
        signed = size if side == Side.BUY else -size
        pos = bk.position
        if pos == 0 or (pos > 0) == (signed > 0):  # opening / adding
            new = pos + signed
            bk.avg_px = (bk.avg_px * abs(pos) + price * size) / abs(new)
            bk.position = new
            return
        closed = min(abs(pos), size)
        self.realized_pnl += closed * (price - bk.avg_px) * (1.0 if pos > 0 else -1.0)
        new = pos + signed
        if abs(new) <= bk.spec.lot * _EPS:
            bk.position, bk.avg_px = 0.0, 0.0
        else:
            if (new > 0) != (pos > 0):  # flipped: the rest opens at the fill price
                bk.avg_px = price
            bk.position = new

    def _add_working(self, bk: Book, w: Working) -> None:
        bk.working[w.order_id] = w
        self.open_count += 1

    def _remove_working(self, bk: Book, oid: int) -> None:
        if bk.working.pop(oid, None) is not None:
            self.open_count -= 1

    def forget_order(self, instrument_id: int, order_id: int) -> None:
        """An approved order that could not be written: no longer open."""
        bk = self.books.get(instrument_id)
        if bk is not None:
            self._remove_working(bk, order_id)

    def _apply_snapshot(self, account_changed: bool = False) -> list[Event]:
        now = self.clock()
        snap = self._snapshot or {"pos": {}, "orders": {}, "solicited": False}
        self._snapshot = None
        for iid, bk in self.books.items():
            bk.working.clear()
            bk.position, bk.avg_px = snap["pos"].get(iid, (0.0, 0.0))
            if not bk.position:
                bk.avg_px = 0.0
        self.open_count = 0
        for oid, (iid, side, price, size) in snap["orders"].items():
            bk = self.books.get(iid)
            if bk is not None:
                self._add_working(bk, Working(oid, side, price, size, bk.mid, None, "acked"))
                self.seen_ids.add(oid)
        self.synced = True
        out: list[Event] = [Synced(ts_ns=now, positions={i: b.position for i, b in self.books.items()},
                                   open_orders=self.open_count, solicited=snap["solicited"])]
        mismatch = snap.get("mismatch", {})
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
    def on_signal(self, payload, ts_origin_ns: int) -> list[Event]:
        """A SIGNAL payload (56 bytes); ``ts_origin_ns``: when its market data was received."""
        if len(payload) != SIGNAL_S.size:
            return [MessageRejected(ts_ns=self.clock(), kind="SIGNAL", why=f"size {len(payload)}")]
        iid, label, _flags, fseq, _ets, mid, spread, _p0, _p1, _p2, _p3 = SIGNAL_S.unpack_from(payload, 0)
        bk = self.books.get(iid)
        if bk is None:
            return [MessageRejected(ts_ns=self.clock(), kind="SIGNAL", why=f"unknown instrument {iid}")]
        out: list[Event] = []
        if label == Label.EMERGENCY:
            now = self.clock()
            repeated = bk.cooldown_until_ns > now and all(w.cancelling for w in bk.working.values())
            bk.cooldown_until_ns = now + self.cooldown_ns
            for w in bk.working.values():
                w.cancelling = True
            bk.plan = None
            if not repeated:
                out.append(CancelAllSent(ts_ns=now, cmd=OrderCmd.CANCEL_ALL, instrument_id=iid, origin_seq=fseq,
                                         why="emergency", origin=OrderOrigin.FAST))
            out.append(EmergencyReceived(ts_ns=now, instrument_id=iid, feature_seq=fseq,
                                         cooldown_until_ns=bk.cooldown_until_ns, repeated=repeated))
        if not (math.isfinite(mid) and mid > 0 and math.isfinite(spread) and spread >= 0):
            out.append(MessageRejected(ts_ns=self.clock(), kind="SIGNAL", why="bad ref_mid / ref_spread"))
            return out
        prev_sigma = bk.sigma  # a move is judged against the volatility known before it
        if bk.mid > 0:
            d = mid - bk.mid
            a = self.limits.sigma_alpha
            bk.var = (1.0 - a) * bk.var + a * d * d
        bk.mid, bk.spread = mid, spread
        if bk.position and not bk.avg_px:  # a position without a known entry (set to the venue's): from here
            bk.avg_px = mid
        if ts_origin_ns > bk.ref_ns:
            bk.ref_ns = ts_origin_ns
        if bk.working:
            self._reprice(bk, fseq, prev_sigma, out)
        if (label == Label.LEAN_BUY or label == Label.LEAN_SELL) and self.limits.lean_lots:
            self._lean(bk, label, fseq, out)
        if bk.position:
            self._check_daily_loss(out)
        return out

    def _lean(self, bk: Book, label: int, fseq: int, out: list) -> None:
        """Fast-path quoting: plan toward +/- ``lean_lots`` (origin FAST), unless an LLM plan is live."""
        now = self.clock()
        live = bk.plan
        if live is not None and live.expires_ns >= now and live.origin != OrderOrigin.FAST:
            return
        buy = label == Label.LEAN_BUY
        lots = self.limits.lean_lots
        plan = Plan(bk.spec.id, Action.BUY if buy else Action.SELL, lots if buy else -lots, 0, fseq,
                    now + self.limits.lean_ttl_ms * NS_PER_MS, OrderOrigin.FAST)
        bk.plan = plan
        self._plan(bk, plan, out, OrderOrigin.FAST)

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
        bk.plan = plan
        head = len(out)
        delta, children = self._plan(bk, plan, out, OrderOrigin.LLM)
        out.insert(head, InstructionPlanned(ts_ns=now, instrument_id=iid, instruction_id=inst_id, signal_seq=sseq,
                                            action=act.name, target_lots=target, delta=delta, children=children))
        return out

    def _plan(self, bk: Book, plan: Plan, out: list, origin: int = OrderOrigin.RISK) -> tuple[float, int]:
        """Plan (and check) the child orders that move ``bk`` to the plan's target. Returns (delta, children)."""
        spec = bk.spec
        lot = spec.lot
        open_signed = 0.0
        for w in bk.working.values():
            if not w.cancelling:
                open_signed += w.size if w.side == Side.BUY else -w.size
        delta = plan.target_lots * lot - (bk.position + open_signed)
        if plan.action == Action.BUY and delta < 0 or plan.action == Action.SELL and delta > 0:
            delta = 0.0
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
        off = max(bk.spread / 2.0, bk.sigma * self.limits.risk_aversion * 0.3) + offset_ticks * spec.tick
        t = spec.tick
        if side == Side.BUY:
            k = math.floor((bk.mid - off) / t + 1e-9)
        else:
            k = math.ceil((bk.mid + off) / t - 1e-9)
        return round(k * t, self._dec[spec.id][0])

    # ------------------------------------------------------------------------------------ checks
    def submit(self, bk: Book, oid: int, side: int, price: float, size: float, plan: Plan | None, leg: int,
               out: list, origin: int = OrderOrigin.LLM) -> bool:
        """Check one new order; append OrderApproved (and record it as open) or OrderDenied."""
        now = self.clock()
        try:
            reason, detail = self.check(bk, oid, side, price, size, now)
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
        self.seen_ids.add(oid)
        self._add_working(bk, Working(oid, side, price, size, bk.mid, plan, "pending"))
        self._rate.append(now)
        notional = price * size
        self._notional.append((now, notional))
        self._notional_sum += notional
        out.append(OrderApproved(ts_ns=now, cmd=OrderCmd.NEW, instrument_id=iid, order_id=oid, side=side, tif=self.tif,
                                 price=price, size=size, origin_seq=seq, leg=leg, origin=origin))
        return True

    def check(self, bk: Book, oid: int, side: int, price: float, size: float, now: int) -> tuple[int, str]:
        """The pre-trade checks of one new order: (0, "") or (DenyReason, detail). May raise (the caller
        turns that into INTERNAL_ERROR)."""
        lim = self.limits
        spec = bk.spec
        if self.state == TradingState.HALTED:
            return DenyReason.HALTED, "latched" if self.latched else "halted"
        if not self.synced:
            return DenyReason.NOT_SYNCED, ""
        if bk.cooldown_until_ns > now:
            return DenyReason.COOLDOWN, f"{(bk.cooldown_until_ns - now) // NS_PER_MS} ms left"
        if not spec.allowed:
            return DenyReason.NOT_ALLOWED, spec.symbol
        mid = bk.mid
        if bk.ref_ns < 0 or not mid > 0:
            return DenyReason.STALE_REF, "no reference"
        age = now - bk.ref_ns
        if age > self.stale_ns:
            return DenyReason.STALE_REF, f"reference {age // NS_PER_MS} ms old"
        tick, lot = spec.tick, spec.lot
        if not (math.isfinite(price) and price > 0):
            return DenyReason.BAD_PRICE, f"price {price!r}"
        k = price / tick
        if abs(k - round(k)) > 1e-6 or round(price, lim.max_price_decimals) != price:
            return DenyReason.BAD_PRICE, f"price {price!r} off tick {tick}"
        if side not in (Side.BUY, Side.SELL):
            return DenyReason.BAD_SIZE, f"side {side}"
        if not (math.isfinite(size) and size > 0):
            return DenyReason.BAD_SIZE, f"size {size!r}"
        lots = size / lot
        if abs(lots - round(lots)) > 1e-6 or round(size, lim.max_size_decimals) != size:
            return DenyReason.BAD_SIZE, f"size {size!r} off lot {lot}"
        if lots > spec.max_order_lots * (1 + _EPS):
            return DenyReason.BAD_SIZE, f"{lots:g} lots > max_order_lots {spec.max_order_lots:g}"
        if abs(price - mid) > mid * self.collar * (1 + _EPS):
            return DenyReason.COLLAR, f"{abs(price - mid) / mid * 1e4:.1f} bps from mid"
        buys, sells = bk.open_sizes()
        pos = bk.position
        if self.state == TradingState.REDUCING:
            # the position after every open reducing order and this one must not cross zero or grow
            if side == Side.BUY:
                ok = pos < 0 and pos + buys + size <= lot * _EPS
            else:
                ok = pos > 0 and pos - sells - size >= -lot * _EPS
            if not ok:
                return DenyReason.REDUCING, f"position {pos:g}"
        notional = price * size
        if notional < lim.min_notional * (1 - _EPS):
            return DenyReason.MIN_NOTIONAL, f"{notional:g}"
        if notional > lim.max_notional * (1 + _EPS):
            return DenyReason.MAX_NOTIONAL, f"{notional:g}"
        max_pos = spec.max_position_lots * lot * (1 + _EPS)
        if side == Side.BUY:
            worst = pos + buys + size
            if worst > max_pos:
                return DenyReason.MAX_POSITION, f"worst long {worst / lot:g} lots"
        else:
            worst = pos - sells - size
            if worst < -max_pos:
                return DenyReason.MAX_POSITION, f"worst short {-worst / lot:g} lots"
        gross = 0.0
        for b in self.books.values():
            bb, ss = (buys, sells) if b is bk else b.open_sizes()
            if b is bk:
                if side == Side.BUY:
                    bb += size
                else:
                    ss += size
            exposure = max(abs(b.position + bb), abs(b.position - ss))
            if exposure:
                px = b.mid if b.mid > 0 else (b.avg_px if b.avg_px > 0 else price)
                gross += exposure * px
        if gross > lim.max_gross_notional * (1 + _EPS):
            return DenyReason.GROSS, f"worst gross {gross:g}"
        if self.open_count >= lim.max_open_orders:
            return DenyReason.MAX_OPEN, f"{self.open_count} open"
        rate = self._rate
        while rate and rate[0] <= now - NS_PER_S:
            rate.popleft()
        if len(rate) >= lim.max_orders_per_s:
            return DenyReason.RATE, f"{len(rate)} in the last second"
        nq = self._notional
        while nq and nq[0][0] <= now - 60 * NS_PER_S:
            self._notional_sum -= nq.popleft()[1]
        if not nq:
            self._notional_sum = 0.0
        if self._notional_sum + notional > lim.max_notional_per_min * (1 + _EPS):
            return DenyReason.NOTIONAL_RATE, f"{self._notional_sum:g} in the last minute"
        if oid in self.seen_ids:
            return DenyReason.DUPLICATE, f"order id {oid}"
        for w in bk.working.values():
            if w.side != side and (price >= w.price if side == Side.BUY else price <= w.price):
                return DenyReason.SELF_TRADE, f"crosses our order {w.order_id} at {w.price:g}"
        if self.pnl() <= -lim.daily_loss_limit:
            return DenyReason.DAILY_LOSS, f"pnl {self.pnl():g}"
        return 0, ""

    # ------------------------------------------------------------------------------------ introspection
    def position_lots(self, instrument_id: int) -> float:
        bk = self.books[instrument_id]
        return bk.position / bk.spec.lot
