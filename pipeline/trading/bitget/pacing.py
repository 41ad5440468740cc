"""The feed connection's timing policies, sans-I/O (the caller reads the clock and sleeps):
``Backoff`` (delays between connection attempts), ``ResyncThrottle`` (resyncs per subscription in a
sliding window) and ``SendPacer`` (outgoing frames per sliding second)."""

from __future__ import annotations

import collections
import random

from pipeline.runtime.errors import ConfigError

RESYNC_WINDOW_NS = 60_000_000_000


class Backoff:
    """Exponential back-off with jitter: the n-th consecutive delay is ``d = min(initial * 2**(n-1),
    max)`` drawn uniformly in ``[d * (1 - jitter), d]`` from ``rng``. Pure (the caller sleeps).

    Raises:
        ConfigError: not ``0 < initial_ms <= max_ms`` and ``0 <= jitter <= 1``.
    """

    def __init__(self, initial_ms: float, max_ms: float, jitter: float, rng: random.Random):
        if not (initial_ms > 0 and max_ms >= initial_ms and 0.0 <= jitter <= 1.0):
            raise ConfigError(f"back-off needs 0 < initial <= max and 0 <= jitter <= 1, got "
                              f"{initial_ms}, {max_ms}, {jitter}")
        self.initial_ms = float(initial_ms)
        self.max_ms = float(max_ms)
        self.jitter = float(jitter)
        self.rng = rng
        self.attempt = 0

    def next_delay_s(self) -> float:
        """The delay before the next attempt, in seconds; each call counts one more failure."""
        d = min(self.initial_ms * (2.0 ** min(self.attempt, 62)), self.max_ms)
        self.attempt += 1
        return d * (1.0 - self.jitter * self.rng.random()) / 1000.0

    def reset(self) -> None:
        """A connection worked: the next delay starts from ``initial`` again."""
        self.attempt = 0


class ResyncThrottle:
    """At most ``max_per_window`` grants per key in any ``window_ns`` (sliding window). Pure."""

    def __init__(self, max_per_window: int, window_ns: int = RESYNC_WINDOW_NS):
        self.max = int(max_per_window)
        self.window_ns = int(window_ns)
        self._times: dict[object, collections.deque] = {}

    def allow(self, key, now_ns: int) -> bool:
        """Grant (and count) one more for ``key`` at ``now_ns``, or refuse."""
        q = self._times.get(key)
        if q is None:
            q = self._times[key] = collections.deque()
        while q and now_ns - q[0] >= self.window_ns:
            q.popleft()
        if len(q) >= self.max:
            return False
        q.append(now_ns)
        return True


class SendPacer:
    """At most ``max_per_s`` frames in any sliding second. Pure: the caller waits ``wait_s(now)``
    seconds while it is positive, then sends and calls ``sent(now)``."""

    def __init__(self, max_per_s: float):
        self.max_per_s = max_per_s
        self._times: collections.deque = collections.deque()

    def wait_s(self, now_s: float) -> float:
        """Seconds to wait before the next frame at ``now_s`` (monotonic seconds); 0.0: send now."""
        times = self._times
        while len(times) >= self.max_per_s:
            age = now_s - times[0]
            if age < 1.0:
                return 1.0 - age
            times.popleft()
        return 0.0

    def sent(self, now_s: float) -> None:
        """Count a frame sent at ``now_s``."""
        self._times.append(now_s)
