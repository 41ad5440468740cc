"""One variant's run over a replayed market on simulated time, sans-I/O: its fast-path decisions
(``decisions``) through the risk gateway the risk process runs (``pipeline.trading.risk.RiskGateway``,
its clock the simulated time), its ORDERs to the simulated exchange (``exchange``) after the order
latency, the EXEC_REPORTs back to the gateway after the report latency; the metrics at the end.

Timeline. The tape's events in order; between two of them, every scheduled item due before the next
one's time, in time order (ties in scheduling order): an ORDER reaching the exchange (it sees the book
as of its arrival: the market events up to that time are applied first), an EXEC_REPORT reaching the
gateway, an INSTRUCTION of the slow path reaching the gateway. At a BOOK: the exchange's book changes
(queue positions move, crossing fills), then the row's SIGNAL (the FEATURES header of that BOOK, the
variant's label and probabilities, packed as ``procs.fast`` packs it) goes to ``on_signal`` with the
BOOK's time as its origin; a TRADE reaches the exchange (fills of resting orders). An order decided at
``t`` (any gateway event with a ``cmd``: OrderApproved, CancelSent, CancelAllSent) reaches the
exchange at ``t`` plus its order latency: ``order_latency_ns``, or, when ``order_latency_table_ns`` holds
values, one of them drawn for this order (equally likely, ``random.Random(latency_seed)``, one draw per
order in decision order: the same seed, the same draws); orders reach the exchange in the order they
were decided (a draw that would overtake the previous order waits for it, as orders leave one pipeline
in turn). Its reports reach the gateway ``exec_latency_ns`` after they happen. After the last market
event the items still scheduled run against the last book. The latencies drawn are in the result
(``order_latency_us``: n, min, p50, p99, max).

Start: ``start()`` and an empty SYNC_DONE, so the gateway is synced and flat (what the sender reports
for a new account). Limits: the risk process's table with this variant's ``lean_lots``; per-instrument
tables get a ``"*"`` default (their smallest value) so a capture's instruments are covered, and lose
the symbols the market does not have.

The SIGNAL's flags are the variant's (``Decisions.flag_bits``: an EMERGENCY's at-risk side, the
input-range guard) with ``SIGNAL_FLAG_WARMUP`` from the FEATURES header, as the fast stage sets them.
With ``quote_lots`` (the quoting scenario), a ``quoting.Quoter`` keeps a bid and an ask resting
through the gateway: at each BOOK with a row, after its SIGNAL.

Results: ``metrics.summarize`` over the exchange's fills and the shared marks, the signal's IC per
instrument pooled (``decisions.value``); the fills' markouts (``markouts.markout_summary`` at
``markout_horizons_ns``); what the orders removed by EMERGENCY cancels (the exchange's cancelled
orders whose cancel the gateway sent with why ``emergency``) would have been as fills
(``markouts.avoided_fills`` over ``avoid_window_ns``, the maker fee of ``fees``); ``fill_rate``
(orders that filled at least once / orders the exchange accepted; None when none was); ``planner``
(the gateway's: ``execution``, default the simple one) and ``slippage`` (``slippage.summarize_slippage``:
each fill against its parent plan's arrival mid); plus the run's counts (labels, gateway events by
type, denials by reason, exchange outcomes, the quoter's; with the depth-aware planner ``parents``,
its parent transitions by new state). With the depth-aware planner each SIGNAL carries the row's
level block (the feature vector's first 60 slots), as the fast stage with ``signal_depth`` sends it.
``capital`` (the drawdown's denominator) defaults to ``default_capital``.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from pipeline.runtime.errors import ConfigError
from pipeline.trading.evaluation.decisions import Decisions, FeatureTable, label_counts
from pipeline.trading.evaluation.exchange import SimulatedExchange
from pipeline.trading.evaluation.markouts import (AVOID_WINDOW_NS, MARKOUT_HORIZONS_NS, MarketPath, avoided_fills,
                                                  market_path, markout_summary)
from pipeline.trading.evaluation.metrics import DEFAULT_HORIZONS_NS, Equity, MarkSeries, equity_curve, summarize
from pipeline.trading.evaluation.quoting import Quoter
from pipeline.trading.evaluation.replay import EvaluationError, Tape, TapeInstrument
from pipeline.trading.evaluation.slippage import ArrivalFill, summarize_slippage
from pipeline.trading.messages import (EXEC_STRUCT, FEATURES_FLAG_WARMUP, SIGNAL_DEPTH_LEVELS, SIGNAL_FLAG_WARMUP,
                                       SIGNAL_STRUCT, ExecType, Kind, Label, OrderCmd)
from pipeline.trading.risk import (OrderApproved, OrderDenied, RiskGateway, RiskLimits, decode_limits, encode_order,
                                   resolve_limits)
from pipeline.trading.risk.events import ParentChanged
from pipeline.trading.risk.execution import ExecutionParams
from pipeline.venue.fees import FeeSchedule

_PER_INSTRUMENT = ("max_position_lots", "max_order_lots", "max_child_lots")
#: what a timeline item is: an ORDER reaching the exchange, an EXEC_REPORT or an INSTRUCTION reaching the
#: gateway, a wake-up of the slow path
ORDER_DUE, EXEC_DUE, INSTRUCTION_DUE, WAKE_DUE = 0, 1, 2, 3
_BOOK = int(Kind.BOOK)
_HOLD = int(Label.HOLD)
_FILLED = int(ExecType.FILLED)


class SimParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How orders meet the market: latencies (ns; ``order_latency_table_ns``: equally likely order
    latencies drawn per order with ``latency_seed``, empty: ``order_latency_ns`` for every order), fees
    (None: none), the queue model, the drawdown's capital (None: ``default_capital``), the IC horizons,
    the markout horizons and the window a cancelled order is followed for (ns)."""

    order_latency_ns: int
    exec_latency_ns: int
    order_latency_table_ns: tuple[int, ...] = ()
    latency_seed: int = 0
    fees: FeeSchedule | None
    queue_model: bool = True
    capital: float | None = None
    horizons_ns: tuple[int, ...] = DEFAULT_HORIZONS_NS
    markout_horizons_ns: tuple[int, ...] = MARKOUT_HORIZONS_NS
    avoid_window_ns: int = AVOID_WINDOW_NS


def eval_limits(table: dict, instruments: Sequence[TapeInstrument], lean_lots: int) -> RiskLimits:
    """The risk process's limits table for these instruments (see the module docstring).

    Raises:
        EvaluationError: a table the gateway refuses (the field named).
    """
    t = dict(table)
    symbols = {i.symbol for i in instruments}
    for key in _PER_INSTRUMENT:
        v = t.get(key)
        if isinstance(v, dict):
            vals = [x for x in v.values() if isinstance(x, (int, float))]
            kept = {s: x for s, x in v.items() if s in symbols or s == "*"}
            if "*" not in kept and vals:
                kept["*"] = min(vals)
            t[key] = kept
    if isinstance(t.get("allowed"), list):
        t["allowed"] = [s for s in t["allowed"] if s in symbols]
    t["lean_lots"] = int(lean_lots)
    try:
        limits = decode_limits(t)
        resolve_limits(instruments, limits)
    except ConfigError as exc:
        raise EvaluationError(str(exc)) from None
    return limits


def eval_execution(table: dict, planner: str) -> ExecutionParams:
    """The risk process's ``execution`` table with ``planner`` in place of its own.

    Raises:
        EvaluationError: a table the gateway refuses (the field named).
    """
    from pipeline.trading.risk.execution import decode_execution

    try:
        return decode_execution({**table, "planner": planner})
    except ConfigError as exc:
        raise EvaluationError(str(exc)) from None


def default_capital(instruments: Sequence[TapeInstrument], limits: RiskLimits, marks: MarkSeries) -> float:
    """The drawdown's capital: what the largest positions the gateway allows (``max_position_lots``
    of each instrument) are worth at each one's first mark, summed; 1.0 when that is 0 (no mark)."""
    specs = resolve_limits(instruments, limits)
    total = 0.0
    for ins in instruments:
        mids = marks.mid.get(ins.id)
        if mids is not None and mids.size:
            total += specs[ins.id].max_position_lots * ins.lot_size * float(mids[0])
    return total if total > 0 else 1.0


@dataclass
class VariantResult:
    """One variant's outcome: the metrics (``summarize``'s keys), the counts, its equity curve and the
    wall times of its simulation and of its metrics (seconds; not part of any deterministic output)."""

    metrics: dict
    counts: dict
    equity: Equity
    positions: dict[int, float]
    sim_s: float = 0.0
    extra_timings: dict = field(default_factory=dict)
    metrics_s: float = 0.0


class VariantRun:
    """One variant over one market (see the module docstring); ``marks``: the market's
    (``decisions.marks_of``, shared by every variant). ``slow``: the slow path
    (``slowpath.SlowPath``) or None for fast path only; ``quote_lots``: the quoting scenario's quote
    size (None: no quotes); ``path``: the market's ``markouts.MarketPath`` (None: made here)."""

    def __init__(self, tape: Tape, table: FeatureTable, marks: MarkSeries, decisions: Decisions, limits: RiskLimits,
                 params: SimParams, slow=None, quote_lots: int | None = None, path: MarketPath | None = None,
                 execution: ExecutionParams | None = None):
        if len(decisions.labels) != len(table):
            raise EvaluationError(f"{len(decisions.labels)} decisions for {len(table)} feature rows")
        self.tape, self.table, self.marks, self.d, self.p, self.path = tape, table, marks, decisions, params, path
        self.now = tape.events[0].ts_ns if tape.events else 0
        clock = lambda: self.now  # noqa: E731
        self.gw = RiskGateway(tape.instruments, limits, clock, execution=execution)
        self.arrival: dict[int, float] = {}  # our order id -> its parent's arrival mid (``slippage``)
        self.arrival_fills: list[ArrivalFill] = []
        self.parents: dict[str, int] = {}  # the depth-aware planner's parent transitions by new state
        self.ex = SimulatedExchange(tape.instruments, clock, fees=params.fees, queue_model=params.queue_model)
        self.heap: list = []
        self.seq = 0
        self.latency_draw = random.Random(params.latency_seed)
        self.latencies_ns: list[int] = []  # each order's latency, in decision order
        self.last_order_due_ns = 0
        self.counts: dict[str, int] = {}
        self.slow = slow
        if slow is not None:
            slow.attach(self)
        self.quoter = Quoter(self.gw, quote_lots) if quote_lots is not None else None
        self.gw.start()
        self.gw.on_exec(EXEC_STRUCT.pack(0, ExecType.SYNC_DONE, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0))

    # ------------------------------------------------------------------------------- scheduling
    def schedule(self, t_ns: int, what: int, payload) -> None:
        """Put an item on the timeline at ``t_ns`` (ties keep scheduling order)."""
        self.seq += 1
        heapq.heappush(self.heap, (t_ns, self.seq, what, payload))

    def handle(self, events: list) -> None:
        """The gateway's events: counted; those with an ORDER leave for the exchange."""
        counts = self.counts
        for ev in events:
            name = type(ev).__name__
            counts[name] = counts.get(name, 0) + 1
            t = type(ev)
            if t is OrderDenied:
                key = "deny_" + ev.code.lower()
                counts[key] = counts.get(key, 0) + 1
            elif t is OrderApproved:
                bk = self.gw.books[ev.instrument_id]
                plan = bk.plan
                live = plan is not None and plan.origin_seq == ev.origin_seq and plan.arrival_mid > 0
                self.arrival[ev.order_id] = plan.arrival_mid if live else bk.mid
            elif t is ParentChanged:
                self.parents[ev.new] = self.parents.get(ev.new, 0) + 1
            if ev.cmd and ev.cmd != OrderCmd.SYNC:
                self.schedule(self._order_due(), ORDER_DUE, (encode_order(ev), getattr(ev, "why", "")))

    def _order_due(self) -> int:
        """When an order decided now reaches the exchange: its latency drawn (module docstring), never
        before the previous order."""
        table = self.p.order_latency_table_ns
        lat = table[self.latency_draw.randrange(len(table))] if table else self.p.order_latency_ns
        self.latencies_ns.append(lat)
        due = max(self.now + lat, self.last_order_due_ns)
        self.last_order_due_ns = due
        return due

    def _exec_reports(self, reports: list[bytes]) -> None:
        t = self.now + self.p.exec_latency_ns
        for r in reports:
            if r[2] == _FILLED:  # exec_type (EXEC_REPORT offset 2): the fill against its parent's arrival mid
                iid, _et, side, _r, oid, price, size = EXEC_STRUCT.unpack(r)[:7]
                arrival = self.arrival.get(oid)
                if arrival is not None:
                    self.arrival_fills.append(ArrivalFill(iid, 1 if side == 1 else -1, price, size, arrival))
            self.schedule(t, EXEC_DUE, r)

    def _due(self, item) -> None:
        t, _seq, what, payload = item
        self.now = t
        if what == ORDER_DUE:
            self._exec_reports(self.ex.on_order(*payload))
        elif what == EXEC_DUE:
            self.handle(self.gw.on_exec(payload))
        elif what == INSTRUCTION_DUE:
            self.handle(self.gw.on_instruction(payload))
        else:
            self.slow.wake(t)

    # ------------------------------------------------------------------------------- the run
    # hot path: one loop over every market event of the tape (the evaluation's updates/s is this loop's
    # speed); split into helpers it would pay a call and the re-binding of its locals per event
    def _loop(self) -> None:
        events, heap, ex, gw, slow = self.tape.events, self.heap, self.ex, self.gw, self.slow
        rows = self.table.rows
        row_of = np.full(len(events), -1, np.int64)
        row_of[self.table.event_index] = np.arange(len(self.table))
        row_of = row_of.tolist()
        labels = self.d.labels.tolist()
        probs = self.d.probs.tolist()
        flags = (np.where(rows["flags"] & FEATURES_FLAG_WARMUP, SIGNAL_FLAG_WARMUP, 0).astype(np.uint8)
                 | self.d.flag_bits()).tolist()
        quote = self.quoter.on_book if self.quoter is not None else None
        seqs, exch = rows["book_seq"].tolist(), rows["exch_ts_ns"].tolist()
        mids, spreads = rows["ref_mid"].tolist(), rows["ref_spread"].tolist()
        # the depth-aware planner's SIGNALs carry the level block as the fast stage copies it
        tails = ([r.tobytes() for r in np.ascontiguousarray(rows["features"][:, :4 * SIGNAL_DEPTH_LEVELS], "<f4")]
                 if gw.depth_mode else None)
        pack, pop, on_signal = SIGNAL_STRUCT.pack, heapq.heappop, gw.on_signal
        on_book, on_trade = ex.on_book, ex.on_trade
        due, handle, reports = self._due, self.handle, self._exec_reports
        for k, (t, kind, iid, payload) in enumerate(events):
            while heap and heap[0][0] < t:
                due(pop(heap))
            self.now = t
            if kind == _BOOK:
                rep = on_book(iid, payload)
                if rep:
                    reports(rep)
                r = row_of[k]
                if r >= 0:
                    lab = labels[r]
                    p0, p1, p2, p3 = probs[r]
                    payload = pack(iid, lab, flags[r], seqs[r], exch[r], mids[r], spreads[r], p0, p1, p2, p3)
                    evs = on_signal(payload if tails is None else payload + tails[r], t)
                    if evs:
                        handle(evs)
                    if quote is not None:
                        evs = quote(iid)
                        if evs:
                            handle(evs)
                    if slow is not None and lab != _HOLD:
                        slow.offer(r, t)
            else:
                rep = on_trade(iid, payload)
                if rep:
                    reports(rep)
        while heap:
            due(pop(heap))

    def run(self) -> VariantResult:
        """Replay the whole tape, then the metrics (module docstring)."""
        t0 = time.perf_counter()
        self._loop()
        sim_s = time.perf_counter() - t0
        marks = self.marks
        limits = self.gw.limits
        capital = self.p.capital
        if capital is None:
            capital = default_capital(self.tape.instruments, limits, marks)
        iid = self.table.instrument_id
        signals = {i: (self.table.ts_ns[iid == i], self.d.value[iid == i]) for i in sorted(marks.ts_ns)}
        fills = self.ex.fills
        m = summarize(fills, marks, capital=capital, signals=signals, horizons_ns=self.p.horizons_ns)
        m.update(self._fill_quality())
        m["order_latency_us"] = latency_summary(self.latencies_ns)
        counts = {"labels": label_counts(self.d), "gateway": dict(sorted(self.counts.items())),
                  "exchange": dict(self.ex.counts)}
        if self.gw.depth_mode:
            counts["parents"] = dict(sorted(self.parents.items()))
        if self.quoter is not None:
            counts["quoter"] = dict(self.quoter.counts)
        if self.slow is not None:
            counts["llm"] = self.slow.counts()
        positions = {i: float(b.position) for i, b in sorted(self.gw.books.items())}
        equity = equity_curve(fills, marks)
        return VariantResult(m, counts, equity, positions, sim_s, self.slow.timings() if self.slow is not None else {},
                             time.perf_counter() - t0 - sim_s)


    def _fill_quality(self) -> dict:
        """``markouts``, ``fill_rate``, ``emergency_cancelled`` and ``avoided`` (module docstring)."""
        ticks = {i.id: i.tick_size for i in self.tape.instruments}
        path = self.path if self.path is not None else market_path(self.table, self.tape.events)
        em = [c for c in self.ex.cancelled if c.why == "emergency"]
        placed = self.ex.counts["placed"]
        maker_bps = self.p.fees.maker_bps if self.p.fees is not None else 0.0
        return {"planner": self.gw.execution.planner, "slippage": summarize_slippage(self.arrival_fills, ticks),
                "markouts": markout_summary(self.ex.fills, self.marks, ticks, self.p.markout_horizons_ns),
                "fill_rate": self.ex.counts["filled_orders"] / placed if placed else None,
                "emergency_cancelled": len(em),
                "avoided": avoided_fills(em, path, self.marks, ticks, maker_fee_bps=maker_bps,
                                         window_ns=self.p.avoid_window_ns, horizons_ns=self.p.markout_horizons_ns)}


def latency_summary(latencies_ns: list[int]) -> dict:
    """n, min, p50, p99 (inverted-CDF percentiles) and max of the order latencies drawn, in µs (None each
    but n when no order was sent)."""
    if not latencies_ns:
        return {"n": 0, "min": None, "p50": None, "p99": None, "max": None}
    v = np.asarray(latencies_ns, dtype=np.float64) / 1000.0
    p50, p99 = np.percentile(v, [50, 99], method="inverted_cdf")
    return {"n": int(v.size), "min": float(v.min()), "p50": float(p50), "p99": float(p99), "max": float(v.max())}


def run_variant(tape: Tape, table: FeatureTable, marks: MarkSeries, decisions: Decisions, limits: RiskLimits,
                params: SimParams, slow=None, quote_lots: int | None = None,
                path: MarketPath | None = None, execution: ExecutionParams | None = None) -> VariantResult:
    """One variant's ``VariantRun`` (``marks``: the market's, ``decisions.marks_of``; ``quote_lots``,
    ``path`` and ``execution``, the risk gateway's planner, as there); its result."""
    return VariantRun(tape, table, marks, decisions, limits, params, slow, quote_lots, path, execution).run()
