"""Bitget v2 public WebSocket vocabulary: endpoints, channels, limits, frame kinds, reject codes and
the decoded values (``Decoded``, ``BookLevels``, ``Trades``). Pure declarations, no decoding.

The frames themselves and the decoder's rules are described in ``pipeline.trading.bitget.protocol``.
"""

from __future__ import annotations

import enum

import msgspec

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
        return self._bid_lv if self._bid_lv is not None else self._build_lv(0)

    @property
    def ask_lv(self) -> list:
        """The asks' original ``"price:size"`` strings, in the order sent."""
        return self._ask_lv if self._ask_lv is not None else self._build_lv(1)

    def _build_lv(self, side: int) -> list:
        """Side ``side``'s (0 bids, 1 asks) ``"price:size"`` strings from ``_raw``, kept."""
        lv = _lv_from_raw(self._raw[side])
        if side:
            self._ask_lv = lv
        else:
            self._bid_lv = lv
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


ACTIONS = {"snapshot": True, "update": False}  # a push's "action" -> whether it is a snapshot


def rejected(reason: Reject, detail: str = "", channel: str = "", inst_type: str = "", inst_id: str = "") -> Decoded:
    """The ``Decoded`` of a frame refused for ``reason``: kind UNKNOWN for the well-formed frames that
    are not ours (UNKNOWN_CHANNEL, UNKNOWN_EVENT, UNKNOWN_FRAME), REJECTED for the rest."""
    kind = FrameKind.UNKNOWN if reason >= Reject.UNKNOWN_CHANNEL and reason != Reject.INTERNAL else FrameKind.REJECTED
    return Decoded(kind, reason, channel, inst_type, inst_id, detail=detail)
