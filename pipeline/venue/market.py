"""The paper venue's market-data core: books kept as the venue's own strings, and the Bitget v2
public frames built from them. Sans-I/O: no socket, no clock, no randomness.

A source (``pipeline.venue.sources``: the synthetic model, or a capture replay) produces events::

    BookEvent(inst_id, snapshot, bids, asks, ts_ms, checksum=None, push_ts_ms=None)
        snapshot=True: the full book (replaces the state); False: the changed levels only
        (size 0 deletes the level, any other size replaces it, a new price is inserted).
        checksum None: computed from the resulting book; an int (a replayed frame's original
        value) is sent as it is.
    TradeEvent(inst_id, trades, ts_ms, snapshot=False, push_ts_ms=None)
        trades are v2 objects {"ts","price","size","side","tradeId"}; a missing tradeId is
        numbered by the venue (1, 2, ... per instrument).

``VenueMarket.apply_book`` / ``apply_trades`` fold an event into the state and return what
changed (``BookChange``, ``TradeEvent``), with the sequence number and checksum the venue
publishes; the ``*_frame`` methods turn state and changes into the exact text frames of the
Bitget v2 public WebSocket (compact JSON bytes, keys in the venue's order)::

    {"action":"snapshot"|"update","arg":{"instType":"SPOT","channel":"books","instId":"BTCUSDT"},
     "data":[{"asks":[["price","size"],...],"bids":[...],"checksum":<int32>,"seq":<int>,"ts":"<ms>"}],
     "ts":<ms>}
    {"action":"snapshot"|"update","arg":{...,"channel":"trade",...},
     "data":[{"ts":"<ms>","price":"..","size":"..","side":"buy"|"sell","tradeId":".."}],"ts":<ms>}
    {"event":"subscribe"|"unsubscribe","arg":{...}}
    {"event":"error","code":"30001","msg":"...","arg":{...}}
    pong

Each instrument's frames carry its own instType, and a subscription must name it (another instType:
30001 "doesn't exist"): ``VenueMarket(inst_type=...)`` takes one for all (default "SPOT") or one per
instId ("USDT-FUTURES" for a perpetual), as the exchange serves spot and futures apart.

Channels served: ``books`` (a snapshot of the full book on subscribe, then one update per book
change: the changed levels, the checksum of the resulting book), ``books1`` / ``books5`` /
``books15`` (a snapshot of the top N on every book change; checksum over the levels sent),
``trade`` (a snapshot of up to ``recent_trades`` recent trades, newest first, on subscribe; then
the new trades of each event, oldest first).

Book rules (the same as ``pipeline.trading.bitget.book``, so a client's book equals the venue's): a level is
keyed by its numeric price and keeps its ORIGINAL ``price`` / ``size`` strings; the checksum is
``pipeline.trading.bitget.book.bitget_checksum`` over the top 25 a side (reused, not reimplemented: its
core, the one ``BitgetBooks`` verifies with, over the ``"price:size"`` texts each side keeps sorted).

Sequence numbers: per instrument, +1 per book change (snapshot or update); a subscriber's snapshot
carries the current one. Faults that change what the venue publishes live here, so they are
testable without a socket: ``skip_seq(n)`` makes the next update's seq jump by ``n`` more
(negative: go back, which a client must treat as a gap), ``corrupt_next_checksum()`` sends a wrong,
non-zero checksum in the next update (the book itself stays right).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import NamedTuple

import orjson

from pipeline.trading.bitget.book import CHECKSUM_LEVELS, bitget_checksum
from pipeline.trading.bitget.book import _checksum_lv as checksum_of_texts  # bitget_checksum's core, on "p:s"
from pipeline.trading.bitget.protocol import (CHANNEL_BOOKS, CHANNEL_TRADE, INST_TYPE_SPOT, INST_TYPES, PING_TEXT,
                                              PONG_TEXT)
from pipeline.venue.errors import VenueError

#: Channels the venue serves, and the depth of each snapshot-only book channel.
DEPTH_CHANNELS = {"books1": 1, "books5": 5, "books15": 15}
SERVED_CHANNELS = frozenset({CHANNEL_BOOKS, CHANNEL_TRADE, *DEPTH_CHANNELS})
RECENT_TRADES = 50

#: Error codes of the venue's error event (Bitget's own numbering).
CODE_NOT_EXIST = "30001"  # channel / instrument does not exist
CODE_ILLEGAL_REQUEST = "30002"  # not JSON, not an object, a binary frame
CODE_INVALID_OP = "30003"  # op other than subscribe / unsubscribe
CODE_PARAM_ERROR = "30016"  # args missing or malformed

OP_PING = "ping"
OP_SUBSCRIBE = "subscribe"
OP_UNSUBSCRIBE = "unsubscribe"
OP_ERROR = "error"

PONG_FRAME = PONG_TEXT.encode()
_CORRUPT_MASK = 0x2A5A_5A5A


# --------------------------------------------------------------------------------------------
# Events (what a source produces)


class BookEvent(NamedTuple):
    """A book change of one instrument (see the module docstring)."""

    inst_id: str
    snapshot: bool
    bids: list  # [[price, size], ...] strings; best first in a snapshot
    asks: list
    ts_ms: int  # data[].ts
    checksum: int | None = None  # None: computed from the resulting book
    push_ts_ms: int | None = None  # top-level ts; None: ts_ms


class TradeEvent(NamedTuple):
    """Trades of one instrument, oldest first (or, for a snapshot, as the venue lists them)."""

    inst_id: str
    trades: list  # v2 objects {"ts","price","size","side","tradeId"}
    ts_ms: int
    snapshot: bool = False
    push_ts_ms: int | None = None


class BookChange(NamedTuple):
    """What ``VenueMarket.apply_book`` publishes for one book event."""

    inst_id: str
    snapshot: bool
    bids: list  # changed levels (update) or the full book (snapshot), best first
    asks: list
    checksum: int  # as sent (a corrupt one when that fault fired)
    seq: int
    ts_ms: int
    push_ts_ms: int
    corrupted: bool = False  # the checksum fault fired on this change


# --------------------------------------------------------------------------------------------
# Frames (pure builders)


def arg_of(channel: str, inst_id: str, inst_type: str = INST_TYPE_SPOT) -> dict:
    return {"instType": inst_type, "channel": channel, "instId": inst_id}


def book_frame(action: str, channel: str, inst_id: str, bids: list, asks: list, checksum: int, seq: int,
               ts_ms: int, push_ts_ms: int, inst_type: str = INST_TYPE_SPOT) -> bytes:
    """A depth push of one ``data[]`` entry."""
    return orjson.dumps({
        "action": action,
        "arg": arg_of(channel, inst_id, inst_type),
        "data": [{"asks": asks, "bids": bids, "checksum": checksum, "seq": seq, "ts": str(ts_ms)}],
        "ts": push_ts_ms,
    })


def trade_frame(action: str, inst_id: str, trades: list, push_ts_ms: int, inst_type: str = INST_TYPE_SPOT) -> bytes:
    """A trade push (``trades``: v2 trade objects)."""
    return orjson.dumps({"action": action, "arg": arg_of(CHANNEL_TRADE, inst_id, inst_type), "data": trades,
                         "ts": push_ts_ms})


def event_frame(event: str, arg: dict) -> bytes:
    """``{"event":"subscribe"|"unsubscribe","arg":{...}}``."""
    return orjson.dumps({"event": event, "arg": arg})


def error_frame(code: str, msg: str, arg: dict | None = None) -> bytes:
    """``{"event":"error","code":"30001","msg":"...","arg":{...}}`` (no ``arg`` when none applies)."""
    out = {"event": "error", "code": code, "msg": msg}
    if arg is not None:
        out["arg"] = arg
    return orjson.dumps(out)


# --------------------------------------------------------------------------------------------
# Requests (pure)


class Request(NamedTuple):
    """One thing a client asked: ``op`` is OP_PING, OP_SUBSCRIBE, OP_UNSUBSCRIBE or OP_ERROR (then
    ``code`` / ``msg`` say why). ``arg`` is the normalised args entry (echoed in the answer)."""

    op: str
    arg: dict | None = None
    code: str = ""
    msg: str = ""


def _error(code: str, msg: str, arg: dict | None = None) -> Request:
    return Request(OP_ERROR, arg, code, msg)


def parse_request(text: str | bytes, instruments: Iterable[str] | dict | set | frozenset,
                  inst_type: str | Mapping[str, str] = INST_TYPE_SPOT) -> list[Request]:
    """What one client frame asks for: ``ping``, or ``{"op":"subscribe"|"unsubscribe","args":[...]}``
    with one ``Request`` per args entry (an unknown instrument, channel or instType gives a
    ``30001`` error for that entry only). ``inst_type``: every instrument's instType, or instId ->
    its own (an instrument asked under another instType does not exist). Never raises."""
    if text == PING_TEXT:
        return [Request(OP_PING)]
    if isinstance(text, (bytes, bytearray, memoryview)):
        return [_error(CODE_ILLEGAL_REQUEST, "illegal request: binary frame")]
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return [_error(CODE_ILLEGAL_REQUEST, "illegal request: not JSON")]
    if not isinstance(obj, dict):
        return [_error(CODE_ILLEGAL_REQUEST, "illegal request: not an object")]
    op = obj.get("op")
    if op not in (OP_SUBSCRIBE, OP_UNSUBSCRIBE):
        return [_error(CODE_INVALID_OP, f"invalid op {op!r}"[:100])]
    args = obj.get("args")
    if not isinstance(args, list) or not args:
        return [_error(CODE_PARAM_ERROR, "param error: args must be a non-empty list")]
    out = []
    for a in args:
        if not isinstance(a, dict):
            out.append(_error(CODE_PARAM_ERROR, "param error: an args entry is not an object"))
            continue
        it, ch, iid = a.get("instType"), a.get("channel"), a.get("instId")
        if not (isinstance(it, str) and isinstance(ch, str) and isinstance(iid, str)):
            out.append(_error(CODE_PARAM_ERROR, "param error: instType, channel and instId must be strings"))
            continue
        arg = arg_of(ch, iid, it)
        want = inst_type if isinstance(inst_type, str) else inst_type.get(iid)
        if it != want or ch not in SERVED_CHANNELS or iid not in instruments:
            out.append(_error(CODE_NOT_EXIST, f"instType:{it},channel:{ch},instId:{iid} doesn't exist"[:200], arg))
            continue
        out.append(Request(op, arg))
    return out


# --------------------------------------------------------------------------------------------
# State


class _Side:
    """One side of a book: numeric price -> [price, size] original strings, the prices sorted and,
    in the same order, the ``"price:size"`` texts the checksum covers."""

    __slots__ = ("keys", "levels", "texts", "descending")

    def __init__(self, descending: bool) -> None:
        self.keys: list[float] = []  # ascending
        self.levels: dict[float, list] = {}
        self.texts: list[str] = []  # texts[i]: the level at keys[i]
        self.descending = descending

    def clear(self) -> None:
        self.keys = []
        self.levels = {}
        self.texts = []

    def set(self, price: str, size: str, k: float | None = None) -> None:
        """Set the level at ``price`` (``k``: its numeric value, when the caller has it) to ``size``
        (zero removes it)."""
        if k is None:
            k = float(price)
        levels = self.levels
        if float(size) == 0.0:
            if k in levels:
                del levels[k]
                i = bisect_left(self.keys, k)
                del self.keys[i], self.texts[i]
        else:
            i = bisect_left(self.keys, k)
            if k in levels:
                self.texts[i] = f"{price}:{size}"
            else:
                self.keys.insert(i, k)
                self.texts.insert(i, f"{price}:{size}")
            levels[k] = [price, size]

    def top_texts(self, n: int) -> list[str]:
        """The ``"price:size"`` texts of the best ``n`` levels, best first."""
        return self.texts[: -n - 1 : -1] if self.descending else self.texts[:n]

    def top(self, n: int | None = None) -> list:
        """Best first, at most ``n`` (all when None)."""
        keys, levels = self.keys, self.levels
        if self.descending:
            sel = keys[::-1] if n is None else keys[: -n - 1 : -1] if n else []
        else:
            sel = keys if n is None else keys[:n]
        return [levels[k] for k in sel]

    def __len__(self) -> int:
        return len(self.keys)


class InstrumentState:
    """One instrument's book (strings), sequence number, last book ts and recent trades."""

    __slots__ = ("inst_id", "bids", "asks", "seq", "ts_ms", "ready", "trades", "next_trade_id",
                 "seq_skip", "corrupt_next")

    def __init__(self, inst_id: str, recent_trades: int, seq_start: int) -> None:
        self.inst_id = inst_id
        self.bids = _Side(descending=True)
        self.asks = _Side(descending=False)
        self.seq = seq_start
        self.ts_ms = 0
        self.ready = False  # a snapshot has been applied
        self.trades: deque = deque(maxlen=recent_trades)  # oldest first
        self.next_trade_id = 1
        self.seq_skip = 0
        self.corrupt_next = False

    def checksum(self) -> int:
        """``bitget_checksum`` of the top 25 a side (from the kept ``"price:size"`` texts)."""
        return checksum_of_texts(self.bids.top_texts(CHECKSUM_LEVELS), self.asks.top_texts(CHECKSUM_LEVELS))


def _apply_side(side: _Side, levels: list, descending: bool) -> list:
    """``side.set`` each ``[price, size]`` of an update; returns the levels sorted best first
    (stable: equal prices keep their order)."""
    keyed = []
    for lv in levels:
        p, s = lv
        k = float(p)
        side.set(p, s, k)
        keyed.append((k, lv))
    keyed.sort(key=itemgetter(0), reverse=descending)
    return [lv for _k, lv in keyed]


def corrupt_checksum(checksum: int) -> int:
    """A checksum that differs from ``checksum`` and is not 0 (0 means "none": never checked)."""
    bad = checksum ^ _CORRUPT_MASK
    return bad if bad else 1


class VenueMarket:
    """Every served instrument's state, and the frames the venue publishes from it."""

    def __init__(self, inst_ids: Sequence[str], *, inst_type: str | Mapping[str, str] = INST_TYPE_SPOT,
                 recent_trades: int = RECENT_TRADES, seq_start: int = 0) -> None:
        """``inst_type``: the instType every instrument is published under, or instId -> its own
        (one missing from the mapping: SPOT), e.g. "USDT-FUTURES" for a perpetual.

        Raises:
            VenueError: no instrument, a duplicate, an instId that is not ASCII letters and digits,
                or an instType not one of ``INST_TYPES``.
        """
        if not inst_ids:
            raise VenueError("the venue needs at least one instrument")
        #: instId -> the instType its frames carry and its subscriptions must name
        self.inst_types = {i: inst_type if isinstance(inst_type, str) else inst_type.get(i, INST_TYPE_SPOT)
                           for i in inst_ids}
        bad = sorted(set(self.inst_types.values()) - INST_TYPES)
        if bad:
            raise VenueError(f"instType must be one of {sorted(INST_TYPES)}, got {bad[0]!r}")
        self.states: dict[str, InstrumentState] = {}
        for iid in inst_ids:
            if not (isinstance(iid, str) and iid.isascii() and iid.isalnum()):
                raise VenueError(f"instId must be ASCII letters and digits, got {iid!r}")
            if iid in self.states:
                raise VenueError(f"duplicate instrument {iid!r}")
            self.states[iid] = InstrumentState(iid, recent_trades, seq_start)
        self.checksum_faults = 0  # corrupt checksums sent
        self.seq_faults = 0  # seq jumps applied
        self.replay_checksum_disagreements = 0  # given checksums that differ from the venue's own book

    # -- control ------------------------------------------------------------------------------

    @property
    def inst_ids(self) -> list[str]:
        return list(self.states)

    def _targets(self, inst_id: str | None) -> list[InstrumentState]:
        if inst_id is None:
            return list(self.states.values())
        st = self.states.get(inst_id)
        if st is None:
            raise VenueError(f"unknown instrument {inst_id!r}; served: {sorted(self.states)}")
        return [st]

    def skip_seq(self, n: int = 1, inst_id: str | None = None) -> None:
        """The next update of ``inst_id`` (every instrument when None) gets seq + 1 + ``n``
        instead of seq + 1 (``n`` < 0 goes back; clamped at 0)."""
        for st in self._targets(inst_id):
            st.seq_skip += int(n)

    def corrupt_next_checksum(self, inst_id: str | None = None) -> None:
        """The next update of ``inst_id`` (every instrument when None) carries a wrong checksum."""
        for st in self._targets(inst_id):
            st.corrupt_next = True

    def levels(self, inst_id: str, n: int | None = None) -> tuple[list, list]:
        """(bids, asks) best first as [price, size] strings, at most ``n`` a side."""
        st = self.states[inst_id]
        return st.bids.top(n), st.asks.top(n)

    def checksum(self, inst_id: str) -> int:
        return self.states[inst_id].checksum()

    def ready(self, inst_id: str) -> bool:
        """Whether ``inst_id`` has a book (a snapshot was applied)."""
        return self.states[inst_id].ready

    # -- events -------------------------------------------------------------------------------

    def apply_book(self, ev: BookEvent) -> BookChange | None:
        """Fold a book event into the state; the change to publish, or None (unknown instrument,
        or an update before any snapshot)."""
        st = self.states.get(ev.inst_id)
        if st is None:
            return None
        bids_s, asks_s = st.bids, st.asks
        if ev.snapshot:
            bids_s.clear()
            asks_s.clear()
            st.ready = True
        elif not st.ready:
            return None
        if ev.snapshot:
            for p, s in ev.bids:
                bids_s.set(p, s)
            for p, s in ev.asks:
                asks_s.set(p, s)
        else:
            bids, asks = _apply_side(bids_s, ev.bids, True), _apply_side(asks_s, ev.asks, False)
        st.ts_ms = ev.ts_ms
        seq = st.seq + 1
        corrupted = False
        if not ev.snapshot and st.seq_skip:
            seq = max(0, seq + st.seq_skip)
            st.seq_skip = 0
            self.seq_faults += 1
        st.seq = seq
        if ev.checksum is None:
            checksum = st.checksum()
        else:
            checksum = ev.checksum
            if checksum and checksum != st.checksum():
                self.replay_checksum_disagreements += 1
        if not ev.snapshot and st.corrupt_next:
            st.corrupt_next = False
            checksum = corrupt_checksum(checksum if checksum else st.checksum())
            corrupted = True
            self.checksum_faults += 1
        if ev.snapshot:
            bids, asks = bids_s.top(), asks_s.top()
        push_ts = ev.ts_ms if ev.push_ts_ms is None else ev.push_ts_ms
        return BookChange(ev.inst_id, ev.snapshot, bids, asks, checksum, seq, ev.ts_ms, push_ts, corrupted)

    def apply_trades(self, ev: TradeEvent) -> TradeEvent | None:
        """Record trades (numbering those without a tradeId); the event to publish, or None for an
        unknown instrument or no trades."""
        st = self.states.get(ev.inst_id)
        if st is None or not ev.trades:
            return None
        trades = []
        for t in ev.trades:
            if "tradeId" not in t:
                t = {**t, "tradeId": str(st.next_trade_id)}
                st.next_trade_id += 1
            trades.append(t)
        if ev.snapshot:  # the venue lists a snapshot newest first
            st.trades.clear()
            st.trades.extend(sorted(trades, key=lambda t: int(t["ts"])))
        else:
            st.trades.extend(trades)
        return ev._replace(trades=trades)

    # -- frames -------------------------------------------------------------------------------

    def books_frame(self, ch: BookChange) -> bytes:
        """The ``books`` push of a change (snapshot or update)."""
        return book_frame("snapshot" if ch.snapshot else "update", CHANNEL_BOOKS, ch.inst_id, ch.bids, ch.asks,
                          ch.checksum, ch.seq, ch.ts_ms, ch.push_ts_ms, self.inst_types[ch.inst_id])

    def books_snapshot_frame(self, inst_id: str, push_ts_ms: int | None = None) -> bytes | None:
        """A ``books`` snapshot of the current full book (what a new subscriber gets first), or None
        when the instrument has no book yet."""
        st = self.states[inst_id]
        if not st.ready:
            return None
        return book_frame("snapshot", CHANNEL_BOOKS, inst_id, st.bids.top(), st.asks.top(), st.checksum(), st.seq,
                          st.ts_ms, st.ts_ms if push_ts_ms is None else push_ts_ms, self.inst_types[inst_id])

    def depth_frame(self, inst_id: str, channel: str, push_ts_ms: int | None = None) -> bytes | None:
        """A ``books1/5/15`` snapshot of the current top N (checksum over the levels sent), or None
        when the instrument has no book yet."""
        st = self.states[inst_id]
        if not st.ready:
            return None
        n = DEPTH_CHANNELS[channel]
        bids, asks = st.bids.top(n), st.asks.top(n)
        return book_frame("snapshot", channel, inst_id, bids, asks, bitget_checksum(bids, asks), st.seq, st.ts_ms,
                          st.ts_ms if push_ts_ms is None else push_ts_ms, self.inst_types[inst_id])

    def trades_frame(self, ev: TradeEvent) -> bytes:
        """The ``trade`` push of an event returned by ``apply_trades``."""
        push_ts = ev.ts_ms if ev.push_ts_ms is None else ev.push_ts_ms
        return trade_frame("snapshot" if ev.snapshot else "update", ev.inst_id, ev.trades, push_ts,
                           self.inst_types[ev.inst_id])

    def trades_snapshot_frame(self, inst_id: str, push_ts_ms: int | None = None) -> bytes | None:
        """A ``trade`` snapshot of the recent trades, newest first; None when there is none yet (a
        push with an empty ``data`` is malformed)."""
        st = self.states[inst_id]
        if not st.trades:
            return None
        trades = list(reversed(st.trades))
        if push_ts_ms is None:
            push_ts_ms = max(st.ts_ms, int(trades[0]["ts"]))
        return trade_frame("snapshot", inst_id, trades, push_ts_ms, self.inst_types[inst_id])
