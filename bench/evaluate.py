"""``make evaluate``: are the decisions any good? Variants side by side on one replayed market, offline,
deterministic (``pipeline.trading.evaluation``).

    python -m bench.evaluate [--capture FILE ...] [--itch FILE] [--variant NAME=CONFIG ...] [--quick]
                             [--out DIR] [--seed N | --seeds N,N,...] [--market calibrated|default]
                             [--market-s SECONDS | --steps N]
                             [--maker-fee-bps X --taker-fee-bps Y]
                             [--latency-from FILE | --latency-us N] [--latency-seed N]

No source: the paper venue's synthetic market (``--market``: default the one the config's venue
process runs; seed ``--seed``, or one market per seed of ``--seeds``; ``--market-s`` seconds of
market time, default ``MARKET_S``, or ``--steps`` steps of its pace; ``--quick`` a smoke-sized run).
``--capture``: Bitget capture files (one market, merged in time); ``--itch``: an ITCH 5.0 BinaryFILE
(one more market). Variants: ``variants.DEFAULT_VARIANTS`` (the directional scenario's model,
always-HOLD, imbalance rule and random labeler; the quoting scenario's fast path on and off and its
controls) and the ``--variant`` ones (``pipeline.trading.evaluation.variants``). With several markets
the verdicts of ``pipeline.trading.evaluation.judgement`` (fast path on against off, paired per seed)
are in results.json and report.md; with one they are INCONCLUSIVE by their rule.

Every market is replayed once; its features are computed once (the synthetic market: each
instrument replayed and its features computed in a process of its own, ``--workers``); each
variant's decisions run over all rows at once, then its simulation (risk gateway, order latency, the
paper venue's matching engine with queue positions and fees) and its metrics; the fast-path-only
variants side by side in processes of their own. The results do not depend on the processes.
Defaults: fees ``pipeline.venue.fees.DEFAULT_EVALUATION_FEES`` (Bitget spot standard tier, the
module names its sources); order latency a distribution drawn per order (seed ``--latency-seed``,
default 1): the tick -> order request sent latencies of the newest committed pipeline report of the
target scenario, or of ``--latency-from FILE`` (a pipeline report or one µs value a line;
``bench.evaluate_inputs``), or ``--latency-us`` for every order; the distribution's p50 for the
EXEC_REPORTs back (``--exec-latency-us``). A missing or unparsable latency source is an error (exit 2).
The judged models (every ONNX file a variant reads) are named with their sha256 and card file, and
each card is copied beside report.md as ``<stamp>-<model stem>-model-card.json``.

Output in ``--out`` (default ``bench/results/<UTC>-evaluate/``): ``results.json`` (byte-identical for
the same inputs and seed, but for a slow-path variant's row: its LLM generation times are
measured), ``timings.json`` (wall times and updates/s per stage: not deterministic), ``report.md``
(the table, sources, bad input, fees, latency, speed per stage with the verdicts against the
30,000 updates/s target, and what the table says), PNG plots
(equity, drawdown, IC by horizon) when matplotlib is installed. Exit status 2 on a bad request (named).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import NamedTuple

from bench import evaluate_inputs as inputs
from bench.evaluate_report import plots, report_markdown, table_text
from pipeline.trading.evaluation import decisions as D
from pipeline.trading.evaluation.harness import MarketContext, SpecOutcome, evaluate_spec, market_context
from pipeline.trading.evaluation.judgement import fast_path_verdicts, planner_verdicts
from pipeline.trading.evaluation.replay import (EvaluationError, Tape, capture_tape, check_finite_tape, itch_tape,
                                               synthetic_parts)
from pipeline.trading.evaluation.simulator import SimParams
from pipeline.trading.evaluation.variants import (DEFAULT_CONFIG, DIRECTIONAL, DIRECTIONAL_CONTROLS, PLANNER_PAIRS,
                                                  QUOTE_CONTROLS, QUOTE_OFF, QUOTE_ON, REPO, PipelineConfig,
                                                  synthetic_params, variant_list)
from pipeline.trading.messages import Kind

MARKET_S = 1_800  # market time of a default synthetic run: 30 minutes (steps: this over the market's step_ms)
QUICK_MARKET_S = 30  # --quick

def _rel(p: Path | str) -> str:
    p = Path(p).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r} is not a comma-separated list of integers") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give one or more distinct seeds")
    return seeds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", nargs="+", action="extend", default=[], metavar="FILE",
                    help="Bitget capture file(s) in the cryptofeed line format (one market, merged in time)")
    ap.add_argument("--itch", metavar="FILE", help="an ITCH 5.0 BinaryFILE (.gz too)")
    ap.add_argument("--itch-symbols", default="", help="comma-separated stocks of the ITCH file (default: all)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=CONFIG",
                    help="a variant (key=value list, or a preset name: model, hold, imbalance, model+llm)")
    ap.add_argument("--quick", action="store_true", help=f"smoke-sized synthetic market ({QUICK_MARKET_S} s)")
    ap.add_argument("--steps", type=int, default=None,
                    help="synthetic steps of the market's pace (default: --market-s of market time)")
    ap.add_argument("--market-s", type=int, default=None,
                    help=f"seconds of synthetic market time (default {MARKET_S}; --quick {QUICK_MARKET_S})")
    ap.add_argument("--seed", type=int, default=1, help="the synthetic market's seed (default 1)")
    ap.add_argument("--seeds", type=_seed_list, default=None, metavar="N,N,...",
                    help="one synthetic market per seed, the verdicts paired over them (instead of --seed)")
    ap.add_argument("--market", default=None, help="the synthetic market: calibrated or default (default: the "
                    "config's venue process's market param)")
    ap.add_argument("--workers", type=int, default=None,
                    help="processes for the work that runs side by side: the synthetic market's instruments (one "
                         "each) and the fast-path-only variants (one each) (default: the CPUs); the results are "
                         "the same whatever the number")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default bench/results/<UTC>-evaluate)")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                    help="the pipeline config (default configs/default.toml)")
    ap.add_argument("--maker-fee-bps", type=float, default=None)
    ap.add_argument("--taker-fee-bps", type=float, default=None)
    ap.add_argument("--latency-from", type=Path, default=None, metavar="FILE",
                    help="the order latency's distribution, decision -> exchange: a pipeline report (.md) or one "
                         "µs value a line (default: the newest pipeline report under bench/reports)")
    ap.add_argument("--latency-us", type=float, default=None, help="one order latency for every order (µs)")
    ap.add_argument("--latency-seed", type=int, default=1, help="the seed of the per-order latency draws (default 1)")
    ap.add_argument("--exec-latency-us", type=float, default=None,
                    help="exchange -> gateway (default: the order latency's p50)")
    ap.add_argument("--no-queue", action="store_true", help="resting orders fill from the first trade at their price")
    ap.add_argument("--capital", type=float, default=None,
                    help="the drawdown's capital (default: the largest positions' value)")
    ap.add_argument("--no-plots", action="store_true")
    return ap.parse_args(argv)


def sim_params(args: argparse.Namespace) -> tuple[SimParams, dict]:
    """The simulation's parameters and their description (values and sources) for the outputs.

    Raises:
        EvaluationError: only one of the two fees given, a fee the schedule refuses, a negative latency,
            both --latency-us and --latency-from, a latency source that is missing or unparsable.
    """
    from pipeline.venue.fees import DEFAULT_EVALUATION_FEES, FeeSchedule

    if (args.maker_fee_bps is None) != (args.taker_fee_bps is None):
        raise EvaluationError("give both --maker-fee-bps and --taker-fee-bps, or neither")
    if args.maker_fee_bps is None:
        fees = DEFAULT_EVALUATION_FEES
        fee_src = "pipeline.venue.fees.DEFAULT_EVALUATION_FEES (Bitget spot, standard tier)"
    else:
        try:
            fees = FeeSchedule(maker_bps=args.maker_fee_bps, taker_bps=args.taker_fee_bps)
        except ValueError as exc:
            raise EvaluationError(f"fees: {exc}") from None
        fee_src = "command line"
    dist = latency_dist(args)
    exec_us = dist.p50_us if args.exec_latency_us is None else args.exec_latency_us
    if exec_us < 0:
        raise EvaluationError(f"--exec-latency-us must be >= 0 µs, got {exec_us}")
    if args.capital is not None and not args.capital > 0:
        raise EvaluationError(f"--capital must be > 0, got {args.capital}")
    table = tuple(int(round(v * 1000)) for v in dist.values_us) if len(set(dist.values_us)) > 1 else ()
    p = SimParams(order_latency_ns=int(round(dist.p50_us * 1000)), exec_latency_ns=int(round(exec_us * 1000)),
                  order_latency_table_ns=table, latency_seed=args.latency_seed, fees=fees,
                  queue_model=not args.no_queue, capital=args.capital)
    desc = {"maker_fee_bps": fees.maker_bps, "taker_fee_bps": fees.taker_bps, "fees_source": fee_src,
            "order_latency_us": dist.p50_us, "order_latency_p99_us": dist.p99_us,
            "order_latency_values": len(dist.values_us), "latency_per_order": bool(table),
            "latency_seed": args.latency_seed, "exec_latency_us": exec_us, "latency_source": dist.source,
            "latency_what": dist.what, "queue_model": p.queue_model}
    return p, desc


def latency_dist(args: argparse.Namespace) -> inputs.LatencyDist:
    """The order latency's distribution: ``--latency-us``, ``--latency-from``, else the newest pipeline
    report (``bench.evaluate_inputs``).

    Raises:
        EvaluationError: both flags given; a bad value or source (``LatencySourceError``, named).
    """
    if args.latency_us is not None and args.latency_from is not None:
        raise EvaluationError("give --latency-us or --latency-from, not both")
    if args.latency_us is not None:
        return inputs.constant(args.latency_us)
    if args.latency_from is not None:
        return inputs.load(args.latency_from)
    return inputs.default_latency()


class Market(NamedTuple):
    """A replayed market: its tape, its BOOK count, its feature table when the replay computed it
    (the synthetic market's processes do, one instrument each; None: ``evaluate_market`` computes
    it) and the replay's timings (wall seconds, rates: not results)."""

    tape: Tape
    books: int
    table: D.FeatureTable | None
    timings: dict
    seed: int | None = None  # the synthetic market's seed (None: a capture or ITCH file)
    market: str | None = None  # the synthetic market's name (variants.SYNTHETIC_MARKETS)


def synthetic_steps(args: argparse.Namespace, step_ms: int) -> int:
    """``--steps``, or ``--market-s`` (default ``MARKET_S``, ``QUICK_MARKET_S`` with ``--quick``) of market
    time in steps of ``step_ms``."""
    if args.steps is not None:
        return args.steps
    seconds = args.market_s if args.market_s is not None else QUICK_MARKET_S if args.quick else MARKET_S
    return max(1, seconds * 1000 // step_ms)


def _synthetic_market(args: argparse.Namespace, cfg: PipelineConfig, seed: int) -> Market:
    """The synthetic market of ``seed`` replayed one instrument per process, each process computing its
    instrument's features too (``synthetic_parts``, ``features_of_instrument``); with basis pairs in the
    features' params (``fparams.pairs``) a leg's features need the other leg's book, so the processes
    only replay, and the features are computed over the merged tape (``compute_features``, by
    ``evaluate_market``: the market's table is None, its features timed as a capture's are).

    Raises:
        EvaluationError: no instrument in the config, an unknown market, feature params the stage refuses,
            what the venue refuses.
    """
    market = args.market or cfg.market
    params = synthetic_params(market)
    steps = synthetic_steps(args, params.step_ms)
    if not cfg.instruments:
        raise EvaluationError(f"config {cfg.source!r} has no instruments for the synthetic market")
    workers = min(_workers(args), len(cfg.instruments))
    fparams = D.feature_params(cfg.instruments, cfg.feature_params)
    t0 = time.perf_counter()
    paired = bool(fparams.pairs)
    sp = synthetic_parts(cfg.instruments, seed=seed, steps=steps, workers=workers, params=params,
                         per_instrument=None if paired else partial(D.features_of_instrument, fparams))
    table = None if paired else D.merge_features(sp.parts)
    wall = time.perf_counter() - t0
    books = Counter(e.instrument_id for e in sp.tape.events if e.kind == Kind.BOOK)
    n = sum(books.values())
    per = [{"symbol": p.instrument.symbol, "books": books[p.instrument.id], "replay_s": p.replay_s,
            "features_s": p.result_s, "replay_updates_per_s": _rate(books[p.instrument.id], p.replay_s),
            "features_updates_per_s": _rate(books[p.instrument.id], p.result_s)} for p in sp.parts]
    sp.tape.source += f", the {market} market (pipeline.venue.synthetic)"
    return Market(sp.tape, n, table, {"replay_s": wall, "replay_updates_per_s": _rate(n, wall),
                                   "features_in_replay": not paired, "processes": sp.processes,
                                   "per_instrument": per},
                  seed, market)


def _rate(n: int, seconds: float | None) -> float | None:
    return n / seconds if seconds else None


def build_markets(args: argparse.Namespace, cfg: PipelineConfig) -> list[Market]:
    """Each market replayed, with the seconds it took.

    Raises:
        EvaluationError: a source that cannot be read or holds no book.
    """
    out = []
    if args.capture:
        t0 = time.perf_counter()
        tape = capture_tape(args.capture)
        out.append(Market(tape, tape.books, None, {"replay_s": time.perf_counter() - t0}))
    if args.itch:
        t0 = time.perf_counter()
        syms = [s for s in args.itch_symbols.split(",") if s] or None
        tape = itch_tape(args.itch, symbols=syms)
        out.append(Market(tape, tape.books, None, {"replay_s": time.perf_counter() - t0}))
    if not out:
        out += [_synthetic_market(args, cfg, seed) for seed in (args.seeds or [args.seed])]
    for m in out:
        check_finite_tape(m.tape)
        m.timings.setdefault("replay_updates_per_s", _rate(m.books, m.timings["replay_s"]))
    return out


_FORKED: dict = {}  # in a variant worker process: the market's MarketContext and the specs (set by _forked)


def _forked(ctx: MarketContext, specs: list) -> None:
    """A variant worker's initializer: forked, it is handed the parent's objects as they are (nothing pickled)."""
    _FORKED.update(ctx=ctx, specs=specs)


def _run_forked(k: int) -> SpecOutcome:
    return evaluate_spec(_FORKED["ctx"], _FORKED["specs"][k])


def _run_variants(ctx: MarketContext, specs: list, workers: int) -> list[SpecOutcome]:
    """Every variant's outcome, in ``specs``' order: the fast-path-only ones in ``workers`` forked
    processes when there are two or more of them and ``workers`` > 1 (each variant's work is its
    own: the same results), the slow-path ones here, one after the other (their generation times
    are measured, so they do not share the CPU with other variants).

    Raises:
        EvaluationError: as ``harness.evaluate_spec`` (the first variant in ``specs``' order that fails).
    """
    fast = [k for k, spec in enumerate(specs) if spec.fast_only]
    outs: dict[int, SpecOutcome] = {}
    if workers > 1 and len(fast) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(workers, len(fast)), mp_context=multiprocessing.get_context("fork"),
                                 initializer=_forked, initargs=(ctx, specs)) as pool:
            # always-HOLD never trades: the cheapest, so the last to start (the others spread first)
            first = sorted(fast, key=lambda k: specs[k].kind == "rule" and specs[k].rule == "hold")
            futures = {k: pool.submit(_run_forked, k) for k in first}
            for k in fast:
                outs[k] = futures[k].result()
    for k, spec in enumerate(specs):
        if k not in outs:
            outs[k] = evaluate_spec(ctx, spec)
    return [outs[k] for k in range(len(specs))]


def evaluate_market(market: Market, cfg: PipelineConfig, specs: list, sim: SimParams, seed: int,
                    workers: int = 1) -> tuple[dict, dict, dict]:
    """One market: (its results.json entry, its timings, its curves for the plots); the variants
    as ``_run_variants`` runs them.

    Raises:
        EvaluationError: a variant's model, limits or slow path cannot be set up (named).
    """
    tape, books = market.tape, market.books
    t0 = time.perf_counter()
    table = market.table
    if table is None:
        table = D.compute_features(tape, D.feature_params(tape.instruments, cfg.feature_params))
    ctx = market_context(tape, table, cfg, sim, seed)
    features_s = time.perf_counter() - t0
    shared_s = market.timings["replay_s"] + features_s
    capital = ctx.sim.capital
    t1 = time.perf_counter()
    outs = _run_variants(ctx._replace(books=books), specs, workers)
    variants_s = time.perf_counter() - t1
    timings = {}
    for spec, out in zip(specs, outs):
        own = out.timings["decide_s"] + out.timings["sim_s"] + out.timings["metrics_s"]
        timings[spec.name] = {**out.timings, "updates_per_s": _rate(books, shared_s + own)}
    entry = {"source": tape.source, "seed": market.seed, "market": market.market,
             "instruments": [{"id": i.id, "symbol": i.symbol, "tick_size": i.tick_size, "lot_size": i.lot_size}
                             for i in tape.instruments],
             "books": books, "trades": len(tape.events) - books, "rows": len(table),
             "span_s": tape.span_ns / 1e9, "bad_input": dict(sorted(tape.bad.items())),
             "feature_rejections": dict(sorted(table.rejected.items())), "counts": dict(sorted(tape.counts.items())),
             "capital": capital, "variants": [out.row for out in outs]}
    here = market.table is None  # the features computed here (else by the replay's processes: only the marks)
    tim = {"features_s": features_s if here else None,
           "features_updates_per_s": _rate(books, features_s) if here else None,
           "marks_s": None if here else features_s, "variants_s": variants_s,
           "variant_processes": _variant_processes(specs, workers), "variants": timings}
    return entry, tim, {"equity": {spec.name: out.equity for spec, out in zip(specs, outs)}, "marks": ctx.marks}


def _variant_processes(specs: list, workers: int) -> int:
    """The processes ``_run_variants`` runs the fast-path-only variants in (1: this one)."""
    n = sum(1 for spec in specs if spec.fast_only)
    return min(workers, n) if workers > 1 and n > 1 else 1


def _workers(args: argparse.Namespace) -> int:
    """``--workers``, or the CPUs.

    Raises:
        EvaluationError: fewer than 1.
    """
    n = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise EvaluationError(f"--workers must be >= 1, got {n}")
    return n


def run(args: argparse.Namespace) -> tuple[dict, dict, list]:
    """The whole evaluation: (results, timings, per-market curves).

    Raises:
        EvaluationError: anything the request gets wrong (named).
    """
    t0 = time.perf_counter()
    cfg = PipelineConfig.load(args.config)
    specs = variant_list(args.variant, cfg)
    sim, sim_desc = sim_params(args)
    markets = build_markets(args, cfg)
    results = {"config": _rel(args.config), "thresholds": {**cfg.thresholds, "source": cfg.thresholds_source},
               "seed": args.seed, "seeds": args.seeds, "quick": bool(args.quick), **sim_desc,
               "models": inputs.judged_models(specs),
               "horizons_ms": [h // 1_000_000 for h in sim.horizons_ns],
               "markout_horizons_ms": [h // 1_000_000 for h in sim.markout_horizons_ns],
               "avoid_window_ms": sim.avoid_window_ns // 1_000_000, "markets": []}
    timings: dict = {"markets": []}
    curves = []
    for market in markets:
        seed = market.seed if market.seed is not None else args.seed
        entry, tim, cur = evaluate_market(market, cfg, specs, sim, seed, _workers(args))
        results["markets"].append(entry)
        timings["markets"].append({"source": market.tape.source, **market.timings, **tim})
        curves.append(cur)
    results["verdicts"] = fast_path_verdicts(results["markets"], on=QUOTE_ON, off=QUOTE_OFF, controls=QUOTE_CONTROLS,
                                             directional=DIRECTIONAL, directional_controls=DIRECTIONAL_CONTROLS)
    results["planner_verdicts"] = planner_verdicts(results["markets"], PLANNER_PAIRS)
    total = time.perf_counter() - t0
    books = sum(m.books for m in markets)
    timings.update(total_s=total, books=books, updates_per_s_end_to_end=_rate(books, total))
    return results, timings, curves


def main(argv: list[str] | None = None) -> int:
    from bench.report import start

    args = parse_args(argv)
    try:
        results, timings, curves = run(args)
    except EvaluationError as exc:
        print(f"evaluate: {exc}", file=sys.stderr)
        return 2
    out, machine = start("evaluate", args.out)
    timings["machine"] = machine
    stamp = dt.datetime.fromisoformat(machine["date"]).strftime("%Y%m%dT%H%M%SZ")
    cards = inputs.copy_cards(results["models"], out, stamp)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    made = [] if args.no_plots else plots(out, results, curves)
    (out / "report.md").write_text(report_markdown(results, timings, made, cards))
    print(table_text(results, timings, cards))
    written = ", ".join(["results.json", "timings.json", "report.md", *cards.values(), *made])
    print(f"\nwritten: {_rel(out)}/ ({written})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
