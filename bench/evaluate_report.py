"""``bench.evaluate``'s outputs for people: the side-by-side table (terminal and markdown), report.md
with what the table says in plain words, the fill-quality tables and the verdicts over the seeds
(``evaluate_tables``), the inputs named (the order latency's source and its p50 / p99, each judged
model's sha256 and card file), and the PNG plots (equity, drawdown, IC by horizon)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.evaluate_tables import (fill_table, net_by_seed_table, on_off_table, planner_table, planner_verdict_lines,
                                   verdict_lines)
from pipeline.trading.evaluation.variants import PLANNER_PAIRS
from pipeline.trading.evaluation.metrics import drawdown

TARGET_UPDATES_PER_S = 30_000  # issue #22: the fast-path-only variants, offline, on this machine


def _f(v, fmt: str = "{:.4g}") -> str:
    return "-" if v is None else fmt.format(v)


def _ic(v: dict, h: int):
    return v["ic"].get(h, v["ic"].get(str(h)))


def _rows(market: dict, horizons: list[int]) -> tuple[list[str], list[list[str]]]:
    head = ["variant", "net P&L", "gross P&L", "fees", "trades", "round trips", "win rate", "max DD", "Sharpe/h",
            *[f"IC {h} ms" for h in horizons], "alpha decay", "stability", "risk-adj. lift", "verdicts AD/WR/DD"]
    rows = []
    for v in market["variants"]:
        vd = v["verdicts"]
        rows.append([v["name"], _f(v["net_pnl"], "{:.6f}"), _f(v["gross_pnl"], "{:.6f}"), _f(v["fees"], "{:.6f}"),
                     str(v["trades"]), str(v["round_trips"]), _f(v["win_rate"], "{:.3f}"),
                     _f(v["max_drawdown"], "{:.4f}"), _f(v["sharpe"], "{:.2f}"),
                     *[_f(_ic(v, h), "{:.3f}") for h in horizons], _f(v["alpha_decay"], "{:.3f}"),
                     _f(v["stability_score"], "{:.3f}"), _f(v["risk_adjusted_lift"], "{:.2f}"),
                     f"{vd['alpha_decay']}/{vd['win_rate']}/{vd['max_drawdown']}"])
    return head, rows


def table_markdown(market: dict, horizons: list[int]) -> str:
    head, rows = _rows(market, horizons)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _rate(v) -> str:
    return _f(v, "{:,.0f}")


def _span(values: list) -> str:
    """``a-b`` of the values that are known (one value: itself)."""
    vs = [v for v in values if v is not None]
    if not vs:
        return "-"
    lo, hi = min(vs), max(vs)
    return _rate(lo) if round(lo) == round(hi) else f"{_rate(lo)}-{_rate(hi)}"


def _verdict(values: list) -> str:
    vs = [v for v in values if v is not None]
    return "met" if vs and min(vs) >= TARGET_UPDATES_PER_S else "MISSED"


def _speed_lines(market_timings: dict, books: int) -> list[str]:
    """Per stage: the market's replay (with the features when its processes computed them), the
    features otherwise, each variant's own work; then the target's verdicts for the fast-path-only
    variants: their own work, and a run of one of them end to end on this market."""
    mt = market_timings
    if mt.get("features_in_replay"):
        per = mt["per_instrument"]
        out = [f"- market replay + features, {books:,} book updates in {mt['processes']} process(es), one instrument "
               f"each: {mt['replay_s']:.2f} s wall, {_rate(mt['replay_updates_per_s'])} updates/s; per process: replay "
               f"(venue frames, the feed's decoder and book building) {_span([p['replay_updates_per_s'] for p in per])}"
               f" updates/s, features {_span([p['features_updates_per_s'] for p in per])} updates/s"]
    else:
        out = [f"- market replay (book building as the feed runs it): {mt['replay_s']:.2f} s, "
               f"{_rate(mt['replay_updates_per_s'])} updates/s",
               f"- features (once per market, shared by every variant): {mt['features_s']:.2f} s, "
               f"{_rate(mt['features_updates_per_s'])} updates/s"]
    for name, t in mt["variants"].items():
        out.append(f"- {name}: decisions {t['decide_s']:.3f} s, simulation {t['sim_s']:.3f} s "
                   f"({_rate(t['sim_updates_per_s'])} updates/s), metrics {t['metrics_s']:.3f} s: "
                   f"{_rate(t['variant_updates_per_s'])} updates/s" + (
                       f"; LLM generations {t['generations']}, measured {t['gen_s']:.2f} s" if "gen_s" in t else ""))
    fast = [t for t in mt["variants"].values() if t.get("fast_only") and not t.get("quoting")]
    quoting = [t for t in mt["variants"].values() if t.get("quoting")]
    if "variants_s" in mt:
        n_fast = sum(1 for t in mt["variants"].values() if t.get("fast_only"))
        out.append(f"- the variants together: {mt['variants_s']:.2f} s wall ({n_fast} fast-path-only in "
                   f"{mt['variant_processes']} process(es), the others one after the other)")
    if quoting:
        own_q = _span([t["variant_updates_per_s"] for t in quoting])
        out.append(f"- the quoting scenario's variants (their quotes rest, so every book change goes through the "
                   f"matching engine's queue model): their own work {own_q} updates/s (no target: issue #22's is "
                   "for the directional fast path)")
    if fast:
        own = [t["variant_updates_per_s"] for t in fast]
        whole = [t["updates_per_s"] for t in fast]
        out.append(f"- target >= {TARGET_UPDATES_PER_S:,} book updates/s (issue #22) for the directional "
                   f"fast-path-only variants: their own work (decisions, simulation, metrics) {_span(own)} updates/s: "
                   f"{_verdict(own)}; one of them end to end on this market (the replay and features above plus "
                   f"its own work) {_span(whole)} updates/s: {_verdict(whole)}")
    return out


def _end_to_end(timings: dict) -> str:
    rate = timings["updates_per_s_end_to_end"]
    return (f"end to end (this run: every market, every variant, metrics): {timings['total_s']:.1f} s for "
            f"{timings['books']:,} book updates, {_rate(rate)} updates/s: {_verdict([rate])} against "
            f"{TARGET_UPDATES_PER_S:,}")


def latency_sentence(results: dict) -> str:
    """The order latency in words: its source and what in it, its p50 / p99, how it was drawn, and the
    exchange -> gateway latency."""
    src = f"{results['latency_source']}, {results['latency_what']}"
    back = f"{results['exec_latency_us']:g} µs exchange -> gateway"
    if not results.get("latency_per_order"):
        return (f"Order latency {results['order_latency_us']:g} µs decision -> exchange for every order ({src}); "
                f"{back}.")
    return (f"Order latency decision -> exchange drawn per order (seed {results['latency_seed']}, orders reaching the "
            f"exchange in the order decided) from {results['order_latency_values']} equally likely values: p50 "
            f"{results['order_latency_us']:g} µs, p99 {results['order_latency_p99_us']:g} µs (from {src}); {back}.")


def _drawn(v: dict) -> str:
    """A variant's order latencies as drawn (``simulator.latency_summary``), or "" when it sent none."""
    d = v.get("order_latency_us") or {}
    if not d.get("n"):
        return ""
    return (f"; order latency drawn for {d['n']} order(s): p50 {d['p50']:.0f} / p99 {d['p99']:.0f} µs (min "
            f"{d['min']:.0f}, max {d['max']:.0f})")


def model_lines(results: dict, cards: dict | None = None) -> list[str]:
    """One line per judged model: its file, full sha256, the variants that read it, its card file and
    the card's copy beside this report (``cards``: model path -> the copy's file name)."""
    out = []
    for m in results.get("models", []):
        copy = (cards or {}).get(m["path"])
        card = "no card file" if m["card"] is None else f"card {m['card']}" + (
            f", copied beside this report as {copy}" if copy else "")
        out.append(f"- Judged model {m['path']} sha256 {m['sha256']} (variants {', '.join(m['variants'])}); {card}.")
    return out


def table_text(results: dict, timings: dict, cards: dict | None = None) -> str:
    """The terminal's view: the latency and the judged models, then per market the table and the speed."""
    horizons = results["horizons_ms"]
    out = [latency_sentence(results), *model_lines(results, cards), ""]
    for market, mt in zip(results["markets"], timings["markets"]):
        out += [f"== {market['source']}: {market['books']} book updates over {market['span_s']:.1f} s of market time",
                table_markdown(market, horizons), "", *fill_table(market, results["markout_horizons_ms"]), ""]
        out += _speed_lines(mt, market["books"])
    if "verdicts" in results:
        out += ["", "== fast path on against off, per seed", *on_off_table(results), "", *verdict_lines(results)]
    out.append("- " + _end_to_end(timings))
    return "\n".join(out)


def _by_name(market: dict) -> dict:
    return {v["name"]: v for v in market["variants"]}


def plain_words(market: dict) -> str:
    """What the table says, from its numbers (no figure here that is not in the table)."""
    vs = market["variants"]
    if not vs:
        return "No variant was evaluated."
    by = _by_name(market)
    best = max(vs, key=lambda v: v["net_pnl"])
    said = [f"Best net P&L after fees: {best['name']} ({best['net_pnl']:.6f} quote)."]
    hold = by.get("hold")
    if hold is not None:
        said.append(f"always-HOLD traded {hold['trades']} times for a net P&L of {hold['net_pnl']:.6f}: the zero line.")
    for name in [v["name"] for v in vs if v["name"] != "hold"]:
        v = by[name]
        if not v["trades"]:
            said.append(f"{name} never traded (its decisions never became a filled order).")
            continue
        edge = "a positive gross edge" if v["gross_pnl"] > 0 else "no gross edge (gross P&L <= 0)"
        eaten = ""
        if v["gross_pnl"] > 0 and v["net_pnl"] <= 0:
            eaten = f"; fees ({v['fees']:.6f}) eat all of it"
        elif v["gross_pnl"] > 0:
            eaten = f"; fees take {v['fees'] / v['gross_pnl']:.0%} of it"
        ic = [x for x in v["ic"].values() if x is not None]
        ic_txt = (f"its signal's IC ranges {min(ic):.3f} to {max(ic):.3f} over the horizons" if ic
                  else "its signal's IC is undefined (too few pairs or a constant signal)")
        said.append(f"{name}: {v['trades']} fills, {v['round_trips']} round trips, {edge} ({v['gross_pnl']:.6f})"
                    f"{eaten}; win rate {_f(v['win_rate'], '{:.3f}')}, max drawdown {v['max_drawdown']:.4f}; "
                    f"{ic_txt}; verdicts alpha decay {v['verdicts']['alpha_decay']}, win rate "
                    f"{v['verdicts']['win_rate']}, drawdown {v['verdicts']['max_drawdown']}.")
    model, imb = by.get("model"), by.get("imbalance")
    if model is not None and imb is not None:
        cmp = "beats" if model["net_pnl"] > imb["net_pnl"] else "does not beat"
        said.append(f"The default model {cmp} the imbalance rule on net P&L after fees "
                    f"({model['net_pnl']:.6f} vs {imb['net_pnl']:.6f}).")
    return " ".join(said)


def report_markdown(results: dict, timings: dict, plots: list[str], cards: dict | None = None) -> str:
    """report.md (module docstring); ``cards``: model path -> its card's copy beside the report."""
    horizons = results["horizons_ms"]
    th = results["thresholds"]
    md = ["# Strategy evaluation (`python -m bench.evaluate`)", "",
          f"Config {results['config']}; the fast stage's thresholds buy {th['buy']:g}, sell {th['sell']:g}, emergency "
          f"{th['emergency']:g}, at-risk side {th.get('side', 1.01):g} ({th['source']}). "
          f"Seed{'s ' + str(results['seeds']) if results.get('seeds') else ' ' + str(results['seed'])}"
          f"{', quick run' if results['quick'] else ''}.",
          "",
          f"Fees: maker {results['maker_fee_bps']:g} bps, taker {results['taker_fee_bps']:g} bps "
          f"({results['fees_source']}). {latency_sentence(results)} Queue model "
          f"{'on' if results['queue_model'] else 'off'} (pipeline.venue.queue). IC horizons {horizons} ms.", "",
          *model_lines(results, cards), ""]
    for market, mt in zip(results["markets"], timings["markets"]):
        md += [f"## {market['source']}", "",
               f"{market['books']} book updates and {market['trades']} trades over {market['span_s']:.1f} s of market "
               f"time; {market['rows']} feature rows. Instruments: "
               + ", ".join(f"{i['symbol']} (tick {i['tick_size']:g}, lot {i['lot_size']:g})"
                           for i in market["instruments"])
               + f". Drawdown capital {market['capital']:.2f} quote.", "",
               f"Bad input (counted, not fatal): {market['bad_input'] or 'none'}; feature rejections: "
               f"{market['feature_rejections'] or 'none'}; source counts: {market['counts']}.", "",
               table_markdown(market, horizons), "", plain_words(market), "",
               f"Fills and markouts (markout = side x (mid {results['markout_horizons_ms']} ms after the fill - fill "
               f"price), per fill; what EMERGENCY cancels avoided: the cancelled orders followed for "
               f"{results['avoid_window_ms']} ms, pipeline.trading.evaluation.markouts):", "",
               *fill_table(market, results["markout_horizons_ms"]), ""]
        planners = planner_table(market, PLANNER_PAIRS)
        if planners:
            md += ["The risk gateway's planners on the same decisions (design document 000 section 3.3: the "
                   "depth-aware planner waits for liquidity, reprices a partial fill beyond 2 sigma of realized "
                   "volatility; slippage = side x (fill price - the parent's arrival mid), size-weighted, positive "
                   "= a cost; pipeline.trading.evaluation.slippage):", "", *planners, ""]
        md += ["Variants:", ""]
        for v in market["variants"]:
            md.append(f"- {v['name']}: {v['describe']}; lean_lots {v['lean_lots']}; labels {v['counts']['labels']}; "
                      f"gateway {v['counts']['gateway']}; exchange {v['counts']['exchange']}"
                      + (f"; LLM {v['counts']['llm']}" if "llm" in v["counts"] else "") + _drawn(v))
        md += ["", "Speed (this run, this machine; timings.json):", ""] + _speed_lines(mt, market["books"])
        md.append("")
    if "verdicts" in results:
        md += ["## The fast path on against off, and the controls, over the seeds", "",
               f"Seeds {[m.get('seed') for m in results['markets']]}.", "", *on_off_table(results), "",
               "Net P&L after fees per seed (quote):", "", *net_by_seed_table(results), "", *verdict_lines(results),
               ""]
    if results.get("planner_verdicts"):
        md += ["## The depth-aware planner against the simple one, over the seeds", "",
               "Same rule as above, each measure oriented so that higher is better (a = the depth-aware variant):",
               "", *planner_verdict_lines(results["planner_verdicts"]), ""]
    md.append(_end_to_end(timings)[0].upper() + _end_to_end(timings)[1:] + ".")
    if "machine" in timings:
        from bench.report import machine_line

        md.append(machine_line(timings["machine"]))
    if plots:
        md += ["", "Plots: " + ", ".join(f"![{p}]({p})" for p in plots)]
    return "\n".join(md) + "\n"


# ------------------------------------------------------------------------------------- plots
def _short(source: str) -> str:
    """A source's description up to its first parenthesis or comma (a plot title's width)."""
    for sep in (" (", ","):
        source = source.split(sep, 1)[0]
    return source


def plots(out_dir: Path, results: dict, curves: list[dict]) -> list[str]:
    """Equity, drawdown and IC-by-horizon PNGs per market; [] when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for k, (market, cur) in enumerate(zip(results["markets"], curves)):
        sfx = f"-{k + 1}" if len(curves) > 1 else ""
        cap = market["capital"]
        fig_e, ax_e = plt.subplots(figsize=(8, 4.5))
        fig_d, ax_d = plt.subplots(figsize=(8, 4.5))
        for name, eq in cur["equity"].items():
            if eq.ts_ns.size == 0:
                continue
            t = (eq.ts_ns - eq.ts_ns[0]) / 1e9
            line, = ax_e.plot(t, eq.net, label=f"{name} net")
            ax_e.plot(t, eq.gross, linestyle=":", color=line.get_color(), label=f"{name} gross")
            ax_d.plot(t, drawdown(eq.net, cap), label=name)
        for ax, fig, title, ylabel, name in ((ax_e, fig_e, "Equity (mark to market)", "P&L (quote)", "equity"),
                                             (ax_d, fig_d, "Drawdown", "(peak - net) / (capital + peak)", "drawdown")):
            ax.set_title(f"{title}: {_short(market['source'])}", fontsize=9)
            ax.set_xlabel("market time (s)")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(out_dir / f"{name}{sfx}.png", dpi=110)
            plt.close(fig)
            made.append(f"{name}{sfx}.png")
        fig, ax = plt.subplots(figsize=(8, 4.5))
        hs = results["horizons_ms"]
        for v in market["variants"]:
            ys = [_ic(v, h) for h in hs]
            if any(y is not None for y in ys):
                ax.plot(hs, [np.nan if y is None else y for y in ys], marker="o", label=v["name"])
        ax.set_xscale("log")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(f"Signal IC by horizon (alpha decay): {_short(market['source'])}", fontsize=9)
        ax.set_xlabel("horizon (ms)")
        ax.set_ylabel("Spearman IC with the forward mid return")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / f"alpha_decay{sfx}.png", dpi=110)
        plt.close(fig)
        made.append(f"alpha_decay{sfx}.png")
    return made
