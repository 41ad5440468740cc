"""Depth-aware execution (design document 000 section 3.3), sans I/O: the parent order's states, its
transition table, the liquidity gate over a SIGNAL's depth block, and the planner's parameters.

A *parent* is one live plan of the gateway (an INSTRUCTION's, or a LEAN SIGNAL's): the size it still
wants to trade, placed as child limit orders. Its states (``ParentState``)::

    WAIT_LIQUIDITY --LIQUIDITY_OK / SUBMIT--> SUBMITTED --PART_FILL--> PARTIAL_FILLED --ALL_FILLED--> FILLED
          ^                                       |  |                     |
          |                                       |  +--ALL_FILLED-------> FILLED
          +-------- MOVED / CANCEL_AND_REPRICE ---+---------------------+   (moved > reprice_sigmas)
    WAIT_LIQUIDITY / SUBMITTED / PARTIAL_FILLED --TTL_PASSED--> EXPIRED (working children cancelled)
    WAIT_LIQUIDITY / SUBMITTED / PARTIAL_FILLED --CANCEL--> CANCELLED (whoever cancels the parent cancels
                                                  what it chooses: no act of the machine)
    SUBMITTED / PARTIAL_FILLED --CHILDREN_GONE--> CANCELLED (the venue rejected or cancelled what worked)

``transition(state, trigger)`` is the whole table (``TRANSITIONS``): a pure function returning the new
state and what to do (``Act``); a trigger a state does not list leaves it unchanged with ``Act.NONE``
(FILLED, CANCELLED and EXPIRED list none: terminal).

Reading of the document's rules, as implemented:

- WaitForLiquidity: submit only when the opposite side's displayed volume *within the limit price*
  exceeds ``liquidity_ratio`` (1.2) x the target size. Taken literally, a passive buy's limit lies
  below the best ask, so no ask is "within" it and the gate would never open. Read for a passive
  order as: the opposite side's displayed volume within the limit price's distance from the mid,
  mirrored (a buy at ``mid - d`` counts the asks at ``<= mid + d``, a sell at ``mid + d`` the bids at
  ``>= mid - d``): the resting counter-liquidity between the mid and our price's mirror image, which
  is what the flow that fills us has to come through. The offset ``d`` is at least half the spread,
  so the touch of the other side always counts. The target size is what the parent would submit
  now (its remaining wanted size, all children together). Depth beyond the SIGNAL's 15 levels is
  not seen: the volume counted is then a lower bound (the gate errs on waiting).
- PartialFilled: cancel and reprice when the mid moved more than ``reprice_sigmas`` (2) sigma since
  the child was submitted, else hold; the same rule holds for SUBMITTED (an unfilled order the
  price left behind). Reprice = the children are cancelled and the parent goes back to
  WAIT_LIQUIDITY, whose gate is taken again at the new price at once (so a reprice that meets the
  gate is cancel + new in one decision, as the simple planner does).
- Expired: the parent's time-to-live passed; its working children are cancelled.
- Cancelled: a CANCEL instruction, a newer plan of the instrument, HALT / kill switch / EMERGENCY, a
  child denied by the pre-trade checks, or every child gone at the venue without a fill of all.
"""

from __future__ import annotations

import enum
import struct
from typing import Annotated, Literal

import msgspec

from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import (OFF_DEPTH_ASK_DIST, OFF_DEPTH_ASK_SZ, OFF_DEPTH_BID_DIST, OFF_DEPTH_BID_SZ,
                                       SIGNAL_DEPTH_LEVELS, Side)
from pipeline.trading.risk.limits import RISK_AVERSION_MAX, RISK_AVERSION_MIN


class ParentState(enum.IntEnum):
    """A parent order's state (module docstring)."""

    WAIT_LIQUIDITY = 1
    SUBMITTED = 2
    PARTIAL_FILLED = 3
    FILLED = 4
    CANCELLED = 5
    EXPIRED = 6


#: the short names ``status`` shows
SHORT = {ParentState.WAIT_LIQUIDITY: "WAIT", ParentState.SUBMITTED: "SUBM", ParentState.PARTIAL_FILLED: "PART",
         ParentState.FILLED: "FILL", ParentState.CANCELLED: "CANC", ParentState.EXPIRED: "EXPD"}
TERMINAL = frozenset((ParentState.FILLED, ParentState.CANCELLED, ParentState.EXPIRED))


class Trigger(enum.IntEnum):
    """What happened to a parent."""

    LIQUIDITY_OK = 1  # the gate holds at the current price
    LIQUIDITY_SHORT = 2  # it does not
    PART_FILL = 3  # a child filled, the parent still wants more
    ALL_FILLED = 4  # nothing left to trade
    MOVED = 5  # the mid moved more than reprice_sigmas * sigma since a child was submitted
    HELD = 6  # it did not
    TTL_PASSED = 7
    CANCEL = 8  # cancelled from outside (instruction, newer plan, halt, emergency, denial)
    CHILDREN_GONE = 9  # every child ended at the venue (rejected / cancelled) without filling the parent


class Act(enum.IntEnum):
    """What the planner does on a transition."""

    NONE = 0
    SUBMIT = 1  # place the child orders
    CANCEL_AND_REPRICE = 2  # cancel the working children, then take the gate again at the new price
    CANCEL_CHILDREN = 3  # cancel the working children


_S, _T, _A = ParentState, Trigger, Act
#: (state, trigger) -> (new state, act); anything not listed: unchanged, no act
TRANSITIONS: dict[tuple[ParentState, Trigger], tuple[ParentState, Act]] = {
    (_S.WAIT_LIQUIDITY, _T.LIQUIDITY_OK): (_S.SUBMITTED, _A.SUBMIT),
    (_S.WAIT_LIQUIDITY, _T.LIQUIDITY_SHORT): (_S.WAIT_LIQUIDITY, _A.NONE),
    (_S.WAIT_LIQUIDITY, _T.ALL_FILLED): (_S.FILLED, _A.NONE),
    (_S.WAIT_LIQUIDITY, _T.TTL_PASSED): (_S.EXPIRED, _A.CANCEL_CHILDREN),
    (_S.WAIT_LIQUIDITY, _T.CANCEL): (_S.CANCELLED, _A.NONE),
    (_S.SUBMITTED, _T.PART_FILL): (_S.PARTIAL_FILLED, _A.NONE),
    (_S.SUBMITTED, _T.ALL_FILLED): (_S.FILLED, _A.NONE),
    (_S.SUBMITTED, _T.MOVED): (_S.WAIT_LIQUIDITY, _A.CANCEL_AND_REPRICE),
    (_S.SUBMITTED, _T.HELD): (_S.SUBMITTED, _A.NONE),
    (_S.SUBMITTED, _T.TTL_PASSED): (_S.EXPIRED, _A.CANCEL_CHILDREN),
    (_S.SUBMITTED, _T.CANCEL): (_S.CANCELLED, _A.NONE),
    (_S.SUBMITTED, _T.CHILDREN_GONE): (_S.CANCELLED, _A.NONE),
    (_S.PARTIAL_FILLED, _T.PART_FILL): (_S.PARTIAL_FILLED, _A.NONE),
    (_S.PARTIAL_FILLED, _T.ALL_FILLED): (_S.FILLED, _A.NONE),
    (_S.PARTIAL_FILLED, _T.MOVED): (_S.WAIT_LIQUIDITY, _A.CANCEL_AND_REPRICE),
    (_S.PARTIAL_FILLED, _T.HELD): (_S.PARTIAL_FILLED, _A.NONE),
    (_S.PARTIAL_FILLED, _T.TTL_PASSED): (_S.EXPIRED, _A.CANCEL_CHILDREN),
    (_S.PARTIAL_FILLED, _T.CANCEL): (_S.CANCELLED, _A.NONE),
    (_S.PARTIAL_FILLED, _T.CHILDREN_GONE): (_S.CANCELLED, _A.NONE),
}


def transition(state: ParentState, trigger: Trigger) -> tuple[ParentState, Act]:
    """The parent's next state and what to do (``TRANSITIONS``; unlisted: unchanged, ``Act.NONE``)."""
    return TRANSITIONS.get((state, trigger), (state, Act.NONE))


# ------------------------------------------------------------------------------------------ the gate
_LEVELS = struct.Struct(f"<{SIGNAL_DEPTH_LEVELS}f")


def displayed_within(depth: bytes, side: int, dist_ticks: float) -> float:
    """The opposite side's displayed volume (base units) within ``dist_ticks`` of the mid, from a
    SIGNAL's depth block (``depth``: the SIGNAL-with-depth payload, 296 bytes): for ``side`` BUY the
    asks at distance ``<= dist_ticks``, for SELL the bids. Levels of size 0 (past the book's) add 0; a
    negative or NaN size among the counted levels makes the whole block untrusted: 0.0 (the gate stays
    closed)."""
    d_off, s_off = (OFF_DEPTH_ASK_DIST, OFF_DEPTH_ASK_SZ) if side == Side.BUY else (OFF_DEPTH_BID_DIST,
                                                                                  OFF_DEPTH_BID_SZ)
    lim = dist_ticks + 1e-4  # f32 distances: a level exactly at the limit counts
    total = 0.0
    for d, s in zip(_LEVELS.unpack_from(depth, d_off), _LEVELS.unpack_from(depth, s_off)):
        if d > lim:
            break  # best first: the rest lie further out
        if not s >= 0.0:
            return 0.0
        total += s
    return total


def liquidity_ok(depth: bytes | None, side: int, dist_ticks: float, size: float, ratio: float) -> bool:
    """The WaitForLiquidity gate: displayed volume within the limit's distance > ``ratio`` x ``size``;
    False without depth (a SIGNAL of 56 bytes: the gate cannot be taken, so it waits)."""
    if depth is None:
        return False
    return displayed_within(depth, side, dist_ticks) > ratio * size


# ------------------------------------------------------------------------------------------ params
class ExecutionParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The risk stage's ``params.execution`` table: which planner runs and the depth-aware one's settings.

    ``planner``: ``"simple"`` (the default: the planner as it was, EWMA sigma of the per-SIGNAL move,
    no gate, no parent states) or ``"depth"`` (this module's states, the liquidity gate on the
    SIGNAL's depth, ``volatility.RealizedVol``). ``liquidity_ratio``: the gate's 1.2. ``vol_window_s``,
    ``vol_grid_ms``, ``vol_min_returns``: the estimator's window (the document's 5 minutes), grid step
    and warm-up. ``sigma_horizon_ms``: the horizon ``h`` of ``sigma_price`` (the offset's and the reprice
    threshold's sigma in price units: ``mid * vol * sqrt(h / year)``).
    """

    planner: Literal["simple", "depth"] = "simple"
    liquidity_ratio: Annotated[float, msgspec.Meta(gt=0)] = 1.2
    vol_window_s: Annotated[int, msgspec.Meta(ge=1)] = 300
    vol_grid_ms: Annotated[int, msgspec.Meta(ge=1)] = 1000
    vol_min_returns: Annotated[int, msgspec.Meta(ge=1)] = 30
    sigma_horizon_ms: Annotated[int, msgspec.Meta(ge=1)] = 1000


def decode_execution(table) -> ExecutionParams:
    """``ExecutionParams`` from the risk stage's ``params.execution`` table (None: the defaults).

    Raises:
        ConfigError: unknown field, wrong type, out-of-bounds value, or a window shorter than one grid
            step; the message names the field.
    """
    if table is None:
        return ExecutionParams()
    try:
        p = msgspec.convert(table, ExecutionParams)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"risk: params.execution: {exc}") from None
    if p.vol_window_s * 1000 < p.vol_grid_ms:
        raise ConfigError(f"risk: params.execution.vol_window_s: {p.vol_window_s} s is shorter than one grid step "
                          f"(vol_grid_ms {p.vol_grid_ms})")
    return p


def check_risk_aversion(value: float) -> None:
    """Design document 000 section 3.3 bounds risk_aversion to [0.1, 2.0]: ``decode_limits`` refuses a
    value outside; this holds a ``RiskLimits`` built in code (not decoded) to it too.

    Raises:
        ConfigError: outside, naming ``params.limits.risk_aversion``.
    """
    if not RISK_AVERSION_MIN <= value <= RISK_AVERSION_MAX:
        raise ConfigError(f"risk: params.limits.risk_aversion: must be in [{RISK_AVERSION_MIN}, {RISK_AVERSION_MAX}], "
                          f"got {value!r}")
