"""The paper venue's ITCH 5.0 feed over MoldUDP64: a synthetic session sent as UDP datagrams to
127.0.0.1, with re-requests answered.

Sans-I/O part, ``MoldStream``: the session's messages (encoded ITCH, numbered from 1) cut into
MoldUDP64 packets of at most ``max_datagram_bytes`` (``pipeline.trading.itch.framing.encode_packet``),
re-request answers (the packets covering what was asked, within what was already published),
heartbeats and the end-of-session packet.

I/O part, ``ItchUdpPublisher``: sends the packets from a UDP socket bound on 127.0.0.1 (its port,
``request_port``, is where clients send re-requests: the 20-byte MoldUDP64 request header) to
``target`` (the feed's UDP port on 127.0.0.1: a number, or read from ``target_port_file``, which the
publisher waits for and reads again every ``PORT_FILE_RECHECK_S``, so a restarted feed is found), at
``rate_msgs_per_s`` messages a second (<= 0: as fast as possible) or, with ``speed`` > 0, at the pace
of the messages' ITCH timestamps times ``speed`` (1.0: as recorded; a packet carries the messages
due by then, up to a datagram). Once the session is out, it sends the end-of-session packet every
``heartbeat_s``; while paused it sends heartbeats. Faults: ``drop_prob`` drops data packets at
random (seeded by ``fault_seed``), and ``drop_seqs`` drops the packets holding those sequence
numbers on their first sending, so the client sees gaps and must re-request; ``unanswered_seqs``
are never retransmitted (an unrecoverable gap). ``delay_ms`` / ``delay_jitter_ms``: every packet sent
(data, heartbeats, re-request answers) leaves later, by ``delay_ms`` or, with a jitter, by a draw from
N(``delay_ms``, ``delay_jitter_ms``) clipped to [0, 50] ms (``pipeline.venue.faults.DelayFault``, seeded
by ``fault_seed``); packets keep the order they were sent in (one is never due before the one ahead of
it), each delayed one counts in ``delayed_packets``. ``on_published(first_seq, n)`` (optional) is told
every data packet's messages as they are published, dropped or not (the venue's own book follows
the session, not the wire).

Runs on an asyncio loop (``start`` / ``stop``), e.g. beside a ``VenueServer`` in a ``VenueThread``.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.framing import (
    MOLD_HEADER_BYTES,
    decode_request,
    encode_end_of_session,
    encode_heartbeat,
    encode_packet,
)
from pipeline.runtime.errors import PipelineError
from pipeline.runtime.portfile import read_port_file
from pipeline.trading.itch.errors import ItchError
from pipeline.trading.itch.synth import generate_session
from pipeline.venue.errors import VenueError
from pipeline.venue.faults import DelayFault
from pipeline.venue.service import cancel_task

HOST = "127.0.0.1"
DEFAULT_DATAGRAM_BYTES = 1400  # fits a 1500-byte Ethernet MTU with IP and UDP headers
MAX_RETRANSMIT_MESSAGES = 10_000  # one re-request is answered with at most this many messages
PORT_FILE_RECHECK_S = 0.5
_TS_OFF = 5  # u48 BE nanoseconds since midnight at offset 5 of every ITCH message


class MoldStream:
    """A MoldUDP64 session over a fixed list of messages (see the module docstring). Pure."""

    def __init__(self, session: str, messages: Sequence[bytes], max_datagram_bytes: int = DEFAULT_DATAGRAM_BYTES):
        """Raises:
        VenueError: no message, a session name longer than 10, a message that cannot fit a datagram.
        """
        if not messages:
            raise VenueError("a MoldUDP64 stream needs at least one message")
        if len(session.encode("ascii")) > 10:
            raise VenueError(f"MoldUDP64 session names are at most 10 bytes: {session!r}")
        self.session = session
        self.messages = list(messages)
        self.max_datagram_bytes = int(max_datagram_bytes)
        for m in self.messages:
            if MOLD_HEADER_BYTES + 2 + len(m) > self.max_datagram_bytes:
                raise VenueError(f"a {len(m)}-byte message does not fit a {max_datagram_bytes}-byte datagram")
        self.next_seq = 1  # first message not yet published

    @classmethod
    def synthetic(cls, seed: int, n_events: int, session: str = "PAPER",
                  max_datagram_bytes: int = DEFAULT_DATAGRAM_BYTES, **kwargs) -> "MoldStream":
        """A ``pipeline.trading.itch.synth`` session (prelude, ``n_events`` order-flow messages, epilogue);
        ``kwargs`` go to ``generate_session``."""
        return cls(session, [M.encode(r) for r in generate_session(seed, n_events, **kwargs)], max_datagram_bytes)

    @property
    def exhausted(self) -> bool:
        return self.next_seq > len(self.messages)

    def timestamp_ns(self, seq: int) -> int:
        """The ITCH timestamp of message ``seq`` (0 for a message too short to hold one)."""
        m = self.messages[seq - 1]
        return int.from_bytes(m[_TS_OFF:_TS_OFF + 6], "big") if len(m) >= 11 else 0

    def last_due(self, t_ns: int) -> int:
        """The last sequence number (>= ``next_seq``, so a packet always has one message) whose
        timestamp is at most ``t_ns``, among the messages not yet published (timestamps that go back
        count as due)."""
        seq = self.next_seq
        last = min(len(self.messages), seq + 256)  # more never fits one datagram
        while seq < last and self.timestamp_ns(seq + 1) <= t_ns:
            seq += 1
        return seq

    def _pack(self, first_seq: int, last_seq: int) -> tuple[bytes, int]:
        """One packet from ``first_seq`` on, as many messages as fit, none past ``last_seq``."""
        size = MOLD_HEADER_BYTES
        msgs = []
        seq = first_seq
        while seq <= last_seq:
            m = self.messages[seq - 1]
            if size + 2 + len(m) > self.max_datagram_bytes:
                break
            size += 2 + len(m)
            msgs.append(m)
            seq += 1
        return encode_packet(self.session, first_seq, msgs), len(msgs)

    def next_packet(self, last_seq: int | None = None) -> tuple[bytes, int] | None:
        """The next data packet and its message count (advancing; none past ``last_seq`` when given),
        or None at the end."""
        if self.exhausted:
            return None
        packet, n = self._pack(self.next_seq, len(self.messages) if last_seq is None else last_seq)
        self.next_seq += n
        return packet, n

    def retransmit(self, first_seq: int, count: int, withhold: frozenset | set = frozenset()) -> list[bytes]:
        """Packets re-sending messages ``first_seq .. first_seq + count - 1``, limited to those already
        published and to MAX_RETRANSMIT_MESSAGES, leaving out the sequence numbers in ``withhold``;
        [] when none is."""
        first = max(int(first_seq), 1)
        last = min(int(first_seq) + min(int(count), MAX_RETRANSMIT_MESSAGES) - 1, self.next_seq - 1)
        out = []
        while first <= last:
            if first in withhold:
                first += 1
                continue
            stop = first
            while stop < last and stop + 1 not in withhold:
                stop += 1
            packet, n = self._pack(first, stop)
            out.append(packet)
            first += n
        return out

    def heartbeat(self) -> bytes:
        return encode_heartbeat(self.session, self.next_seq)

    def end_of_session(self) -> bytes:
        return encode_end_of_session(self.session, self.next_seq)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, owner: "ItchUdpPublisher") -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr) -> None:
        self.owner._on_request(data, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP port unreachable: nobody listens yet
        self.owner.stats["send_errors"] += 1


class ItchUdpPublisher:
    """Sends a ``MoldStream`` over UDP on 127.0.0.1 and answers re-requests (module docstring)."""

    def __init__(self, stream: MoldStream, target_port: int = 0, *, target_port_file: str = "",
                 rate_msgs_per_s: float = 100_000.0, speed: float = 0.0, heartbeat_s: float = 1.0,
                 drop_prob: float = 0.0, fault_seed: int = 0, start_paused: bool = False,
                 drop_seqs: Iterable[int] = (), unanswered_seqs: Iterable[int] = (),
                 on_published: Callable[[int, int], object] | None = None, delay_ms: float = 0.0,
                 delay_jitter_ms: float = 0.0):
        """Raises:
        VenueError: neither or both of a target port (1..65535) and a target port file, drop_prob
            outside 0..1, heartbeat_s <= 0, speed < 0, delay_ms outside 0..600000, delay_jitter_ms
            outside 0..50.
        """
        if bool(target_port) == bool(target_port_file):
            raise VenueError("give exactly one of target_port (1..65535) and target_port_file")
        if target_port and not 0 < int(target_port) <= 65535:
            raise VenueError(f"target_port must be in 1..65535, got {target_port}")
        if not 0.0 <= drop_prob <= 1.0:
            raise VenueError(f"drop_prob must be in 0..1, got {drop_prob}")
        if heartbeat_s <= 0:
            raise VenueError(f"heartbeat_s must be > 0, got {heartbeat_s}")
        if speed < 0:
            raise VenueError(f"speed must be >= 0, got {speed}")
        self.stream = stream
        self.target = (HOST, int(target_port)) if target_port else None
        self.target_port_file = target_port_file
        self.rate = float(rate_msgs_per_s)
        self.speed = float(speed)
        self.heartbeat_s = float(heartbeat_s)
        self.drop_prob = float(drop_prob)
        self.drop_seqs = set(int(x) for x in drop_seqs)
        self.unanswered = frozenset(int(x) for x in unanswered_seqs)
        self.on_published = on_published
        self._rng = random.Random(fault_seed)
        self.delay = DelayFault(delay_ms, delay_jitter_ms, fault_seed)
        self._delayed: deque = deque()  # (due loop time, packet, address), in sending order
        self._delay_timer: asyncio.TimerHandle | None = None
        self._last_due = 0.0
        self._paused = bool(start_paused)
        self.request_port = 0
        self.stats = {"packets_sent": 0, "messages_sent": 0, "packets_dropped": 0, "requests": 0,
                      "bad_requests": 0, "retransmitted_packets": 0, "heartbeats": 0, "send_errors": 0,
                      "delayed_packets": 0}
        self._transport: asyncio.DatagramTransport | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._port_checked = -1e18

    async def start(self) -> int:
        """Bind 127.0.0.1 (any port) and start sending; returns the request port."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), local_addr=(HOST, 0))
        self.request_port = self._transport.get_extra_info("sockname")[1]
        self._task = asyncio.create_task(self._pump(), name="itch-udp")
        return self.request_port

    async def stop(self) -> None:
        """Stop sending and close the socket."""
        await cancel_task(self._task)
        if self._delay_timer is not None:
            self._delay_timer.cancel()
        if self._transport is not None:
            self._transport.close()

    @property
    def pump_task(self) -> asyncio.Task | None:
        return self._task

    def pause(self) -> None:
        """Stop sending data (heartbeats continue); call on the publisher's loop."""
        self._paused = True

    def resume(self) -> None:
        """Call on the publisher's loop."""
        self._paused = False
        if self._wake is not None:
            self._wake.set()

    def _on_request(self, data: bytes, addr) -> None:
        st = self.stats
        st["requests"] += 1
        try:
            session, first, count = decode_request(data)
        except ItchError:
            st["bad_requests"] += 1
            return
        if session.rstrip(b" ") != self.stream.session.encode("ascii"):
            st["bad_requests"] += 1
            return
        for packet in self.stream.retransmit(first, count, self.unanswered):
            self._send(packet, addr)
            st["retransmitted_packets"] += 1

    def _send(self, packet: bytes, addr) -> None:
        """Send ``packet`` to ``addr`` now, or with the delay fault on, when it is due (order kept)."""
        if not self.delay.active:
            self._transport.sendto(packet, addr)
            return
        loop = asyncio.get_running_loop()
        self._last_due = self.delay.due_s(loop.time(), self._last_due)
        self._delayed.append((self._last_due, packet, addr))
        self.stats["delayed_packets"] += 1
        if self._delay_timer is None:
            self._delay_timer = loop.call_at(self._last_due, self._flush_delayed)

    def _flush_delayed(self) -> None:
        """Send the delayed packets now due, in order; wake again for the next one."""
        loop = asyncio.get_running_loop()
        queue, now = self._delayed, loop.time()
        while queue and queue[0][0] <= now:
            _, packet, addr = queue.popleft()
            if self._transport is not None and not self._transport.is_closing():
                self._transport.sendto(packet, addr)
        self._delay_timer = loop.call_at(queue[0][0], self._flush_delayed) if queue else None

    async def _idle(self, seconds: float) -> None:
        self._wake.clear()
        with suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _resolve_target(self, loop) -> tuple[str, int]:
        """The target address: the fixed port, or the port file's (waited for; read again every
        PORT_FILE_RECHECK_S)."""
        if not self.target_port_file:
            return self.target
        while True:
            now = loop.time()
            if self.target is not None and now - self._port_checked < PORT_FILE_RECHECK_S:
                return self.target
            self._port_checked = now
            try:
                self.target = (HOST, read_port_file(self.target_port_file))
            except (OSError, ValueError, PipelineError):
                pass
            if self.target is not None:
                return self.target
            await asyncio.sleep(0.05)

    def _due_seq(self, loop, t0: list) -> int | None:
        """With ``speed``: the last message due now (None: the next one is not due yet)."""
        stream = self.stream
        now = loop.time()
        if not t0:
            t0.extend((now, stream.timestamp_ns(stream.next_seq)))
        t_itch = t0[1] + (now - t0[0]) * self.speed * 1e9
        if stream.timestamp_ns(stream.next_seq) > t_itch:
            return None
        return stream.last_due(int(t_itch))

    # hot path: one data packet per iteration (the venue's side of the feed)
    async def _pump(self) -> None:
        stream, st = self.stream, self.stats
        loop = asyncio.get_running_loop()
        send = self._send if self.delay.active else self._transport.sendto
        next_t = loop.time()
        t0: list = []  # with speed: (loop time, ITCH ns) of the first message
        while True:
            target = await self._resolve_target(loop)
            if self._paused:
                send(stream.heartbeat(), target)
                st["heartbeats"] += 1
                await self._idle(self.heartbeat_s)
                next_t = loop.time()
                t0.clear()
                continue
            last = None
            if self.speed > 0 and not stream.exhausted:
                last = self._due_seq(loop, t0)
                if last is None:
                    due = t0[0] + (stream.timestamp_ns(stream.next_seq) - t0[1]) / (self.speed * 1e9)
                    await asyncio.sleep(min(max(due - loop.time(), 0.0), self.heartbeat_s))
                    continue
            first = stream.next_seq
            item = stream.next_packet(last)
            if item is None:
                send(stream.end_of_session(), target)
                st["heartbeats"] += 1
                await self._idle(self.heartbeat_s)
                continue
            packet, n = item
            if self.on_published is not None:
                self.on_published(first, n)
            chosen = self.drop_seqs and not self.drop_seqs.isdisjoint(range(first, first + n))
            if chosen or (self.drop_prob and self._rng.random() < self.drop_prob):
                st["packets_dropped"] += 1
                if chosen:
                    self.drop_seqs.difference_update(range(first, first + n))
            else:
                send(packet, target)
                st["packets_sent"] += 1
                st["messages_sent"] += n
            if self.rate > 0 and self.speed <= 0:
                next_t += n / self.rate
                wait = next_t - loop.time()
                await asyncio.sleep(wait if wait > 0 else 0)
            else:
                await asyncio.sleep(0)
