"""What the two frame decoders share: the never-raising entry point and its counters, the checks of
a push (a frame with an ``action``) before its rows, and the classification of control frames
(events, echoed ops, ``pong``). Sans-I/O.

A concrete decoder (``msgspec_decoder.MsgspecDecoder``, ``orjson_decoder.OrjsonDecoder``) parses the
JSON its own way and hands a push to ``Decoder._push``; it supplies the two steps that depend on its
parse: ``_trade_rows_of`` (a trade push's entries as row tuples) and ``_depth_entry`` (one entry of a
depth push validated into a ``BookLevels``).
"""

from __future__ import annotations

from pipeline.trading.bitget.errors import FrameRejected
from pipeline.trading.bitget.frames import (
    ACTIONS,
    CHANNEL_BOOKS,
    CHANNEL_TRADE,
    CHANNELS,
    MAX_DATA_ENTRIES,
    MAX_FRAME_BYTES,
    MAX_TRADES_PER_FRAME,
    PONG_TEXT,
    Decoded,
    FrameKind,
    Reject,
    rejected,
)
from pipeline.trading.bitget.trades import trade_rows

_PONG = Decoded(FrameKind.PONG)
_EVENT_KINDS = {"subscribe": FrameKind.SUBSCRIBED, "unsubscribe": FrameKind.UNSUBSCRIBED, "error": FrameKind.ERROR}
# a module-level name, not the imported one: CPython 3.11 compiles ``imported_name.method(...)`` as an
# attribute load and a call (a bound method made per call) instead of LOAD_METHOD (measured: ~5% on trades)
_ACTIONS = ACTIONS


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
                d = rejected(Reject.TOO_LARGE, f"{len(frame)} bytes")
            else:
                d = self._decode(frame)
        except Exception as exc:  # a decoder bug must not kill the feed; tests assert it never happens
            d = rejected(Reject.INTERNAL, f"{type(exc).__name__}: {exc}")
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

    def _trade_rows_of(self, data: list) -> list | None:  # pragma: no cover - abstract
        """The entries of a trade push as ``(ts, price, size, side, tradeId)`` tuples (tradeId None
        for a v1 row), or None when an entry is neither a trade object nor a v1 row."""
        raise NotImplementedError

    def _depth_entry(self, e, snapshot: bool) -> tuple:  # pragma: no cover - abstract
        """One ``data[]`` entry of a depth push: ``(Reject.OK, BookLevels)``, or ``(reason, detail)``
        (detail None: the levels' values, ``depth.book_levels``'s verdict)."""
        raise NotImplementedError

    def _push(self, action: str, arg, data) -> Decoded:
        """A frame with an ``action``: ``arg`` (with ``channel`` / ``instType`` / ``instId``) and
        ``data`` as the concrete decoder parsed them. Checks, in this order (the first failure is the
        reason): an arg, a known channel, snapshot or update, an instId, data a non-empty list of at
        most MAX_TRADES_PER_FRAME trades or MAX_DATA_ENTRIES depth entries; then every row."""
        if arg is None:
            return rejected(Reject.MISSING_FIELD, "arg")
        channel = arg.channel
        inst_type = arg.instType
        inst_id = arg.instId
        if channel not in CHANNELS:
            return rejected(Reject.UNKNOWN_CHANNEL, channel, channel, inst_type, inst_id)
        snapshot = _ACTIONS.get(action)
        if snapshot is None:
            return rejected(Reject.BAD_ACTION, action, channel, inst_type, inst_id)
        if not inst_id:
            return rejected(Reject.MISSING_FIELD, "arg.instId", channel, inst_type, inst_id)
        if data is None:
            return rejected(Reject.MISSING_FIELD, "data", channel, inst_type, inst_id)
        if type(data) is not list:
            return rejected(Reject.WRONG_TYPE, "data", channel, inst_type, inst_id)
        if not data:
            return rejected(Reject.EMPTY_DATA, "", channel, inst_type, inst_id)
        if channel == CHANNEL_TRADE:
            if len(data) > MAX_TRADES_PER_FRAME:
                return rejected(Reject.TOO_LARGE, "trades", channel, inst_type, inst_id)
            rows = self._trade_rows_of(data)
            if rows is None:
                return rejected(Reject.WRONG_TYPE, "trade row", channel, inst_type, inst_id)
            r, trades = trade_rows(rows)
            if r:
                return rejected(r, "trade", channel, inst_type, inst_id)
            return Decoded(FrameKind.TRADE, Reject.OK, channel, inst_type, inst_id, None, trades, snapshot)
        if len(data) > MAX_DATA_ENTRIES:
            return rejected(Reject.TOO_LARGE, "data", channel, inst_type, inst_id)
        if channel != CHANNEL_BOOKS:
            snapshot = True
        books = []
        depth_entry = self._depth_entry
        for e in data:
            r, lv = depth_entry(e, snapshot)
            if r:
                return rejected(r, lv or "depth", channel, inst_type, inst_id)
            books.append(lv)
        kind = FrameKind.SNAPSHOT if snapshot else FrameKind.UPDATE
        return Decoded(kind, Reject.OK, channel, inst_type, inst_id, books, None, snapshot)


def control_frame(event, op, arg, code, msg) -> Decoded:
    """Classify a frame without an action: an event, an echoed op, or unknown."""
    name = event if event is not None else op
    if name is None:
        return rejected(Reject.UNKNOWN_FRAME)
    kind = _EVENT_KINDS.get(name)
    if arg is not None:
        channel, inst_type, inst_id = arg.channel, arg.instType, arg.instId
    else:
        channel = inst_type = inst_id = ""
    if kind is None:
        return rejected(Reject.UNKNOWN_EVENT, name, channel, inst_type, inst_id)
    detail = f"{code} {msg}" if kind == FrameKind.ERROR else ""
    return Decoded(kind, Reject.OK, channel, inst_type, inst_id, detail=detail)
