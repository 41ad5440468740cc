"""The paper venue's synthetic order flow: deterministic, never crossed, and with a learnable
relation (book imbalance now leads the mid move later)."""

from __future__ import annotations

import numpy as np

from pipeline.venue.synthetic import SyntheticMarket, SyntheticParams


def _run(seed: int, steps: int):
    m = SyntheticMarket(seed, tick_size=0.1, lot_size=0.001)
    mids, imbalances = [], []
    for _ in range(steps):
        r = m.step()
        assert m.best_bid() < m.best_ask(), f"crossed at step {m.steps}"
        assert all(v > 0 for v in m.bids.values()) and all(v > 0 for v in m.asks.values())
        for price, lots in r.changed_bids.items():
            assert m.bids.get(price, 0) == lots
        for price, lots in r.changed_asks.items():
            assert m.asks.get(price, 0) == lots
        bids = sorted(m.bids.items(), reverse=True)[:5]
        asks = sorted(m.asks.items())[:5]
        b, a = sum(s for _, s in bids), sum(s for _, s in asks)
        imbalances.append((b - a) / (b + a))
        mids.append(m.mid_ticks())
    return m, np.array(mids), np.array(imbalances)


def test_same_seed_same_market():
    a, mids_a, _ = _run(7, 500)
    b, mids_b, _ = _run(7, 500)
    assert np.array_equal(mids_a, mids_b) and a.levels(10) == b.levels(10)
    _, mids_c, _ = _run(8, 500)
    assert not np.array_equal(mids_a, mids_c)


def test_book_stays_uncrossed_positive_and_bounded():
    m, mids, _ = _run(1, 3000)
    assert len(m.bids) <= m.params.depth_levels and len(m.asks) <= m.params.depth_levels
    assert len(m.bids) >= m.params.depth_levels // 2 and len(m.asks) >= m.params.depth_levels // 2
    assert mids.std() > 0, "the mid never moved"


def test_imbalance_now_predicts_the_mid_move_later():
    horizon = SyntheticParams().lag_steps * 2
    _, mids, imb = _run(3, 20_000)
    future_move = mids[horizon:] - mids[:-horizon]
    corr = np.corrcoef(imb[:-horizon], future_move)[0, 1]
    assert corr > 0.1, f"planted relation too weak: corr {corr:.3f}"


def test_levels_render_with_fixed_decimals():
    m = SyntheticMarket(0, tick_size=0.1, lot_size=0.001)
    bids, asks = m.levels(3)
    assert len(bids) == 3 and len(asks) == 3
    assert all(p.count(".") == 1 and len(p.split(".")[1]) == 1 for p, _ in bids + asks)
    assert all(len(s.split(".")[1]) == 3 for _, s in bids + asks)
    assert float(bids[0][0]) < float(asks[0][0])


def test_the_mid_moves_within_a_500_ms_horizon_most_of_the_time():
    """Labels from the future mid move over 500 ms (25 steps of 20 ms) must not be mostly zero."""
    _, mids, _ = _run(5, 5_000)
    moved = (mids[25:] != mids[:-25]).mean()
    assert moved > 0.5, f"the mid moved in only {moved:.0%} of 500 ms windows"
