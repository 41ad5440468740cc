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
- Market orders: take the opposite side level by level at any price (``order_fields.market_plan``:
  a sell up to its size, the rest cancelled; a buy spends its quote size in whole lots, one of a
  symbol in ``base_sized`` (a perpetual's: sizes in the base coin) buys up to its size); one that
  would fill nothing: 45110; notional above ``max_notional``: 43012; not in ``book_checks``.
- Batches: ``pipeline.venue.batch`` places / cancels each entry as a single request would.
- Resting (maker) orders fill at THEIR OWN price when (a) a later book of the symbol crosses them
  (best ask <= our buy price: filled against the asks at or below our price, each limited by its
  displayed size not yet consumed in this book state), or (b) a trade prints at or through their
  price (price <= our buy / >= our sell, whatever the trade's side; the trade's size is shared among
  our resting orders of that side). Among our resting orders: price-time priority (better price
  first, then the earlier order).
- Queue position (``queue_model=True``; off by default): a resting order no longer fills from the
  first trade at its price. It joins behind the public size displayed at its price on its side,
  trades AT its price eat that queue first, and decreases of the displayed size at its price
  (cancels) shorten it by the share estimated ahead of us; a book that crosses its price, or a
  trade strictly THROUGH its price, still fills it at once. The model is hftbacktest's
  probabilistic queue model with the identity probability (a cancel equally likely anywhere in
  the level), between the risk-averse model (only trades advance) and "every cancel is ahead of
  us": ``pipeline.venue.queue`` says exactly how and why, and how NautilusTrader's fill model
  differs. (So a decrease shortens the queue by all of itself, as the shared contract words it,
  exactly when no public size joined behind us; with size behind us, by its share ahead.) Trades
  must reach ``traded`` before the book state that shows them reaches ``book_changed`` (else
  their decrease looks like cancels).
- Liquidity is consumed once: a displayed size taken (by a taker order or a crossing book) is
  not taken again in the same book state, and one trade's size is shared among our resting orders
  (with or without the queue), so two of our orders never fill against the same size.
- Fees (``fees``: a ``pipeline.venue.fees.FeeSchedule``; None by default: no fees): each fill
  costs ``price * size * bps / 10_000`` in the quote coin, maker bps for a resting order's fill,
  taker bps for an arriving order's; the fill carries it (``Fill.fee``, ``Fill.liquidity``), the
  account record keeps it and the USDT cash pays it.
- Every fill gets a new, increasing ``tradeId``; orderIds are increasing too. Both start from a base
  taken from the clock at construction (``clock_ms() * 1000``), or above the account's last ones
  after ``restore`` (whichever is higher), so ids do not repeat after a venue restart. Status:
  ``live`` -> ``partially_filled`` -> ``filled``, or ``cancelled`` (by request, an ioc remainder, a
  killed fok; a cancelled order keeps its fills).
- ``clientOid`` is unique for the account's whole life (one engine per API key; restored orders
  included): a second order with the same clientOid is refused with 43118 and NOT placed again,
  whatever the state of the first.

The account (``pipeline.venue.account_state.AccountState``, ``account``): every state change is
handed, as it happens, to the injected ``on_event(record)`` callback as one JSON-able dict (the
records: ``pipeline.venue.account_state``), and ``restore(records)`` rebuilds the whole account from
those records (resting orders back in the book's resting lists, so they still fill).
``pipeline.venue.account`` writes the records to the account log file and reads them back; the
engine does no I/O. The counters (``counters``, ``book_checks``) are the engine's own, per process:
a restored engine starts them at 0.

Sanity (``OrderRejected`` with the venue's code; the engine's state is unchanged): the field
checks of ``pipeline.venue.order_fields`` (40019, 40020, 41103, 40808, 40034, 43012), then 43118
duplicate clientOid, 43027 post_only would cross, 45110 a market order that fills nothing, 43001
unknown / no longer cancellable order (cancel, query).

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

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation

from pipeline.venue.account_state import AccountState, Fill, Order
from pipeline.venue.errors import VenueError
from pipeline.venue.fees import FeeSchedule, fee_quote
from pipeline.venue.order_fields import (
    CODE_DUPLICATE,
    CODE_NO_ORDER,
    CODE_NOTIONAL,
    CODE_POST_ONLY,
    SIDES,
    InstrumentRules,
    OrderRejected,
    PlaceRequest,
    check_symbol,
    fmt,
    market_plan,
    parse_delta,
    parse_place,
)
from pipeline.venue.queue import QueuePositions, sizes_at

__all__ = ["DEFAULT_MAX_AWAY_TICKS", "FeeSchedule", "InstrumentRules", "OrderEngine"]

DEFAULT_MAX_AWAY_TICKS = 50
CODE_MIN_AMOUNT = "45110"  # a market order that would fill nothing
_ZERO = Decimal(0)


class OrderEngine:
    """Our orders at the paper venue, one API key's worth (see the module docstring).

    ``instruments``: symbol -> ``InstrumentRules`` (the symbols the venue serves);
    ``book(symbol, n)``: the current public (bids, asks), best first, at most ``n`` a side (all when
    None); ``clock_ms``: wall-clock ms for cTime / uTime (and the id bases); ``max_notional``: the
    most price * size one order may have (None: no limit); ``max_away_ticks``: how far from its own
    side's best price an order may be and still count as valid against the book (``book_checks``);
    ``on_event``: called with each account record (see ``pipeline.venue.account_state``) BEFORE the
    change it describes is applied, or None. It should not raise: what it raises propagates out of
    the command or market hook that made the change (a place, cancel, fill or adjustment), and the
    engine's state may then already hold part of that command (e.g. the earlier fills of a taker
    order). ``fees``: the maker / taker fee schedule (None: no fees, the paper venue's default);
    ``queue_model``: resting orders wait behind the displayed size at their price (False: they fill
    from the first trade at their price, the paper venue's default). Both in the module docstring.

    ``account_id`` / ``created_ms``: the account's identity, from the ``account`` record given to
    ``restore`` (for an engine that was never restored: a random id of its own and the construction
    time: an account that lives as long as the engine).
    """

    def __init__(self, instruments: Mapping[str, InstrumentRules], book: Callable[[str, int | None], tuple],
                 clock_ms: Callable[[], int], *, max_notional: Decimal | float | str | None = None,
                 max_away_ticks: int = DEFAULT_MAX_AWAY_TICKS,
                 on_event: Callable[[dict], None] | None = None, fees: FeeSchedule | None = None,
                 queue_model: bool = False) -> None:
        """Raises:
        VenueError: no instrument, a max_notional that is not a positive number, a max_away_ticks
            that is not an integer >= 0, fees that are not a FeeSchedule (or None), a queue_model
            that is not a bool.
        """
        if not instruments:
            raise VenueError("the order engine needs at least one instrument")
        if fees is not None and not isinstance(fees, FeeSchedule):
            raise VenueError(f"fees must be a FeeSchedule or None, got {type(fees).__name__}")
        if not isinstance(queue_model, bool):
            raise VenueError(f"queue_model must be a bool, got {queue_model!r}")
        self.fees = fees
        #: queue positions of our resting orders (None: no queue model)
        self._queue = QueuePositions() if queue_model else None
        if isinstance(max_away_ticks, bool) or not isinstance(max_away_ticks, int) or max_away_ticks < 0:
            raise VenueError(f"max_away_ticks must be an integer >= 0, got {max_away_ticks!r}")
        self.max_away_ticks = max_away_ticks
        self.rules = dict(instruments)
        self.base_sized: frozenset[str] = frozenset()  # symbols whose market buys are sized in base coin
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
        #: the account: orders, fills, balances, ids, its records
        self.account = AccountState(self.rules, int(clock_ms()), on_event)
        self.orders: dict[int, Order] = self.account.orders  # by id (the account's own dict)
        self.fills: list[Fill] = self.account.fills  # oldest first (the account's own list)
        #: our resting orders per symbol and side, in price-time priority
        self._resting: dict[str, dict[str, list[Order]]] = {s: {"buy": [], "sell": []} for s in self.rules}
        #: displayed size our orders took in the current book state, per symbol: (book side, price) -> size
        self._consumed: dict[str, dict[tuple[str, Decimal], Decimal]] = {s: {} for s in self.rules}
        self.counters = {"orders_placed": 0, "orders_rejected": 0, "fills": 0, "cancels": 0}
        #: validity of arriving orders against the book (see the module docstring)
        self.book_checks = {"orders_valid": 0, "orders_invalid": 0}

    @property
    def book_levels(self) -> Callable[[str, int | None], tuple]:
        """The public book the engine matches against: ``book(symbol, n)`` -> (bids, asks)."""
        return self._book

    @property
    def account_id(self) -> str:
        return self.account.account_id

    @property
    def created_ms(self) -> int:
        return self.account.created_ms

    @property
    def on_event(self) -> Callable[[dict], None] | None:
        """The account's record callback (see the class docstring); settable."""
        return self.account.on_event

    @on_event.setter
    def on_event(self, fn: Callable[[dict], None] | None) -> None:
        self.account.on_event = fn

    # -- queries ------------------------------------------------------------------------------

    def position(self, symbol: str) -> Decimal:
        """Net base position of ``symbol`` from our fills (buys +, sells -)."""
        return self.account.positions.get(symbol, _ZERO)

    def positions(self) -> dict[str, Decimal]:
        """Every symbol's net base position (the served ones, and any other the account traded)."""
        return dict(self.account.positions)

    def cash(self) -> Decimal:
        """The quote coin's (USDT) balance change from our fills of USDT-quoted symbols:
        -sum(signed price * size + fee); may be negative (the paper venue lends without limit; the
        fee is 0 without a fee schedule)."""
        return self.account.cash

    @property
    def queue_model(self) -> bool:
        """Whether resting orders wait in the queue (see the module docstring)."""
        return self._queue is not None

    def queue_ahead(self, order_id: int) -> Decimal | None:
        """The public size estimated ahead of resting order ``order_id`` at its price; None without
        the queue model or for an order that does not rest."""
        return self._queue.ahead(order_id) if self._queue is not None else None

    def fees_paid(self, symbol: str | None = None) -> Decimal:
        """The sum of our fills' fees (of ``symbol`` when given), each in its symbol's quote coin;
        0 without a fee schedule."""
        return sum((f.fee for f in self.fills if symbol is None or f.symbol == symbol), _ZERO)

    def balance_u_ms(self, symbol_or_quote: str) -> int:
        """When the position of a symbol (or, given ``QUOTE_COIN``, the cash) last changed, in ms;
        ``created_ms`` when it never did."""
        return self.account.balance_u_ms(symbol_or_quote)

    def check_symbol(self, symbol) -> InstrumentRules:
        """The rules of a served symbol.

        Raises:
            OrderRejected: 40034 unknown symbol.
        """
        return check_symbol(self.rules, symbol)

    def order(self, order_id: int | str | None = None, client_oid: str | None = None) -> Order:
        """An order by venue id or clientOid.

        Raises:
            OrderRejected: 40019 neither given; 40020 a bad id; 43001 no such order.
        """
        o = self.account.find(order_id, client_oid)
        if o is None:
            raise OrderRejected(CODE_NO_ORDER, "the order does not exist")
        return o

    def open_orders(self, symbol: str | None = None) -> list[Order]:
        """Live and partially filled orders (of ``symbol`` when given), oldest first.

        Raises:
            OrderRejected: 40034 unknown symbol.
        """
        if symbol is not None:
            self.check_symbol(symbol)
        return [o for o in self.orders.values() if o.is_open and (symbol is None or o.symbol == symbol)]

    def fills_since(self, symbol: str | None = None, order_id: int | str | None = None,
                    id_greater_than: int | str | None = None, limit: int | None = None) -> list[Fill]:
        """Our fills, oldest first, filtered by symbol, orderId, and tradeId > ``id_greater_than``;
        at most ``limit`` (the oldest ones) when given.

        Raises:
            OrderRejected: 40020 a non-integer id.
        """
        return self.account.fills_since(symbol, order_id, id_greater_than, limit)

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
        """Place a limit or market order from a place-order body (strings: symbol, side, orderType,
        force, price, size, clientOid); it may fill at once (taker). Returns the order.

        Raises:
            OrderRejected: see the module docstring (40019, 40020, 41103, 40808, 40034, 43012, 43118,
                43027, 45110); counted in ``counters["orders_rejected"]``.
        """
        try:
            o = self._place(body)
        except OrderRejected:
            self.counters["orders_rejected"] += 1
            raise
        self.counters["orders_placed"] += 1
        return o

    def _place(self, body: Mapping) -> Order:
        req = parse_place(body, self.rules, self.max_notional)
        symbol, side, force, price, size = req.symbol, req.side, req.force, req.price, req.size
        if req.client_oid is not None and req.client_oid in self.account.by_client_oid:
            raise OrderRejected(CODE_DUPLICATE, f"duplicate clientOid {req.client_oid}")
        if req.order_type == "market":
            return self._place_market(req)
        valid = self.valid_against_book(symbol, side, price)
        self.book_checks["orders_valid" if valid else "orders_invalid"] += 1
        levels = self._opposite_levels(symbol, side)
        crossing = [(p, avail) for p, avail in levels if (p <= price if side == "buy" else p >= price)]
        if force == "post_only" and crossing:
            raise OrderRejected(CODE_POST_ONLY, "post_only order would take liquidity")
        now = int(self._clock_ms())
        o = self.account.open_order(req.client_oid, symbol, side, force, price, size, req.price_text,
                                    req.size_text, now)
        visible = sum((a for _, a in crossing), _ZERO)
        if force == "fok" and visible < size:
            self.account.record_cancel(o, now)
            return o
        for p, avail in crossing:
            if o.remaining <= 0:
                break
            self._fill(o, p, min(avail, o.remaining), "taker", now, consume_at=p)
        if o.remaining > 0:
            if force == "gtc" or force == "post_only":
                self._rest(o)
            else:  # ioc remainder (a fok is complete here)
                self.account.record_cancel(o, now)
        return o

    def _place_market(self, req: PlaceRequest) -> Order:
        """A market order (see the module docstring): planned against the levels, then filled."""
        quote = req.side == "buy" and req.symbol not in self.base_sized  # a spot market buy spends quote coin
        plan = market_plan(self._opposite_levels(req.symbol, req.side), "buy" if quote else "sell", req.size,
                           self.rules[req.symbol].lot_size)
        if not plan:
            raise OrderRejected(CODE_MIN_AMOUNT, "less than the minimum amount: the order would fill nothing")
        notional = sum((p * q for p, q in plan), _ZERO)
        if self.max_notional is not None and notional > self.max_notional:
            raise OrderRejected(CODE_NOTIONAL, f"order notional {fmt(notional)} is above the limit "
                                               f"{fmt(self.max_notional)}")
        base = sum((q for _, q in plan), _ZERO) if quote else req.size
        now = int(self._clock_ms())
        o = self.account.open_order(req.client_oid, req.symbol, req.side, req.force, None, base, req.price_text,
                                    req.size_text, now, "market")
        for p, q in plan:
            self._fill(o, p, q, "taker", now, consume_at=p)
        if o.remaining > 0:
            self.account.record_cancel(o, now)
        return o

    def cancel(self, symbol: str, order_id: int | str | None = None, client_oid: str | None = None) -> Order:
        """Cancel one open order of ``symbol`` by venue id or clientOid; returns it.

        Raises:
            OrderRejected: 40019 neither id given; 40034 unknown symbol; 43001 no such open order
                (unknown, of another symbol, already filled or cancelled).
        """
        self.check_symbol(symbol)
        o = self.account.find(order_id, client_oid)
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
            OrderRejected: 40034 unknown symbol; 40020 a delta that is not a non-zero finite decimal
                (a string of at most 40 characters, or a Decimal).
        """
        self.check_symbol(symbol)
        d = parse_delta(delta)
        return self.account.record_adjust(symbol, d, int(self._clock_ms()))

    def restore(self, records: Iterable[Mapping]) -> int:
        """Rebuild the account from its records (``AccountState.restore``: orders, fills, positions,
        cash, the clientOids seen (an old one is refused with 43118), ``account_id`` /
        ``created_ms``, ids continuing above the last ones) on a fresh engine; open orders of a
        served symbol rest again in price-time priority (they fill and cancel as before). Orders of
        a symbol no longer served are kept (their clientOids stay taken, their fills count) but
        cannot rest. With the queue model, a restored resting order joins the queue behind the size
        displayed now (its old place is unknown). ``on_event`` is not called and the counters stay
        at 0. Pure. Returns the number of records.

        Raises:
            VenueError: what ``AccountState.restore`` raises (a used engine, no records, a bad
                record: the message names its index). The engine is then left half-restored:
                discard it.
        """
        n = self.account.restore(records)
        for o in self.orders.values():
            if o.is_open and o.symbol in self._resting:
                self._resting[o.symbol][o.side].append(o)
        for sides in self._resting.values():
            sides["buy"].sort(key=lambda x: (-x.price, x.seq))
            sides["sell"].sort(key=lambda x: (x.price, x.seq))
            for o in sides["buy"] + sides["sell"]:  # the queue model: back of the queue shown now
                self._queue_join(o)
        return n

    # -- market events (the venue server's hook) ----------------------------------------------

    def book_changed(self, symbol: str) -> int:
        """The public book of ``symbol`` changed: forget the displayed size our orders took, (with the
        queue model) move our resting orders' queue positions by the change of the displayed size at
        their prices, and fill resting orders the new book crosses. Returns the number of fills."""
        consumed = self._consumed.get(symbol)
        if consumed is None:
            return 0
        if consumed:
            consumed.clear()
        resting = self._resting[symbol]
        if self._queue is not None:
            self._queue_book_changed(symbol, resting)
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
        side, in priority order; with the queue model a trade AT an order's price first eats the
        public size ahead of it. A trade that is not two finite numbers with a positive size is
        skipped. Returns the number of fills."""
        resting = self._resting.get(symbol)
        queue = self._queue
        if resting is None or (queue is None and not (resting["buy"] or resting["sell"])):
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
            if queue is not None:
                queue.note_trade(symbol, tp, ts)
            for side in SIDES:
                left = ts
                for o in list(resting[side]):
                    if left <= 0 or not self._crosses(side, tp, o.price):
                        break
                    room = queue.take(o.order_id, left) if queue is not None and tp == o.price else left
                    q = min(room, o.remaining)
                    if q > 0:
                        self._fill(o, o.price, q, "maker", now)
                        left -= q
                        n += 1
                self._prune(symbol, side)
        return n

    # -- internals ----------------------------------------------------------------------------

    @staticmethod
    def _crosses(side: str, market_price: Decimal, our_price: Decimal) -> bool:
        return market_price <= our_price if side == "buy" else market_price >= our_price

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

    def _fill(self, o: Order, price: Decimal, qty: Decimal, scope: str, now_ms: int,
              consume_at: Decimal | None = None) -> None:
        if qty <= 0:
            return
        fee = fee_quote(self.fees, price, qty, scope) if self.fees is not None else _ZERO
        self.account.record_fill(o, price, qty, scope, now_ms, fee)
        if self._queue is not None and not o.is_open:
            self._queue.leave(o.order_id)
        if consume_at is not None:  # displayed size taken in this book state
            key = ("ask" if o.side == "buy" else "bid", consume_at)
            c = self._consumed[o.symbol]
            c[key] = c.get(key, _ZERO) + qty
        self.counters["fills"] += 1

    def _rest(self, o: Order) -> None:
        orders = self._resting[o.symbol][o.side]
        orders.append(o)
        if o.side == "buy":
            orders.sort(key=lambda x: (-x.price, x.seq))
        else:
            orders.sort(key=lambda x: (x.price, x.seq))
        self._queue_join(o)

    def _queue_join(self, o: Order) -> None:
        """With the queue model: ``o`` starts resting behind the public size its own side shows at
        its price now."""
        if self._queue is None:
            return
        bids, asks = self._book(o.symbol, None)
        shown = sizes_at(bids if o.side == "buy" else asks, (o.price,), o.side == "buy")
        self._queue.join(o.order_id, shown.get(o.price, _ZERO))

    def _queue_book_changed(self, symbol: str, resting: dict[str, list[Order]]) -> None:
        """With the queue model: the book of ``symbol`` changed; move the queue positions of our
        resting orders (``pipeline.venue.queue``), then forget the trades noted since the last book."""
        queue = self._queue
        if resting["buy"] or resting["sell"]:
            bids, asks = self._book(symbol, None)
            lot = self.rules[symbol].lot_size
            for side, levels in (("buy", bids), ("sell", asks)):
                orders = resting[side]
                if orders:
                    shown = sizes_at(levels, [o.price for o in orders], side == "buy")
                    queue.book_changed(symbol, orders, shown, lot)
        queue.trades_applied(symbol)

    def _prune(self, symbol: str, side: str) -> None:
        orders = self._resting[symbol][side]
        if any(not o.is_open for o in orders):
            orders[:] = [o for o in orders if o.is_open]

    def _cancel(self, o: Order) -> None:
        self.account.record_cancel(o, int(self._clock_ms()))
        orders = self._resting[o.symbol][o.side]
        if o in orders:
            orders.remove(o)
        if self._queue is not None:
            self._queue.leave(o.order_id)
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
