"""``OrjsonDecoder``: frames parsed by ``orjson.loads`` into dicts, shapes and types checked here in
Python. Same contract as ``MsgspecDecoder`` (kept for comparison and as a fallback). Sans-I/O."""

from __future__ import annotations

import orjson

from pipeline.trading.bitget.decoder import Decoder, control_frame
from pipeline.trading.bitget.depth import book_levels
from pipeline.trading.bitget.frames import MAX_LEVELS_PER_SIDE, Decoded, Reject, rejected

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
            return rejected(Reject.BAD_JSON, str(exc))
        if type(obj) is not dict:
            return rejected(Reject.NOT_OBJECT, type(obj).__name__)
        arg = obj.get("arg")
        if arg is not None:
            if type(arg) is not dict:
                return rejected(Reject.WRONG_TYPE, "arg")
            arg = _DictArg(arg)
            if type(arg.channel) is not str or type(arg.instType) is not str or type(arg.instId) is not str:
                return rejected(Reject.WRONG_TYPE, "arg fields")
        action = obj.get("action")
        if action is not None:
            if type(action) is not str:
                return rejected(Reject.WRONG_TYPE, "action")
            return self._push(action, arg, obj.get("data"))
        event = obj.get("event")
        op = obj.get("op")
        if (event is not None and type(event) is not str) or (op is not None and type(op) is not str):
            return rejected(Reject.WRONG_TYPE, "event")
        return control_frame(event, op, arg, obj.get("code"), obj.get("msg"))

    def _trade_rows_of(self, data: list) -> list | None:
        rows = []
        for e in data:
            te = type(e)
            if te is dict:
                rows.append((e.get("ts"), e.get("price"), e.get("size"), e.get("side"), e.get("tradeId")))
            elif te is list and len(e) == 4 and type(e[0]) is str:  # v1 rows are all strings
                rows.append((e[0], e[1], e[2], e[3], None))
            else:
                return None
        return rows

    def _depth_entry(self, e, snapshot: bool) -> tuple:
        if type(e) is not dict:
            return Reject.WRONG_TYPE, "data[] entry"
        bids = e.get("bids")
        asks = e.get("asks")
        if bids is None or asks is None:
            return Reject.MISSING_FIELD, "bids/asks"
        if not (_pairs_ok(bids) and _pairs_ok(asks)):
            return Reject.WRONG_TYPE, "levels"
        if len(bids) > MAX_LEVELS_PER_SIDE or len(asks) > MAX_LEVELS_PER_SIDE:
            return Reject.TOO_LARGE, "levels"
        try:
            return book_levels(bids, asks, e.get("checksum", 0), e.get("seq"), e.get("pseq"), e.get("ts"), snapshot)
        except TypeError:  # a level holding a non-string
            return Reject.WRONG_TYPE, "levels"
