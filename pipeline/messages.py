"""Message kinds and payload layouts.

Kinds travel in the ring header's ``kind`` field (u16). Each payload layout is declared once,
here, with its offsets, and pinned by a golden-bytes test. Instruments are the small integer ids of
the config, never strings, on the hot path.

BOOK payload (504 bytes; numpy ``BOOK_DTYPE``), the top ``BOOK_LEVELS`` levels a side, best first;
levels past ``n_bids`` / ``n_asks`` are zero::

    offset  size  field
      0      2    instrument_id   u16
      2      2    flags           u16   BOOK_FLAG_* bits
      4      2    n_bids          u16   levels filled (0..15)
      6      2    n_asks          u16
      8      8    seq             u64   venue sequence number of the update that produced it
     16      8    exch_ts_ns      u64   venue timestamp, ns since the UNIX epoch (0 if none)
     24    120    bid_px          f64[15]
    144    120    bid_sz          f64[15]
    264    120    ask_px          f64[15]
    384    120    ask_sz          f64[15]

TRADE payload (40 bytes; numpy ``TRADE_DTYPE``)::

    offset  size  field
      0      2    instrument_id   u16
      2      1    side            u8    TRADE_SIDE_BUY (aggressor bought) or TRADE_SIDE_SELL
      3      5    (zero)
      8      8    trade_id        u64   venue trade id (0 if none)
     16      8    exch_ts_ns      u64
     24      8    price           f64
     32      8    size            f64

FEATURES payload (552 bytes; numpy ``FEATURES_DTYPE``), one per accepted BOOK; the 128 features
are laid out by the ``F_*`` index constants of ``pipeline.features`` (table in docs/ARCHITECTURE.md)::

    offset  size  field
      0      2    instrument_id   u16
      2      2    flags           u16   FEATURES_FLAG_* bits
      4      4    (zero)
      8      8    book_seq        u64   the BOOK's venue seq
     16      8    exch_ts_ns      u64   the BOOK's venue timestamp (0 if none)
     24      8    ref_mid         f64   (best bid + best ask) / 2, price units: the risk reference
     32      8    ref_spread      f64   best ask - best bid, price units
     40    512    features        f32[128]

SIGNAL payload (56 bytes; numpy ``SIGNAL_DTYPE``), one per FEATURES, from the fast classifier;
``probs`` are indexed by ``Label``::

    offset  size  field
      0      2    instrument_id   u16
      2      1    label           u8    Label
      3      1    flags           u8    SIGNAL_FLAG_* bits
      4      4    (zero)
      8      8    feature_seq     u64   the FEATURES' book_seq (the feature snapshot it was computed from)
     16      8    exch_ts_ns      u64   the FEATURES' venue timestamp
     24      8    ref_mid         f64   the FEATURES' reference mid
     32      8    ref_spread      f64   the FEATURES' reference spread
     40     16    probs           f32[4] HOLD, LEAN_BUY, LEAN_SELL, EMERGENCY

CONTROL payload (16 bytes)::

    0        2        4                8               16
    +--------+--------+----------------+----------------+
    | cmd    | reason | reserved (0)   | issued_ns      |
    | u16 LE | u16 LE | u32            | u64 LE         |
    +--------+--------+----------------+----------------+
"""

from __future__ import annotations

import enum
import struct

import numpy as np


class Kind(enum.IntEnum):
    """What a ring message carries."""

    BOOK = 1
    TRADE = 2
    FEATURES = 3
    SIGNAL = 4
    INSTRUCTION = 5
    ORDER = 6
    EXEC_REPORT = 7
    CONTROL = 8


class ControlCmd(enum.IntEnum):
    """CONTROL commands: imperatives for the risk gateway."""

    HALT = 1  # stop sending new orders; cancel working ones
    RESUME = 2  # back to ACTIVE
    KILL_SWITCH = 3  # HALT, cancel all, and stay halted until a person resumes
    REDUCE_ONLY = 4  # only exposure-reducing orders pass


class ControlReason(enum.IntEnum):
    """Why a CONTROL command was issued."""

    OPERATOR = 1  # a person, through the CLI
    STAGE_FATAL = 2  # the supervisor gave up restarting a stage
    SHUTDOWN = 3  # orderly `down`


OFF_CONTROL_CMD = 0
OFF_CONTROL_REASON = 2
OFF_CONTROL_ISSUED_NS = 8
CONTROL = struct.Struct("<HHIQ")
assert CONTROL.size == 16


def pack_control(cmd: ControlCmd, reason: ControlReason, issued_ns: int) -> bytes:
    """The CONTROL payload for ``cmd``."""
    return CONTROL.pack(int(cmd), int(reason), 0, issued_ns)


def unpack_control(payload) -> tuple[ControlCmd, ControlReason, int] | None:
    """Decode a CONTROL payload; None when it is malformed (wrong size or unknown codes)."""
    if len(payload) != CONTROL.size:
        return None
    cmd, reason, _, issued_ns = CONTROL.unpack_from(payload, 0)
    try:
        return ControlCmd(cmd), ControlReason(reason), issued_ns
    except ValueError:
        return None


BOOK_LEVELS = 15
BOOK_FLAG_SNAPSHOT = 1  # produced by a full snapshot (not an incremental update)
BOOK_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("flags", "<u2"), ("n_bids", "<u2"), ("n_asks", "<u2"),
    ("seq", "<u8"), ("exch_ts_ns", "<u8"),
    ("bid_px", "<f8", (BOOK_LEVELS,)), ("bid_sz", "<f8", (BOOK_LEVELS,)),
    ("ask_px", "<f8", (BOOK_LEVELS,)), ("ask_sz", "<f8", (BOOK_LEVELS,)),
])
assert BOOK_DTYPE.itemsize == 504

TRADE_SIDE_BUY = 1
TRADE_SIDE_SELL = 2
TRADE_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("side", "u1"), ("_pad", "V5"),
    ("trade_id", "<u8"), ("exch_ts_ns", "<u8"), ("price", "<f8"), ("size", "<f8"),
])
assert TRADE_DTYPE.itemsize == 40


FEATURES_LEN = 128
FEATURES_FLAG_WARMUP = 1  # first accepted BOOK of the instrument: no previous book (OFI, returns, volatility 0)
FEATURES_FLAG_SNAPSHOT = 2  # the BOOK carried BOOK_FLAG_SNAPSHOT
FEATURES_FLAG_NO_EXCH_TS = 4  # the BOOK had no venue timestamp: time decay used ts_origin_ns instead
FEATURES_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("flags", "<u2"), ("_pad", "V4"),
    ("book_seq", "<u8"), ("exch_ts_ns", "<u8"), ("ref_mid", "<f8"), ("ref_spread", "<f8"),
    ("features", "<f4", (FEATURES_LEN,)),
])
assert FEATURES_DTYPE.itemsize == 552
OFF_FEATURES_VECTOR = 40


class Label(enum.IntEnum):
    """The fast classifier's decision (SIGNAL ``label``; index into ``probs``)."""

    HOLD = 0
    LEAN_BUY = 1
    LEAN_SELL = 2
    EMERGENCY = 3  # informed / toxic flow: pull quotes now


SIGNAL_FLAG_WARMUP = 1  # the FEATURES carried FEATURES_FLAG_WARMUP
SIGNAL_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("label", "u1"), ("flags", "u1"), ("_pad", "V4"),
    ("feature_seq", "<u8"), ("exch_ts_ns", "<u8"), ("ref_mid", "<f8"), ("ref_spread", "<f8"),
    ("probs", "<f4", (4,)),
])
assert SIGNAL_DTYPE.itemsize == 56
