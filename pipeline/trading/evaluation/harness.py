"""One market's variants, end to end, in this process: what ``bench.evaluate`` runs per variant
(``evaluate_spec``), and the call the model's report makes for P&L and markouts on one synthetic
market (``model_pnl``). Sans-I/O apart from loading the model and the config.

``evaluate_spec``: a variant's decisions over the market's feature rows (``variants.decisions_for``),
the risk process's limits with the variant's ``lean_lots``, its ``execution`` table with the variant's
``planner``, its slow path (``model+llm``), its
simulation (``simulator.run_variant``, with the quoting scenario's quotes when the variant has
``quote=1``) and its results.json row.

``model_pnl``: a model file on ``seconds`` of one fresh synthetic market (seed, market name), the
default variants (``variants.DEFAULT_VARIANTS``: the model and its controls in the directional and
the quoting scenario, the quoting scenario's fast path on and off) with the config's thresholds or
the ones given, Bitget's standard spot fees (``pipeline.venue.fees.DEFAULT_EVALUATION_FEES``) unless
others are given, the order latency ``latency_us``; one process, deterministic: the same arguments
give the same numbers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

from pipeline.trading.evaluation import decisions as D
from pipeline.trading.evaluation.markouts import MarketPath, market_path
from pipeline.trading.evaluation.metrics import MarkSeries
from pipeline.trading.evaluation.replay import EvaluationError, Tape, synthetic_tape
from pipeline.trading.evaluation.simulator import (SimParams, default_capital, eval_execution, eval_limits,
                                                  run_variant)
from pipeline.trading.evaluation.variants import (DEFAULT_CONFIG, PipelineConfig, VariantSpec, decisions_for,
                                                  synthetic_params, variant_list)

#: the order latency when none is given: the tick -> order request sent p50 (µs) of
#: bench/reports/20261201T120159Z-pipeline.md (fast path, 1,000 updates/s); ``bench.evaluate`` reads
#: the newest committed pipeline report instead
FALLBACK_LATENCY_US = 1137.0


class MarketContext(NamedTuple):
    """What every variant of one market reads (shared, never changed by a variant)."""

    tape: Tape
    books: int
    table: D.FeatureTable
    marks: MarkSeries
    path: MarketPath
    cfg: PipelineConfig
    sim: SimParams
    seed: int
    models: dict  # model path -> loaded model (per process)


class SpecOutcome(NamedTuple):
    """One variant's results.json row, its timings (wall seconds: not results) and its equity curve."""

    row: dict
    timings: dict
    equity: object


def _rate(n: int, seconds: float) -> float | None:
    return n / seconds if seconds else None


def evaluate_spec(ctx: MarketContext, spec: VariantSpec) -> SpecOutcome:
    """One variant over the market (module docstring).

    Raises:
        EvaluationError: its model, limits or slow path cannot be set up (named).
    """
    tape, table, books = ctx.tape, ctx.table, ctx.books
    t1 = time.perf_counter()
    d = decisions_for(spec, table, ctx.models, ctx.seed)
    decide_s = time.perf_counter() - t1
    limits = eval_limits(ctx.cfg.risk_limits, tape.instruments, spec.lean_lots)
    execution = eval_execution(ctx.cfg.risk_execution, spec.planner)
    slow = None
    if spec.llm:
        from pipeline.trading.evaluation.slowpath import SlowPath

        slow = SlowPath.load(spec.llm_model, ctx.cfg.llm_params, tape.instruments, table, d, seed=ctx.seed)
    res = run_variant(tape, table, ctx.marks, d, limits, ctx.sim, slow, spec.quote_lots if spec.quote else None,
                      ctx.path, execution)
    describe = d.describe + (f"; slow path {spec.llm_model} (LLM hub in-process, seed {ctx.seed}; its generation "
                             "times are measured, so this row may differ between runs)" if spec.llm else "")
    row = {"name": spec.name, "describe": describe, "fast_only": spec.fast_only, "lean_lots": spec.lean_lots,
           "scenario": "quoting" if spec.quote else "directional", "fast": spec.fast,
           "quote_lots": spec.quote_lots if spec.quote else None, **res.metrics, "updates": books,
           "counts": res.counts, "final_positions": {str(k): v for k, v in res.positions.items()}}
    own = decide_s + res.sim_s + res.metrics_s
    tim = {"decide_s": decide_s, "sim_s": res.sim_s, "metrics_s": res.metrics_s, "fast_only": spec.fast_only,
           "quoting": spec.quote,
           "sim_updates_per_s": _rate(books, res.sim_s), "variant_updates_per_s": _rate(books, own),
           **res.extra_timings}
    return SpecOutcome(row, tim, res.equity)


def market_context(tape: Tape, table: D.FeatureTable, cfg: PipelineConfig, sim: SimParams, seed: int) -> MarketContext:
    """The shared part of one market: its marks, path and the drawdown's capital (``sim.capital``, else
    ``simulator.default_capital`` at the risk process's limits)."""
    marks = D.marks_of(table)
    capital = sim.capital
    if capital is None:
        capital = default_capital(tape.instruments, eval_limits(cfg.risk_limits, tape.instruments, 0), marks)
    sim = SimParams(**{**{f: getattr(sim, f) for f in sim.__struct_fields__}, "capital": capital})
    return MarketContext(tape, tape.books, table, marks, market_path(table, tape.events), cfg, sim, seed, {})


def model_pnl(model_path: str | Path, *, seed: int, market: str = "calibrated", seconds: int = 1800,
              thresholds: dict | None = None, fees=None, latency_us: float = FALLBACK_LATENCY_US,
              config: str | Path = DEFAULT_CONFIG) -> dict:
    """P&L and markouts of ``model_path`` on one synthetic market (module docstring).

    ``thresholds``: ``{"buy", "sell", "emergency", "side"}`` (any subset; the rest from the config's
    fast process); ``fees``: a ``pipeline.venue.fees.FeeSchedule`` (None: Bitget spot standard).

    Returns ``{"market", "seed", "span_s", "books", "maker_fee_bps", "taker_fee_bps", "latency_us",
    "variants": {name: row}}``, each row results.json's (``net_pnl``, ``gross_pnl``, ``fees``,
    ``trades``, ``fill_rate``, ``markouts`` {100, 1000, 5000 ms: ``count``, ``mean_ticks``,
    ``median_ticks``, ``mean_bps``, ``median_bps``, ``sum_ticks``, ``sum_quote``, ``unresolved``},
    ``emergency_cancelled``, ``avoided``, ``counts``, ...) for the names of ``variants.DEFAULT_VARIANTS``.

    Raises:
        EvaluationError: an unknown market, seconds < 1, a model the fast stage would refuse, bad
            thresholds or config (named).
    """
    from pipeline.venue.fees import DEFAULT_EVALUATION_FEES

    if seconds < 1:
        raise EvaluationError(f"seconds must be >= 1, got {seconds}")
    cfg = PipelineConfig.load(config)
    params = synthetic_params(market)
    th = {**cfg.thresholds, **(thresholds or {})}
    pairs = ",".join(f"{k}={th[k]!r}" for k in ("buy", "sell", "emergency", "side"))
    given = [f"{name}={conf},path={model_path},{pairs}" for name, conf in
             (("model", "kind=onnx"), ("random", "kind=random"), ("quote-model", "kind=onnx,quote=1"),
              ("quote-random", "kind=random,quote=1"))]
    specs = variant_list(given, cfg)
    fees = DEFAULT_EVALUATION_FEES if fees is None else fees
    lat = int(round(latency_us * 1000))
    sim = SimParams(order_latency_ns=lat, exec_latency_ns=lat, fees=fees)
    steps = max(1, seconds * 1000 // params.step_ms)
    tape = synthetic_tape(cfg.instruments, seed=seed, steps=steps, params=params)
    table = D.compute_features(tape, D.feature_params(tape.instruments, cfg.feature_params))
    ctx = market_context(tape, table, cfg, sim, seed)
    rows = {spec.name: evaluate_spec(ctx, spec).row for spec in specs}
    return {"market": market, "seed": seed, "span_s": tape.span_ns / 1e9, "books": ctx.books,
            "maker_fee_bps": fees.maker_bps, "taker_fee_bps": fees.taker_bps, "latency_us": latency_us,
            "variants": rows}
