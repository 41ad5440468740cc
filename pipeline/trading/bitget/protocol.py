"""Bitget v2 public WebSocket: request messages, frame classification and decoding. Sans-I/O.

Connection (the feed process owns it): ``wss://ws.bitget.com/v2/ws/public``; send the text ``ping``
every 30 s and expect ``pong``; at most 10 messages a second, 240 subscribe requests an hour and
1000 channels per connection; the ``args`` of one request may not exceed 4096 bytes.

Requests (built here, compact JSON, keys in this order)::

    {"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}]}
    {"op":"unsubscribe","args":[...same...]}
    ping                                              (plain text, not JSON)

Frames the server sends, and the ``FrameKind`` the decoder gives them::

    pong                                                          PONG
    {"event":"subscribe","arg":{...}}                             SUBSCRIBED
    {"event":"unsubscribe","arg":{...}}                           UNSUBSCRIBED
    {"event":"error","code":"30005","msg":"...","arg":{...}}      ERROR
    {"action":"snapshot","arg":{"instType","channel":"books","instId"},
     "data":[{"asks":[["price","size"],...],"bids":[...],
              "checksum":<int32>,"seq":<int>,"ts":"<ms>"}],"ts":<ms>}
                                                                  SNAPSHOT (books first push; books1/5/15 always)
    same with "action":"update" on books                          UPDATE
    {"action":"snapshot"|"update","arg":{...,"channel":"trade",...},
     "data":[{"ts":"<ms>","price":"..","size":"..","side":"buy"|"sell","tradeId":".."}]}
                                                                  TRADE
    anything else well-formed (other channels, events)            UNKNOWN (reason says why)
    anything malformed                                            REJECTED (reason says why)

A decoded depth push is a list of ``BookLevels`` (one per ``data[]`` entry, normally one): both
sides best first (bids descending, asks ascending in snapshots; updates in the order sent), the
prices and sizes as numbers (float; int for an integer string, same value), and each level's
ORIGINAL ``"price:size"`` text, which the checksum
needs (``"0.0100"`` must stay ``"0.0100"``). API v1 frames (``instType`` ``"sp"``, trade rows as
``[ts, price, size, side]`` arrays) decode too, so the shared v1 capture replays through the same code.

Validation (every check a reject code; nothing malformed reaches a book):

- price and size strings are plain decimals as the venue writes them: ASCII digits with at most
  one inner ``.`` (JSON number grammar without sign or exponent: no ``""``, ``"."``, ``".5"``,
  ``"5."``, ``"01"``, ``"NaN"``, ``"inf"``, ``"-1"``, ``"1e5"``, ``" 1"``, ``"1_0"``), finite as a
  double; prices are > 0; sizes may be 0 in a depth push (meaning "delete"), trade sizes must be > 0;
- each level is exactly a ``[price, size]`` pair of strings; at most ``MAX_LEVELS_PER_SIDE`` a side;
- snapshot sides are strictly sorted (bids descending, asks ascending);
- ``checksum`` is an int in the signed 32-bit range (absent = 0); ``seq`` / ``pseq`` are ints or
  digit strings (no leading zero) in 0..2**64-1 (absent = -1); ``ts`` (ms, int or digit string)
  is required on depth entries and trades, and ``ts * 1_000_000`` must fit a u64; a ``tradeId``
  is a digit string in 0..2**64-1 (absent = 0); a trade ``side`` is ``buy`` or ``sell``.

The hot-path entry point, ``Decoder.decode``, never raises: it returns a ``Decoded`` whose
``reason`` is ``Reject.OK`` or the reason code, and counts kinds and reasons. ``decode_or_raise``
is the control-path variant; it raises ``FrameRejected``. Every exception this package raises
derives from ``BitgetError`` (``pipeline.trading.bitget.errors``).

Two decoders with the same contract: ``MsgspecDecoder`` (typed ``msgspec.Struct`` decode: shapes
and types are checked in C) and ``OrjsonDecoder`` (``orjson.loads`` to dicts, shapes checked in
Python). ``make_decoder()`` returns the faster one as measured on real frames (msgspec; see
``bench/feed.py``). The msgspec decoder has a fast path for books1/5/15 pushes in the venue's
canonical form (``_fast_snapshot``: sides kept as raw JSON, checked by their skeleton, parsed by
one orjson call, ``"price:size"`` strings built lazily); any other frame, or any failed check,
goes through the full typed decode, which alone decides rejections and their reasons.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from operator import gt, lt
from typing import Annotated

import msgspec
import orjson

from pipeline.trading.bitget.errors import BitgetError, FrameRejected
from pipeline.trading.messages import TRADE_SIDE_BUY, TRADE_SIDE_SELL

PUBLIC_URL = "wss://ws.bitget.com/v2/ws/public"
PING_TEXT = "ping"
PONG_TEXT = "pong"
PING_INTERVAL_S = 30
MAX_SUBSCRIBE_ARGS_BYTES = 4096  # venue limit on the "args" of one request

CHANNEL_BOOKS = "books"  # full depth: a snapshot, then updates, CRC-32 checksum of the top 25
CHANNEL_BOOKS1 = "books1"
CHANNEL_BOOKS5 = "books5"
CHANNEL_BOOKS15 = "books15"  # top 15 a side, a full snapshot on every push
CHANNEL_TRADE = "trade"
SNAPSHOT_CHANNELS = frozenset({CHANNEL_BOOKS1, CHANNEL_BOOKS5, CHANNEL_BOOKS15})
BOOK_CHANNELS = SNAPSHOT_CHANNELS | {CHANNEL_BOOKS}
CHANNELS = BOOK_CHANNELS | {CHANNEL_TRADE}

INST_TYPE_SPOT = "SPOT"
INST_TYPE_USDT_FUTURES = "USDT-FUTURES"
INST_TYPE_COIN_FUTURES = "COIN-FUTURES"
INST_TYPE_USDC_FUTURES = "USDC-FUTURES"
INST_TYPES = frozenset({INST_TYPE_SPOT, INST_TYPE_USDT_FUTURES, INST_TYPE_COIN_FUTURES, INST_TYPE_USDC_FUTURES})

QUOTE_COIN = "USDT"  # the quote coin of the spot symbols the pipeline trades


def base_coin(symbol: str) -> str:
    """The base coin of a USDT-quoted spot symbol: the symbol without its ``QUOTE_COIN`` suffix
    (``"BTCUSDT"`` -> ``"BTC"``): the coin whose balance is the position.

    Raises:
        ValueError: ``symbol`` is not a string ending in "USDT" with something before it.
    """
    if not isinstance(symbol, str) or not symbol.endswith(QUOTE_COIN) or len(symbol) <= len(QUOTE_COIN):
        raise ValueError(f"{str(symbol)[:32]!r} is not a {QUOTE_COIN}-quoted symbol")
    return symbol[: -len(QUOTE_COIN)]

MAX_FRAME_BYTES = 4 * 1024 * 1024
MAX_LEVELS_PER_SIDE = 5000
MAX_DATA_ENTRIES = 64  # data[] entries of one depth push (the venue sends one)
MAX_TRADES_PER_FRAME = 1000
U64_MAX = 2**64 - 1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
MAX_TS_MS = U64_MAX // 1_000_000  # so that ts_ms * 1_000_000 fits the u64 exch_ts_ns

TRADE_SIDE_CODES = {"buy": TRADE_SIDE_BUY, "sell": TRADE_SIDE_SELL}


class FrameKind(enum.IntEnum):
    """What a server frame is."""

    REJECTED = 0  # malformed; ``Decoded.reason`` says how
    SNAPSHOT = 1  # depth push replacing the book (books first push; books1/5/15 always)
    UPDATE = 2  # depth push to merge into the book (books only)
    TRADE = 3
    SUBSCRIBED = 4
    UNSUBSCRIBED = 5
    ERROR = 6  # the venue's error event; ``Decoded.detail`` holds "code msg"
    PONG = 7
    UNKNOWN = 8  # well-formed but not ours (other channel, other event); reason says which


class Reject(enum.IntEnum):
    """Why a frame was not accepted (``OK`` when it was)."""

    OK = 0
    BAD_JSON = 1  # not JSON, truncated, trailing bytes, invalid UTF-8, NaN/Infinity literals
    NOT_OBJECT = 2  # JSON, but not an object
    MISSING_FIELD = 3
    WRONG_TYPE = 4  # a field of the wrong JSON type or shape (e.g. a level that is not a pair)
    BAD_NUMBER = 5  # a price/size/id string that is not a plain finite decimal (or a price <= 0)
    OUT_OF_RANGE = 6  # checksum outside int32, seq/ts outside u64, ...
    TOO_LARGE = 7  # frame bytes, levels, data entries or trades above the MAX_* limits
    UNSORTED = 8  # a snapshot side not strictly sorted best first
    BAD_ACTION = 9  # "action" other than snapshot / update
    BAD_VALUE = 10  # an enumerated string out of its set (trade side)
    EMPTY_DATA = 11  # a push with an empty data list
    UNKNOWN_CHANNEL = 12  # kind UNKNOWN: a channel this decoder does not handle (ticker, candle...)
    UNKNOWN_EVENT = 13  # kind UNKNOWN: an event other than subscribe / unsubscribe / error
    UNKNOWN_FRAME = 14  # kind UNKNOWN: an object with neither action, event nor op
    INTERNAL = 15  # a bug in the decoder, caught so the hot loop survives (tests assert none)


class Subscription(msgspec.Struct, frozen=True):
    """One channel of one instrument, as the venue names them (``args`` entry of a request)."""

    inst_type: str  # e.g. "SPOT", "USDT-FUTURES"
    channel: str  # "books", "books1", "books5", "books15" or "trade"
    inst_id: str  # e.g. "BTCUSDT"


class BookLevels(msgspec.Struct, gc=False):
    """One validated ``data[]`` entry of a depth push.

    ``bid_*`` / ``ask_*`` are parallel lists in the order sent (best first in snapshots); ``*_px``
    and ``*_sz`` hold numbers (float, or int for an integer string), ``*_lv`` the original
    ``"price:size"`` strings. ``seq`` / ``pseq`` are -1 when absent; ``ts_ms`` is the entry's ``ts``.
    """

    bid_px: list
    bid_sz: list
    _bid_lv: list | None  # None until asked for (fast snapshot path): built from ``_raw``
    ask_px: list
    ask_sz: list
    _ask_lv: list | None
    checksum: int
    seq: int
    pseq: int
    ts_ms: int
    _raw: tuple | None = None  # (bids, asks) canonical JSON bytes, when the lv lists are lazy

    @property
    def bid_lv(self) -> list:
        """The bids' original ``"price:size"`` strings, in the order sent."""
        lv = self._bid_lv
        if lv is None:
            lv = self._bid_lv = _lv_from_raw(self._raw[0])
        return lv

    @property
    def ask_lv(self) -> list:
        """The asks' original ``"price:size"`` strings, in the order sent."""
        lv = self._ask_lv
        if lv is None:
            lv = self._ask_lv = _lv_from_raw(self._raw[1])
        return lv


def _lv_from_raw(raw) -> list:
    """``"price:size"`` strings of a side in the canonical form ``[["p","s"],["p","s"]]``."""
    raw = bytes(raw)
    if len(raw) <= 2:
        return []
    return raw[3:-3].decode().replace('","', ":").split('"],["')


class Trades(msgspec.Struct, gc=False):
    """Validated trades of one push, oldest first: parallel lists."""

    ts_ms: list  # int ms
    price: list  # float
    size: list  # float, > 0
    side: list  # TRADE_SIDE_CODES value
    trade_id: list  # int, 0 when the venue gave none (v1)


class Decoded(msgspec.Struct, frozen=True, gc=False):
    """The decoder's verdict on one frame.

    ``books`` is set for SNAPSHOT / UPDATE, ``trades`` for TRADE (``snapshot`` tells whether the
    trade push was the venue's snapshot of recent trades). ``detail`` is empty on the hot path; it
    carries the error event's code and message, or a short note on a rejection. Frozen, but the
    lists it holds are handed over: ``BitgetBooks.apply`` keeps (and later mutates) them.
    """

    kind: FrameKind
    reason: Reject = Reject.OK
    channel: str = ""
    inst_type: str = ""
    inst_id: str = ""
    books: list | None = None  # list[BookLevels]
    trades: Trades | None = None
    snapshot: bool = False
    detail: str = ""


# --------------------------------------------------------------------------------------------
# Requests (control path: raise BitgetError on bad input)


def _request(op: str, subs: Iterable[Subscription]) -> str:
    args = []
    for sub in subs:
        if not isinstance(sub, Subscription):
            raise BitgetError(f"expected a Subscription, got {type(sub).__name__}")
        if sub.channel not in CHANNELS:
            raise BitgetError(f"unknown channel {sub.channel!r}; known: {sorted(CHANNELS)}")
        if sub.inst_type not in INST_TYPES:
            raise BitgetError(f"unknown instType {sub.inst_type!r}; known: {sorted(INST_TYPES)}")
        if not (sub.inst_id.isascii() and sub.inst_id.isalnum()):
            raise BitgetError(f"instId must be non-empty ASCII letters and digits, got {sub.inst_id!r}")
        args.append({"instType": sub.inst_type, "channel": sub.channel, "instId": sub.inst_id})
    if not args:
        raise BitgetError(f"{op} needs at least one subscription")
    args_bytes = len(orjson.dumps(args))
    if args_bytes > MAX_SUBSCRIBE_ARGS_BYTES:
        raise BitgetError(f"{op} args are {args_bytes} bytes; the venue accepts at most {MAX_SUBSCRIBE_ARGS_BYTES}")
    return orjson.dumps({"op": op, "args": args}).decode()


def subscribe_message(subs: Iterable[Subscription]) -> str:
    """The text frame subscribing to ``subs``, e.g.
    ``{"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}]}``.

    Raises:
        BitgetError: no subscription, an unknown channel or instType, an instId that is not ASCII
            alphanumeric, or ``args`` longer than MAX_SUBSCRIBE_ARGS_BYTES.
    """
    return _request("subscribe", subs)


def unsubscribe_message(subs: Iterable[Subscription]) -> str:
    """The text frame unsubscribing from ``subs`` (same shape as ``subscribe_message``).

    Raises:
        BitgetError: as ``subscribe_message``.
    """
    return _request("unsubscribe", subs)


def resync_messages(sub: Subscription) -> list[str]:
    """The two text frames that make the venue send a fresh snapshot for ``sub``: unsubscribe,
    then subscribe (each counts against the venue's 240 subscribe requests an hour).

    Raises:
        BitgetError: as ``subscribe_message``.
    """
    return [unsubscribe_message([sub]), subscribe_message([sub])]


def ping_message() -> str:
    """The keep-alive text frame (plain ``ping``, not JSON); the venue answers ``pong``."""
    return PING_TEXT


# --------------------------------------------------------------------------------------------
# Shared validation (pure functions over decoded values; return (Reject, value))

_NUMERIC_CHARS = b"0123456789.:"  # what a joined "price:size:..." string may contain


def _numbers(flat: str, count: int) -> list | None:
    """The ``count`` numbers of a ``"n:n:..."`` string of plain decimals, or None if it is not
    exactly that: only ASCII digits and ``.`` between the colons, each a JSON number (so no
    ``""``, ``"."``, ``"1."``, ``".5"``, ``"01"``, ``"1.2.3"``, sign, exponent, NaN or inf), each
    finite. Integers come back as ints, the rest as floats (the same value ``float()`` gives).
    One C pass each: bytes.translate for the alphabet, orjson for the numbers."""
    if flat.encode("utf-8", "surrogatepass").translate(None, _NUMERIC_CHARS):
        return None
    try:
        vals = orjson.loads("[" + flat.replace(":", ",") + "]")
    except orjson.JSONDecodeError:
        return None
    if len(vals) != count:  # a ":" inside a field (orjson itself refuses a double overflow)
        return None
    return vals


def _uint(value, maximum: int):
    """(OK, int) for an int or an ASCII digit string (no leading zero) in 0..maximum; else a
    reject code."""
    if type(value) is int:
        if 0 <= value <= maximum:
            return Reject.OK, value
        return Reject.OUT_OF_RANGE, 0
    if type(value) is str:
        if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):
            if len(value) <= 20:
                v = int(value)
                if v <= maximum:
                    return Reject.OK, v
            return Reject.OUT_OF_RANGE, 0
        return Reject.BAD_NUMBER, 0
    return Reject.WRONG_TYPE, 0


def _book_levels(bids, asks, checksum, seq, pseq, ts, snapshot: bool):
    """Validate one depth entry whose level shapes are already known to be string pairs."""
    nb = len(bids)
    na = len(asks)
    if nb > MAX_LEVELS_PER_SIDE or na > MAX_LEVELS_PER_SIDE:
        return Reject.TOO_LARGE, None
    bid_lv = list(map(":".join, bids))
    ask_lv = list(map(":".join, asks))
    if nb or na:
        vals = _numbers(":".join(bid_lv + ask_lv), 2 * (nb + na))
        if vals is None:
            return Reject.BAD_NUMBER, None
        split = 2 * nb
        bid_px = vals[0:split:2]
        bid_sz = vals[1:split:2]
        ask_px = vals[split::2]
        ask_sz = vals[split + 1 :: 2]
        if snapshot:
            if (nb > 1 and not all(map(gt, bid_px, bid_px[1:]))) or (na > 1 and not all(map(lt, ask_px, ask_px[1:]))):
                return Reject.UNSORTED, None
            if (nb and bid_px[-1] <= 0) or (na and ask_px[0] <= 0):  # sorted: the extreme is enough
                return Reject.BAD_NUMBER, None
        elif 0 in bid_px or 0 in ask_px:  # no sign is possible, so 0 is the only bad price
            return Reject.BAD_NUMBER, None
    else:
        bid_px, bid_sz, ask_px, ask_sz = [], [], [], []
    if type(checksum) is not int:
        return Reject.WRONG_TYPE, None
    if not INT32_MIN <= checksum <= INT32_MAX:
        return Reject.OUT_OF_RANGE, None
    if seq is None:
        seq_v = -1
    else:
        r, seq_v = _uint(seq, U64_MAX)
        if r:
            return r, None
    if pseq is None:
        pseq_v = -1
    else:
        r, pseq_v = _uint(pseq, U64_MAX)
        if r:
            return r, None
    if ts is None:
        return Reject.MISSING_FIELD, None
    r, ts_ms = _uint(ts, MAX_TS_MS)
    if r:
        return r, None
    return Reject.OK, BookLevels(bid_px, bid_sz, bid_lv, ask_px, ask_sz, ask_lv, checksum, seq_v, pseq_v, ts_ms)


def _trade_rows(rows):
    """Validate trades given as (ts, price, size, side, tradeId) tuples; (reason, Trades)."""
    n = len(rows)
    if n > MAX_TRADES_PER_FRAME:
        return Reject.TOO_LARGE, None
    ts_l, px_s, sz_s, sides, ids = [], [], [], [], []
    for t, p, s, side, tid in rows:
        if t is None or p is None or s is None or side is None:
            return Reject.MISSING_FIELD, None
        r, t_ms = _uint(t, MAX_TS_MS)
        if r:
            return r, None
        if type(side) is not str:
            return Reject.WRONG_TYPE, None
        code = TRADE_SIDE_CODES.get(side)
        if code is None:
            return Reject.BAD_VALUE, None
        if tid is None:
            tid_v = 0
        else:
            if type(tid) is not str:
                return Reject.WRONG_TYPE, None
            r, tid_v = _uint(tid, U64_MAX)
            if r:
                return r, None
        ts_l.append(t_ms)
        px_s.append(p)
        sz_s.append(s)
        sides.append(code)
        ids.append(tid_v)
    if n:
        try:
            flat = ":".join(px_s + sz_s)
        except TypeError:
            return Reject.WRONG_TYPE, None
        vals = _numbers(flat, 2 * n)
        if vals is None or min(vals) <= 0:
            return Reject.BAD_NUMBER, None
        px = vals[:n]
        sz = vals[n:]
        if n > 1 and ts_l[0] > ts_l[-1]:  # the venue lists newest first: emit oldest first
            ts_l.reverse()
            px.reverse()
            sz.reverse()
            sides.reverse()
            ids.reverse()
    else:
        px, sz = [], []
    return Reject.OK, Trades(ts_l, px, sz, sides, ids)


def _rejected(reason: Reject, detail: str = "", channel: str = "", inst_type: str = "", inst_id: str = "") -> Decoded:
    kind = FrameKind.UNKNOWN if reason >= Reject.UNKNOWN_CHANNEL and reason != Reject.INTERNAL else FrameKind.REJECTED
    return Decoded(kind, reason, channel, inst_type, inst_id, detail=detail)


_PONG = Decoded(FrameKind.PONG)
_EVENT_KINDS = {"subscribe": FrameKind.SUBSCRIBED, "unsubscribe": FrameKind.UNSUBSCRIBED, "error": FrameKind.ERROR}
_ACTIONS = {"snapshot": True, "update": False}
# frames that may take the books1/5/15 fast path (MsgspecDecoder._decode); a miss only costs speed
_NEEDLE_15 = '"channel":"books1'  # books1 and books15
_NEEDLE_5 = '"channel":"books5"'
_NEEDLE_B15 = _NEEDLE_15.encode()
_NEEDLE_B5 = _NEEDLE_5.encode()


class Decoder:
    """Common part of the two decoders: the never-raising entry point and the counters.

    ``kinds[k]`` counts frames of each FrameKind, ``rejects[r]`` each Reject reason (OK included).
    """

    name = "base"

    def __init__(self) -> None:
        self.kinds = [0] * len(FrameKind)
        self.rejects = [0] * len(Reject)

    def decode(self, frame: str | bytes) -> Decoded:
        """Classify and decode one text frame. Never raises; malformed input gives a ``Decoded``
        with ``reason != Reject.OK`` (kind REJECTED, or UNKNOWN for well-formed frames that are
        not ours). Counts the result."""
        try:
            if frame == PONG_TEXT or frame == b"pong":
                d = _PONG
            elif len(frame) > MAX_FRAME_BYTES:
                d = _rejected(Reject.TOO_LARGE, f"{len(frame)} bytes")
            else:
                d = self._decode(frame)
        except Exception as exc:  # a decoder bug must not kill the feed; tests assert it never happens
            d = _rejected(Reject.INTERNAL, f"{type(exc).__name__}: {exc}")
        self.kinds[d.kind] += 1
        self.rejects[d.reason] += 1
        return d

    def decode_or_raise(self, frame: str | bytes) -> Decoded:
        """``decode`` for control paths (tests, tools): the same result, but raises on a rejection.

        Raises:
            FrameRejected: the frame is malformed or not one this decoder handles (``.reason``).
        """
        d = self.decode(frame)
        if d.reason != Reject.OK:
            raise FrameRejected(Reject(d.reason), d.detail)
        return d

    def _decode(self, frame) -> Decoded:  # pragma: no cover - abstract
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# msgspec: typed Structs, shapes and types checked in C

_Level = tuple[str, str]
_Side = Annotated[list[_Level], msgspec.Meta(max_length=MAX_LEVELS_PER_SIDE)]


class _Arg(msgspec.Struct, gc=False):
    instType: str = ""
    channel: str = ""
    instId: str = ""


class _Data(msgspec.Struct, gc=False):
    # depth entry
    asks: _Side | None = None
    bids: _Side | None = None
    checksum: int = 0
    seq: int | str | None = None
    pseq: int | str | None = None
    ts: int | str | None = None
    # trade entry (v2 object)
    price: str | None = None
    size: str | None = None
    side: str | None = None
    tradeId: str | None = None


_V1Trade = tuple[str, str, str, str]  # [ts, price, size, side]


class _Envelope(msgspec.Struct, gc=False):
    action: str | None = None
    event: str | None = None
    op: str | None = None
    arg: _Arg | None = None
    data: Annotated[list[_Data | _V1Trade], msgspec.Meta(max_length=MAX_TRADES_PER_FRAME)] | None = None
    code: int | str | None = None
    msg: str | None = None
    ts: int | None = None


class _LooseEnvelope(msgspec.Struct, gc=False):
    """Second look at a frame the typed decode refused: is it a channel we do not handle?"""

    action: str | None = None
    arg: _Arg | None = None


def _validation_reason(msg: str) -> Reject:
    if msg.startswith("Object missing required field"):
        return Reject.MISSING_FIELD
    if "length <=" in msg:
        return Reject.TOO_LARGE
    if msg.startswith("Expected `object`") and " - at " not in msg:
        return Reject.NOT_OBJECT
    if msg.startswith("Expected"):
        return Reject.WRONG_TYPE
    return Reject.OUT_OF_RANGE


class _FastData(msgspec.Struct, gc=False):
    """A depth entry whose sides are kept as raw JSON (checked and parsed in ``_fast_snapshot``)."""

    asks: msgspec.Raw = msgspec.Raw()
    bids: msgspec.Raw = msgspec.Raw()
    checksum: int = 0
    seq: int | str | None = None
    pseq: int | str | None = None
    ts: int | str | None = None
    # the rest of ``_Data``, with the same types, so that the fast decode accepts no more than it
    price: str | None = None
    size: str | None = None
    side: str | None = None
    tradeId: str | None = None


class _FastEnvelope(msgspec.Struct, gc=False):
    """``_Envelope`` with one ``_FastData`` entry (every other field and type the same)."""

    action: str | None = None
    event: str | None = None
    op: str | None = None
    arg: _Arg | None = None
    data: Annotated[list[_FastData], msgspec.Meta(max_length=1)] | None = None
    code: int | str | None = None
    msg: str | None = None
    ts: int | None = None


#: The skeleton (digits and dots deleted) of ``bids + b"," + asks`` when both sides are in the venue's
#: canonical form ``[["p","s"],["p","s"],...]``, with nb and na levels -> nb, for
#: 1 <= nb, na <= MAX_FAST_LEVELS (books1/5/15 send at most 15).
MAX_FAST_LEVELS = 25
_SKELETONS = {
    b"[" + b",".join([b'["",""]'] * nb) + b"],[" + b",".join([b'["",""]'] * na) + b"]": nb
    for nb in range(1, MAX_FAST_LEVELS + 1)
    for na in range(1, MAX_FAST_LEVELS + 1)
}
_DIGITS_DOT = b"0123456789."
_QUOTES_BRACKETS = b'"[]'
_SNAPSHOT_KIND = FrameKind.SNAPSHOT
_OK = Reject.OK
_SNAPSHOT_I = int(_SNAPSHOT_KIND)  # plain ints index the counters without an __index__ call
_OK_I = int(_OK)
_TS_DIGITS = 19  # a ts digit string this long or shorter is < 10**19 (MAX_TS_MS has 13 digits)


def _fast_snapshot(e: _FastData, channel: str, inst_type: str, inst_id: str):
    """The SNAPSHOT ``Decoded`` of a books1/5/15 entry in the venue's exact canonical form, or None
    when anything is unusual (the caller then runs the full typed decode, which gives the reason).

    Soundness: msgspec has checked that each side is valid JSON. A side whose skeleton (digits and
    dots deleted) is ``[["",""],...]`` therefore is exactly ``[["D","D"],...]`` with D runs of
    digits and dots (a digit outside the quotes would not be valid JSON there); orjson then parses
    the D as JSON numbers, which is the same grammar and finiteness check ``_numbers`` makes, and
    the sortedness, price, checksum, seq and ts checks are those of ``_book_levels``."""
    bids = e.bids
    asks = e.asks
    cat = b",".join((bids, asks))
    shape = _SKELETONS.get(cat.translate(None, _DIGITS_DOT))
    if shape is None:
        return None
    try:
        vals = orjson.loads(b"[%b]" % cat.translate(None, _QUOTES_BRACKETS))
    except orjson.JSONDecodeError:
        return None
    split = shape + shape
    ask_px = vals[split::2]
    # bids ascending then asks: strictly ascending iff both sides are strictly sorted best first
    # and the book is not crossed (a crossed one goes the full way); then the lowest bid > 0 is
    # the whole "price > 0" check
    c = vals[split - 2 :: -2] + ask_px
    if not (c[0] > 0 and all(map(lt, c, c[1:]))):
        return None
    checksum = e.checksum
    if not INT32_MIN <= checksum <= INT32_MAX:
        return None
    seq = e.seq
    if seq is None:
        seq = -1
    elif type(seq) is not int or not 0 <= seq <= U64_MAX:
        r, seq = _uint(seq, U64_MAX)
        if r:
            return None
    pseq = e.pseq
    if pseq is None:
        pseq = -1
    else:
        r, pseq = _uint(pseq, U64_MAX)
        if r:
            return None
    ts = e.ts
    if type(ts) is str and len(ts) <= _TS_DIGITS and ts.isascii() and ts.isdigit() and ts[0] != "0":
        ts = int(ts)
        if ts > MAX_TS_MS:
            return None
    else:
        if ts is None:
            return None
        r, ts = _uint(ts, MAX_TS_MS)
        if r:
            return None
    lv = BookLevels(vals[0:split:2], vals[1:split:2], None, ask_px, vals[split + 1 :: 2], None, checksum, seq, pseq, ts, (bids, asks))
    return Decoded(_SNAPSHOT_KIND, _OK, channel, inst_type, inst_id, [lv], None, True)


class MsgspecDecoder(Decoder):
    """Decoder over ``msgspec.json.Decoder(_Envelope)`` (the default; see ``make_decoder``).

    Fast path: a books1/5/15 push is first decoded with its sides as raw JSON; when the sides are
    in the venue's canonical form and every check passes, the numbers come from one orjson parse
    (``_fast_snapshot``) and the ``"price:size"`` strings are only built when asked for. Anything
    else, or any failed check, goes through the full typed decode, so rejections and their reasons
    are exactly those of the typed decode."""

    name = "msgspec"

    def __init__(self) -> None:
        super().__init__()
        self._envelope = msgspec.json.Decoder(_Envelope)
        self._loose = msgspec.json.Decoder(_LooseEnvelope)
        self._fast = msgspec.json.Decoder(_FastEnvelope)

    def decode(self, frame: str | bytes) -> Decoded:
        """``Decoder.decode``, with the books1/5/15 fast path tried first."""
        tf = type(frame)
        if (tf is bytes and (_NEEDLE_B15 in frame or _NEEDLE_B5 in frame)) or (
            tf is str and (_NEEDLE_15 in frame or _NEEDLE_5 in frame)
        ):
            if len(frame) <= MAX_FRAME_BYTES:
                try:
                    env = self._fast.decode(frame)
                    arg = env.arg
                    if (env.action in _ACTIONS and env.data and arg is not None
                            and arg.channel in SNAPSHOT_CHANNELS and arg.instId):
                        d = _fast_snapshot(env.data[0], arg.channel, arg.instType, arg.instId)
                        if d is not None:
                            self.kinds[_SNAPSHOT_I] += 1
                            self.rejects[_OK_I] += 1
                            return d
                except Exception:  # noqa: BLE001 - the full decode below classifies the frame
                    pass
        return Decoder.decode(self, frame)

    def _decode(self, frame) -> Decoded:
        return self._decode_typed(frame)

    def _decode_typed(self, frame) -> Decoded:
        try:
            env = self._envelope.decode(frame)
        except msgspec.ValidationError as exc:
            msg = str(exc)
            try:
                loose = self._loose.decode(frame)
            except msgspec.DecodeError:
                loose = None
            if loose is not None and loose.action is not None and loose.arg is not None:
                arg = loose.arg
                if arg.channel not in CHANNELS:
                    return _rejected(Reject.UNKNOWN_CHANNEL, arg.channel, arg.channel, arg.instType, arg.instId)
                return _rejected(_validation_reason(msg), msg, arg.channel, arg.instType, arg.instId)
            return _rejected(_validation_reason(msg), msg)
        except msgspec.DecodeError as exc:
            return _rejected(Reject.BAD_JSON, str(exc))

        action = env.action
        if action is not None:
            arg = env.arg
            if arg is None:
                return _rejected(Reject.MISSING_FIELD, "arg")
            channel = arg.channel
            inst_type = arg.instType
            inst_id = arg.instId
            snapshot = _ACTIONS.get(action)
            if channel not in CHANNELS:
                return _rejected(Reject.UNKNOWN_CHANNEL, channel, channel, inst_type, inst_id)
            if snapshot is None:
                return _rejected(Reject.BAD_ACTION, action, channel, inst_type, inst_id)
            if not inst_id:
                return _rejected(Reject.MISSING_FIELD, "arg.instId", channel, inst_type, inst_id)
            data = env.data
            if data is None:
                return _rejected(Reject.MISSING_FIELD, "data", channel, inst_type, inst_id)
            if not data:
                return _rejected(Reject.EMPTY_DATA, "", channel, inst_type, inst_id)
            if channel == CHANNEL_TRADE:
                rows = []
                for e in data:
                    if type(e) is _Data:
                        rows.append((e.ts, e.price, e.size, e.side, e.tradeId))
                    else:
                        rows.append((e[0], e[1], e[2], e[3], None))
                r, trades = _trade_rows(rows)
                if r:
                    return _rejected(r, "trade", channel, inst_type, inst_id)
                return Decoded(FrameKind.TRADE, Reject.OK, channel, inst_type, inst_id, None, trades, snapshot)
            if len(data) > MAX_DATA_ENTRIES:
                return _rejected(Reject.TOO_LARGE, "data", channel, inst_type, inst_id)
            if channel != CHANNEL_BOOKS:
                snapshot = True
            books = []
            for e in data:
                if type(e) is not _Data:
                    return _rejected(Reject.WRONG_TYPE, "data[] entry", channel, inst_type, inst_id)
                if e.bids is None or e.asks is None:
                    return _rejected(Reject.MISSING_FIELD, "bids/asks", channel, inst_type, inst_id)
                r, lv = _book_levels(e.bids, e.asks, e.checksum, e.seq, e.pseq, e.ts, snapshot)
                if r:
                    return _rejected(r, "depth", channel, inst_type, inst_id)
                books.append(lv)
            kind = FrameKind.SNAPSHOT if snapshot else FrameKind.UPDATE
            return Decoded(kind, Reject.OK, channel, inst_type, inst_id, books, None, snapshot)

        return _event(env.event, env.op, env.arg, env.code, env.msg)


def _event(event, op, arg, code, msg) -> Decoded:
    """Classify a frame without an action: an event, an echoed op, or unknown."""
    name = event if event is not None else op
    if name is None:
        return _rejected(Reject.UNKNOWN_FRAME)
    kind = _EVENT_KINDS.get(name)
    if arg is not None:
        channel, inst_type, inst_id = arg.channel, arg.instType, arg.instId
    else:
        channel = inst_type = inst_id = ""
    if kind is None:
        return _rejected(Reject.UNKNOWN_EVENT, name, channel, inst_type, inst_id)
    detail = f"{code} {msg}" if kind == FrameKind.ERROR else ""
    return Decoded(kind, Reject.OK, channel, inst_type, inst_id, detail=detail)


# --------------------------------------------------------------------------------------------
# orjson: dicts, shapes and types checked here

_LIST_TYPE = {list}
_TWO = {2}


class _DictArg:
    __slots__ = ("instType", "channel", "instId")

    def __init__(self, d: dict) -> None:
        self.instType = d.get("instType", "")
        self.channel = d.get("channel", "")
        self.instId = d.get("instId", "")


def _pairs_ok(side) -> bool:
    """True when ``side`` is a list of [str, str] lists (strings are checked by the join)."""
    if type(side) is not list:
        return False
    if not side:
        return True
    return set(map(type, side)) == _LIST_TYPE and set(map(len, side)) == _TWO


class OrjsonDecoder(Decoder):
    """Decoder over ``orjson.loads`` (kept for comparison and as a fallback)."""

    name = "orjson"

    def _decode(self, frame) -> Decoded:
        try:
            obj = orjson.loads(frame)
        except orjson.JSONDecodeError as exc:
            return _rejected(Reject.BAD_JSON, str(exc))
        if type(obj) is not dict:
            return _rejected(Reject.NOT_OBJECT, type(obj).__name__)
        arg = obj.get("arg")
        if arg is not None:
            if type(arg) is not dict:
                return _rejected(Reject.WRONG_TYPE, "arg")
            arg = _DictArg(arg)
            if type(arg.channel) is not str or type(arg.instType) is not str or type(arg.instId) is not str:
                return _rejected(Reject.WRONG_TYPE, "arg fields")
        action = obj.get("action")
        if action is not None:
            if type(action) is not str:
                return _rejected(Reject.WRONG_TYPE, "action")
            if arg is None:
                return _rejected(Reject.MISSING_FIELD, "arg")
            channel = arg.channel
            inst_type = arg.instType
            inst_id = arg.instId
            if channel not in CHANNELS:
                return _rejected(Reject.UNKNOWN_CHANNEL, channel, channel, inst_type, inst_id)
            snapshot = _ACTIONS.get(action)
            if snapshot is None:
                return _rejected(Reject.BAD_ACTION, action, channel, inst_type, inst_id)
            if not inst_id:
                return _rejected(Reject.MISSING_FIELD, "arg.instId", channel, inst_type, inst_id)
            data = obj.get("data")
            if data is None:
                return _rejected(Reject.MISSING_FIELD, "data", channel, inst_type, inst_id)
            if type(data) is not list:
                return _rejected(Reject.WRONG_TYPE, "data", channel, inst_type, inst_id)
            if not data:
                return _rejected(Reject.EMPTY_DATA, "", channel, inst_type, inst_id)
            if channel == CHANNEL_TRADE:
                if len(data) > MAX_TRADES_PER_FRAME:
                    return _rejected(Reject.TOO_LARGE, "trades", channel, inst_type, inst_id)
                rows = []
                for e in data:
                    te = type(e)
                    if te is dict:
                        rows.append((e.get("ts"), e.get("price"), e.get("size"), e.get("side"), e.get("tradeId")))
                    elif te is list and len(e) == 4:
                        if type(e[0]) is not str:  # v1 rows are all strings
                            return _rejected(Reject.WRONG_TYPE, "trade row", channel, inst_type, inst_id)
                        rows.append((e[0], e[1], e[2], e[3], None))
                    else:
                        return _rejected(Reject.WRONG_TYPE, "trade row", channel, inst_type, inst_id)
                r, trades = _trade_rows(rows)
                if r:
                    return _rejected(r, "trade", channel, inst_type, inst_id)
                return Decoded(FrameKind.TRADE, Reject.OK, channel, inst_type, inst_id, None, trades, snapshot)
            if len(data) > MAX_DATA_ENTRIES:
                return _rejected(Reject.TOO_LARGE, "data", channel, inst_type, inst_id)
            if channel != CHANNEL_BOOKS:
                snapshot = True
            books = []
            for e in data:
                if type(e) is not dict:
                    return _rejected(Reject.WRONG_TYPE, "data[] entry", channel, inst_type, inst_id)
                bids = e.get("bids")
                asks = e.get("asks")
                if bids is None or asks is None:
                    return _rejected(Reject.MISSING_FIELD, "bids/asks", channel, inst_type, inst_id)
                if not (_pairs_ok(bids) and _pairs_ok(asks)):
                    return _rejected(Reject.WRONG_TYPE, "levels", channel, inst_type, inst_id)
                if len(bids) > MAX_LEVELS_PER_SIDE or len(asks) > MAX_LEVELS_PER_SIDE:
                    return _rejected(Reject.TOO_LARGE, "levels", channel, inst_type, inst_id)
                try:
                    r, lv = _book_levels(
                        bids, asks, e.get("checksum", 0), e.get("seq"), e.get("pseq"), e.get("ts"), snapshot
                    )
                except TypeError:  # a level holding a non-string
                    return _rejected(Reject.WRONG_TYPE, "levels", channel, inst_type, inst_id)
                if r:
                    return _rejected(r, "depth", channel, inst_type, inst_id)
                books.append(lv)
            kind = FrameKind.SNAPSHOT if snapshot else FrameKind.UPDATE
            return Decoded(kind, Reject.OK, channel, inst_type, inst_id, books, None, snapshot)

        event = obj.get("event")
        op = obj.get("op")
        if (event is not None and type(event) is not str) or (op is not None and type(op) is not str):
            return _rejected(Reject.WRONG_TYPE, "event")
        return _event(event, op, arg, obj.get("code"), obj.get("msg"))


DECODERS = {MsgspecDecoder.name: MsgspecDecoder, OrjsonDecoder.name: OrjsonDecoder}
DEFAULT_DECODER = MsgspecDecoder.name


def make_decoder(name: str = DEFAULT_DECODER) -> Decoder:
    """A fresh decoder (``"msgspec"``, the measured-faster default, or ``"orjson"``).

    Raises:
        BitgetError: an unknown decoder name.
    """
    try:
        return DECODERS[name]()
    except KeyError:
        raise BitgetError(f"unknown decoder {name!r}; known: {sorted(DECODERS)}") from None
