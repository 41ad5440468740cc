"""Trading fees of the paper venue's matching engine (sans-I/O, pure): a maker / taker fee schedule
in basis points, the fee of one fill, and Bitget's published standard-tier rates as named schedules.

A fill's fee is charged in the symbol's quote coin (USDT for the USDT-quoted symbols)::

    fee = price * size * bps / 10_000        bps = maker_bps for a maker fill, taker_bps for a taker

computed exactly in ``decimal.Decimal`` (no rounding to the fee coin's precision, unlike the real
venue). A positive fee is paid; a negative
``maker_bps`` is a maker rebate (the fee is then negative: received).

Bitget's standard (non-VIP, no BGB discount) rates, as Bitget's help centre publishes them (the
URLs are the regional copies that were read; the numbers are the help-centre article ids):

- Spot: maker 0.1 %, taker 0.1 % (10 / 10 bps). "Spot Trading Fees, Limits, and Rules", article
  12560603820584 (2024-12-30): "a base fee rate of 0.1%" for maker and for taker trades,
  https://www.bitgetapp.com/ph/support/articles/12560603820584 ; the same Non-VIP row
  (0.1 % / 0.1 %) in the spot fee structure update, article 12560603776282,
  https://www.bitget.com/vi/support/articles/12560603776282 . Paying in BGB takes 20 % off (0.08 %):
  not modelled.
- USDT-M futures: maker 0.02 %, taker 0.06 % (2 / 6 bps). "Futures Trading Fees, Limits, and
  Rules", article 12560603820668 (2025-01-16): "The standard maker fee is 0.02%", "The standard
  taker fee is 0.06%", https://bitget.style/support/articles/12560603820668 ; the worked example of
  "Bitget Futures: Fee Schedule and Calculation" (article 4552737163033) uses the same rates.

The pipeline trades Bitget v2 spot (``/api/v2/spot/trade/...``), so the evaluation's default is
``BITGET_SPOT_STANDARD``.
"""

from __future__ import annotations

import math
from decimal import Decimal

import msgspec

__all__ = ["BITGET_SPOT_STANDARD", "BITGET_USDT_FUTURES_STANDARD", "DEFAULT_EVALUATION_FEES", "LIQUIDITIES",
           "MAX_FEE_BPS", "FeeSchedule", "fee_quote"]

#: the two liquidity flags of a fill
LIQUIDITIES = ("maker", "taker")
#: the largest |bps| a schedule may hold (100 %)
MAX_FEE_BPS = 10_000.0
_BPS = Decimal(10_000)


class FeeSchedule(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Maker and taker fees in basis points of a fill's notional (price * size), charged in the
    quote coin. ``maker_bps`` may be negative (a rebate); ``taker_bps`` may not.

    Raises (at construction, and as ``msgspec.ValidationError`` when decoded):
        ValueError: a rate that is not a finite number, |rate| above ``MAX_FEE_BPS``, or a negative
            taker rate.
    """

    maker_bps: float
    taker_bps: float

    def __post_init__(self) -> None:
        for name in ("maker_bps", "taker_bps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or abs(v) > MAX_FEE_BPS:
                raise ValueError(f"{name} must be a finite number of bps within +-{MAX_FEE_BPS:g}, got {v!r}")
        if self.taker_bps < 0:
            raise ValueError(f"taker_bps must be >= 0, got {self.taker_bps!r}")

    def bps(self, liquidity: str) -> float:
        """The rate of a ``"maker"`` or ``"taker"`` fill.

        Raises:
            ValueError: another liquidity flag.
        """
        if liquidity == "maker":
            return self.maker_bps
        if liquidity == "taker":
            return self.taker_bps
        raise ValueError(f"liquidity must be 'maker' or 'taker', got {str(liquidity)[:16]!r}")


def fee_quote(schedule: FeeSchedule | None, price: Decimal, size: Decimal, liquidity: str) -> Decimal:
    """The quote-coin fee of one fill (see the module docstring); 0 when ``schedule`` is None.
    The rate enters as the shortest decimal of its float (``10.0`` -> ``Decimal("10.0")``), so a
    hand-computed fee matches exactly.

    Raises:
        ValueError: a liquidity flag other than "maker" / "taker" (with a schedule).
    """
    if schedule is None:
        return Decimal(0)
    return price * size * Decimal(repr(float(schedule.bps(liquidity)))) / _BPS


#: Bitget spot, standard tier (non-VIP, no BGB discount): 0.1 % maker, 0.1 % taker (sources above)
BITGET_SPOT_STANDARD = FeeSchedule(maker_bps=10.0, taker_bps=10.0)
#: Bitget USDT-M futures, standard tier: 0.02 % maker, 0.06 % taker (sources above)
BITGET_USDT_FUTURES_STANDARD = FeeSchedule(maker_bps=2.0, taker_bps=6.0)
#: what the evaluation charges unless told otherwise: the pipeline trades Bitget spot
DEFAULT_EVALUATION_FEES = BITGET_SPOT_STANDARD
