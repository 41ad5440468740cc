"""The feature engine's core: BOOK / TRADE payloads in, one 128-dim float32 vector per BOOK out.

Pure and sans-I/O: no clock, no ring, no logging. Time comes from the messages themselves (the
venue's ``exch_ts_ns``, or the caller's ``fallback_ts_ns`` when a message has none), so replaying
the same input gives the same features. Time running backwards is clamped to no elapsed time.

Per instrument, a ``FeatureState`` holds what the features need from the past: the previous best
levels (order-flow imbalance), the previous mid (returns, volatility), time-decayed trade counters
(intensity, volume, aggressor imbalance), equal-volume buckets (VPIN), the decayed volume of
non-displayed executions (hidden-order strength) and, for the two legs of a spot-perpetual pair
(``pair_basis``), one shared ``BasisPair`` (the basis and its time-weighted mean and variance).

``compute(state, book, out)`` validates the BOOK and fills ``out`` (a ``FEATURES_DTYPE`` record or a
float32[128] row); ``update_from_trade(state, trade)`` folds one TRADE in. Both return a reason code
(``OK`` or a rejection) and never raise on bad data; a rejected message leaves the state unchanged,
and a rejected BOOK must not be passed on (``out`` may hold partial values).

Layout of the vector (``F_*`` below are the indices; docs/ARCHITECTURE.md has the same table).
``tick`` is the instrument's tick size, ``mid = (b0 + a0) / 2`` with ``b0``/``a0`` the best bid /
ask prices and ``qb0``/``qa0`` their sizes; a level ``i`` past ``n_bids`` / ``n_asks`` gives 0::

    slots    name                      formula
    0..14    F_BID_DIST_0..14          (mid - bid_px[i]) / tick
    15..29   F_ASK_DIST_0..14          (ask_px[i] - mid) / tick
    30..44   F_BID_SIZE_0..14          bid_sz[i] (instrument units)
    45..59   F_ASK_SIZE_0..14          ask_sz[i]
    60..64   F_IMBALANCE_1/3/5/10/15   (B_k - A_k) / (B_k + A_k), B_k / A_k = size of the best k levels
    65       F_MICROPRICE_OFFSET       (micro - mid) / tick, micro = (b0 * qa0 + a0 * qb0) / (qb0 + qa0)
    66       F_SPREAD_TICKS            (a0 - b0) / tick
    67       F_SPREAD_BPS              (a0 - b0) / mid * 1e4
    68       F_OFI                     order-flow imbalance of this update at the best levels (Cont,
                                       Kukanov, Stoikov 2014): qb0*[b0 >= b0'] - qb0'*[b0 <= b0']
                                       - qa0*[a0 <= a0'] + qa0'*[a0 >= a0'] (' = previous BOOK; 0 first)
    69       F_OFI_DECAYED             sum of F_OFI over past BOOKs, each weighted exp(-age / tau_ofi)
    70       F_OFI_NORM                F_OFI_DECAYED / (qb0 + qa0)
    71       F_TRADE_INTENSITY         trades per second: sum over trades of exp(-age / tau_trade) / tau_trade_s
    72       F_TRADE_VOLUME_RATE       traded size per second, same decay
    73       F_TRADE_IMBALANCE         (V_buy - V_sell) / (V_buy + V_sell) of the decayed aggressor volumes (0: none)
    74       F_VPIN                    sum |V_buy - V_sell| / sum V over the last ``vpin_buckets``
                                       equal-volume buckets and the open one (0: no trade yet); in [0, 1]
    75       F_LAST_TRADE_OFFSET       (last trade price - mid) / tick (0: no trade yet)
    76       F_SECONDS_SINCE_TRADE     seconds since the last trade, capped at 60 (60: none yet)
    77       F_RETURN_BPS              log(mid / mid') * 1e4 (0 first)
    78       F_MID_CHANGE_TICKS        (mid - mid') / tick (0 first)
    79       F_VOLATILITY_FAST         sqrt(sum r^2 exp(-age / tau_fast) / tau_fast_s) * 1e4, r = log mid
                                       returns: bps per sqrt(second), tau_fast 1 s by default
    80       F_VOLATILITY_SLOW         the same with tau_slow (10 s)
    81       F_DEPTH_BID               sum of bid_sz over the levels present
    82       F_DEPTH_ASK               sum of ask_sz
    83       F_N_BIDS                  levels present on the bid side (0..15)
    84       F_N_ASKS                  levels present on the ask side
    85       F_BOOK_INTERVAL_MS        ms since the previous accepted BOOK of the instrument, capped at 60000 (0 first)
    86       F_HIDDEN_AVAILABLE        1 when the BOOK says its venue reports non-displayed executions
                                       (BOOK_FLAG_HIDDEN_REPORTED: ITCH), else 0 and 86..89 are 0
                                       (FEATURES_FLAG_NO_HIDDEN)
    87       F_HIDDEN_VOLUME_RATE      non-displayed executed size per second: H / tau_trade_s, H = sum of the
                                       TRADE_FLAG_HIDDEN sizes, each weighted exp(-age / tau_trade)
    88       F_HIDDEN_SHARE            H / (H + V), V the displayed executed size decayed alike (0: neither)
    89       F_HIDDEN_TO_TOUCH         H / (qb0 + qa0): hidden executions against the displayed size at the touch
    90       F_BASIS_AVAILABLE         1 when the instrument is a leg of a spot-perpetual pair and the other
                                       leg has an accepted BOOK, else 0 and 90..93 are 0 (FEATURES_FLAG_NO_BASIS)
    91       F_BASIS_BPS               log(mid_perp / mid_spot) * 1e4, this BOOK's mid and the other leg's latest
    92       F_BASIS_Z                 (F_BASIS_BPS - m) / sqrt(v): m, v the basis' mean and variance over time
                                       (each basis held until the next, weighted exp(-age / tau_basis), either
                                       leg's BOOKs updating them); 0 while v is 0
    93       F_BASIS_AGE_MS            ms between this BOOK and the other leg's latest, capped at 60000
    94..127  F_RESERVED_0..33          0

The per-level work is vectorized over the (4, 15) level block (no Python loop over levels); the
scalar features are plain float arithmetic.
"""

from __future__ import annotations

import enum
import math

import numpy as np

from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_HIDDEN_REPORTED, BOOK_FLAG_SNAPSHOT, BOOK_HEAD_STRUCT,
                                      BOOK_LEVELS, FEATURES_DTYPE, FEATURES_FLAG_NO_BASIS, FEATURES_FLAG_NO_EXCH_TS,
                                      FEATURES_FLAG_NO_HIDDEN, FEATURES_FLAG_SNAPSHOT, FEATURES_FLAG_WARMUP,
                                      FEATURES_HEAD_STRUCT, FEATURES_LEN, OFF_TRADE_FLAGS, TRADE_FLAG_HIDDEN,
                                      TRADE_SIDE_BUY, TRADE_SIDE_SELL, TRADE_STRUCT)

N_FEATURES = FEATURES_LEN
L = BOOK_LEVELS
#: the version of the vector's layout and formulas below: a model is trained for one (its card says
#: which, ``pipeline.trading.model.card``) and the fast stage refuses a model of another. Bump it
#: whenever a slot moves or what a slot computes changes (its formula or its unit).
FEATURE_LAYOUT_VERSION = 2  # 2: slots 86..93 (hidden-order strength, spot-perpetual basis); ITCH executions as TRADEs

# ------------------------------------------------------------------------------------- layout
F_BID_DIST_0 = 0
F_ASK_DIST_0 = F_BID_DIST_0 + L  # 15
F_BID_SIZE_0 = F_ASK_DIST_0 + L  # 30
F_ASK_SIZE_0 = F_BID_SIZE_0 + L  # 45
F_IMBALANCE_1 = F_ASK_SIZE_0 + L  # 60
F_IMBALANCE_3 = 61
F_IMBALANCE_5 = 62
F_IMBALANCE_10 = 63
F_IMBALANCE_15 = 64
F_MICROPRICE_OFFSET = 65
F_SPREAD_TICKS = 66
F_SPREAD_BPS = 67
F_OFI = 68
F_OFI_DECAYED = 69
F_OFI_NORM = 70
F_TRADE_INTENSITY = 71
F_TRADE_VOLUME_RATE = 72
F_TRADE_IMBALANCE = 73
F_VPIN = 74
F_LAST_TRADE_OFFSET = 75
F_SECONDS_SINCE_TRADE = 76
F_RETURN_BPS = 77
F_MID_CHANGE_TICKS = 78
F_VOLATILITY_FAST = 79
F_VOLATILITY_SLOW = 80
F_DEPTH_BID = 81
F_DEPTH_ASK = 82
F_N_BIDS = 83
F_N_ASKS = 84
F_BOOK_INTERVAL_MS = 85
F_HIDDEN_AVAILABLE = 86
F_HIDDEN_VOLUME_RATE = 87
F_HIDDEN_SHARE = 88
F_HIDDEN_TO_TOUCH = 89
F_BASIS_AVAILABLE = 90
F_BASIS_BPS = 91
F_BASIS_Z = 92
F_BASIS_AGE_MS = 93
F_RESERVED_0 = 94  # 94..127 are zero
N_RESERVED = N_FEATURES - F_RESERVED_0  # 34

IMBALANCE_DEPTHS = (1, 3, 5, 10, 15)
for _i in range(L):  # F_BID_DIST_0..14, F_ASK_DIST_0..14, F_BID_SIZE_0..14, F_ASK_SIZE_0..14 by name
    globals()[f"F_BID_DIST_{_i}"] = F_BID_DIST_0 + _i
    globals()[f"F_ASK_DIST_{_i}"] = F_ASK_DIST_0 + _i
    globals()[f"F_BID_SIZE_{_i}"] = F_BID_SIZE_0 + _i
    globals()[f"F_ASK_SIZE_{_i}"] = F_ASK_SIZE_0 + _i
for _i in range(N_RESERVED):
    globals()[f"F_RESERVED_{_i}"] = F_RESERVED_0 + _i
del _i

SECONDS_SINCE_TRADE_CAP = 60.0
BOOK_INTERVAL_CAP_MS = 60_000.0
BASIS_AGE_CAP_MS = 60_000.0
_F32_MAX = float(np.finfo(np.float32).max)
_F32_MAX_SQ = _F32_MAX * _F32_MAX  # 1.2e77, well inside float64
_add_reduce = np.add.reduce
_min_reduce = np.minimum.reduce
_dot = np.dot


def feature_names() -> list[str]:
    """The name of every slot, index order (``F_`` dropped), e.g. ``names[62] == "IMBALANCE_5"``."""
    names = [""] * N_FEATURES
    for k, v in globals().items():
        if k.startswith("F_") and isinstance(v, int) and not names[v]:
            names[v] = k[2:]
    return names


class Reason(enum.IntEnum):
    """What ``compute`` / ``update_from_trade`` did with a message (0 = accepted)."""

    OK = 0
    NON_FINITE_INPUT = 1  # NaN / inf in a price, a size or the trade
    EMPTY_BOOK = 2  # no bid or no ask level
    CROSSED_BOOK = 3  # best bid >= best ask (locked counts)
    NON_POSITIVE_PRICE = 4  # a present level (or the trade) priced <= 0
    NON_POSITIVE_SIZE = 5  # a present level (or the trade) with size <= 0
    BAD_LEVEL_COUNT = 6  # n_bids / n_asks > 15
    NON_FINITE_FEATURE = 7  # a feature came out NaN / inf / beyond float32
    BAD_SIDE = 8  # a TRADE side that is neither buy nor sell
    BAD_SIZE = 9  # payload length is not the layout's


OK = Reason.OK

# ------------------------------------------------------------------------------------- state
_BOOK_BYTES = BOOK_DTYPE.itemsize
# _PRESENT[nb, na]: (4, 15) mask of the present levels in the rows bid_px, bid_sz, ask_px, ask_sz
_PRESENT = np.zeros((L + 1, L + 1, 4, L), bool)
for _nb in range(L + 1):
    _PRESENT[_nb, :, 0:2, :_nb] = True
    _PRESENT[:, _nb, 2:4, :_nb] = True
del _nb
_PRESENT_F = _PRESENT.astype(np.float64)
# sizes (bid_sz then ask_sz, 30) @ _AGG -> B_k - A_k (5 depths), B_k + A_k (5), total bid, total ask
_CUM_AT = (np.arange(L)[:, None] < np.array(IMBALANCE_DEPTHS)[None, :]).astype(np.float64)  # (15, 5)
_AGG = np.zeros((2 * L, 12))
_AGG[:L, 0:5], _AGG[L:, 0:5] = _CUM_AT, -_CUM_AT
_AGG[:L, 5:10], _AGG[L:, 5:10] = _CUM_AT, _CUM_AT
_AGG[:L, 10], _AGG[L:, 11] = 1.0, 1.0
# the scalar slots are stored in one slice, in this order
assert (F_MICROPRICE_OFFSET, F_SPREAD_TICKS, F_SPREAD_BPS, F_OFI, F_OFI_DECAYED, F_OFI_NORM, F_TRADE_INTENSITY,
        F_TRADE_VOLUME_RATE, F_TRADE_IMBALANCE, F_VPIN, F_LAST_TRADE_OFFSET, F_SECONDS_SINCE_TRADE, F_RETURN_BPS,
        F_MID_CHANGE_TICKS, F_VOLATILITY_FAST, F_VOLATILITY_SLOW, F_DEPTH_BID, F_DEPTH_ASK, F_N_BIDS, F_N_ASKS,
        F_BOOK_INTERVAL_MS, F_HIDDEN_AVAILABLE, F_HIDDEN_VOLUME_RATE, F_HIDDEN_SHARE, F_HIDDEN_TO_TOUCH,
        F_BASIS_AVAILABLE, F_BASIS_BPS, F_BASIS_Z, F_BASIS_AGE_MS, F_RESERVED_0) == tuple(range(65, 95))


class FeatureParams:
    """Decay constants (ns) and VPIN bucketing of one instrument."""

    __slots__ = ("tau_ofi_ns", "tau_trade_ns", "tau_vol_fast_ns", "tau_vol_slow_ns", "vpin_bucket_volume",
                 "vpin_buckets")

    def __init__(self, *, tau_ofi_ns: int = 1_000_000_000, tau_trade_ns: int = 1_000_000_000,
                 tau_vol_fast_ns: int = 1_000_000_000, tau_vol_slow_ns: int = 10_000_000_000,
                 vpin_bucket_volume: float = 1.0, vpin_buckets: int = 50):
        for name, v in (("tau_ofi_ns", tau_ofi_ns), ("tau_trade_ns", tau_trade_ns),
                        ("tau_vol_fast_ns", tau_vol_fast_ns), ("tau_vol_slow_ns", tau_vol_slow_ns),
                        ("vpin_bucket_volume", vpin_bucket_volume), ("vpin_buckets", vpin_buckets)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive finite number, not {v!r}")
        self.tau_ofi_ns = int(tau_ofi_ns)
        self.tau_trade_ns = int(tau_trade_ns)
        self.tau_vol_fast_ns = int(tau_vol_fast_ns)
        self.tau_vol_slow_ns = int(tau_vol_slow_ns)
        self.vpin_bucket_volume = float(vpin_bucket_volume)
        self.vpin_buckets = int(vpin_buckets)


class FeatureState:
    """Everything one instrument's features remember between messages."""

    def __init__(self, instrument_id: int, tick_size: float, params: FeatureParams | None = None):
        if not (math.isfinite(tick_size) and tick_size > 0):
            raise ValueError(f"tick_size must be positive, not {tick_size!r}")
        self.instrument_id = instrument_id
        self.tick_size = float(tick_size)
        self.inv_tick = 1.0 / self.tick_size
        self.params = p = params or FeatureParams()
        # previous accepted BOOK
        self.books = 0
        self.prev_ts_ns = 0
        self.prev_mid = 0.0
        self.prev_best = (0.0, 0.0, 0.0, 0.0)  # b0, qb0, a0, qa0
        self.ofi_decayed = 0.0
        self.vol_fast = 0.0  # decayed sums of squared log returns at prev_ts_ns
        self.vol_slow = 0.0
        # trades, decayed to trade_ts_ns
        self.trades = 0
        self.trade_ts_ns = 0
        self.trade_count = 0.0
        self.trade_buy_vol = 0.0
        self.trade_sell_vol = 0.0
        self.last_trade_px = 0.0
        # VPIN: closed buckets' |buy - sell| (ring), the open bucket
        self.vpin_imb = [0.0] * p.vpin_buckets
        self.vpin_next = 0
        self.vpin_closed = 0
        self.vpin_imb_sum = 0.0
        self.vpin_buy = 0.0
        self.vpin_sell = 0.0
        # non-displayed executions (TRADE_FLAG_HIDDEN), decayed to hidden_ts_ns with tau_trade
        self.hidden_trades = 0
        self.hidden_ts_ns = 0
        self.hidden_vol = 0.0
        # the spot-perpetual pair this instrument is a leg of (pair_basis), and its sign in the basis
        self.pair: BasisPair | None = None
        self.pair_other: FeatureState | None = None  # the other leg
        self.basis_sign = 0.0  # +1 the perpetual, -1 the spot
        # scratch
        self._row = np.zeros(N_FEATURES, np.float64)
        self._optional_zero = True  # _row holds 0 in F_HIDDEN_AVAILABLE..F_BASIS_AGE_MS
        self._dist = self._row[F_BID_DIST_0:F_BID_SIZE_0].reshape(2, L)
        self._size = self._row[F_BID_SIZE_0:F_IMBALANCE_1].reshape(2, L)
        self._size_flat = self._row[F_BID_SIZE_0:F_IMBALANCE_1]
        self._imbalance = self._row[F_IMBALANCE_1:F_MICROPRICE_OFFSET]
        self._dist_scale = np.array([[self.inv_tick], [-self.inv_tick]])
        self._out = self._out_bytes = self._out_vec = None

    @property
    def vpin(self) -> float:
        """The VPIN estimate now (0 before any trade)."""
        v = self.params.vpin_bucket_volume
        open_vol = self.vpin_buy + self.vpin_sell
        den = self.vpin_closed * v + open_vol
        return (self.vpin_imb_sum + abs(self.vpin_buy - self.vpin_sell)) / den if den > 0 else 0.0


def _decay(dt_ns: int, tau_ns: int) -> float:
    return math.exp(-dt_ns / tau_ns) if dt_ns > 0 else 1.0


class BasisPair:
    """The spot-perpetual basis of one base, shared by its two legs' states (``pair_basis``).

    ``basis_bps`` is the latest basis, ``log(mid_perp / mid_spot) * 1e4``, set at ``ts_ns`` by either
    leg's accepted BOOK; ``mean`` / ``var`` its mean and variance over time: each basis is held until
    the next, and a hold of ``dt`` weighs ``w = 1 - exp(-dt / tau_basis)`` against the past
    (``mean += w * d``, ``var = (1 - w) * (var + w * d * d)``, ``d = basis_bps - mean``): weighted by
    time, not by the number of updates. ``n`` counts the bases seen.
    """

    __slots__ = ("spot", "perp", "tau_ns", "n", "ts_ns", "basis_bps", "mean", "var")

    def __init__(self, spot: FeatureState, perp: FeatureState, tau_ns: int):
        self.spot, self.perp, self.tau_ns = spot, perp, int(tau_ns)
        self.n = self.ts_ns = 0
        self.basis_bps = self.mean = self.var = 0.0

    def advanced(self, ts_ns: int) -> tuple[float, float]:
        """(mean, var) at ``ts_ns``: the latest basis held since ``ts_ns`` of the last one."""
        if self.n == 0:
            return 0.0, 0.0
        w = 1.0 - _decay(ts_ns - self.ts_ns, self.tau_ns)
        d = self.basis_bps - self.mean
        return self.mean + w * d, (1.0 - w) * (self.var + w * d * d)


def pair_basis(spot: FeatureState, perp: FeatureState, tau_basis_ns: int = 60_000_000_000) -> BasisPair:
    """Make ``spot`` and ``perp`` (two instruments of one base) the legs of one basis (slots 90..93).

    Raises:
        ValueError: the same state twice, a leg already paired, or ``tau_basis_ns`` not positive.
    """
    if spot is perp:
        raise ValueError(f"instrument {spot.instrument_id} cannot be both legs of a basis")
    for leg in (spot, perp):
        if leg.pair is not None:
            raise ValueError(f"instrument {leg.instrument_id} is already a leg of a basis")
    if not (math.isfinite(tau_basis_ns) and tau_basis_ns > 0):
        raise ValueError(f"tau_basis_ns must be a positive finite number, not {tau_basis_ns!r}")
    pair = BasisPair(spot, perp, tau_basis_ns)
    spot.pair, spot.pair_other, spot.basis_sign = pair, perp, -1.0
    perp.pair, perp.pair_other, perp.basis_sign = pair, spot, 1.0
    return pair


# ------------------------------------------------------------------------------------- trades
def update_from_trade(state: FeatureState, trade, fallback_ts_ns: int = 0) -> Reason:
    """Fold one TRADE (40-byte payload, or a ``TRADE_DTYPE`` record) into ``state``.

    Decayed counters (``tau_trade``): count, buy and sell volume are first decayed from the last
    trade's time to this one's (``exch_ts_ns``, else ``fallback_ts_ns``), then incremented. A TRADE
    flagged ``TRADE_FLAG_HIDDEN`` (a non-displayed execution) only adds to the decayed hidden volume
    (slots 87..89): it is not an aggressor's trade, so no other counter sees it. VPIN:
    the size is poured into the open bucket of ``vpin_bucket_volume``; each bucket that fills is
    closed with its ``|buy - sell|`` into a ring of the last ``vpin_buckets`` (a trade larger than
    the whole ring only needs the last ring's worth of it: the loop is bounded by the ring size).
    """
    try:
        raw = memoryview(trade).cast("B")
    except TypeError:
        raw = memoryview(trade.tobytes())
    if raw.nbytes != 40:
        return Reason.BAD_SIZE
    _iid, side, _tid, ts, px, sz = TRADE_STRUCT.unpack_from(raw, 0)
    if not (math.isfinite(px) and math.isfinite(sz)):
        return Reason.NON_FINITE_INPUT
    if px <= 0:
        return Reason.NON_POSITIVE_PRICE
    if sz <= 0:
        return Reason.NON_POSITIVE_SIZE
    if side != TRADE_SIDE_BUY and side != TRADE_SIDE_SELL:
        return Reason.BAD_SIDE
    s = state
    p = s.params
    if not ts:
        ts = fallback_ts_ns
    if raw[OFF_TRADE_FLAGS] & TRADE_FLAG_HIDDEN:  # a non-displayed execution: its own counter only
        if s.hidden_trades:
            s.hidden_vol *= _decay(ts - s.hidden_ts_ns, p.tau_trade_ns)
        if ts > s.hidden_ts_ns or not s.hidden_trades:
            s.hidden_ts_ns = ts
        s.hidden_vol += sz
        s.hidden_trades += 1
        return Reason.OK
    if s.trades:
        k = _decay(ts - s.trade_ts_ns, p.tau_trade_ns)
        s.trade_count *= k
        s.trade_buy_vol *= k
        s.trade_sell_vol *= k
    if ts > s.trade_ts_ns or not s.trades:
        s.trade_ts_ns = ts
    s.trade_count += 1.0
    buy = side == TRADE_SIDE_BUY
    if buy:
        s.trade_buy_vol += sz
    else:
        s.trade_sell_vol += sz
    s.last_trade_px = px
    s.trades += 1
    # VPIN buckets
    v = p.vpin_bucket_volume
    n = p.vpin_buckets
    rest = sz
    room = v - s.vpin_buy - s.vpin_sell
    if rest > room + n * v:  # everything past the last n full buckets would be overwritten: skip it
        rest = room + n * v + math.fmod(rest - room, v)
    while rest > 0:
        room = v - s.vpin_buy - s.vpin_sell
        take = rest if rest < room else room
        if buy:
            s.vpin_buy += take
        else:
            s.vpin_sell += take
        rest -= take
        if s.vpin_buy + s.vpin_sell >= v * (1 - 1e-12):
            ring = s.vpin_imb
            ring[s.vpin_next] = abs(s.vpin_buy - s.vpin_sell)
            s.vpin_next = (s.vpin_next + 1) % n
            s.vpin_closed = min(s.vpin_closed + 1, n)
            s.vpin_imb_sum = sum(ring)
            s.vpin_buy = s.vpin_sell = 0.0
    return Reason.OK


# ------------------------------------------------------------------------------------- books
def _as_bytes(book) -> memoryview:
    try:
        return memoryview(book).cast("B")
    except TypeError:  # a non-contiguous view
        return memoryview(np.ascontiguousarray(book).tobytes())


# hot path: one function on purpose: every BOOK runs it; split into helpers it would pay a Python call and
# the re-binding of its locals per helper (the fast bench's feature-vector p50 is the measure)
def compute(state: FeatureState, book, out, fallback_ts_ns: int = 0) -> Reason:
    """Validate one BOOK (504-byte payload, or a ``BOOK_DTYPE`` record) and fill ``out``.

    ``out``: a ``FEATURES_DTYPE`` record (0-d or 1-element array; the header fields are filled
    too: instrument, flags, book seq and timestamp, ``ref_mid``, ``ref_spread``) or a float32[128]
    row (features only). Returns ``Reason.OK``, or the first rejection in this order: size,
    level counts, non-finite input, empty book, non-positive price or size of a present level,
    crossed / locked, non-finite feature. Only an accepted BOOK updates ``state``. Formulas: the
    module docstring.
    """
    raw = _as_bytes(book)
    if raw.nbytes != _BOOK_BYTES:
        return Reason.BAD_SIZE
    _iid, bflags, nb, na, seq, ts = BOOK_HEAD_STRUCT.unpack_from(raw, 0)
    if nb > L or na > L:
        return Reason.BAD_LEVEL_COUNT
    lv = np.frombuffer(raw, "<f8", 4 * L, 24).reshape(4, L)  # bid_px, bid_sz, ask_px, ask_sz
    if not math.isfinite(_add_reduce(lv, None)) and not np.isfinite(lv).all():  # a finite sum: all finite
        return Reason.NON_FINITE_INPUT
    if nb == 0 or na == 0:
        return Reason.EMPTY_BOOK
    present = _PRESENT[nb, na]
    if not _min_reduce(lv, None, where=present, initial=math.inf) > 0:
        bad = (lv <= 0) & present
        return Reason.NON_POSITIVE_PRICE if bad[0::2].any() else Reason.NON_POSITIVE_SIZE
    b0, qb0, a0, qa0 = lv[:, 0].tolist()
    if b0 >= a0:
        return Reason.CROSSED_BOOK

    s = state
    p = s.params
    inv_tick = s.inv_tick
    flags = FEATURES_FLAG_SNAPSHOT if bflags & BOOK_FLAG_SNAPSHOT else 0
    book_ts = ts
    if not ts:
        ts = fallback_ts_ns
        flags |= FEATURES_FLAG_NO_EXCH_TS
    mid = 0.5 * (b0 + a0)
    spread = a0 - b0
    row = s._row

    # levels: distances and sizes, zero past the present levels, as (2, 15) blocks
    pm = _PRESENT_F[nb, na]
    dist, size = s._dist, s._size  # views of row[0:30], row[30:60]
    np.subtract(mid, lv[0::2], out=dist)  # (mid - bid_px, mid - ask_px)
    dist *= s._dist_scale  # x (1 / tick, -1 / tick)
    dist *= pm[0::2]
    np.multiply(lv[1::2], pm[1::2], out=size)
    agg = s._size_flat @ _AGG  # B_k - A_k (5), B_k + A_k (5), depth bid, depth ask
    np.divide(agg[0:5], agg[5:10], out=s._imbalance)  # F_IMBALANCE_*: (B_k - A_k) / (B_k + A_k)
    depth_b, depth_a = agg[10:12].tolist()

    # order-flow imbalance, returns, volatility: against the previous accepted BOOK
    first = s.books == 0
    if first:
        flags |= FEATURES_FLAG_WARMUP
        ofi = ofi_decayed = ret = dmid = vol_fast = vol_slow = interval_ms = 0.0
    else:
        pb, pqb, pa, pqa = s.prev_best
        ofi = ((qb0 if b0 >= pb else 0.0) - (pqb if b0 <= pb else 0.0)
               - (qa0 if a0 <= pa else 0.0) + (pqa if a0 >= pa else 0.0))
        dt = ts - s.prev_ts_ns
        ofi_decayed = s.ofi_decayed * _decay(dt, p.tau_ofi_ns) + ofi
        ret = math.log(mid / s.prev_mid)
        dmid = mid - s.prev_mid
        r2 = ret * ret
        vol_fast = s.vol_fast * _decay(dt, p.tau_vol_fast_ns) + r2
        vol_slow = s.vol_slow * _decay(dt, p.tau_vol_slow_ns) + r2
        interval_ms = min(max(dt, 0) / 1e6, BOOK_INTERVAL_CAP_MS)

    # trades, decayed to this BOOK's time
    if s.trades:
        age = ts - s.trade_ts_ns
        k = _decay(age, p.tau_trade_ns) * 1e9 / p.tau_trade_ns
        buy, sell = s.trade_buy_vol, s.trade_sell_vol
        intensity = s.trade_count * k
        volume_rate = (buy + sell) * k
        trade_imb = (buy - sell) / (buy + sell) if buy + sell > 0 else 0.0
        vpin = s.vpin
        last_trade = (s.last_trade_px - mid) * inv_tick
        since_trade = min(max(age, 0) / 1e9, SECONDS_SINCE_TRADE_CAP)
    else:
        intensity = volume_rate = trade_imb = vpin = last_trade = 0.0
        since_trade = SECONDS_SINCE_TRADE_CAP

    # hidden-order strength: the decayed non-displayed executed size against the displayed
    if bflags & BOOK_FLAG_HIDDEN_REPORTED:
        hidden = s.hidden_vol * _decay(ts - s.hidden_ts_ns, p.tau_trade_ns) if s.hidden_trades else 0.0
        shown = (s.trade_buy_vol + s.trade_sell_vol) * _decay(ts - s.trade_ts_ns, p.tau_trade_ns) if s.trades else 0.0
        h_avail, h_rate = 1.0, hidden * 1e9 / p.tau_trade_ns
        h_share, h_touch = hidden / (hidden + shown) if hidden > 0 else 0.0, hidden / (qb0 + qa0)
    else:
        flags |= FEATURES_FLAG_NO_HIDDEN
        h_avail = h_rate = h_share = h_touch = 0.0

    # the spot-perpetual basis against the other leg's latest mid, scored against its own past
    other = s.pair_other
    if other is not None and other.books:
        pair = s.pair
        basis = s.basis_sign * math.log(mid / other.prev_mid) * 1e4
        b_mean, b_var = pair.advanced(ts)
        b_avail, b_z = 1.0, (basis - b_mean) / math.sqrt(b_var) if b_var > 0 else 0.0
        b_age = min(max(ts - other.prev_ts_ns, 0) / 1e6, BASIS_AGE_CAP_MS)
    else:
        other = None
        flags |= FEATURES_FLAG_NO_BASIS
        b_avail = basis = b_z = b_age = 0.0

    # the scalar slots F_MICROPRICE_OFFSET..F_BOOK_INTERVAL_MS, in index order
    scalars = (
        ((b0 * qa0 + a0 * qb0) / (qb0 + qa0) - mid) * inv_tick,  # F_MICROPRICE_OFFSET
        spread * inv_tick,  # F_SPREAD_TICKS
        spread / mid * 1e4,  # F_SPREAD_BPS
        ofi,  # F_OFI
        ofi_decayed,  # F_OFI_DECAYED
        ofi_decayed / (qb0 + qa0),  # F_OFI_NORM
        intensity,  # F_TRADE_INTENSITY
        volume_rate,  # F_TRADE_VOLUME_RATE
        trade_imb,  # F_TRADE_IMBALANCE
        vpin,  # F_VPIN
        last_trade,  # F_LAST_TRADE_OFFSET
        since_trade,  # F_SECONDS_SINCE_TRADE
        ret * 1e4,  # F_RETURN_BPS
        dmid * inv_tick,  # F_MID_CHANGE_TICKS
        math.sqrt(vol_fast * 1e9 / p.tau_vol_fast_ns) * 1e4,  # F_VOLATILITY_FAST
        math.sqrt(vol_slow * 1e9 / p.tau_vol_slow_ns) * 1e4,  # F_VOLATILITY_SLOW
        depth_b,  # F_DEPTH_BID
        depth_a,  # F_DEPTH_ASK
        nb,  # F_N_BIDS
        na,  # F_N_ASKS
        interval_ms,  # F_BOOK_INTERVAL_MS
    )
    # and the optional slots F_HIDDEN_AVAILABLE..F_BASIS_AGE_MS, in one store; where neither input is
    # available and the row already holds their zeros (the usual case), they are not stored again
    if h_avail or b_avail or not s._optional_zero:
        optional = (h_avail, h_rate, h_share, h_touch, b_avail, basis, b_z, b_age)
        row[F_MICROPRICE_OFFSET:F_RESERVED_0] = scalars + optional
        s._optional_zero = not (h_avail or b_avail)
    else:
        row[F_MICROPRICE_OFFSET:F_HIDDEN_AVAILABLE] = scalars

    # every feature finite and representable in float32 (a NaN fails both comparisons); the cheap
    # test first: sum x^2 <= F32_MAX^2 implies |x| <= F32_MAX for every x
    if not ((_dot(row, row) <= _F32_MAX_SQ or np.abs(row).max() <= _F32_MAX)
            and math.isfinite(mid) and math.isfinite(spread)):
        return Reason.NON_FINITE_FEATURE

    if out.dtype != FEATURES_DTYPE:
        out[:] = row
    elif isinstance(out, np.ndarray):
        if out is not s._out:  # views of the caller's record, kept while it passes the same one
            s._out, s._out_bytes, s._out_vec = out, memoryview(out).cast("B"), out["features"]
        FEATURES_HEAD_STRUCT.pack_into(s._out_bytes, 0, s.instrument_id, flags, seq, book_ts, mid, spread)
        s._out_vec[...] = row
    else:  # an np.void record: field by field
        out["instrument_id"], out["flags"], out["book_seq"] = s.instrument_id, flags, seq
        out["exch_ts_ns"], out["ref_mid"], out["ref_spread"] = book_ts, mid, spread
        out["features"][...] = row

    # commit the state
    s.books += 1
    s.prev_ts_ns = ts if first or ts > s.prev_ts_ns else s.prev_ts_ns
    s.prev_mid = mid
    s.prev_best = (b0, qb0, a0, qa0)
    s.ofi_decayed = ofi_decayed
    s.vol_fast = vol_fast
    s.vol_slow = vol_slow
    if other is not None:  # the pair's statistics, held until now, then this basis
        if pair.n == 0:
            pair.mean, pair.ts_ns = basis, ts
        elif ts > pair.ts_ns:
            pair.mean, pair.var, pair.ts_ns = b_mean, b_var, ts
        pair.basis_bps = basis
        pair.n += 1
    return Reason.OK
