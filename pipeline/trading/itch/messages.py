"""NASDAQ TotalView-ITCH 5.0 messages: the 23 layouts, declared once, and their codec.

Each message type is declared exactly once below (``_declare``), as a small table of
``offset name kind`` rows copied from the spec table in /work/shared/reference/protocols.md.
Everything else is derived from that table at import: the record class (a frozen
``msgspec.Struct``), the ``struct.Struct`` of the whole message, the big-endian numpy dtype used by
``pipeline.trading.itch.vectorized``, the decoder and the encoder. Import-time assertions check that the
offsets are contiguous and add up to the spec's length. ``tests/pipeline/trading/itch/test_messages.py``
pins every type with hand-written golden bytes.

Wire rules (spec p.3): integers are big-endian and unsigned; alpha fields are ASCII, left-justified
and space-padded; ``p4`` is a u32 price with 4 implied decimals, ``p8`` a u64 with 8.

Common header of every message (the body starts at offset 11)::

    0      1              3                 5                               11
    +------+--------------+-----------------+-------------------------------+----- ... ---+
    | type | stock_locate | tracking_number | timestamp (ns since midnight) | body        |
    | a1   | u16 BE       | u16 BE          | u48 BE                        |             |
    +------+--------------+-----------------+-------------------------------+----- ... ---+

The u48 timestamp is read as a u16 (``timestamp_hi``, offset 5) and a u32 (``timestamp_lo``,
offset 7): ``timestamp_ns = timestamp_hi << 32 | timestamp_lo``. Records carry it as one int,
``timestamp_ns``; the numpy dtypes keep the two halves (numpy has no u48), see
``vectorized.timestamps_ns``.

Kinds of field: ``aN`` alpha of N bytes (a record holds the raw ``bytes``, padding included, so
``encode(decode(b)) == b`` byte for byte); ``u16``/``u32``/``u64`` unsigned; ``p4``/``p8`` prices as
raw integers (names end in ``_p4`` / ``_p8``; divide by 1e4 / 1e8 for the price).

Record field names are the spec's, with units added where the spec has them: ``*_p4``, ``*_p8``,
``release_time_s``, ``timestamp_ns``, ``*_shares``. The type byte is not a field: it is the class
attribute ``MSG_TYPE`` (``AddOrder.MSG_TYPE == b"A"``), as is ``SPEC`` (the ``MsgSpec``).

API:

- ``decode(buf, offset=0, length=None) -> Record``: one message; raises a ``DecodeError``.
- ``try_decode(buf, offset=0, length=None) -> (Record | None, DecodeReason)``: never raises on bad
  input; the hot-path variant. ``Decoder`` does the same and counts rejections by reason.
- ``encode(record) -> bytes``: the exact inverse of ``decode``; raises ``EncodeError``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, Callable, Union

import msgspec
import numpy as np

from pipeline.trading.itch.errors import (
    EncodeError,
    TruncatedMessage,
    UnknownMessageType,
    WrongMessageLength,
)

HEADER_BYTES = 11
OFF_TYPE = 0
OFF_STOCK_LOCATE = 1
OFF_TRACKING_NUMBER = 3
OFF_TIMESTAMP = 5  # u48: a u16 (high bits) at 5, a u32 (low bits) at 7
OFF_BODY = 11
MAX_TIMESTAMP_NS = (1 << 48) - 1
#: Largest message of ITCH 5.0 (NOII, 'I').
MAX_MESSAGE_BYTES = 50

#: Header as ``struct`` reads it, after the type byte: stock_locate, tracking_number, ts_hi, ts_lo.
_HEADER_AFTER_TYPE = ">HHHI"
_HEADER_DTYPE_FIELDS = (
    ("msg_type", "S1", OFF_TYPE),
    ("stock_locate", ">u2", OFF_STOCK_LOCATE),
    ("tracking_number", ">u2", OFF_TRACKING_NUMBER),
    ("timestamp_hi", ">u2", OFF_TIMESTAMP),
    ("timestamp_lo", ">u4", OFF_TIMESTAMP + 2),
)

# kind -> (struct code, numpy format, size in bytes, python type)
_INT_KINDS = {
    "u16": ("H", ">u2", 2),
    "u32": ("I", ">u4", 4),
    "u64": ("Q", ">u8", 8),
    "p4": ("I", ">u4", 4),
    "p8": ("Q", ">u8", 8),
}


@dataclass(frozen=True)
class Field:
    """One body field: its name in the record, byte offset in the message, spec kind and size."""

    name: str
    offset: int
    kind: str  # "aN", "u16", "u32", "u64", "p4" or "p8"
    size_bytes: int

    @property
    def is_alpha(self) -> bool:
        return self.kind.startswith("a")

    @property
    def struct_code(self) -> str:
        return f"{self.size_bytes}s" if self.is_alpha else _INT_KINDS[self.kind][0]

    @property
    def numpy_format(self) -> str:
        return f"S{self.size_bytes}" if self.is_alpha else _INT_KINDS[self.kind][1]


@dataclass(frozen=True, eq=False)
class MsgSpec:
    """Everything known about one message type, derived from its declaration.

    ``fields`` are the body fields (offset >= 11) in wire order; the record's fields are
    ``stock_locate, tracking_number, timestamp_ns`` followed by them. ``struct`` packs the whole
    message, type byte included; ``dtype`` views one whole message (``itemsize == length``).
    """

    type_char: str
    length: int
    name: str
    fields: tuple[Field, ...]
    record: type
    struct: struct.Struct
    dtype: np.dtype
    decode_at: Callable[[Any, int], Any]  # (buf, offset) -> record; no checks

    @property
    def type_byte(self) -> bytes:
        return self.type_char.encode("ascii")

    @property
    def type_code(self) -> int:
        return ord(self.type_char)

    @property
    def record_fields(self) -> tuple[str, ...]:
        return ("stock_locate", "tracking_number", "timestamp_ns") + tuple(f.name for f in self.fields)


SPECS_BY_CODE: dict[int, MsgSpec] = {}
_SPEC_BY_RECORD: dict[type, MsgSpec] = {}
#: Fixed length of each message type, indexed by the type byte (0 = not an ITCH 5.0 type).
_LENGTH_BY_CODE: list[int] = [0] * 256
_DECODE_BY_CODE: list[Callable | None] = [None] * 256


def _parse_body(table: str) -> tuple[Field, ...]:
    fields = []
    for line in table.strip().splitlines():
        off_s, name, kind = line.split()
        size = int(kind[1:]) if kind.startswith("a") else _INT_KINDS[kind][2]
        fields.append(Field(name, int(off_s), kind, size))
    return tuple(fields)


def _make_decoder(spec_name: str, fields: tuple[Field, ...], unpack_from, record) -> Callable:
    # Generated from the declaration (like collections.namedtuple): one tuple unpack, one call.
    names = [f.name for f in fields]
    args = "".join(f", {n}" for n in names)
    src = (
        f"def decode_{spec_name}(buf, offset):\n"
        f"    stock_locate, tracking_number, ts_hi, ts_lo{args} = _unpack_from(buf, offset + 1)\n"
        f"    return _record(stock_locate, tracking_number, (ts_hi << 32) | ts_lo{args})\n"
    )
    namespace: dict[str, Any] = {"_unpack_from": unpack_from, "_record": record}
    exec(src, namespace)  # noqa: S102 - source built from the literal declarations above
    return namespace[f"decode_{spec_name}"]


def _declare(type_char: str, length: int, name: str, body: str = "") -> type:
    """Declare one message type from its spec row; return its record class."""
    fields = _parse_body(body) if body.strip() else ()
    expect = OFF_BODY
    for f in fields:
        assert f.offset == expect, f"{name}.{f.name}: offset {f.offset}, expected {expect}"
        expect += f.size_bytes
    assert expect == length, f"{name}: fields end at {expect}, spec length {length}"

    fmt = ">c" + _HEADER_AFTER_TYPE[1:] + "".join(f.struct_code for f in fields)
    whole = struct.Struct(fmt)
    after_type = struct.Struct(">" + fmt[2:])
    assert whole.size == length, (name, whole.size, length)

    rec_fields = [("stock_locate", int), ("tracking_number", int), ("timestamp_ns", int)]
    rec_fields += [(f.name, bytes if f.is_alpha else int) for f in fields]
    record = msgspec.defstruct(
        name, rec_fields, frozen=True, gc=False, module=__name__,
        namespace={"MSG_TYPE": type_char.encode("ascii"), "__doc__": f"ITCH 5.0 '{type_char}' ({length} bytes)."},
    )
    dfields = list(_HEADER_DTYPE_FIELDS) + [(f.name, f.numpy_format, f.offset) for f in fields]
    dtype = np.dtype({
        "names": [d[0] for d in dfields], "formats": [d[1] for d in dfields],
        "offsets": [d[2] for d in dfields], "itemsize": length,
    })
    decoder = _make_decoder(name, fields, after_type.unpack_from, record)
    spec = MsgSpec(type_char, length, name, fields, record, whole, dtype, decoder)
    record.SPEC = spec
    code = ord(type_char)
    assert code not in SPECS_BY_CODE, type_char
    SPECS_BY_CODE[code] = spec
    _SPEC_BY_RECORD[record] = spec
    _LENGTH_BY_CODE[code] = length
    _DECODE_BY_CODE[code] = decoder
    return record


# ------------------------------------------------------------------------------- declarations
# One per message type; rows are `offset name kind`, exactly the spec table (header 0..10 implied).

SystemEvent = _declare("S", 12, "SystemEvent", """
    11 event_code            a1
""")
StockDirectory = _declare("R", 39, "StockDirectory", """
    11 stock                 a8
    19 market_category       a1
    20 financial_status      a1
    21 round_lot_size        u32
    25 round_lots_only       a1
    26 issue_classification  a1
    27 issue_sub_type        a2
    29 authenticity          a1
    30 short_sale_threshold  a1
    31 ipo_flag              a1
    32 luld_ref_price_tier   a1
    33 etp_flag              a1
    34 etp_leverage_factor   u32
    38 inverse_indicator     a1
""")
StockTradingAction = _declare("H", 25, "StockTradingAction", """
    11 stock                 a8
    19 trading_state         a1
    20 reserved              a1
    21 reason                a4
""")
RegShoRestriction = _declare("Y", 20, "RegShoRestriction", """
    11 stock                 a8
    19 reg_sho_action        a1
""")
MarketParticipantPosition = _declare("L", 26, "MarketParticipantPosition", """
    11 mpid                  a4
    15 stock                 a8
    23 primary_mm            a1
    24 mm_mode               a1
    25 participant_state     a1
""")
MwcbDeclineLevel = _declare("V", 35, "MwcbDeclineLevel", """
    11 level1_p8             p8
    19 level2_p8             p8
    27 level3_p8             p8
""")
MwcbStatus = _declare("W", 12, "MwcbStatus", """
    11 breached_level        a1
""")
IpoQuotingPeriodUpdate = _declare("K", 28, "IpoQuotingPeriodUpdate", """
    11 stock                 a8
    19 release_time_s        u32
    23 release_qualifier     a1
    24 ipo_price_p4          p4
""")
LuldAuctionCollar = _declare("J", 35, "LuldAuctionCollar", """
    11 stock                 a8
    19 ref_price_p4          p4
    23 upper_p4              p4
    27 lower_p4              p4
    31 extension             u32
""")
OperationalHalt = _declare("h", 21, "OperationalHalt", """
    11 stock                 a8
    19 market_code           a1
    20 halt_action           a1
""")
AddOrder = _declare("A", 36, "AddOrder", """
    11 order_ref             u64
    19 side                  a1
    20 shares                u32
    24 stock                 a8
    32 price_p4              p4
""")
AddOrderMpid = _declare("F", 40, "AddOrderMpid", """
    11 order_ref             u64
    19 side                  a1
    20 shares                u32
    24 stock                 a8
    32 price_p4              p4
    36 attribution           a4
""")
OrderExecuted = _declare("E", 31, "OrderExecuted", """
    11 order_ref             u64
    19 executed_shares       u32
    23 match_no              u64
""")
OrderExecutedWithPrice = _declare("C", 36, "OrderExecutedWithPrice", """
    11 order_ref             u64
    19 executed_shares       u32
    23 match_no              u64
    31 printable             a1
    32 exec_price_p4         p4
""")
OrderCancel = _declare("X", 23, "OrderCancel", """
    11 order_ref             u64
    19 cancelled_shares      u32
""")
OrderDelete = _declare("D", 19, "OrderDelete", """
    11 order_ref             u64
""")
OrderReplace = _declare("U", 35, "OrderReplace", """
    11 orig_ref              u64
    19 new_ref               u64
    27 shares                u32
    31 price_p4              p4
""")
Trade = _declare("P", 44, "Trade", """
    11 order_ref             u64
    19 side                  a1
    20 shares                u32
    24 stock                 a8
    32 price_p4              p4
    36 match_no              u64
""")
CrossTrade = _declare("Q", 40, "CrossTrade", """
    11 shares                u64
    19 stock                 a8
    27 cross_price_p4        p4
    31 match_no              u64
    39 cross_type            a1
""")
BrokenTrade = _declare("B", 19, "BrokenTrade", """
    11 match_no              u64
""")
Noii = _declare("I", 50, "Noii", """
    11 paired_shares         u64
    19 imbalance_shares      u64
    27 direction             a1
    28 stock                 a8
    36 far_p4                p4
    40 near_p4               p4
    44 current_ref_p4        p4
    48 cross_type            a1
    49 price_variation       a1
""")
Rpii = _declare("N", 20, "Rpii", """
    11 stock                 a8
    19 interest_flag         a1
""")
DlcrPriceDiscovery = _declare("O", 48, "DlcrPriceDiscovery", """
    11 stock                 a8
    19 open_eligibility      a1
    20 min_allowable_p4      p4
    24 max_allowable_p4      p4
    28 near_exec_price_p4    p4
    32 near_exec_time        u64
    40 lower_collar_p4       p4
    44 upper_collar_p4       p4
""")

assert len(SPECS_BY_CODE) == 23
assert max(s.length for s in SPECS_BY_CODE.values()) == MAX_MESSAGE_BYTES

#: The 23 specs in declaration order.
SPECS: tuple[MsgSpec, ...] = tuple(SPECS_BY_CODE.values())
#: Spec by type character ("A", "h", ...).
SPECS_BY_CHAR: dict[str, MsgSpec] = {s.type_char: s for s in SPECS}
#: Fixed message length by type character.
MESSAGE_LENGTHS: dict[str, int] = {s.type_char: s.length for s in SPECS}
#: Every record class.
RECORD_TYPES: tuple[type, ...] = tuple(s.record for s in SPECS)

Record = Union[
    SystemEvent, StockDirectory, StockTradingAction, RegShoRestriction, MarketParticipantPosition,
    MwcbDeclineLevel, MwcbStatus, IpoQuotingPeriodUpdate, LuldAuctionCollar, OperationalHalt,
    AddOrder, AddOrderMpid, OrderExecuted, OrderExecutedWithPrice, OrderCancel, OrderDelete,
    OrderReplace, Trade, CrossTrade, BrokenTrade, Noii, Rpii, DlcrPriceDiscovery,
]


def spec_of(record_or_type) -> MsgSpec:
    """The spec of a record, record class, type character (``"A"``) or type byte (``b"A"``).

    Raises:
        UnknownMessageType: not an ITCH 5.0 message type.
    """
    key = record_or_type
    if isinstance(key, (bytes, str)) and len(key) == 1:
        spec = SPECS_BY_CODE.get(ord(key))
    else:
        spec = _SPEC_BY_RECORD.get(key if isinstance(key, type) else type(key))
    if spec is None:
        raise UnknownMessageType(f"not an ITCH 5.0 message type: {record_or_type!r}", 0)
    return spec


# ------------------------------------------------------------------------------------- decode


class DecodeReason(enum.IntEnum):
    """Why ``try_decode`` returned None (OK when it did not)."""

    OK = 0
    EMPTY = 1  # no byte at `offset` (or a zero length)
    UNKNOWN_TYPE = 2  # the type byte is not an ITCH 5.0 type
    WRONG_LENGTH = 3  # the framed length is not the type's fixed length
    TRUNCATED = 4  # the buffer ends before the message does


_OK = DecodeReason.OK
_EMPTY = DecodeReason.EMPTY
_UNKNOWN = DecodeReason.UNKNOWN_TYPE
_WRONG = DecodeReason.WRONG_LENGTH
_TRUNC = DecodeReason.TRUNCATED


def try_decode(buf, offset: int = 0, length: int | None = None):
    """Decode the message at ``buf[offset:]`` without raising: ``(record, OK)`` or ``(None, reason)``.

    ``buf`` is bytes, bytearray or a byte memoryview. ``length`` is the framed length when the
    caller has one (BinaryFILE, MoldUDP64); it must equal the type's fixed length. Without it the
    message is taken to be the type's fixed length, and bytes after it are not looked at.
    """
    avail = len(buf) - offset
    if avail <= 0 or offset < 0 or length == 0:
        return None, _EMPTY
    code = buf[offset]
    need = _LENGTH_BY_CODE[code]
    if not need:
        return None, _UNKNOWN
    if length is not None and length != need:
        return None, _WRONG
    if avail < need:
        return None, _TRUNC
    return _DECODE_BY_CODE[code](buf, offset), _OK


def decode(buf, offset: int = 0, length: int | None = None):
    """Decode the message at ``buf[offset:]`` into its record (see ``try_decode`` for ``length``).

    Raises:
        TruncatedMessage: no byte at ``offset``, or the buffer ends before the message does.
        UnknownMessageType: the type byte is not one of the 23 ITCH 5.0 types.
        WrongMessageLength: ``length`` is given and differs from the type's fixed length.
    """
    record, reason = try_decode(buf, offset, length)
    if record is not None:
        return record
    if reason == _UNKNOWN:
        raise UnknownMessageType(f"unknown ITCH message type {bytes(buf[offset:offset + 1])!r} at {offset}", offset)
    spec = SPECS_BY_CODE.get(buf[offset]) if 0 <= offset < len(buf) else None
    if reason == _WRONG:
        raise WrongMessageLength(
            f"'{spec.type_char}' message at {offset}: framed length {length}, the type's length is {spec.length}",
            offset,
        )
    if reason == _EMPTY:
        raise TruncatedMessage(f"no message at offset {offset} (buffer of {len(buf)} bytes, length {length})", offset)
    raise TruncatedMessage(
        f"'{spec.type_char}' message at {offset} needs {spec.length} bytes, {len(buf) - offset} remain", offset
    )


class Decoder:
    """The feed's decoder: ``decode`` returns a record or None, and counts rejections by reason.

    ``rejected[reason]`` counts each ``DecodeReason`` (index OK counts successes); ``last_reason``
    is the reason of the latest call. Never raises on bad input.
    """

    __slots__ = ("rejected", "last_reason")

    def __init__(self) -> None:
        self.rejected = [0] * len(DecodeReason)
        self.last_reason = DecodeReason.OK

    def decode(self, buf, offset: int = 0, length: int | None = None):
        record, reason = try_decode(buf, offset, length)
        self.rejected[reason] += 1
        self.last_reason = reason
        return record

    @property
    def decoded(self) -> int:
        return self.rejected[_OK]

    def counts(self) -> dict[str, int]:
        """Calls by reason name, e.g. ``{"OK": 10, "TRUNCATED": 1, ...}``."""
        return {r.name: self.rejected[r] for r in DecodeReason}


# ------------------------------------------------------------------------------------- encode


def pad_alpha(text: str | bytes, width: int) -> bytes:
    """``text`` as an ITCH alpha field: ASCII, left-justified, space-padded to ``width`` bytes.

    Raises:
        EncodeError: longer than ``width`` or not ASCII.
    """
    try:
        raw = text.encode("ascii") if isinstance(text, str) else bytes(text)
    except UnicodeEncodeError as exc:
        raise EncodeError(f"alpha field is not ASCII: {text!r}") from exc
    if len(raw) > width:
        raise EncodeError(f"alpha field {raw!r} is longer than {width} bytes")
    return raw.ljust(width, b" ")


def alpha_text(raw: bytes) -> str:
    """An alpha field as text, trailing padding removed (``b"AAPL    "`` -> ``"AAPL"``)."""
    return raw.rstrip(b" \x00").decode("ascii", "replace")


_astuple = msgspec.structs.astuple


def encode(record) -> bytes:
    """The wire bytes of ``record`` (type byte included, no framing); ``decode`` inverts it.

    Alpha fields shorter than their width are space-padded (the spec's rule); a decoded record
    always holds full-width fields, so ``encode(decode(b)) == b`` and, for full-width records,
    ``decode(encode(r)) == r``.

    Raises:
        EncodeError: not an ITCH record; an alpha field is not bytes or is too long; an integer is
            negative or too large for its field (the timestamp for 48 bits).
    """
    spec = _SPEC_BY_RECORD.get(type(record))
    if spec is None:
        raise EncodeError(f"not an ITCH 5.0 record: {type(record).__name__}")
    values = _astuple(record)
    ts = values[2]
    if not isinstance(ts, int) or not 0 <= ts <= MAX_TIMESTAMP_NS:
        raise EncodeError(f"{spec.name}.timestamp_ns must be an int in 0..2**48-1, got {ts!r}")
    body = list(values[3:])
    for i, f in enumerate(spec.fields):
        if f.is_alpha:
            v = body[i]
            if not isinstance(v, bytes):
                raise EncodeError(f"{spec.name}.{f.name} must be bytes, got {type(v).__name__}")
            if len(v) != f.size_bytes:
                if len(v) > f.size_bytes:
                    raise EncodeError(f"{spec.name}.{f.name} is longer than {f.size_bytes} bytes: {v!r}")
                body[i] = v.ljust(f.size_bytes, b" ")
    try:
        return spec.struct.pack(spec.type_byte, values[0], values[1], ts >> 32, ts & 0xFFFFFFFF, *body)
    except struct.error as exc:
        raise EncodeError(f"{spec.name}: {exc}") from None
