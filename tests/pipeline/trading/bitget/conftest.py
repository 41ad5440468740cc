"""Fixtures of the Bitget tests: the shared real capture, both decoders, small frame builders.

The shared data lives beside the repository: the repo is ``<root>/main`` and the shared dir is
``<root>/shared``; tests that need the capture skip, saying where they looked, when it is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.trading.bitget.protocol import make_decoder
from pipeline.trading.messages import BOOK_DTYPE

REPO_ROOT = Path(__file__).resolve().parents[4]
SHARED_DIR = REPO_ROOT.parent / "shared"
CAPTURE_PATH = SHARED_DIR / "data" / "bitget" / "BITGET.ws.1.0"


@pytest.fixture
def capture_path() -> Path:
    """The real Bitget v1 capture (686 lines); the test is skipped when it is not there."""
    if not CAPTURE_PATH.is_file():
        pytest.skip(f"shared Bitget capture not found at {CAPTURE_PATH} (expected <repo>/../shared)")
    return CAPTURE_PATH


@pytest.fixture(params=["msgspec", "orjson"])
def decoder(request):
    """Each test using it runs once per decoder: both must honour the same contract."""
    return make_decoder(request.param)


@pytest.fixture
def book_out() -> np.ndarray:
    """A BOOK payload buffer pre-filled with 0xAB, so a test can tell whether it was written."""
    out = np.zeros(1, BOOK_DTYPE)
    out.view(np.uint8)[:] = 0xAB
    return out
