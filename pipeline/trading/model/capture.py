"""The real Bitget capture replayed into labelled feature rows, and its time split (step 5 of
``pipeline.trading.model``, when the capture is there)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.trading.features import F_VPIN, N_FEATURES, FeatureState, compute, update_from_trade
from pipeline.trading.messages import BOOK_DTYPE
from pipeline.trading.model.data import TrainParams, label

REPO = Path(__file__).resolve().parents[3]
CAPTURE = REPO.parent / "shared" / "data" / "bitget" / "BITGET.ws.1.0"


def _grid_tick(prices: list[float]) -> float:
    """The price grid of one instrument, from the smallest gap between distinct levels seen."""
    u = np.unique(np.round(np.asarray(prices), 12))
    gaps = np.diff(u)
    gaps = gaps[gaps > 1e-12]
    return float(gaps.min()) if gaps.size else 1.0


@dataclass
class CaptureData:
    """A capture's labelled rows, in time order across instruments (``capture_dataset``)."""

    X: np.ndarray  # float32 [n, 128]
    y: np.ndarray  # int64 [n]
    t_ns: np.ndarray  # int64 [n]: receive time of the row's BOOK (non-decreasing)
    inst: np.ndarray  # int64 [n]: instrument id
    info: dict


def capture_dataset(path: Path, p: TrainParams) -> CaptureData:
    """Feature rows and labels from a Bitget capture: every received frame decoded, books rebuilt
    (``BitgetBooks``), trades folded in, one row per emitted BOOK (the first of each instrument, the
    warm-up, dropped); the label is the mid move (ticks of that instrument's price grid) from this
    BOOK's receive time to the last BOOK received at or before receive time + ``horizon_ms``; rows
    whose horizon runs past the capture's last BOOK of the instrument are unlabelled (dropped). The
    rows of all instruments are merged in receive-time order (stable: ties keep instrument order)."""
    import orjson

    from pipeline.trading.bitget.book import Applied, BitgetBooks
    from pipeline.trading.bitget.capture import RECV, read_capture
    from pipeline.trading.bitget.protocol import make_decoder

    lines = [ln for ln in read_capture(path) if ln.direction == RECV]
    prices: dict[str, list[float]] = {}
    for ln in lines:  # each instrument's price grid, from its snapshots' top 50 levels
        if '"snapshot"' in ln.text and '"books' in ln.text:
            d = orjson.loads(ln.text)
            e = d["data"][0]
            prices.setdefault(d["arg"]["instId"], []).extend(float(px) for px, _ in e["bids"][:50] + e["asks"][:50])
    ticks = {s: _grid_tick(v) for s, v in sorted(prices.items())}
    ids = {s: i + 1 for i, s in enumerate(ticks)}
    dec, books, out = make_decoder(), BitgetBooks(ids), np.zeros(1, BOOK_DTYPE)
    states = {iid: FeatureState(iid, ticks[s]) for s, iid in ids.items()}
    per: dict[int, list] = {iid: [] for iid in ids.values()}  # (recv_ns, row, mid in ticks, warm)
    for ln in lines:
        d = dec.decode(ln.text)
        iid = ids.get(d.inst_id)
        if iid is None:
            continue
        t_ns = int(round(ln.receive_time_s * 1e9))
        n = books.fill_trades(d)
        for k in range(n):
            update_from_trade(states[iid], books.trade_records[k : k + 1].tobytes(), t_ns)
        if n == 0 and books.apply(d, out) is Applied.EMITTED:
            row = np.zeros(N_FEATURES, np.float32)
            st = states[iid]
            if compute(st, out.tobytes(), row, t_ns) == 0:
                mid = 0.5 * (float(out["bid_px"][0, 0]) + float(out["ask_px"][0, 0]))
                per[iid].append((t_ns, row, mid / st.tick_size, st.books > 1))
    Xs, ds, tl, il = [], [], [], []
    h_ns = p.horizon_ms * 1_000_000
    for iid, rows in per.items():
        if not rows:
            continue
        ts = np.array([r[0] for r in rows], np.int64)
        for t, row, mid, warm in rows:
            if not warm or ts[-1] < t + h_ns:
                continue
            j = int(np.searchsorted(ts, t + h_ns, side="right")) - 1
            Xs.append(row)
            ds.append(rows[j][2] - mid)
            tl.append(t)
            il.append(iid)
    order = np.argsort(np.array(tl, np.int64), kind="stable")
    X = np.array(Xs, np.float32).reshape(-1, N_FEATURES)[order]
    d = np.array(ds, np.float64)[order]
    info = {"instruments": len(ids), "books": int(sum(len(r) for r in per.values())), "labelled_rows": int(len(d)),
            "labelled_non_hold": int((np.abs(d) > p.dead_band_ticks).sum()), "ticks": ticks}
    return CaptureData(X, label(d, X[:, F_VPIN], p), np.array(tl, np.int64)[order], np.array(il, np.int64)[order], info)


CAPTURE_TRAIN_SHARE = 0.7  # rows before the 70 % quantile of a capture's receive times train, the rest is held out


def split_capture(t_ns: np.ndarray, horizon_ms: int) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(training row indices, held-out row indices, cut time in ns) of a capture's rows, whatever
    their order and instrument: one cut time for all instruments, the receive time of the row at the
    ``CAPTURE_TRAIN_SHARE`` share in time order; rows received before it train, rows in the next
    ``horizon_ms`` are dropped (the embargo: no training label reaches a held-out row's time), rows
    received at or after cut + ``horizon_ms`` are held out. No rows: both empty, cut None."""
    t = np.asarray(t_ns, np.int64)
    if not len(t):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    k = min(int(len(t) * CAPTURE_TRAIN_SHARE), len(t) - 1)
    cut = int(np.sort(t, kind="stable")[k])
    return np.flatnonzero(t < cut), np.flatnonzero(t >= cut + horizon_ms * 1_000_000), cut
