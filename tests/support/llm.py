"""The LLM tests' stand-in model: a tiny GGUF generated once per test session."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

from pipeline.trading.llm.tinymodel import write_tiny_gguf


@lru_cache(maxsize=1)
def tiny_model() -> str:
    """Path of the stand-in GGUF, generated into a per-session temporary folder."""
    d = Path(tempfile.mkdtemp(prefix="llm-tiny-"))
    return str(write_tiny_gguf(d / "tiny.gguf"))
