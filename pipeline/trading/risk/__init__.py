"""The risk gateway, sans I/O: the only road to the order sender (``procs.risk`` is its shell).

One job a module, each using only the ones listed before it:

- ``limits``: ``RiskLimits`` (the stage's ``params.limits``), its decoding, the per-instrument specs;
- ``ledger``: positions, open orders, fills, PnL (``Ledger``, ``Book``, ``StateReport``);
- ``checks``: the pre-trade checks of one new order (``PreTradeChecks.check``, ``DenyReason``);
- ``events``: the decision events and ``encode_order`` (the ORDER payload of one that carries an order);
- ``state``: ACTIVE / REDUCING / HALTED and CONTROL (``TradingStateMachine``);
- ``volatility``: the realized volatility of the mid on a time grid, annualized (``RealizedVol``);
- ``execution``: the depth-aware parent order's states and transition table, the liquidity gate over a
  SIGNAL's depth block, the planner's params (``ExecutionParams``) and risk_aversion's bounds;
- ``planner``: INSTRUCTION / LEAN SIGNAL -> checked child orders (reduce-only where they only reduce a
  perpetual's position), reprice and cancel (``Planner``);
- ``depth``: the depth-aware planner over the simple one: each live plan a parent order run by
  ``execution``'s machine, priced with ``volatility`` (``DepthPlanner``);
- ``gateway``: ``RiskGateway``, the start, EXEC_REPORTs and SIGNALs over all of them.

The names below are the package's public API (``procs.risk``, ``bench.risk`` and the tests use them).
"""

from pipeline.trading.risk.checks import DenyReason, TradingState
from pipeline.trading.risk.events import (CancelAllSent, CancelSent, EmergencyReceived, Event, FillApplied,
                                          InstructionExpired, InstructionPlanned, MessageRejected, OrderApproved,
                                          OrderDenied, PositionMismatch, RejectReceived, StateChanged, Synced,
                                          SyncRequested, SyncStarted, VenueAccountChanged, encode_order)
from pipeline.trading.risk.gateway import RiskGateway
from pipeline.trading.risk.ledger import Book
from pipeline.trading.risk.limits import InstrumentSpec, RiskLimits, decode_limits, resolve_limits

__all__ = ["Book", "CancelAllSent", "CancelSent", "DenyReason", "EmergencyReceived", "Event", "FillApplied",
           "InstructionExpired", "InstructionPlanned", "InstrumentSpec", "MessageRejected", "OrderApproved",
           "OrderDenied", "PositionMismatch", "RejectReceived", "RiskGateway", "RiskLimits", "StateChanged", "Synced",
           "SyncRequested", "SyncStarted", "TradingState", "VenueAccountChanged", "decode_limits", "encode_order",
           "resolve_limits"]
