"""The fast model's training data: markets replayed into feature rows, their labels on a market-time
horizon, and the time split (train / validation / held-out, with embargoes).

A ``Series`` is one market's rows in time order: one synthetic market stepped at one pace, or one
instrument of a capture. Every row comes from ``pipeline.trading.features`` exactly as the feature
stage computes it; its time is the BOOK's market time (synthetic: step * pace; capture: receive time).

Labels (``build_dataset``, ``label``): ``move_ticks`` is the mid ``horizon_ms`` of MARKET TIME later
(the last row at or before t + horizon) minus the mid now, in ticks; rows whose horizon runs past the
series' end are unlabelled. The scale is the market's own recent moves over that same horizon
(``trailing_quantiles``): the ``lean_quantile`` / ``toxic_quantile`` / ``emergency_quantile``
quantiles of the absolute moves that completed in the ``scale_window_ms`` before the row (at least
``scale_min_moves`` of them; else unlabelled). Then (a fixed time horizon with thresholds scaled by
the market's recent moves, as López de Prado scales them by volatility, Advances in Financial
Machine Learning, 2018, section 3.2; quantiles rather than a standard deviation because the book's
sweeps make the moves heavy-tailed)::

    band = max(dead_band_ticks, q_lean)
    LEAN_BUY  move >  band        LEAN_SELL  move < -band        else HOLD
    EMERGENCY |move| >= max(emergency_min_ticks, q_emergency), or the flow is toxic
              (F_VPIN >= toxic_vpin) and |move| >= max(band, q_toxic)

So a label means the same at any update rate and in any market: a move that is large for this market
over this stretch of time. The synthetic market stepped every 1 ms is not the 20 ms one updated more
often: its price runs 20 times faster in market time (500 ms are 500 steps instead of 25), so labels
in fixed ticks would call most 1 ms rows EMERGENCY; scaled by the market's own moves they do not.

Training on several paces (``TrainParams.paces_ms``): the inputs are not all rate-invariant.
``PACE_DEPENDENT_SLOTS`` count or decay per unit of time (trade intensity and volume rate, decayed
order-flow imbalance and its norm, decayed trade imbalance, the volatilities, seconds since the last
trade, the BOOK interval): the same book and trades stepped at another pace give other values there
(at 1 ms instead of 20 ms: intensity and volume rate an order of magnitude higher, decayed OFI
more, the BOOK interval 1 instead of 20). Every other slot (book shape, imbalances, microprice,
spread, instantaneous OFI, VPIN, last trade offset, per-update return and mid change, depth, level
counts) depends only on the book and the trades, not on the clock. A model that saw one pace meets values it never saw at
another; so each pace of ``paces_ms`` is its own synthetic market (its own seed), stepped
``warmup_ms`` of market time before its first row (the 10 s volatility's warm-up) and then its share
of ``steps`` (``pace_steps``); in training each pace weighs the same (``Series.weight``).

Split (``time_split``): per group of series sharing one clock (each synthetic pace alone; all the
instruments of one capture together), two cut times at the ``1 - validation - holdout`` and
``1 - holdout`` quantiles of the group's row times; rows before the first cut train, rows in the next
``horizon_ms`` are dropped (the embargo: no training label reaches a later row's time), then validation
until the second cut, another embargo, then held-out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.trading.features import (F_BOOK_INTERVAL_MS, F_OFI_DECAYED, F_OFI_NORM, F_SECONDS_SINCE_TRADE,
                                       F_TRADE_IMBALANCE, F_TRADE_INTENSITY, F_TRADE_VOLUME_RATE, F_VOLATILITY_FAST,
                                       F_VOLATILITY_SLOW, F_VPIN, N_FEATURES, FeatureParams, FeatureState, compute,
                                       update_from_trade)
from pipeline.trading.messages import BOOK_DTYPE, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL, Label
from pipeline.venue.synthetic import SyntheticMarket, SyntheticParams

TRAIN, VALIDATION, HELD_OUT, DROPPED = 0, 1, 2, -1  # Dataset.part values
PART_NAMES = {TRAIN: "train", VALIDATION: "validation", HELD_OUT: "held_out"}
T0_NS = 1_700_000_000_000_000_000  # the synthetic series' clock origin
PACE_DEPENDENT_SLOTS = (F_OFI_DECAYED, F_OFI_NORM, F_TRADE_INTENSITY, F_TRADE_VOLUME_RATE, F_TRADE_IMBALANCE,
                        F_SECONDS_SINCE_TRADE, F_VOLATILITY_FAST, F_VOLATILITY_SLOW, F_BOOK_INTERVAL_MS)
IC_HORIZONS_MS = (100, 500, 2000)  # the horizons of Dataset.fwd_ticks (the evaluation's information coefficient)


@dataclass(frozen=True)
class TrainParams:
    """Every step's parameters: data, labels, split, training, threshold choice."""

    seed: int = 7
    steps: int = 90_000  # synthetic steps with rows, all paces together, shared as pace_shares says
    paces_ms: tuple[int, ...] = (1, 5, 20, 50)  # synthetic market paces: ms of market time a step
    pace_shares: tuple[float, ...] = (40, 12, 30, 8)  # 1 ms: the bench's pace; 20 ms: the paper venue's
    warmup_ms: int = 10_000  # market time each pace runs before its first row
    tick_size: float = 0.1
    lot_size: float = 0.0001
    horizon_ms: int = 500
    scale_window_ms: int = 30_000  # the recent moves a label is scaled by: those of the last 30 s
    scale_min_moves: int = 10
    dead_band_ticks: float = 2.0
    lean_quantile: float = 0.5
    toxic_quantile: float = 0.9
    emergency_quantile: float = 0.99
    emergency_min_ticks: float = 5.0
    toxic_vpin: float = 0.9
    mirror: bool = True  # train on every training row and its mirror image too (mirror_rows)
    hidden: int = 32
    epochs: int = 5
    batch: int = 256
    lr: float = 3e-3
    l2: float = 1e-4
    validation: float = 0.2
    holdout: float = 0.2
    fee_bps: float = 0.0  # charged per LEAN signal by the threshold objective (pipeline.trading.model.thresholds)
    lean_rate_min: float = 0.01
    lean_rate_max: float = 0.05
    emergency_rate_max: float = 0.005


@dataclass
class Series:
    """One market's feature rows in time order."""

    name: str
    X: np.ndarray  # float32 [n, 128]
    t_ns: np.ndarray  # int64 [n], non-decreasing
    mid_ticks: np.ndarray  # float64 [n]: the mid in ticks of this market's price grid
    tick_bps: np.ndarray  # float64 [n]: one tick in basis points of the mid
    group: str  # series of one group share a clock (one split)
    weight: float = 1.0  # each of its rows' weight in training (the synthetic paces are balanced)


@dataclass
class Dataset:
    """Labelled rows of several series, concatenated (each series' rows in time order)."""

    X: np.ndarray  # float32 [n, 128]
    y: np.ndarray  # int64 [n]
    move_ticks: np.ndarray  # float64 [n]
    scale_ticks: np.ndarray  # float64 [n, 3]: the label's scale (lean, toxic, emergency quantiles)
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
                     warmup_ms: int | None = None) -> Series:
    """``steps`` rows of one synthetic market (``SyntheticMarket``, seed ``pace_seed(p.seed, pace_ms)``
    unless ``seed``) stepped every ``pace_ms`` of market time, after ``warmup_ms`` (default
    ``p.warmup_ms``) of steps whose rows are not kept. Each step: its trades into the feature state
    (TRADE records), then the top 15 levels as a BOOK through ``compute``; a rejected BOOK gives no row.

    Raises:
        ValueError: ``pace_ms`` < 1 or ``steps`` < 0.
    """
    if pace_ms < 1 or steps < 0:
        raise ValueError(f"pace_ms must be >= 1 and steps >= 0, not {pace_ms} / {steps}")
    tick, lot = p.tick_size, p.lot_size
    market = SyntheticMarket(pace_seed(p.seed, pace_ms) if seed is None else seed, tick, lot, SyntheticParams())
    state = FeatureState(1, tick, FeatureParams(vpin_bucket_volume=1000 * lot))
    book = np.zeros(1, BOOK_DTYPE)
    book["instrument_id"] = 1
    trade = np.zeros(1, TRADE_DTYPE)
    trade["instrument_id"] = 1
    warm = (p.warmup_ms if warmup_ms is None else warmup_ms) // pace_ms
    X = np.zeros((steps, N_FEATURES), np.float32)
    mids, ok = np.zeros(steps), np.zeros(steps, bool)
    for i in range(warm + steps):
        res = market.step()
        ts = T0_NS + (i + 1) * pace_ms * 1_000_000
        for tr in res.trades:
            trade["side"] = TRADE_SIDE_BUY if tr.side == "buy" else TRADE_SIDE_SELL
            trade["trade_id"], trade["exch_ts_ns"] = tr.trade_id, ts
            trade["price"], trade["size"] = tr.price_ticks * tick, tr.lots * lot
            update_from_trade(state, trade.tobytes())
        _book_record(market, book, tick, lot)
        book["seq"], book["exch_ts_ns"] = i + 1, ts
        k = i - warm
        row = X[k] if k >= 0 else np.zeros(N_FEATURES, np.float32)
        good = compute(state, book.tobytes(), row) == 0
        if k >= 0:
            ok[k], mids[k] = good and i > 0, market.mid_ticks()
    t = T0_NS + (warm + 1 + np.arange(steps, dtype=np.int64)) * pace_ms * 1_000_000
    mid_px = mids[ok] * tick
    return Series(f"synthetic@{pace_ms}ms", X[ok], t[ok], mids[ok], tick / np.maximum(mid_px, 1e-300) * 1e4,
                  f"synthetic@{pace_ms}ms")


def forward_moves(t_ns: np.ndarray, mid: np.ndarray, horizon_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(move, ok): ``mid[j] - mid[i]`` with ``j`` the last row at or before ``t[i] + horizon_ns``;
    ``ok`` where the series reaches that time (its last row is at or after it)."""
    t = np.asarray(t_ns, np.int64)
    if not len(t):
        return np.zeros(0), np.zeros(0, bool)
    j = np.searchsorted(t, t + horizon_ns, side="right") - 1
    return np.asarray(mid, np.float64)[j] - mid, t[-1] >= t + horizon_ns


def trailing_quantiles(t_ns: np.ndarray, abs_move: np.ndarray, ok: np.ndarray, horizon_ns: int, window_ns: int,
                       min_moves: int, qs: tuple[float, ...]) -> np.ndarray:
    """float64 [n, len(qs)]: per row, the ``qs`` quantiles of ``abs_move`` over the rows ``k`` whose
    horizon completed before the row's block began and that started within ``window_ns`` before it,
    ``ok`` ones only; NaN with fewer than ``min_moves`` such moves. Blocks: one horizon of market
    time each from the first row (``[t0 + b h, t0 + (b + 1) h)``), so a row's quantiles use moves
    that ended at most one horizon before the start of its block: only the past."""
    t = np.asarray(t_ns, np.int64)
    out = np.full((len(t), len(qs)), np.nan)
    if not len(t):
        return out
    h = max(1, int(horizon_ns))
    block = (t - t[0]) // h
    starts = np.flatnonzero(np.concatenate([[True], block[1:] != block[:-1]]))
    ends = np.concatenate([starts[1:], [len(t)]])
    ends_at = t + horizon_ns  # when each row's move completed
    for s, e in zip(starts.tolist(), ends.tolist()):
        t_b = int(t[0] + block[s] * h)
        lo = int(np.searchsorted(t, t_b - window_ns, side="left"))
        hi = int(np.searchsorted(t, t_b - horizon_ns, side="right"))
        if hi - lo < min_moves:
            continue
        sel = abs_move[lo:hi][ok[lo:hi] & (ends_at[lo:hi] <= t_b)]
        if len(sel) >= max(1, min_moves):
            out[s:e] = np.quantile(sel, qs)
    return out


def label(move_ticks: np.ndarray, scale_ticks: np.ndarray, vpin: np.ndarray, p: TrainParams) -> np.ndarray:
    """Labels of future mid moves (ticks) against the market's recent scale ``scale_ticks`` ([n, 3]:
    the ``lean_quantile``, ``toxic_quantile`` and ``emergency_quantile`` quantiles of its recent
    absolute moves; the module docstring's rule)."""
    m = np.asarray(move_ticks, np.float64)
    sc = np.asarray(scale_ticks, np.float64).reshape(len(m), 3)
    band = np.maximum(p.dead_band_ticks, sc[:, 0])
    y = np.full(m.shape, int(Label.HOLD), np.int64)
    y[m > band] = Label.LEAN_BUY
    y[m < -band] = Label.LEAN_SELL
    big = np.abs(m) >= np.maximum(p.emergency_min_ticks, sc[:, 2])
    toxic = (np.asarray(vpin) >= p.toxic_vpin) & (np.abs(m) >= np.maximum(band, sc[:, 1]))
    y[big | toxic] = Label.EMERGENCY
    return y


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
    """Label every series (rows without a complete horizon or a scale are left out), then split each
    group in time (``time_split``)."""
    h_ns, w_ns = p.horizon_ms * 1_000_000, p.scale_window_ms * 1_000_000
    qs = (p.lean_quantile, p.toxic_quantile, p.emergency_quantile)
    cols: dict[str, list] = {k: [] for k in ("X", "y", "move", "scale", "fwd", "tick_bps", "t", "series")}
    for k, s in enumerate(series):
        move, ok = forward_moves(s.t_ns, s.mid_ticks, h_ns)
        scale = trailing_quantiles(s.t_ns, np.abs(move), ok, h_ns, w_ns, p.scale_min_moves, qs)
        keep = ok & np.isfinite(scale[:, 0])
        fwd = [forward_moves(s.t_ns, s.mid_ticks, hz * 1_000_000) for hz in IC_HORIZONS_MS]
        cols["fwd"].append(np.stack([np.where(o, mv, np.nan) for mv, o in fwd], axis=1)[keep])
        cols["X"].append(s.X[keep])
        cols["y"].append(label(move[keep], scale[keep], s.X[keep, F_VPIN], p))
        cols["move"].append(move[keep])
        cols["scale"].append(scale[keep])
        cols["tick_bps"].append(s.tick_bps[keep])
        cols["t"].append(s.t_ns[keep])
        cols["series"].append(np.full(int(keep.sum()), k, np.int64))
    cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    X = cat["X"].astype(np.float32).reshape(-1, N_FEATURES)
    sid, t = cat["series"].astype(np.int64), cat["t"].astype(np.int64)
    part = np.full(len(t), DROPPED, np.int64)
    for g in sorted({s.group for s in series}):
        rows = np.flatnonzero(np.isin(sid, [k for k, s in enumerate(series) if s.group == g]))
        part[rows] = time_split(t[rows], h_ns, p.validation, p.holdout)
    return Dataset(X, cat["y"].astype(np.int64), cat["move"].astype(np.float64),
                   cat["scale"].astype(np.float64).reshape(-1, 3),
                   cat["fwd"].astype(np.float64).reshape(-1, len(IC_HORIZONS_MS)), cat["tick_bps"].astype(np.float64),
                   t, sid, part,
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
    """One series per pace of ``p.paces_ms`` (``pace_steps`` rows each)."""
    mean = sum(p.pace_shares) / len(p.pace_shares)
    out = []
    for pace, n, share in zip(p.paces_ms, pace_steps(p), p.pace_shares):
        if n > 0:
            s = synthetic_series(p, pace, n)
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
        f.F_RETURN_BPS, f.F_MID_CHANGE_TICKS]
    sign[flip] = -1.0
    return src, sign


_MIRROR_SRC, _MIRROR_SIGN = _mirror_plan()
_MIRROR_LABEL = np.array([Label.HOLD, Label.LEAN_SELL, Label.LEAN_BUY, Label.EMERGENCY], np.int64)


def mirror_rows(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mirror image of feature rows and their labels: the same market upside down (bids and asks
    swapped, buys and sells swapped, prices reflected about the mid), so LEAN_BUY and LEAN_SELL swap.
    Distances, sizes, spread, volatility, intensity and VPIN are unchanged; imbalances, the
    microprice offset, order-flow imbalance, trade imbalance, the last trade's offset and the
    returns change sign. Training on both sides leaves the model no preferred direction."""
    return (np.asarray(X)[:, _MIRROR_SRC] * _MIRROR_SIGN).astype(np.float32), _MIRROR_LABEL[np.asarray(y)]
