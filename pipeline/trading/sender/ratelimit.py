"""The sender's pace: the client-side rate limit (a token bucket), the per-endpoint budget and the
retry back-off. Pure (times in ns given by the caller)."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.runtime.errors import ConfigError
from pipeline.venue.limits import DOCUMENTED_PER_S

#: the share of an endpoint's documented rate the budget spends: the rest absorbs the jitter between
#: when a request leaves and when the venue counts it (an interval that shrinks on the way)
HEADROOM = 0.8
#: the share of the venue's burst (one second's worth, at least one) the budget banks
BURST_SHARE = 0.5


class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` banked, full at ``now_ns``.

    Raises:
        ConfigError: ``rate_per_s`` is not > 0 or ``burst`` is under 1.
    """

    __slots__ = ("rate", "burst", "tokens", "t")

    def __init__(self, rate_per_s: float, burst: float, now_ns: int):
        if rate_per_s <= 0 or burst < 1:
            raise ConfigError(f"sender: rate_limit_per_s must be > 0 (got {rate_per_s})")
        self.rate = float(rate_per_s)
        self.burst = float(burst)
        self.tokens = float(burst)
        self.t = now_ns  # when ``tokens`` was last brought up to date

    def _refill(self, now_ns: int) -> None:
        if now_ns > self.t:
            self.tokens = min(self.burst, self.tokens + (now_ns - self.t) * self.rate / 1e9)
            self.t = now_ns

    def take(self, now_ns: int) -> bool:
        """Spend one token if there is one; False when there is none."""
        self._refill(now_ns)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def empty(self, now_ns: int) -> None:
        """Spend whatever is banked: the next token comes a full interval from ``now_ns``."""
        self._refill(now_ns)
        self.tokens = min(self.tokens, 0.0)

    def ready_at(self, now_ns: int) -> int:
        """When the next token will be there (``now_ns`` when one is)."""
        self._refill(now_ns)
        return now_ns if self.tokens >= 1.0 else now_ns + int((1.0 - self.tokens) / self.rate * 1e9) + 1


def backoff_ns(retry_backoff_ms: int, attempt: int) -> int:
    """The wait before retry ``attempt`` (1, 2...): ``retry_backoff_ms * 2**attempt``, at most 1 s."""
    return min(retry_backoff_ms * (2 ** min(attempt, 20)), 1000) * 1_000_000


class EndpointBudget:
    """The client-side budget per endpoint: a ``TokenBucket`` per path of ``rates`` (requests a second;
    default ``DOCUMENTED_PER_S``, the exchange's documented per-endpoint limits), each at its rate times
    ``scale`` times ``HEADROOM``, banking ``BURST_SHARE`` of the venue's burst (at least one token).
    A path without a rate is not paced. ``scale`` mirrors the venue's (its ``rate_limit_per_s`` / 10).

    Raises:
        ConfigError: ``scale`` (named ``endpoint_rate_scale``) or a rate (named by its path) not > 0.
    """

    __slots__ = ("buckets",)

    def __init__(self, scale: float, now_ns: int, rates: Mapping[str, float] | None = None):
        if not scale > 0:
            raise ConfigError(f"sender: endpoint_rate_scale must be > 0 (got {scale})")
        table = DOCUMENTED_PER_S if rates is None else rates
        for path, rate in table.items():
            if not rate > 0:
                raise ConfigError(f"sender: the rate of {path} must be > 0 (got {rate})")
        self.buckets: dict[str, TokenBucket] = {
            path: TokenBucket(rate * scale * HEADROOM, max(1.0, int(max(rate * scale, 1.0) * BURST_SHARE)), now_ns)
            for path, rate in table.items()}

    def take(self, path: str, now_ns: int) -> bool:
        """Spend one of ``path``'s tokens if there is one (True); True for a path not paced."""
        bucket = self.buckets.get(path)
        return bucket is None or bucket.take(now_ns)

    def ready_at(self, path: str, now_ns: int) -> int:
        """When ``path``'s next token will be there (``now_ns`` when one is, or it is not paced)."""
        bucket = self.buckets.get(path)
        return now_ns if bucket is None else bucket.ready_at(now_ns)

    def drain(self, path: str, now_ns: int) -> None:
        """The venue answered ``path`` 429: spend what is banked, so the next request waits a full
        interval."""
        bucket = self.buckets.get(path)
        if bucket is not None:
            bucket.empty(now_ns)
