"""Strategy evaluation metrics, sans I/O: fills and marks in, numbers out. Pure functions (numpy,
msgspec), deterministic: the same inputs give the same floats bit for bit (instruments always taken in
increasing id order, sums in a fixed order, stable sorts); no clock, no randomness, no files.

Conventions (every function below follows them; its docstring gives its exact rule):

- A ``Fill`` is one execution of ours: ``side`` +1 bought / -1 sold, ``size`` base units (> 0), ``price``
  quote per base unit, ``fee`` quote currency paid (a maker rebate is negative). Its cash flow is
  ``-side * price * size`` (a buy pays, a sell receives); its fee is booked separately.
- Fills are applied in time order; fills with the same ``ts_ns`` in the order given (stable sort).
- The position of an instrument at ``t``: the signed sum of ``side * size`` over its fills at or before
  ``t``; a position within ``1e-9`` of the sizes involved of zero is zero (float dust is flat).
- The mark of an instrument at ``t`` (``mark_at``): the mid of its last mark at or before ``t`` (of marks
  with equal ``ts_ns``, the last in the series); with no mark yet, the price of its last fill at or
  before ``t`` (the position is then valued at what it traded at).
- Gross P&L at ``t``: the sum over instruments of ``cash(t) + position(t) * mark(t)`` (realized plus
  unrealized, mark to market, before fees); fees: the cumulative sum of the fills' fees; net = gross - fees.

Design document 000, section 4.4, judges a strategy version on three axes, combined as
``stability_score = (1 - alpha_decay) * 0.4 + win_rate * 0.4`` and
``risk_adjusted_lift = (win_rate - 0.5) / (max_drawdown + 0.01)``, with the thresholds of ``verdicts``.

Bad input raises ``ValueError`` naming the field and the value (a ``Fill`` or ``MarkSeries`` that cannot
be valid, a capital that is not positive, arrays of different lengths); nothing else raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec
import numpy as np

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
HOUR_NS = 3600 * NS_PER_S
#: the horizons ``summarize`` measures the information coefficient at (100 ms, 1 s, 5 s, 30 s)
DEFAULT_HORIZONS_NS: tuple[int, ...] = (100 * NS_PER_MS, NS_PER_S, 5 * NS_PER_S, 30 * NS_PER_S)
#: the increments ``summarize``'s Sharpe is estimated from (scaled to one hour): one minute
SHARPE_BUCKET_NS = 60 * NS_PER_S
#: fewest (signal, forward return) pairs an information coefficient is computed from
MIN_IC_PAIRS = 3
#: |IC(shortest horizon)| below this: alpha decay is undefined (None)
IC_ZERO = 1e-9
#: the verdict thresholds (design document 000, section 4.4); a value exactly on one is WATCH
ALPHA_DECAY_SAFE_BELOW, ALPHA_DECAY_WARN_ABOVE = 0.25, 0.4
WIN_RATE_SAFE_ABOVE, WIN_RATE_WARN_BELOW = 0.62, 0.58
MAX_DRAWDOWN_SAFE_BELOW, MAX_DRAWDOWN_WARN_ABOVE = 0.12, 0.18
SAFE, WATCH, WARN, NA = "SAFE", "WATCH", "WARN", "N/A"
_DUST = 1e-9  # relative: a position this close to zero (against the sizes involved) is flat


class Fill(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One execution of ours (see the module docstring for the signs).

    Raises:
        ValueError: ``side`` not +1 / -1, ``price`` or ``size`` not finite and > 0, ``fee`` not finite,
            ``liquidity`` not "maker" / "taker" / "".
    """

    ts_ns: int  # when the fill happened (simulated or venue time), ns
    instrument_id: int
    side: int  # +1 we bought, -1 we sold
    price: float  # quote per base unit
    size: float  # base units, > 0
    fee: float  # quote currency paid (>= 0; a maker rebate would be negative)
    liquidity: str = ""  # "maker" | "taker" | "" (unknown)

    def __post_init__(self) -> None:
        if self.side not in (1, -1):
            raise ValueError(f"Fill.side must be +1 or -1, got {self.side!r}")
        if not (math.isfinite(self.price) and self.price > 0):
            raise ValueError(f"Fill.price must be finite and > 0, got {self.price!r}")
        if not (math.isfinite(self.size) and self.size > 0):
            raise ValueError(f"Fill.size must be finite and > 0, got {self.size!r}")
        if not math.isfinite(self.fee):
            raise ValueError(f"Fill.fee must be finite, got {self.fee!r}")
        if self.liquidity not in ("maker", "taker", ""):
            raise ValueError(f"Fill.liquidity must be 'maker', 'taker' or '', got {self.liquidity!r}")


class MarkSeries(msgspec.Struct, frozen=True):
    """Per instrument, the mid over time: ``ts_ns[iid]`` (int64, non-decreasing) and ``mid[iid]``
    (float64, finite, > 0, the same length). Any sequences are accepted and stored as those arrays.

    Raises:
        ValueError: the two maps name different instruments, an instrument's arrays differ in length,
            its times decrease, or a mid is not finite and > 0 (the instrument and the index named).
    """

    ts_ns: dict[int, np.ndarray]
    mid: dict[int, np.ndarray]

    def __post_init__(self) -> None:
        if set(self.ts_ns) != set(self.mid):
            raise ValueError(f"MarkSeries: ts_ns names instruments {sorted(self.ts_ns)}, mid {sorted(self.mid)}")
        ts_map, mid_map = {}, {}
        for iid in sorted(self.ts_ns):
            ts, mid = _as_times(self.ts_ns[iid], f"MarkSeries.ts_ns[{iid}]"), np.asarray(self.mid[iid], np.float64)
            if mid.shape != ts.shape:
                raise ValueError(f"MarkSeries: instrument {iid}: {ts.size} times but mid has shape {mid.shape}")
            bad = np.flatnonzero(~(np.isfinite(mid) & (mid > 0)))
            if bad.size:
                raise ValueError(f"MarkSeries.mid[{iid}][{bad[0]}] must be finite and > 0, got {mid[bad[0]]!r}")
            ts_map[iid], mid_map[iid] = ts, mid
        msgspec.structs.force_setattr(self, "ts_ns", ts_map)
        msgspec.structs.force_setattr(self, "mid", mid_map)


class Equity(msgspec.Struct, frozen=True, kw_only=True):
    """The mark-to-market curve: one point per distinct time of a mark or a fill, increasing.
    ``gross``: P&L before fees; ``fees``: cumulative fees paid; ``net = gross - fees`` (quote currency)."""

    ts_ns: np.ndarray  # int64
    gross: np.ndarray  # float64
    fees: np.ndarray  # float64
    net: np.ndarray  # float64


class RoundTrip(msgspec.Struct, frozen=True, kw_only=True):
    """One round trip of one instrument: from the fill that took the position away from zero to the fill
    that brought it back to zero or through it. ``gross``: the sum of its fills' cash flows (the part of
    a flipping fill that closed it); ``fees``: theirs (a split fill's fee pro rata by size); ``net``."""

    instrument_id: int
    open_ts_ns: int
    close_ts_ns: int
    gross: float
    fees: float
    net: float


def _as_times(ts, what: str) -> np.ndarray:
    """``ts`` as a 1-D int64 array, non-decreasing. Raises ValueError naming ``what``."""
    arr = np.asarray(ts)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must hold integer ns, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size > 1 and np.any(arr[1:] < arr[:-1]):
        i = int(np.flatnonzero(arr[1:] < arr[:-1])[0]) + 1
        raise ValueError(f"{what} must not decrease: [{i - 1}] = {arr[i - 1]}, [{i}] = {arr[i]}")
    return arr


def _by_instrument(fills: Iterable[Fill]) -> dict[int, list[Fill]]:
    """The fills per instrument, each list in time order (stable: equal times keep the given order)."""
    out: dict[int, list[Fill]] = {}
    for f in sorted(fills, key=lambda f: f.ts_ns):
        out.setdefault(f.instrument_id, []).append(f)
    return out


def fee_for(price: float, size: float, fee_bps: float) -> float:
    """The fee of a fill charged ``fee_bps`` of its notional: ``|price * size| * fee_bps / 10_000``."""
    return abs(price * size) * fee_bps / 10_000.0


def marks_at_fill_prices(fills: Iterable[Fill]) -> MarkSeries:
    """Marks taken from the fills themselves: per instrument, each fill's price at its time."""
    ts, mid = {}, {}
    for iid, fs in sorted(_by_instrument(fills).items()):
        ts[iid] = np.array([f.ts_ns for f in fs], np.int64)
        mid[iid] = np.array([f.price for f in fs], np.float64)
    return MarkSeries(ts, mid)


def _instrument_curve(fs: list[Fill], m_ts, m_mid, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gross, cumulative fees) of one instrument's fills ``fs`` at the times ``t`` (see the module
    docstring for the position, the mark and the gross)."""
    ft = np.array([f.ts_ns for f in fs], np.int64)
    side = np.array([f.side for f in fs], np.float64)
    px = np.array([f.price for f in fs], np.float64)
    sz = np.array([f.size for f in fs], np.float64)
    pos = np.cumsum(side * sz)
    pos[np.abs(pos) <= _DUST * np.maximum.accumulate(sz)] = 0.0
    cash = np.cumsum(-side * px * sz)
    cum_fee = np.cumsum(np.array([f.fee for f in fs], np.float64))
    k = np.searchsorted(ft, t, side="right") - 1
    has = k >= 0
    kk = np.maximum(k, 0)
    mark = np.where(has, px[kk], 0.0)  # no mark yet: the last fill's price
    if m_ts is not None and m_ts.size:
        j = np.searchsorted(m_ts, t, side="right") - 1
        mark = np.where(j >= 0, m_mid[np.maximum(j, 0)], mark)
    gross = np.where(has, cash[kk] + pos[kk] * mark, 0.0)
    return gross, np.where(has, cum_fee[kk], 0.0)


def equity_curve(fills: Iterable[Fill], marks: MarkSeries) -> Equity:
    """The mark-to-market curve of ``fills`` valued at ``marks``: one point at every distinct time of a
    mark or a fill (all instruments merged, increasing), each point after every fill and mark at that
    time. gross(t) = sum over instruments (in id order) of cash(t) + position(t) * mark(t); fees(t) =
    the fees of the fills at or before t; net = gross - fees. An instrument with marks and no fills
    adds nothing; no marks and no fills: an empty curve."""
    groups = _by_instrument(fills)
    times = [marks.ts_ns[i] for i in sorted(marks.ts_ns)]
    times += [np.array([f.ts_ns for f in fs], np.int64) for _, fs in sorted(groups.items())]
    t = np.unique(np.concatenate(times)) if times else np.zeros(0, np.int64)
    gross = np.zeros(t.size)
    fees = np.zeros(t.size)
    for iid in sorted(groups):
        g, c = _instrument_curve(groups[iid], marks.ts_ns.get(iid), marks.mid.get(iid), t)
        gross += g
        fees += c
    return Equity(ts_ns=t.astype(np.int64), gross=gross, fees=fees, net=gross - fees)


def round_trips(fills: Iterable[Fill]) -> list[RoundTrip]:
    """The completed round trips of ``fills``, per instrument (in id order), each in time order.

    A round trip opens with the fill that takes the instrument's position away from zero and closes
    with the fill that brings it back to zero (several fills may reduce it first: partial closes) or
    through zero (a flip: the part of the fill that reaches zero closes this trip, the rest opens the
    next one at the same fill). Its ``gross`` is the sum of its fills' cash flows (``-side * price *
    size``, the split fill's closing part only); as it starts and ends flat, that is its realized P&L,
    the same under FIFO or average-price matching. ``fees``: its fills' fees, a split fill's pro rata by
    size. A position still open at the end is not a round trip (not listed).
    """
    out: list[RoundTrip] = []
    for iid, fs in sorted(_by_instrument(fills).items()):
        pos = gross = fees = 0.0
        open_ts = 0
        for f in fs:
            left = f.size  # the part of this fill not yet booked
            if pos and (pos > 0) != (f.side > 0):  # reducing: close what it can
                close = min(abs(pos), f.size)
                gross -= f.side * f.price * close
                fees += f.fee * close / f.size
                left = f.size - close
                pos = 0.0 if close >= abs(pos) - _DUST * max(abs(pos), f.size) else pos + f.side * close
                if pos == 0.0:
                    out.append(RoundTrip(instrument_id=iid, open_ts_ns=open_ts, close_ts_ns=f.ts_ns, gross=gross,
                                         fees=fees, net=gross - fees))
                    gross = fees = 0.0
                if left <= _DUST * f.size:
                    continue
            if pos == 0.0:
                open_ts = f.ts_ns
            gross -= f.side * f.price * left
            fees += f.fee * left / f.size
            pos += f.side * left
    return out


def win_rate(trips: Sequence[RoundTrip]) -> float | None:
    """The share of round trips with ``net > 0`` (a trip at exactly zero is not a win); None: no trips."""
    if not trips:
        return None
    return sum(1 for r in trips if r.net > 0) / len(trips)


def drawdown(net, capital: float) -> np.ndarray:
    """The drawdown at each point of the net P&L curve ``net``: ``(peak_t - net_t) / (capital + peak_t)``
    with ``peak_t`` the running maximum of ``net`` starting from 0 (a curve that starts below zero is
    already down from the flat start). ``capital`` (quote currency) > 0, so the denominator is too.

    Raises:
        ValueError: ``capital`` not finite and > 0, or ``net`` not one-dimensional.
    """
    if not (math.isfinite(capital) and capital > 0):
        raise ValueError(f"capital must be finite and > 0, got {capital!r}")
    arr = np.asarray(net, np.float64)
    if arr.ndim != 1:
        raise ValueError(f"net must be one-dimensional, got shape {arr.shape}")
    peak = np.maximum.accumulate(np.maximum(arr, 0.0)) if arr.size else arr
    return (peak - arr) / (capital + peak)


def max_drawdown(net, capital: float) -> float:
    """The largest ``drawdown`` of ``net`` (see there: the denominator is capital plus the peak so far),
    a fraction; 0.0 for an empty or never-falling curve. Raises ValueError as ``drawdown``."""
    dd = drawdown(net, capital)
    return float(max(dd.max(), 0.0)) if dd.size else 0.0


def sharpe_per_hour(ts_ns, net, *, bucket_ns: int = HOUR_NS) -> float | None:
    """The Sharpe ratio of the net P&L curve, per hour, without a risk-free rate.

    Estimator: buckets of ``bucket_ns`` from the first time (bucket ``k`` holds ``ts_0 + k * bucket_ns
    <= t < ts_0 + (k + 1) * bucket_ns``), through the one holding the last time (partial last bucket
    included). ``E_k``: the net at the last point at or before bucket ``k``'s end (carried over an empty
    bucket); ``E_-1 = 0`` (P&L starts flat). Increments ``r_k = E_k - E_(k-1)``; the ratio is
    ``mean(r) / std(r, ddof=1) * sqrt(HOUR_NS / bucket_ns)`` (with shorter buckets, scaled to one hour
    assuming independent increments). None with fewer than 2 buckets or when every increment is equal
    (std 0: e.g. a strategy that never trades).

    Raises:
        ValueError: ``ts_ns`` decreases or is not integer, lengths differ, ``bucket_ns`` <= 0.
    """
    if bucket_ns <= 0:
        raise ValueError(f"bucket_ns must be > 0, got {bucket_ns!r}")
    t = _as_times(ts_ns, "ts_ns")
    v = np.asarray(net, np.float64)
    if v.shape != t.shape:
        raise ValueError(f"ts_ns has {t.size} points but net has shape {v.shape}")
    if t.size == 0:
        return None
    b = (t - t[0]) // bucket_ns
    n = int(b[-1]) + 1
    if n < 2:
        return None
    ends = np.searchsorted(b, np.arange(n), side="right") - 1  # the last point of each bucket or before
    e = v[ends]
    r = np.diff(np.concatenate(([0.0], e)))
    sd = float(np.std(r, ddof=1))
    if not sd > 0:
        return None
    return float(np.mean(r)) / sd * math.sqrt(HOUR_NS / bucket_ns)


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x``, ties given the average of the ranks they span (fractional ranking)."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.flatnonzero(np.concatenate(([True], xs[1:] != xs[:-1])))
    ends = np.concatenate((starts[1:], [x.size]))
    ranks = np.empty(x.size, np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(x, y) -> float | None:
    """Spearman's rank correlation: the Pearson correlation of the average ranks (ties share the mean
    of their ranks). None with fewer than ``MIN_IC_PAIRS`` pairs or when either side is constant."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < MIN_IC_PAIRS:
        return None
    rx, ry = _average_ranks(x), _average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float(np.dot(dx, dx)) * float(np.dot(dy, dy)))
    if not den > 0:
        return None
    return max(-1.0, min(1.0, float(np.dot(dx, dy)) / den))


def forward_returns(sig_ts_ns, mark_ts_ns, mark_mid, horizon_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(usable, return): for each signal time ``t``, the mid return ``mid(t + h) / mid(t) - 1``, with
    ``mid(x)`` the last mark at or before ``x`` (of equal times, the last). A signal is usable only when
    a mark exists at or before ``t`` and the marks reach ``t + h`` (the last mark's time >= t + h):
    the future beyond the data is unknown, not flat. Arrays as ``information_coefficient`` checks them."""
    st = np.asarray(sig_ts_ns, np.int64)
    if mark_ts_ns.size == 0:
        return np.zeros(st.size, bool), np.zeros(st.size)
    j0 = np.searchsorted(mark_ts_ns, st, side="right") - 1
    jh = np.searchsorted(mark_ts_ns, st + horizon_ns, side="right") - 1
    usable = (j0 >= 0) & (st + horizon_ns <= mark_ts_ns[-1])
    ret = mark_mid[np.maximum(jh, 0)] / mark_mid[np.maximum(j0, 0)] - 1.0
    return usable, np.where(usable, ret, 0.0)


def information_coefficient(sig_ts_ns, sig_value, mark_ts_ns, mark_mid,
                            horizons_ns: Iterable[int]) -> dict[int, float | None]:
    """Per horizon ``h`` (ns, keys in the order given): the Spearman rank correlation (``spearman``:
    ties at average ranks) between the signal's values and the forward mid returns over ``h``
    (``forward_returns``: the mid at ``t + h`` from the last mark at or before ``t + h``), over the
    usable signals whose value is finite. None where fewer than ``MIN_IC_PAIRS`` pairs remain or either
    side is constant.

    Raises:
        ValueError: signal times / values or mark times / mids differ in length, times decrease or are
            not integer, a mid is not finite and > 0, a horizon is not a positive integer.
    """
    st = _as_times(sig_ts_ns, "sig_ts_ns")
    sv = np.asarray(sig_value, np.float64)
    if sv.shape != st.shape:
        raise ValueError(f"sig_ts_ns has {st.size} points but sig_value has shape {sv.shape}")
    marks = MarkSeries({0: mark_ts_ns}, {0: mark_mid})  # validates
    mt, mm = marks.ts_ns[0], marks.mid[0]
    out: dict[int, float | None] = {}
    for h in horizons_ns:
        if not (isinstance(h, (int, np.integer)) and h > 0):
            raise ValueError(f"a horizon must be a positive integer of ns, got {h!r}")
        usable, ret = forward_returns(st, mt, mm, int(h))
        ok = usable & np.isfinite(sv)
        out[int(h)] = spearman(sv[ok], ret[ok])
    return out


def alpha_decay(ic_by_horizon: Mapping[int, float | None]) -> float | None:
    """``1 - IC(longest horizon) / IC(shortest horizon)``: 0 when the signal predicts as well far out as
    near, 1 when its edge is gone at the longest horizon (above 1 when it reverses). None with fewer
    than two horizons, either IC missing (None), or ``|IC(shortest)| < IC_ZERO`` (no edge to decay)."""
    if len(ic_by_horizon) < 2:
        return None
    short, long_ = ic_by_horizon[min(ic_by_horizon)], ic_by_horizon[max(ic_by_horizon)]
    if short is None or long_ is None or abs(short) < IC_ZERO:
        return None
    return 1.0 - long_ / short


def stability_score(alpha_decay: float | None, win_rate: float | None) -> float | None:
    """``(1 - alpha_decay) * 0.4 + win_rate * 0.4`` (design document 000); None when either is None."""
    if alpha_decay is None or win_rate is None:
        return None
    return (1.0 - alpha_decay) * 0.4 + win_rate * 0.4


def risk_adjusted_lift(win_rate: float | None, max_drawdown: float | None) -> float | None:
    """``(win_rate - 0.5) / (max_drawdown + 0.01)`` (design document 000); None when either is None."""
    if win_rate is None or max_drawdown is None:
        return None
    return (win_rate - 0.5) / (max_drawdown + 0.01)


def _verdict(value: float | None, safe, warn) -> str:
    if value is None:
        return NA
    return SAFE if safe(value) else WARN if warn(value) else WATCH


def verdicts(alpha_decay: float | None, win_rate: float | None, max_drawdown: float | None) -> dict[str, str]:
    """SAFE / WATCH / WARN per axis (N/A for a None value), keys ``alpha_decay``, ``win_rate``,
    ``max_drawdown``: alpha decay SAFE < 0.25, WARN > 0.4; win rate SAFE > 0.62, WARN < 0.58; max
    drawdown SAFE < 0.12, WARN > 0.18; WATCH otherwise (a value exactly on a threshold is WATCH)."""
    return {
        "alpha_decay": _verdict(alpha_decay, lambda v: v < ALPHA_DECAY_SAFE_BELOW, lambda v: v > ALPHA_DECAY_WARN_ABOVE),
        "win_rate": _verdict(win_rate, lambda v: v > WIN_RATE_SAFE_ABOVE, lambda v: v < WIN_RATE_WARN_BELOW),
        "max_drawdown": _verdict(max_drawdown, lambda v: v < MAX_DRAWDOWN_SAFE_BELOW,
                                 lambda v: v > MAX_DRAWDOWN_WARN_ABOVE),
    }


def _signal_ic(signals, marks: MarkSeries, horizons_ns) -> dict[int, float | None]:
    """``summarize``'s IC by horizon (ns): ``signals`` is (ts, values) for the one instrument of
    ``marks``, or a mapping instrument id -> (ts, values), pooled: every instrument's (signal, forward
    return) pairs ranked together."""
    if not isinstance(signals, Mapping):
        if len(marks.ts_ns) != 1:
            raise ValueError(f"signals as (ts, values) need marks of exactly one instrument, got "
                             f"{sorted(marks.ts_ns)}; pass a mapping instrument id -> (ts, values)")
        signals = {next(iter(marks.ts_ns)): signals}
    xs, rs = {h: [] for h in horizons_ns}, {h: [] for h in horizons_ns}
    for iid in sorted(signals):
        if iid not in marks.ts_ns:
            raise ValueError(f"signals for instrument {iid}, which has no marks")
        ts, val = signals[iid]
        st, sv = _as_times(ts, f"signals[{iid}] times"), np.asarray(val, np.float64)
        if sv.shape != st.shape:
            raise ValueError(f"signals[{iid}]: {st.size} times but values of shape {sv.shape}")
        for h in horizons_ns:
            usable, ret = forward_returns(st, marks.ts_ns[iid], marks.mid[iid], h)
            ok = usable & np.isfinite(sv)
            xs[h].append(sv[ok])
            rs[h].append(ret[ok])
    return {h: spearman(np.concatenate(xs[h]), np.concatenate(rs[h])) for h in horizons_ns}


def _last(a: np.ndarray) -> float:
    return float(a[-1]) if a.size else 0.0


def summarize(fills: Sequence[Fill], marks: MarkSeries, *, capital: float, signals=None,
              horizons_ns: Sequence[int] = DEFAULT_HORIZONS_NS, sharpe_bucket_ns: int = SHARPE_BUCKET_NS) -> dict:
    """Every metric of one run, the results.json keys: ``net_pnl``, ``gross_pnl``, ``fees`` (the equity
    curve's last point; 0.0 when empty), ``trades`` (fills), ``round_trips`` (completed), ``turnover``
    (sum of ``|price * size|``), ``win_rate``, ``max_drawdown`` (of the net curve against ``capital``),
    ``sharpe`` (``sharpe_per_hour`` over ``sharpe_bucket_ns`` increments, default one minute, scaled to
    one hour), ``ic`` (horizon in ms -> IC; {} without ``signals``), ``alpha_decay``,
    ``stability_score``, ``risk_adjusted_lift``, ``verdicts``.

    ``signals``: None, (ts_ns array, value array) when ``marks`` hold one instrument, or a mapping
    instrument id -> (ts, values) (pairs of all instruments ranked together).

    Raises:
        ValueError: ``capital`` not > 0, a horizon not a positive whole number of ms, signals that do
            not fit the marks (named), or the arrays' checks of the functions above.
    """
    for h in horizons_ns:
        if not (isinstance(h, (int, np.integer)) and h > 0 and h % NS_PER_MS == 0):
            raise ValueError(f"a horizon must be a positive whole number of ms in ns, got {h!r}")
    eq = equity_curve(fills, marks)
    trips = round_trips(fills)
    wr = win_rate(trips)
    mdd = max_drawdown(eq.net, capital)
    ic_ns = _signal_ic(signals, marks, [int(h) for h in horizons_ns]) if signals is not None else {}
    ad = alpha_decay(ic_ns)
    return {
        "net_pnl": _last(eq.net), "gross_pnl": _last(eq.gross), "fees": _last(eq.fees),
        "trades": len(fills), "round_trips": len(trips),
        "turnover": float(math.fsum(abs(f.price * f.size) for f in fills)),
        "win_rate": wr, "max_drawdown": mdd,
        "sharpe": sharpe_per_hour(eq.ts_ns, eq.net, bucket_ns=sharpe_bucket_ns),
        "ic": {h // NS_PER_MS: v for h, v in ic_ns.items()},
        "alpha_decay": ad, "stability_score": stability_score(ad, wr),
        "risk_adjusted_lift": risk_adjusted_lift(wr, mdd), "verdicts": verdicts(ad, wr, mdd),
    }
