"""Smoke test of the LLM bench: ``python -m bench.llm`` on the tiny model reports the prompt tokens
evaluated per call with and without prefix reuse, and reuse evaluates fewer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_reuse_evaluates_fewer_prompt_tokens(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.llm", "--n", "5", "--n-ctx", "2048", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with_reuse, without = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert with_reuse["reuse_prefix"] and not without["reuse_prefix"]
    assert with_reuse["prompt_tokens_per_call"] == without["prompt_tokens_per_call"] > 0
    assert abs(without["prompt_evaluated_per_call"] - without["prompt_tokens_per_call"]) < 2, "all of it, every call"
    assert with_reuse["prompt_evaluated_per_call"] < without["prompt_evaluated_per_call"] - with_reuse["system_tokens"] / 2
    assert "| yes |" in (tmp_path / "report.md").read_text()
