"""The risk gateway's limits: the typed ``RiskLimits`` table (the risk stage's ``params.limits``), its
decoding, and its resolution into one ``InstrumentSpec`` per configured instrument; the units and
tolerance the other risk modules compare with. ``decode_limits`` and ``resolve_limits`` raise
``ConfigError`` naming the bad field; nothing else here raises.

Products: a spot instrument's lot is its ``lot_size`` of the base coin; a USDT-FUTURES perpetual's lot
is one contract (``contract_size`` base units, which the config holds equal to ``lot_size``), so its
``*_lots`` limits and positions count contracts. Positions are kept in base units either way (the
contract size times the contracts), so notionals are price x base size for both (linear, USDT-margined).
Each spec names its base coin and its settlement currency (spot: the quote coin; a perpetual: its margin
coin): the net delta (``max_net_notional``) sums, per settlement currency, each base coin's net
position over every instrument of that base, spot and perpetual, so a long spot and a short perpetual
of one base net out, beside the gross limit that adds them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec

from pipeline.runtime.errors import ConfigError
from pipeline.trading.bitget.frames import base_coin

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
EPS = 1e-9  # relative tolerance of the tick / lot / limit comparisons

#: risk_aversion's bounds (design document 000 section 3.3)
RISK_AVERSION_MIN, RISK_AVERSION_MAX = 0.1, 2.0

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
    # per settlement currency: sum over base coins of |net position of the base (all its instruments,
    # spot and perpetual, with their open orders on the worse side)| x mid; a hedged pair nets out
    max_net_notional: Pos = 50_000.0
    max_open_orders: Annotated[int, msgspec.Meta(ge=1)] = 20
    max_orders_per_s: Annotated[int, msgspec.Meta(ge=1)] = 20
    max_notional_per_min: Pos = 200_000.0
    daily_loss_limit: Pos = 1_000.0
    emergency_cooldown_ms: Annotated[int, msgspec.Meta(ge=0)] = 2_000
    max_price_decimals: Annotated[int, msgspec.Meta(ge=0, le=12)] = 8  # precision the venue accepts
    max_size_decimals: Annotated[int, msgspec.Meta(ge=0, le=12)] = 8
    # planner
    # the offset's volatility weight, in [0.1, 2.0] (design document 000 section 3.3)
    risk_aversion: Annotated[float, msgspec.Meta(ge=RISK_AVERSION_MIN, le=RISK_AVERSION_MAX)] = 1.0
    sigma_alpha: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.05
    reprice_sigmas: Pos = 2.0
    tif: Literal["GTC", "POST_ONLY", "IOC"] = "POST_ONLY"
    # fast-path quoting: a LEAN_BUY / LEAN_SELL SIGNAL targets +/- lean_lots for lean_ttl_ms, unless an
    # LLM instruction's plan is live (the slower, better-informed advice wins); 0 = the fast path only cancels
    lean_lots: Annotated[int, msgspec.Meta(ge=0)] = 0
    lean_ttl_ms: Annotated[int, msgspec.Meta(ge=1)] = 1_000
    # ticks added to a LEAN order's distance from the mid (its plan's offset_ticks; reprices keep it)
    lean_offset_ticks: Annotated[int, msgspec.Meta(ge=0)] = 0


def decode_limits(table: Any) -> RiskLimits:
    """``RiskLimits`` from a params table (None: the defaults).

    Raises:
        ConfigError: unknown field, wrong type or out-of-bounds value; the message names the field
            (``risk: params.limits.risk_aversion: Expected `float` <= 2.0``; an unknown one in its text).
    """
    if table is None:
        return RiskLimits()
    try:
        return msgspec.convert(table, RiskLimits)
    except msgspec.ValidationError as exc:
        why, _, where = str(exc).rpartition(" - at `$.")
        if why:
            raise ConfigError(f"risk: params.limits.{where.rstrip('`')}: {why}") from None
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


def decimals_of(step: float) -> int:
    """Decimals needed to write ``step`` exactly (0.1 -> 1, 0.25 -> 2, 5 -> 0), at most 12."""
    for d in range(13):
        if abs(round(step, d) - step) <= step * 1e-9:
            return d
    return 12


class InstrumentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An instrument with its per-instrument limits resolved. ``product``: "SPOT" or "USDT-FUTURES";
    ``contract``: base units per contract of a perpetual (its lot), 0 for spot; ``base``: the base coin
    ("" when the symbol names none); ``settle``: the settlement currency of its P&L and notional."""

    id: int
    symbol: str
    tick: float
    lot: float
    allowed: bool
    max_position_lots: float
    max_order_lots: float
    max_child_lots: float
    product: str = "SPOT"
    contract: float = 0.0
    base: str = ""
    settle: str = "USDT"

    @property
    def perpetual(self) -> bool:
        return self.product == PERP


PERP = "USDT-FUTURES"


def _product_fields(i) -> dict:
    """``product``, ``contract``, ``base``, ``settle`` of a config instrument (spot when it names no
    product type).

    Raises:
        ConfigError: an unknown product type, or a perpetual whose contract size is not > 0.
    """
    product = getattr(i, "product_type", "SPOT") or "SPOT"
    if product not in ("SPOT", PERP):
        raise ConfigError(f"risk: instrument {i.symbol}: unknown product type {product!r}")
    try:
        base = base_coin(i.symbol)
    except ValueError:
        base = ""
    if product == PERP:
        contract = float(getattr(i, "contract_size", 0.0) or 0.0)
        if not (math.isfinite(contract) and contract > 0):
            raise ConfigError(f"risk: instrument {i.symbol}: contract_size must be > 0, got {contract!r}")
        return {"product": PERP, "contract": contract, "base": base, "settle": getattr(i, "margin_coin", "USDT")}
    quote = i.symbol[len(base):] if base else ""
    return {"product": "SPOT", "contract": 0.0, "base": base, "settle": quote or "USDT"}


def resolve_limits(instruments, limits: RiskLimits) -> dict[int, InstrumentSpec]:
    """Per-instrument specs from config instruments (anything with id, symbol, tick_size, lot_size;
    ``product_type``, ``contract_size``, ``margin_coin`` when it has them).

    Raises:
        ConfigError: a per-instrument table lacks an instrument, ``allowed`` names an unknown symbol,
            an unknown product type, or a perpetual's contract size is not > 0.
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
            max_child_lots=_per(limits.max_child_lots, i.symbol, "max_child_lots"), **_product_fields(i))
    return out
