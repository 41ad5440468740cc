"""The feed connection's timing policies: reconnect back-off, the resync throttle, the send pacer."""

from __future__ import annotations

import random

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.bitget.pacing import Backoff, ResyncThrottle, SendPacer


def test_backoff_doubles_up_to_the_cap_with_seeded_jitter_and_resets():
    a = Backoff(100, 1_000, 0.2, random.Random(42))
    b = Backoff(100, 1_000, 0.2, random.Random(42))
    delays = [a.next_delay_s() for _ in range(7)]
    assert delays == [b.next_delay_s() for _ in range(7)], "same seed, same delays"
    for d, nominal in zip(delays, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]):
        assert nominal * 0.8 <= d <= nominal
    a.reset()
    assert 0.08 <= a.next_delay_s() <= 0.1
    with pytest.raises(ConfigError):
        Backoff(100, 50, 0.2, random.Random())


def test_resync_throttle_allows_n_per_sliding_minute_per_key():
    t = ResyncThrottle(2)
    s = 1_000_000_000
    assert t.allow("BTC", 0) and t.allow("BTC", 10 * s)
    assert not t.allow("BTC", 30 * s), "third in the same minute"
    assert t.allow("ETH", 30 * s), "per key"
    assert not t.allow("BTC", 59 * s)
    assert t.allow("BTC", 60 * s), "the first grant left the window"


def test_send_pacer_allows_n_frames_in_any_sliding_second():
    p = SendPacer(2)
    assert p.wait_s(0.0) == 0.0
    p.sent(0.0)
    assert p.wait_s(0.25) == 0.0
    p.sent(0.25)
    assert p.wait_s(0.5) == pytest.approx(0.5), "a third within the second waits for the first to age out"
    assert p.wait_s(1.0) == 0.0, "the first left the window"
    p.sent(1.0)
    assert p.wait_s(1.0) == pytest.approx(0.25)
