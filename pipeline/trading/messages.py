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
      3      1    flags           u8    TRADE_FLAG_* bits (0 from every venue but ITCH)
      4      4    (zero)
      8      8    trade_id        u64   venue trade id (0 if none)
     16      8    exch_ts_ns      u64
     24      8    price           f64
     32      8    size            f64

FEATURES payload (552 bytes; numpy ``FEATURES_DTYPE``), one per accepted BOOK; the 128 features
are laid out by the ``F_*`` index constants of ``pipeline.trading.features`` (table in docs/ARCHITECTURE.md)::

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
``probs`` are indexed by ``Label``; ``flags`` bits: ``SIGNAL_FLAG_WARMUP`` (1: the FEATURES carried
``FEATURES_FLAG_WARMUP``), ``SIGNAL_FLAG_AT_RISK_BID`` (2) / ``SIGNAL_FLAG_AT_RISK_ASK``
(4: on an EMERGENCY only, the side whose resting orders at the touch the model expects to be filled and
then lose; at most one of the two; neither: the side is not known, pull both),
``SIGNAL_FLAG_OUT_OF_RANGE`` (8: a feature lay outside the model card's training bounds, so the label is
HOLD whatever the model said; never with a side bit), ``SIGNAL_FLAG_STALE_BOOK`` (16: the book was
rebuilding, crossed or invalid; a LEAN becomes HOLD, an EMERGENCY stays)::

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

SIGNAL with depth (296 bytes; numpy ``SIGNAL_DEPTH_DTYPE``, kind SIGNAL, written by a fast stage with
``signal_depth = true``): the 56-byte SIGNAL above followed by the book's levels as its FEATURES vector
carries them (slots ``F_BID_DIST_0`` .. ``F_ASK_SIZE_0 + 14`` of ``pipeline.trading.features``, copied
as one block), so the risk gateway's depth-aware planner sees the displayed volume at the signal; a
level past the book's ``n_bids`` / ``n_asks`` is 0 / 0. The gateway reads a SIGNAL of either size::

    offset  size  field
      0     56    (the SIGNAL above)
     56     60    depth_bid_dist  f32[15] (mid - bid_px[i]) / tick, best first
    116     60    depth_ask_dist  f32[15] (ask_px[i] - mid) / tick
    176     60    depth_bid_sz    f32[15] bid_sz[i], base units
    236     60    depth_ask_sz    f32[15] ask_sz[i]

On ``sig_llm`` the fast stage sends SIGNAL_CTX (568 bytes; numpy ``SIGNAL_CTX_DTYPE``, kind SIGNAL_CTX):
the SIGNAL above followed by the FEATURES vector it was computed from (``f32[128]`` at offset 56), so
the LLM hub can describe the book without a second ring.

INSTRUCTION payload (48 bytes; numpy ``INSTRUCTION_DTYPE``), LLM hub -> risk, validated before it is
written; ``target_lots`` is the wanted position in lots (``lot_size`` units), signed::

    offset  size  field
      0      2    instrument_id       u16
      2      1    action              u8    Action
      3      1    flags               u8    (zero)
      4      4    limit_offset_ticks  i32   extra passive offset from the mid the hub asks for (>= 0)
      8      8    target_lots         i64
     16      8    signal_seq          u64   the SIGNAL's feature_seq it answers
     24      8    issued_ns           u64   CLOCK_MONOTONIC when the hub emitted it
     32      4    ttl_ms              u32   risk discards it after issued_ns + ttl_ms
     36      4    confidence          f32   0..1
     40      8    instruction_id      u64   the hub's own sequence, from 1

ORDER payload (48 bytes; numpy ``ORDER_DTYPE``), risk -> sender; commands are imperatives. ``flags``
bits: ``ORDER_FLAG_REDUCE_ONLY`` (1: a perpetual's order that may only reduce the position, which the
sender places with ``reduceOnly = "YES"``; the risk gateway sets it, never for spot)::

    offset  size  field
      0      2    instrument_id   u16
      2      1    cmd             u8    OrderCmd
      3      1    side            u8    Side (0 for cancels)
      4      1    tif             u8    TimeInForce (0 for cancels)
      5      1    origin          u8    OrderOrigin: which path decided it
      6      1    flags           u8    ORDER_FLAG_* bits (NEW only; 0 for the other commands)
      7      1    (zero)
      8      8    order_id        u64   NEW: the new order's id (``order_id_for``); CANCEL: the order to cancel
     16      8    price           f64   NEW only
     24      8    size            f64   NEW only, base units
     32      8    origin_seq      u64   the SIGNAL / INSTRUCTION sequence the decision came from
     40      8    decided_ns      u64   CLOCK_MONOTONIC of the risk decision

EXEC_REPORT payload (56 bytes; numpy ``EXEC_DTYPE``), sender -> risk; events, past tense::

    offset  size  field
      0      2    instrument_id   u16
      2      1    exec_type       u8    ExecType
      3      1    side            u8    Side
      4      2    reason          u16   ExecReason (REJECTED / UNKNOWN), else 0
      6      2    (zero)
      8      8    order_id        u64
     16      8    price           f64   ACK: order price; FILL: fill price; POSITION: average entry price
     24      8    size            f64   ACK: order size; FILL: fill size; POSITION: signed position (base units)
     32      8    leaves          f64   size still working after this event
     40      8    venue_ts_ns     u64   the venue's timestamp, ns since the epoch (0 if none)
     48      8    fill_id         u64   FILL: the venue's trade id; else 0

POSITION payload (24 bytes; ``POSITION_STRUCT``), risk -> llm, the gateway's view of one instrument's
position whenever it changes (a full state: the latest supersedes every earlier one)::

    offset  size  field
      0      2    instrument_id   u16
      2      6    (zero)
      8      8    lots            i64   signed position in lots (lot_size units)
     16      8    as_of_ns        u64   CLOCK_MONOTONIC when the gateway's position changed

CONTROL payload (16 bytes)::

    0        2        4                8               16
    +--------+--------+----------------+----------------+
    | cmd    | reason | reserved (0)   | issued_ns      |
    | u16 LE | u16 LE | u32            | u64 LE         |
    +--------+--------+----------------+----------------+
"""

from __future__ import annotations

import enum
import hashlib
import struct
from typing import NamedTuple

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
    SIGNAL_CTX = 9
    POSITION = 10


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
    LATENCY_BUDGET = 4  # the supervisor's latency guard: a stage's p99 stayed over its budget


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
BOOK_FLAG_HIDDEN_REPORTED = 2  # the venue reports non-displayed executions (TRADE_FLAG_HIDDEN) of this instrument
BOOK_FLAG_REBUILDING = 4  # a feed sequence gap is open (or being replayed): the book may miss updates (stale)
BOOK_FLAG_CROSSED = 8  # best bid >= best ask (locked or crossed) as the venue's own messages left it
BOOK_FLAG_INVALID = 16  # an unrecoverable gap left this book inconsistent until the next consistent state
#: the BOOK flags that make a book stale for trading (features: FEATURES_FLAG_STALE_BOOK)
BOOK_FLAGS_STALE = BOOK_FLAG_REBUILDING | BOOK_FLAG_CROSSED | BOOK_FLAG_INVALID
BOOK_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("flags", "<u2"), ("n_bids", "<u2"), ("n_asks", "<u2"),
    ("seq", "<u8"), ("exch_ts_ns", "<u8"),
    ("bid_px", "<f8", (BOOK_LEVELS,)), ("bid_sz", "<f8", (BOOK_LEVELS,)),
    ("ask_px", "<f8", (BOOK_LEVELS,)), ("ask_sz", "<f8", (BOOK_LEVELS,)),
])
assert BOOK_DTYPE.itemsize == 504
BOOK_HEAD_STRUCT = struct.Struct("<HHHHQQ")  # the fields before the levels (pinned against BOOK_DTYPE by a test)
assert BOOK_HEAD_STRUCT.size == 24

TRADE_SIDE_BUY = 1
TRADE_SIDE_SELL = 2
TRADE_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("side", "u1"), ("flags", "u1"), ("_pad", "V4"),
    ("trade_id", "<u8"), ("exch_ts_ns", "<u8"), ("price", "<f8"), ("size", "<f8"),
])
assert TRADE_DTYPE.itemsize == 40
TRADE_STRUCT = struct.Struct("<HB5xQQdd")  # TRADE_DTYPE as a struct, flags left 0 (pinned against it by a test)
OFF_TRADE_FLAGS = 3
#: an execution against a non-displayed order (ITCH 'P'); its side is the resting order's indicator as the
#: venue gave it, not an aggressor side
TRADE_FLAG_HIDDEN = 1
assert TRADE_STRUCT.size == TRADE_DTYPE.itemsize


FEATURES_LEN = 128
FEATURES_FLAG_WARMUP = 1  # first accepted BOOK of the instrument: no previous book (OFI, returns, volatility 0)
FEATURES_FLAG_SNAPSHOT = 2  # the BOOK carried BOOK_FLAG_SNAPSHOT
FEATURES_FLAG_NO_EXCH_TS = 4  # the BOOK had no venue timestamp: time decay used ts_origin_ns instead
FEATURES_FLAG_NO_HIDDEN = 8  # the venue does not report non-displayed executions: the hidden-order slots are 0
FEATURES_FLAG_NO_BASIS = 16  # no spot-perpetual pair (or no book of the other leg yet): the basis slots are 0
FEATURES_FLAG_STALE_BOOK = 32  # the BOOK carried a BOOK_FLAGS_STALE bit (rebuilding, crossed, invalid): no new risk
FEATURES_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("flags", "<u2"), ("_pad", "V4"),
    ("book_seq", "<u8"), ("exch_ts_ns", "<u8"), ("ref_mid", "<f8"), ("ref_spread", "<f8"),
    ("features", "<f4", (FEATURES_LEN,)),
])
assert FEATURES_DTYPE.itemsize == 552
OFF_FEATURES_VECTOR = 40
FEATURES_HEAD_STRUCT = struct.Struct("<HH4xQQdd")  # the fields before the vector (pinned by a test)
assert FEATURES_HEAD_STRUCT.size == OFF_FEATURES_VECTOR


class Label(enum.IntEnum):
    """The fast classifier's decision (SIGNAL ``label``; index into ``probs``)."""

    HOLD = 0
    LEAN_BUY = 1
    LEAN_SELL = 2
    EMERGENCY = 3  # informed / toxic flow: pull quotes now


SIGNAL_FLAG_WARMUP = 1  # the FEATURES carried FEATURES_FLAG_WARMUP
SIGNAL_FLAG_AT_RISK_BID = 2  # EMERGENCY: our bids at the touch are the ones at risk (cancel the bids)
SIGNAL_FLAG_AT_RISK_ASK = 4  # EMERGENCY: our asks at the touch are the ones at risk (cancel the asks)
SIGNAL_FLAG_OUT_OF_RANGE = 8  # HOLD because an input lay outside the model card's bounds
SIGNAL_FLAG_STALE_BOOK = 16  # the FEATURES carried FEATURES_FLAG_STALE_BOOK: no LEAN; risk takes no new orders
SIGNAL_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("label", "u1"), ("flags", "u1"), ("_pad", "V4"),
    ("feature_seq", "<u8"), ("exch_ts_ns", "<u8"), ("ref_mid", "<f8"), ("ref_spread", "<f8"),
    ("probs", "<f4", (4,)),
])
assert SIGNAL_DTYPE.itemsize == 56
SIGNAL_STRUCT = struct.Struct("<HBB4xQQdd4f")  # SIGNAL_DTYPE as a struct (pinned against it by a test)
assert SIGNAL_STRUCT.size == SIGNAL_DTYPE.itemsize

#: SIGNAL with depth: the SIGNAL, then the FEATURES vector's level block (module docstring)
SIGNAL_DEPTH_LEVELS = BOOK_LEVELS
SIGNAL_DEPTH_DTYPE = np.dtype(SIGNAL_DTYPE.descr + [
    ("depth_bid_dist", "<f4", (SIGNAL_DEPTH_LEVELS,)), ("depth_ask_dist", "<f4", (SIGNAL_DEPTH_LEVELS,)),
    ("depth_bid_sz", "<f4", (SIGNAL_DEPTH_LEVELS,)), ("depth_ask_sz", "<f4", (SIGNAL_DEPTH_LEVELS,)),
])
assert SIGNAL_DEPTH_DTYPE.itemsize == 296
OFF_SIGNAL_DEPTH = SIGNAL_DTYPE.itemsize  # 56: where the depth block starts
OFF_DEPTH_BID_DIST, OFF_DEPTH_ASK_DIST, OFF_DEPTH_BID_SZ, OFF_DEPTH_ASK_SZ = 56, 116, 176, 236
SIGNAL_DEPTH_BYTES = SIGNAL_DEPTH_DTYPE.itemsize


SIGNAL_CTX_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("label", "u1"), ("flags", "u1"), ("_pad", "V4"),
    ("feature_seq", "<u8"), ("exch_ts_ns", "<u8"), ("ref_mid", "<f8"), ("ref_spread", "<f8"),
    ("probs", "<f4", (4,)), ("features", "<f4", (FEATURES_LEN,)),
])
assert SIGNAL_CTX_DTYPE.itemsize == 568


class Action(enum.IntEnum):
    """What an INSTRUCTION asks for."""

    HOLD = 0  # keep the position; nothing to do
    BUY = 1  # move the position up to target_lots
    SELL = 2  # move the position down to target_lots
    FLATTEN = 3  # target 0
    CANCEL = 4  # cancel the instrument's working orders


INSTRUCTION_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("action", "u1"), ("flags", "u1"), ("limit_offset_ticks", "<i4"),
    ("target_lots", "<i8"), ("signal_seq", "<u8"), ("issued_ns", "<u8"), ("ttl_ms", "<u4"),
    ("confidence", "<f4"), ("instruction_id", "<u8"),
])
assert INSTRUCTION_DTYPE.itemsize == 48
INSTRUCTION_STRUCT = struct.Struct("<HBBiqQQIfQ")  # INSTRUCTION_DTYPE as a struct (pinned against it by a test)
assert INSTRUCTION_STRUCT.size == INSTRUCTION_DTYPE.itemsize


class OrderCmd(enum.IntEnum):
    """ORDER commands, risk -> sender."""

    NEW = 1  # SubmitOrder
    CANCEL = 2  # CancelOrder (order_id)
    CANCEL_ALL = 3  # CancelAllOrders of the instrument
    SYNC = 4  # ReportState: the sender answers with POSITION / OPEN_ORDER reports, then SYNC_DONE


class Side(enum.IntEnum):
    BUY = 1
    SELL = 2


class TimeInForce(enum.IntEnum):
    GTC = 1
    POST_ONLY = 2
    IOC = 3


class OrderOrigin(enum.IntEnum):
    """Which path an ORDER came from (for the audit log and the bench's per-path latencies)."""

    UNSPECIFIED = 0
    FAST = 1  # a fast-path SIGNAL (EMERGENCY cancel-all, a lean order)
    LLM = 2  # an INSTRUCTION of the LLM hub
    RISK = 3  # the gateway's own management: reprice / cancel on a price move, limits, CONTROL


#: ORDER flags: the order may only reduce the position (a perpetual's ``reduceOnly``; never set for spot,
#: which has no such order)
ORDER_FLAG_REDUCE_ONLY = 1
ORDER_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("cmd", "u1"), ("side", "u1"), ("tif", "u1"), ("origin", "u1"), ("flags", "u1"),
    ("_pad", "V1"),
    ("order_id", "<u8"), ("price", "<f8"), ("size", "<f8"), ("origin_seq", "<u8"), ("decided_ns", "<u8"),
])
assert ORDER_DTYPE.itemsize == 48

# the same 48 bytes for the sender's hot path: struct is a small fraction of numpy's per-record code
ORDER_STRUCT = struct.Struct("<HBBBBBxQddQQ")
assert ORDER_STRUCT.size == ORDER_DTYPE.itemsize


class OrderRecord(NamedTuple):
    """One decoded ORDER payload (fields as ``ORDER_DTYPE``, without the padding). The fields from
    ``flags`` on default to 0, as a command that does not use them carries them."""

    instrument_id: int
    cmd: int
    side: int
    tif: int
    origin: int
    flags: int = 0
    order_id: int = 0
    price: float = 0.0
    size: float = 0.0
    origin_seq: int = 0
    decided_ns: int = 0


def decode_order(payload) -> OrderRecord:
    """Decode a 48-byte ORDER payload (bytes or a buffer view; it is copied into Python values).

    Raises:
        struct.error: ``payload`` is not exactly 48 bytes.
    """
    return OrderRecord._make(ORDER_STRUCT.unpack(payload))


class ExecType(enum.IntEnum):
    """EXEC_REPORT events, sender -> risk."""

    ACKED = 1  # the venue accepted the order; it is working
    FILLED = 2  # a (partial) fill; leaves says what still works
    REJECTED = 3  # the venue or the sender refused it; terminal
    CANCELLED = 4  # terminal
    POSITION = 5  # state report (after SYNC or a reconciliation): the instrument's position
    OPEN_ORDER = 6  # state report: one working order
    SYNC_DONE = 7  # the end of a state report
    UNKNOWN = 8  # the outcome of a send is not known yet; the sender is querying the venue
    POSITION_MISMATCH = 9  # state report: the venue's position differed from the journal's (size = the
    #                        venue's, price = the journal's before); the POSITION before it is the venue's


class ExecReason(enum.IntEnum):
    NONE = 0
    VENUE_REJECTED = 1  # the venue answered with an error code
    BAD_SIGNATURE = 2
    RATE_LIMITED = 3
    TIMEOUT = 4  # no answer in time (UNKNOWN until queried)
    DUPLICATE = 5  # an order with this client id was already journaled
    NOT_FOUND = 6  # cancel of an order the venue does not know
    HALTED = 7  # the sender is not sending (reconciling, stopping, or its journal cannot make the intent durable)
    MALFORMED = 8  # the ORDER did not decode
    ACCOUNT_CHANGED = 9  # on SYNC_DONE: the venue answers for another account than the journal's (a reset venue)


EXEC_DTYPE = np.dtype([
    ("instrument_id", "<u2"), ("exec_type", "u1"), ("side", "u1"), ("reason", "<u2"), ("_pad", "V2"),
    ("order_id", "<u8"), ("price", "<f8"), ("size", "<f8"), ("leaves", "<f8"), ("venue_ts_ns", "<u8"),
    ("fill_id", "<u8"),
])
assert EXEC_DTYPE.itemsize == 56
EXEC_STRUCT = struct.Struct("<HBBH2xQdddQQ")  # EXEC_DTYPE as a struct (pinned against it by a test)
assert EXEC_STRUCT.size == EXEC_DTYPE.itemsize


POSITION_STRUCT = struct.Struct("<H6xqQ")
assert POSITION_STRUCT.size == 24


def pack_position(instrument_id: int, lots: int, as_of_ns: int) -> bytes:
    """The POSITION payload."""
    return POSITION_STRUCT.pack(instrument_id, lots, as_of_ns)


def unpack_position(payload) -> tuple[int, int, int] | None:
    """Decode a POSITION payload into (instrument_id, lots, as_of_ns); None when it is the wrong size."""
    if len(payload) != POSITION_STRUCT.size:
        return None
    return POSITION_STRUCT.unpack_from(payload, 0)


def order_id_for(instrument_id: int, origin_seq: int, leg: int, epoch: int = 0) -> int:
    """The deterministic order id of leg ``leg`` of the decision taken on ``origin_seq`` in run
    ``epoch`` (``pipeline.runtime.runepoch``: new at every ``up``, kept across stage restarts): the same origin
    in the same run always yields the same id, so a replayed decision cannot become a second order,
    while a new run (whose venue may repeat its sequence numbers) never reuses an earlier run's ids.
    Nonzero, below 2**63."""
    digest = hashlib.blake2b(struct.pack("<HQIQ", instrument_id, origin_seq, leg, epoch & (2**64 - 1)),
                             digest_size=8, person=b"shmpipe-order").digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


def client_oid(order_id: int) -> str:
    """The venue's ``clientOid`` for ``order_id``: ``"tp"`` and 16 lowercase hex digits."""
    return f"tp{order_id:016x}"


def order_id_from_client_oid(text: str) -> int | None:
    """Inverse of ``client_oid``; None when ``text`` is not one of ours."""
    if len(text) != 18 or not text.startswith("tp"):
        return None
    try:
        return int(text[2:], 16)
    except ValueError:
        return None
