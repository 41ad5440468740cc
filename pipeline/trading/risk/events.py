"""The risk gateway's decision events, one type each, named in the past tense (``ev`` in the audit
log): what the gateway decided, in order. An event that carries an ORDER to write has ``cmd`` set
(``OrderApproved``, ``CancelSent``, ``CancelAllSent``, ``SyncRequested``); ``encode_order`` packs it
into the 48-byte ORDER payload, ``origin`` (``OrderOrigin``) included: FAST for the EMERGENCY
cancel-all, LLM for an instruction's orders and cancels, RISK for the gateway's own (reprice, cancel on
a move, HALT / KILL_SWITCH / daily-loss cancel-alls, SYNC); an ``OrderApproved``'s ``reduce_only``
becomes ``ORDER_FLAG_REDUCE_ONLY`` in the ORDER's flags. A denial (``OrderDenied``) carries its
``DenyReason``; bad input is a ``MessageRejected``.
"""

from __future__ import annotations

import msgspec

from pipeline.trading.messages import ORDER_FLAG_REDUCE_ONLY, ORDER_STRUCT, OrderCmd, OrderOrigin
from pipeline.trading.risk.checks import DenyReason

# Plain module globals, not the imported names: CPython compiles a method call on an imported name as an
# attribute load (it takes the name for a module), a bound method made per call on the hot path.
ORDER_S = ORDER_STRUCT


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
    reduce_only: bool = False  # a perpetual's order that may only reduce the position (ORDER_FLAG_REDUCE_ONLY)


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
    why: str  # "instruction", "other_side", "reprice", "moved", "emergency" (one side at risk), "expired"
    origin: int = OrderOrigin.RISK  # LLM for "instruction" / "other_side"


class CancelAllSent(Event, frozen=True, kw_only=True):
    instrument_id: int
    origin_seq: int
    # "emergency", "halt", "kill_switch", "daily_loss"; a CONTROL's cause carries its reason when it is
    # not the operator's ("halt:latency_budget")
    why: str
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


class ParentChanged(Event, frozen=True, kw_only=True):
    """The depth-aware planner's parent order changed state (``execution.ParentState`` names; ``old``
    is "" for a new parent). ``trigger``: the ``execution.Trigger`` name; ``why``: for CANCEL, who
    cancelled it ("instruction", "replaced", "halt", "emergency", "denied", ...), else "";
    ``filled`` / ``left``: base units its children filled / it still wants (signed)."""

    instrument_id: int
    origin_seq: int
    old: str
    new: str
    trigger: str
    why: str = ""
    filled: float = 0.0
    left: float = 0.0


class RejectReceived(Event, frozen=True, kw_only=True):
    """The sender answered an order REJECTED (``code``: the ``ExecReason`` name): a NEW it refused
    without sending (HALTED: its journal could not take the intent or its fsync stalled; MALFORMED), one
    the venue refused, or a cancel refused. On record so that the audit log accounts for every NEW it
    approved: sent (in the sender's journal) or refused with a reason."""

    instrument_id: int
    order_id: int
    reason: int  # ExecReason
    code: str
    leaves: float


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
        return ORDER_S.pack(ev.instrument_id, OrderCmd.NEW, ev.side, ev.tif, ev.origin,
                            ORDER_FLAG_REDUCE_ONLY if ev.reduce_only else 0, ev.order_id, ev.price, ev.size,
                            ev.origin_seq, t)
    if isinstance(ev, CancelSent):
        return ORDER_S.pack(ev.instrument_id, OrderCmd.CANCEL, 0, 0, ev.origin, 0, ev.order_id, 0.0, 0.0,
                            ev.origin_seq, t)
    if isinstance(ev, CancelAllSent):
        return ORDER_S.pack(ev.instrument_id, OrderCmd.CANCEL_ALL, 0, 0, ev.origin, 0, 0, 0.0, 0.0, ev.origin_seq, t)
    if isinstance(ev, SyncRequested):
        return ORDER_S.pack(0, OrderCmd.SYNC, 0, 0, OrderOrigin.RISK, 0, 0, 0.0, 0.0, 0, t)
    raise ValueError(f"{type(ev).__name__} carries no order")
