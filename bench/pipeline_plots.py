"""The pipeline bench's PNG plots: latency against the offered rate (the 16-instrument sweep), the
percentile curves per stage (ring-1k) and per transport, and each stage by transport (1,000
updates/s, one instrument, the shipped model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.pipeline_figures import STAGES
from bench.pipeline_report import shipped
from bench.report import CURVE_PERCENTILES

YLABEL = "latency since frame received (µs)"


def plots(out_dir: Path, results: list[dict]) -> list[str]:
    """Write the plots of ``results`` that have something to show into ``out_dir``; their file names."""
    import matplotlib

    matplotlib.use("Agg")
    made = []
    sweep = sorted((r for r in results if r["scenario"]["name"].startswith("sweep-")), key=lambda r: r["scenario"]["rate"])
    if sweep:
        made.append(_latency_vs_rate(out_dir, sweep))
    ring_1k = next((r for r in results if r["scenario"]["name"] == "ring-1k"), None)
    if ring_1k is not None:
        made.append(_percentiles_by_stage(out_dir, ring_1k))
    at_1k = [r for r in results if r["scenario"]["rate"] == 1_000 and r["scenario"]["instruments"] == 1
             and not r["scenario"]["faults"] and r["scenario"]["llm"] and shipped(r)]
    if len(at_1k) > 1:
        made.append(_percentiles_by_transport(out_dir, at_1k))
    if at_1k:
        made.append(_stages_by_transport(out_dir, at_1k))
    return made


def _figure():
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 4.5))


def _save(fig, out_dir: Path, name: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def _p50_p99(ax, xs, p50, p99, label: str) -> None:
    """A p50 line (dots) and its p99 (crosses, dashed) in the same colour."""
    line, = ax.plot(xs, p50, marker="o", label=f"{label} p50")
    ax.plot(xs, p99, marker="x", linestyle="--", color=line.get_color(), label=f"{label} p99")


def _latency_vs_rate(out_dir: Path, sweep: list[dict]) -> str:
    fig, ax = _figure()
    rates = [r["scenario"]["rate"] for r in sweep]
    for key in ("book", "features", "signal", "decision", "order_sent"):
        _p50_p99(ax, rates, [r["stages"][key].get("p50_us", np.nan) for r in sweep],
                 [r["stages"][key].get("p99_us", np.nan) for r in sweep], key)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered book updates per second")
    ax.set_ylabel(YLABEL)
    ax.set_title("Latency against offered rate (ring transport, 16 instruments, shipped model)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, out_dir, "latency_vs_rate.png")


def _curve_axes(ax, title: str) -> None:
    qs = list(CURVE_PERCENTILES[:-1])
    ax.set_xscale("log")
    ax.set_xticks([100 / (100 - q) for q in qs])
    ax.set_xticklabels([f"p{q:g}" for q in qs], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel(YLABEL)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _plot_curve(ax, st: dict, label: str, **kw) -> None:
    pts = [(100 / (100 - q), v) for q, v in st.get("curve", []) if q < 100]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label, **kw)


def _percentiles_by_stage(out_dir: Path, ring_1k: dict) -> str:
    fig, ax = _figure()
    for key in ("book", "features", "signal", "decision", "order_sent", "venue_ack"):
        _plot_curve(ax, ring_1k["stages"][key], key)
    _curve_axes(ax, "Percentile curves per stage (ring, 1,000 updates/s, shipped model)")
    return _save(fig, out_dir, "percentiles_by_stage.png")


def _percentiles_by_transport(out_dir: Path, at_1k: list[dict]) -> str:
    fig, ax = _figure()
    for r in at_1k:
        _plot_curve(ax, r["stages"]["signal"], f"SIGNAL written, {r['scenario']['transport']}")
        _plot_curve(ax, r["stages"]["order_sent"], f"order sent, {r['scenario']['transport']}", linestyle="--")
    _curve_axes(ax, "Percentile curves per transport (1,000 updates/s, shipped model)")
    return _save(fig, out_dir, "percentiles_by_transport.png")


def _stages_by_transport(out_dir: Path, at_1k: list[dict]) -> str:
    fig, ax = _figure()
    keys = [k for k, *_ in STAGES if k not in ("cancel_sent", "llm_order_sent", "instruction")]
    for r in at_1k:
        _p50_p99(ax, keys, [r["stages"][k].get("p50_us", np.nan) for k in keys],
                 [r["stages"][k].get("p99_us", np.nan) for k in keys], r["scenario"]["transport"])
    ax.set_yscale("log")
    ax.set_ylabel(YLABEL)
    ax.set_title("Per stage at 1,000 updates/s, by transport (shipped model)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, out_dir, "stages_by_transport.png")
