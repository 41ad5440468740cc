"""LLM hub bench: decision latency (p50/p99), prompt tokens evaluated per call with and without prefix
reuse, generated tokens per instruction. ``python -m bench.llm [--model PATH] [--n 100] [--n-gpu-layers 0]
[--chat-format plain|chatml] [--out DIR]``; the default model is the generated stand-in (written when
missing). Writes ``bench/results/<UTC>-llm/results.json`` and ``report.md`` (or ``--out``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench import report
from pipeline.trading.llm.hub import LlmHub, LlmParams
from pipeline.trading.llm.prompt import example_signal
from pipeline.trading.llm.tinymodel import write_tiny_gguf
from pipeline.runtime.config import InstrumentConfig

INSTRUMENTS = {1: InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001)}


def run(model: str, n: int, reuse: bool, **kw) -> dict:
    hub = LlmHub(LlmParams(model_path=model, reuse_prefix=reuse, **kw), INSTRUMENTS)
    try:
        lat, pt, pe, gt, ok = [], [], [], [], 0
        for i in range(n):
            t0 = time.perf_counter_ns()
            out = hub.decide(example_signal(i, feature_seq=i), None, deadline_ns=time.monotonic_ns() + 10**10)
            lat.append(time.perf_counter_ns() - t0)
            pt.append(out.prompt_tokens)
            pe.append(out.prompt_evaluated)
            gt.append(out.gen_tokens)
            ok += out.ok
        steady = slice(1, None) if n > 1 else slice(None)
        return {"model": hub.model_name, "reuse_prefix": reuse, "n": n, "valid": ok,
                "latency_ms_p50": round(report.hdr_us(lat, (50.0,))[0] / 1e3, 3),  # HdrHistogram
                "latency_ms_p99": round(report.hdr_us(lat, (99.0,))[0] / 1e3, 3),
                "prompt_tokens_per_call": round(float(np.mean(pt)), 1),
                "prompt_evaluated_per_call": round(float(np.mean(pe[steady])), 1),
                "gen_tokens_per_instruction": round(float(np.mean(gt)), 1), "system_tokens": len(hub.sys_tokens)}
    finally:
        hub.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.llm")
    ap.add_argument("--model", default="models/generated/tiny.gguf")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--chat-format", default="plain", choices=["plain", "chatml"])
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not Path(a.model).exists() and a.model.endswith("tiny.gguf"):
        write_tiny_gguf(a.model)
    out_dir, machine = report.start("llm", a.out)
    runs = [run(a.model, a.n, reuse, n_gpu_layers=a.n_gpu_layers, n_ctx=a.n_ctx, chat_format=a.chat_format)
            for reuse in (True, False)]
    md = [f"# LLM hub benchmark {machine['date']}", "", report.machine_line(machine),
          f"Model {runs[0]['model']}, n_gpu_layers {a.n_gpu_layers}, {a.n} decisions per row (one hub, one thread); "
          f"system part {runs[0]['system_tokens']} tokens.", "",
          "| prefix reuse | prompt tokens per call | evaluated per call | generated per decision | p50 ms | p99 ms | "
          "valid answers |", "|---|---|---|---|---|---|---|"]
    md += [f"| {'yes' if r['reuse_prefix'] else 'no'} | {r['prompt_tokens_per_call']:.0f} | "
           f"{r['prompt_evaluated_per_call']:.0f} | {r['gen_tokens_per_instruction']:.0f} | {r['latency_ms_p50']:.1f} | "
           f"{r['latency_ms_p99']:.1f} | {r['valid']} of {r['n']} |" for r in runs]
    report.write(out_dir, {"machine": machine, "runs": runs}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
