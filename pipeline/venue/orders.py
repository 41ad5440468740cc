"""The paper venue's order side: a sans-I/O matching engine for OUR orders against the venue's live
public book. No socket, no clock of its own (``clock_ms`` is injected), no randomness.

The engine never changes the public market: our orders are matched against the levels the market
shows (read through the injected ``book(symbol, n) -> (bids, asks)``, best first, ``[price, size]``
strings, e.g. ``VenueMarket.levels``) and against the market's trades, and the public book stays as
the source made it. Our own orders never match each other (no self-matching).

Matching, per symbol:

- Placement (taker): a buy limit at or above the best ask takes liquidity at once, level by level
  (ascending asks) up to its limit price, at each level's price, limited by the level's displayed
  size. Displayed size taken by our orders is remembered per (symbol, side, price) until the next
  book change of that symbol (``book_changed``), so one displayed size is never consumed twice in
  one book state. A sell mirrors this against the bids. Then, by ``force``:
  ``gtc``: the rest rests; ``ioc``: the rest is cancelled; ``fok``: when the visible liquidity up to
  the price cannot fill the whole size, nothing fills and the order is cancelled at once (accepted
  with an orderId, status ``cancelled``, baseVolume 0: Bitget's behaviour for a killed FOK);
  ``post_only``: an order that would take liquidity is refused (``OrderRejected`` 43027).
- Resting (maker) orders fill at THEIR OWN price when (a) a later book of the symbol crosses them
  (best ask <= our buy price: filled against the asks at or below our price, each limited by its
  displayed size not yet consumed in this book state), or (b) a trade prints at or through their
  price (price <= our buy / >= our sell, whatever the trade's side; the trade's size is shared among
  our resting orders of that side). Among our resting orders: price-time priority (better price
  first, then the earlier order).
- Every fill gets a new, increasing ``tradeId``; orderIds are increasing too. Both start from a base
  taken from the clock at construction (``clock_ms() * 1000``), or above the account's last ones
  after ``restore`` (whichever is higher), so ids do not repeat after a venue restart. Status:
  ``live`` -> ``partially_filled`` -> ``filled``, or ``cancelled`` (by request, an ioc remainder, a
  killed fok; a cancelled order keeps its fills).
- ``clientOid`` is unique for the account's whole life (one engine per API key; restored orders
  included): a second order with the same clientOid is refused with 43118 and NOT placed again,
  whatever the state of the first.

The account (persistence, sans-I/O): every state change is handed, as it happens, to the injected
``on_event(record)`` callback as one JSON-able dict (``ACCOUNT_RECORDS`` below; decimals as strings,
ids and ms as ints), and ``restore(records)`` rebuilds the whole account from those records (orders
with their fields and status, fills, positions, cash, clientOids seen, the id counters; resting
orders back in the book's resting lists, so they still fill). ``pipeline.venue.account`` writes the
records to the account log file and reads them back; the engine does no I/O. Records::

    account  account_id created_ms                 the first record: the account's identity
    order    id coid sym side force px sz ts seq   an order accepted (px / sz: the texts received)
    fill     tid id px sz scope ts                 one fill of order ``id`` at ``px``
    cancel   id ts                                 order ``id`` cancelled (by request, ioc remainder,
                                                   killed fok)
    adjust   sym delta ts                          admin: the position of ``sym`` changed by ``delta``
                                                   without an order (``adjust_position``)

Balances: the position of a symbol is the sum of its signed fills (buys +, sells -) and adjustments;
the quote coin's (USDT) cash is -sum(signed price * size) of every fill of a USDT-quoted symbol (the
paper venue charges no fees, and an adjustment moves no cash). Both may go negative: the paper
venue lends without limit (a negative base balance is a paper short). The counters (``counters``,
``book_checks``) are the engine's own, per process: a restored engine starts them at 0.

Sanity (``OrderRejected`` with the venue's code; the engine's state is unchanged):
40001 malformed field (missing, not a string, not a positive finite decimal, off the instrument's
tick or lot, unknown side / orderType / force, bad clientOid), 40034 unknown symbol, 43012 size *
price above ``max_notional``, 43118 duplicate clientOid, 43027 post_only would cross, 43001 unknown /
no longer cancellable order (cancel, query).

Validity against the book (a stress-test measure, ``book_checks``): every order that passes the
field checks above (so reaches the book: placed, or refused as a crossing post_only) is counted
``orders_valid`` when it was valid against the venue's book when it arrived, else
``orders_invalid``. Valid: it does not cross the opposite best price (a buy priced at or below the
best ask, a sell at or above the best bid) and it is within ``max_away_ticks`` ticks of its own
side's best price (|price - best bid| for a buy, |price - best ask| for a sell). An empty side makes
its check pass; a symbol without a known tick skips the distance check. The risk gateway plans
passive post-only orders, so a crossing or far-away order means the pipeline acted on a stale book.

Numbers are ``decimal.Decimal`` inside; amounts and prices are decimal strings outside.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import NamedTuple

from pipeline.trading.bitget.protocol import QUOTE_COIN
from pipeline.venue.errors import VenueError

# Venue error codes (Bitget v2 numbering)
CODE_BAD_REQUEST = "40001"
CODE_UNKNOWN_SYMBOL = "40034"
CODE_NO_ORDER = "43001"
CODE_NOTIONAL = "43012"
CODE_DUPLICATE = "43118"
CODE_POST_ONLY = "43027"

#: ``on_event`` record types (field lists in the module docstring)
ACCOUNT_RECORDS = frozenset(("account", "order", "fill", "cancel", "adjust"))

SIDES = ("buy", "sell")
FORCES = ("gtc", "post_only", "ioc", "fok")
ORDER_TYPES = ("limit",)

STATUS_LIVE = "live"
STATUS_PARTIAL = "partially_filled"
STATUS_FILLED = "filled"
STATUS_CANCELLED = "cancelled"
OPEN_STATUSES = (STATUS_LIVE, STATUS_PARTIAL)

MAX_CLIENT_OID_CHARS = 64
DEFAULT_MAX_AWAY_TICKS = 50
_ZERO = Decimal(0)
_AVG_QUANT = Decimal("1e-12")


class OrderRejected(Exception):
    """A request the engine refuses: ``code`` (the venue's error code) and ``msg``. Raised by
    ``OrderEngine`` methods; the engine's state is unchanged. Never carries request secrets."""

    def __init__(self, code: str, msg: str) -> None:
        super().__init__(f"{code}: {msg}")
        self.code = code
        self.msg = msg


class InstrumentRules(NamedTuple):
    """The price tick and size lot orders of a symbol must be multiples of (None: not checked)."""

    symbol: str
    tick_size: Decimal | None = None
    lot_size: Decimal | None = None


def rules_from_config(instruments: Iterable, symbols: Iterable[str]) -> dict[str, InstrumentRules]:
    """``InstrumentRules`` for every served symbol: tick / lot from the config instruments
    (``tick_size``, ``lot_size`` floats) whose symbol matches, unchecked when none does."""
    by_symbol = {i.symbol: i for i in instruments}
    out = {}
    for s in symbols:
        i = by_symbol.get(s)
        out[s] = (InstrumentRules(s, Decimal(repr(float(i.tick_size))), Decimal(repr(float(i.lot_size))))
                  if i is not None else InstrumentRules(s))
    return out


def fmt(d: Decimal) -> str:
    """A decimal as a plain string without exponent or trailing zeros (``Decimal("1.50")`` -> "1.5")."""
    if d == 0:
        return "0"
    s = format(d.normalize(), "f")
    return s


class Fill(NamedTuple):
    trade_id: int
    order_id: int
    client_oid: str
    symbol: str
    side: str
    price: Decimal
    size: Decimal
    scope: str  # "maker" | "taker"
    ts_ms: int

    def to_json(self) -> dict:
        """The ``fills`` endpoint's object."""
        return {"tradeId": str(self.trade_id), "orderId": str(self.order_id), "clientOid": self.client_oid,
                "symbol": self.symbol, "side": self.side, "priceAvg": fmt(self.price), "size": fmt(self.size),
                "amount": fmt(self.price * self.size), "tradeScope": self.scope, "cTime": str(self.ts_ms)}


class Order:
    """One of our orders at the venue (mutable state owned by the engine)."""

    __slots__ = ("order_id", "client_oid", "symbol", "side", "force", "price", "size", "price_text", "size_text",
                 "filled", "notional", "status", "c_ms", "u_ms", "seq")

    def __init__(self, order_id: int, client_oid: str, symbol: str, side: str, force: str, price: Decimal,
                 size: Decimal, price_text: str, size_text: str, now_ms: int, seq: int) -> None:
        self.order_id = order_id
        self.client_oid = client_oid
        self.symbol = symbol
        self.side = side
        self.force = force
        self.price = price
        self.size = size
        self.price_text = price_text
        self.size_text = size_text
        self.filled = _ZERO
        self.notional = _ZERO  # sum of price * size of the fills
        self.status = STATUS_LIVE
        self.c_ms = now_ms
        self.u_ms = now_ms
        self.seq = seq

    @property
    def remaining(self) -> Decimal:
        return self.size - self.filled

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @property
    def avg_price(self) -> Decimal:
        return (self.notional / self.filled).quantize(_AVG_QUANT, ROUND_HALF_EVEN) if self.filled else _ZERO

    def to_json(self) -> dict:
        """The ``orderInfo`` / ``unfilled-orders`` object."""
        return {"orderId": str(self.order_id), "clientOid": self.client_oid, "symbol": self.symbol,
                "side": self.side, "orderType": "limit", "force": self.force, "price": self.price_text,
                "size": self.size_text, "baseVolume": fmt(self.filled), "priceAvg": fmt(self.avg_price),
                "status": self.status, "cTime": str(self.c_ms), "uTime": str(self.u_ms)}


def _decimal_field(body: Mapping, name: str) -> tuple[Decimal, str]:
    v = body.get(name)
    if v is None:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} is missing")
    if not isinstance(v, str) or not v or len(v) > 40:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be a decimal string")
    try:
        d = Decimal(v)
    except InvalidOperation:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} is not a decimal: {v!r}") from None
    if not d.is_finite() or d <= 0:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be a positive finite decimal, got {v!r}")
    return d, v


def _choice(body: Mapping, name: str, choices: tuple[str, ...]) -> str:
    v = body.get(name)
    if v is None:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} is missing")
    if v not in choices:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be one of {', '.join(choices)}, got {str(v)[:32]!r}")
    return v


def _multiple(value: Decimal, step: Decimal | None) -> bool:
    return step is None or (value % step) == 0


class OrderEngine:
    """Our orders at the paper venue, one API key's worth (see the module docstring).

    ``instruments``: symbol -> ``InstrumentRules`` (the symbols the venue serves);
    ``book(symbol, n)``: the current public (bids, asks), best first, at most ``n`` a side (all when
    None); ``clock_ms``: wall-clock ms for cTime / uTime (and the id bases); ``max_notional``: the
    most price * size one order may have (None: no limit); ``max_away_ticks``: how far from its own
    side's best price an order may be and still count as valid against the book (``book_checks``);
    ``on_event``: called with each account record (see the module docstring) BEFORE the change it
    describes is applied, or None. It should not raise: what it raises propagates out of the command
    or market hook that made the change (a place, cancel, fill or adjustment), and the engine's state
    may then already hold part of that command (e.g. the earlier fills of a taker order).

    ``account_id`` / ``created_ms``: the account's identity, from the ``account`` record given to
    ``restore`` (for an engine that was never restored: a random id of its own and the construction
    time: an account that lives as long as the engine).
    """

    def __init__(self, instruments: Mapping[str, InstrumentRules], book: Callable[[str, int | None], tuple],
                 clock_ms: Callable[[], int], *, max_notional: Decimal | float | str | None = None,
                 max_away_ticks: int = DEFAULT_MAX_AWAY_TICKS,
                 on_event: Callable[[dict], None] | None = None) -> None:
        """Raises:
        VenueError: no instrument, a max_notional that is not a positive number, a max_away_ticks
            that is not an integer >= 0.
        """
        if not instruments:
            raise VenueError("the order engine needs at least one instrument")
        if isinstance(max_away_ticks, bool) or not isinstance(max_away_ticks, int) or max_away_ticks < 0:
            raise VenueError(f"max_away_ticks must be an integer >= 0, got {max_away_ticks!r}")
        self.max_away_ticks = max_away_ticks
        self.rules = dict(instruments)
        self._book = book
        self._clock_ms = clock_ms
        if max_notional is not None:
            try:
                max_notional = Decimal(str(max_notional))
            except InvalidOperation:
                raise VenueError(f"max_notional must be a number, got {max_notional!r}") from None
            if not max_notional.is_finite() or max_notional <= 0:
                raise VenueError(f"max_notional must be positive, got {max_notional}")
        self.max_notional = max_notional
        self.on_event = on_event
        self.account_id = str(secrets.randbits(63) or 1)  # an account of this engine's life until restored
        self._restored = False
        self.created_ms = int(clock_ms())
        base = self.created_ms * 1000
        self._next_order_id = base + 1
        self._next_trade_id = base + 1
        self._seq = 0
        self.orders: dict[int, Order] = {}
        self._by_client_oid: dict[str, Order] = {}
        self._resting: dict[str, dict[str, list[Order]]] = {s: {"buy": [], "sell": []} for s in self.rules}
        self._consumed: dict[str, dict[tuple[str, Decimal], Decimal]] = {s: {} for s in self.rules}
        self.fills: list[Fill] = []
        self._positions: dict[str, Decimal] = dict.fromkeys(self.rules, _ZERO)
        self._cash = _ZERO  # quote coin: -sum(signed price * size) of the fills
        self._u_ms: dict[str, int] = {}  # symbol or QUOTE_COIN -> ms of its last balance change
        self.counters = {"orders_placed": 0, "orders_rejected": 0, "fills": 0, "cancels": 0}
        #: validity of arriving orders against the book (see the module docstring)
        self.book_checks = {"orders_valid": 0, "orders_invalid": 0}

    # -- queries ------------------------------------------------------------------------------

    def position(self, symbol: str) -> Decimal:
        """Net base position of ``symbol`` from our fills (buys +, sells -)."""
        return self._positions.get(symbol, _ZERO)

    def positions(self) -> dict[str, Decimal]:
        """Every symbol's net base position (the served ones, and any other the account traded)."""
        return dict(self._positions)

    def cash(self) -> Decimal:
        """The quote coin's (USDT) balance change from our fills of USDT-quoted symbols:
        -sum(signed price * size); may be negative (the paper venue lends without limit; no fees)."""
        return self._cash

    def balance_u_ms(self, symbol_or_quote: str) -> int:
        """When the position of a symbol (or, given ``QUOTE_COIN``, the cash) last changed, in ms;
        ``created_ms`` when it never did."""
        return self._u_ms.get(symbol_or_quote, self.created_ms)

    def order(self, order_id: int | str | None = None, client_oid: str | None = None) -> Order:
        """An order by venue id or clientOid.

        Raises:
            OrderRejected: 40001 neither given or a bad id; 43001 no such order.
        """
        o = self._find(order_id, client_oid)
        if o is None:
            raise OrderRejected(CODE_NO_ORDER, "the order does not exist")
        return o

    def open_orders(self, symbol: str | None = None) -> list[Order]:
        """Live and partially filled orders (of ``symbol`` when given), oldest first.

        Raises:
            OrderRejected: 40034 unknown symbol.
        """
        if symbol is not None:
            self._check_symbol(symbol)
        return [o for o in self.orders.values() if o.is_open and (symbol is None or o.symbol == symbol)]

    def fills_since(self, symbol: str | None = None, order_id: int | str | None = None,
                    id_greater_than: int | str | None = None, limit: int | None = None) -> list[Fill]:
        """Our fills, oldest first, filtered by symbol, orderId, and tradeId > ``id_greater_than``;
        at most ``limit`` (the oldest ones) when given.

        Raises:
            OrderRejected: 40001 a non-integer id.
        """
        oid = _int_id(order_id, "orderId") if order_id is not None else None
        gt = _int_id(id_greater_than, "idGreaterThan") if id_greater_than is not None else None
        out = []
        for f in self.fills:  # trade ids increase along the list
            if gt is not None and f.trade_id <= gt:
                continue
            if (symbol is None or f.symbol == symbol) and (oid is None or f.order_id == oid):
                out.append(f)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def valid_against_book(self, symbol: str, side: str, price: Decimal) -> bool:
        """Whether a ``side`` order at ``price`` is valid against the current book of ``symbol``
        (see the module docstring: not crossing the opposite best, within ``max_away_ticks`` of its
        own side's best). A level that is not a number is skipped (the side's next one is used).

        Raises:
            KeyError: an unknown symbol.
        """
        bids, asks = self._book(symbol, None)
        best_bid, best_ask = _best(bids), _best(asks)
        own, opposite = (best_bid, best_ask) if side == "buy" else (best_ask, best_bid)
        if opposite is not None and (price >= opposite if side == "buy" else price <= opposite):
            return False
        tick = self.rules[symbol].tick_size
        if own is not None and tick is not None and tick > 0:
            if abs(price - own) > tick * self.max_away_ticks:
                return False
        return True

    # -- commands -----------------------------------------------------------------------------

    def place(self, body: Mapping) -> Order:
        """Place a limit order from a place-order body (strings: symbol, side, orderType, force,
        price, size, clientOid); it may fill at once (taker). Returns the order.

        Raises:
            OrderRejected: see the module docstring (40001, 40034, 43012, 43118, 43027); counted in
                ``counters["orders_rejected"]``.
        """
        try:
            o = self._place(body)
        except OrderRejected:
            self.counters["orders_rejected"] += 1
            raise
        self.counters["orders_placed"] += 1
        return o

    def _place(self, body: Mapping) -> Order:
        if not isinstance(body, Mapping):
            raise OrderRejected(CODE_BAD_REQUEST, "the body must be a JSON object")
        symbol = body.get("symbol")
        if not isinstance(symbol, str) or not symbol:
            raise OrderRejected(CODE_BAD_REQUEST, "symbol is missing")
        rules = self._check_symbol(symbol)
        side = _choice(body, "side", SIDES)
        _choice(body, "orderType", ORDER_TYPES)
        force = _choice(body, "force", FORCES)
        price, price_text = _decimal_field(body, "price")
        size, size_text = _decimal_field(body, "size")
        if not _multiple(price, rules.tick_size):
            raise OrderRejected(CODE_BAD_REQUEST, f"price {price_text} is not a multiple of the tick {fmt(rules.tick_size)}")
        if not _multiple(size, rules.lot_size):
            raise OrderRejected(CODE_BAD_REQUEST, f"size {size_text} is not a multiple of the lot {fmt(rules.lot_size)}")
        if self.max_notional is not None and price * size > self.max_notional:
            raise OrderRejected(CODE_NOTIONAL, f"order notional {fmt(price * size)} is above the limit "
                                               f"{fmt(self.max_notional)}")
        coid = body.get("clientOid")
        if coid is None or coid == "":
            coid = None
        elif not (isinstance(coid, str) and len(coid) <= MAX_CLIENT_OID_CHARS and coid.isascii() and coid.isprintable()):
            raise OrderRejected(CODE_BAD_REQUEST, f"clientOid must be 1..{MAX_CLIENT_OID_CHARS} printable ASCII characters")
        elif coid in self._by_client_oid:
            raise OrderRejected(CODE_DUPLICATE, f"duplicate clientOid {coid}")
        valid = self.valid_against_book(symbol, side, price)
        self.book_checks["orders_valid" if valid else "orders_invalid"] += 1
        levels = self._opposite_levels(symbol, side)
        crossing = [(p, avail) for p, avail in levels if (p <= price if side == "buy" else p >= price)]
        if force == "post_only" and crossing:
            raise OrderRejected(CODE_POST_ONLY, "post_only order would take liquidity")
        now = int(self._clock_ms())
        order_id = self._next_order_id
        seq = self._seq + 1
        coid = coid if coid is not None else f"venue{order_id}"
        self._emit({"t": "order", "id": order_id, "coid": coid, "sym": symbol, "side": side, "force": force,
                    "px": price_text, "sz": size_text, "ts": now, "seq": seq})
        self._next_order_id += 1
        self._seq = seq
        o = Order(order_id, coid, symbol, side, force, price, size, price_text, size_text, now, seq)
        self.orders[order_id] = o
        self._by_client_oid[o.client_oid] = o
        visible = sum((a for _, a in crossing), _ZERO)
        if force == "fok" and visible < size:
            self._emit({"t": "cancel", "id": order_id, "ts": now})
            o.status = STATUS_CANCELLED
            return o
        for p, avail in crossing:
            if o.remaining <= 0:
                break
            self._fill(o, p, min(avail, o.remaining), "taker", now, consume_at=p)
        if o.remaining > 0:
            if force == "gtc" or force == "post_only":
                self._rest(o)
            else:  # ioc remainder (a fok is complete here)
                self._emit({"t": "cancel", "id": order_id, "ts": now})
                o.status = STATUS_CANCELLED
                o.u_ms = now
        return o

    def cancel(self, symbol: str, order_id: int | str | None = None, client_oid: str | None = None) -> Order:
        """Cancel one open order of ``symbol`` by venue id or clientOid; returns it.

        Raises:
            OrderRejected: 40001 neither id given; 40034 unknown symbol; 43001 no such open order
                (unknown, of another symbol, already filled or cancelled).
        """
        self._check_symbol(symbol)
        o = self._find(order_id, client_oid)
        if o is None or o.symbol != symbol or not o.is_open:
            raise OrderRejected(CODE_NO_ORDER, "the order does not exist or is no longer open")
        self._cancel(o)
        return o

    def cancel_symbol(self, symbol: str) -> list[Order]:
        """Cancel every open order of ``symbol``; returns them (oldest first).

        Raises:
            OrderRejected: 40034 unknown symbol.
        """
        out = self.open_orders(symbol)
        for o in out:
            self._cancel(o)
        return out

    def adjust_position(self, symbol: str, delta: Decimal | str) -> Decimal:
        """Admin (a test hook for chaos scenarios): change the position of ``symbol`` by ``delta``
        without an order or a fill, as if it had changed behind the client's back (no cash moves).
        Recorded (``adjust``), so it persists. Returns the new position.

        Raises:
            OrderRejected: 40034 unknown symbol; 40001 a delta that is not a non-zero finite decimal
                (a string of at most 40 characters, or a Decimal).
        """
        self._check_symbol(symbol)
        if isinstance(delta, str):
            if not delta or len(delta) > 40:
                raise OrderRejected(CODE_BAD_REQUEST, "delta must be a decimal string")
            try:
                d = Decimal(delta)
            except InvalidOperation:
                raise OrderRejected(CODE_BAD_REQUEST, f"delta is not a decimal: {delta!r}") from None
        elif isinstance(delta, Decimal):
            d = delta
        else:
            raise OrderRejected(CODE_BAD_REQUEST, "delta must be a decimal string")
        if not d.is_finite() or d == 0:
            raise OrderRejected(CODE_BAD_REQUEST, "delta must be a non-zero finite decimal")
        now = int(self._clock_ms())
        self._emit({"t": "adjust", "sym": symbol, "delta": fmt(d), "ts": now})
        self._apply_adjust(symbol, d, now)
        return self._positions[symbol]

    # -- the account (persistence) ------------------------------------------------------------

    def restore(self, records: Iterable[Mapping]) -> int:
        """Rebuild the account from its records (what ``on_event`` was given, in order; the first one
        the ``account`` record), on a fresh engine: orders with their fields and status, fills,
        positions, cash, the clientOids seen (an old one is refused with 43118), ``account_id`` /
        ``created_ms``; open orders of a served symbol rest again in price-time priority (they fill
        and cancel as before); the next order / trade id goes above the last ones (and never below
        the clock base). Orders of a symbol no longer served are kept (their clientOids stay taken,
        their fills count) but cannot rest. ``on_event`` is not called and the counters stay at 0.
        Pure. Returns the number of records.

        Raises:
            VenueError: the engine was already restored or has orders; no records; the first record
                not an ``account`` one (or a later one that is); a record of an unknown type, with a
                missing or malformed field, a repeated id or clientOid, or about an order no earlier
                record placed (the message names the record's index). The engine is then left
                half-restored: discard it.
        """
        if self._restored or self.orders or self.fills:
            raise VenueError("restore needs a fresh engine (no account, no orders)")
        self._restored = True
        n = 0
        for rec in records:
            try:
                self._restore_one(rec, n == 0)
            except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
                raise VenueError(f"account record {n}: {type(exc).__name__}: {exc}"[:300]) from None
            n += 1
        if n == 0:
            raise VenueError("no account record to restore")
        if self.orders:
            self._next_order_id = max(self._next_order_id, max(self.orders) + 1)
            self._seq = max(self._seq, max(o.seq for o in self.orders.values()))
        if self.fills:
            self._next_trade_id = max(self._next_trade_id, max(f.trade_id for f in self.fills) + 1)
        for o in self.orders.values():
            if o.is_open and o.symbol in self._resting:
                self._resting[o.symbol][o.side].append(o)
        for sides in self._resting.values():
            sides["buy"].sort(key=lambda x: (-x.price, x.seq))
            sides["sell"].sort(key=lambda x: (x.price, x.seq))
        return n

    def _restore_one(self, rec: Mapping, first: bool) -> None:
        t = rec["t"]
        if first != (t == "account"):
            raise ValueError("the account record must be the first record, and only it")
        if t == "account":
            aid = rec["account_id"]
            if not (isinstance(aid, str) and aid.isascii() and aid.isdigit() and len(aid) <= 20):
                raise ValueError("account_id must be a decimal string")
            self.account_id = aid
            self.created_ms = _rec_int(rec, "created_ms")
        elif t == "order":
            oid, seq, ts = _rec_int(rec, "id"), _rec_int(rec, "seq"), _rec_int(rec, "ts")
            coid, sym, px, sz = (_rec_str(rec, k) for k in ("coid", "sym", "px", "sz"))
            side, force = rec["side"], rec["force"]
            if side not in SIDES or force not in FORCES:
                raise ValueError(f"bad side or force {side!r} {force!r}")
            if oid in self.orders or coid in self._by_client_oid:
                raise ValueError(f"order {oid} / clientOid {coid!r} placed twice")
            o = Order(oid, coid, sym, side, force, Decimal(px), Decimal(sz), px, sz, ts, seq)
            self.orders[oid] = o
            self._by_client_oid[coid] = o
            self._positions.setdefault(sym, _ZERO)
        elif t == "fill":
            o = self.orders.get(_rec_int(rec, "id"))
            if o is None:
                raise ValueError(f"a fill of order {rec['id']} that no earlier record placed")
            tid = _rec_int(rec, "tid")
            if self.fills and tid <= self.fills[-1].trade_id:
                raise ValueError(f"trade id {tid} not above the previous one")
            scope = rec["scope"]
            if scope not in ("maker", "taker"):
                raise ValueError(f"bad scope {scope!r}")
            self._apply_fill(o, tid, Decimal(_rec_str(rec, "px")), Decimal(_rec_str(rec, "sz")), scope,
                             _rec_int(rec, "ts"))
        elif t == "cancel":
            o = self.orders.get(_rec_int(rec, "id"))
            if o is None:
                raise ValueError(f"a cancel of order {rec['id']} that no earlier record placed")
            o.status = STATUS_CANCELLED
            o.u_ms = _rec_int(rec, "ts")
        elif t == "adjust":
            sym = _rec_str(rec, "sym")
            self._positions.setdefault(sym, _ZERO)
            self._apply_adjust(sym, Decimal(_rec_str(rec, "delta")), _rec_int(rec, "ts"))
        else:
            raise ValueError(f"unknown record type {str(t)[:32]!r}")

    # -- market events (the venue server's hook) ----------------------------------------------

    def book_changed(self, symbol: str) -> int:
        """The public book of ``symbol`` changed: forget the displayed size our orders took, and fill
        resting orders the new book crosses. Returns the number of fills."""
        consumed = self._consumed.get(symbol)
        if consumed is None:
            return 0
        if consumed:
            consumed.clear()
        resting = self._resting[symbol]
        n = 0
        for side in SIDES:
            orders = resting[side]
            if not orders:
                continue
            bids, asks = self._book(symbol, 1)
            top = asks if side == "buy" else bids
            if not top or not self._crosses(side, Decimal(top[0][0]), orders[0].price):
                continue
            levels = [[p, a] for p, a in self._opposite_levels(symbol, side)]
            now = int(self._clock_ms())
            for o in list(orders):
                for lv in levels:
                    p, avail = lv
                    if o.remaining <= 0 or not self._crosses(side, p, o.price):
                        break
                    if avail <= 0:
                        continue
                    q = min(avail, o.remaining)
                    lv[1] -= q
                    self._fill(o, o.price, q, "maker", now, consume_at=p)
                    n += 1
            self._prune(symbol, side)
        return n

    def traded(self, symbol: str, trades: Iterable[Mapping]) -> int:
        """Public trades of ``symbol`` (v2 objects with "price" and "size" strings): each fills our
        resting orders at or through its price (buys priced >= it, sells <= it), up to its size per
        side, in priority order. Returns the number of fills."""
        resting = self._resting.get(symbol)
        if resting is None or not (resting["buy"] or resting["sell"]):
            return 0
        n = 0
        now = int(self._clock_ms())
        for t in trades:
            try:
                tp, ts = Decimal(t["price"]), Decimal(t["size"])
            except (KeyError, TypeError, InvalidOperation):
                continue
            if not (tp.is_finite() and ts.is_finite()) or ts <= 0:
                continue
            for side in SIDES:
                left = ts
                for o in list(resting[side]):
                    if left <= 0 or not self._crosses(side, tp, o.price):
                        break
                    q = min(left, o.remaining)
                    self._fill(o, o.price, q, "maker", now)
                    left -= q
                    n += 1
                self._prune(symbol, side)
        return n

    # -- internals ----------------------------------------------------------------------------

    @staticmethod
    def _crosses(side: str, market_price: Decimal, our_price: Decimal) -> bool:
        return market_price <= our_price if side == "buy" else market_price >= our_price

    def _check_symbol(self, symbol) -> InstrumentRules:
        rules = self.rules.get(symbol) if isinstance(symbol, str) else None
        if rules is None:
            raise OrderRejected(CODE_UNKNOWN_SYMBOL, f"symbol {str(symbol)[:32]!r} is not traded here")
        return rules

    def _find(self, order_id, client_oid) -> Order | None:
        if order_id not in (None, ""):
            return self.orders.get(_int_id(order_id, "orderId"))
        if client_oid not in (None, ""):
            if not isinstance(client_oid, str):
                raise OrderRejected(CODE_BAD_REQUEST, "clientOid must be a string")
            return self._by_client_oid.get(client_oid)
        raise OrderRejected(CODE_BAD_REQUEST, "orderId or clientOid is required")

    def _opposite_levels(self, symbol: str, side: str) -> list[tuple[Decimal, Decimal]]:
        """The levels a ``side`` order takes from (asks for a buy), best first, as (price, size
        still available in this book state)."""
        bids, asks = self._book(symbol, None)
        book_side = "ask" if side == "buy" else "bid"
        consumed = self._consumed[symbol]
        out = []
        for p, s in (asks if side == "buy" else bids):
            try:
                pd, sd = Decimal(p), Decimal(s)
            except InvalidOperation:
                continue
            sd -= consumed.get((book_side, pd), _ZERO)
            if sd > 0:
                out.append((pd, sd))
        return out

    def _emit(self, rec: dict) -> None:
        if self.on_event is not None:
            self.on_event(rec)

    def _fill(self, o: Order, price: Decimal, qty: Decimal, scope: str, now_ms: int,
              consume_at: Decimal | None = None) -> None:
        if qty <= 0:
            return
        tid = self._next_trade_id
        self._emit({"t": "fill", "tid": tid, "id": o.order_id, "px": fmt(price), "sz": fmt(qty), "scope": scope,
                    "ts": now_ms})
        self._next_trade_id += 1
        if consume_at is not None:  # displayed size taken in this book state
            key = ("ask" if o.side == "buy" else "bid", consume_at)
            c = self._consumed[o.symbol]
            c[key] = c.get(key, _ZERO) + qty
        self._apply_fill(o, tid, price, qty, scope, now_ms)
        self.counters["fills"] += 1

    def _apply_fill(self, o: Order, tid: int, price: Decimal, qty: Decimal, scope: str, now_ms: int) -> None:
        """The account side of one fill (shared by matching and ``restore``)."""
        o.filled += qty
        o.notional += price * qty
        o.status = STATUS_FILLED if o.filled >= o.size else STATUS_PARTIAL
        o.u_ms = now_ms
        self.fills.append(Fill(tid, o.order_id, o.client_oid, o.symbol, o.side, price, qty, scope, now_ms))
        signed = qty if o.side == "buy" else -qty
        self._positions[o.symbol] += signed
        self._u_ms[o.symbol] = now_ms
        if o.symbol.endswith(QUOTE_COIN):  # a symbol of another quote moves no USDT
            self._cash -= signed * price
            self._u_ms[QUOTE_COIN] = now_ms

    def _apply_adjust(self, symbol: str, delta: Decimal, now_ms: int) -> None:
        self._positions[symbol] += delta
        self._u_ms[symbol] = now_ms

    def _rest(self, o: Order) -> None:
        orders = self._resting[o.symbol][o.side]
        orders.append(o)
        if o.side == "buy":
            orders.sort(key=lambda x: (-x.price, x.seq))
        else:
            orders.sort(key=lambda x: (x.price, x.seq))

    def _prune(self, symbol: str, side: str) -> None:
        orders = self._resting[symbol][side]
        if any(not o.is_open for o in orders):
            orders[:] = [o for o in orders if o.is_open]

    def _cancel(self, o: Order) -> None:
        now = int(self._clock_ms())
        self._emit({"t": "cancel", "id": o.order_id, "ts": now})
        o.status = STATUS_CANCELLED
        o.u_ms = now
        orders = self._resting[o.symbol][o.side]
        if o in orders:
            orders.remove(o)
        self.counters["cancels"] += 1


def _best(levels) -> Decimal | None:
    """The first level's price that is a finite number (the side's best), or None."""
    for lv in levels:
        try:
            p = Decimal(lv[0])
        except (InvalidOperation, TypeError, IndexError):
            continue
        if p.is_finite():
            return p
    return None


def _rec_int(rec: Mapping, name: str) -> int:
    """An integer field of an account record. Raises KeyError (missing), TypeError (not an int)."""
    v = rec[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    return v


def _rec_str(rec: Mapping, name: str) -> str:
    """A non-empty string field of an account record. Raises KeyError (missing), TypeError."""
    v = rec[name]
    if not isinstance(v, str) or not v:
        raise TypeError(f"{name} must be a non-empty string")
    return v


def _int_id(v, name: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str) and 0 < len(v) <= 30 and v.isascii() and v.isdigit():
        return int(v)
    raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be a non-negative decimal integer")
