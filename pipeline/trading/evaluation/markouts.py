"""Markouts of fills, and what the fills an EMERGENCY cancel avoided would have been worth; sans I/O,
pure (numpy, msgspec): fills, marks and the market's path in, numbers out, the same floats for the same
inputs (instruments in increasing id order, sums in a fixed order).

- The mid at ``x`` (``mid_at``): the last mark at or before ``x`` (of equal times, the last). It is
  known only when the marks reach ``x`` (the last mark's time >= ``x``): the future beyond the data is
  unknown, not flat.
- The markout of a fill at horizon ``h``: ``side * (mid(t_fill + h) - price)``, ``side`` +1 for a buy
  and -1 for a sell: what the fill earned against where the market was ``h`` later (negative: the fill
  was adversely selected). In ticks of its instrument (``/ tick``), in bps of the fill price
  (``/ price * 10_000``) and in quote currency (``* size``). A fill whose ``t_fill + h`` the marks do
  not reach is left out at that horizon and counted as ``unresolved``.
- ``markout_summary``: per horizon, over the resolved fills: ``count``, ``unresolved``, per-fill mean
  and median in ticks and in bps (unweighted: each fill counts once), ``sum_ticks``, ``sum_quote`` (the
  size-weighted total, what the fills' selection cost or earned). Ticks of instruments with different
  ticks are added as they are: compare across instruments in bps.

The fills an EMERGENCY cancel avoided (``avoided_fills``): each order the exchange removed on a cancel
the fast path sent for an EMERGENCY (``CancelledOrder``: its time, side, price, the size still
working). Had it stayed for ``window_ns`` more, would it have filled? Two rules on the market's path
after the cancel (``MarketPath``: the best bid / ask of every BOOK and the price of every public
trade), both in ``(t_cancel, t_cancel + window_ns]``:

- ``through`` (certain): a trade strictly through the order's price (below a bid, above an ask) or
  an opposite best strictly beyond it. Whatever queue was ahead of it, that price level was emptied:
  it would have filled. This is a lower bound on the fills avoided.
- ``touch`` (at most): a trade at or through its price, or an opposite best at or beyond it. The
  queue model (``pipeline.venue.queue``) would fill it only once the size displayed ahead of it at
  its price had traded or been cancelled, which this path does not show: an upper bound.

A would-be fill happens at the first such time, at the order's own price, for its working size, as a
maker; its markouts are taken as above. Per rule and horizon: the count, ``adverse_quote`` (the sum
of the negative would-be markouts, as a positive amount: the adverse selection the cancels avoided),
``good_quote`` (the sum of the positive ones: the good fills given up), ``sum_quote``,
``sum_ticks``, and ``net_quote``: ``sum_quote`` less the maker fees those fills would have paid
(below 0: the cancels saved that much; above 0: they gave up that much); per rule, the would-be
fills' count, notional and maker fees (``fees_quote``).

Bad input raises ``ValueError`` naming the field (``CancelledOrder``, a tick that is not > 0, a window
or horizon that is not a positive integer); nothing else raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec
import numpy as np

from pipeline.trading.evaluation.metrics import NS_PER_MS, NS_PER_S, Fill, MarkSeries
from pipeline.trading.messages import TRADE_STRUCT, Kind

#: the horizons every fill is marked out at (issue #30): 100 ms, 1 s, 5 s of market time
MARKOUT_HORIZONS_NS: tuple[int, ...] = (100 * NS_PER_MS, NS_PER_S, 5 * NS_PER_S)
#: how long a cancelled order is followed to decide whether it would have filled: 5 s of market time,
#: the longest markout horizon (longer than the risk gateway's 2 s EMERGENCY cool-down, during which
#: nothing is placed again, and than a quote's usual wait for a fill on the calibrated market)
AVOID_WINDOW_NS = 5 * NS_PER_S
RULES = ("through", "touch")


class CancelledOrder(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One of our orders the exchange removed on a cancel: when (the exchange's time), whose, its side
    (+1 bid / -1 ask), price, the size that was still working, and why the cancel was sent (the
    gateway event's ``why``: ``emergency``, ``reprice``, ...).

    Raises:
        ValueError: ``side`` not +1 / -1, ``price`` not finite and > 0, ``size`` not finite and >= 0.
    """

    ts_ns: int
    instrument_id: int
    side: int
    price: float
    size: float
    why: str = ""

    def __post_init__(self) -> None:
        if self.side not in (1, -1):
            raise ValueError(f"CancelledOrder.side must be +1 or -1, got {self.side!r}")
        if not (math.isfinite(self.price) and self.price > 0):
            raise ValueError(f"CancelledOrder.price must be finite and > 0, got {self.price!r}")
        if not (math.isfinite(self.size) and self.size >= 0):
            raise ValueError(f"CancelledOrder.size must be finite and >= 0, got {self.size!r}")


class MarketPath(msgspec.Struct, frozen=True, kw_only=True):
    """Per instrument id: the time (int64, non-decreasing), best bid and best ask (float64) of every
    accepted BOOK, and the time and price of every public trade."""

    book_ts: dict[int, np.ndarray]
    bid: dict[int, np.ndarray]
    ask: dict[int, np.ndarray]
    trade_ts: dict[int, np.ndarray]
    trade_px: dict[int, np.ndarray]


def market_path(table, events: Sequence) -> MarketPath:
    """The ``MarketPath`` of a market: the books from a ``decisions.FeatureTable`` (best bid / ask =
    ``ref_mid`` -/+ ``ref_spread`` / 2, what the feature stage read from the BOOK), the trades from
    the tape's TRADE events (``(ts_ns, kind, instrument_id, payload)``) at their tape time."""
    rows = table.rows
    iid = rows["instrument_id"].astype(np.int64)
    mid, half = rows["ref_mid"].astype(np.float64), rows["ref_spread"].astype(np.float64) / 2.0
    book_ts, bid, ask = {}, {}, {}
    for i in sorted(set(iid.tolist())):
        sel = iid == i
        book_ts[i], bid[i], ask[i] = table.ts_ns[sel].astype(np.int64), (mid - half)[sel], (mid + half)[sel]
    trades: dict[int, tuple[list, list]] = {}
    unpack = TRADE_STRUCT.unpack_from
    for t, kind, i, payload in events:
        if kind == Kind.TRADE:
            ts, px = trades.setdefault(i, ([], []))
            ts.append(t)
            px.append(unpack(payload, 0)[4])
    trade_ts = {i: np.array(v[0], np.int64) for i, v in sorted(trades.items())}
    trade_px = {i: np.array(v[1], np.float64) for i, v in sorted(trades.items())}
    return MarketPath(book_ts=book_ts, bid=bid, ask=ask, trade_ts=trade_ts, trade_px=trade_px)


def _check_horizons(horizons_ns: Iterable[int]) -> list[int]:
    out = []
    for h in horizons_ns:
        if not (isinstance(h, (int, np.integer)) and h > 0 and h % NS_PER_MS == 0):
            raise ValueError(f"a horizon must be a positive whole number of ms in ns, got {h!r}")
        out.append(int(h))
    return out


def _tick_of(ticks: Mapping[int, float], iid: int) -> float:
    t = ticks.get(iid)
    if t is None or not (math.isfinite(t) and t > 0):
        raise ValueError(f"ticks[{iid}] must be a finite tick size > 0, got {t!r}")
    return float(t)


def mid_at(marks: MarkSeries, iid: int, ts_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(known, mid) at each time of ``ts_ns`` for instrument ``iid`` (see the module docstring)."""
    ts_ns = np.asarray(ts_ns, np.int64)
    mt = marks.ts_ns.get(iid)
    if mt is None or mt.size == 0:
        return np.zeros(ts_ns.size, bool), np.zeros(ts_ns.size)
    j = np.searchsorted(mt, ts_ns, side="right") - 1
    known = (j >= 0) & (ts_ns <= mt[-1])
    return known, np.where(known, marks.mid[iid][np.maximum(j, 0)], 0.0)


def _markouts(ts, side, px, size, tick, marks: MarkSeries, iid: int, h: int) -> tuple:
    """(known, ticks, bps, quote) per fill of one instrument at horizon ``h``."""
    known, mid = mid_at(marks, iid, ts + h)
    m = np.where(known, side * (mid - px), 0.0)
    return known, m / tick, m / px * 10_000.0, m * size


def _summary(known: np.ndarray, ticks: np.ndarray, bps: np.ndarray, quote: np.ndarray) -> dict:
    n = int(known.sum())
    tk, bp, q = ticks[known], bps[known], quote[known]
    return {"count": n, "unresolved": int(known.size - n),
            "mean_ticks": float(tk.mean()) if n else None, "median_ticks": float(np.median(tk)) if n else None,
            "mean_bps": float(bp.mean()) if n else None, "median_bps": float(np.median(bp)) if n else None,
            "sum_ticks": float(math.fsum(tk.tolist())), "sum_quote": float(math.fsum(q.tolist()))}


def fill_markouts(fills: Sequence[Fill], marks: MarkSeries, ticks: Mapping[int, float],
                  horizon_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per fill, in the order given: (known, ticks, bps, quote) at ``horizon_ns`` (module docstring;
    an unknown markout is 0 there).

    Raises:
        ValueError: a fill's instrument without a tick > 0 in ``ticks``, a bad horizon.
    """
    (h,) = _check_horizons([horizon_ns])
    n = len(fills)
    out = np.zeros(n, bool), np.zeros(n), np.zeros(n), np.zeros(n)
    iids = np.array([f.instrument_id for f in fills], np.int64)
    for iid in sorted(set(iids.tolist())):
        k = np.flatnonzero(iids == iid)
        fs = [fills[j] for j in k]
        res = _markouts(np.array([f.ts_ns for f in fs], np.int64), np.array([f.side for f in fs], np.float64),
                        np.array([f.price for f in fs]), np.array([f.size for f in fs]), _tick_of(ticks, iid), marks,
                        iid, h)
        for dst, src in zip(out, res):
            dst[k] = src
    return out


def markout_summary(fills: Sequence[Fill], marks: MarkSeries, ticks: Mapping[int, float],
                    horizons_ns: Sequence[int] = MARKOUT_HORIZONS_NS) -> dict[int, dict]:
    """Per horizon (key: ms), the summary of every fill's markout (module docstring).

    Raises:
        ValueError: as ``fill_markouts``.
    """
    return {h // NS_PER_MS: _summary(*fill_markouts(fills, marks, ticks, h)) for h in _check_horizons(horizons_ns)}


def would_fill_ns(order: CancelledOrder, path: MarketPath, window_ns: int, rule: str) -> int | None:
    """The first time in ``(order.ts_ns, order.ts_ns + window_ns]`` at which ``order`` would have
    filled under ``rule`` (``through`` | ``touch``, module docstring); None when it would not have.

    Raises:
        ValueError: an unknown rule, a window that is not a positive integer.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not (isinstance(window_ns, (int, np.integer)) and window_ns > 0):
        raise ValueError(f"window_ns must be a positive integer, got {window_ns!r}")
    iid, p, t0, t1 = order.instrument_id, order.price, order.ts_ns, order.ts_ns + int(window_ns)
    touch = rule == "touch"
    first = None
    tt = path.trade_ts.get(iid)
    if tt is not None and tt.size:
        a, b = np.searchsorted(tt, t0, side="right"), np.searchsorted(tt, t1, side="right")
        px = path.trade_px[iid][a:b]
        hit = (px <= p if touch else px < p) if order.side > 0 else (px >= p if touch else px > p)
        k = np.flatnonzero(hit)
        if k.size:
            first = int(tt[a + k[0]])
    bt = path.book_ts.get(iid)
    if bt is not None and bt.size:
        a, b = np.searchsorted(bt, t0, side="right"), np.searchsorted(bt, t1, side="right")
        opp = path.ask[iid][a:b] if order.side > 0 else path.bid[iid][a:b]
        hit = (opp <= p if touch else opp < p) if order.side > 0 else (opp >= p if touch else opp > p)
        k = np.flatnonzero(hit)
        if k.size:
            t = int(bt[a + k[0]])
            first = t if first is None else min(first, t)
    return first


def avoided_fills(cancelled: Sequence[CancelledOrder], path: MarketPath, marks: MarkSeries,
                  ticks: Mapping[int, float], *, maker_fee_bps: float, window_ns: int = AVOID_WINDOW_NS,
                  horizons_ns: Sequence[int] = MARKOUT_HORIZONS_NS) -> dict:
    """What the ``cancelled`` orders (with working size > 0) would have been as fills (module
    docstring): ``{"cancelled", "window_ms", "rules": {rule: {"would_fill", "notional", "fees_quote",
    "markouts": {ms: {"count", "unresolved", "sum_ticks", "sum_quote", "adverse_quote",
    "good_quote", "net_quote", "mean_ticks", "mean_bps"}}}}}``.

    Raises:
        ValueError: as ``would_fill_ns`` and ``fill_markouts``; a maker fee that is not finite.
    """
    if not math.isfinite(maker_fee_bps):
        raise ValueError(f"maker_fee_bps must be finite, got {maker_fee_bps!r}")
    hs = _check_horizons(horizons_ns)
    live = [c for c in cancelled if c.size > 0]
    out = {"cancelled": len(live), "window_ms": int(window_ns) // NS_PER_MS, "rules": {}}
    for rule in RULES:
        fills = []
        for c in live:
            t = would_fill_ns(c, path, window_ns, rule)
            if t is not None:
                fee = abs(c.price * c.size) * maker_fee_bps / 10_000.0
                fills.append(Fill(ts_ns=t, instrument_id=c.instrument_id, side=c.side, price=c.price, size=c.size,
                                  fee=fee, liquidity="maker"))
        fees = float(math.fsum(f.fee for f in fills))
        per_h = {}
        fee_arr = np.array([f.fee for f in fills], np.float64)
        for h in hs:
            known, tk, bp, q = fill_markouts(fills, marks, ticks, h)
            qk = q[known]
            per_h[h // NS_PER_MS] = {
                "count": int(known.sum()), "unresolved": int(known.size - known.sum()),
                "sum_ticks": float(math.fsum(tk[known].tolist())), "sum_quote": float(math.fsum(qk.tolist())),
                "adverse_quote": float(math.fsum((-qk[qk < 0]).tolist())),
                "good_quote": float(math.fsum(qk[qk > 0].tolist())),
                "net_quote": float(math.fsum(qk.tolist())) - float(math.fsum(fee_arr[known].tolist())),
                "mean_ticks": float(tk[known].mean()) if known.any() else None,
                "mean_bps": float(bp[known].mean()) if known.any() else None}
        out["rules"][rule] = {"would_fill": len(fills), "notional": float(math.fsum(abs(f.price * f.size)
                                                                                    for f in fills)),
                              "fees_quote": fees, "markouts": per_h}
    return out
