"""The market-data server's fault injector (sans-I/O): the switches, their validation and their
counters. ``pipeline.venue.server.VenueServer`` consults one ``FaultInjector`` for every outgoing
frame (drop it? when is it due?) and for every published unit (is a timed fault due?), and performs
what it says on its connections and market; no socket, loop or clock here.

Switches (``FaultParams`` at construction; the injector's setters while running):

- ``delay_ms``: every outgoing frame (pongs and acks too) leaves ``delay_ms`` later than it was
  queued, order kept (``DelayFault``).
- ``delay_jitter_ms``: with ``ms`` > 0, each outgoing frame's extra delay is drawn from a Gaussian
  N(``delay_ms``, ``ms``) clipped to [0, ``MAX_JITTER_DELAY_MS``] ms (seeded by ``seed``) instead of
  the fixed ``delay_ms``. Order is kept per connection: a frame is never due before the frame
  queued ahead of it (due = max(now + draw, previous due)). Turning it on counts once in
  ``faults_injected`` (at construction too); each jittered frame counts in ``jitter_frames``.
- ``drop_prob``: each data push to each client is dropped with probability ``p`` (seeded by
  ``seed``; the server never asks for acks, errors and pongs); each drop counts in
  ``frames_dropped``.
- Timed faults, ``disconnect_every_s`` / ``gap_every_s`` / ``bad_checksum_every_s`` (0 = off;
  ``set_timed_faults`` changes them while running): every that many seconds of MARKET time
  (``timed_due(market_ms)``, asked before each published unit, so the unit due at the fault's time
  already sees it) a ``TimedFault`` flag says: cut every connection, make the next books update of
  every instrument step its seq back (``GAP_SEQ``: a sequence fault a client must detect), or make it
  carry a wrong checksum. When several
  periods passed at once (a late loop) the fault fires once and the missed periods are skipped
  (``FaultTimer``). A source clock that goes back (a looping replay starting again) keeps the fault
  clock counting forward.

Counting: ``count(counter)`` adds one to ``faults_injected`` and to ``counter`` (``disconnects``,
``gaps``, ``bad_checksums``, ``jumps``...); the counters live in the server's stats dict, which the
injector is given. A setter that turns a switch on (a non-zero value) counts once in
``faults_injected``.
"""

from __future__ import annotations

import enum
import random

import msgspec

from pipeline.venue.errors import VenueError

#: seq jump of the ``gap_every_s`` fault: the update's seq is the previous one + 1 + ``GAP_SEQ``, i.e. 4 below
#: it. Backwards, because v2's ``books`` pushes carry ``seq`` without ``pseq``: a forward jump is legal
#: there (the venue only promises that seq increases) and no client can tell it from a normal push; a seq
#: that goes back is the sequence fault a client must detect (``BitgetBooks``: SEQ_GAP, then a resync)
GAP_SEQ = -5
#: the range a jittered delay is clipped to
MAX_JITTER_DELAY_MS = 50.0


class FaultParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The fault switches a server starts with (every one off by default; see the module docstring).
    Values are checked by ``FaultInjector``, not here."""

    delay_ms: float = 0.0
    delay_jitter_ms: float = 0.0
    drop_prob: float = 0.0
    seed: int = 0  # the drop draws' and the jitter draws' generators
    disconnect_every_s: float = 0.0
    gap_every_s: float = 0.0
    bad_checksum_every_s: float = 0.0


class TimedFault(enum.IntFlag):
    """Which timed faults ``FaultInjector.timed_due`` found due (``NONE``: none)."""

    NONE = 0
    DISCONNECT = 1  # cut every connection (as ``drop_connections()``)
    GAP = 2  # the next books update of every instrument steps its seq back (``GAP_SEQ``)
    BAD_CHECKSUM = 4  # the next books update of every instrument carries a wrong checksum


#: timed fault name (the param) -> its flag, in the order they fire
TIMED_FAULTS = {"disconnect_every_s": TimedFault.DISCONNECT, "gap_every_s": TimedFault.GAP,
                "bad_checksum_every_s": TimedFault.BAD_CHECKSUM}


class DelayFault:
    """The per-frame extra delay (sans-I/O): ``delay_ms`` fixed, or with ``jitter_ms`` > 0 a draw
    from N(``delay_ms``, ``jitter_ms``) clipped to [0, ``MAX_JITTER_DELAY_MS``], from a generator
    seeded by ``seed`` (the same seed gives the same draws).

    Raises (construction and ``set``):
        VenueError: ``delay_ms`` outside 0..600000, ``jitter_ms`` outside 0..50 (or not finite).
    """

    def __init__(self, delay_ms: float = 0.0, jitter_ms: float = 0.0, seed: int = 0) -> None:
        self.rng = random.Random(f"venue-jitter:{int(seed)}")
        self.delay_ms = 0.0
        self.jitter_ms = 0.0
        self.set(delay_ms, jitter_ms)

    def set(self, delay_ms: float | None = None, jitter_ms: float | None = None) -> None:
        """Change the mean delay and / or the jitter (None: unchanged)."""
        if delay_ms is not None:
            d = float(delay_ms)
            if not 0.0 <= d <= 600_000.0:
                raise VenueError(f"delay_ms must be in 0..600000, got {delay_ms}")
            self.delay_ms = d
        if jitter_ms is not None:
            j = float(jitter_ms)
            if not 0.0 <= j <= MAX_JITTER_DELAY_MS:
                raise VenueError(f"delay_jitter_ms must be in 0..{MAX_JITTER_DELAY_MS:g}, got {jitter_ms}")
            self.jitter_ms = j

    @property
    def active(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms)

    @property
    def jittered(self) -> bool:
        return bool(self.jitter_ms)

    def draw_ms(self) -> float:
        """The next frame's extra delay in ms (fixed without jitter; one draw with it)."""
        if not self.jitter_ms:
            return self.delay_ms
        return min(max(self.rng.gauss(self.delay_ms, self.jitter_ms), 0.0), MAX_JITTER_DELAY_MS)

    def due_s(self, now_s: float, last_due_s: float) -> float:
        """When a frame queued at ``now_s`` behind a frame due at ``last_due_s`` is due: never
        before that one (order kept). 0.0 when no delay is set (send at once, in queue order)."""
        if not self.active:
            return 0.0
        return max(now_s + self.draw_ms() / 1000.0, last_due_s)


class FaultTimer:
    """A fault every ``every_s`` seconds of an elapsed clock (sans-I/O; 0 = off): ``due(elapsed_ms)``
    is True once when ``elapsed_ms`` reaches the next multiple of the period (then the schedule
    moves to the first multiple after ``elapsed_ms``: missed periods are skipped, not replayed).

    Raises:
        VenueError: ``every_s`` negative or not finite.
    """

    def __init__(self, every_s: float = 0.0, start_ms: float = 0.0, name: str = "every_s") -> None:
        e = float(every_s)
        if not (0.0 <= e < float("inf")):
            raise VenueError(f"{name} must be a finite number >= 0 (0: off), got {every_s}")
        self.every_ms = e * 1000.0
        self.start_ms = float(start_ms)
        self.next_ms = self.start_ms + self.every_ms
        self.fired = 0

    def due(self, elapsed_ms: float) -> bool:
        if not self.every_ms or elapsed_ms < self.next_ms:
            return False
        self.next_ms = self.start_ms + ((elapsed_ms - self.start_ms) // self.every_ms + 1) * self.every_ms
        self.fired += 1
        return True


class FaultInjector:
    """The switches of one server and what they decide (see the module docstring). ``stats``: the
    server's counter dict (``faults_injected``, ``frames_dropped``, ``jitter_frames`` and the
    counters handed to ``count``), updated in place.

    Raises (construction, in this order; and the setters):
        VenueError: ``delay_ms`` outside 0..600000, ``delay_jitter_ms`` outside 0..50, ``drop_prob``
            outside 0..1, a timed fault period negative or not finite.
    """

    def __init__(self, params: FaultParams, stats: dict[str, int]) -> None:
        self.delay = DelayFault(params.delay_ms, params.delay_jitter_ms, params.seed)
        self.drop_prob = 0.0
        self._check_drop_prob(params.drop_prob)
        self.drop_prob = float(params.drop_prob)
        self.rng = random.Random(params.seed)
        self.stats = stats
        if self.delay.jittered:
            stats["faults_injected"] += 1
        self._prev_market_ms = 0.0
        self._elapsed_ms = 0.0
        self._timers: dict[str, FaultTimer] = {}
        self.set_timed_faults(disconnect_every_s=params.disconnect_every_s, gap_every_s=params.gap_every_s,
                              bad_checksum_every_s=params.bad_checksum_every_s)

    # -- per frame (the server's send path) ---------------------------------------------------

    def drops_push(self) -> bool:
        """Whether this data push is dropped (one draw; counted in ``frames_dropped`` when it is).
        The server asks only while ``drop_prob`` is set."""
        if self.rng.random() < self.drop_prob:
            self.stats["frames_dropped"] += 1
            return True
        return False

    def frame_due_s(self, now_s: float, last_due_s: float) -> float:
        """When a frame queued at ``now_s`` behind one due at ``last_due_s`` is due (``DelayFault.due_s``);
        a jittered one counts in ``jitter_frames``. The server asks only while ``delay.active``."""
        delay = self.delay
        due = delay.due_s(now_s, last_due_s)
        if delay.jitter_ms:
            self.stats["jitter_frames"] += 1
        return due

    # -- per published unit -------------------------------------------------------------------

    def timed_due(self, market_ms: float) -> TimedFault:
        """The timed faults due at the source's market time ``market_ms`` (the unit about to be
        published): the flags of those that fire, ``TimedFault.NONE`` when none does."""
        t = float(market_ms)
        d = t - self._prev_market_ms
        if d < 0:  # a replay started again: its clock went back to 0
            d = t
        self._prev_market_ms = t
        self._elapsed_ms += d
        timers = self._timers
        if not timers:
            return TimedFault.NONE
        el = self._elapsed_ms
        fired = TimedFault.NONE
        for name, flag in TIMED_FAULTS.items():
            if (tm := timers.get(name)) is not None and tm.due(el):
                fired |= flag
        return fired

    # -- counting -----------------------------------------------------------------------------

    def count(self, counter: str | None = None) -> None:
        """One fault injected: ``faults_injected`` goes up by one, and ``counter`` (a stats name) too
        when given."""
        self.stats["faults_injected"] += 1
        if counter is not None:
            self.stats[counter] += 1

    # -- switches -----------------------------------------------------------------------------

    def set_delay(self, delay_ms: float | None = None, jitter_ms: float | None = None) -> None:
        """Change the frames' delay (``delay_ms``; with jitter on: the mean) and / or its jitter,
        N(delay_ms, ``jitter_ms``) clipped to [0, 50] ms (None: unchanged; 0: off).

        Raises:
            VenueError: ``delay_ms`` outside 0..600000, ``jitter_ms`` outside 0..50.
        """
        self.delay.set(delay_ms, jitter_ms)
        if delay_ms or jitter_ms:
            self.stats["faults_injected"] += 1

    def set_drop_prob(self, p: float) -> None:
        """Drop each data push with probability ``p`` (0: off).

        Raises:
            VenueError: ``p`` outside 0..1.
        """
        self._check_drop_prob(p)
        self.drop_prob = float(p)
        if p:
            self.stats["faults_injected"] += 1

    @staticmethod
    def _check_drop_prob(p: float) -> None:
        if not 0.0 <= float(p) <= 1.0:
            raise VenueError(f"drop_prob must be in 0..1, got {float(p)}")

    def set_timed_faults(self, *, disconnect_every_s: float | None = None, gap_every_s: float | None = None,
                         bad_checksum_every_s: float | None = None) -> None:
        """(Re)start the timed faults (None: unchanged; 0: off), counted from the fault clock now.
        Every value is checked before any changes: a bad one changes nothing.

        Raises:
            VenueError: a negative or non-finite period.
        """
        new = {}
        for name, every in (("disconnect_every_s", disconnect_every_s), ("gap_every_s", gap_every_s),
                            ("bad_checksum_every_s", bad_checksum_every_s)):
            if every is not None:
                new[name] = FaultTimer(every, self._elapsed_ms, name)
        for name, timer in new.items():
            if timer.every_ms:
                self._timers[name] = timer
            else:
                self._timers.pop(name, None)

    def timed_periods_s(self) -> dict[str, float]:
        """The timed faults on now: name -> period in seconds."""
        return {name: t.every_ms / 1000.0 for name, t in self._timers.items()}
