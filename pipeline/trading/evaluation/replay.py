"""Market sources for the evaluation, as one stream of timestamped BOOK / TRADE payloads (a ``Tape``).
Sans-I/O apart from reading the source files; no clock, no randomness beyond the seeded synthetic model.

Every source goes through the book building the pipeline's processes run, so the payloads are the
bytes the feature stage would read:

- ``synthetic_tape``: the paper venue's seeded market (``pipeline.venue.sources.SyntheticSource``),
  each step's book and trade events folded into the venue's books (``pipeline.venue.market.VenueMarket``),
  turned into the Bitget v2 frames the venue publishes, decoded by the feed's decoder and rebuilt by
  ``BitgetBooks`` (checksums verified): ``make up``'s market data path without the socket. Simulated
  time = the venue's data time (``SYNTH_START_MS`` + steps x ``step_ms``). ``synthetic_parts``: the
  same tape, each instrument replayed in a process of its own, which also runs a given step over
  that instrument's events (the evaluation computes its features there).
- ``capture_tape``: capture files in the cryptofeed line format (``pipeline.trading.bitget.capture``),
  every received frame through the same decoder and ``BitgetBooks`` (v1 frames decode too). Simulated
  time = the receive time. Several files are merged in receive-time order (stable). Instruments are
  the instIds met in book and trade pushes, ids 1, 2, ... in name order; the tick of each is read from
  the decimals of its snapshot prices (``"0.5000"``: tick 0.0001); its lot (the size our orders are
  counted in) is the smallest power of ten, at least the decimals of its sizes, worth at least
  ``CAPTURE_LOT_NOTIONAL`` at its first mid (a lot of the size decimals alone, 0.0001 AVAX, would be
  worth less than the risk gateway's minimum notional). A BOOK without a venue sequence number (v1
  frames carry none) gets the count of its instrument's BOOKs so far, as the paper venue numbers a
  replayed capture's updates (the risk gateway's order ids are made from it).
- ``itch_tape``: an ITCH 5.0 BinaryFILE through the ITCH feed's book (``pipeline.trading.itch``:
  framing, ``executions.ExecutionBook``, as ``procs.feed.ItchFeedAgent`` runs it): one BOOK per message
  that changed a tracked stock's book (flagged ``BOOK_FLAG_HIDDEN_REPORTED``), preceded by the TRADEs
  the message reported: one per execution (E, printable C: the resting order's side tells the
  aggressor's) and one per non-displayed execution (P: ``TRADE_FLAG_HIDDEN``, its side as given), the
  payloads the feed writes (trade id the match number, ``exch_ts_ns`` the ITCH timestamp: midnight 0).
  Simulated time = the ITCH timestamp (ns since midnight). Stocks: the directory's (R), or those asked
  for; tick ``ITCH_TICK``, lot 1 share.

Bad input never stops a replay: each rejected line, frame or message is counted in ``Tape.bad`` by
reason (``garbage_line``, ``frame_<reject>``, ``checksum_mismatch``, ``seq_gap``, ``awaiting_snapshot``,
``invalid_book``, ``stale``, ``truncated_frame``, ``incomplete_session``, ``itch_<event>``, ...).
``EvaluationError`` is raised only for what is not data: a file that cannot be read, a source with no
market in it, a symbol asked for that the ITCH file does not list.
"""

from __future__ import annotations

import gc
import math
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np

from pipeline.trading.messages import Kind

SYNTH_START_MS = 1_700_000_000_000  # the synthetic market's data time at step 0 (2023-11-14T22:13:20Z)
ITCH_TICK = 0.01  # US equities priced >= $1 trade on a cent grid (Reg NMS rule 612)
ITCH_LOT = 1.0  # one share
NS_PER_MS = 1_000_000
#: a capture instrument's lot is worth at least this much (quote) at its first mid: the synthetic
#: market's lots are worth 5 (0.0001 BTC at 50,000; 0.001 ETH at 5,000)
CAPTURE_LOT_NOTIONAL = 5.0


class EvaluationError(Exception):
    """A request the evaluation cannot carry out (bad variant, unreadable file, wrong model); the
    message names what is wrong."""


class TapeInstrument(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """An instrument of a tape: the config's shape (id, symbol, tick_size, lot_size)."""

    id: int
    symbol: str
    tick_size: float
    lot_size: float


class MarketEvent(NamedTuple):
    """One market message: when (simulated ns), what (``Kind.BOOK`` / ``Kind.TRADE``), whose, the payload."""

    ts_ns: int
    kind: int
    instrument_id: int
    payload: bytes


@dataclass
class Tape:
    """A replayed market: its instruments, its events in time order, the bad input by reason, counts,
    and a one-line description of the source."""

    instruments: tuple[TapeInstrument, ...]
    events: list[MarketEvent]
    bad: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    source: str = ""

    @property
    def books(self) -> int:
        return sum(1 for e in self.events if e.kind == Kind.BOOK)

    @property
    def span_ns(self) -> int:
        """Simulated time from the first event to the last (0 for fewer than two)."""
        return self.events[-1].ts_ns - self.events[0].ts_ns if len(self.events) > 1 else 0


def _bump(d: dict[str, int], key: str, n: int = 1) -> None:
    d[key] = d.get(key, 0) + n


# ------------------------------------------------------------------------------------- synthetic
def _synthetic_events(instruments: Sequence[TapeInstrument], seed: int, steps: int, start_ms: int,
                      params=None) -> tuple[list[MarketEvent], dict[str, int], int, int]:
    """(events, bad input, checksums verified, step_ms) of ``synthetic_tape``'s market for ``instruments``.

    Raises:
        EvaluationError: what the venue refuses (no instrument, a bad tick / lot).
    """
    from pipeline.trading.bitget.book import Applied, BitgetBooks
    from pipeline.trading.bitget.protocol import make_decoder
    from pipeline.venue.errors import VenueError
    from pipeline.venue.market import BookEvent, VenueMarket
    from pipeline.venue.sources import InstrumentSpec, SyntheticSource

    try:
        src = SyntheticSource([InstrumentSpec(i.symbol, i.tick_size, i.lot_size) for i in instruments], seed=seed,
                              start_ms=start_ms, params=params)
        venue = VenueMarket([i.symbol for i in instruments])
    except VenueError as exc:
        raise EvaluationError(f"synthetic market: {exc}") from None
    ids = {i.symbol: i.id for i in instruments}
    dec, books, out = make_decoder(), BitgetBooks(ids), bytearray(504)
    events: list[MarketEvent] = []
    bad: dict[str, int] = {}
    BOOK, TRADE, EMITTED, new = Kind.BOOK, Kind.TRADE, Applied.EMITTED, tuple.__new__
    decode, apply_book, books_frame, apply = dec.decode, venue.apply_book, venue.books_frame, books.apply
    pending = list(src.initial_events())
    for step in range(steps + 1):
        if step:
            pending = src.take(1)
        for ev in pending:
            ts_ns = ev.ts_ms * NS_PER_MS
            if isinstance(ev, BookEvent):
                ch = apply_book(ev)
                if ch is None:
                    continue
                code = apply(decode(books_frame(ch)), out)
                if code == EMITTED:
                    events.append(new(MarketEvent, (ts_ns, BOOK, ids[ev.inst_id], bytes(out))))
                else:
                    _bump(bad, Applied(code).name.lower())
            else:
                te = venue.apply_trades(ev)
                if te is None:
                    continue
                n = books.fill_trades(decode(venue.trades_frame(te)))
                rec = books.trade_records
                size = rec.itemsize
                raw = rec[:n].tobytes()
                iid = ids[ev.inst_id]
                for k in range(0, n * size, size):
                    events.append(new(MarketEvent, (ts_ns, TRADE, iid, raw[k:k + size])))
    return events, bad, books.checksums_verified, src.step_ms


def synthetic_tape(instruments: Sequence[TapeInstrument], *, seed: int, steps: int, start_ms: int = SYNTH_START_MS,
                   workers: int = 1, params=None) -> Tape:
    """``steps`` steps of the paper venue's seeded market for ``instruments`` (see the module docstring);
    ``params``: its ``pipeline.venue.synthetic.SyntheticParams`` (None: the venue's default).

    Each instrument's market is seeded from the seed and its symbol alone (``SyntheticSource``), so with
    ``workers`` > 1 the instruments are replayed in that many processes and merged in time
    (``synthetic_parts``): the same tape as one source for all of them (``workers`` = 1).

    Raises:
        EvaluationError: no instrument, steps < 1, workers < 1, or what the venue refuses (a bad tick / lot).
    """
    _check_synthetic(instruments, steps, workers)
    if min(workers, len(instruments)) > 1:
        return synthetic_parts(instruments, seed=seed, steps=steps, start_ms=start_ms, workers=workers,
                               params=params).tape
    events, bad, verified, step_ms = _synthetic_events(instruments, seed, steps, start_ms, params)
    return _synthetic(instruments, seed, steps, events, bad, verified, step_ms)


def _check_synthetic(instruments: Sequence[TapeInstrument], steps: int, workers: int) -> None:
    if steps < 1:
        raise EvaluationError(f"the synthetic market needs at least one step, got {steps}")
    if workers < 1:
        raise EvaluationError(f"workers must be >= 1, got {workers}")
    if not instruments:
        raise EvaluationError("the synthetic market needs at least one instrument")


def _synthetic(instruments: Sequence[TapeInstrument], seed: int, steps: int, events: list[MarketEvent],
               bad: dict[str, int], verified: int, step_ms: int) -> Tape:
    return Tape(tuple(instruments), events, bad, {"steps": steps, "checksums_verified": verified},
                f"synthetic market (pipeline.venue.sources.SyntheticSource), seed {seed}, {steps} steps of {step_ms} "
                f"ms, {len(instruments)} instruments")


class InstrumentPart(NamedTuple):
    """One instrument of ``synthetic_parts``: where its events sit in the merged tape (``positions``,
    int64, in its own order), what ``per_instrument`` made of them (None without one), and the
    seconds its process spent replaying it and running ``per_instrument`` (wall times: not results)."""

    instrument: TapeInstrument
    positions: np.ndarray
    result: Any
    replay_s: float
    result_s: float


class SyntheticParts(NamedTuple):
    """``synthetic_parts``'s answer: the merged tape, one ``InstrumentPart`` per instrument (the
    tape's order), and the processes that replayed them."""

    tape: Tape
    parts: list[InstrumentPart]
    processes: int


class _Packed(NamedTuple):
    """One instrument's events as a few buffers (what a worker process sends back: cheap to pickle)."""

    ts_ns: np.ndarray  # int64
    kinds: bytes  # Kind per event
    instrument_ids: np.ndarray  # int64
    sizes: np.ndarray  # int64: payload lengths
    blob: bytes  # the payloads, one after another


_KIND_OF = {int(k): k for k in Kind}


def _pack(events: list[MarketEvent]) -> _Packed:
    return _Packed(np.fromiter((e.ts_ns for e in events), np.int64, len(events)), bytes(e.kind for e in events),
                   np.fromiter((e.instrument_id for e in events), np.int64, len(events)),
                   np.fromiter((len(e.payload) for e in events), np.int64, len(events)),
                   b"".join(e.payload for e in events))


def _unpack(p: _Packed) -> list[MarketEvent]:
    ends = np.cumsum(p.sizes).tolist()
    starts = [0] + ends[:-1]
    kind_of, blob, new = _KIND_OF, p.blob, tuple.__new__
    return [new(MarketEvent, (t, kind_of[k], i, blob[a:b]))
            for t, k, i, a, b in zip(p.ts_ns.tolist(), p.kinds, p.instrument_ids.tolist(), starts, ends)]


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a replay allocates its hundreds of thousands of events
    (``MarketEvent`` tuples stay tracked, and hold no cycle: each collection would walk them all again),
    back on (if it was) after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _one_instrument(args: tuple) -> tuple:
    """One instrument's replay (in a worker process when ``pack``): (events, or packed, bad input,
    checksums verified, step_ms, per_instrument's result, replay s, result s)."""
    ins, seed, steps, start_ms, per_instrument, pack, params = args
    with _gc_paused():
        t0 = time.perf_counter()
        events, bad, verified, step_ms = _synthetic_events([ins], seed, steps, start_ms, params)
        t1 = time.perf_counter()
        result = per_instrument(ins, events) if per_instrument is not None else None
        t2 = time.perf_counter()
        return (_pack(events) if pack else events), bad, verified, step_ms, result, t1 - t0, t2 - t1


def synthetic_parts(instruments: Sequence[TapeInstrument], *, seed: int, steps: int,
                    start_ms: int = SYNTH_START_MS, workers: int = 1, params=None,
                    per_instrument: Callable[[TapeInstrument, list[MarketEvent]], Any] | None = None
                    ) -> SyntheticParts:
    """``synthetic_tape``'s market replayed one instrument at a time, in ``workers`` processes (at
    most one per instrument; this one and ``workers`` - 1 forked ones), each instrument's events then given to
    ``per_instrument(instrument, events)`` in the process that replayed them (a module-level function
    or a ``functools.partial`` of one: it travels to the worker; its result comes back). The tape
    is the instruments' events merged in time (ties: the instruments' order, each one's own order,
    as one source emits them): the same tape as ``synthetic_tape``.

    Raises:
        EvaluationError: as ``synthetic_tape``.
    """
    _check_synthetic(instruments, steps, workers)
    workers = min(workers, len(instruments))
    lanes = [list(range(k, len(instruments), workers)) for k in range(workers)]  # lane 0: this process
    outs: list = [None] * len(instruments)
    if workers == 1:
        outs = [_one_instrument((ins, seed, steps, start_ms, per_instrument, False, params)) for ins in instruments]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {k: pool.submit(_one_instrument, (instruments[k], seed, steps, start_ms, per_instrument, True,
                                                        params)) for lane in lanes[1:] for k in lane}
            for k in lanes[0]:
                outs[k] = _one_instrument((instruments[k], seed, steps, start_ms, per_instrument, False, params))
            for k, fut in futures.items():
                outs[k] = fut.result()
    with _gc_paused():
        lists = [o[0] if isinstance(o[0], list) else _unpack(o[0]) for o in outs]
        events, positions = _merge_in_time(lists)
    bad: dict[str, int] = {}
    for o in outs:
        for key, n in o[1].items():
            _bump(bad, key, n)
    tape = _synthetic(instruments, seed, steps, events, bad, sum(o[2] for o in outs), outs[0][3])
    parts = [InstrumentPart(ins, pos, o[4], o[5], o[6]) for ins, pos, o in zip(instruments, positions, outs)]
    return SyntheticParts(tape, parts, workers)


def _merge_in_time(lists: list[list[MarketEvent]]) -> tuple[list[MarketEvent], list[np.ndarray]]:
    """Event lists, each in time order, merged by (time, list, place in it); each list's positions in
    the merged one."""
    sizes = [len(x) for x in lists]
    ts = np.fromiter((e.ts_ns for x in lists for e in x), np.int64, sum(sizes))
    order = np.argsort(ts, kind="stable")  # ties: the lists' order, then each one's
    flat = [e for x in lists for e in x]
    events = [flat[k] for k in order.tolist()]
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))
    bounds = np.cumsum([0] + sizes)
    return events, [where[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


# ------------------------------------------------------------------------------------- captures
class _Frame(NamedTuple):
    ts_ns: int
    decoded: object


def _read_capture_frames(path: Path, bad: dict[str, int], counts: dict[str, int]) -> list[_Frame]:
    """The received frames of one capture, decoded; malformed lines and rejected frames counted.

    Raises:
        EvaluationError: the file cannot be read.
    """
    from pipeline.trading.bitget.capture import RECV, parse_line
    from pipeline.trading.bitget.errors import CaptureError
    from pipeline.trading.bitget.frames import FrameKind
    from pipeline.trading.bitget.protocol import make_decoder

    dec = make_decoder()
    frames: list[_Frame] = []
    try:
        fh = open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise EvaluationError(f"capture {str(path)!r}: {exc.strerror or exc}") from None
    with fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    ln = parse_line(line, lineno)
                except CaptureError:
                    _bump(bad, "garbage_line")
                    continue
                if ln.direction != RECV:
                    continue
                _bump(counts, "frames")
                d = dec.decode(ln.text)
                if d.kind == FrameKind.REJECTED:
                    _bump(bad, "frame_" + d.reason.name.lower())
                elif d.kind in (FrameKind.SNAPSHOT, FrameKind.UPDATE, FrameKind.TRADE):
                    frames.append(_Frame(int(round(ln.receive_time_s * 1e9)), d))
                else:
                    _bump(counts, "frames_not_market_data")
        except OSError as exc:
            raise EvaluationError(f"capture {str(path)!r}: {exc.strerror or exc}") from None
    return frames


def _capture_instruments(frames: Iterable[_Frame]) -> tuple[TapeInstrument, ...]:
    """Instruments of decoded book / trade pushes: ids 1.. in instId order, tick and lot from the
    decimals of the snapshot strings (``bitget.values.snapshot_grids``)."""
    from pipeline.trading.bitget.values import snapshot_grids

    grids = snapshot_grids(fr.decoded for fr in frames)
    return tuple(TapeInstrument(id=k, symbol=sym, tick_size=tick, lot_size=lot)
                 for k, (sym, (tick, lot)) in enumerate(grids.items(), 1))


def _capture_lots(instruments: tuple[TapeInstrument, ...], events: list[MarketEvent]) -> tuple[TapeInstrument, ...]:
    """Each instrument with its lot raised to ``CAPTURE_LOT_NOTIONAL`` at its first mid (module docstring)."""
    first: dict[int, float] = {}
    for e in events:
        if e.kind == Kind.BOOK and e.instrument_id not in first:
            _iid, _f, nb, na, _seq, _ts = struct.unpack_from("<HHHHQQ", e.payload, 0)
            if nb and na:
                bid, ask = struct.unpack_from("<d", e.payload, 24)[0], struct.unpack_from("<d", e.payload, 264)[0]
                first[e.instrument_id] = 0.5 * (bid + ask)
    out = []
    for ins in instruments:
        lot, mid = ins.lot_size, first.get(ins.id, 0.0)
        while mid > 0 and lot * mid < CAPTURE_LOT_NOTIONAL:
            lot = float(f"{lot * 10:.12g}")
        out.append(msgspec.structs.replace(ins, lot_size=lot))
    return tuple(out)


def capture_tape(paths: Sequence[str | Path]) -> Tape:
    """The received market data of capture files, merged in receive-time order (module docstring).

    Raises:
        EvaluationError: no path, a file that cannot be read, or no book or trade push in them.
    """
    from pipeline.trading.bitget.book import Applied, BitgetBooks

    if not paths:
        raise EvaluationError("no capture file given")
    bad: dict[str, int] = {}
    counts: dict[str, int] = {}
    per_file = [_read_capture_frames(Path(p), bad, counts) for p in paths]
    instruments = _capture_instruments(fr for frames in per_file for fr in frames)
    if not instruments:
        raise EvaluationError(f"no book or trade push in {', '.join(str(p) for p in paths)}")
    ids = {i.symbol: i.id for i in instruments}
    events: list[MarketEvent] = []
    out = bytearray(504)
    verified = 0
    numbered: dict[int, int] = {}  # BOOKs emitted per instrument
    for frames in per_file:  # one BitgetBooks per file: each file is one connection
        books = BitgetBooks(ids)
        for ts_ns, d in frames:
            iid = ids[d.inst_id]
            if d.trades is not None:
                n = books.fill_trades(d)
                rec = books.trade_records
                events.extend(MarketEvent(ts_ns, Kind.TRADE, iid, rec[k:k + 1].tobytes()) for k in range(n))
                continue
            code = books.apply(d, out)
            if code == Applied.EMITTED:
                numbered[iid] = numbered.get(iid, 0) + 1
                if not struct.unpack_from("<Q", out, 8)[0]:  # no venue seq (v1 frames): the replay's count
                    struct.pack_into("<Q", out, 8, numbered[iid])
                events.append(MarketEvent(ts_ns, Kind.BOOK, iid, bytes(out)))
            else:
                _bump(bad, Applied(code).name.lower())
        verified += books.checksums_verified
        if books.trade_snapshots_skipped:
            _bump(counts, "trade_snapshot_rows_skipped", books.trade_snapshots_skipped)
    events.sort(key=lambda e: e.ts_ns)  # stable: a file's order is kept among equal times
    counts["checksums_verified"] = verified
    instruments = _capture_lots(instruments, events)
    names = ", ".join(Path(p).name for p in paths)
    return Tape(instruments, events, bad, counts, f"capture {names} ({len(instruments)} instruments)")


# ------------------------------------------------------------------------------------- ITCH
def _itch_frames(path: Path, bad: dict[str, int]) -> Iterator[bytes]:
    """The messages of a BinaryFILE; a truncated end or a missing end marker counted, not raised.

    Raises:
        EvaluationError: the file cannot be read.
    """
    from pipeline.trading.itch.errors import IncompleteSession, ItchError, TruncatedFrame
    from pipeline.trading.itch.framing import iter_file_frames

    try:
        for _off, msg in iter_file_frames(path):
            yield msg
    except TruncatedFrame:
        _bump(bad, "truncated_frame")
    except IncompleteSession:
        _bump(bad, "incomplete_session")
    except ItchError as exc:
        _bump(bad, "framing_" + type(exc).__name__.lower())
    except OSError as exc:
        raise EvaluationError(f"ITCH file {str(path)!r}: {exc.strerror or exc}") from None


def _itch_directory(messages: Sequence[bytes]) -> list[str]:
    """The symbols of the file's stock directory (R) messages, in order of appearance, once each."""
    from pipeline.trading.itch import messages as M

    seen: dict[str, None] = {}
    for msg in messages:
        if msg[:1] == b"R":
            rec, _reason = M.try_decode(msg, 0, len(msg))
            if rec is not None:
                seen.setdefault(M.alpha_text(rec.stock), None)
    return list(seen)


def itch_tape(path: str | Path, *, symbols: Sequence[str] | None = None) -> Tape:
    """The books and trades of an ITCH 5.0 BinaryFILE (``.gz`` too) for ``symbols`` (None: every
    stock of its directory); see the module docstring.

    Raises:
        EvaluationError: the file cannot be read, a symbol asked for is not in its directory, or
            the file lists no stock.
    """
    from pipeline.trading.itch.book import NO_BOOK, REJECTIONS, BookEvent
    from pipeline.trading.itch.executions import ExecutionBook

    path = Path(path)
    bad: dict[str, int] = {}
    messages = list(_itch_frames(path, bad))
    directory = _itch_directory(messages)
    if symbols:
        missing = sorted(set(symbols) - set(directory))
        if missing:
            raise EvaluationError(f"ITCH file {str(path)!r} lists no {missing} (its stocks: {directory[:20]})")
        directory = [s for s in directory if s in set(symbols)]
    if not directory:
        raise EvaluationError(f"ITCH file {str(path)!r} has no stock directory (R) message")
    instruments = tuple(TapeInstrument(id=k, symbol=s, tick_size=ITCH_TICK, lot_size=ITCH_LOT)
                        for k, s in enumerate(directory, 1))
    trades: list[bytes] = []  # the TRADEs of the message being applied (the book reports them from apply_raw)
    book = ExecutionBook({i.symbol: i.id for i in instruments}, midnight_epoch_ns=0,
                         on_trade=lambda payload: trades.append(bytes(payload)))
    events: list[MarketEvent] = []
    buf = bytearray(504)
    for seq, msg in enumerate(messages, 1):
        ts_ns = int.from_bytes(msg[5:11], "big") if len(msg) >= 11 else 0
        iid = book.apply_raw(msg, 0, len(msg), seq)
        for payload in trades:  # ahead of the BOOK the same message changed, as the feed writes them
            events.append(MarketEvent(ts_ns, Kind.TRADE, int.from_bytes(payload[:2], "little"), payload))
        trades.clear()
        if iid != NO_BOOK:
            book.write_payload(iid, buf)
            events.append(MarketEvent(ts_ns, Kind.BOOK, iid, bytes(buf)))
    for ev in sorted(REJECTIONS | {BookEvent.CROSSED}):
        if book.counts[ev]:
            bad["itch_" + ev.name.lower()] = book.counts[ev]
    counts = {"messages": len(messages), "orders_live_at_end": book.n_orders, "trades": book.trades_reported,
              "hidden_trades": book.hidden_reported}
    return Tape(instruments, events, bad, counts, f"ITCH 5.0 {path.name} ({len(instruments)} stocks)")


def check_finite_tape(tape: Tape) -> None:
    """Raises EvaluationError when the tape has no BOOK (nothing to evaluate)."""
    if not any(e.kind == Kind.BOOK for e in tape.events):
        raise EvaluationError(f"{tape.source}: no book could be built (bad input: {dict(sorted(tape.bad.items()))})")


def tick_decimals(step: float) -> int:
    """Decimals that write ``step`` (0.01 -> 2), for rendering prices and sizes as the venue's strings."""
    return max(0, -int(math.floor(math.log10(step) + 1e-9)))
