"""Synthetic order flow for the paper venue: a small stochastic limit-order-book model with a
planted, learnable relation, deterministic for a seed. Pure: no I/O, no clock (the caller steps it).

Model (one ``step()`` = ``step_ms`` of market time):

- A latent pressure ``p`` follows an AR(1) process, ``p <- phi * p + sigma * N(0, 1)``, clipped to
  [-1, 1].
- Limit orders arrive on both sides near the touch; the pressure skews their sizes *now*: bid
  sizes scale with ``1 + p * skew``, ask sizes with ``1 - p * skew``. So the order-book imbalance
  reflects ``p`` immediately.
- Market orders arrive with probability ``mo_prob`` per step; their side follows the pressure of
  ``lag_steps`` steps ago (buy with probability ``(1 + p_lagged) / 2``), and they take the touch:
  when a level is used up, the best price moves. So the mid follows the imbalance with a lag: the
  planted relation a classifier can learn (imbalance now -> mid move over the next ~lag).
- Cancels remove a random share of resting size each step, so the book does not grow forever.
- Price jumps (a stress fault, off by default): with probability ``jump_prob`` per step, at the
  end of the step, the whole book shifts by ``k`` ticks, ``k`` uniform in 1..``jump_ticks`` with a
  random sign (every level keeps its size). The step's changed levels then describe the shifted
  book (old prices deleted, new prices set), so a client applying them as ordinary updates ends
  with the same book and its checksums verify. The jump draws come from their own generator
  (seeded from the market's seed), so turning jumps on or off does not change the rest of the
  model's random stream.

Prices are integers in ticks; sizes are integers in lots. ``levels()`` renders them as the decimal
strings a venue would send (fixed decimals from tick and lot size), and those exact strings are
what checksums are computed over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


TEXT_CACHE_SIZE = 65_536  # rendered prices / sizes kept per market (then the cache starts over)


@dataclass(frozen=True)
class SyntheticParams:
    """Knobs of the model (defaults give a liquid, slowly trending book)."""

    mid_ticks: int = 500_000  # starting mid, in ticks (e.g. 50,000.0 at tick 0.1)
    depth_levels: int = 40  # levels kept each side
    step_ms: int = 20
    phi: float = 0.97  # pressure persistence per step
    sigma: float = 0.08  # pressure innovation
    skew: float = 0.8  # how strongly pressure skews limit sizes
    lag_steps: int = 10  # market orders follow the pressure this many steps later
    mo_prob: float = 0.5  # chance of a market order per step
    mo_lots_mean: float = 120.0
    lo_per_step: int = 4  # limit orders per step
    lo_lots_mean: float = 20.0
    cancel_frac: float = 0.03  # share of each level's size cancelled per step (on average)
    jump_prob: float = 0.0  # chance per step of a price jump (stress fault; 0 = never)
    jump_ticks: int = 3  # a jump shifts the whole book by 1..jump_ticks ticks, up or down


@dataclass
class Trade:
    price_ticks: int
    lots: int
    side: str  # aggressor side: "buy" or "sell"
    trade_id: int


@dataclass
class StepResult:
    """What one step changed: the levels whose size changed (0 = removed), the trades, and the
    price jump of the step in ticks (0: none)."""

    changed_bids: dict[int, int] = field(default_factory=dict)
    changed_asks: dict[int, int] = field(default_factory=dict)
    trades: list[Trade] = field(default_factory=list)
    jump_ticks: int = 0


class SyntheticMarket:
    """The model's state. ``step()`` advances it; ``levels()`` renders the book as strings."""

    def __init__(self, seed: int, tick_size: float, lot_size: float, params: SyntheticParams = SyntheticParams()):
        """Raises:
        ValueError: a tick or lot size <= 0, a jump_prob outside [0, 1], a jump_ticks < 1.
        """
        if tick_size <= 0 or lot_size <= 0:
            raise ValueError("tick_size and lot_size must be positive")
        if not 0.0 <= params.jump_prob <= 1.0:
            raise ValueError(f"jump_prob must be in 0..1, got {params.jump_prob}")
        if int(params.jump_ticks) < 1:
            raise ValueError(f"jump_ticks must be >= 1, got {params.jump_ticks}")
        self.params = params
        self.tick_size = tick_size
        self.lot_size = lot_size
        self._price_decimals = max(0, -int(math.floor(math.log10(tick_size) + 1e-9)))
        self._size_decimals = max(0, -int(math.floor(math.log10(lot_size) + 1e-9)))
        self._price_format = f"{{:.{self._price_decimals}f}}".format
        self._size_format = f"{{:.{self._size_decimals}f}}".format
        self._price_texts: dict[int, str] = {}  # ticks -> price_str (prices repeat near the touch)
        self._size_texts: dict[int, str] = {}  # lots -> size_str
        self.rng = np.random.default_rng(seed)
        self.pressure = 0.0
        self._history: list[float] = [0.0] * (params.lag_steps + 1)
        self.bids: dict[int, int] = {}
        self.asks: dict[int, int] = {}
        self.steps = 0
        self.jumps = 0  # price jumps so far
        self._jump_rng = np.random.default_rng([int(seed) & 0xFFFF_FFFF_FFFF_FFFF, 0x4A554D50])
        self._trade_id = 0
        mid = params.mid_ticks
        for i in range(params.depth_levels):
            self.bids[mid - 1 - i] = int(self.rng.integers(20, 200))
            self.asks[mid + 1 + i] = int(self.rng.integers(20, 200))

    # ------------------------------------------------------------------------------ queries
    def best_bid(self) -> int:
        return max(self.bids)

    def best_ask(self) -> int:
        return min(self.asks)

    def mid_ticks(self) -> float:
        return (self.best_bid() + self.best_ask()) / 2

    def price_str(self, ticks: int) -> str:
        text = self._price_texts.get(ticks)
        if text is None:
            if len(self._price_texts) >= TEXT_CACHE_SIZE:
                self._price_texts.clear()
            text = self._price_texts[ticks] = self._price_format(ticks * self.tick_size)
        return text

    def size_str(self, lots: int) -> str:
        text = self._size_texts.get(lots)
        if text is None:
            if len(self._size_texts) >= TEXT_CACHE_SIZE:
                self._size_texts.clear()
            text = self._size_texts[lots] = self._size_format(lots * self.lot_size)
        return text

    def levels(self, n: int | None = None) -> tuple[list[list[str]], list[list[str]]]:
        """(bids best first, asks best first) as ``[price, size]`` string pairs, at most ``n`` a side."""
        bids = sorted(self.bids.items(), key=lambda kv: -kv[0])[:n]
        asks = sorted(self.asks.items())[:n]
        return ([[self.price_str(p), self.size_str(s)] for p, s in bids],
                [[self.price_str(p), self.size_str(s)] for p, s in asks])

    # ------------------------------------------------------------------------------ dynamics
    def _set(self, book: dict[int, int], changed: dict[int, int], price: int, lots: int) -> None:
        if lots <= 0:
            if price in book:
                del book[price]
                changed[price] = 0
        else:
            book[price] = lots
            changed[price] = lots

    # hot path: the synthetic market is the offline evaluation's and the venue's source; one step
    # draws ~100 numbers, so the cancels take theirs in one batch (the same stream: see _cancel)
    def step(self) -> StepResult:
        """Advance one step; returns the changed levels and the trades."""
        p_ = self.params
        rng = self.rng
        random, bids, asks = rng.random, self.bids, self.asks
        out = StepResult()
        changed_bids, changed_asks = out.changed_bids, out.changed_asks
        x = p_.phi * self.pressure + p_.sigma * rng.standard_normal()
        pressure = self.pressure = -1.0 if x < -1.0 else 1.0 if x > 1.0 else float(x)
        self._history.append(pressure)
        lagged = self._history.pop(0)
        # limit orders near the touch, sizes skewed by the current pressure
        for _ in range(p_.lo_per_step):
            is_bid = random() < 0.5
            dist = int(rng.geometric(0.35))  # 1, 2, 3... ticks behind the touch
            scale = 1 + pressure * p_.skew if is_bid else 1 - pressure * p_.skew
            lots = max(1, int(rng.exponential(p_.lo_lots_mean) * max(scale, 0.05)))
            if is_bid:  # from just inside the spread down; never at or above the best ask
                price = min(asks) - dist
                bids[price] = changed_bids[price] = bids.get(price, 0) + lots
            else:
                price = max(bids) + dist
                asks[price] = changed_asks[price] = asks.get(price, 0) + lots
        # market order following the lagged pressure
        if random() < p_.mo_prob:
            buy = random() < (1 + lagged) / 2
            lots = max(1, int(rng.exponential(p_.mo_lots_mean)))
            book, changed = (asks, changed_asks) if buy else (bids, changed_bids)
            side = "buy" if buy else "sell"
            while lots > 0 and len(book) > 1:
                price = min(book) if buy else max(book)
                take = min(lots, book[price])
                self._trade_id += 1
                out.trades.append(Trade(price, take, side, self._trade_id))
                self._set(book, changed, price, book[price] - take)
                lots -= take
        # cancels
        self._cancel(bids, changed_bids)
        self._cancel(asks, changed_asks)
        # keep depth bounded and refill thin sides far from the touch
        self._trim(bids, changed_bids, reverse=True)
        self._trim(asks, changed_asks, reverse=False)
        if p_.jump_prob and self._jump_rng.random() < p_.jump_prob:
            k = int(self._jump_rng.integers(1, int(p_.jump_ticks) + 1))
            self.shift(k if self._jump_rng.random() < 0.5 else -k, out)
        self.steps += 1
        return out

    def _cancel(self, book: dict[int, int], changed: dict[int, int]) -> None:
        """Each level, in the book's order, loses a third of its size (at least a lot) with
        probability ``cancel_frac``, one uniform draw per level while the side has more than two
        levels. A level is removed only when it holds one lot, so when fewer than all but two
        levels hold one lot, every level draws: the draws are taken in one batch (the same numbers
        in the same order as one at a time)."""
        frac = self.params.cancel_frac
        sizes = list(book.values())
        if len(sizes) - sizes.count(1) > 2:
            prices = list(book)
            for k in (self.rng.random(len(prices)) < frac).nonzero()[0].tolist():
                price = prices[k]
                self._set(book, changed, price, book[price] - max(1, book[price] // 3))
            return
        random = self.rng.random
        for price in list(book):
            if len(book) > 2 and random() < frac:
                self._set(book, changed, price, book[price] - max(1, book[price] // 3))

    def shift(self, ticks: int, out: StepResult | None = None) -> StepResult:
        """Shift the whole book by ``ticks`` (a price jump; every level keeps its size) and record
        the change in ``out`` (a new ``StepResult`` when None): old prices deleted, new ones set, so
        the changed levels applied to the old book give the new one. Returns ``out``."""
        out = out if out is not None else StepResult()
        ticks = int(ticks)
        if ticks:
            for book, changed in ((self.bids, out.changed_bids), (self.asks, out.changed_asks)):
                old = dict(book)
                book.clear()
                for price in old:
                    changed[price] = 0
                for price, lots in old.items():
                    book[price + ticks] = lots
                    changed[price + ticks] = lots
            out.jump_ticks += ticks
            self.jumps += 1
        return out

    def _trim(self, book: dict[int, int], changed: dict[int, int], reverse: bool) -> None:
        n = self.params.depth_levels
        extra = len(book) - n
        if extra == 1:  # the common case: one level too many, the worst one goes
            price = min(book) if reverse else max(book)
            del book[price]
            changed[price] = 0
        elif extra > 1:
            for price in sorted(book, reverse=reverse)[n:]:
                self._set(book, changed, price, 0)
        while len(book) < n // 2:
            edge = min(book) - 1 if reverse else max(book) + 1
            self._set(book, changed, edge, int(self.rng.integers(20, 200)))
