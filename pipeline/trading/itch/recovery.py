"""MoldUDP64 gap recovery, sans-I/O: messages in sequence order, re-requests for the missing ones.

``GapRecovery`` is told each decoded packet and the time, and answers with the messages to apply, in
order, each exactly once. A message past the next expected one opens a gap: it is held (copied;
at most ``max_held_messages``), and re-requests for the missing range are due:

- at most one every ``request_interval_ns`` (the bounded rate), each asking for at most
  ``max_request_messages`` from the first missing one (``request_due``; the caller sends the
  20-byte request with ``framing.encode_request`` to where the packets came from);
- retransmitted messages fill the gap; once the next expected message is there, it and every held
  one that follows in sequence are released;
- the gap is closed when nothing is held and no later sequence number is known (a heartbeat or an
  end-of-session packet also tells the latest number).

Bounds (a gap that cannot be recovered): the gap is given up when it has been open
``gap_timeout_ns``, when ``max_requests`` re-requests went unanswered, when it spans more than
``max_gap_messages``, or when the held messages would exceed ``max_held_messages``. Giving up skips
the missing range (``lost``), releases what was held, and says so in the ``Recovered`` answer; the
caller decides what the loss means for its books.

Counters (attributes): ``gaps`` opened, ``requests`` sent, ``recovered`` (gaps closed by
retransmission), ``unrecoverable`` (gaps given up), ``lost`` (messages skipped), ``duplicates``,
``held_max`` (the most messages held at once), ``overflow`` (gaps given up because the hold was full).
"""

from __future__ import annotations

from typing import NamedTuple

from pipeline.trading.itch.framing import MOLD_END_OF_SESSION, MOLD_HEARTBEAT, MOLD_MAX_MESSAGES


class RecoveryParams(NamedTuple):
    """The bounds of ``GapRecovery`` (module docstring); validated by ``check``."""

    request_interval_ns: int = 20_000_000
    max_request_messages: int = 1_000
    max_requests: int = 10
    gap_timeout_ns: int = 500_000_000
    max_gap_messages: int = 100_000
    max_held_messages: int = 100_000

    def check(self) -> "RecoveryParams":
        """Returns self. Raises ValueError naming the first field out of range."""
        for name in self._fields:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.max_request_messages > MOLD_MAX_MESSAGES:
            raise ValueError(f"max_request_messages must be <= {MOLD_MAX_MESSAGES}, got {self.max_request_messages}")
        return self


class Released(NamedTuple):
    """What ``GapRecovery.on_packet`` / ``poll`` hands back: ``messages`` as ``(seq, message)`` in
    order; ``lost`` the sequence numbers given up during this call (None: none). Whether a gap is
    open after the call: ``GapRecovery.gap_open``."""

    messages: list
    lost: range | None = None


_NOTHING = Released([])


class GapRecovery:
    """In-order delivery of one MoldUDP64 session's messages with bounded re-requests. Pure."""

    def __init__(self, params: RecoveryParams = RecoveryParams(), next_seq: int = 1) -> None:
        """Raises ValueError: a bound out of range (``RecoveryParams.check``)."""
        self.p = params.check()
        self.expected = next_seq  # the next sequence number to release
        self.top = next_seq  # one past the highest sequence number known to exist
        self.held: dict[int, bytes] = {}
        self.gap_since_ns = -1  # when the open gap opened (-1: none open)
        self._last_request_ns = 0
        self._requests_this_gap = 0
        self.gaps = self.requests = self.recovered = self.unrecoverable = 0
        self.lost = self.duplicates = self.held_max = self.overflow = 0

    @property
    def gap_open(self) -> bool:
        return self.gap_since_ns >= 0

    # hot path: every datagram of the feed goes through here; the in-order case is the first branch
    def on_packet(self, seq: int, count: int, messages, now_ns: int) -> Released:
        """A packet with first sequence number ``seq`` and ``messages`` (``count`` from its header: a
        heartbeat's 0 and the end of session's 0xFFFF carry no message but the next number) at
        ``now_ns``. Messages are copied only when held."""
        n = 0 if count == MOLD_HEARTBEAT or count == MOLD_END_OF_SESSION else len(messages)
        end = seq + n
        if end > self.top:
            self.top = end
        if seq == self.expected and not self.held and self.gap_since_ns < 0:
            self.expected = end
            return Released([(seq + i, messages[i]) for i in range(n)]) if n else _NOTHING
        out: list = []
        lost: list[range] = []
        exp = self.expected
        held = self.held
        for i in range(n):
            s = seq + i
            if s < exp or s in held:
                self.duplicates += 1
                continue
            if s > exp and len(held) >= self.p.max_held_messages:  # the hold is full: give the first hole up
                self.overflow += 1
                self.expected = exp
                lost.append(self._give_up(out, now_ns))
                exp = self.expected
            if s == exp:
                out.append((s, messages[i]))
                exp += 1
                while exp in held:
                    out.append((exp, held.pop(exp)))
                    exp += 1
            else:
                held[s] = bytes(messages[i])
        self.expected = exp
        if len(held) > self.held_max:
            self.held_max = len(held)
        return self._settle(out, lost, now_ns)

    def _settle(self, out: list, lost: list, now_ns: int) -> Released:
        """After messages moved: open, close or keep the gap (a new one that spans more than
        ``max_gap_messages`` is given up at once)."""
        if self.gap_since_ns < 0 and self.top > self.expected:
            self._open(now_ns)
            if self._first_missing_span() > self.p.max_gap_messages:
                lost.append(self._give_up(out, now_ns))
        if self.gap_since_ns >= 0 and self.top <= self.expected and not self.held:
            self.gap_since_ns = -1
            if not lost:
                self.recovered += 1
        gone = range(lost[0].start, lost[-1].stop) if lost else None
        return Released(out, gone) if out or gone is not None else _NOTHING

    def _open(self, now_ns: int) -> None:
        self.gaps += 1
        self.gap_since_ns = now_ns
        self._requests_this_gap = 0
        self._last_request_ns = now_ns - self.p.request_interval_ns  # the first request is due now

    def _first_missing_span(self) -> int:
        """How many sequence numbers are missing from ``expected`` on (up to the first held one)."""
        nxt = min(self.held) if self.held else self.top
        return nxt - self.expected

    def request_due(self, now_ns: int) -> tuple[int, int] | None:
        """``(first_seq, count)`` of a re-request to send now, or None (no gap, or the last one was
        less than ``request_interval_ns`` ago, or ``max_requests`` were sent: then ``poll`` gives the
        gap up once its time is out). Counts the request as sent."""
        if self.gap_since_ns < 0 or now_ns - self._last_request_ns < self.p.request_interval_ns:
            return None
        if self._requests_this_gap >= self.p.max_requests:
            return None
        self._last_request_ns = now_ns
        self._requests_this_gap += 1
        self.requests += 1
        return self.expected, min(self._first_missing_span(), self.p.max_request_messages)

    def poll(self, now_ns: int) -> Released:
        """Give up an open gap older than ``gap_timeout_ns`` (or whose ``max_requests`` were all sent
        one interval ago without an answer): its missing range is skipped (``lost``) and what was
        held after it released; otherwise nothing."""
        if self.gap_since_ns < 0:
            return _NOTHING
        p = self.p
        timed_out = now_ns - self.gap_since_ns >= p.gap_timeout_ns
        exhausted = (self._requests_this_gap >= p.max_requests
                     and now_ns - self._last_request_ns >= p.request_interval_ns)
        if not (timed_out or exhausted):
            return _NOTHING
        out: list = []
        lost = self._give_up(out, now_ns)
        return Released(out, lost)

    def _give_up(self, out: list, now_ns: int) -> range:
        """Skip the first missing range (returned); append to ``out`` what follows it in sequence; a
        hole further on stays a gap (its clock and requests restart), else the gap is closed."""
        skip_to = min(self.held) if self.held else self.top
        lost = range(self.expected, skip_to)
        self.lost += len(lost)
        self.unrecoverable += 1
        exp = skip_to
        held = self.held
        while exp in held:
            out.append((exp, held.pop(exp)))
            exp += 1
        self.expected = exp
        self.gap_since_ns = -1
        if self.top > exp:  # another hole further on: a new gap
            self._open(now_ns)
        return lost

    def reset(self, next_seq: int = 1) -> None:
        """A new session: forget everything held and any gap (counters kept)."""
        self.expected = self.top = next_seq
        self.held.clear()
        self.gap_since_ns = -1
