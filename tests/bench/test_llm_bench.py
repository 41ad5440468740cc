"""Smoke tests of the LLM bench: ``python -m bench.llm`` reports prompt tokens, evaluated tokens, tokens
sampled and forced, wall p50 / p99, % validated and % truncated per row; prefix reuse evaluates fewer
prompt tokens, fast-forward samples fewer; the default model is the packaged one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.llm import GOAL_MIN_N, agreement, verdicts
from tests.support.llm import tiny_model

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, *args: str) -> tuple[list[dict], str]:
    proc = subprocess.run([sys.executable, "-m", "bench.llm", *args, "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "results.json").read_text())["runs"], (tmp_path / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reuse_evaluates_fewer_prompt_tokens_and_fast_forward_samples_fewer(tmp_path: Path) -> None:
    runs, report = bench(tmp_path, "--model", tiny_model(), "--n", "6", "--n-peers", "4", "--n-ctx", "2048")
    prod, no_ff, no_reuse = runs
    assert [r["row"] for r in runs] == ["production", "no fast-forward", "no prefix reuse"]
    assert prod["n"] == 6 and no_ff["n"] == no_reuse["n"] == 4 and prod["model"] == "tiny.gguf (stand-in)"
    for r in runs:  # the tight grammar: every answer validates, none is cut short
        assert r["valid_pct"] == 100.0 and r["truncated_pct"] == 0.0 and r["prompt_tokens"] > 0
        assert 0 < r["wall_ms_p50"] <= r["wall_ms_p99"] and r["cpu_ms_p50"] > 0
    assert abs(no_reuse["prompt_evaluated"] - no_reuse["prompt_tokens"]) < 2, "all of it, every call"
    assert prod["prompt_evaluated"] < no_reuse["prompt_evaluated"] - prod["system_tokens"] / 2
    assert no_ff["forced_tokens"] == 0 and prod["forced_tokens"] > prod["sampled_tokens"]
    assert prod["sampled_tokens"] < no_ff["sampled_tokens"] / 2
    assert "| production | 6 |" in report and "| no prefix reuse | 4 |" in report
    assert f"fewer than the {GOAL_MIN_N} the goal is judged on; no verdict" in report


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_default_model_is_the_packaged_one_as_q4_0_compared_with_the_packaged_file(tmp_path: Path) -> None:
    runs, report = bench(tmp_path, "--n", "4", "--n-peers", "0", "--n-compare", "3")
    prod, packaged = runs
    assert prod["model"] == "SmolLM2-135M-Instruct.Q4_0.gguf" and prod["template"] == "gguf"
    assert packaged["row"] == "packaged Q4_1" and packaged["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert packaged["n"] == 3 and packaged["agreement"]["n"] == 3
    for r in runs:
        assert r["valid_pct"] == 100.0 and r["truncated_pct"] == 0.0
        assert r["prompt_evaluated"] < r["prompt_tokens"] - r["system_tokens"] + 2
    assert "prompt framed by its own chat template" in report
    assert f"Packaged Q4_1 against the production row's model on the same 3 prompts: the same action " in report


def test_agreement_counts_the_same_action_and_the_same_whole_answer_prompt_by_prompt():
    a = {"act": "BUY", "lots": 2, "off": 1, "conf": 80}
    row = [a, a, {**a, "conf": 70}, None, a]
    other = [a, {**a, "act": "HOLD"}, a, a]  # shorter: the first four prompts are compared
    assert agreement(row, other) == {"n": 4, "same_action_pct": 50.0, "same_answer_pct": 25.0}
    assert agreement([], []) == {"n": 0, "same_action_pct": None, "same_answer_pct": None}


def test_the_goal_is_judged_only_on_enough_decisions_and_each_part_on_its_own():
    row = {"n": 200, "wall_ms_p50": 340.0, "valid_pct": 100.0, "truncated_pct": 0.0}
    assert all(line.endswith(": met") for line in verdicts(row))
    slow = verdicts({**row, "wall_ms_p50": 351.0})
    assert slow[0].endswith("NOT met") and slow[1].endswith(": met")
    assert verdicts({**row, "truncated_pct": 0.5})[2].endswith("NOT met")
    assert verdicts({**row, "n": 199}) == ["199 decisions: fewer than the 200 the goal is judged on; no verdict."]
