"""The verdicts of the evaluation over several markets (seeds): a rule fixed before any result was
looked at, pure.

Rule (``paired_verdict``), for two variants ``a`` and ``b`` run on the same markets: per market
``i`` the difference ``d_i = a_i - b_i`` of a measure; over the ``n`` markets where both have it,
the mean and the sample standard deviation (ddof 1) of the differences and the two-sided 95 %
Student-t interval ``mean +/- t(0.975, n - 1) * sd / sqrt(n)`` (the markets are independent seeds, so
the pairs are independent; the t interval assumes the differences roughly normal, which five seeds
cannot check: a skewed difference makes it too narrow or too wide, so read the per-seed differences
beside it). Outcome:

- ``A_BETTER`` when the interval's lower end is > 0, ``B_BETTER`` when its upper end is < 0;
- ``INCONCLUSIVE`` otherwise (the interval holds 0), with fewer than 2 pairs, or when every
  difference is exactly 0 (the two variants never differed: nothing to judge). Never a pass by default.

``fast_path_verdicts`` applies it to the evaluation's question (issue #30): the quoting scenario with
the fast path on against off, on the net P&L after fees (does the fast model earn its place: does it
avoid more adverse selection than the fills it gives up are worth?) and on the fills' mean 1 s
markout in bps (does it reduce adverse selection?); and the same rule for the model against each
control on net P&L. The measures judged are the ones that cannot be gamed the way design document
000's scores can (see ``JUDGED_ON``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

A_BETTER, B_BETTER, INCONCLUSIVE = "A_BETTER", "B_BETTER", "INCONCLUSIVE"
#: two-sided 95 % Student-t quantiles t(0.975, df), df 1..30 (any statistics table); above 30 the
#: df-30 value is used (slightly wider than the true interval: never narrower)
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
#: the measures the verdicts are taken on, and why they cannot be gamed as design document 000's scores
JUDGED_ON = (
    "net P&L after fees, paired per seed against the fast path off and against each control: it is the "
    "money itself (every fill, fee and the position marked to the mid at the end), so no shape of the "
    "signal's IC curve and no small drawdown raises it without earning it; and the fills' mean markout at "
    "1 s in bps: what each fill was worth against the mid 1 s later, so a strategy cannot improve it by "
    "trading less or by holding losers open. Design document 000's stability_score and risk_adjusted_lift "
    "are reported as defined but not judged on: alpha decay = 1 - IC(30 s) / IC(0.1 s) rewards a signal "
    "whose IC grows with the horizon (a negative decay scores above a perfect one), and "
    "risk_adjusted_lift = (win rate - 0.5) / (max drawdown + 0.01) rewards a tiny drawdown whatever the "
    "P&L, so a variant that hardly trades, or a random labeler, can rank above a real signal; the win "
    "rate per round trip rewards taking small profits and leaving losers open.")


def t_975(df: int) -> float:
    """t(0.975, df) from ``T_975`` (df above 30: the df-30 value).

    Raises:
        ValueError: df < 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return T_975[min(df, len(T_975)) - 1]


def paired_verdict(a: Sequence[float | None], b: Sequence[float | None]) -> dict:
    """The rule of the module docstring over per-market values of ``a`` and ``b`` (same order; a pair
    with a None or a non-finite value on either side is left out): ``{"n", "diffs", "mean", "sd",
    "ci95": [lo, hi], "outcome", "why"}`` (mean / sd / ci95 None when n < 2).

    Raises:
        ValueError: ``a`` and ``b`` of different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"a has {len(a)} values but b has {len(b)}")
    diffs = [x - y for x, y in zip(a, b)
             if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
    n = len(diffs)
    out = {"n": n, "diffs": diffs, "mean": None, "sd": None, "ci95": None}
    if n < 2:
        return {**out, "outcome": INCONCLUSIVE, "why": f"{n} pair(s): the rule needs 2 or more"}
    mean = math.fsum(diffs) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_975(n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    out.update(mean=mean, sd=sd, ci95=[lo, hi])
    if all(d == 0 for d in diffs):
        return {**out, "outcome": INCONCLUSIVE, "why": "every difference is 0: the two never differed"}
    if lo > 0:
        return {**out, "outcome": A_BETTER, "why": "the 95 % interval of the mean difference is above 0"}
    if hi < 0:
        return {**out, "outcome": B_BETTER, "why": "the 95 % interval of the mean difference is below 0"}
    return {**out, "outcome": INCONCLUSIVE, "why": "the 95 % interval of the mean difference holds 0"}


def _values(markets: Sequence[dict], name: str, measure) -> list[float | None]:
    """``measure(row)`` of variant ``name`` in each market (None where the market lacks it)."""
    out = []
    for m in markets:
        row = next((v for v in m["variants"] if v["name"] == name), None)
        out.append(None if row is None else measure(row))
    return out


def net_pnl(row: dict) -> float | None:
    return row.get("net_pnl")


def markout_1s_bps(row: dict) -> float | None:
    """The mean 1 s markout (bps) of the variant's fills; None without a resolved fill."""
    m = (row.get("markouts") or {}).get(1000, (row.get("markouts") or {}).get("1000"))
    return None if m is None else m.get("mean_bps")


def compare(markets: Sequence[dict], a: str, b: str, measure) -> dict:
    """``paired_verdict`` of variant ``a`` against ``b`` on ``measure`` over ``markets`` (results.json
    market entries), with the names and the per-market values."""
    va, vb = _values(markets, a, measure), _values(markets, b, measure)
    return {"a": a, "b": b, "a_values": va, "b_values": vb, **paired_verdict(va, vb)}


def fill_rate(row: dict) -> float | None:
    return row.get("fill_rate")


def arrival_improvement_bps(row: dict) -> float | None:
    """Minus the fills' size-weighted mean slippage against the arrival mid (bps): higher is better."""
    v = (row.get("slippage") or {}).get("mean_bps")
    return None if v is None else -v


#: what the planner comparison judges a depth-aware variant on against the same decisions through the
#: simple planner (each measure oriented so that higher is better; the rule is ``paired_verdict``'s)
PLANNER_MEASURES = (("net P&L after fees (quote)", net_pnl), ("fill rate", fill_rate),
                    ("price improvement against the arrival mid (bps, minus the slippage)", arrival_improvement_bps))


def planner_verdicts(markets: Sequence[dict], pairs: Sequence[tuple[str, str]]) -> list[dict]:
    """For each (depth-aware, simple) pair of variant names that every market has: ``compare`` on each
    of ``PLANNER_MEASURES`` (its ``measure`` named in the entry)."""
    out = []
    for a, b in pairs:
        if not markets or any(not any(v["name"] == n for v in m["variants"]) for m in markets for n in (a, b)):
            continue
        out += [{**compare(markets, a, b, fn), "measure": label} for label, fn in PLANNER_MEASURES]
    return out


def fast_path_verdicts(markets: Sequence[dict], *, on: str, off: str, controls: Sequence[str] = (),
                       directional: str | None = None, directional_controls: Sequence[str] = ()) -> dict:
    """The evaluation's verdicts over ``markets`` (one per seed; module docstring): ``net_pnl`` and
    ``markout_1s_bps`` of ``on`` against ``off``; ``controls``: ``on`` against each on net P&L;
    ``directional``: that variant against each of ``directional_controls`` on net P&L. Variants a
    market lacks are left out of its pairs. Also ``statement``: the net P&L verdict in words."""
    pnl = compare(markets, on, off, net_pnl)
    mk = compare(markets, on, off, markout_1s_bps)
    words = {A_BETTER: "EARNS its place: with it on, net P&L after fees is higher than with it off",
             B_BETTER: "does NOT earn its place: with it on, net P&L after fees is lower than with it off",
             INCONCLUSIVE: "is INCONCLUSIVE: these seeds cannot tell whether it earns its place"}
    mk_words = {A_BETTER: "reduces adverse selection (higher mean 1 s markout per fill)",
                B_BETTER: "increases adverse selection (lower mean 1 s markout per fill)",
                INCONCLUSIVE: "shows no resolved difference in adverse selection (1 s markout)"}
    return {"on": on, "off": off, "judged_on": JUDGED_ON, "net_pnl": pnl, "markout_1s_bps": mk,
            "statement": f"The fast path {words[pnl['outcome']]} ({pnl['why']}); it {mk_words[mk['outcome']]}.",
            "controls": [compare(markets, on, c, net_pnl) for c in controls],
            "directional": [compare(markets, directional, c, net_pnl) for c in directional_controls]
            if directional else []}
