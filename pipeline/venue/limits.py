"""The paper venue's request rate limits (sans-I/O): a token bucket per (endpoint, key), at the rate
the exchange documents for each endpoint ("Frequency limit: N times/1s", per UID for the signed
routes, per IP for the public ones); over it the API answers HTTP 429 with code "429" (the
exchange's "Too Many Requests").

``DOCUMENTED_PER_S`` holds the documented rates of the routes the venue serves (a route missing from
it is not limited). ``RouteLimits(scale)`` multiplies every rate by ``scale`` (the venue's
``rate_limit_per_s`` param over the documented place-order rate of 10: 1 by default, the
exchange's own figures; a test venue may raise them all at once). Each bucket holds at most one
second's worth of tokens (at least one).
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.venue.errors import VenueError

SPOT = "/api/v2/spot/"
MIX = "/api/v2/mix/"
#: path -> requests a second, as the exchange documents them (Bitget v2 API reference, each
#: endpoint's "Frequency limit")
DOCUMENTED_PER_S: dict[str, float] = {
    # public (per IP)
    "/api/v2/public/time": 20.0,
    SPOT + "public/coins": 3.0,
    SPOT + "public/symbols": 20.0,
    SPOT + "market/tickers": 20.0,
    SPOT + "market/orderbook": 20.0,
    SPOT + "market/merge-depth": 20.0,
    SPOT + "market/fills": 10.0,
    SPOT + "market/candles": 20.0,
    "/api/v2/margin/currencies": 10.0,
    MIX + "market/contracts": 20.0,
    MIX + "market/ticker": 20.0,
    MIX + "market/tickers": 20.0,
    MIX + "market/merge-depth": 20.0,
    MIX + "market/fills": 20.0,
    MIX + "market/candles": 20.0,
    # signed (per UID)
    SPOT + "trade/place-order": 10.0,
    SPOT + "trade/cancel-order": 10.0,
    SPOT + "trade/batch-orders": 5.0,
    SPOT + "trade/batch-cancel-order": 10.0,
    SPOT + "trade/cancel-symbol-order": 5.0,
    SPOT + "trade/orderInfo": 20.0,
    SPOT + "trade/unfilled-orders": 20.0,
    SPOT + "trade/fills": 10.0,
    SPOT + "account/info": 1.0,
    SPOT + "account/assets": 10.0,
    MIX + "order/place-order": 10.0,
    MIX + "order/cancel-order": 10.0,
    MIX + "order/batch-cancel-orders": 10.0,
    MIX + "order/cancel-all-orders": 10.0,
    MIX + "order/detail": 10.0,
    MIX + "order/orders-pending": 10.0,
    MIX + "order/fills": 10.0,
    MIX + "position/all-position": 5.0,
    MIX + "account/accounts": 10.0,
}
#: the documented place-order rate: the venue's ``rate_limit_per_s`` over it is the scale
PLACE_ORDER_PER_S = DOCUMENTED_PER_S[SPOT + "trade/place-order"]


class TokenBucket:
    """Per-key token buckets: ``rate_per_s`` tokens a second, at most ``burst`` (default: one
    second's worth, at least one) held. ``allow(key, now_ns)`` takes one token, False when there is
    none."""

    def __init__(self, rate_per_s: float, burst: float | None = None) -> None:
        """Raises:
        VenueError: a rate that is not positive.
        """
        if not rate_per_s > 0:
            raise VenueError(f"rate_limit_per_s must be > 0, got {rate_per_s}")
        self.rate_per_ns = float(rate_per_s) / 1e9
        self.burst = float(burst if burst is not None else max(rate_per_s, 1.0))
        self._state: dict[str, tuple[float, int]] = {}

    def allow(self, key: str, now_ns: int) -> bool:
        tokens, last = self._state.get(key, (self.burst, now_ns))
        tokens = min(self.burst, tokens + (now_ns - last) * self.rate_per_ns)
        if tokens >= 1.0:
            self._state[key] = (tokens - 1.0, now_ns)
            return True
        self._state[key] = (tokens, now_ns)
        return False


class RouteLimits:
    """One ``TokenBucket`` per route of ``rates`` (default ``DOCUMENTED_PER_S``), each at its rate
    times ``scale``."""

    def __init__(self, scale: float = 1.0, rates: Mapping[str, float] | None = None) -> None:
        """Raises:
        VenueError: a scale or a rate that is not positive.
        """
        if not scale > 0:
            raise VenueError(f"the rate limit scale must be > 0, got {scale}")
        self.scale = float(scale)
        self.rates = dict(DOCUMENTED_PER_S if rates is None else rates)
        self._buckets = {path: TokenBucket(rate * self.scale) for path, rate in self.rates.items()}

    def allow(self, path: str, key: str, now_ns: int) -> bool:
        """Take a token of ``path``'s bucket for ``key``; True for a route without a limit."""
        bucket = self._buckets.get(path)
        return bucket is None or bucket.allow(key, now_ns)

    def per_s(self, path: str) -> float | None:
        """The requests a second ``path`` is allowed (None: not limited)."""
        rate = self.rates.get(path)
        return None if rate is None else rate * self.scale
