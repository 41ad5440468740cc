"""The fast model's training data: markets replayed into feature rows, their labels on a market-time
horizon, and the time split (train / validation / held-out, with embargoes).

A ``Series`` is one market's rows in time order: one synthetic market stepped at one pace, or one
instrument of a capture. Every row comes from ``pipeline.trading.features`` exactly as the feature
stage computes it; its time is the BOOK's market time (synthetic: step * pace; capture: receive time).

Labels (``build_dataset``, ``label``), on a horizon of MARKET time (``horizon_ms``): ``move_ticks`` is
the mid ``horizon_ms`` later (the last row at or before t + horizon) minus the mid now, in ticks; rows
whose horizon runs past the series' end are unlabelled. Every label is priced in what acting on it
costs at the row (``cost_ticks``, a round trip)::

    cost_ticks = spread_ticks + 2 * fee_bps / tick_bps     (the spread: half in, half out; the fee on
                                                            each side, in ticks at the row's mid)
    LEAN_BUY   move >  cost_ticks        LEAN_SELL   move < -cost_ticks        else HOLD

so a LEAN move is one that pays its round trip. ``fee_bps`` (``TrainParams``) defaults to the maker
rate of the evaluation's fee schedule (``pipeline.venue.fees.DEFAULT_EVALUATION_FEES``, Bitget spot's
standard tier: 10 bps): the planner's orders are passive limit orders at or behind the touch, so its
fills are maker fills.

EMERGENCY is defined by what it protects: a resting order at the touch (a bid at the row's best bid,
an ask at its best ask) that would be filled within the horizon and then lose more than
``emergency_loss_ticks`` by the horizon's end, its maker fee counted (adverse selection;
``touch_outcomes``)::

    bid filled   some row j in (i, i + horizon] has a trade at or below the bid, or a best ask at or
                 below it (the price traded to or through it; the queue ahead of the order is not
                 modelled, so this counts every fill the price made possible)
    bid markout  mid at the horizon's end - bid (ticks; the ask: ask - mid at the horizon's end)
    net markout  markout - fee_bps / tick_bps (the fill's own fee, in ticks at the row's mid)
    EMERGENCY    a side filled with net markout < -emergency_loss_ticks; ``side`` says which
                 (SIDE_BID / SIDE_ASK): both cannot lose at once (the mid would have to end below the
                 bid and above the ask)

With the default ``emergency_loss_ticks = 0`` an EMERGENCY is a fill that loses money after its fee,
marked at the mid: the fill a quote at the touch should not have given. An EMERGENCY overrides a LEAN
label (pulling the quotes is the fast path's job; a LEAN goes to the slow path).

Labels priced in ticks and costs of MARKET time mean the same at any update rate: a market that moves
faster in market time truly has more moves that pay and more fills that lose within the horizon.

The market (``TrainParams.market``, ``market_params``): the paper venue's synthetic market calibrated
to real captures (``CALIBRATED``: a book push every ``step_ms``, spreads of tens of ticks), or the
default one. Several update rates (``TrainParams.paces_ms``, around the calibrated market's own
step): the inputs are not all rate-invariant. ``PACE_DEPENDENT_SLOTS`` count or decay per unit of
time (trade intensity and volume rate, decayed order-flow imbalance and its norm, decayed trade
imbalance, the volatilities, seconds since the last trade, the BOOK interval): the same book and
trades stepped at another pace give other values there. Every other slot (book shape, imbalances,
microprice, spread, instantaneous OFI, VPIN, last trade offset, per-update return and mid change,
depth, level counts) depends only on the book and the trades, not on the clock. Real books arrive at
an irregular pace, so each pace of ``paces_ms`` is its own synthetic market (its own seed), stepped
``warmup_ms`` of market time before its first row and then its share of ``steps`` (``pace_steps``);
in training each pace weighs the same (``Series.weight``). Each pace runs a market for each of
``TrainParams.instruments`` (tick and lot: sizes and depths are features in base units, so an
instrument with ten times the lot size has ten times the depth). A pace far outside them (the pipeline
bench's 1 ms) gives inputs outside the model card's bounds, which the fast stage's input-range guard
answers with HOLD (``pipeline.trading.model.decide``).

Split (``time_split``): per group of series sharing one clock (each synthetic pace alone; all the
instruments of one capture together), two cut times at the ``1 - validation - holdout`` and
``1 - holdout`` quantiles of the group's row times; rows before the first cut train, rows in the next
``horizon_ms`` are dropped (the embargo: no training label reaches a later row's time), then validation
until the second cut, another embargo, then held-out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.trading.features import (F_BASIS_AGE_MS, F_BOOK_INTERVAL_MS, F_HIDDEN_VOLUME_RATE, F_OFI_DECAYED,
                                       F_OFI_NORM, F_SECONDS_SINCE_TRADE, F_TRADE_IMBALANCE, F_TRADE_INTENSITY,
                                       F_TRADE_VOLUME_RATE, F_VOLATILITY_FAST, F_VOLATILITY_SLOW, N_FEATURES,
                                       FeatureParams, FeatureState, compute, update_from_trade)
from pipeline.trading.messages import BOOK_DTYPE, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL, Label
from pipeline.venue.fees import DEFAULT_EVALUATION_FEES
from pipeline.venue.synthetic import CALIBRATED, SyntheticMarket, SyntheticParams

TRAIN, VALIDATION, HELD_OUT, DROPPED = 0, 1, 2, -1  # Dataset.part values
PART_NAMES = {TRAIN: "train", VALIDATION: "validation", HELD_OUT: "held_out"}
SIDE_NONE, SIDE_BID, SIDE_ASK = 0, 1, 2  # Dataset.side: which resting order at the touch an EMERGENCY protects
T0_NS = 1_700_000_000_000_000_000  # the synthetic series' clock origin
PACE_DEPENDENT_SLOTS = (F_OFI_DECAYED, F_OFI_NORM, F_TRADE_INTENSITY, F_TRADE_VOLUME_RATE, F_TRADE_IMBALANCE,
                        F_SECONDS_SINCE_TRADE, F_VOLATILITY_FAST, F_VOLATILITY_SLOW, F_BOOK_INTERVAL_MS,
                        F_HIDDEN_VOLUME_RATE, F_BASIS_AGE_MS)
IC_HORIZONS_MS = (1_000, 5_000, 20_000)  # the horizons of Dataset.fwd_ticks (the evaluation's information coefficient)
MARKETS = ("calibrated", "default")  # TrainParams.market: the synthetic market's parameters (market_params)


def market_params(name: str) -> SyntheticParams:
    """The synthetic market's parameters for ``TrainParams.market``: ``"calibrated"`` is
    ``pipeline.venue.synthetic.CALIBRATED`` (the paper venue's market calibrated to real captures),
    ``"default"`` is ``SyntheticParams()``.

    Raises:
        ValueError: another name.
    """
    if name == "default":
        return SyntheticParams()
    if name == "calibrated":
        return CALIBRATED
    raise ValueError(f"market must be one of {MARKETS}, not {name!r}")


@dataclass(frozen=True)
class TrainParams:
    """Every step's parameters: data, labels, split, training, threshold choice."""

    seed: int = 7
    market: str = "calibrated"  # the synthetic market's parameters (market_params)
    steps: int = 45_000  # synthetic steps with rows, all paces together, shared as pace_shares says
    paces_ms: tuple[int, ...] = (250, 550, 1_000)  # ms of market time a step: the calibrated market's ~550 and around
    pace_shares: tuple[float, ...] = (1, 1, 1)
    warmup_ms: int = 60_000  # market time each pace runs before its first row
    instruments: tuple[tuple[float, float], ...] = ((0.1, 0.0001), (0.01, 0.001))  # (tick, lot): the config's two
    horizon_ms: int = 5_000
    fee_bps: float = DEFAULT_EVALUATION_FEES.maker_bps  # per fill: the labels' costs and both objectives
    emergency_loss_ticks: float = 0.0  # X: an EMERGENCY's filled order at the touch loses more than this, after its fee
    mirror: bool = True  # train on every training row and its mirror image too (mirror_rows)
    hidden: int = 32
    epochs: int = 5
    batch: int = 256
    lr: float = 3e-3
    l2: float = 1e-4
    validation: float = 0.2
    holdout: float = 0.2
    lean_rate_min: float = 0.0
    lean_rate_max: float = 0.05
    emergency_rate_max: float = 0.02
    market_eval_seeds: tuple[int, ...] = (20_261_201, 20_261_202)  # the card's trading figures: fresh markets
    market_eval_seconds: int = 1_800


@dataclass
class Series:
    """One market's feature rows in time order, with its touch and the trades between rows."""

    name: str
    X: np.ndarray  # float32 [n, 128]
    t_ns: np.ndarray  # int64 [n], non-decreasing
    mid_ticks: np.ndarray  # float64 [n]: the mid in ticks of this market's price grid
    tick_bps: np.ndarray  # float64 [n]: one tick in basis points of the mid
    group: str  # series of one group share a clock (one split)
    weight: float = 1.0  # each of its rows' weight in training (the synthetic paces are balanced)
    bid_ticks: np.ndarray | None = None  # float64 [n]: the best bid (None: mid - 0.5)
    ask_ticks: np.ndarray | None = None  # float64 [n]: the best ask (None: mid + 0.5)
    trade_lo_ticks: np.ndarray | None = None  # float64 [n]: the lowest trade since the previous row (+inf: none)
    trade_hi_ticks: np.ndarray | None = None  # float64 [n]: the highest trade since the previous row (-inf: none)

    def touch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(bid, ask, trade_lo, trade_hi) in ticks, the defaults filled in."""
        n = len(self.t_ns)
        mid = np.asarray(self.mid_ticks, np.float64)
        bid = mid - 0.5 if self.bid_ticks is None else np.asarray(self.bid_ticks, np.float64)
        ask = mid + 0.5 if self.ask_ticks is None else np.asarray(self.ask_ticks, np.float64)
        lo = np.full(n, np.inf) if self.trade_lo_ticks is None else np.asarray(self.trade_lo_ticks, np.float64)
        hi = np.full(n, -np.inf) if self.trade_hi_ticks is None else np.asarray(self.trade_hi_ticks, np.float64)
        return bid, ask, lo, hi


@dataclass
class Dataset:
    """Labelled rows of several series, concatenated (each series' rows in time order)."""

    X: np.ndarray  # float32 [n, 128]
    y: np.ndarray  # int64 [n]
    move_ticks: np.ndarray  # float64 [n]
    cost_ticks: np.ndarray  # float64 [n]: the round trip a LEAN must beat (spread + two fees)
    side: np.ndarray  # int64 [n]: SIDE_BID / SIDE_ASK for an EMERGENCY, else SIDE_NONE
    filled: np.ndarray  # bool [n, 2]: the bid / the ask at the touch filled within the horizon
    markout_ticks: np.ndarray  # float64 [n, 2]: the bid's / the ask's markout at the horizon's end (before fees)
    fwd_ticks: np.ndarray  # float64 [n, len(IC_HORIZONS_MS)]: the mid move over each; NaN past the series' end
    tick_bps: np.ndarray  # float64 [n]
    t_ns: np.ndarray  # int64 [n]
    series: np.ndarray  # int64 [n]: index into names
    part: np.ndarray  # int64 [n]: TRAIN, VALIDATION, HELD_OUT or DROPPED (an embargo)
    names: list[str]
    weights: np.ndarray  # float64 [n_series]: the training weight of each series' rows
    horizon_ms: int

    def rows(self, part: int) -> np.ndarray:
        return np.flatnonzero(self.part == part)


def pace_seed(seed: int, pace_ms: int) -> int:
    """The synthetic market's seed for one pace: each pace is its own market."""
    return int(seed) * 1_000_003 + int(pace_ms)


def _book_record(market: SyntheticMarket, book: np.ndarray, tick: float, lot: float) -> None:
    """The market's top 15 levels into the BOOK record ``book`` (as the feed builds it)."""
    bids = sorted(market.bids.items(), key=lambda kv: -kv[0])[:BOOK_LEVELS]
    asks = sorted(market.asks.items())[:BOOK_LEVELS]
    book["n_bids"], book["n_asks"] = len(bids), len(asks)
    book["bid_px"], book["bid_sz"], book["ask_px"], book["ask_sz"] = 0.0, 0.0, 0.0, 0.0
    book["bid_px"][0, : len(bids)] = [px * tick for px, _ in bids]
    book["bid_sz"][0, : len(bids)] = [sz * lot for _, sz in bids]
    book["ask_px"][0, : len(asks)] = [px * tick for px, _ in asks]
    book["ask_sz"][0, : len(asks)] = [sz * lot for _, sz in asks]


def synthetic_series(p: TrainParams, pace_ms: int, steps: int, seed: int | None = None,
                     warmup_ms: int | None = None, instrument: int = 0) -> Series:
    """``steps`` rows of one synthetic market (``SyntheticMarket`` with ``market_params(p.market)`` and the
    tick and lot of ``p.instruments[instrument]``, seed ``pace_seed(p.seed, pace_ms) + 1000 * instrument``
    unless ``seed``) stepped every ``pace_ms`` of market time, after ``warmup_ms`` (default
    ``p.warmup_ms``) of steps whose rows are not kept. Each step: its trades into the feature state
    (TRADE records), then the top 15 levels as a BOOK through ``compute``; a rejected BOOK gives no row
    (its step's trades then count for the next row's ``trade_lo`` / ``trade_hi``).

    Raises:
        ValueError: ``pace_ms`` < 1 or ``steps`` < 0, or an unknown ``p.market``.
    """
    if pace_ms < 1 or steps < 0:
        raise ValueError(f"pace_ms must be >= 1 and steps >= 0, not {pace_ms} / {steps}")
    tick, lot = p.instruments[instrument]
    mp = market_params(p.market)
    seed = pace_seed(p.seed, pace_ms) + 1000 * instrument if seed is None else seed
    market = SyntheticMarket(seed, tick, lot, mp)
    state = FeatureState(1, tick, FeatureParams(vpin_bucket_volume=1000 * lot))
    book = np.zeros(1, BOOK_DTYPE)
    book["instrument_id"] = 1
    trade = np.zeros(1, TRADE_DTYPE)
    trade["instrument_id"] = 1
    warm = (p.warmup_ms if warmup_ms is None else warmup_ms) // pace_ms
    X = np.zeros((steps, N_FEATURES), np.float32)
    touch = np.zeros((steps, 5))  # mid, bid, ask, trade lo, trade hi
    ok = np.zeros(steps, bool)
    lo, hi = np.inf, -np.inf
    for i in range(warm + steps):
        res = market.step()
        ts = T0_NS + (i + 1) * pace_ms * 1_000_000
        for tr in res.trades:
            trade["side"] = TRADE_SIDE_BUY if tr.side == "buy" else TRADE_SIDE_SELL
            trade["trade_id"], trade["exch_ts_ns"] = tr.trade_id, ts
            trade["price"], trade["size"] = tr.price_ticks * tick, tr.lots * lot
            update_from_trade(state, trade.tobytes())
            lo, hi = min(lo, tr.price_ticks), max(hi, tr.price_ticks)
        _book_record(market, book, tick, lot)
        book["seq"], book["exch_ts_ns"] = i + 1, ts
        k = i - warm
        row = X[k] if k >= 0 else np.zeros(N_FEATURES, np.float32)
        good = compute(state, book.tobytes(), row) == 0
        if k >= 0:
            ok[k] = good and i > 0
            touch[k] = (market.mid_ticks(), max(market.bids, default=np.nan), min(market.asks, default=np.nan), lo, hi)
        if good:
            lo, hi = np.inf, -np.inf
    t = T0_NS + (warm + 1 + np.arange(steps, dtype=np.int64)) * pace_ms * 1_000_000
    tc = touch[ok]
    mid_px = tc[:, 0] * tick
    name = f"synthetic@{pace_ms}ms" + (f"#{instrument}" if instrument else "")
    return Series(name, X[ok], t[ok], tc[:, 0], tick / np.maximum(mid_px, 1e-300) * 1e4, name, 1.0, tc[:, 1], tc[:, 2],
                  tc[:, 3], tc[:, 4])


def forward_moves(t_ns: np.ndarray, mid: np.ndarray, horizon_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(move, ok): ``mid[j] - mid[i]`` with ``j`` the last row at or before ``t[i] + horizon_ns``;
    ``ok`` where the series reaches that time (its last row is at or after it)."""
    t = np.asarray(t_ns, np.int64)
    if not len(t):
        return np.zeros(0), np.zeros(0, bool)
    j = np.searchsorted(t, t + horizon_ns, side="right") - 1
    return np.asarray(mid, np.float64)[j] - mid, t[-1] >= t + horizon_ns


def _range_extreme(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, fn) -> np.ndarray:
    """``fn`` (np.minimum / np.maximum) of ``a[lo[i] .. hi[i]]`` (inclusive) per i, by a sparse table;
    rows with ``lo > hi`` get ``fn``'s identity (+inf for the minimum, -inf for the maximum)."""
    ident = np.inf if fn is np.minimum else -np.inf
    n = len(a)
    out = np.full(len(lo), ident)
    if not n:
        return out
    table = [np.asarray(a, np.float64)]
    while (1 << len(table)) <= n:
        prev, h = table[-1], 1 << (len(table) - 1)
        table.append(fn(prev[:-h], prev[h:]))
    has = lo <= hi
    lo_, hi_ = lo[has], hi[has]
    k = np.floor(np.log2(hi_ - lo_ + 1)).astype(np.int64)
    res = np.empty(len(lo_))
    for lv in np.unique(k):
        m = k == lv
        t = table[lv]
        res[m] = fn(t[lo_[m]], t[hi_[m] - (1 << lv) + 1])
    out[has] = res
    return out


def touch_outcomes(t_ns: np.ndarray, mid: np.ndarray, bid: np.ndarray, ask: np.ndarray, trade_lo: np.ndarray,
                   trade_hi: np.ndarray, horizon_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(filled bool [n, 2], markout_ticks float64 [n, 2]) of a bid resting at each row's best bid and an
    ask at its best ask, over the rows after it up to ``t + horizon_ns`` (the module docstring's rule):
    the bid filled when a later row's lowest trade or best ask is at or below it, the ask when a later
    row's highest trade or best bid is at or above it; markouts ``mid_end - bid`` and ``ask - mid_end``
    with ``mid_end`` the mid of the last row at or before ``t + horizon_ns``."""
    t = np.asarray(t_ns, np.int64)
    n = len(t)
    if not n:
        return np.zeros((0, 2), bool), np.zeros((0, 2))
    j = np.searchsorted(t, t + horizon_ns, side="right") - 1
    first = np.arange(n) + 1
    low = _range_extreme(np.minimum(trade_lo, ask), first, j, np.minimum)
    high = _range_extreme(np.maximum(trade_hi, bid), first, j, np.maximum)
    filled = np.stack([low <= bid, high >= ask], axis=1)
    end = np.asarray(mid, np.float64)[j]
    return filled, np.stack([end - bid, ask - end], axis=1)


def cost_ticks(spread_ticks: np.ndarray, tick_bps: np.ndarray, fee_bps: float) -> np.ndarray:
    """The round trip of acting on a move, in ticks at each row: the spread plus the fee twice."""
    return np.asarray(spread_ticks, np.float64) + 2.0 * fee_bps / np.asarray(tick_bps, np.float64)


def label(move_ticks: np.ndarray, cost: np.ndarray, filled: np.ndarray, net_markout_ticks: np.ndarray,
          p: TrainParams) -> tuple[np.ndarray, np.ndarray]:
    """(labels int64 [n], side int64 [n]) of the module docstring's rule: LEAN beyond ``cost`` (ticks),
    EMERGENCY (overriding) where a filled side's markout net of its fee (``net_markout_ticks`` [n, 2]:
    bid, ask) is below ``-p.emergency_loss_ticks``, its side SIDE_BID / SIDE_ASK."""
    m = np.asarray(move_ticks, np.float64)
    band = np.asarray(cost, np.float64)
    y = np.full(m.shape, int(Label.HOLD), np.int64)
    y[m > band] = Label.LEAN_BUY
    y[m < -band] = Label.LEAN_SELL
    adverse = np.asarray(filled, bool) & (np.asarray(net_markout_ticks, np.float64) < -p.emergency_loss_ticks)
    side = np.where(adverse[:, 0], SIDE_BID, np.where(adverse[:, 1], SIDE_ASK, SIDE_NONE)).astype(np.int64)
    y[side != SIDE_NONE] = Label.EMERGENCY
    return y, side


def time_split(t_ns: np.ndarray, horizon_ns: int, validation: float, holdout: float) -> np.ndarray:
    """Each row's part (TRAIN, VALIDATION, HELD_OUT, DROPPED) for rows sharing one clock, whatever
    their order: cut times ``c1`` / ``c2`` at the ``1 - validation - holdout`` / ``1 - holdout``
    shares of the sorted times; train ``t < c1``, validation ``c1 + h <= t < c2``, held-out
    ``t >= c2 + h``; the rest (one horizon after each cut: the embargoes) DROPPED. No rows: empty.

    Raises:
        ValueError: shares outside [0, 1) or summing to 1 or more.
    """
    if not (0 <= validation < 1 and 0 <= holdout < 1 and validation + holdout < 1):
        raise ValueError(f"validation {validation} and holdout {holdout} must be shares in [0, 1) summing below 1")
    t = np.asarray(t_ns, np.int64)
    part = np.full(len(t), DROPPED, np.int64)
    if not len(t):
        return part
    s = np.sort(t, kind="stable")
    n = len(t)
    c1 = int(s[min(int(n * (1 - validation - holdout)), n - 1)])
    c2 = int(s[min(int(n * (1 - holdout)), n - 1)])
    part[t < c1] = TRAIN
    part[(t >= c1 + horizon_ns) & (t < c2)] = VALIDATION
    part[t >= c2 + horizon_ns] = HELD_OUT
    return part


def build_dataset(series: list[Series], p: TrainParams) -> Dataset:
    """Label every series (rows without a complete horizon are left out), then split each group in
    time (``time_split``)."""
    h_ns = p.horizon_ms * 1_000_000
    keys = ("X", "y", "move", "cost", "side", "filled", "markout", "fwd", "tick_bps", "t", "series")
    cols: dict[str, list] = {k: [] for k in keys}
    for k, s in enumerate(series):
        move, ok = forward_moves(s.t_ns, s.mid_ticks, h_ns)
        bid, ask, lo, hi = s.touch()
        filled, markout = touch_outcomes(s.t_ns, s.mid_ticks, bid, ask, lo, hi, h_ns)
        cost = cost_ticks(ask - bid, s.tick_bps, p.fee_bps)
        y, side = label(move, cost, filled, markout - (p.fee_bps / np.asarray(s.tick_bps, np.float64))[:, None], p)
        fwd = [forward_moves(s.t_ns, s.mid_ticks, hz * 1_000_000) for hz in IC_HORIZONS_MS]
        cols["fwd"].append(np.stack([np.where(o, mv, np.nan) for mv, o in fwd], axis=1)[ok])
        for key, v in (("X", s.X), ("y", y), ("move", move), ("cost", cost), ("side", side), ("filled", filled),
                       ("markout", markout), ("tick_bps", s.tick_bps), ("t", s.t_ns)):
            cols[key].append(np.asarray(v)[ok])
        cols["series"].append(np.full(int(ok.sum()), k, np.int64))
    cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    X = cat["X"].astype(np.float32).reshape(-1, N_FEATURES)
    sid, t = cat["series"].astype(np.int64), cat["t"].astype(np.int64)
    part = np.full(len(t), DROPPED, np.int64)
    for g in sorted({s.group for s in series}):
        rows = np.flatnonzero(np.isin(sid, [k for k, s in enumerate(series) if s.group == g]))
        part[rows] = time_split(t[rows], h_ns, p.validation, p.holdout)
    f64 = {k: cat[k].astype(np.float64) for k in ("move", "cost", "tick_bps")}
    return Dataset(X, cat["y"].astype(np.int64), f64["move"], f64["cost"], cat["side"].astype(np.int64),
                   cat["filled"].astype(bool).reshape(-1, 2), cat["markout"].astype(np.float64).reshape(-1, 2),
                   cat["fwd"].astype(np.float64).reshape(-1, len(IC_HORIZONS_MS)), f64["tick_bps"], t, sid, part,
                   [s.name for s in series], np.array([s.weight for s in series], np.float64), p.horizon_ms)


def pace_steps(p: TrainParams) -> list[int]:
    """The steps with rows of each pace: ``p.steps`` shared in proportion to ``p.pace_shares``.

    Raises:
        ValueError: ``paces_ms`` and ``pace_shares`` of different lengths, or a share <= 0.
    """
    if len(p.paces_ms) != len(p.pace_shares) or any(not w > 0 for w in p.pace_shares):
        raise ValueError(f"paces_ms {p.paces_ms} and pace_shares {p.pace_shares}: one positive share per pace")
    total = float(sum(p.pace_shares))
    return [int(p.steps * w / total) for w in p.pace_shares]


def synthetic_all(p: TrainParams) -> list[Series]:
    """One series per pace of ``p.paces_ms`` and instrument of ``p.instruments`` (``pace_steps`` rows a
    pace, shared evenly by the instruments; each series its own market and clock)."""
    mean = sum(p.pace_shares) / len(p.pace_shares)
    out = []
    for pace, n, share in zip(p.paces_ms, pace_steps(p), p.pace_shares):
        for k in range(len(p.instruments)):
            rows = n // len(p.instruments)
            if rows > 0:
                s = synthetic_series(p, pace, rows, instrument=k)
                s.weight = mean / share
                out.append(s)
    return out


def generate(p: TrainParams) -> Dataset:
    """The synthetic training data: every pace of ``p``, labelled and split."""
    return build_dataset(synthetic_all(p), p)


def _mirror_plan() -> tuple[np.ndarray, np.ndarray]:
    """(source slot of each slot, sign) of the mirror image: bids and asks swap, signed features flip."""
    from pipeline.trading import features as f

    src = np.arange(N_FEATURES)
    sign = np.ones(N_FEATURES, np.float32)
    L = BOOK_LEVELS
    for a, b in ((f.F_BID_DIST_0, f.F_ASK_DIST_0), (f.F_BID_SIZE_0, f.F_ASK_SIZE_0)):
        src[a : a + L], src[b : b + L] = np.arange(b, b + L), np.arange(a, a + L)
    for a, b in ((f.F_DEPTH_BID, f.F_DEPTH_ASK), (f.F_N_BIDS, f.F_N_ASKS)):
        src[a], src[b] = b, a
    flip = [f.F_IMBALANCE_1 + i for i in range(len(f.IMBALANCE_DEPTHS))] + [
        f.F_MICROPRICE_OFFSET, f.F_OFI, f.F_OFI_DECAYED, f.F_OFI_NORM, f.F_TRADE_IMBALANCE, f.F_LAST_TRADE_OFFSET,
        f.F_RETURN_BPS, f.F_MID_CHANGE_TICKS, f.F_BASIS_BPS, f.F_BASIS_Z]
    sign[flip] = -1.0
    return src, sign


_MIRROR_SRC, _MIRROR_SIGN = _mirror_plan()
_MIRROR_LABEL = np.array([Label.HOLD, Label.LEAN_SELL, Label.LEAN_BUY, Label.EMERGENCY], np.int64)
MIRROR_SIDE = np.array([SIDE_NONE, SIDE_ASK, SIDE_BID], np.int64)  # a side's mirror image: bid and ask swap


def mirror_rows(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mirror image of feature rows and their labels: the same market upside down (bids and asks
    swapped, buys and sells swapped, prices reflected about the mid), so LEAN_BUY and LEAN_SELL swap.
    Distances, sizes, spread, volatility, intensity and VPIN are unchanged; imbalances, the
    microprice offset, order-flow imbalance, trade imbalance, the last trade's offset and the
    returns change sign, and so do the spot-perpetual basis and its z-score (both legs reflected alike:
    a premium becomes a discount). Hidden-order strength has no side and is unchanged. Training on
    both sides leaves the model no preferred direction. (An
    EMERGENCY's side swaps too: ``MIRROR_SIDE``.)"""
    return (np.asarray(X)[:, _MIRROR_SRC] * _MIRROR_SIGN).astype(np.float32), _MIRROR_LABEL[np.asarray(y)]
