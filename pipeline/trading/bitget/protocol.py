"""Bitget v2 public WebSocket: the protocol's one import point (request messages, frame kinds,
decoders) and its description. Sans-I/O.

Where each part lives: ``frames`` (endpoints, channels, limits, ``FrameKind``, ``Reject``, the decoded
values), ``requests`` (the frames we send), ``values`` / ``depth`` / ``trades`` (validation of numbers,
depth entries, trade rows), ``decoder`` (the entry point, counters, push checks and control frames
both decoders share), ``msgspec_decoder`` and ``orjson_decoder``. This module re-exports their public
names and picks a decoder by name (``make_decoder``).

Connection (the feed process owns it): ``wss://ws.bitget.com/v2/ws/public``; send the text ``ping``
every 30 s and expect ``pong``; at most 10 messages a second, 240 subscribe requests an hour and
1000 channels per connection; the ``args`` of one request may not exceed 4096 bytes.

Requests (built by ``requests``, compact JSON, keys in this order)::

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
Python). ``make_decoder()`` returns the faster one on real frames (msgspec; ``bench/feed.py`` measures
both). The msgspec decoder has a fast path for books1/5/15 pushes in the venue's
canonical form (``depth.fast_snapshot``: sides kept as raw JSON, checked by their skeleton, parsed by
one orjson call, ``"price:size"`` strings built lazily); any other frame, or any failed check,
goes through the full typed decode, which alone decides rejections and their reasons.
"""

from __future__ import annotations

from pipeline.trading.bitget.decoder import Decoder
from pipeline.trading.bitget.depth import MAX_FAST_LEVELS
from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.frames import (
    BOOK_CHANNELS,
    CHANNEL_BOOKS,
    CHANNEL_BOOKS1,
    CHANNEL_BOOKS5,
    CHANNEL_BOOKS15,
    CHANNEL_TRADE,
    CHANNELS,
    INST_TYPE_COIN_FUTURES,
    INST_TYPE_SPOT,
    INST_TYPE_USDC_FUTURES,
    INST_TYPE_USDT_FUTURES,
    INST_TYPES,
    INT32_MAX,
    INT32_MIN,
    MAX_DATA_ENTRIES,
    MAX_FRAME_BYTES,
    MAX_LEVELS_PER_SIDE,
    MAX_SUBSCRIBE_ARGS_BYTES,
    MAX_TRADES_PER_FRAME,
    MAX_TS_MS,
    PING_INTERVAL_S,
    PING_TEXT,
    PONG_TEXT,
    PUBLIC_URL,
    QUOTE_COIN,
    SNAPSHOT_CHANNELS,
    TRADE_SIDE_CODES,
    U64_MAX,
    BookLevels,
    Decoded,
    FrameKind,
    Reject,
    Subscription,
    Trades,
    base_coin,
)
from pipeline.trading.bitget.msgspec_decoder import MsgspecDecoder
from pipeline.trading.bitget.orjson_decoder import OrjsonDecoder
from pipeline.trading.bitget.requests import (
    SUBSCRIBE_CHUNK,
    ping_message,
    resync_messages,
    subscribe_message,
    subscribe_messages,
    unsubscribe_message,
)

__all__ = [
    "BOOK_CHANNELS", "CHANNELS", "CHANNEL_BOOKS", "CHANNEL_BOOKS1", "CHANNEL_BOOKS15", "CHANNEL_BOOKS5",
    "CHANNEL_TRADE", "DECODERS", "DEFAULT_DECODER", "INST_TYPES", "INST_TYPE_COIN_FUTURES", "INST_TYPE_SPOT",
    "INST_TYPE_USDC_FUTURES", "INST_TYPE_USDT_FUTURES", "INT32_MAX", "INT32_MIN", "MAX_DATA_ENTRIES",
    "MAX_FAST_LEVELS", "MAX_FRAME_BYTES", "MAX_LEVELS_PER_SIDE", "MAX_SUBSCRIBE_ARGS_BYTES",
    "MAX_TRADES_PER_FRAME", "MAX_TS_MS", "PING_INTERVAL_S", "PING_TEXT", "PONG_TEXT", "PUBLIC_URL",
    "QUOTE_COIN", "SNAPSHOT_CHANNELS", "SUBSCRIBE_CHUNK", "TRADE_SIDE_CODES", "U64_MAX", "BookLevels",
    "Decoded", "Decoder", "FrameKind", "MsgspecDecoder", "OrjsonDecoder", "Reject", "Subscription", "Trades",
    "base_coin", "make_decoder", "ping_message", "resync_messages", "subscribe_message", "subscribe_messages",
    "unsubscribe_message",
]

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
