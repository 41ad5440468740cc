"""Whole-buffer ITCH 5.0 decode with numpy, plus the per-message baselines it is measured against.

``decode_buffer(buf)`` decodes a BinaryFILE held in memory in three steps:

1. scan: follow the u16 length prefixes (``framing.scan_frames``; the only per-message Python
   loop, since each prefix says where the next one is) into an array of message offsets;
2. classify, vectorized: type byte and framed length of every message; a message whose type is
   unknown or whose length is not its type's fixed length is counted and left out;
3. gather, per type: the buffer is viewed as one record of that type's big-endian dtype
   (``MsgSpec.dtype``) starting at *every* byte (``strides=(1,)``, zero-copy), and fancy indexing
   by the type's offsets copies the whole records at once into a structured array.

The arrays keep the wire layout: big-endian fields, alpha fields as ``S<n>`` (numpy drops trailing
NUL bytes of those on access; ITCH pads with spaces), and the u48 timestamp as ``timestamp_hi``
(u16) / ``timestamp_lo`` (u32), joined by ``timestamps_ns``. ``DecodedBuffer.positions[t]`` gives
the message index of each row, so the original order can be replayed (``book.L3Book.apply_decoded``,
``to_records``).

Baselines, for the bench: ``decode_baseline`` (plain loop: prefix then ``struct.unpack_from`` of the
type's layout, tuples out) and ``decode_stream`` (what the streaming feed does: ``scan_frames`` then
``messages.decode`` per message, records out). ``measure_msgs_per_s`` times any of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.framing import scan_frames

#: Fixed length by type byte (0 where the byte is not an ITCH 5.0 type).
_LENGTH_TABLE = np.zeros(256, dtype=np.int64)
for _spec in M.SPECS:
    _LENGTH_TABLE[_spec.type_code] = _spec.length


@dataclass(frozen=True)
class DecodedBuffer:
    """Result of ``decode_buffer``.

    ``offsets``/``codes``: start and type byte of every framed message, in order (int64 / uint8).
    ``valid``: per message, known type and right length. ``by_type[c]``: the structured array of
    every valid message of type character ``c`` (only types present), rows in message order;
    ``positions[c]``: the message index of each of those rows. ``ended``/``truncated``: how the
    data ended (see ``framing.FrameScan``). ``unknown_type``/``wrong_length``: messages left out.
    """

    offsets: np.ndarray
    codes: np.ndarray
    valid: np.ndarray
    by_type: dict[str, np.ndarray]
    positions: dict[str, np.ndarray]
    ended: bool
    truncated: bool
    unknown_type: int
    wrong_length: int

    @property
    def n_messages(self) -> int:
        """Framed messages found, valid or not."""
        return len(self.offsets)

    @property
    def n_valid(self) -> int:
        return self.n_messages - self.unknown_type - self.wrong_length


def decode_buffer(buf, *, skip_empty: bool = False) -> DecodedBuffer:
    """Decode every message of the BinaryFILE data in ``buf`` (bytes-like) into per-type arrays.

    Never raises on bad data: unknown types and wrong lengths are counted and left out, a
    truncated end is flagged (``truncated``), a missing end marker shows as ``ended == False``.
    """
    scan = scan_frames(buf, skip_empty=skip_empty)
    raw = np.frombuffer(buf, dtype=np.uint8)
    offsets = np.array(scan.offsets, dtype=np.int64)
    codes = raw[offsets]
    lengths = (raw[offsets - 2].astype(np.int64) << 8) | raw[offsets - 1]
    expected = _LENGTH_TABLE[codes]
    valid = lengths == expected
    unknown = int(np.count_nonzero(expected == 0))
    wrong = int(len(offsets) - unknown - np.count_nonzero(valid))

    # Group message indexes by type: a stable sort of the type bytes keeps message order within a type.
    keyed = np.where(valid, codes, 0).astype(np.uint8)
    order = np.argsort(keyed, kind="stable")
    counts = np.bincount(keyed, minlength=256)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    by_type: dict[str, np.ndarray] = {}
    positions: dict[str, np.ndarray] = {}
    nbytes = len(raw)
    for spec in M.SPECS:
        c = spec.type_code
        if not counts[c]:
            continue
        pos = order[bounds[c]:bounds[c + 1]]
        every_byte = np.ndarray(shape=(nbytes - spec.length + 1,), dtype=spec.dtype, buffer=buf,
                                offset=0, strides=(1,))
        by_type[spec.type_char] = every_byte[offsets[pos]]
        positions[spec.type_char] = pos
    return DecodedBuffer(offsets, codes, valid, by_type, positions, scan.ended, scan.truncated, unknown, wrong)


def timestamps_ns(arr: np.ndarray) -> np.ndarray:
    """The u48 timestamps of a per-type array, as uint64 nanoseconds since midnight."""
    return (arr["timestamp_hi"].astype(np.uint64) << np.uint64(32)) | arr["timestamp_lo"].astype(np.uint64)


def column_lists(arr: np.ndarray, spec: M.MsgSpec) -> list[list]:
    """The record fields of every row as Python lists, in ``spec.record_fields`` order.

    Alpha fields come back byte-exact (NUL bytes included), as ``bytes``.
    """
    cols = [arr["stock_locate"].tolist(), arr["tracking_number"].tolist(), timestamps_ns(arr).tolist()]
    for f in spec.fields:
        col = arr[f.name]
        cols.append(col.view(f"V{f.size_bytes}").tolist() if f.is_alpha else col.tolist())
    return cols


def to_records(decoded: DecodedBuffer) -> list:
    """The valid messages of ``decoded`` as records, in message order (slow path; tests, tools)."""
    out: list = [None] * decoded.n_messages
    for char, arr in decoded.by_type.items():
        spec = M.SPECS_BY_CHAR[char]
        cls = spec.record
        for i, vals in zip(decoded.positions[char].tolist(), zip(*column_lists(arr, spec))):
            out[i] = cls(*vals)
    return [r for r in out if r is not None]


# ------------------------------------------------------------------------------------ baselines

_UNPACK_BY_CODE: list = [None] * 256
for _spec in M.SPECS:
    _UNPACK_BY_CODE[_spec.type_code] = (_spec.length, _spec.struct.unpack_from)


def decode_baseline(buf) -> list[tuple]:
    """Plain per-message loop: read the prefix, ``struct.unpack_from`` the type's layout.

    Returns one raw tuple per valid message (type byte, stock_locate, tracking_number, ts_hi,
    ts_lo, body fields...); bad frames are skipped; stops at the end marker or a truncated frame.
    """
    out = []
    add = out.append
    table = _UNPACK_BY_CODE
    n = len(buf)
    o = 0
    while o + 2 <= n:
        ln = (buf[o] << 8) | buf[o + 1]
        if ln == 0 or o + 2 + ln > n:
            break
        entry = table[buf[o + 2]]
        if entry is not None and entry[0] == ln:
            add(entry[1](buf, o + 2))
        o += 2 + ln
    return out


def decode_stream(buf) -> list:
    """The streaming path: ``scan_frames``, then ``messages.try_decode`` of each framed message.

    Returns the valid records in order; bad messages are skipped (the feed counts them).
    """
    out = []
    add = out.append
    try_decode = M.try_decode
    for off in scan_frames(buf).offsets:
        rec, _ = try_decode(buf, off, (buf[off - 2] << 8) | buf[off - 1])
        if rec is not None:
            add(rec)
    return out


def msgs_per_s_runs(fn: Callable, buf, n_messages: int, *, repeat: int = 5) -> list[float]:
    """Messages per second of ``fn(buf)`` over ``n_messages`` messages, one figure per run, ``repeat``
    runs in order."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn(buf)
        out.append(n_messages * 1e9 / max(time.perf_counter_ns() - t0, 1))
    return out


def measure_msgs_per_s(fn: Callable, buf, n_messages: int, *, repeat: int = 5) -> float:
    """Messages per second of ``fn(buf)`` over ``n_messages`` messages: the best of ``repeat`` runs
    (``msgs_per_s_runs``; a report must say "best of N" beside the median)."""
    return max(msgs_per_s_runs(fn, buf, n_messages, repeat=repeat))
