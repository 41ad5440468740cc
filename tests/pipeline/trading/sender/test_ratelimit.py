"""The sender's pace (pipeline/trading/sender/ratelimit.py): the token bucket and the retry back-off."""

from __future__ import annotations

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.sender.ratelimit import TokenBucket, backoff_ns


def test_token_bucket():
    b = TokenBucket(10, 10, 0)
    assert sum(b.take(0) for _ in range(20)) == 10
    assert b.ready_at(0) == 100_000_001 and not b.take(50_000_000) and b.take(100_000_000)


def test_a_rate_that_is_not_positive_is_a_config_error():
    with pytest.raises(ConfigError, match="rate_limit_per_s"):
        TokenBucket(0, 1, 0)


def test_the_back_off_doubles_per_attempt_up_to_one_second():
    assert [backoff_ns(20, n) // 1_000_000 for n in (1, 2, 3, 5, 6, 50)] == [40, 80, 160, 640, 1000, 1000]
