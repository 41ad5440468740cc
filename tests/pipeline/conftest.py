"""Fixtures of the pipeline tests (helpers live in ``tests/pipeline/_support.py``)."""

from __future__ import annotations

import pytest

from tests.pipeline._support import Pipeline


@pytest.fixture
def pipe(tmp_path):
    """A pipeline of this test: unique ``shm_prefix``, run and log dirs under ``tmp_path``.

    Teardown (also on failure): ``down`` through the control socket when a supervisor still runs,
    SIGKILL of every leftover supervisor or runner of the test's configs, ``clean_stale`` of each
    config; then no /dev/shm entry with the prefix may remain.
    """
    p = Pipeline(tmp_path)
    try:
        yield p
    finally:
        leftovers = p.cleanup()
    assert not leftovers, f"/dev/shm entries left behind: {leftovers}"
