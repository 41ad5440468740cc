"""``MsgspecDecoder``: frames decoded into typed ``msgspec.Struct`` envelopes (shapes and types
checked in C), with a fast path for books1/5/15 pushes in the venue's canonical form. The default
decoder (``protocol.make_decoder``). Sans-I/O."""

from __future__ import annotations

from typing import Annotated

import msgspec

from pipeline.trading.bitget.decoder import Decoder, control_frame
from pipeline.trading.bitget.depth import book_levels, fast_snapshot
from pipeline.trading.bitget.frames import (
    ACTIONS,
    CHANNELS,
    MAX_FRAME_BYTES,
    MAX_LEVELS_PER_SIDE,
    MAX_TRADES_PER_FRAME,
    SNAPSHOT_CHANNELS,
    Decoded,
    FrameKind,
    Reject,
    rejected,
)

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


class _FastData(_Data, gc=False):
    """A depth entry whose sides are kept as raw JSON (checked and parsed in ``depth.fast_snapshot``);
    every other field is ``_Data``'s, same place and type, so the fast decode accepts no more."""

    asks: msgspec.Raw = msgspec.Raw()
    bids: msgspec.Raw = msgspec.Raw()


class _FastEnvelope(_Envelope, gc=False):
    """``_Envelope`` with one ``_FastData`` entry (every other field and type the same)."""

    data: Annotated[list[_FastData], msgspec.Meta(max_length=1)] | None = None


# frames that may take the books1/5/15 fast path (MsgspecDecoder.decode); a miss only costs speed
_NEEDLE_15 = '"channel":"books1'  # books1 and books15
_NEEDLE_5 = '"channel":"books5"'
_NEEDLE_B15 = _NEEDLE_15.encode()
_NEEDLE_B5 = _NEEDLE_5.encode()
_SNAPSHOT_I = int(FrameKind.SNAPSHOT)  # plain ints index the counters without an __index__ call
_OK_I = int(Reject.OK)


class MsgspecDecoder(Decoder):
    """Decoder over ``msgspec.json.Decoder(_Envelope)`` (the default; see ``make_decoder``).

    Fast path: a books1/5/15 push is first decoded with its sides as raw JSON; when the sides are
    in the venue's canonical form and every check passes, the numbers come from one orjson parse
    (``depth.fast_snapshot``) and the ``"price:size"`` strings are only built when asked for.
    Anything else, or any failed check, goes through the full typed decode, so rejections and their
    reasons are exactly those of the typed decode."""

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
                    if (env.action in ACTIONS and env.data and arg is not None
                            and arg.channel in SNAPSHOT_CHANNELS and arg.instId):
                        d = fast_snapshot(env.data[0], arg.channel, arg.instType, arg.instId)
                        if d is not None:
                            self.kinds[_SNAPSHOT_I] += 1
                            self.rejects[_OK_I] += 1
                            return d
                except Exception:  # noqa: BLE001 - the full decode below classifies the frame
                    pass
        return Decoder.decode(self, frame)

    def _decode(self, frame) -> Decoded:
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
                    return rejected(Reject.UNKNOWN_CHANNEL, arg.channel, arg.channel, arg.instType, arg.instId)
                return rejected(_validation_reason(msg), msg, arg.channel, arg.instType, arg.instId)
            return rejected(_validation_reason(msg), msg)
        except msgspec.DecodeError as exc:
            return rejected(Reject.BAD_JSON, str(exc))
        action = env.action
        if action is not None:
            return self._push(action, env.arg, env.data)
        return control_frame(env.event, env.op, env.arg, env.code, env.msg)

    _decode_typed = _decode  # the typed decode alone: the fast path's reference

    def _trade_rows_of(self, data: list) -> list:
        rows = []
        for e in data:
            if type(e) is _Data:
                rows.append((e.ts, e.price, e.size, e.side, e.tradeId))
            else:
                rows.append((e[0], e[1], e[2], e[3], None))
        return rows

    def _depth_entry(self, e, snapshot: bool) -> tuple:
        if type(e) is not _Data:
            return Reject.WRONG_TYPE, "data[] entry"
        if e.bids is None or e.asks is None:
            return Reject.MISSING_FIELD, "bids/asks"
        return book_levels(e.bids, e.asks, e.checksum, e.seq, e.pseq, e.ts, snapshot)
