"""ITCH 5.0 transport framing: Nasdaq BinaryFILE and MoldUDP64, sans I/O.

BinaryFILE (files; Nasdaq BinaryFILE v1.00)::

    +----------------+---------------------+----------------+----- ... ---+--------+
    | length N u16 BE| ITCH message (N B)  | length u16 BE  | message      | 0x0000 |
    +----------------+---------------------+----------------+----- ... ---+--------+

A length of 0 marks the end of the session; a file without it is incomplete. (RITCH writes
zero-length frames elsewhere in a file; ``skip_empty=True`` reads such files: zero-length frames are
skipped and the end of the data ends the session.) ``.gz`` files are gzip-compressed BinaryFILEs.

MoldUDP64 packet (one UDP datagram)::

    0                10                       18        20
    +----------------+------------------------+---------+---------------------------- ... --+
    | session a10    | seq of first msg u64 BE| count   | count x [u16 BE length][message]    |
    |                |                        | u16 BE  |                                     |
    +----------------+------------------------+---------+---------------------------- ... --+

Messages of a packet are numbered ``seq, seq+1, ...``. ``count == 0`` is a heartbeat whose ``seq`` is
the next sequence number the server will send; ``count == 0xFFFF`` is the end of the session (same
``seq`` meaning, no message blocks). A re-request (client to server) is the 20-byte header alone:
the first sequence number wanted and how many.

Only ``read_binaryfile`` and ``iter_file_frames`` open a file (the path helpers); everything else
works on buffers. ``MoldSequencer`` is pure: it is told what arrived and says what to deliver.
"""

from __future__ import annotations

import enum
import gzip
import os
import struct
from typing import Iterator, NamedTuple, Sequence

from pipeline.trading.itch.errors import FramingError, IncompleteSession, TruncatedFrame

# --------------------------------------------------------------------------------- BinaryFILE

LENGTH_PREFIX = struct.Struct(">H")
LENGTH_PREFIX_BYTES = 2
MAX_FRAME_BYTES = 0xFFFF
END_OF_SESSION = b"\x00\x00"


def frame(message: bytes) -> bytes:
    """``message`` with its BinaryFILE / MoldUDP64 length prefix.

    Raises:
        FramingError: the message is empty or longer than 65535 bytes.
    """
    n = len(message)
    if not 0 < n <= MAX_FRAME_BYTES:
        raise FramingError(f"a framed message must be 1..{MAX_FRAME_BYTES} bytes, got {n}", 0)
    return LENGTH_PREFIX.pack(n) + message


def encode_binaryfile(messages, *, end_of_session: bool = True) -> bytes:
    """A BinaryFILE of ``messages`` (bytes each), with the 0-length end marker unless told not to.

    Raises:
        FramingError: a message is empty or longer than 65535 bytes.
    """
    parts = [frame(m) for m in messages]
    if end_of_session:
        parts.append(END_OF_SESSION)
    return b"".join(parts)


class FrameScan(NamedTuple):
    """Result of ``scan_frames``: where the messages are, and how the data ended.

    ``offsets[i]`` is where message i starts, just after its 2-byte length prefix (so its length is
    ``frame_length(buf, offsets[i])``). At most one of ``ended`` and ``truncated`` is true:

    - ``ended``: the session's end was seen: the 0-length marker at ``end_offset`` (bytes after it
      are not read) or, with ``skip_empty``, the end of the data on a frame boundary;
    - ``truncated``: the data ends inside the prefix or the message of the frame at ``end_offset``;
    - neither: the data ends on a frame boundary without the marker (an incomplete session).
    """

    offsets: list[int]
    ended: bool
    truncated: bool
    end_offset: int


def frame_length(buf, message_offset: int) -> int:
    """Length of the message at ``message_offset``, read from the prefix just before it."""
    return (buf[message_offset - 2] << 8) | buf[message_offset - 1]


def scan_frames(buf, start: int = 0, *, skip_empty: bool = False) -> FrameScan:
    """Find every complete frame of the BinaryFILE data in ``buf`` (bytes-like); never raises.

    This loop is the serial part of ``vectorized.decode_buffer`` (each prefix says where the next
    one is), so it does nothing but follow the prefixes.
    """
    n = len(buf)
    o = start
    offsets: list[int] = []
    add = offsets.append
    while o + 2 <= n:
        ln = (buf[o] << 8) | buf[o + 1]
        if ln == 0:
            if skip_empty:
                o += 2
                continue
            return FrameScan(offsets, True, False, o)
        if o + 2 + ln > n:
            return FrameScan(offsets, False, True, o)
        add(o + 2)
        o += 2 + ln
    if o < n:  # one byte of a prefix left
        return FrameScan(offsets, False, True, o)
    return FrameScan(offsets, skip_empty, False, o)


def _check_end(scan: FrameScan, require_end: bool, n: int) -> None:
    if scan.truncated:
        raise TruncatedFrame(f"BinaryFILE data ends inside the frame at offset {scan.end_offset} ({n} bytes)",
                             scan.end_offset)
    if require_end and not scan.ended:
        raise IncompleteSession(f"BinaryFILE data ends at {n} without the 0-length end-of-session marker", n)


def iter_frames(source, *, require_end: bool = True,
                skip_empty: bool = False) -> Iterator[tuple[int, memoryview | bytes]]:
    """Yield ``(offset, message)`` for each framed message of a BinaryFILE, in order.

    ``source`` is a bytes-like buffer (messages are zero-copy memoryview slices, offsets index the
    buffer) or a path (``str`` / ``os.PathLike``; read in chunks through ``iter_file_frames``,
    gunzipped when it ends in ``.gz``; messages are bytes, offsets index the uncompressed stream).
    Iteration stops at the 0-length end marker. Problems at the end are raised only after every
    complete message has been yielded.

    Raises:
        TruncatedFrame: the data ends inside a length prefix or a message.
        IncompleteSession: ``require_end`` and the data ends without the end marker (never with
            ``skip_empty``, where zero-length frames are skipped and the data's end is the end).
        OSError: the path cannot be read (gzip.BadGzipFile for a corrupt .gz).
    """
    if isinstance(source, (str, os.PathLike)):
        yield from iter_file_frames(source, require_end=require_end, skip_empty=skip_empty)
        return
    view = memoryview(source).cast("B") if not isinstance(source, bytes) else source
    scan = scan_frames(view, skip_empty=skip_empty)
    mv = memoryview(view)
    for off in scan.offsets:
        yield off, mv[off:off + ((view[off - 2] << 8) | view[off - 1])]
    _check_end(scan, require_end, len(view))


def open_binaryfile(path):
    """Open a BinaryFILE for binary reading, through gzip when ``path`` ends in ``.gz``.

    Raises:
        OSError: the file cannot be opened.
    """
    return gzip.open(path, "rb") if os.fspath(path).endswith(".gz") else open(path, "rb")


def read_binaryfile(path) -> bytes:
    """The whole (uncompressed) content of a BinaryFILE at ``path``.

    Raises:
        OSError: the file cannot be read (gzip.BadGzipFile for a corrupt .gz).
    """
    with open_binaryfile(path) as f:
        return f.read()


def iter_file_frames(path, *, chunk_bytes: int = 1 << 20, require_end: bool = True,
                     skip_empty: bool = False) -> Iterator[tuple[int, bytes]]:
    """``iter_frames`` over a file read ``chunk_bytes`` at a time (gunzipped for ``.gz``).

    Raises:
        TruncatedFrame, IncompleteSession: as ``iter_frames``.
        OSError: the file cannot be read (gzip.BadGzipFile for a corrupt .gz).
    """
    with open_binaryfile(path) as f:
        pending = b""
        base = 0  # stream offset of pending[0]
        while True:
            chunk = f.read(chunk_bytes)
            data = pending + chunk if pending else chunk
            if not chunk:
                scan = scan_frames(data, skip_empty=skip_empty)
                for off in scan.offsets:
                    yield base + off, data[off:off + ((data[off - 2] << 8) | data[off - 1])]
                if scan.truncated:
                    raise TruncatedFrame(f"BinaryFILE {os.fspath(path)!r} ends inside the frame at offset "
                                         f"{base + scan.end_offset}", base + scan.end_offset)
                if require_end and not scan.ended:
                    raise IncompleteSession(f"BinaryFILE {os.fspath(path)!r} ends at {base + len(data)} without "
                                            "the 0-length end-of-session marker", base + len(data))
                return
            scan = scan_frames(data, skip_empty=skip_empty)
            for off in scan.offsets:
                yield base + off, data[off:off + ((data[off - 2] << 8) | data[off - 1])]
            if scan.ended and not skip_empty:
                return
            # keep the unfinished frame (or nothing) for the next chunk
            pending = data[scan.end_offset:]
            base += scan.end_offset


# ---------------------------------------------------------------------------------- MoldUDP64

MOLD_HEADER = struct.Struct(">10sQH")
MOLD_HEADER_BYTES = 20
OFF_MOLD_SESSION = 0
OFF_MOLD_SEQ = 10
OFF_MOLD_COUNT = 18
MOLD_SESSION_BYTES = 10
MOLD_HEARTBEAT = 0  # count of a heartbeat
MOLD_END_OF_SESSION = 0xFFFF  # count of the end-of-session packet
MOLD_MAX_MESSAGES = 0xFFFE
assert MOLD_HEADER.size == MOLD_HEADER_BYTES


class MoldPacket(NamedTuple):
    """A decoded MoldUDP64 packet. ``messages`` is empty for heartbeats and end of session."""

    session: bytes
    seq: int
    count: int
    messages: tuple  # memoryview slices of the datagram, one per message

    @property
    def is_heartbeat(self) -> bool:
        return self.count == MOLD_HEARTBEAT

    @property
    def is_end_of_session(self) -> bool:
        return self.count == MOLD_END_OF_SESSION

    @property
    def next_seq(self) -> int:
        """Sequence number after this packet's messages (its ``seq`` for heartbeat / end)."""
        return self.seq + len(self.messages)


class MoldReason(enum.IntEnum):
    """Why ``try_decode_packet`` rejected a datagram (OK when it did not)."""

    OK = 0
    SHORT_HEADER = 1  # fewer than 20 bytes
    TRUNCATED = 2  # a message block runs past the datagram
    TRAILING_BYTES = 3  # bytes after the announced messages (or after a heartbeat / end header)
    EMPTY_MESSAGE = 4  # a message block of length 0


def _session_bytes(session) -> bytes:
    raw = session.encode("ascii") if isinstance(session, str) else bytes(session)
    if len(raw) > MOLD_SESSION_BYTES:
        raise FramingError(f"MoldUDP64 session is at most {MOLD_SESSION_BYTES} bytes: {raw!r}", 0)
    return raw.ljust(MOLD_SESSION_BYTES, b" ")


def encode_packet(session, seq: int, messages: Sequence[bytes]) -> bytes:
    """A MoldUDP64 packet of ``messages`` (1..65534 of them), the first numbered ``seq``.

    ``session`` (str or bytes, at most 10) is space-padded to 10 bytes.

    Raises:
        FramingError: no messages or too many, a message empty or over 65535 bytes, a session
            longer than 10 bytes, ``seq`` outside u64.
    """
    if not 0 < len(messages) <= MOLD_MAX_MESSAGES:
        raise FramingError(f"a MoldUDP64 data packet carries 1..{MOLD_MAX_MESSAGES} messages, got {len(messages)}", 0)
    return _header(session, seq, len(messages)) + b"".join(frame(m) for m in messages)


def _header(session, seq: int, count: int) -> bytes:
    try:
        return MOLD_HEADER.pack(_session_bytes(session), seq, count)
    except struct.error as exc:
        raise FramingError(f"MoldUDP64 header: {exc}", 0) from None


def encode_heartbeat(session, next_seq: int) -> bytes:
    """A heartbeat: count 0, ``next_seq`` the next sequence number the server will send.

    Raises:
        FramingError: session longer than 10 bytes or ``next_seq`` outside u64.
    """
    return _header(session, next_seq, MOLD_HEARTBEAT)


def encode_end_of_session(session, next_seq: int) -> bytes:
    """The end-of-session packet: count 0xFFFF.

    Raises:
        FramingError: session longer than 10 bytes or ``next_seq`` outside u64.
    """
    return _header(session, next_seq, MOLD_END_OF_SESSION)


def encode_request(session, first_seq: int, count: int) -> bytes:
    """A re-request for ``count`` messages starting at ``first_seq`` (the 20-byte header alone).

    Raises:
        FramingError: bad session, ``first_seq`` outside u64, ``count`` outside 1..65534.
    """
    if not 0 < count <= MOLD_MAX_MESSAGES:
        raise FramingError(f"a re-request asks for 1..{MOLD_MAX_MESSAGES} messages, got {count}", 0)
    return _header(session, first_seq, count)


def decode_request(datagram) -> tuple[bytes, int, int]:
    """``(session, first_seq, count)`` of a re-request packet (the server side of ``encode_request``).

    Raises:
        FramingError: not exactly 20 bytes.
    """
    if len(datagram) != MOLD_HEADER_BYTES:
        raise FramingError(f"a MoldUDP64 re-request is {MOLD_HEADER_BYTES} bytes, got {len(datagram)}", 0)
    return MOLD_HEADER.unpack_from(datagram, 0)


def try_decode_packet(datagram) -> tuple[MoldPacket | None, MoldReason]:
    """Decode one MoldUDP64 datagram without raising: ``(packet, OK)`` or ``(None, reason)``."""
    n = len(datagram)
    if n < MOLD_HEADER_BYTES:
        return None, MoldReason.SHORT_HEADER
    session, seq, count = MOLD_HEADER.unpack_from(datagram, 0)
    if count == MOLD_HEARTBEAT or count == MOLD_END_OF_SESSION:
        if n != MOLD_HEADER_BYTES:
            return None, MoldReason.TRAILING_BYTES
        return MoldPacket(session, seq, count, ()), MoldReason.OK
    mv = memoryview(datagram)
    msgs = []
    o = MOLD_HEADER_BYTES
    for _ in range(count):
        if o + 2 > n:
            return None, MoldReason.TRUNCATED
        ln = (mv[o] << 8) | mv[o + 1]
        if ln == 0:
            return None, MoldReason.EMPTY_MESSAGE
        o += 2
        if o + ln > n:
            return None, MoldReason.TRUNCATED
        msgs.append(mv[o:o + ln])
        o += ln
    if o != n:
        return None, MoldReason.TRAILING_BYTES
    return MoldPacket(session, seq, count, tuple(msgs)), MoldReason.OK


def decode_packet(datagram) -> MoldPacket:
    """Decode one MoldUDP64 datagram.

    Raises:
        TruncatedFrame: shorter than its header, or a message block runs past the datagram.
        FramingError: bytes after the announced messages, or an empty message block.
    """
    packet, reason = try_decode_packet(datagram)
    if packet is not None:
        return packet
    msg = f"MoldUDP64 datagram of {len(datagram)} bytes rejected: {reason.name}"
    if reason in (MoldReason.SHORT_HEADER, MoldReason.TRUNCATED):
        raise TruncatedFrame(msg, 0)
    raise FramingError(msg, 0)


class SeqVerdict(NamedTuple):
    """What ``MoldSequencer`` says about one packet.

    ``deliver_from``: index of the first message of the packet to hand on (the ones before it are
    duplicates; ``== count`` when none is new). ``gap``: the sequence numbers that were skipped
    before this packet (``range(first_missing, next_received)``), or None. ``duplicates``: messages
    of this packet dropped as already seen. ``end_of_session``: this packet ended the session.
    ``foreign``: the packet belongs to another session and was ignored entirely.
    """

    deliver_from: int
    gap: range | None
    duplicates: int
    end_of_session: bool
    foreign: bool = False


class MoldSequencer:
    """Tracks the next expected MoldUDP64 sequence number; reports gaps, drops duplicates. Pure.

    Policy on a gap: report it (``SeqVerdict.gap``, also appended to ``gaps``) and move on, so the
    messages of the packet that revealed it are delivered and ``expected`` jumps past them. Messages
    of the gap that arrive later are then counted as duplicates: recovering them (re-request with
    ``encode_request``, or a snapshot) is the caller's decision, and an L3 book fed across a gap is
    not trustworthy until it is rebuilt.

    The first packet fixes the session when none is given; packets of another session are
    ignored (``foreign``). Sequence numbers start at 1 (``next_seq``).
    """

    def __init__(self, session: bytes | str | None = None, next_seq: int = 1) -> None:
        self.session = _session_bytes(session) if session is not None else None
        self.expected = next_seq
        self.gaps: list[range] = []
        self.missing = 0
        self.duplicates = 0
        self.delivered = 0
        self.foreign = 0
        self.ended = False

    def on_packet(self, session: bytes, seq: int, count: int) -> SeqVerdict:
        """Account for a packet with this header; see ``SeqVerdict`` for the answer."""
        if self.session is None:
            self.session = session
        elif session != self.session:
            self.foreign += 1
            n = 0 if count in (MOLD_HEARTBEAT, MOLD_END_OF_SESSION) else count
            return SeqVerdict(n, None, 0, False, True)
        is_end = count == MOLD_END_OF_SESSION
        n = 0 if (count == MOLD_HEARTBEAT or is_end) else count
        gap = None
        if seq > self.expected:
            gap = range(self.expected, seq)
            self.gaps.append(gap)
            self.missing += len(gap)
            self.expected = seq
        dup = min(max(self.expected - seq, 0), n)
        self.duplicates += dup
        self.delivered += n - dup
        if seq + n > self.expected:
            self.expected = seq + n
        if is_end:
            self.ended = True
        return SeqVerdict(dup, gap, dup, is_end)

    def on(self, packet: MoldPacket) -> SeqVerdict:
        """``on_packet`` for a decoded packet."""
        return self.on_packet(packet.session, packet.seq, packet.count)
