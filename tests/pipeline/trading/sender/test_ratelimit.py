"""The sender's pace (pipeline/trading/sender/ratelimit.py): the token bucket, the per-endpoint budget and the
retry back-off."""

from __future__ import annotations

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.sender.ratelimit import EndpointBudget, TokenBucket, backoff_ns
from pipeline.venue.limits import DOCUMENTED_PER_S, RouteLimits


def test_token_bucket():
    b = TokenBucket(10, 10, 0)
    assert sum(b.take(0) for _ in range(20)) == 10
    assert b.ready_at(0) == 100_000_001 and not b.take(50_000_000) and b.take(100_000_000)


def test_a_rate_that_is_not_positive_is_a_config_error():
    with pytest.raises(ConfigError, match="rate_limit_per_s"):
        TokenBucket(0, 1, 0)


def test_the_back_off_doubles_per_attempt_up_to_one_second():
    assert [backoff_ns(20, n) // 1_000_000 for n in (1, 2, 3, 5, 6, 50)] == [40, 80, 160, 640, 1000, 1000]


# ------------------------------------------------------------------------------------ the endpoint budget
FILLS, INFO, ORDERS = "/api/v2/spot/trade/fills", "/api/v2/spot/account/info", "/api/v2/spot/trade/unfilled-orders"


@pytest.mark.parametrize("path, scale, burst, next_ns", [
    (FILLS, 1.0, 5, 125_000_001),  # 10/s documented: 8/s spent, 5 banked
    (ORDERS, 1.0, 10, 62_500_001),  # 20/s: 16/s, 10
    (INFO, 1.0, 1, 1_250_000_001),  # 1/s: 0.8/s, 1
    (INFO, 3.0, 1, 416_666_667),  # a venue with its limits raised threefold: 2.4/s, 1
    (FILLS, 100.0, 500, 1_250_001),
])
def test_the_budget_spends_headroom_of_each_documented_rate_and_banks_half_its_burst(path, scale, burst, next_ns):
    b = EndpointBudget(scale, 0)
    assert sum(b.take(path, 0) for _ in range(2 * burst + 2)) == burst
    assert b.ready_at(path, 0) == next_ns and not b.take(path, next_ns - 2) and b.take(path, next_ns)


def test_a_path_without_a_documented_rate_is_not_paced_and_a_429_empties_the_endpoints_bank():
    b = EndpointBudget(1.0, 0)
    assert all(b.take("/not/documented", 0) for _ in range(1000))
    assert b.ready_at("/not/documented", 7) == 7
    assert b.take(FILLS, 0)
    b.drain(FILLS, 0)
    assert not b.take(FILLS, 0) and b.ready_at(FILLS, 0) == 125_000_001
    b.drain("/not/paced", 0)  # nothing to empty


@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_a_scale_that_is_not_positive_is_a_config_error_naming_it(scale):
    with pytest.raises(ConfigError, match="endpoint_rate_scale"):
        EndpointBudget(scale, 0)


@pytest.mark.parametrize("path", sorted(DOCUMENTED_PER_S))
@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_a_client_spending_its_whole_budget_is_never_refused_by_the_venues_limit(path, scale):
    """The client sends each request the moment its token is due, for 20 s; the venue
    (``RouteLimits`` at the same scale) counts each after a delay that alternates between none and a
    fifth of the documented interval (the worst: consecutive requests pulled together): none is refused."""
    b, venue = EndpointBudget(scale, 0), RouteLimits(scale)
    jitter_ns = int(0.2e9 / (DOCUMENTED_PER_S[path] * scale))
    t, refused, sent = 1, 0, 0
    while t < 20 * 10**9:
        if b.take(path, t):
            sent += 1
            refused += not venue.allow(path, "uid", t + (jitter_ns if sent % 2 else 0))
        else:
            t = b.ready_at(path, t)
    assert refused == 0 and sent >= 0.8 * 20 * DOCUMENTED_PER_S[path] * scale


def test_a_rate_that_is_not_positive_is_a_config_error_naming_its_endpoint():
    with pytest.raises(ConfigError, match="/a/path"):
        EndpointBudget(1.0, 0, {"/b/path": 1.0, "/a/path": 0.0})
    assert EndpointBudget(1.0, 0, {"/b/path": 2.0}).take("/b/path", 0)
