"""``bench.evaluate``'s tables of fill quality and of the verdicts (issue #30): per market, every
variant's fills, fill rate, markouts and what its EMERGENCY cancels avoided; over the seeds, the fast
path on against off side by side, every variant's net P&L per seed, and the verdicts with their
rule (``pipeline.trading.evaluation.judgement``)."""

from __future__ import annotations

from pipeline.trading.evaluation.judgement import A_BETTER, B_BETTER, T_975


def _f(v, fmt: str = "{:.4g}") -> str:
    return "-" if v is None else fmt.format(v)


def _mk(v: dict, ms: int) -> dict:
    m = v.get("markouts") or {}
    return m.get(ms, m.get(str(ms))) or {}


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _avoided(v: dict, rule: str, ms: int) -> dict:
    r = ((v.get("avoided") or {}).get("rules") or {}).get(rule) or {}
    m = r.get("markouts") or {}
    return {"would_fill": r.get("would_fill"), **(m.get(ms, m.get(str(ms))) or {})}


def fill_table(market: dict, horizons_ms: list[int]) -> list[str]:
    """Per variant: scenario, fills, fill rate, the mean markout per fill at each horizon in ticks and
    (bps), the 1 s markouts' sum in quote currency, EMERGENCY cancels, and what they avoided at 1 s
    under the ``through`` (certain) and ``touch`` (at most) rules: would-be fills, adverse selection
    avoided, good fills given up, net after the maker fee (quote)."""
    head = ["variant", "scenario", "fills", "fill rate", *[f"markout {h} ms ticks (bps)" for h in horizons_ms],
            "1 s markouts, sum (quote)", "EMERGENCY cancels", "avoided, through: fills / adverse / good / net",
            "avoided, touch: fills / adverse / good / net"]
    rows = []
    for v in market["variants"]:
        cells = []
        for h in horizons_ms:
            m = _mk(v, h)
            cells.append(f"{_f(m.get('mean_ticks'), '{:.2f}')} ({_f(m.get('mean_bps'), '{:.2f}')})")
        av = []
        for rule in ("through", "touch"):
            a = _avoided(v, rule, 1000)
            av.append(f"{_f(a.get('would_fill'), '{}')} / {_f(a.get('adverse_quote'), '{:.6f}')} / "
                      f"{_f(a.get('good_quote'), '{:.6f}')} / {_f(a.get('net_quote'), '{:.6f}')}")
        rows.append([v["name"], v.get("scenario", "-"), str(v["trades"]), _f(v.get("fill_rate"), "{:.3f}"), *cells,
                     _f(_mk(v, 1000).get("sum_quote"), "{:.6f}"), str(v.get("emergency_cancelled", "-")), *av])
    return _md(head, rows)


def _row(market: dict, name: str) -> dict | None:
    return next((v for v in market["variants"] if v["name"] == name), None)


def on_off_table(results: dict) -> list[str]:
    """Per seed, the fast path on against off (``verdicts.on`` / ``off``): net P&L after fees, their
    difference, fills, the mean 1 s markout (bps), EMERGENCY cancels and the net of what they
    avoided at 1 s (through / touch)."""
    vd = results["verdicts"]
    on, off = vd["on"], vd["off"]
    head = ["seed", f"net P&L {on}", f"net P&L {off}", "difference", f"fills {on} / {off}",
            f"1 s markout bps {on} / {off}", "EMERGENCY cancels", "avoided net at 1 s, through / touch (quote)"]
    rows = []
    for m in results["markets"]:
        a, b = _row(m, on), _row(m, off)
        if a is None or b is None:
            continue
        rows.append([str(m.get("seed")), f"{a['net_pnl']:.6f}", f"{b['net_pnl']:.6f}",
                     f"{a['net_pnl'] - b['net_pnl']:+.6f}", f"{a['trades']} / {b['trades']}",
                     f"{_f(_mk(a, 1000).get('mean_bps'), '{:.3f}')} / {_f(_mk(b, 1000).get('mean_bps'), '{:.3f}')}",
                     str(a.get("emergency_cancelled", "-")),
                     f"{_f(_avoided(a, 'through', 1000).get('net_quote'), '{:.6f}')} / "
                     f"{_f(_avoided(a, 'touch', 1000).get('net_quote'), '{:.6f}')}"])
    return _md(head, rows)


def net_by_seed_table(results: dict) -> list[str]:
    """Every variant's net P&L after fees (quote) per seed, and its mean over the seeds."""
    names = [v["name"] for v in results["markets"][0]["variants"]] if results["markets"] else []
    head = ["variant", *[f"seed {m.get('seed')}" for m in results["markets"]], "mean"]
    rows = []
    for name in names:
        vals = [(_row(m, name) or {}).get("net_pnl") for m in results["markets"]]
        known = [x for x in vals if x is not None]
        rows.append([name, *[_f(x, "{:.6f}") for x in vals], _f(sum(known) / len(known) if known else None, "{:.6f}")])
    return _md(head, rows)


def planner_table(market: dict, pairs) -> list[str]:
    """The planner comparison of one market: for each (depth-aware, simple) pair it has, both rows side by
    side: planner, fills, fill rate, size-weighted slippage against the arrival mid in bps (ticks), net
    P&L after fees, and the depth-aware planner's parent orders by the state they ended in or passed."""
    head = ["variant", "planner", "fills", "fill rate", "slippage vs arrival mid, bps (ticks)", "net P&L",
            "parents: filled / expired / cancelled / waited"]
    rows = []
    for pair in pairs:
        got = [_row(market, n) for n in pair]
        if any(v is None for v in got):
            continue
        for v in got:
            s = v.get("slippage") or {}
            par = (v.get("counts") or {}).get("parents")
            par_txt = "-" if par is None else (f"{par.get('FILLED', 0)} / {par.get('EXPIRED', 0)} / "
                                               f"{par.get('CANCELLED', 0)} / {par.get('WAIT_LIQUIDITY', 0)}")
            rows.append([v["name"], v.get("planner", "-"), str(v["trades"]), _f(v.get("fill_rate"), "{:.3f}"),
                         f"{_f(s.get('mean_bps'), '{:.3f}')} ({_f(s.get('mean_ticks'), '{:.2f}')})",
                         _f(v.get("net_pnl"), "{:.6f}"), par_txt])
    return _md(head, rows) if rows else []


def planner_verdict_lines(verdicts: list[dict]) -> list[str]:
    """The planner comparison's verdicts in words (``judgement.planner_verdicts``; the same rule)."""
    return [_verdict_line(c, c["measure"]) for c in verdicts]


def _verdict_line(c: dict, measure: str) -> str:
    ci = c["ci95"]
    ci_txt = f"[{ci[0]:+.6g}, {ci[1]:+.6g}]" if ci else "-"
    who = {A_BETTER: f"{c['a']} better", B_BETTER: f"{c['b']} better"}.get(c["outcome"], "INCONCLUSIVE")
    return (f"- {c['a']} - {c['b']}, {measure}: n = {c['n']}, mean difference {_f(c['mean'], '{:+.6g}')}, "
            f"sd {_f(c['sd'], '{:.6g}')}, 95 % interval {ci_txt}: **{who}** ({c['why']})")


def verdict_lines(results: dict) -> list[str]:
    """The verdicts in words: the rule (fixed before the results), the fast path on against off on net
    P&L and on the 1 s markout, the model against each control, and what is judged on and why."""
    vd = results["verdicts"]
    out = ["Rule (fixed before any result was looked at; pipeline.trading.evaluation.judgement): per seed the "
           "difference a - b; over the seeds where both have a value, the mean and the two-sided 95 % Student-t "
           f"interval (t(0.975, 4) = {T_975[3]} for 5 seeds); a better when the interval is above 0, b better when "
           "below, INCONCLUSIVE when it holds 0, with fewer than 2 seeds, or when a and b never differed.", "",
           f"**{vd['statement']}**", "",
           _verdict_line(vd["net_pnl"], "net P&L after fees (quote)"),
           _verdict_line(vd["markout_1s_bps"], "mean 1 s markout per fill (bps)")]
    out += [_verdict_line(c, "net P&L after fees (quote)") for c in vd["controls"] + vd["directional"]]
    out += ["", "Judged on: " + vd["judged_on"]]
    return out
