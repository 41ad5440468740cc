"""Shared helpers of the LLM tests: the generated tiny model (written once per session) and instruments."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

from pipeline.runtime.config import parse_config
from pipeline.trading.llm.tinymodel import write_tiny_gguf
from tests.procs.fakes import INSTRUMENTS


@lru_cache(maxsize=1)
def tiny_model() -> str:
    """Path of the stand-in GGUF, generated into a per-session temporary folder."""
    d = Path(tempfile.mkdtemp(prefix="llm-tiny-"))
    return str(write_tiny_gguf(d / "tiny.gguf"))


def instruments() -> dict:
    return {i.id: i for i in parse_config(INSTRUMENTS).instruments}
