"""The feature engine's core (pipeline/trading/features.py) as a specification: hand-computed values for
small books, the order-flow, trade and volatility state, rejections, and no non-finite feature
from any valid book."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.trading import features as F
from pipeline.trading.features import OK, FeatureParams, FeatureState, Reason, compute, update_from_trade
from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_HIDDEN_REPORTED, BOOK_FLAG_SNAPSHOT, FEATURES_DTYPE,
                                      FEATURES_FLAG_NO_BASIS, FEATURES_FLAG_NO_EXCH_TS, FEATURES_FLAG_NO_HIDDEN,
                                      FEATURES_FLAG_SNAPSHOT, FEATURES_FLAG_WARMUP, TRADE_DTYPE, TRADE_FLAG_HIDDEN,
                                      TRADE_SIDE_BUY, TRADE_SIDE_SELL)

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000


def book(bids, asks, *, ts=T0, seq=1, iid=1, flags=0):
    """A BOOK record from [(px, sz), ...] best first."""
    r = np.zeros((), BOOK_DTYPE)
    r["instrument_id"], r["flags"], r["seq"], r["exch_ts_ns"] = iid, flags, seq, ts
    r["n_bids"], r["n_asks"] = len(bids), len(asks)
    for i, (p, q) in enumerate(bids):
        r["bid_px"][i], r["bid_sz"][i] = p, q
    for i, (p, q) in enumerate(asks):
        r["ask_px"][i], r["ask_sz"][i] = p, q
    return r


def trade(side, px, sz, ts=T0, flags=0):
    r = np.zeros((), TRADE_DTYPE)
    r["instrument_id"], r["side"], r["exch_ts_ns"], r["price"], r["size"] = 1, side, ts, px, sz
    r["flags"] = flags
    return r


def run(state, b, fallback=0):
    out = np.zeros((), FEATURES_DTYPE)
    code = compute(state, b, out, fallback)
    return code, out


SMALL = book([(100.0, 1.0), (99.9, 2.0), (99.8, 3.0)], [(100.2, 3.0), (100.3, 1.0)], flags=BOOK_FLAG_SNAPSHOT,
             seq=42)


def test_layout_has_128_named_slots():
    names = F.feature_names()
    assert len(names) == F.N_FEATURES == 128 and all(names)
    assert (F.F_BID_DIST_14, F.F_ASK_DIST_0, F.F_BID_SIZE_0, F.F_ASK_SIZE_14) == (14, 15, 30, 59)
    assert [F.F_IMBALANCE_1, F.F_IMBALANCE_3, F.F_IMBALANCE_5, F.F_IMBALANCE_10, F.F_IMBALANCE_15] == [60, 61, 62, 63, 64]
    assert [F.F_HIDDEN_AVAILABLE, F.F_HIDDEN_VOLUME_RATE, F.F_HIDDEN_SHARE, F.F_HIDDEN_TO_TOUCH] == [86, 87, 88, 89]
    assert [F.F_BASIS_AVAILABLE, F.F_BASIS_BPS, F.F_BASIS_Z, F.F_BASIS_AGE_MS] == [90, 91, 92, 93]
    assert F.F_RESERVED_0 == 94 and F.F_RESERVED_33 == 127 and F.FEATURE_LAYOUT_VERSION == 2


def test_small_book_hand_computed():
    st_ = FeatureState(1, 0.1)
    code, out = run(st_, SMALL)
    assert code == OK
    f = out["features"].astype(np.float64)
    mid = 100.1
    assert out["instrument_id"] == 1 and out["book_seq"] == 42 and out["exch_ts_ns"] == T0
    assert out["ref_mid"] == pytest.approx(mid) and out["ref_spread"] == pytest.approx(0.2)
    assert out["flags"] == (FEATURES_FLAG_WARMUP | FEATURES_FLAG_SNAPSHOT | FEATURES_FLAG_NO_HIDDEN
                            | FEATURES_FLAG_NO_BASIS)
    assert f[0:3] == pytest.approx([1.0, 2.0, 3.0], rel=1e-5) and not f[3:15].any()
    assert f[15:17] == pytest.approx([1.0, 2.0], rel=1e-5) and not f[17:30].any()
    assert f[30:33].tolist() == [1.0, 2.0, 3.0] and not f[33:45].any()
    assert f[45:47].tolist() == [3.0, 1.0] and not f[47:60].any()
    # B_k / A_k: 1/3, 6/4 at k=3, then 6/4
    assert f[F.F_IMBALANCE_1:F.F_IMBALANCE_15 + 1] == pytest.approx([-0.5, 0.2, 0.2, 0.2, 0.2], rel=1e-5)
    micro = (100.0 * 3.0 + 100.2 * 1.0) / 4.0  # 100.05
    assert f[F.F_MICROPRICE_OFFSET] == pytest.approx((micro - mid) / 0.1, rel=1e-4)  # -0.5 ticks
    assert f[F.F_SPREAD_TICKS] == pytest.approx(2.0, rel=1e-5)
    assert f[F.F_SPREAD_BPS] == pytest.approx(0.2 / mid * 1e4, rel=1e-5)
    assert (f[F.F_DEPTH_BID], f[F.F_DEPTH_ASK], f[F.F_N_BIDS], f[F.F_N_ASKS]) == (6.0, 4.0, 3.0, 2.0)
    assert f[F.F_OFI] == f[F.F_RETURN_BPS] == f[F.F_VOLATILITY_FAST] == f[F.F_VPIN] == 0.0
    assert f[F.F_SECONDS_SINCE_TRADE] == 60.0 and not f[F.F_RESERVED_0:].any()


def test_float32_row_and_void_record_outputs_agree():
    a, b = np.zeros(128, np.float32), np.zeros(1, FEATURES_DTYPE)
    assert compute(FeatureState(1, 0.1), SMALL, a) == OK
    assert compute(FeatureState(1, 0.1), SMALL.tobytes(), b[0]) == OK
    assert np.array_equal(a, b[0]["features"]) and b[0]["book_seq"] == 42


def test_ofi_is_positive_when_the_bid_grows_and_negative_when_the_ask_grows():
    s = FeatureState(1, 0.1)
    assert run(s, book([(100.0, 1.0)], [(100.2, 1.0)]))[0] == OK
    code, out = run(s, book([(100.0, 3.0)], [(100.2, 1.0)], ts=T0 + S // 10))
    assert code == OK and out["features"][F.F_OFI] == 2.0 and out["features"][F.F_OFI_DECAYED] == 2.0
    assert out["flags"] & FEATURES_FLAG_WARMUP == 0
    code, out = run(s, book([(100.1, 0.5)], [(100.2, 1.0)], ts=T0 + 2 * S // 10))
    assert out["features"][F.F_OFI] == 0.5  # bid price up: + new best bid size
    code, out = run(s, book([(100.1, 0.5)], [(100.2, 4.0)], ts=T0 + 3 * S // 10))
    assert out["features"][F.F_OFI] == -3.0


def test_trade_intensity_and_imbalance_decay_with_message_time():
    s = FeatureState(1, 0.1, FeatureParams(tau_trade_ns=S))
    for i in range(4):
        assert update_from_trade(s, trade(TRADE_SIDE_BUY, 100.2, 1.0, T0)) == OK
    assert update_from_trade(s, trade(TRADE_SIDE_SELL, 100.0, 1.0, T0)) == OK
    f = run(s, book([(100.0, 1.0)], [(100.2, 1.0)], ts=T0))[1]["features"]
    assert f[F.F_TRADE_INTENSITY] == pytest.approx(5.0) and f[F.F_TRADE_VOLUME_RATE] == pytest.approx(5.0)
    assert f[F.F_TRADE_IMBALANCE] == pytest.approx(0.6) and f[F.F_LAST_TRADE_OFFSET] == pytest.approx(-1.0, rel=1e-5)
    f = run(s, book([(100.0, 1.0)], [(100.2, 1.0)], ts=T0 + S))[1]["features"]
    assert f[F.F_TRADE_INTENSITY] == pytest.approx(5.0 * math.exp(-1), rel=1e-5)
    assert f[F.F_SECONDS_SINCE_TRADE] == pytest.approx(1.0)


def test_vpin_stays_in_unit_interval_and_sees_one_sided_flow():
    s = FeatureState(1, 0.1, FeatureParams(vpin_bucket_volume=2.0, vpin_buckets=5))
    for i in range(10):  # balanced: each bucket 1 buy + 1 sell
        update_from_trade(s, trade(TRADE_SIDE_BUY if i % 2 == 0 else TRADE_SIDE_SELL, 100.0, 1.0))
    assert s.vpin == pytest.approx(0.0) and s.vpin_closed == 5
    update_from_trade(s, trade(TRADE_SIDE_BUY, 100.0, 1e6))  # one huge trade: every bucket one-sided
    assert s.vpin == pytest.approx(1.0)
    rng = np.random.default_rng(3)
    for _ in range(500):
        side = TRADE_SIDE_BUY if rng.random() < 0.7 else TRADE_SIDE_SELL
        update_from_trade(s, trade(side, 100.0, float(rng.exponential(0.7))))
        assert 0.0 <= s.vpin <= 1.0 + 1e-12


def test_volatility_rises_after_mid_moves_and_return_is_in_bps():
    s = FeatureState(1, 0.1)
    run(s, book([(100.0, 1.0)], [(100.2, 1.0)]))
    f = run(s, book([(100.0, 1.0)], [(100.2, 1.0)], ts=T0 + S // 10))[1]["features"]
    assert f[F.F_VOLATILITY_FAST] == 0.0
    f = run(s, book([(100.5, 1.0)], [(100.7, 1.0)], ts=T0 + 2 * S // 10))[1]["features"]
    r = math.log(100.6 / 100.1)
    assert f[F.F_RETURN_BPS] == pytest.approx(r * 1e4, rel=1e-5)
    assert f[F.F_MID_CHANGE_TICKS] == pytest.approx(5.0, rel=1e-5)
    assert f[F.F_VOLATILITY_FAST] == pytest.approx(abs(r) * 1e4, rel=1e-5)  # tau 1 s: sqrt(r^2 / 1 s)
    assert f[F.F_VOLATILITY_SLOW] == pytest.approx(abs(r) * 1e4 / math.sqrt(10), rel=1e-5)
    assert f[F.F_BOOK_INTERVAL_MS] == pytest.approx(100.0)


@pytest.mark.parametrize("b, reason", [
    (book([(float("nan"), 1.0)], [(100.2, 1.0)]), Reason.NON_FINITE_INPUT),
    (book([(100.0, float("inf"))], [(100.2, 1.0)]), Reason.NON_FINITE_INPUT),
    (book([], [(100.2, 1.0)]), Reason.EMPTY_BOOK),
    (book([(100.0, 1.0)], []), Reason.EMPTY_BOOK),
    (book([(100.3, 1.0)], [(100.2, 1.0)]), Reason.CROSSED_BOOK),
    (book([(100.2, 1.0)], [(100.2, 1.0)]), Reason.CROSSED_BOOK),
    (book([(-1.0, 1.0)], [(100.2, 1.0)]), Reason.NON_POSITIVE_PRICE),
    (book([(100.0, 0.0)], [(100.2, 1.0)]), Reason.NON_POSITIVE_SIZE),
])
def test_bad_books_are_rejected_and_leave_the_state_alone(b, reason):
    s = FeatureState(1, 0.1)
    assert run(s, b)[0] == reason and s.books == 0 and s.prev_mid == 0.0


def test_bad_level_count_size_and_trades_are_rejected():
    s = FeatureState(1, 0.1)
    b = book([(100.0, 1.0)], [(100.2, 1.0)])
    b["n_bids"] = 16
    assert run(s, b)[0] == Reason.BAD_LEVEL_COUNT
    assert compute(s, b.tobytes()[:-8], np.zeros(128, np.float32)) == Reason.BAD_SIZE
    assert update_from_trade(s, trade(TRADE_SIDE_BUY, float("nan"), 1.0)) == Reason.NON_FINITE_INPUT
    assert update_from_trade(s, trade(3, 100.0, 1.0)) == Reason.BAD_SIDE
    assert update_from_trade(s, trade(TRADE_SIDE_BUY, 100.0, -1.0)) == Reason.NON_POSITIVE_SIZE
    assert s.trades == 0


def test_non_finite_feature_is_rejected():
    s = FeatureState(1, 1e-30)  # distances in ticks beyond float32
    assert run(s, book([(1e10, 1.0)], [(2e10, 1.0)]))[0] == Reason.NON_FINITE_FEATURE and s.books == 0


def test_missing_exchange_time_falls_back_to_the_callers_stamp():
    s = FeatureState(1, 0.1)
    code, out = run(s, book([(100.0, 1.0)], [(100.2, 1.0)], ts=0), fallback=5 * S)
    assert code == OK and out["flags"] & FEATURES_FLAG_NO_EXCH_TS and out["exch_ts_ns"] == 0
    assert s.prev_ts_ns == 5 * S


prices = st.floats(1e-4, 1e6)
sizes = st.floats(1e-6, 1e6)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), tick=st.sampled_from([1e-4, 0.01, 0.1, 1.0]), nb=st.integers(1, 15), na=st.integers(1, 15))
def test_random_valid_books_never_give_non_finite_features(data, tick, nb, na):
    s = FeatureState(1, tick, FeatureParams(vpin_bucket_volume=1.0, vpin_buckets=3))
    for k in range(3):
        b0 = data.draw(prices)
        a0 = b0 * (1 + data.draw(st.floats(1e-6, 0.5)))
        bids = [(b0 * (1 - 1e-3 * i), data.draw(sizes)) for i in range(nb)]
        asks = [(a0 * (1 + 1e-3 * i), data.draw(sizes)) for i in range(na)]
        if data.draw(st.booleans()):
            update_from_trade(s, trade(data.draw(st.sampled_from([1, 2])), b0, data.draw(sizes), T0 + k * S))
        code, out = run(s, book(bids, asks, ts=T0 + k * S + data.draw(st.integers(0, S))))
        assert code == OK
        assert np.isfinite(out["features"]).all() and np.isfinite(out["ref_mid"])
        assert -1 <= out["features"][F.F_IMBALANCE_1] <= 1 and 0 <= out["features"][F.F_VPIN] <= 1


# ------------------------------------------------------------------ golden vector and mirror symmetry
# tick 0.5 and prices on the half-unit grid: every distance, the mid and the reflections are exact
GOLDEN = book([(1000.0, 2.0), (999.5, 1.0), (998.5, 4.0), (997.0, 0.5)], [(1001.0, 1.0), (1001.5, 3.0), (1003.0, 2.0)],
              seq=7)


def _golden_expected() -> np.ndarray:
    """The full vector of GOLDEN as the first BOOK of a fresh state, slot by slot, by hand."""
    e = np.zeros(128, np.float64)
    mid = 1000.5
    e[0:4] = [1.0, 2.0, 4.0, 7.0]  # (1000.5 - 1000 | 999.5 | 998.5 | 997) / 0.5
    e[15:18] = [1.0, 2.0, 5.0]  # (1001 | 1001.5 | 1003 - 1000.5) / 0.5
    e[30:34] = [2.0, 1.0, 4.0, 0.5]
    e[45:48] = [1.0, 3.0, 2.0]
    # B_1 2 vs A_1 1; B_3 7 vs A_3 6; B_5.. 7.5 vs 6
    e[60:65] = [1 / 3, 1 / 13, 1.5 / 13.5, 1.5 / 13.5, 1.5 / 13.5]
    e[65] = ((1000.0 * 1.0 + 1001.0 * 2.0) / 3.0 - mid) / 0.5  # microprice 1000.667: +1/3 tick
    e[66] = 2.0  # spread ticks
    e[67] = 1.0 / mid * 1e4  # spread bps
    # 68..75: OFI, decayed, norm, trade intensity, volume rate, imbalance, VPIN, last trade: 0 (first, no trade)
    e[76] = 60.0  # seconds since trade: the cap (none yet)
    # 77..80: return, mid change, volatilities: 0 (first BOOK)
    e[81:85] = [7.5, 6.0, 4.0, 3.0]  # depths, level counts
    # 85: book interval 0 (first); 86..127 reserved: 0
    return e


# sha256 of the float32 bytes of GOLDEN's vector (equal in value to _golden_expected(); the bytes also pin the
# sign of each zero): a change to any slot, by even one ulp, changes it
GOLDEN_SHA256 = "496342ee93f001d0e91d4cf56b8dd8622af4cc362c65bd03cd966ca723a57210"


def test_golden_feature_vector_of_a_fixed_book():
    import hashlib

    row = np.zeros(128, np.float32)
    assert compute(FeatureState(1, 0.5), GOLDEN, row) == OK
    exp = _golden_expected()
    # the meaningful slots, by hand
    assert row[F.F_BID_DIST_0:F.F_BID_DIST_0 + 4].tolist() == [1.0, 2.0, 4.0, 7.0]
    assert row[F.F_ASK_DIST_0:F.F_ASK_DIST_0 + 3].tolist() == [1.0, 2.0, 5.0]
    assert row[F.F_BID_SIZE_0:F.F_BID_SIZE_0 + 4].tolist() == [2.0, 1.0, 4.0, 0.5]
    assert row[F.F_ASK_SIZE_0:F.F_ASK_SIZE_0 + 3].tolist() == [1.0, 3.0, 2.0]
    assert row[F.F_IMBALANCE_1] == np.float32(1 / 3) and row[F.F_IMBALANCE_3] == np.float32(1 / 13)
    assert row[F.F_IMBALANCE_5] == row[F.F_IMBALANCE_15] == np.float32(1 / 9)
    assert row[F.F_MICROPRICE_OFFSET] == pytest.approx(1 / 3, rel=1e-6)
    assert row[F.F_SPREAD_TICKS] == 2.0 and row[F.F_SPREAD_BPS] == pytest.approx(9.995002, rel=1e-6)
    # the whole 128-wide vector: the hand-derived one, to float32 rounding, reserved slots exactly zero
    np.testing.assert_allclose(row, exp.astype(np.float32), rtol=1e-6, atol=0)
    assert not row[F.F_RESERVED_0:].any() and np.count_nonzero(row) == np.count_nonzero(exp)
    # and pinned bit for bit
    assert hashlib.sha256(row.tobytes()).hexdigest() == GOLDEN_SHA256


def _mirror(b, center: float):
    """``b`` reflected around ``center``: bids become asks (price 2 * center - p) and back."""
    bids = [(2 * center - p, q) for p, q in zip(b["ask_px"][: b["n_asks"]], b["ask_sz"][: b["n_asks"]])]
    asks = [(2 * center - p, q) for p, q in zip(b["bid_px"][: b["n_bids"]], b["bid_sz"][: b["n_bids"]])]
    return book(bids, asks, ts=int(b["exch_ts_ns"]), seq=int(b["seq"]))


SIGNED = [F.F_IMBALANCE_1, F.F_IMBALANCE_3, F.F_IMBALANCE_5, F.F_IMBALANCE_10, F.F_IMBALANCE_15,
          F.F_MICROPRICE_OFFSET, F.F_OFI, F.F_OFI_DECAYED, F.F_OFI_NORM, F.F_MID_CHANGE_TICKS]
# (volatility and return are log-price features: a reflection changes the price level, so |log return| is
# not kept exactly; the tick-based mid change is, and is in SIGNED)
UNSIGNED = [F.F_SPREAD_TICKS, F.F_BOOK_INTERVAL_MS, F.F_SECONDS_SINCE_TRADE]
SWAPPED = [(F.F_DEPTH_BID, F.F_DEPTH_ASK), (F.F_N_BIDS, F.F_N_ASKS)] + [
    (F.F_BID_DIST_0 + i, F.F_ASK_DIST_0 + i) for i in range(15)] + [(F.F_BID_SIZE_0 + i, F.F_ASK_SIZE_0 + i) for i in range(15)]

CHANGES = [  # (first book, second book): bid grows; ask price drops; both sides move up; a level vanishes
    (GOLDEN, book([(1000.0, 5.0), (999.5, 1.0)], [(1001.0, 1.0), (1001.5, 3.0)], ts=T0 + S // 10)),
    (GOLDEN, book([(1000.0, 2.0), (999.5, 1.0)], [(1000.5, 0.5), (1001.0, 1.0)], ts=T0 + S // 5)),
    (GOLDEN, book([(1000.5, 1.5), (1000.0, 2.0), (999.0, 3.0)], [(1002.0, 2.5)], ts=T0 + S)),
    (book([(50.0, 1.0)], [(51.0, 9.0), (52.0, 1.0)]), book([(49.5, 3.0)], [(51.0, 2.0)], ts=T0 + 3 * S)),
]


@pytest.mark.parametrize("first, second", CHANGES)
def test_mirroring_the_book_flips_the_signed_features_and_keeps_the_unsigned(first, second):
    center = float(0.5 * (first["bid_px"][0] + first["ask_px"][0]))  # the first book's mid, fixed for both
    s, sm = FeatureState(1, 0.5), FeatureState(1, 0.5)
    for b in (first, second):
        f, fm = np.zeros(128, np.float32), np.zeros(128, np.float32)
        assert compute(s, b, f) == OK and compute(sm, _mirror(b, center), fm) == OK
        assert fm[SIGNED] == pytest.approx(-f[SIGNED], abs=1e-6)
        assert fm[UNSIGNED] == pytest.approx(f[UNSIGNED], rel=1e-6)
        for i, j in SWAPPED:
            assert (fm[i], fm[j]) == (f[j], f[i])
        assert not fm[F.F_RESERVED_0:].any()
    assert f[F.F_OFI] != 0.0  # the change did move the order flow (so the sign flip was tested)


# ------------------------------------------------------------------ hidden-order strength (slots 86..89)
def test_hidden_order_strength_on_a_golden_book():
    """Displayed buy of 3 and hidden execution of 1 at T0, hidden 2 at T0 + 1 s; the BOOK at T0 + 1 s
    from a venue that reports hidden executions: H = e^-1 + 2 = 2.3679, V = 3 e^-1 = 1.1036 (tau 1 s)."""
    s = FeatureState(1, 0.5, FeatureParams(tau_trade_ns=S))
    assert update_from_trade(s, trade(TRADE_SIDE_BUY, 1001.0, 3.0, T0)) == OK
    assert update_from_trade(s, trade(TRADE_SIDE_BUY, 1000.5, 1.0, T0, flags=TRADE_FLAG_HIDDEN)) == OK
    assert update_from_trade(s, trade(TRADE_SIDE_BUY, 1000.5, 2.0, T0 + S, flags=TRADE_FLAG_HIDDEN)) == OK
    code, out = run(s, book([(1000.0, 2.0)], [(1001.0, 2.0)], ts=T0 + S, flags=BOOK_FLAG_HIDDEN_REPORTED))
    f = out["features"]
    hidden, shown = math.exp(-1) + 2.0, 3.0 * math.exp(-1)
    assert code == OK and not out["flags"] & FEATURES_FLAG_NO_HIDDEN and out["flags"] & FEATURES_FLAG_NO_BASIS
    assert f[F.F_HIDDEN_AVAILABLE] == 1.0
    assert f[F.F_HIDDEN_VOLUME_RATE] == pytest.approx(2.367879, rel=1e-6) == pytest.approx(hidden, rel=1e-6)
    assert f[F.F_HIDDEN_SHARE] == pytest.approx(0.682087, rel=1e-5)
    assert f[F.F_HIDDEN_SHARE] == pytest.approx(hidden / (hidden + shown), rel=1e-6)
    assert f[F.F_HIDDEN_TO_TOUCH] == pytest.approx(hidden / 4.0, rel=1e-6)  # the touch shows 2 + 2
    # a hidden execution is no aggressor's trade: the trade slots see the displayed one only
    assert f[F.F_TRADE_INTENSITY] == pytest.approx(math.exp(-1), rel=1e-6)
    assert f[F.F_TRADE_VOLUME_RATE] == pytest.approx(3.0 * math.exp(-1), rel=1e-6)
    assert f[F.F_LAST_TRADE_OFFSET] == pytest.approx(1.0) and s.vpin == pytest.approx(1.0)
    # the same state, a BOOK that does not say so: the slots are 0 again (nothing left over from the last row)
    code, out = run(s, book([(1000.0, 2.0)], [(1001.0, 2.0)], ts=T0 + 2 * S))
    assert code == OK and not out["features"][F.F_HIDDEN_AVAILABLE:F.F_RESERVED_0].any()


def test_hidden_slots_are_zero_and_flagged_not_available_where_the_venue_does_not_report_them():
    s = FeatureState(1, 0.5)
    assert update_from_trade(s, trade(TRADE_SIDE_BUY, 1000.5, 5.0, T0, flags=TRADE_FLAG_HIDDEN)) == OK
    code, out = run(s, book([(1000.0, 2.0)], [(1001.0, 2.0)], ts=T0))  # no BOOK_FLAG_HIDDEN_REPORTED
    assert code == OK and out["flags"] & FEATURES_FLAG_NO_HIDDEN
    assert not out["features"][F.F_HIDDEN_AVAILABLE:F.F_BASIS_AVAILABLE].any()
    # none reported yet from a venue that reports them: available, and 0
    code, out = run(FeatureState(1, 0.5), book([(1000.0, 2.0)], [(1001.0, 2.0)], flags=BOOK_FLAG_HIDDEN_REPORTED))
    assert code == OK and not out["flags"] & FEATURES_FLAG_NO_HIDDEN
    assert out["features"][F.F_HIDDEN_AVAILABLE:F.F_BASIS_AVAILABLE].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_a_bad_hidden_execution_is_rejected_and_counts_for_nothing():
    s = FeatureState(1, 0.5)
    zero, nan = trade(TRADE_SIDE_BUY, 1000.5, 0.0, flags=TRADE_FLAG_HIDDEN), trade(TRADE_SIDE_BUY, math.nan, 1.0,
                                                                                   flags=TRADE_FLAG_HIDDEN)
    assert update_from_trade(s, zero) == Reason.NON_POSITIVE_SIZE and update_from_trade(s, nan) == Reason.NON_FINITE_INPUT
    assert s.hidden_trades == 0 and s.hidden_vol == 0.0 and s.trades == 0


# ------------------------------------------------------------------ spot-perpetual basis (slots 90..93)
def _basis(f):
    return [float(f[k]) for k in (F.F_BASIS_AVAILABLE, F.F_BASIS_BPS, F.F_BASIS_Z, F.F_BASIS_AGE_MS)]


def test_basis_of_a_spot_perpetual_pair_on_golden_books():
    """Spot and perpetual of one base (tau_basis 1 s), books 1 s apart: spot mid 1000.5, perp 1001.5,
    spot 1000.0, perp 1003.0. Bases (bps, perp over spot): b1 = 1e4 ln(1001.5 / 1000.5) = 9.9900,
    b2 = 1e4 ln(1001.5 / 1000) = 14.9888, b3 = 1e4 ln(1003 / 1000) = 29.9551. At b3 the statistics
    hold b1 from its time and then b2 for 1 s: w = 1 - e^-1, m = b1 + w (b2 - b1), v = (1 - w) w (b2 - b1)^2."""
    spot, perp = FeatureState(1, 0.5), FeatureState(2, 0.5)
    pair = F.pair_basis(spot, perp, tau_basis_ns=S)
    code, out = run(spot, book([(1000.0, 1.0)], [(1001.0, 1.0)], ts=T0))
    assert code == OK and out["flags"] & FEATURES_FLAG_NO_BASIS and _basis(out["features"]) == [0.0] * 4
    code, out = run(perp, book([(1001.0, 1.0)], [(1002.0, 1.0)], ts=T0 + S, iid=2))
    b1 = 1e4 * math.log(1001.5 / 1000.5)
    assert code == OK and not out["flags"] & FEATURES_FLAG_NO_BASIS
    assert _basis(out["features"]) == pytest.approx([1.0, 9.990010, 0.0, 1000.0], rel=1e-6)
    assert _basis(out["features"])[1] == pytest.approx(b1, rel=1e-6)
    code, out = run(spot, book([(999.5, 1.0)], [(1000.5, 1.0)], ts=T0 + 2 * S))
    b2 = 1e4 * math.log(1001.5 / 1000.0)
    assert code == OK and _basis(out["features"]) == pytest.approx([1.0, b2, 0.0, 1000.0], rel=1e-6)  # v still 0
    code, out = run(perp, book([(1002.5, 1.0)], [(1003.5, 1.0)], ts=T0 + 3 * S, iid=2))
    b3 = 1e4 * math.log(1003.0 / 1000.0)
    w = 1 - math.exp(-1)
    m, v = b1 + w * (b2 - b1), (1 - w) * w * (b2 - b1) ** 2
    assert (m, v) == pytest.approx((13.149824, 5.810698), rel=1e-6)
    assert code == OK and _basis(out["features"]) == pytest.approx([1.0, b3, (b3 - m) / math.sqrt(v), 1000.0], rel=1e-5)
    assert _basis(out["features"])[2] == pytest.approx(6.971580, rel=1e-5)
    assert (pair.n, pair.basis_bps) == (3, pytest.approx(b3))


def test_a_rejected_book_leaves_the_basis_statistics_alone():
    spot, perp = FeatureState(1, 0.5), FeatureState(2, 0.5)
    pair = F.pair_basis(spot, perp)
    run(spot, book([(1000.0, 1.0)], [(1001.0, 1.0)], ts=T0))
    run(perp, book([(1001.0, 1.0)], [(1002.0, 1.0)], ts=T0 + S, iid=2))
    before = (pair.n, pair.ts_ns, pair.basis_bps, pair.mean, pair.var)
    assert run(perp, book([(1003.0, 1.0)], [(1002.0, 1.0)], ts=T0 + 2 * S, iid=2))[0] == Reason.CROSSED_BOOK
    assert (pair.n, pair.ts_ns, pair.basis_bps, pair.mean, pair.var) == before


def test_pairing_refuses_one_instrument_twice_and_a_leg_of_another_pair():
    a, b, c = FeatureState(1, 0.5), FeatureState(2, 0.5), FeatureState(3, 0.5)
    with pytest.raises(ValueError, match="both legs"):
        F.pair_basis(a, a)
    F.pair_basis(a, b)
    with pytest.raises(ValueError, match="instrument 2 is already a leg"):
        F.pair_basis(c, b)
    with pytest.raises(ValueError, match="tau_basis_ns"):
        F.pair_basis(c, FeatureState(4, 0.5), tau_basis_ns=0)
