"""Fixtures of the Bitget tests: both decoders, a BOOK buffer (the capture is the root conftest's
``capture_path``)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.bitget.protocol import make_decoder
from pipeline.trading.messages import BOOK_DTYPE

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
