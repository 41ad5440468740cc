"""Price jumps on replayed market data, the stress fault ``jump_prob`` / ``jump_ticks`` of a replay.
Sans-I/O: no socket, no clock; the draws come from a generator seeded by the venue seed.

Bitget capture (``ReplayJumps``, wrapped around a ``pipeline.venue.sources.ReplaySource`` by
``with_jumps``): before each book event of an instrument, with probability ``jump_prob``, that
instrument's price offset moves by ``k`` ticks, ``k`` uniform in 1..``jump_ticks``, random sign (turned
up instead when down would take the book's lowest price to 0 or below); every later price of the
instrument (book levels and trades) is the recorded one plus the offset. At a jump the resting book
moves too: an update event then carries the deletion of every level at its old price and every level
at its new price (plus the event's own changes), so a client applying it as an ordinary update holds
the shifted book; a snapshot event is simply shifted. While an instrument's offset is not 0 its book
events carry no checksum (``checksum`` None: ``pipeline.venue.market.VenueMarket`` computes it from the
shifted book it holds, which is what the client holds, so the feed's own check passes); at offset 0
the recorded checksum is kept. Prices stay decimal strings: the recorded price plus ``offset * tick``
written with as many decimals as the finer of the two. The tick of an instrument is its config
``tick_size`` when the venue has one, else the precision of its recorded prices (a price with 4
decimals: 0.0001, as ``pipeline.venue.calibration`` reads it). ``jumps`` counts the jumps. A looping
replay keeps its offsets when it starts again (the capture's first snapshot is then shifted alike).

ITCH (``shift_itch_prices``): over a session's encoded messages, before each Add (A, F) or Replace (U)
message, with probability ``jump_prob``, the offset of that message's stock (by its stock locate)
moves by ``k`` $0.01 ticks as above (turned up instead when down would take that price below $0.01);
every later Add / Replace price of the stock is the recorded one plus the stock's offset, so all its
new orders shift alike and the relative prices of the book's new orders are the file's. An order's
executions with a price (C) move by the offset its own Add / Replace got, a non-displayed trade (P) by
its stock's offset. Order references, sizes and every other message are unchanged, so the book built
from the shifted session has the same orders and never an unknown reference; orders resting from
before a jump keep their price until they leave the book (the book may then be crossed or locked for
a while, as a real one briefly is, and the feed flags it).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from decimal import Decimal

from pipeline.venue.errors import VenueError
from pipeline.venue.market import BookEvent

#: ITCH's $0.01 tick in p4 units (prices with 4 implied decimals)
ITCH_TICK_P4 = 100
#: message type -> offset of its u32 price (p4), for the messages whose price is shifted
_ITCH_PRICE_AT = {0x41: 32, 0x46: 32, 0x55: 31, 0x43: 32, 0x50: 32}
_ADD, _ADD_MPID, _REPLACE, _EXEC_PRICE = 0x41, 0x46, 0x55, 0x43


def check_jumps(jump_prob: float, jump_ticks: int, what: str = "jump") -> None:
    """Raises:
    VenueError: ``jump_prob`` outside 0..1 or ``jump_ticks`` below 1 (the message names
        ``<what>_prob`` / ``<what>_ticks``).
    """
    if not 0.0 <= float(jump_prob) <= 1.0:
        raise VenueError(f"{what}_prob must be in 0..1, got {jump_prob}")
    if int(jump_ticks) < 1:
        raise VenueError(f"{what}_ticks must be >= 1, got {jump_ticks}")


def _decimals(d: Decimal) -> int:
    return max(-d.as_tuple().exponent, 0)


def price_tick(prices: Sequence[str]) -> Decimal:
    """The finest precision among recorded price strings (``"1.250"`` -> 0.001); 1 when none has decimals."""
    places = max((_decimals(Decimal(p)) for p in prices), default=0)
    return Decimal(1).scaleb(-places)


class ReplayJumps:
    """The jump state of a replay's instruments (module docstring): ``apply(events)`` returns the
    events as published, shifted. ``ticks``: ``{inst_id: tick}``; an instrument without one gets
    the precision of the prices it is first seen with (``price_tick``)."""

    def __init__(self, jump_prob: float, jump_ticks: int, seed: int, ticks: Mapping[str, Decimal | float] = {}):
        """Raises:
        VenueError: ``jump_prob`` outside 0..1, ``jump_ticks`` below 1, a tick not above 0.
        """
        check_jumps(jump_prob, jump_ticks)
        self.jump_prob, self.jump_ticks = float(jump_prob), int(jump_ticks)
        self.rng = random.Random(f"venue-replay-jumps:{int(seed)}")
        self.ticks = {s: Decimal(str(t)) for s, t in ticks.items()}
        if any(not t > 0 for t in self.ticks.values()):
            raise VenueError(f"tick sizes must be above 0, got {ticks}")
        self.offsets: dict[str, int] = {}  # inst_id -> offset in ticks
        self.books: dict[str, tuple[dict, dict]] = {}  # inst_id -> recorded (bids, asks): Decimal -> [price, size]
        self.jumps = 0

    def shift(self, inst_id: str, price: str, offset: int | None = None) -> str:
        """``price`` (a recorded string) moved by ``offset`` ticks (default: the instrument's offset)."""
        off = self.offsets.get(inst_id, 0) if offset is None else offset
        if not off:
            return price
        tick = self.ticks[inst_id]
        d = Decimal(price)
        return f"{d + off * tick:.{max(_decimals(d), _decimals(tick))}f}"

    def _tick(self, ev: BookEvent) -> None:
        if ev.inst_id not in self.ticks:
            self.ticks[ev.inst_id] = price_tick([p for p, _ in ev.bids] + [p for p, _ in ev.asks])

    def _record(self, ev: BookEvent) -> None:
        """Fold ``ev`` into the instrument's recorded book."""
        bids, asks = self.books.setdefault(ev.inst_id, ({}, {}))
        if ev.snapshot:
            bids.clear()
            asks.clear()
        for side, levels in ((bids, ev.bids), (asks, ev.asks)):
            for p, s in levels:
                key = Decimal(p)
                if Decimal(s) == 0:
                    side.pop(key, None)
                else:
                    side[key] = (p, s)

    def _draw(self, inst_id: str) -> int:
        """The new offset of a jump of ``inst_id`` (sign turned up when down would reach a price <= 0)."""
        off = self.offsets.get(inst_id, 0)
        k = self.rng.randint(1, self.jump_ticks) * self.rng.choice((-1, 1))
        bids, asks = self.books.get(inst_id, ({}, {}))
        low = min((*bids, *asks), default=None)
        if k < 0 and low is not None and low + (off + k) * self.ticks[inst_id] <= 0:
            k = -k
        return off + k

    def _book(self, ev: BookEvent) -> BookEvent:
        inst = ev.inst_id
        self._tick(ev)
        old = new = self.offsets.get(inst, 0)
        jump = self.jump_prob and self.rng.random() < self.jump_prob
        book = self.books.get(inst, ({}, {}))
        before = (dict(book[0]), dict(book[1])) if jump and not ev.snapshot else None
        self._record(ev)
        if jump:
            new = self.offsets[inst] = self._draw(inst)
            self.jumps += 1
        checksum = ev.checksum if new == 0 else None
        if before is None or new == old:
            return ev._replace(bids=[[self.shift(inst, p), s] for p, s in ev.bids],
                               asks=[[self.shift(inst, p), s] for p, s in ev.asks], checksum=checksum)
        sides = []
        for was, now in zip(before, self.books[inst]):  # the whole book moves: old prices out, new ones in
            gone = {Decimal(t): t for t in (self.shift(inst, p, old) for p, _ in was.values())}
            levels = [[self.shift(inst, p, new), s] for p, s in now.values()]
            for p, _ in levels:
                gone.pop(Decimal(p), None)
            sides.append([[t, "0"] for t in gone.values()] + levels)
        return ev._replace(bids=sides[0], asks=sides[1], checksum=checksum)

    def apply(self, events: list) -> list:
        """``events`` (book and trade events, in order) as published: shifted, jumps drawn."""
        out = []
        for ev in events:
            if type(ev) is BookEvent:
                out.append(self._book(ev))
            elif self.offsets.get(ev.inst_id):
                out.append(ev._replace(trades=[{**t, "price": self.shift(ev.inst_id, t["price"])} for t in ev.trades]))
            else:
                out.append(ev)
        return out


class JumpingReplay:
    """A replay source whose events go through ``ReplayJumps`` (``state``; everything else is the source's)."""

    def __init__(self, source, jumps: ReplayJumps) -> None:
        self._source, self.state = source, jumps

    def __getattr__(self, name):
        return getattr(self._source, name)

    @property
    def jumps(self) -> int:
        """Price jumps so far, all instruments together."""
        return self.state.jumps

    def take(self, n: int = 1) -> list:
        return self.state.apply(self._source.take(n))

    def pending(self, market_ms: float, limit: int = 1_000) -> list:
        return self.state.apply(self._source.pending(market_ms, limit))


def with_jumps(source, jump_prob: float, jump_ticks: int, seed: int, ticks: Mapping[str, float] = {}):
    """``source`` (a ``ReplaySource``) with the price-jump fault; ``source`` itself when ``jump_prob`` is 0.

    Raises:
        VenueError: a bad ``jump_prob`` / ``jump_ticks`` or tick (``ReplayJumps``).
    """
    jumps = ReplayJumps(jump_prob, jump_ticks, seed, ticks)
    return JumpingReplay(source, jumps) if jump_prob else source


def shift_itch_prices(messages: Sequence[bytes], jump_prob: float, jump_ticks: int,
                      seed: int) -> tuple[list[bytes], int]:
    """``(messages, jumps)``: the session ``messages`` with the ITCH price-jump fault (module
    docstring), and how many jumps it made. Messages too short for their price are kept as they are.

    Raises:
        VenueError: ``jump_prob`` outside 0..1 or ``jump_ticks`` below 1 (named ``itch_jump_*``).
    """
    check_jumps(jump_prob, jump_ticks, "itch_jump")
    if not jump_prob:
        return list(messages), 0
    rng = random.Random(f"venue-itch-jumps:{int(seed)}")
    offsets: dict[int, int] = {}  # stock locate -> offset in p4
    order_off: dict[int, int] = {}  # order ref -> the offset its Add / Replace got (non-zero only)
    out, jumps = [], 0
    for m in messages:
        at = _ITCH_PRICE_AT.get(m[0] if m else -1)
        if at is None or len(m) < at + 4:
            out.append(m)
            continue
        t, locate = m[0], int.from_bytes(m[1:3], "big")
        price = int.from_bytes(m[at:at + 4], "big")
        if t in (_ADD, _ADD_MPID, _REPLACE):
            off = offsets.get(locate, 0)
            if rng.random() < jump_prob:
                k = rng.randint(1, jump_ticks) * rng.choice((-1, 1)) * ITCH_TICK_P4
                off += -k if k < 0 and price + off + k < ITCH_TICK_P4 else k
                offsets[locate] = off
                jumps += 1
            if t == _REPLACE:
                order_off.pop(int.from_bytes(m[11:19], "big"), None)
            ref = int.from_bytes(m[19:27] if t == _REPLACE else m[11:19], "big")
            if off:
                order_off[ref] = off
            else:
                order_off.pop(ref, None)
        elif t == _EXEC_PRICE:
            off = order_off.get(int.from_bytes(m[11:19], "big"), 0)
        else:
            off = offsets.get(locate, 0)
        if not off:
            out.append(m)
            continue
        b = bytearray(m)
        b[at:at + 4] = min(max(price + off, 0), 0xFFFF_FFFF).to_bytes(4, "big")
        out.append(bytes(b))
    return out, jumps
