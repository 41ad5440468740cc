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

Placement (``placement``): "opposite" (the default, above) puts each limit order Geometric(lo_dist_p)
ticks from the OPPOSITE touch, so the spread stays near a tick. "own" is the requoting book that
``CALIBRATED`` uses, where the mid moves by quotes more than by trades:

- A limit order improves its own touch with probability ``inside_prob`` (times ``1 +- revision_skew *
  p_lagged``: bids more often when buyers are coming, asks less often), landing 1 .. ``inside_frac``
  of the spread ticks inside it (never at or through the other side); otherwise it joins its touch or
  rests behind it, ``Geometric(lo_dist_p) - 1`` ticks back. Sizes are skewed by the pressure now, as
  above.
- Each step, each side's whole touch level is withdrawn with probability ``touch_cancel_prob`` (times
  ``1 -+ revision_skew * p_lagged``: the ask more often when buyers are coming), exposing the next level.
- Market orders are as above, ``mo_lots_base + Exponential(mo_lots_mean)`` lots.

So the spread settles where withdrawals (widening by the gap to the next level) balance improvements,
and the lagged pressure moves the mid through both: the planted relation, now carried by quotes. The
starting book (and a refill far from the touch) spaces its levels ``level_gap_ticks`` apart from
``half_spread0_ticks`` either side of ``mid_ticks``, sizes 20..199 lots times ``book_lots_scale``. With
the default values of these fields the model is the one above, draw for draw.

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
    """Knobs of the model (defaults give a liquid, slowly trending book with a spread of a tick or two;
    ``CALIBRATED`` is the shared Bitget capture's proportions). ``check_params`` states each range."""

    mid_ticks: int = 500_000  # starting mid, in ticks (e.g. 50,000.0 at tick 0.1)
    depth_levels: int = 40  # levels kept each side
    step_ms: int = 20
    phi: float = 0.97  # pressure persistence per step
    sigma: float = 0.08  # pressure innovation
    skew: float = 0.8  # how strongly pressure skews limit sizes
    lag_steps: int = 10  # market orders follow the pressure this many steps later
    mo_prob: float = 0.5  # chance of a market order per step
    mo_lots_mean: float = 120.0  # a market order is mo_lots_base + Exponential(mo_lots_mean) lots (at least 1)
    mo_lots_base: float = 0.0
    lo_per_step: int = 4  # limit orders per step
    lo_lots_mean: float = 20.0
    cancel_frac: float = 0.03  # share of each level's size cancelled per step (on average)
    jump_prob: float = 0.0  # chance per step of a price jump (stress fault; 0 = never)
    jump_ticks: int = 3  # a jump shifts the whole book by 1..jump_ticks ticks, up or down
    # where limit orders land: "opposite" (Geometric(lo_dist_p) ticks from the opposite touch: the
    # spread stays near a tick) or "own" (the requoting book: see the module docstring)
    placement: str = "opposite"
    lo_dist_p: float = 0.35  # the Geometric draw of a limit order's distance (mean 1 / lo_dist_p ticks)
    inside_prob: float = 0.0  # "own": chance that a limit order improves its touch (lands in the spread)
    inside_frac: float = 1.0  # "own": an improvement is 1 .. inside_frac * spread ticks (uniform)
    touch_cancel_prob: float = 0.0  # "own": chance per step and side that the whole touch level is withdrawn
    revision_skew: float = 0.0  # "own": how strongly the lagged pressure skews improvements and withdrawals
    level_gap_ticks: int = 1  # gap between the starting book's levels (and a refill's)
    half_spread0_ticks: int = 1  # the starting book's best bid / ask this many ticks from mid_ticks
    book_lots_scale: int = 1  # the starting book's and a refill's level sizes: 20..199 lots times this


PLACEMENTS = ("opposite", "own")


def check_params(p: SyntheticParams) -> None:
    """Raises:
    ValueError: a field out of its range (the message names it): a placement not in PLACEMENTS; a
        step_ms, mid_ticks, depth_levels, level_gap_ticks, half_spread0_ticks or book_lots_scale below
        1 (depth_levels below 4); lag_steps or lo_per_step below 0; a probability (mo_prob,
        cancel_frac, inside_prob, inside_frac, touch_cancel_prob) outside [0, 1]; lo_dist_p outside
        (0, 1]; a negative mean size, sigma, skew or revision_skew.
    """
    if p.placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {p.placement!r}")
    for name, low in (("step_ms", 1), ("mid_ticks", 1), ("depth_levels", 4), ("level_gap_ticks", 1),
                      ("half_spread0_ticks", 1), ("book_lots_scale", 1), ("lag_steps", 0), ("lo_per_step", 0)):
        if int(getattr(p, name)) < low:
            raise ValueError(f"{name} must be >= {low}, got {getattr(p, name)}")
    for name in ("mo_prob", "cancel_frac", "inside_prob", "inside_frac", "touch_cancel_prob"):
        if not 0.0 <= getattr(p, name) <= 1.0:
            raise ValueError(f"{name} must be in 0..1, got {getattr(p, name)}")
    if not 0.0 < p.lo_dist_p <= 1.0:
        raise ValueError(f"lo_dist_p must be in (0, 1], got {p.lo_dist_p}")
    for name in ("mo_lots_mean", "mo_lots_base", "lo_lots_mean", "sigma", "skew", "revision_skew"):
        if not getattr(p, name) >= 0.0:
            raise ValueError(f"{name} must be >= 0, got {getattr(p, name)}")


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
        ValueError: a tick or lot size <= 0, a jump_prob outside [0, 1], a jump_ticks < 1, another
            field of ``params`` out of its range (``check_params``; the message names the field).
        """
        if tick_size <= 0 or lot_size <= 0:
            raise ValueError("tick_size and lot_size must be positive")
        if not 0.0 <= params.jump_prob <= 1.0:
            raise ValueError(f"jump_prob must be in 0..1, got {params.jump_prob}")
        if int(params.jump_ticks) < 1:
            raise ValueError(f"jump_ticks must be >= 1, got {params.jump_ticks}")
        check_params(params)
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
        mid, half = params.mid_ticks, params.half_spread0_ticks
        gap, scale = params.level_gap_ticks, params.book_lots_scale
        for i in range(params.depth_levels):
            self.bids[mid - half - i * gap] = int(self.rng.integers(20, 200)) * scale
            self.asks[mid + half + i * gap] = int(self.rng.integers(20, 200)) * scale

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
        if p_.placement == "own":
            self._requote(pressure, lagged, out)
        else:
            for _ in range(p_.lo_per_step):
                is_bid = random() < 0.5
                dist = int(rng.geometric(p_.lo_dist_p))  # 1, 2, 3... ticks from the opposite touch
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
            lots = max(1, int(p_.mo_lots_base + rng.exponential(p_.mo_lots_mean)))
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

    def _requote(self, pressure: float, lagged: float, out: StepResult) -> None:
        """The "own" placement's limit orders and touch withdrawals of one step (module docstring)."""
        p_, rng, bids, asks = self.params, self.rng, self.bids, self.asks
        random = rng.random
        push = lagged * p_.revision_skew  # > 0: buyers coming: bids improve and asks withdraw more often
        for _ in range(p_.lo_per_step):
            is_bid = random() < 0.5
            sign = 1.0 if is_bid else -1.0
            scale = 1 + sign * pressure * p_.skew
            lots = max(1, int(rng.exponential(p_.lo_lots_mean) * max(scale, 0.05)))
            best_bid, best_ask = max(bids), min(asks)
            if random() < p_.inside_prob * (1 + sign * push):  # into the spread, never crossing it
                step_in = int(rng.integers(1, max(2, int(p_.inside_frac * (best_ask - best_bid)))))
                step_in = min(step_in, best_ask - best_bid - 1)
            else:
                step_in = 1 - int(rng.geometric(p_.lo_dist_p))  # 0: joins the touch; < 0: behind it
            if is_bid:
                price = best_bid + step_in
                bids[price] = out.changed_bids[price] = bids.get(price, 0) + lots
            else:
                price = best_ask - step_in
                asks[price] = out.changed_asks[price] = asks.get(price, 0) + lots
        if p_.touch_cancel_prob:
            for book, changed, sign in ((bids, out.changed_bids, 1.0), (asks, out.changed_asks, -1.0)):
                if len(book) > 2 and random() < p_.touch_cancel_prob * (1 - sign * push):
                    self._set(book, changed, max(book) if sign > 0 else min(book), 0)

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
        gap, scale = self.params.level_gap_ticks, self.params.book_lots_scale
        while len(book) < n // 2:
            edge = min(book) - gap if reverse else max(book) + gap
            self._set(book, changed, edge, int(self.rng.integers(20, 200)) * scale)


#: The synthetic market calibrated to the shared Bitget capture (``pipeline.venue.calibration``
#: measures both one way; its report lists, per parameter, the statistic it was chosen for, and
#: ``calibration.PARAM_SOURCES`` holds that list). Targets: the capture's median over its 8 instruments
#: (2022-04-06, ~30 s, spot altcoins). One step is one book push (550 ms); a tick is 0.8 bps of the
#: price (mid_ticks 12,500); sizes are in lots worth ``CALIBRATED_LOT_NOTIONAL`` quote for the
#: instrument facts below. The spread (~40 bps) comes from touch withdrawals balanced by improvements
#: into the spread (``placement="own"``); trades are few and small (the capture's sit near 5 quote),
#: so the mid moves by requotes, as in the capture. The planted signal: the pressure skews limit
#: sizes now (the book imbalance) and, ``lag_steps`` later, which side improves, withdraws and takes;
#: its strength, the top-5 imbalance -> 1 s mid move IC, is ~0.06-0.09 (``calibration.IC_BAND``: 0.04
#: to 0.11; an out-of-sample R^2 of ~1.2 %, the best order-flow model of Kolm, Turiel & Westray,
#: "Deep order flow imbalance", Mathematical Finance 33(4), 2023, is an IC of ~0.11 for a linear
#: forecast; a single imbalance feature should do no better).
CALIBRATED = SyntheticParams(
    mid_ticks=12_500, step_ms=550, placement="own", phi=0.6, sigma=0.4, lag_steps=2, skew=0.5,
    mo_prob=0.075, mo_lots_mean=8.0, mo_lots_base=40.0, lo_per_step=40, lo_lots_mean=800.0, lo_dist_p=0.05,
    inside_prob=0.0025, inside_frac=0.5, touch_cancel_prob=0.6, revision_skew=0.5, cancel_frac=0.2,
    level_gap_ticks=1, half_spread0_ticks=27, book_lots_scale=45, depth_levels=40,
)
#: the instrument CALIBRATED is stated for (the default config's BTCUSDT: tick 0.1, lot 0.0001;
#: its ETHUSDT, tick 0.01 and lot 0.001, has the same tick * lot and so the same lot notional)
CALIBRATED_TICK_SIZE = 0.1
CALIBRATED_LOT_SIZE = 0.0001
CALIBRATED_LOT_NOTIONAL = CALIBRATED_TICK_SIZE * CALIBRATED_LOT_SIZE * CALIBRATED.mid_ticks  # 0.125 quote
