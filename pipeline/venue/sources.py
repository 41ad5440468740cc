"""Where the paper venue's market data comes from: the synthetic model, or a recorded capture.
Sans-I/O apart from ``ReplaySource.from_capture`` reading its file once; no clock (the server
passes market time in).

Both sources have the same shape, in market time (ms since the source's start)::

    inst_ids               instruments served
    initial_events()       events applied before anyone connects (synthetic: each book's snapshot)
    take(n)                the next n units, due or not (a unit: one synthetic step, or one frame
                           of the capture); [] when exhausted
    pending(market_ms, limit)
                           the units due by ``market_ms`` (at most ``limit``); the synthetic source
                           folds all due steps into one book event per instrument
    next_due_ms()          market time of the next unit; None when exhausted
    rewind()               start again (replay; the synthetic model cannot)

Events are ``pipeline.venue.market.BookEvent`` / ``TradeEvent``. ``make_source`` builds any of them from
parameters (``instrument_specs``: the config instruments a synthetic source makes a market in).

Encoded (``EncodedSource``, kind "encoded"): the frames themselves, built once before anyone connects,
so that publishing costs the venue almost nothing. It runs another source (the synthetic model, or a
capture's replay) for ``units`` units through a private ``VenueMarket`` and keeps, per unit, the
pre-encoded push of every changed instrument on each of its ``channels`` (``books1`` / ``books5`` /
``books15`` snapshots, ``trade``), the instruments whose book changed and their trades (for the order
engine). Its units are ``EncodedUnit``s, not events (``pipeline.venue.encoded_server`` publishes them).
It never ends: after the last unit it starts again, one period later in market time (the period: the
last unit's time plus the mean gap between units), and each book push's ``seq`` grows by more than the
built units' book changes per loop, its data ``ts`` and push ``ts`` by the period, so every
instrument's seq and ts keep increasing across loops (a trade push's rows keep their built ``ts``,
its push ``ts`` moves). ``books`` (incremental) is not served from frames.

Synthetic: one ``SyntheticMarket`` per instrument (seeded from the venue seed and the symbol, so
adding an instrument does not change the others), all with one ``SyntheticParams`` (``MARKETS`` names
the two a venue config picks from: "default" and "calibrated"), stepped every ``step_ms`` of market
time; a step's changed levels become one update (size ``"0"`` deletes), its trades one trade event.
Data ``ts`` is ``start_ms + steps * step_ms``. Stress fault: ``jump_prob`` / ``jump_ticks`` make each
market's whole book jump by 1..``jump_ticks`` ticks with probability ``jump_prob`` per step (see
``pipeline.venue.synthetic``), published as ordinary book changes; ``jumps`` counts them.

Replay: the RECV frames of a capture (``pipeline.trading.bitget.capture`` line format) on the ``books``
and ``trade`` channels, translated to v2 by ``translate_frame``: ``instType`` ``"sp"`` -> ``"SPOT"``,
v1 trade rows ``[ts, price, size, side]`` -> objects ``{"ts","price","size","side"}`` (the venue
numbers their tradeId), original price / size strings and checksums kept. Other channels (ticker,
candles) and events are skipped. Market time is the capture's receive time minus the first frame's.
Its price-jump fault (``jump_prob`` / ``jump_ticks``, checksums recomputed) is ``pipeline.venue.jumps``.
"""

from __future__ import annotations

import dataclasses
import re
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from pipeline.trading.bitget.capture import RECV, read_capture
from pipeline.trading.bitget.errors import CaptureError
from pipeline.trading.bitget.protocol import CHANNEL_BOOKS, CHANNEL_TRADE, INST_TYPE_SPOT
from pipeline.venue.errors import ReplayError, VenueError
from pipeline.venue.jumps import with_jumps
from pipeline.venue.market import DEPTH_CHANNELS, BookEvent, TradeEvent, VenueMarket
from pipeline.venue.synthetic import CALIBRATED, SyntheticMarket, SyntheticParams

#: the synthetic markets a venue can serve, by name (``make_source``'s ``market``): the model's
#: defaults, or its calibration to the shared Bitget capture (``pipeline.venue.synthetic.CALIBRATED``)
MARKETS = {"default": SyntheticParams(), "calibrated": CALIBRATED}
V1_INST_TYPES = {"sp": INST_TYPE_SPOT, "SP": INST_TYPE_SPOT, INST_TYPE_SPOT: INST_TYPE_SPOT}
TRADE_SIDES = frozenset({"buy", "sell"})


class InstrumentSpec(NamedTuple):
    """An instrument the synthetic source makes a market in."""

    symbol: str
    tick_size: float
    lot_size: float


# --------------------------------------------------------------------------------------------
# Synthetic


class SyntheticSource:
    """The synthetic order-flow model, one market per instrument (see the module docstring)."""

    finite = False

    def __init__(self, instruments: Sequence[InstrumentSpec], *, seed: int, step_ms: int | None = None,
                 start_ms: int = 0, params: SyntheticParams | None = None, jump_prob: float | None = None,
                 jump_ticks: int | None = None) -> None:
        """``jump_prob`` / ``jump_ticks``: the price-jump fault (None: as in ``params``, default off).

        Raises:
            VenueError: no instrument, a duplicate symbol, a tick or lot size <= 0, step_ms < 1,
                a jump_prob outside [0, 1], a jump_ticks < 1, or another field of ``params`` out of
                its range (``pipeline.venue.synthetic.check_params``).
        """
        if not instruments:
            raise VenueError("the synthetic source needs at least one instrument")
        params = params or SyntheticParams()
        jumps = {}
        if jump_prob is not None:
            jumps["jump_prob"] = float(jump_prob)
        if jump_ticks is not None:
            jumps["jump_ticks"] = int(jump_ticks)
        if jumps:
            params = dataclasses.replace(params, **jumps)
        if not 0.0 <= params.jump_prob <= 1.0:
            raise VenueError(f"jump_prob must be in 0..1, got {params.jump_prob}")
        if params.jump_ticks < 1:
            raise VenueError(f"jump_ticks must be >= 1, got {params.jump_ticks}")
        self.params = params
        self.step_ms = int(step_ms if step_ms is not None else params.step_ms)
        if self.step_ms < 1:
            raise VenueError(f"step_ms must be >= 1, got {step_ms}")
        self.start_ms = int(start_ms)
        self.seed = int(seed)
        self.markets: dict[str, SyntheticMarket] = {}
        for spec in instruments:
            if spec.symbol in self.markets:
                raise VenueError(f"duplicate instrument {spec.symbol!r}")
            try:
                self.markets[spec.symbol] = SyntheticMarket(self.market_seed(spec.symbol), spec.tick_size,
                                                            spec.lot_size, params)
            except ValueError as exc:
                raise VenueError(f"{spec.symbol}: {exc}") from None
        self.steps = 0

    def market_seed(self, symbol: str) -> int:
        """The seed of one instrument's market: the venue seed and the symbol."""
        return (self.seed & 0xFFFF_FFFF) << 32 | zlib.crc32(symbol.encode())

    @property
    def inst_ids(self) -> list[str]:
        return list(self.markets)

    @property
    def jumps(self) -> int:
        """Price jumps so far, all instruments together (the ``jump_prob`` fault)."""
        return sum(m.jumps for m in self.markets.values())

    @property
    def market_ms(self) -> int:
        return self.steps * self.step_ms

    def ts_ms(self) -> int:
        """Data ts of the current state."""
        return self.start_ms + self.steps * self.step_ms

    def initial_events(self) -> list:
        ts = self.ts_ms()
        out = []
        for sym, m in self.markets.items():
            bids, asks = m.levels()
            out.append(BookEvent(sym, True, bids, asks, ts))
        return out

    def take(self, n: int = 1) -> list:
        """Run ``n`` steps; one book event (the net change) and one trade event per instrument."""
        if n <= 0:
            return []
        changed = {sym: ({}, {}, []) for sym in self.markets}
        step_ms = self.step_ms
        for _ in range(n):
            self.steps += 1
            ts = self.start_ms + self.steps * step_ms
            for sym, m in self.markets.items():
                r = m.step()
                cb, ca, tr = changed[sym]
                cb.update(r.changed_bids)
                ca.update(r.changed_asks)
                for t in r.trades:
                    tr.append({"ts": str(ts), "price": m.price_str(t.price_ticks), "size": m.size_str(t.lots),
                               "side": t.side, "tradeId": str(t.trade_id)})
        ts = self.ts_ms()
        out = []
        for sym, (cb, ca, tr) in changed.items():
            m = self.markets[sym]
            if tr:
                out.append(TradeEvent(sym, tr, ts))
            if cb or ca:
                bids = [[m.price_str(p), m.size_str(v) if v else "0"] for p, v in sorted(cb.items(), reverse=True)]
                asks = [[m.price_str(p), m.size_str(v) if v else "0"] for p, v in sorted(ca.items())]
                out.append(BookEvent(sym, False, bids, asks, ts))
        return out

    def pending(self, market_ms: float, limit: int = 1_000) -> list:
        due = min(int(market_ms // self.step_ms) - self.steps, limit)
        return self.take(due) if due > 0 else []

    def next_due_ms(self) -> float:
        return (self.steps + 1) * self.step_ms

    def rewind(self) -> None:
        raise VenueError("the synthetic source cannot rewind")

    @property
    def exhausted(self) -> bool:
        return False


# --------------------------------------------------------------------------------------------
# Replay


def _str(v, what: str) -> str:
    if not isinstance(v, str):
        raise ReplayError(f"{what} is not a string: {v!r}"[:120])
    return v


def _number(v, what: str) -> str:
    s = _str(v, what)
    try:
        x = float(s)
    except ValueError:
        raise ReplayError(f"{what} is not a number: {s!r}"[:120]) from None
    if not (x >= 0.0 and x != float("inf")):
        raise ReplayError(f"{what} is not a finite number >= 0: {s!r}"[:120])
    return s


def _ts(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ReplayError(f"{what} is not a ms timestamp: {v!r}"[:120])
    try:
        t = int(v)
    except ValueError:
        raise ReplayError(f"{what} is not a ms timestamp: {v!r}"[:120]) from None
    if t < 0:
        raise ReplayError(f"{what} is negative: {v!r}")
    return t


def _levels(side, what: str) -> list:
    if side is None:
        return []
    if not isinstance(side, list):
        raise ReplayError(f"{what} is not a list")
    out = []
    for lv in side:
        if not (isinstance(lv, list) and len(lv) >= 2):
            raise ReplayError(f"{what}: a level is not a [price, size] pair: {lv!r}"[:120])
        out.append([_number(lv[0], f"{what} price"), _number(lv[1], f"{what} size")])
    return out


def _trade(row, what: str) -> dict:
    if isinstance(row, list):  # v1: [ts, price, size, side]
        if len(row) < 4:
            raise ReplayError(f"{what}: a v1 trade row needs [ts, price, size, side]: {row!r}"[:120])
        ts, price, size, side, tid = row[0], row[1], row[2], row[3], None
    elif isinstance(row, dict):  # v2 object
        ts, price, size, side, tid = row.get("ts"), row.get("price"), row.get("size"), row.get("side"), row.get("tradeId")
    else:
        raise ReplayError(f"{what}: a trade is neither a v1 row nor a v2 object: {row!r}"[:120])
    if side not in TRADE_SIDES:
        raise ReplayError(f"{what}: trade side {side!r}")
    out = {"ts": str(_ts(ts, f"{what} ts")), "price": _number(price, f"{what} price"),
           "size": _number(size, f"{what} size"), "side": side}
    if tid is not None:
        out["tradeId"] = _str(tid, f"{what} tradeId")
    return out


def translate_frame(text: str, receive_time_s: float | None = None) -> list:
    """The venue events of one received capture frame (v1 or v2): ``books`` pushes give one
    ``BookEvent`` per ``data[]`` entry, ``trade`` pushes one ``TradeEvent``; anything else (events,
    other channels, ``pong``) gives []. The top-level ``ts`` is the frame's own, else the receive
    time in ms, else the data ts.

    Raises:
        ReplayError: a books / trade push that is malformed (levels, numbers, timestamps, sides).
    """
    if not text.startswith("{"):
        return []
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []  # not a push (the capture may hold other text)
    if not isinstance(obj, dict) or "action" not in obj:
        return []
    arg = obj.get("arg")
    if not isinstance(arg, dict):
        return []
    channel = arg.get("channel")
    if channel not in (CHANNEL_BOOKS, CHANNEL_TRADE):
        return []
    inst_type = V1_INST_TYPES.get(arg.get("instType"))
    inst_id = arg.get("instId")
    what = f"{channel} {inst_id}"
    if inst_type is None:
        return []  # another market (futures): not served
    if not (isinstance(inst_id, str) and inst_id.isascii() and inst_id.isalnum()):
        raise ReplayError(f"{channel} push with instId {inst_id!r}")
    action = obj["action"]
    if action not in ("snapshot", "update"):
        raise ReplayError(f"{what}: action {action!r}")
    snapshot = action == "snapshot"
    data = obj.get("data")
    if not isinstance(data, list) or not data:
        raise ReplayError(f"{what}: no data")
    push_ts = obj.get("ts")
    if push_ts is not None:
        push_ts = _ts(push_ts, f"{what} ts")
    elif receive_time_s is not None:
        push_ts = int(receive_time_s * 1000)
    if channel == CHANNEL_TRADE:
        trades = [_trade(row, what) for row in data]
        return [TradeEvent(inst_id, trades, max(int(t["ts"]) for t in trades), snapshot, push_ts)]
    out = []
    for d in data:
        if not isinstance(d, dict):
            raise ReplayError(f"{what}: a data entry is not an object")
        checksum = d.get("checksum")
        if checksum is not None and (isinstance(checksum, bool) or not isinstance(checksum, int)
                                     or not -(2**31) <= checksum < 2**31):
            raise ReplayError(f"{what}: checksum {checksum!r}")
        ts_ms = _ts(d.get("ts"), f"{what} data ts")
        out.append(BookEvent(inst_id, snapshot, _levels(d.get("bids"), f"{what} bids"),
                             _levels(d.get("asks"), f"{what} asks"), ts_ms, checksum, push_ts))
    return out


class ReplaySource:
    """A capture's books / trade frames, in market time (see the module docstring)."""

    finite = True

    def __init__(self, frames: Sequence[tuple[float, list]]) -> None:
        """``frames``: (receive time in s, events) per capture frame, in capture order.

        Raises:
            ReplayError: no frame with books or trade events.
        """
        self.frames = [(float(t), evs) for t, evs in frames if evs]
        if not self.frames:
            raise ReplayError("nothing to replay: no books or trade push")
        self.t0 = self.frames[0][0]
        self.pos = 0
        self.loops = 0
        seen: dict[str, None] = {}
        for _, evs in self.frames:
            for ev in evs:
                seen.setdefault(ev.inst_id, None)
        self._inst_ids = sorted(seen)

    @classmethod
    def from_capture(cls, path: str | Path) -> "ReplaySource":
        """Read a capture file once (every RECV line through ``translate_frame``).

        Raises:
            ReplayError: the file cannot be read, a line is malformed, a books / trade push is
                malformed, or there is nothing to replay.
        """
        frames = []
        try:
            for lineno, line in enumerate(read_capture(path), 1):
                if line.direction != RECV:
                    continue
                try:
                    frames.append((line.receive_time_s, translate_frame(line.text, line.receive_time_s)))
                except ReplayError as exc:
                    raise ReplayError(f"{path}: event {lineno}: {exc}") from None
        except (OSError, CaptureError) as exc:
            raise ReplayError(f"{path}: {exc}") from None
        return cls(frames)

    @property
    def inst_ids(self) -> list[str]:
        return list(self._inst_ids)

    def _ms(self, i: int) -> float:
        return (self.frames[i][0] - self.t0) * 1000.0

    @property
    def market_ms(self) -> float:
        return self._ms(self.pos - 1) if self.pos else 0.0

    @property
    def exhausted(self) -> bool:
        return self.pos >= len(self.frames)

    def initial_events(self) -> list:
        return []

    def take(self, n: int = 1) -> list:
        out = []
        end = min(self.pos + max(n, 0), len(self.frames))
        for i in range(self.pos, end):
            out.extend(self.frames[i][1])
        self.pos = end
        return out

    def pending(self, market_ms: float, limit: int = 1_000) -> list:
        out = []
        frames, t0 = self.frames, self.t0
        end = min(self.pos + limit, len(frames))
        i = self.pos
        while i < end and (frames[i][0] - t0) * 1000.0 <= market_ms:
            out.extend(frames[i][1])
            i += 1
        self.pos = i
        return out

    def next_due_ms(self) -> float | None:
        return None if self.exhausted else self._ms(self.pos)

    def rewind(self) -> None:
        self.pos = 0
        self.loops += 1


# --------------------------------------------------------------------------------------------
# Encoded

ENCODED_CHANNELS = frozenset({*DEPTH_CHANNELS, CHANNEL_TRADE})
_BOOK_TAIL = re.compile(rb'"seq":(\d+),"ts":"(\d+)"\}\],"ts":(\d+)\}$')  # market.book_frame's end
_TRADE_TAIL = re.compile(rb'\],"ts":(\d+)\}$')  # market.trade_frame's end


class EncodedUnit(NamedTuple):
    """One unit of an ``EncodedSource``: ``frames`` ((channel, inst_id), bytes) in publishing order,
    ``books`` the instruments whose book changed, ``trades`` (inst_id, v2 trade objects) pairs."""

    frames: list
    books: tuple
    trades: tuple


def _template(frame: bytes) -> tuple:
    """(head, seq, ts, push_ts) of a book push, (head, push_ts) of a trade push.

    Raises:
        ReplayError: a frame of neither shape."""
    m = _BOOK_TAIL.search(frame)
    if m is not None:
        return frame[: m.start()], int(m[1]), int(m[2]), int(m[3])
    m = _TRADE_TAIL.search(frame)
    if m is None:
        raise ReplayError(f"not a book or trade push: {frame[-60:]!r}")
    return frame[: m.start() + 1], int(m[1])


def render(tpl: tuple, seq_add: int, ts_add: int) -> bytes:
    """The frame of template ``tpl`` with its seq moved by ``seq_add`` and its push / data ts by ``ts_add``."""
    if len(tpl) == 4:
        return tpl[0] + b'"seq":%d,"ts":"%d"}],"ts":%d}' % (tpl[1] + seq_add, tpl[2] + ts_add, tpl[3] + ts_add)
    return tpl[0] + b',"ts":%d}' % (tpl[1] + ts_add)


class EncodedSource:
    """Pre-encoded frames of another source, looping (see the module docstring)."""

    finite = False

    def __init__(self, inner, units: int, channels: Sequence[str] = ("books15", CHANNEL_TRADE)) -> None:
        """Run ``inner`` for ``units`` units (fewer when a replay ends first) and keep their frames.

        Raises:
            VenueError: ``units`` < 1, a channel not in ``ENCODED_CHANNELS``, no unit with a frame.
        """
        bad = sorted(set(channels) - ENCODED_CHANNELS)
        if bad or not channels:
            raise VenueError(f"encoded channels must be some of {sorted(ENCODED_CHANNELS)}, got {list(channels)}")
        if units < 1:
            raise VenueError(f"encoded units must be >= 1, got {units}")
        self.channels = tuple(channels)
        depth = [c for c in self.channels if c in DEPTH_CHANNELS]
        market = VenueMarket(inner.inst_ids)
        for ev in inner.initial_events():
            (market.apply_book if type(ev) is BookEvent else market.apply_trades)(ev)
        self.units: list[tuple[float, list, tuple, tuple]] = []
        changes = 0
        for _ in range(units):
            if inner.exhausted:
                break
            frames, books, trades = [], [], []
            for ev in inner.take(1):
                if type(ev) is BookEvent:
                    ch = market.apply_book(ev)
                    if ch is None:
                        continue
                    changes += 1
                    books.append(ch.inst_id)
                    frames += [((c, ch.inst_id), _template(market.depth_frame(ch.inst_id, c, ch.push_ts_ms)))
                               for c in depth]
                else:
                    tr = market.apply_trades(ev)
                    if tr is None:
                        continue
                    trades.append((tr.inst_id, tr.trades))
                    if CHANNEL_TRADE in self.channels:
                        frames.append(((CHANNEL_TRADE, tr.inst_id), _template(market.trades_frame(tr))))
            self.units.append((float(inner.market_ms), frames, tuple(books), tuple(trades)))
        if not any(u[1] for u in self.units):
            raise VenueError("encoded source: no frame in the units built")
        self._inst_ids = list(inner.inst_ids)
        t0 = self.units[0][0]
        self.times = [t - t0 for t, *_ in self.units]
        n = len(self.times)
        self.period_ms = self.times[-1] + (self.times[-1] / (n - 1) if n > 1 and self.times[-1] > 0 else 1.0)
        self.seq_step = changes + 1  # more than any instrument's seq moved over the units built
        self.ts_step = int(-(-self.period_ms // 1))
        self.pos = 0
        self.loops = 0
        self._last_ms = 0.0

    @property
    def inst_ids(self) -> list[str]:
        return list(self._inst_ids)

    @property
    def market_ms(self) -> float:
        return self._last_ms

    exhausted = False

    def initial_events(self) -> list:
        return []

    def next_due_ms(self) -> float:
        return self.loops * self.period_ms + self.times[self.pos]

    def _next(self) -> EncodedUnit:
        _, frames, books, trades = self.units[self.pos]
        self._last_ms = self.next_due_ms()
        seq_add, ts_add = self.loops * self.seq_step, self.loops * self.ts_step
        unit = EncodedUnit([(k, render(t, seq_add, ts_add)) for k, t in frames], books, trades)
        self.pos += 1
        if self.pos == len(self.units):
            self.pos = 0
            self.loops += 1
        return unit

    def take(self, n: int = 1) -> list:
        return [self._next() for _ in range(max(n, 0))]

    def pending(self, market_ms: float, limit: int = 1_000) -> list:
        out = []
        while len(out) < limit and self.next_due_ms() <= market_ms:
            out.append(self._next())
        return out

    def rewind(self) -> None:
        raise VenueError("the encoded source loops by itself; it cannot rewind")


# --------------------------------------------------------------------------------------------
# Building a source from parameters


def instrument_specs(instruments, venue: str | None = "paper") -> list[InstrumentSpec]:
    """``InstrumentSpec``s of config instruments (``pipeline.runtime.config.InstrumentConfig``) whose
    ``venue`` is ``venue`` (all when None)."""
    return [InstrumentSpec(i.symbol, i.tick_size, i.lot_size) for i in instruments if venue is None or i.venue == venue]


def make_source(kind: str, *, instruments: Sequence[InstrumentSpec] = (), capture: str | Path | None = None,
                seed: int = 1, step_ms: int | None = None, start_ms: int | None = None, jump_prob: float = 0.0,
                jump_ticks: int = 3, market: str = "default", encoded_units: int = 2_000,
                encoded_channels: Sequence[str] = ("books15", CHANNEL_TRADE)):
    """A ``SyntheticSource`` (``kind`` "synthetic": the ``market`` of ``MARKETS``, whose ``step_ms``
    applies unless ``step_ms`` is given; ``start_ms`` default: now, wall clock; the price-jump fault
    ``jump_prob`` / ``jump_ticks``), a ``ReplaySource`` of ``capture`` (``kind`` "replay"; market
    "default"; with ``jump_prob``, shifted by ``pipeline.venue.jumps``, ticks from ``instruments``), or an ``EncodedSource`` (``kind`` "encoded": ``encoded_units`` units on
    ``encoded_channels`` of the replay of ``capture`` when one is given, else of the synthetic source;
    no jumps).

    Raises:
        VenueError: an unknown kind, an unknown market (the message names ``market``), no
            instruments, no capture for a replay, an unreadable capture (``ReplayError``), a bad jump
            value, a market asked of a replay, jumps asked of an encoded source, a bad
            encoded unit count or channel.
    """
    if market not in MARKETS:
        raise VenueError(f"market must be one of {sorted(MARKETS)}, got {market!r}")
    if kind == "encoded":
        if jump_prob:
            raise VenueError("jump_prob is a fault of the synthetic source only (an encoded source's frames are fixed)")
        inner = make_source("replay" if capture else "synthetic", instruments=instruments, capture=capture,
                            seed=seed, step_ms=step_ms, start_ms=start_ms, market=market)
        return EncodedSource(inner, encoded_units, encoded_channels)
    if kind == "synthetic":
        return SyntheticSource(instruments, seed=seed, step_ms=step_ms,
                               start_ms=int(time.time() * 1000) if start_ms is None else start_ms,
                               params=MARKETS[market], jump_prob=jump_prob, jump_ticks=jump_ticks)
    if kind == "replay":
        if not capture:
            raise VenueError("source 'replay' needs a capture path")
        if market != "default":
            raise VenueError(f"market {market!r} is a choice of the synthetic source only (a replay's market is "
                             f"the capture's)")
        return with_jumps(ReplaySource.from_capture(capture), jump_prob, jump_ticks, seed,
                          {i.symbol: i.tick_size for i in instruments})
    raise VenueError(f"unknown source {kind!r}; known: 'synthetic', 'replay', 'encoded'")
