"""P&L of a paper (or live) run from the order sender's journal: ``python -m pipeline report``.

The journal (``pipeline.trading.journal``: one CRC-checked JSON record a line) holds every fill the
sender learned of. ``build_report`` turns its bytes into the evaluation's metrics (``metrics.summarize``)
per instrument and in total; ``format_report`` prints them as a table. Sans I/O except
``read_journal``, which only reads: a running sender is never disturbed (no lock, no write, no
truncation: ``Journal.open`` would cut a torn tail, this does not call it).

From the records to ``metrics.Fill`` (``fills_from_records``):

- every ``fill`` record once per venue trade id (``tid``; a repeat is skipped, as the sender's replay
  does); its instrument ``iid`` and ``side`` (1 buy, 2 sell) are the record's, else its order's
  ``intent``; its time the record's ``ts_ms`` (the venue's fill time), else the intent's;
- fees: the journal records none, so they are ESTIMATED (default rates: the evaluation's,
  ``pipeline.venue.fees.DEFAULT_EVALUATION_FEES``) from the order's time in force (its intent's ``tif``): post-only orders (2) pay ``maker_fee_bps`` (liquidity "maker"), IOC orders (3)
  ``taker_fee_bps`` ("taker"); GTC orders (1) and fills without an intent could have been either and
  are charged the taker rate (conservative; liquidity ""). The report says the fees are estimated;
- a fill record that cannot be a fill (a field missing or ill-typed, a size or price not finite and
  > 0, a side other than 1 / 2 with no intent to take it from) is counted in ``rejected`` by reason,
  never raised.

Marks (``build_report``): every fill's own price at its time (``metrics.marks_at_fill_prices``), so the
open position is valued at the instrument's last fill price; where a mid is given for an instrument
(``mids``), it is one more mark at the journal's last fill time, which values the open position at it.
The report names the mark used per instrument. Positions come from the fills only: ``adjust`` records
(the sender set a position to the venue's) are counted and said, not applied. A journal set aside at a
venue account change (``<journal>.<account>.<ms>``) is a different file and not read.

Lines: a complete line that fails its CRC or does not parse is counted (``corrupt``); an incomplete last
line (a write in progress, or a crash mid-write) is ignored and said (``partial_tail``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from pipeline.runtime.errors import ConfigError
from pipeline.trading.evaluation.metrics import Fill, MarkSeries, fee_for, marks_at_fill_prices, summarize
from pipeline.trading.journal import decode_line
from pipeline.trading.risk.limits import decode_limits
from pipeline.venue.fees import DEFAULT_EVALUATION_FEES

#: the fee estimates' defaults: the evaluation's (``pipeline.venue.fees``: Bitget spot, standard tier)
DEFAULT_MAKER_FEE_BPS = DEFAULT_EVALUATION_FEES.maker_bps
DEFAULT_TAKER_FEE_BPS = DEFAULT_EVALUATION_FEES.taker_bps
SENDER_MODULE = "procs.sender:SenderAgent"
RISK_MODULE = "procs.risk:RiskAgent"
_TIF_POST_ONLY, _TIF_IOC = 2, 3
_SIDES = {1: 1, 2: -1}  # journal side (messages.Side) -> metrics side


class ParsedJournal(msgspec.Struct, frozen=True, kw_only=True):
    """The records of a journal's bytes: ``records`` (decoded, in file order), ``corrupt`` (complete lines
    skipped: CRC mismatch or unparseable), ``partial_tail`` (bytes of an incomplete last line, ignored)."""

    records: list[dict]
    corrupt: int
    partial_tail: int


class JournalFills(msgspec.Struct, frozen=True, kw_only=True):
    """The fills of a journal's records (``fills_from_records``): ``fills``; ``duplicates`` (repeated trade
    ids skipped); ``rejected`` (reason -> count); ``adjustments`` (``adjust`` records, not applied);
    ``fee_basis`` (fills charged per basis: "maker (post-only)", "taker (IOC)", "taker (GTC or unknown)")."""

    fills: list[Fill]
    duplicates: int
    rejected: dict[str, int]
    adjustments: int
    fee_basis: dict[str, int]


def parse_journal(data: bytes) -> ParsedJournal:
    """The records of journal bytes (``pipeline.trading.journal`` line format). Never raises."""
    end = data.rfind(b"\n") + 1
    records, corrupt = [], 0
    for line in data[:end].split(b"\n")[:-1]:
        rec = decode_line(line)
        if rec is None:
            corrupt += 1
        else:
            records.append(rec)
    return ParsedJournal(records=records, corrupt=corrupt, partial_tail=len(data) - end)


def read_journal(path: str | Path) -> bytes:
    """The journal file's bytes, read only (a sender may be appending meanwhile: what it has written so
    far, perhaps ending in a partial line). Raises OSError: the file cannot be opened or read."""
    with open(path, "rb") as f:
        return f.read()


def _fill_of(rec: dict, intent: dict | None, maker_bps: float, taker_bps: float) -> tuple[Fill | None, str]:
    """(Fill, fee basis) of one fill record, or (None, why it is rejected)."""
    intent = intent or {}
    try:
        px, sz = float(rec["px"]), float(rec["sz"])
        iid = int(rec.get("iid") or intent.get("iid") or 0)
        side = _SIDES.get(int(rec.get("side") or intent.get("side") or 0))
        ts_ms = int(rec.get("ts_ms") or intent.get("ts_ms") or 0)
        tif = int(intent.get("tif") or 0)
    except (KeyError, TypeError, ValueError):
        return None, "missing or ill-typed field"
    if not (math.isfinite(px) and px > 0 and math.isfinite(sz) and sz > 0):
        return None, "price or size not finite and > 0"
    if side is None or iid <= 0:
        return None, "no side or instrument"
    if tif == _TIF_POST_ONLY:
        bps, liq, basis = maker_bps, "maker", "maker (post-only)"
    elif tif == _TIF_IOC:
        bps, liq, basis = taker_bps, "taker", "taker (IOC)"
    else:
        bps, liq, basis = taker_bps, "", "taker (GTC or unknown)"
    return Fill(ts_ns=ts_ms * 1_000_000, instrument_id=iid, side=side, price=px, size=sz,
                fee=fee_for(px, sz, bps), liquidity=liq), basis


def fills_from_records(records: list[dict], *, maker_fee_bps: float = DEFAULT_MAKER_FEE_BPS,
                       taker_fee_bps: float = DEFAULT_TAKER_FEE_BPS) -> JournalFills:
    """The fills of journal records, with estimated fees (see the module docstring). Never raises."""
    intents: dict[Any, dict] = {}
    seen: set[int] = set()
    fills: list[Fill] = []
    rejected: dict[str, int] = {}
    basis_count: dict[str, int] = {}
    duplicates = adjustments = 0
    for rec in records:
        t = rec.get("t")
        if t == "intent":
            intents.setdefault(rec.get("oid"), rec)
        elif t == "adjust":
            adjustments += 1
        elif t == "fill":
            try:
                tid = int(rec["tid"])
            except (KeyError, TypeError, ValueError):
                tid = None
            if tid in seen:
                duplicates += 1
                continue
            f, basis = _fill_of(rec, intents.get(rec.get("oid")), maker_fee_bps, taker_fee_bps) if tid is not None \
                else (None, "missing or ill-typed field")
            if f is None:
                rejected[basis] = rejected.get(basis, 0) + 1
                continue
            seen.add(tid)
            fills.append(f)
            basis_count[basis] = basis_count.get(basis, 0) + 1
    return JournalFills(fills=fills, duplicates=duplicates, rejected=dict(sorted(rejected.items())),
                        adjustments=adjustments, fee_basis=dict(sorted(basis_count.items())))


def _marks(fills: list[Fill], mids: Mapping[int, float]) -> tuple[MarkSeries, dict[int, str]]:
    """The fills' own prices, plus each given mid at the last fill time; and per instrument what its
    last mark is (a sentence)."""
    base = marks_at_fill_prices(fills)
    t_end = max((f.ts_ns for f in fills), default=0)
    ts, mid, used = dict(base.ts_ns), dict(base.mid), {}
    for iid in sorted(set(base.ts_ns) | set(mids)):
        if iid in mids:
            ts[iid] = list(ts.get(iid, [])) + [t_end]
            mid[iid] = list(mid.get(iid, [])) + [float(mids[iid])]
            used[iid] = f"the mid given, {float(mids[iid]):,.8g}"
        else:
            used[iid] = f"its last fill price, {float(base.mid[iid][-1]):,.8g}"
    return MarkSeries(ts, mid), used


def build_report(parsed: ParsedJournal, symbols: Mapping[int, str], *, capital: float,
                 maker_fee_bps: float = DEFAULT_MAKER_FEE_BPS, taker_fee_bps: float = DEFAULT_TAKER_FEE_BPS,
                 mids: Mapping[int, float] | None = None) -> dict:
    """The report of a parsed journal: per instrument (by id; named by ``symbols``, else ``#<id>``)
    ``metrics.summarize`` plus ``position`` (base units, from the fills) and ``mark`` (what valued it),
    the same in ``total`` over every instrument, and what it was computed from (records, lines skipped,
    fees estimated and their basis, capital).

    Raises:
        ValueError: ``capital`` not > 0, a mid not finite and > 0 (named).
    """
    mids = dict(mids or {})
    for iid, m in mids.items():
        if not (math.isfinite(m) and m > 0):
            raise ValueError(f"the mid given for {symbols.get(iid, f'#{iid}')} must be finite and > 0, got {m!r}")
    jf = fills_from_records(parsed.records, maker_fee_bps=maker_fee_bps, taker_fee_bps=taker_fee_bps)
    marks, used = _marks(jf.fills, mids)
    per = {}
    for iid in sorted(marks.ts_ns):
        fs = [f for f in jf.fills if f.instrument_id == iid]
        one = MarkSeries({iid: marks.ts_ns[iid]}, {iid: marks.mid[iid]})
        pos = math.fsum(f.side * f.size for f in fs)
        if abs(pos) <= 1e-9 * max((f.size for f in fs), default=1.0):
            pos = 0.0  # float dust of a flat position
        per[symbols.get(iid, f"#{iid}")] = {"instrument_id": iid, "position": pos, "mark": used[iid],
                                            **summarize(fs, one, capital=capital)}
    return {
        "records": len(parsed.records), "corrupt_lines": parsed.corrupt, "partial_tail_bytes": parsed.partial_tail,
        "fills": len(jf.fills), "duplicate_fills": jf.duplicates, "rejected_fills": jf.rejected,
        "position_adjustments": jf.adjustments,
        "fees_estimated": True, "maker_fee_bps": maker_fee_bps, "taker_fee_bps": taker_fee_bps,
        "fee_basis": jf.fee_basis, "capital": capital,
        "instruments": per, "total": summarize(jf.fills, marks, capital=capital),
    }


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_report(rep: dict, *, source: str = "") -> str:
    """The report as text: what it was computed from, then one row per instrument and the total."""
    lines = [f"journal {source}: {rep['records']} records, {rep['fills']} fills"
             + (f", {rep['corrupt_lines']} corrupt lines skipped" if rep["corrupt_lines"] else "")
             + (f", a partial last line ({rep['partial_tail_bytes']} bytes: a write in progress) ignored"
                if rep["partial_tail_bytes"] else "")
             + (f", {rep['duplicate_fills']} repeated fills skipped" if rep["duplicate_fills"] else "")]
    if rep["rejected_fills"]:
        lines.append("rejected fill records: " + ", ".join(f"{k}: {v}" for k, v in rep["rejected_fills"].items()))
    basis = ", ".join(f"{v} {k}" for k, v in rep["fee_basis"].items()) or "no fills"
    lines.append(f"fees: ESTIMATED (the journal records none): maker {rep['maker_fee_bps']:g} bps, taker "
                 f"{rep['taker_fee_bps']:g} bps by order type ({basis})")
    for sym, row in rep["instruments"].items():
        lines.append(f"marks: {sym} at {row['mark']}")
    if rep["position_adjustments"]:
        lines.append(f"positions from fills only: {rep['position_adjustments']} adjust records (the venue's "
                     f"position differed) not applied")
    lines.append(f"max drawdown against a capital of {rep['capital']:,.2f}")
    lines.append(f"{'instrument':<12} {'position':>12} {'net P&L':>12} {'gross':>12} {'fees':>10} {'trades':>7} "
                 f"{'trips':>6} {'win rate':>8} {'max DD':>8}")
    rows = list(rep["instruments"].items()) + [("total", {**rep["total"], "position": None})]
    for sym, r in rows:
        wr = _num(None if r["win_rate"] is None else 100 * r["win_rate"], ".1f")
        lines.append(f"{sym:<12} {_num(r['position'], '.8g'):>12} {r['net_pnl']:>12.2f} {r['gross_pnl']:>12.2f} "
                     f"{r['fees']:>10.2f} {r['trades']:>7} {r['round_trips']:>6} {wr + ('%' if wr != '-' else ''):>8} "
                     f"{100 * r['max_drawdown']:>7.2f}%")
    return "\n".join(lines)


def sender_journal_path(cfg) -> Path:
    """The journal the config's order sender writes (its ``journal_path`` param, else
    ``<run_dir>/<name>.journal``).

    Raises:
        ConfigError: no process of the config runs ``procs.sender:SenderAgent``.
    """
    for p in cfg.processes:
        if p.module == SENDER_MODULE:
            jp = p.params.get("journal_path") or ""
            return Path(jp) if jp else Path(cfg.supervisor.run_dir) / f"{p.name}.journal"
    raise ConfigError(f"no process runs {SENDER_MODULE} in this config: name the journal with --journal")


def risk_capital(cfg) -> float:
    """The capital the drawdown is measured against by default: the risk gateway's
    ``max_gross_notional`` (the most the strategy may hold), from the config's risk stage limits, else
    the limits' default.

    Raises:
        ConfigError: the risk stage's limits are malformed (the field named).
    """
    for p in cfg.processes:
        if p.module == RISK_MODULE:
            return float(decode_limits(p.params.get("limits")).max_gross_notional)
    return float(decode_limits(None).max_gross_notional)
