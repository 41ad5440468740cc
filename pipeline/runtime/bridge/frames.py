"""The bridge's wire frames, declared once, sans I/O (pinned by golden-bytes tests).

Every ZeroMQ message of the bridge is a multipart message whose first frame after the routing frames
(PUB's topic, ROUTER's peer identity) is the 32-byte HEADER; no message is pickled. Little-endian::

    HEADER (32 bytes, HEADER_STRUCT "<HBBHHIIQQ")
    offset  size  field
      0      2    magic      u16   0x5242 (b"BR")
      2      1    version    u8    1
      3      1    msg_type   u8    MsgType
      4      2    shard_id   u16   the sending shard (0: a market-data publisher or the gateway)
      6      2    code       u16   MD / SNAP_ITEM: the ring kind; EXEC: the gateway's DenyReason (0: approved);
                                    REFUSED: RefuseReason; WELCOME: WelcomeCode; else 0
      8      4    epoch      u32   the sender's start epoch (random, new at each start; 0 never used)
     12      4    count      u32   SNAP_END: items sent; HELLO: instruments claimed; WELCOME: state
                                    reports in its body; else 0
     16      8    seq        u64   MD / SNAP_ITEM: the topic's sequence (from 1); SNAP_REQ / SNAP_END: 0;
                                    INTENT / EXEC: the client order id; HEARTBEAT: the sender's beat count
     24      8    ts_ns      u64   the ring message's ts_origin_ns (MD, INTENT, EXEC); the send time otherwise

Messages (frames in order; ``[id]`` is the ROUTER side's identity frame)::

    MD         PUB -> SUB        topic | HEADER | payload (the ring payload, <= MAX_MD_PAYLOAD_BYTES)
    SNAP_REQ   DEALER -> ROUTER  HEADER | u16[] instrument ids wanted (empty: all)
    SNAP_ITEM  ROUTER -> DEALER  [id] | topic | HEADER | payload (the topic's last full state; may be empty)
    SNAP_END   ROUTER -> DEALER  [id] | HEADER
    HELLO      DEALER -> ROUTER  HEADER | u16[count] instrument ids the shard owns
    WELCOME    ROUTER -> DEALER  [id] | HEADER | state (count x 56 bytes: EXEC_REPORT payloads, the
                                  shard's state in the gateway's ledger: a POSITION per owned instrument,
                                  a POSITION_MISMATCH per owned instrument the last state report of the
                                  gateway's sender found apart from the venue (STATE_CHANGED only), an
                                  OPEN_ORDER per working order, SYNC_DONE; the frame absent when 0).
                                  Also sent unasked (code STATE_CHANGED) to every live shard when the
                                  gateway's ledger was replaced by its sender's state report
    REFUSED    ROUTER -> DEALER  [id] | HEADER (code = RefuseReason)
    INTENT     DEALER -> ROUTER  HEADER | INTENT body (56 bytes)
    EXEC       ROUTER -> DEALER  [id] | HEADER | EXEC_REPORT payload (56 bytes, ``messages.EXEC_STRUCT``)
    HEARTBEAT  both ways         HEADER

    topic (3 bytes): b"M" | instrument_id u16 big-endian (all topics one length: a SUB prefix is exact)

    INTENT body (56 bytes)
    offset  size  field
      0     48    order      the local risk gateway's ORDER payload (``messages.ORDER_STRUCT``, cmd NEW)
     48      8    ref_mid    f64   the shard's reference mid when it decided (the shared gateway's collar
                                    and notional reference)

Decoding raises ``FrameError`` for anything malformed (frame count, sizes, magic, version, type); the
shells count and drop such messages.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from pipeline.trading.messages import EXEC_STRUCT, ORDER_STRUCT, OrderRecord, decode_order

MAGIC = 0x5242
VERSION = 1
HEADER_STRUCT = struct.Struct("<HBBHHIIQQ")
assert HEADER_STRUCT.size == 32
TOPIC_STRUCT = struct.Struct(">cH")
TOPIC_PREFIX = b"M"
REF_STRUCT = struct.Struct("<d")
INTENT_BYTES = ORDER_STRUCT.size + REF_STRUCT.size
assert INTENT_BYTES == 56
EXEC_BYTES = EXEC_STRUCT.size
assert EXEC_BYTES == INTENT_BYTES  # one body size for both
MAX_MD_PAYLOAD_BYTES = 65_535
MAX_INSTRUMENTS = 4_096  # per HELLO / SNAP_REQ
MAX_STATE_REPORTS = 65_536  # per WELCOME


class MsgType(enum.IntEnum):
    MD = 1
    SNAP_REQ = 2
    SNAP_ITEM = 3
    SNAP_END = 4
    HELLO = 5
    WELCOME = 6
    REFUSED = 7
    INTENT = 8
    EXEC = 9
    HEARTBEAT = 10


class RefuseReason(enum.IntEnum):
    """Why the gateway refused a shard's HELLO (the REFUSED header's code)."""

    UNKNOWN_SHARD = 1  # the shard id is not in the gateway's config
    CLAIM_MISMATCH = 2  # it claims instruments other than those its config entry owns
    OWNED_ELSEWHERE = 3  # it claims an instrument another shard owns
    HALTED_SILENT = 4  # the gateway halted the shard for silence: say HELLO again (not final)
    NOT_SYNCED = 5  # the gateway has no state report of its sender yet: say HELLO again (not final)


class WelcomeCode(enum.IntEnum):
    """What a WELCOME's state is (its header's code)."""

    JOINED = 0  # the answer to a HELLO: the shard's state as the gateway holds it
    STATE_CHANGED = 1  # the gateway's ledger was replaced (its sender's state report): the shard's state is this


class FrameError(ValueError):
    """A malformed bridge message (wrong frame count, size, magic, version or type)."""


class Header(NamedTuple):
    msg_type: int
    shard_id: int
    code: int
    epoch: int
    count: int
    seq: int
    ts_ns: int


def pack_header(msg_type: MsgType, *, shard_id: int = 0, code: int = 0, epoch: int = 0, count: int = 0,
                seq: int = 0, ts_ns: int = 0) -> bytes:
    """The 32-byte HEADER. Raises struct.error for a field out of its range."""
    return HEADER_STRUCT.pack(MAGIC, VERSION, msg_type, shard_id, code, epoch, count, seq, ts_ns)


def unpack_header(frame) -> Header:
    """Decode a HEADER frame.

    Raises:
        FrameError: not 32 bytes, wrong magic or version, or an unknown message type.
    """
    if len(frame) != HEADER_STRUCT.size:
        raise FrameError(f"header of {len(frame)} bytes, want {HEADER_STRUCT.size}")
    magic, version, mtype, shard, code, epoch, count, seq, ts = HEADER_STRUCT.unpack(frame)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic:#06x}")
    if version != VERSION:
        raise FrameError(f"unsupported version {version}")
    if mtype not in _TYPES:
        raise FrameError(f"unknown message type {mtype}")
    return Header(mtype, shard, code, epoch, count, seq, ts)


_TYPES = frozenset(int(t) for t in MsgType)


def topic_for(instrument_id: int) -> bytes:
    """The PUB topic of an instrument (3 bytes)."""
    return TOPIC_STRUCT.pack(TOPIC_PREFIX, instrument_id)


def instrument_of(topic) -> int:
    """The instrument id of a topic frame. Raises FrameError: not a 3-byte b"M" topic."""
    if len(topic) != TOPIC_STRUCT.size or bytes(topic[:1]) != TOPIC_PREFIX:
        raise FrameError(f"bad topic {bytes(topic)[:8]!r}")
    return TOPIC_STRUCT.unpack(topic)[1]


def md_frames(msg_type: MsgType, instrument_id: int, kind: int, seq: int, epoch: int, ts_ns: int,
              payload: bytes) -> list[bytes]:
    """An MD or SNAP_ITEM message: [topic, header, payload]."""
    return [topic_for(instrument_id), pack_header(msg_type, code=kind, epoch=epoch, seq=seq, ts_ns=ts_ns), payload]


def parse_md(frames: list) -> tuple[int, Header, bytes]:
    """(instrument id, header, payload) of an MD or SNAP_ITEM message [topic, header, payload].

    Raises:
        FrameError: not three frames, a bad topic or header, another message type, a payload over
            MAX_MD_PAYLOAD_BYTES.
    """
    if len(frames) != 3:
        raise FrameError(f"market data of {len(frames)} frames, want 3")
    instrument = instrument_of(frames[0])
    hdr = unpack_header(frames[1])
    if hdr.msg_type not in (MsgType.MD, MsgType.SNAP_ITEM):
        raise FrameError(f"message type {hdr.msg_type} on the market data path")
    if len(frames[2]) > MAX_MD_PAYLOAD_BYTES:
        raise FrameError(f"payload of {len(frames[2])} bytes")
    return instrument, hdr, bytes(frames[2])


def pack_ids(ids) -> bytes:
    """A u16[] body (HELLO, SNAP_REQ)."""
    return struct.pack(f"<{len(ids)}H", *ids)


def unpack_ids(body) -> list[int]:
    """Decode a u16[] body. Raises FrameError: odd length or more than MAX_INSTRUMENTS ids."""
    n, rest = divmod(len(body), 2)
    if rest or n > MAX_INSTRUMENTS:
        raise FrameError(f"instrument list of {len(body)} bytes")
    return list(struct.unpack(f"<{n}H", body))


def parse_control(frames: list) -> tuple[Header, bytes]:
    """(header, body) of a non-market-data message [header] or [header, body] (ROUTER's identity
    frame already removed); body b"" when absent.

    Raises:
        FrameError: another frame count, a bad header, or a body whose size its type does not allow
            (INTENT and EXEC: 56 bytes; HELLO: 2 x count; WELCOME: 56 x count; SNAP_REQ: u16[]; the
            others: none).
    """
    if not 1 <= len(frames) <= 2:
        raise FrameError(f"{len(frames)} frames, want 1 or 2")
    hdr = unpack_header(frames[0])
    body = bytes(frames[1]) if len(frames) == 2 else b""
    t = hdr.msg_type
    if t in (MsgType.INTENT, MsgType.EXEC):
        if len(body) != INTENT_BYTES:
            raise FrameError(f"{MsgType(t).name} body of {len(body)} bytes, want {INTENT_BYTES}")
    elif t == MsgType.HELLO:
        if len(body) != 2 * hdr.count or hdr.count > MAX_INSTRUMENTS:
            raise FrameError(f"HELLO of {len(body)} bytes for {hdr.count} instruments")
    elif t == MsgType.WELCOME:
        if len(body) != EXEC_BYTES * hdr.count or hdr.count > MAX_STATE_REPORTS:
            raise FrameError(f"WELCOME of {len(body)} bytes for {hdr.count} state reports")
    elif t == MsgType.SNAP_REQ:
        unpack_ids(body)
    elif t in (MsgType.MD, MsgType.SNAP_ITEM):
        raise FrameError(f"{MsgType(t).name} without its topic")
    elif body:
        raise FrameError(f"{MsgType(t).name} with a body of {len(body)} bytes")
    return hdr, body


def pack_intent(order_payload, ref_mid: float) -> bytes:
    """The INTENT body. Raises FrameError: the ORDER payload is not 48 bytes."""
    if len(order_payload) != ORDER_STRUCT.size:
        raise FrameError(f"ORDER payload of {len(order_payload)} bytes")
    return bytes(order_payload) + REF_STRUCT.pack(ref_mid)


def unpack_intent(body) -> tuple[OrderRecord, float]:
    """(the ORDER, ref_mid) of an INTENT body. Raises FrameError: not 56 bytes."""
    if len(body) != INTENT_BYTES:
        raise FrameError(f"INTENT body of {len(body)} bytes")
    return decode_order(body[:ORDER_STRUCT.size]), REF_STRUCT.unpack_from(body, ORDER_STRUCT.size)[0]
