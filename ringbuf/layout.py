"""Binary layout of a ring segment, declared once.

Every byte offset the ring uses is named here, beside its diagram; nothing else in the project
computes an offset into a segment. ``tests/ringbuf/test_layout.py`` pins these bytes.

All integers are little-endian (the target is x86-64 Linux; the import fails elsewhere, since the
cursors are stored through native 8-byte stores).

Segment::

    0                                  512                 512 + slot_size
    +----------------------------------+-------------------+-------------------+-- ... --+
    | control block (CONTROL_BYTES)    | slot 0            | slot 1            |         |
    +----------------------------------+-------------------+-------------------+-- ... --+

Control block (each 8-byte word is aligned; the cursors sit alone on their 64-byte cache lines, and
the words one side writes share a line with no word the other side writes)::

    line  offset  size  field                 written by   meaning
    0        0     8    magic                 creator      b"SHMRING\\x00" as u64 LE
    0        8     4    version               creator      LAYOUT_VERSION
    0       12     4    slot_size             creator      bytes per slot, multiple of 64
    0       16     8    capacity              creator      slots, a power of two
    0       24     4    full_policy           creator      0 = drop, 1 = backpressure
    0       28     4    control_bytes         creator      offset of slot 0 (CONTROL_BYTES)
    1       64     8    write_cursor          writer       messages committed since creation
    2      128     8    read_cursor           reader       messages consumed (committed) since creation
    3      192     8    writer_pid            writer
    3      200     8    writer_heartbeat_ns   writer       CLOCK_MONOTONIC of the writer's last beat
    3      208     8    written               writer       messages committed (== write_cursor)
    3      216     8    dropped               writer       messages refused by a full `drop` ring
    3      224     8    full_events           writer       times the writer found the ring full
    3      232     8    stall_ns              writer       time a `backpressure` writer spent waiting
    4      256     8    reader_pid            reader
    4      264     8    reader_heartbeat_ns   reader
    4      272     8    read                  reader       messages consumed (== read_cursor)
    4      280     8    crc_errors            reader       corrupt or stale slots counted and skipped
    4      288     8    wakeups               reader       times a parked reader was woken
    4      296     8    missed_wakeups        reader       parks that timed out with data waiting
    5      320     8    reader_parked         reader       1 while the reader sleeps on the semaphore

Slot (one message; ``slot_size`` bytes, of which HEADER_BYTES + length are meaningful)::

     0                8        10       12               16
     +----------------+--------+--------+----------------+------------- ... ----+
     | ts_origin_ns   | kind   | length | crc32c         | payload (length bytes) |
     | u64 LE         | u16 LE | u16 LE | u32 LE         |                        |
     +----------------+--------+--------+----------------+------------- ... ----+

``crc32c`` is CRC-32C (Castagnoli) over: the slot's 64-bit sequence number (u64 LE, the value of the
write cursor when the message was written), then header bytes 0..11, then the payload. Seeding with
the sequence number makes a slot left from an earlier lap, or a torn write, fail the check.
"""

from __future__ import annotations

import struct
import sys

if sys.byteorder != "little":  # pragma: no cover - the project targets x86-64 Linux
    raise ImportError("ringbuf requires a little-endian machine (x86-64)")

MAGIC = int.from_bytes(b"SHMRING\x00", "little")
LAYOUT_VERSION = 1

CACHE_LINE_BYTES = 64
CONTROL_BYTES = 512
HEADER_BYTES = 16
SLOT_ALIGN_BYTES = 64
MAX_PAYLOAD_BYTES = 0xFFFF  # the length field is a u16

# Control block: byte offsets.
OFF_MAGIC = 0
OFF_VERSION = 8
OFF_SLOT_SIZE = 12
OFF_CAPACITY = 16
OFF_FULL_POLICY = 24
OFF_CONTROL_BYTES = 28
OFF_WRITE_CURSOR = 64
OFF_READ_CURSOR = 128
OFF_WRITER_PID = 192
OFF_WRITER_HEARTBEAT_NS = 200
OFF_WRITTEN = 208
OFF_DROPPED = 216
OFF_FULL_EVENTS = 224
OFF_STALL_NS = 232
OFF_READER_PID = 256
OFF_READER_HEARTBEAT_NS = 264
OFF_READ = 272
OFF_CRC_ERRORS = 280
OFF_WAKEUPS = 288
OFF_MISSED_WAKEUPS = 296
OFF_READER_PARKED = 320

# The same offsets as indexes of the control block viewed as u64 words (memoryview.cast("Q")).
# A store through such a view is one aligned 8-byte store; see the original design brief (not in this repository) on struct.pack_into.
W_WRITE_CURSOR = OFF_WRITE_CURSOR // 8
W_READ_CURSOR = OFF_READ_CURSOR // 8
W_WRITER_PID = OFF_WRITER_PID // 8
W_WRITER_HEARTBEAT_NS = OFF_WRITER_HEARTBEAT_NS // 8
W_WRITTEN = OFF_WRITTEN // 8
W_DROPPED = OFF_DROPPED // 8
W_FULL_EVENTS = OFF_FULL_EVENTS // 8
W_STALL_NS = OFF_STALL_NS // 8
W_READER_PID = OFF_READER_PID // 8
W_READER_HEARTBEAT_NS = OFF_READER_HEARTBEAT_NS // 8
W_READ = OFF_READ // 8
W_CRC_ERRORS = OFF_CRC_ERRORS // 8
W_WAKEUPS = OFF_WAKEUPS // 8
W_MISSED_WAKEUPS = OFF_MISSED_WAKEUPS // 8
W_READER_PARKED = OFF_READER_PARKED // 8

#: Geometry block at offset 0: magic, version, slot_size, capacity, full_policy, control_bytes.
GEOMETRY = struct.Struct("<QIIQII")
assert GEOMETRY.size == 32

#: Slot header: ts_origin_ns, kind, length, crc32c.
HEADER = struct.Struct("<QHHI")
assert HEADER.size == HEADER_BYTES

#: What the CRC covers before the payload: sequence number, then header bytes 0..11.
CRC_PREFIX = struct.Struct("<QQHH")
assert CRC_PREFIX.size == 8 + 12

POLICY_DROP = 0
POLICY_BACKPRESSURE = 1
POLICY_NAMES = {POLICY_DROP: "drop", POLICY_BACKPRESSURE: "backpressure"}
POLICY_CODES = {name: code for code, name in POLICY_NAMES.items()}


def slot_size_for(max_payload_bytes: int) -> int:
    """Smallest slot (a multiple of 64 bytes) that holds a header and ``max_payload_bytes``.

    Raises:
        ValueError: ``max_payload_bytes`` is negative or above MAX_PAYLOAD_BYTES.
    """
    if not 0 <= max_payload_bytes <= MAX_PAYLOAD_BYTES:
        raise ValueError(f"max_payload_bytes must be in 0..{MAX_PAYLOAD_BYTES}, got {max_payload_bytes}")
    need = HEADER_BYTES + max_payload_bytes
    return -(-need // SLOT_ALIGN_BYTES) * SLOT_ALIGN_BYTES


def segment_bytes(slot_size: int, capacity: int) -> int:
    """Total size of a segment with this geometry."""
    return CONTROL_BYTES + slot_size * capacity
