"""Queue position of our resting orders at the paper venue (sans-I/O, pure): how much public size is
displayed AHEAD of each of our orders at its price, the bookkeeping of
``pipeline.venue.orders.OrderEngine(queue_model=True)``.

The public book is market-by-price (one size per price), so where our order sits in a level's queue
is estimated, after hftbacktest's queue models
(https://hftbacktest.readthedocs.io/en/latest/reference/queue_models.html):

- Joining: an order that starts resting at a price gets ``ahead`` = the public size then displayed
  on its own side at that price (0 at a price nobody shows: the front). Our own orders are never in
  the public book, so our size is never counted.
- Trades at our price: each trade's size first eats ``ahead`` (``take``); what is left of it may
  fill us. (A trade strictly through our price, or a book that crosses it, fills us regardless of
  the queue: the engine does not ask the queue then.)
- Book changes at our price (``book_changed``): the change of the displayed size since the last
  book state, less the size that traded at that price meanwhile (that decrease was the trades,
  already eaten: never counted twice), is
  - an increase: new orders join BEHIND us; ``ahead`` does not change;
  - a decrease ``d``: cancels, somewhere in the queue. Credited as hftbacktest's
    ``ProbQueueModel`` does with ``PowerProbQueueFunc(1)`` (the identity probability, Python's
    ``IdentityProbQueueModel``): a cancelled unit came from behind us with probability
    ``back / (back + front)``, so the share ahead of us is ``ahead / level`` and
    ``ahead -= d * ahead / level``, ``level`` being the displayed size after the trades and before
    the cancels (hftbacktest takes ``back`` from the size before the trades; after them is the
    size actually queued when the cancels came). With nobody behind us (``ahead == level``) the
    whole decrease is ahead of us; at the front none of it is. Deterministic: an expected value,
    no random draw.
  Then ``ahead`` is capped by the new displayed size (no more can be ahead than is shown: a level
  that disappears puts us at the front) and, with a known lot, rounded UP to a whole lot (fills
  stay on the lot grid; up is the conservative side).

Why this model: hftbacktest's ``RiskAdverseQueueModel`` advances only on trades (a cancel counts
only through the cap), so a queue that keeps growing behind us never lets cancels ahead of us
help: it understates maker fills. Crediting every decrease to the front (all cancels ahead of us)
overstates them, and optimistic passive fills are the classic way a backtest invents an edge. The
uniform estimate sits between the two, needs no tuned exponent, and is exactly "the whole
decrease" in the common case of a level where we are last (the shared contract's case).
NautilusTrader's ``FillModel`` models the queue only as a probability: ``prob_fill_on_limit``
fills a limit order the market merely touches with a fixed probability drawn from a seeded RNG
(no per-order position); its ``liquidity_consumption`` option tracks the size taken per level so
one displayed size is not filled twice (what this engine does per book state, and per trade for
resting orders).

Assumption on event order: the trades are reported (``note_trade``) BEFORE the book state that
reflects them, as the synthetic source does (each step's trade event comes before its book event);
a book that already shows a trade's decrease when the trade arrives (a capture's trade and books
channels come in whatever order the exchange sent them) makes that decrease look like a cancel.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = ["QueuePositions", "displayed_sizes", "sizes_at"]

_ZERO = Decimal(0)


def displayed_sizes(levels: Iterable) -> dict[Decimal, Decimal]:
    """One side's ``[price, size]`` string levels as price -> size (the first of a repeated price;
    a level that is not two finite numbers is skipped)."""
    out: dict[Decimal, Decimal] = {}
    for lv in levels:
        try:
            p, s = Decimal(lv[0]), Decimal(lv[1])
        except (InvalidOperation, TypeError, IndexError, ValueError):
            continue
        if p.is_finite() and s.is_finite() and p not in out:
            out[p] = s
    return out


def sizes_at(levels: Iterable, prices: Iterable[Decimal], descending: bool) -> dict[Decimal, Decimal]:
    """The displayed size at each of ``prices`` on one side (``levels``: ``[price, size]`` strings,
    best first: prices ``descending`` for bids, ascending for asks); a price not shown is absent.
    Reads the levels only down to the worst of ``prices`` (our orders rest near the touch). A level
    that is not two finite numbers is skipped; of a repeated price the first counts."""
    want = set(prices)
    if not want:
        return {}
    last = min(want) if descending else max(want)
    out: dict[Decimal, Decimal] = {}
    for lv in levels:
        try:
            p = Decimal(lv[0])
        except (InvalidOperation, TypeError, IndexError, ValueError):
            continue
        if not p.is_finite():
            continue
        if (p < last) if descending else (p > last):
            break
        if p in want and p not in out:
            try:
                s = Decimal(lv[1])
            except (InvalidOperation, TypeError, IndexError, ValueError):
                continue
            if s.is_finite():
                out[p] = s
    return out


class QueuePositions:
    """The public size ahead of each of our resting orders (see the module docstring), by order id.
    Keyed by order id and by (symbol, price) only: nothing here iterates a hash-ordered set."""

    def __init__(self) -> None:
        self._ahead: dict[int, Decimal] = {}  # order id -> public size ahead of it
        self._shown: dict[int, Decimal] = {}  # order id -> displayed size at its price, last book state
        self._traded: dict[str, dict[Decimal, Decimal]] = {}  # symbol -> price -> size traded since then

    def ahead(self, order_id: int) -> Decimal | None:
        """The public size ahead of order ``order_id``; None for an order not in a queue."""
        return self._ahead.get(order_id)

    def join(self, order_id: int, displayed: Decimal) -> None:
        """Order ``order_id`` starts resting where ``displayed`` public size shows at its price."""
        d = displayed if displayed > 0 else _ZERO
        self._ahead[order_id] = d
        self._shown[order_id] = d

    def leave(self, order_id: int) -> None:
        """Order ``order_id`` no longer rests (filled or cancelled)."""
        self._ahead.pop(order_id, None)
        self._shown.pop(order_id, None)

    def note_trade(self, symbol: str, price: Decimal, size: Decimal) -> None:
        """A public trade of ``symbol`` (before the book state that reflects it)."""
        at = self._traded.setdefault(symbol, {})
        at[price] = at.get(price, _ZERO) + size

    def take(self, order_id: int, size: Decimal) -> Decimal:
        """A trade AT the order's price with ``size`` not yet given to our orders: the queue ahead
        eats first; returns what is left for this order (>= 0)."""
        ahead = self._ahead.get(order_id, _ZERO)
        eat = min(size, ahead)
        if order_id in self._ahead:
            self._ahead[order_id] = ahead - eat
        return size - eat

    def book_changed(self, symbol: str, orders: Iterable, shown: dict[Decimal, Decimal],
                     lot: Decimal | None) -> None:
        """The book of ``symbol`` changed: update every order of ``orders`` (our resting orders of
        one side, with ``order_id`` and ``price``) from ``shown`` (that side's displayed sizes by
        price: ``sizes_at`` or ``displayed_sizes``). ``lot``: the instrument's lot (None: no rounding). Call
        ``trades_applied(symbol)`` after both sides."""
        traded = self._traded.get(symbol, {})
        for o in orders:
            oid = o.order_id
            ahead = self._ahead.get(oid)
            if ahead is None:
                continue
            prev = self._shown[oid]
            new = shown.get(o.price, _ZERO)
            if new < 0:
                new = _ZERO
            after_trades = prev - traded.get(o.price, _ZERO)
            cancelled = after_trades - new
            if cancelled > 0 and ahead > 0:
                level = max(after_trades, ahead)
                ahead -= cancelled * ahead / level
                if lot is not None and lot > 0:
                    ahead = (ahead / lot).to_integral_value(ROUND_CEILING) * lot
            self._ahead[oid] = min(max(ahead, _ZERO), new)
            self._shown[oid] = new

    def trades_applied(self, symbol: str) -> None:
        """The trades noted for ``symbol`` are in its book now: forget them."""
        self._traded.pop(symbol, None)
