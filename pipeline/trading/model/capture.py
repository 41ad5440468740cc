"""Recorded Bitget captures (the cryptofeed line format, ``pipeline.trading.bitget.capture``) replayed
into feature rows: one ``Series`` per instrument, all of one capture in one split group (one clock).

Every RECV frame goes through the feed's decoder (``make_decoder``) and books (``BitgetBooks``:
snapshots, updates, checksums, sequence checks), trades into the feature state, each emitted BOOK
through ``pipeline.trading.features.compute`` at the frame's receive time; the first BOOK of each
instrument (no previous one) gives no row. What a capture cannot give is counted, never raised:
frames the decoder rejects or does not know, depth pushes the books refuse (checksum mismatch,
sequence gap, update before a snapshot...), BOOKs the features refuse. Mid moves, the touch and the
trades between rows (their lowest and highest price, for the EMERGENCY label's fills) are in ticks of
each instrument's price grid (the smallest gap between distinct prices of its snapshots' levels) and
the row's time is the receive time.

The vendored capture (``CAPTURE``: ``<repo>/data/bitget/BITGET.ws.1.0``, MIT, from cryptofeed; 686 lines, 8 spot
instruments, about 30 s of 2022-04-06) is short: a few hundred books, a handful of mid moves beyond
the dead band. It can show that the replay path works and how the model's rates look on real books;
it cannot train a model on its own nor score one with any confidence.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np

from pipeline.trading.features import N_FEATURES, FeatureState, Reason, compute, update_from_trade
from pipeline.trading.messages import BOOK_DTYPE
from pipeline.trading.model.data import Series

REPO = Path(__file__).resolve().parents[3]
CAPTURE = REPO / "data" / "bitget" / "BITGET.ws.1.0"


def file_sha256(path: Path) -> str:
    """The SHA-256 (hex) of a file's bytes.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def grid_tick(prices: list[float]) -> float:
    """The price grid of one instrument, from the smallest gap between distinct prices seen (1.0
    when there are fewer than two)."""
    u = np.unique(np.round(np.asarray(prices, np.float64), 12))
    gaps = np.diff(u)
    gaps = gaps[gaps > 1e-12]
    return float(gaps.min()) if gaps.size else 1.0


def _recv_texts(path: Path) -> list[tuple[float, str]]:
    from pipeline.trading.bitget.capture import RECV, read_capture

    return [(ln.receive_time_s, ln.text) for ln in read_capture(path) if ln.direction == RECV]


def _grid_ticks(frames: list[tuple[float, str]]) -> dict[str, float]:
    """Each instrument's tick, from the top 50 levels of its depth snapshots (instruments without a
    snapshot are absent)."""
    from pipeline.trading.bitget.frames import FrameKind
    from pipeline.trading.bitget.protocol import make_decoder

    dec = make_decoder()
    prices: dict[str, list[float]] = {}
    for _, text in frames:
        d = dec.decode(text)
        if d.kind == FrameKind.SNAPSHOT and d.books:
            for lv in d.books:
                prices.setdefault(d.inst_id, []).extend(float(x) for x in lv.bid_px[:50] + lv.ask_px[:50])
    return {s: grid_tick(v) for s, v in sorted(prices.items())}


def capture_series(path: Path) -> tuple[list[Series], dict]:
    """(one ``Series`` per instrument with rows, in instrument-name order; what the replay counted).

    Raises:
        CaptureError: a malformed line (``read_capture`` names it). OSError: the file cannot be read.
    """
    from pipeline.trading.bitget.book import Applied, BitgetBooks
    from pipeline.trading.bitget.frames import FrameKind
    from pipeline.trading.bitget.protocol import make_decoder

    path = Path(path)
    frames = _recv_texts(path)
    ticks = _grid_ticks(frames)
    ids = {s: i + 1 for i, s in enumerate(ticks)}
    dec, books, out = make_decoder(), BitgetBooks(ids), np.zeros(1, BOOK_DTYPE)
    states = {iid: FeatureState(iid, ticks[s]) for s, iid in ids.items()}
    rows: dict[int, list] = {iid: [] for iid in ids.values()}
    between = {iid: (np.inf, -np.inf) for iid in ids.values()}  # trade prices (ticks) since the last row
    kinds, applied, refused = Counter(), Counter(), Counter()
    for recv_s, text in frames:
        d = dec.decode(text)
        kinds[FrameKind(d.kind).name] += 1
        iid = ids.get(d.inst_id)
        if iid is None:
            continue
        t_ns = int(round(recv_s * 1e9))
        n = books.fill_trades(d)
        for k in range(n):
            update_from_trade(states[iid], books.trade_records[k : k + 1].tobytes(), t_ns)
            px = float(books.trade_records[k]["price"]) / ticks[d.inst_id]
            lo, hi = between[iid]
            between[iid] = (min(lo, px), max(hi, px))
        if n or d.kind not in (FrameKind.SNAPSHOT, FrameKind.UPDATE):
            continue
        code = books.apply(d, out)
        applied[Applied(code).name] += 1
        if code != Applied.EMITTED:
            continue
        row = np.zeros(N_FEATURES, np.float32)
        st = states[iid]
        r = compute(st, out.tobytes(), row, t_ns)
        if r != Reason.OK:
            refused[Reason(r).name] += 1
        elif st.books > 1:
            bid, ask = float(out["bid_px"][0, 0]), float(out["ask_px"][0, 0])
            tk = ticks[d.inst_id]
            rows[iid].append((t_ns, row, 0.5 * (bid + ask), bid / tk, ask / tk, *between[iid]))
            between[iid] = (np.inf, -np.inf)
    series = []
    for sym, iid in ids.items():
        r = rows[iid]
        if not r:
            continue
        t = np.array([x[0] for x in r], np.int64)
        order = np.argsort(t, kind="stable")
        mid, bid, ask, lo, hi = (np.array([x[c] for x in r], np.float64)[order] for c in range(2, 7))
        series.append(Series(f"capture:{path.name}:{sym}", np.stack([x[1] for x in r])[order], t[order],
                             mid / ticks[sym], ticks[sym] / mid * 1e4, f"capture:{path}", 1.0, bid, ask, lo, hi))
    info = {"path": str(path), "sha256": file_sha256(path), "frames": len(frames), "instruments": len(ids),
            "ticks": ticks, "frame_kinds": dict(sorted(kinds.items())), "depth_pushes": dict(sorted(applied.items())),
            "books_refused_by_features": dict(sorted(refused.items())), "rows": int(sum(len(s.t_ns) for s in series))}
    return series, info
