"""The fast model's training data: the seeded synthetic market replayed into feature rows, their
labels, and the chronological split (steps 1 to 3 of ``pipeline.trading.model``).

``TrainParams`` holds every step's parameters (data, labels, training); ``generate`` steps
``SyntheticMarket`` and runs each step's BOOK / TRADE records through ``pipeline.trading.features``
as the feature stage does; ``label`` turns future mid moves into labels; ``synthetic_split`` cuts the
rows in time with an embargo of one label horizon.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.trading.features import F_VPIN, N_FEATURES, FeatureParams, FeatureState, compute, update_from_trade
from pipeline.trading.messages import BOOK_DTYPE, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL, Label
from pipeline.venue.synthetic import SyntheticMarket, SyntheticParams


@dataclass(frozen=True)
class TrainParams:
    seed: int = 7
    steps: int = 60_000  # synthetic steps (20 ms each: 20 minutes of market time)
    tick_size: float = 0.1
    lot_size: float = 0.0001
    horizon_ms: int = 500
    dead_band_ticks: float = 2.0
    emergency_ticks: float = 40.0
    toxic_vpin: float = 0.9
    toxic_move_ticks: float = 20.0
    hidden: int = 32
    epochs: int = 8
    batch: int = 256
    lr: float = 3e-3
    l2: float = 1e-4
    holdout: float = 0.2


@dataclass
class Dataset:
    X: np.ndarray  # float32 [n, 128]
    y: np.ndarray  # int64 [n]
    move_ticks: np.ndarray  # float64 [n]
    step: np.ndarray  # int64 [n]: the market step of each row (increasing; rows without features are absent)
    horizon_steps: int  # the label's look-ahead in steps



def generate(p: TrainParams) -> Dataset:
    """Feature rows and labels from ``p.steps`` steps of the seeded synthetic market."""
    sp = SyntheticParams()
    market = SyntheticMarket(p.seed, p.tick_size, p.lot_size, sp)
    state = FeatureState(1, p.tick_size, FeatureParams(vpin_bucket_volume=1000 * p.lot_size))
    book = np.zeros(1, BOOK_DTYPE)
    book["instrument_id"], book["n_bids"], book["n_asks"] = 1, BOOK_LEVELS, BOOK_LEVELS
    trade = np.zeros(1, TRADE_DTYPE)
    trade["instrument_id"] = 1
    X = np.zeros((p.steps, N_FEATURES), np.float32)
    mids = np.zeros(p.steps)
    ok = np.zeros(p.steps, bool)
    t0 = 1_700_000_000_000_000_000
    for i in range(p.steps):
        res = market.step()
        ts = t0 + (i + 1) * sp.step_ms * 1_000_000
        for tr in res.trades:
            trade["side"] = TRADE_SIDE_BUY if tr.side == "buy" else TRADE_SIDE_SELL
            trade["trade_id"], trade["exch_ts_ns"] = tr.trade_id, ts
            trade["price"], trade["size"] = tr.price_ticks * p.tick_size, tr.lots * p.lot_size
            update_from_trade(state, trade.tobytes())
        bids = sorted(market.bids.items(), key=lambda kv: -kv[0])[:BOOK_LEVELS]
        asks = sorted(market.asks.items())[:BOOK_LEVELS]
        book["n_bids"], book["n_asks"] = len(bids), len(asks)
        book["bid_px"], book["bid_sz"], book["ask_px"], book["ask_sz"] = 0.0, 0.0, 0.0, 0.0
        book["bid_px"][0, : len(bids)] = [px * p.tick_size for px, _ in bids]
        book["bid_sz"][0, : len(bids)] = [sz * p.lot_size for _, sz in bids]
        book["ask_px"][0, : len(asks)] = [px * p.tick_size for px, _ in asks]
        book["ask_sz"][0, : len(asks)] = [sz * p.lot_size for _, sz in asks]
        book["seq"], book["exch_ts_ns"] = i + 1, ts
        ok[i] = compute(state, book.tobytes(), X[i]) == 0
        mids[i] = market.mid_ticks()
    h = max(1, round(p.horizon_ms / sp.step_ms))
    n = p.steps - h
    keep = ok[:n].copy()
    keep[0] = False  # the warm-up row (no previous book)
    d = mids[h:] - mids[:n]
    X, d = X[:n][keep], d[keep]
    return Dataset(X, label(d, X[:, F_VPIN], p), d, np.flatnonzero(keep).astype(np.int64), h)


def synthetic_split(ds: Dataset, p: TrainParams) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (training, held-out) of ``ds``: a time cut at the step ``c`` of the row at the
    ``1 - p.holdout`` share; rows with step < ``c`` train, steps ``c`` .. ``c + horizon_steps - 1`` are
    dropped (the embargo: one label horizon, so no training label, which looks ``horizon_steps``
    ahead, reaches a held-out row's time), rows with step >= ``c + horizon_steps`` are held out."""
    n = len(ds.y)
    k = min(max(int(n * (1 - p.holdout)), 0), n)
    if k >= n:
        return np.arange(n), np.zeros(0, np.int64)
    c = int(ds.step[k])
    return np.flatnonzero(ds.step < c), np.flatnonzero(ds.step >= c + ds.horizon_steps)


def label(move_ticks: np.ndarray, vpin: np.ndarray, p: TrainParams) -> np.ndarray:
    """Labels of future mid moves (ticks) with the dead band, EMERGENCY for large or toxic moves."""
    y = np.full(move_ticks.shape, int(Label.HOLD), np.int64)
    y[move_ticks > p.dead_band_ticks] = Label.LEAN_BUY
    y[move_ticks < -p.dead_band_ticks] = Label.LEAN_SELL
    big = np.abs(move_ticks) >= p.emergency_ticks
    toxic = (vpin >= p.toxic_vpin) & (np.abs(move_ticks) >= p.toxic_move_ticks)
    y[big | toxic] = Label.EMERGENCY
    return y
