"""The sender's pace: the client-side rate limit (a token bucket) and the retry back-off. Pure (times in
ns given by the caller)."""

from __future__ import annotations

from pipeline.runtime.errors import ConfigError


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

    def ready_at(self, now_ns: int) -> int:
        """When the next token will be there (``now_ns`` when one is)."""
        self._refill(now_ns)
        return now_ns if self.tokens >= 1.0 else now_ns + int((1.0 - self.tokens) / self.rate * 1e9) + 1


def backoff_ns(retry_backoff_ms: int, attempt: int) -> int:
    """The wait before retry ``attempt`` (1, 2...): ``retry_backoff_ms * 2**attempt``, at most 1 s."""
    return min(retry_backoff_ms * (2 ** min(attempt, 20)), 1000) * 1_000_000
