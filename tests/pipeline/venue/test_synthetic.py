"""The paper venue's synthetic order flow: deterministic, never crossed, and with a learnable
relation (book imbalance now leads the mid move later)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

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


# ------------------------------------------------------------------------------------- the stream
def test_the_seeded_stream_is_pinned():
    """The venue's market and the model's training data are this stream: the values below are what
    the one-draw-at-a-time implementation gave (before the cancels drew in batches)."""
    m = SyntheticMarket(7, tick_size=0.1, lot_size=0.001)
    for _ in range(2000):
        r = m.step()
    assert m.levels(3) == ([["49993.3", "0.200"], ["49993.2", "0.140"], ["49993.1", "0.154"]],
                           [["49993.4", "0.044"], ["49993.5", "0.082"], ["49993.6", "0.061"]])
    assert (m._trade_id, m.pressure, len(m.bids), len(m.asks)) == (2380, 0.14146851305432231, 35, 29)
    assert sorted(r.changed_bids.items())[:3] == [(499843, 113), (499926, 19), (499930, 53)]
    thin = SyntheticMarket(8, tick_size=0.1, lot_size=0.001,
                           params=SyntheticParams(jump_prob=0.2, jump_ticks=3, depth_levels=6, cancel_frac=0.4))
    for _ in range(500):
        thin.step()
    assert thin.levels(2) == ([["49996.7", "0.024"], ["49996.6", "0.065"]],
                              [["49996.9", "0.005"], ["49999.0", "0.021"]])
    assert (thin._trade_id, thin.jumps, thin.pressure) == (800, 100, -0.1937741770393554)


def _cancel_one_draw_per_level(book: dict, changed: dict, rng, frac: float) -> None:
    """The cancels as the model states them: per level, in the book's order, one draw while the side
    has more than two levels; a hit takes a third of the size (at least one lot; none left: removed)."""
    for price in list(book):
        if len(book) > 2 and rng.random() < frac:
            lots = book[price] - max(1, book[price] // 3)
            if lots <= 0:
                del book[price]
                changed[price] = 0
            else:
                book[price] = lots
                changed[price] = lots


@pytest.mark.parametrize("sizes", [
    [5, 1, 30, 2, 1, 9, 4, 100, 1, 3] * 4,  # deep: every level draws (one batch)
    [4, 9, 7],  # three levels, none of one lot: every level draws
    [1, 1, 7],  # removing a one-lot level leaves two: the draws stop there
    [1, 8, 1, 1],
    [2, 1, 1, 1, 1, 5],
])
@pytest.mark.parametrize("frac", [0.03, 0.5, 0.95])
def test_cancels_use_the_same_draws_as_one_draw_per_level(sizes, frac):
    m = SyntheticMarket(3, tick_size=0.1, lot_size=0.001, params=SyntheticParams(cancel_frac=frac))
    for _ in range(5):
        m.step()
    book = {100 + 2 * k: s for k, s in enumerate(sizes)}
    ref_book, ref_rng = dict(book), copy.deepcopy(m.rng)
    changed: dict = {}
    ref_changed: dict = {}
    m._cancel(book, changed)
    _cancel_one_draw_per_level(ref_book, ref_changed, ref_rng, frac)
    assert list(book.items()) == list(ref_book.items())
    assert list(changed.items()) == list(ref_changed.items())
    assert m.rng.bit_generator.state == ref_rng.bit_generator.state  # as many numbers drawn


def test_rendered_texts_are_the_formatted_numbers_whatever_the_cache(monkeypatch):
    from pipeline.venue import synthetic

    monkeypatch.setattr(synthetic, "TEXT_CACHE_SIZE", 2)
    m = SyntheticMarket(0, tick_size=0.01, lot_size=0.001)
    assert [m.price_str(t) for t in (1, 12345, 1, 7, 12345, 500000)] == ["0.01", "123.45", "0.01", "0.07", "123.45",
                                                                        "5000.00"]
    assert [m.size_str(n) for n in (1500, 3, 1500, 20)] == ["1.500", "0.003", "1.500", "0.020"]
    assert len(m._price_texts) <= 2 and len(m._size_texts) <= 2


# ------------------------------------------------------------------------------- the calibrated market
def _run_calibrated(seed: int, steps: int):
    from pipeline.venue.synthetic import CALIBRATED, CALIBRATED_LOT_SIZE, CALIBRATED_TICK_SIZE

    m = SyntheticMarket(seed, CALIBRATED_TICK_SIZE, CALIBRATED_LOT_SIZE, CALIBRATED)
    spreads = []
    for _ in range(steps):
        r = m.step()
        assert m.best_bid() < m.best_ask(), f"crossed at step {m.steps}"
        assert all(v > 0 for v in m.bids.values()) and all(v > 0 for v in m.asks.values())
        for price, lots in r.changed_bids.items():
            assert m.bids.get(price, 0) == lots
        for price, lots in r.changed_asks.items():
            assert m.asks.get(price, 0) == lots
        assert len(m.bids) <= CALIBRATED.depth_levels and len(m.asks) <= CALIBRATED.depth_levels
        spreads.append(m.best_ask() - m.best_bid())
    return m, np.array(spreads)


def test_the_calibrated_book_requotes_with_a_wide_spread_never_crossed():
    m, spreads = _run_calibrated(4, 3_000)
    assert 20 < np.median(spreads) < 150, "the requoting book keeps a spread of tens of ticks"
    a, _ = _run_calibrated(9, 300)
    b, _ = _run_calibrated(9, 300)
    assert a.levels(10) == b.levels(10) and a.pressure == b.pressure


def test_calibrated_market_orders_are_small_and_near_their_base_size():
    from pipeline.venue.synthetic import CALIBRATED

    m = SyntheticMarket(2, 0.1, 0.0001, CALIBRATED)
    takes = [sum(t.lots for t in m.step().trades) for _ in range(4_000)]
    sizes = [s for s in takes if s]
    assert 0.04 < len(sizes) / len(takes) < 0.11  # mo_prob 0.075 a step
    assert CALIBRATED.mo_lots_base <= np.median(sizes) <= CALIBRATED.mo_lots_base + 2 * CALIBRATED.mo_lots_mean


@pytest.mark.parametrize("field, value, message", [
    ("placement", "sideways", "placement must be one of"),
    ("step_ms", 0, "step_ms must be >= 1"),
    ("depth_levels", 3, "depth_levels must be >= 4"),
    ("inside_prob", 1.5, "inside_prob must be in 0..1"),
    ("lo_dist_p", 0.0, "lo_dist_p must be in"),
    ("mo_lots_base", -1.0, "mo_lots_base must be >= 0"),
    ("level_gap_ticks", 0, "level_gap_ticks must be >= 1"),
])
def test_bad_params_are_refused_naming_the_field(field, value, message):
    import dataclasses

    with pytest.raises(ValueError, match=message):
        SyntheticMarket(1, 0.1, 0.001, dataclasses.replace(SyntheticParams(), **{field: value}))


def test_improvements_never_cross_even_a_one_tick_spread():
    import dataclasses

    from pipeline.venue.synthetic import CALIBRATED

    eager = dataclasses.replace(CALIBRATED, inside_prob=1.0, inside_frac=1.0, touch_cancel_prob=0.0, mo_prob=0.0,
                                half_spread0_ticks=1, level_gap_ticks=1)
    m = SyntheticMarket(6, 0.1, 0.0001, eager)
    for _ in range(50):
        m.step()
        assert m.best_ask() - m.best_bid() == 1, "every order improves until the spread is one tick, then joins it"
