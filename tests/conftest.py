"""Fixtures shared by the test suite: unique ring names, child processes, a per-test pipeline, and
guaranteed cleanup. The helpers behind them live in ``tests/support/``.

Rules every test here follows (and these fixtures enforce):

- A ring used by a test is named through ``ring_name`` / ``ring_names``: unique per test
  (``t-<pytest pid>-<8 hex>``), and unlinked (segment and wake-up semaphore) at teardown even when
  the test fails. After that, no ``/dev/shm`` entry carrying one of the test's names may remain.
- Child processes are started through ``children`` as ``sys.executable <script>`` or
  ``sys.executable -c CODE`` (never a fork of pytest). At teardown every child still running is
  SIGKILLed and every child is reaped, before the rings are unlinked.
- A pipeline under a real supervisor is started through ``pipe``: its own shm prefix, run and log
  dirs under ``tmp_path``; at teardown nothing of it may be left running or in ``/dev/shm``.
"""

from __future__ import annotations

import mmap

import pytest

from tests.support import wait
from tests.support.paths import CAPTURE_PATH, SHM_DIR
from tests.support.processes import Children, Pipeline
from tests.support.shm import RingNames


@pytest.fixture
def ring_names():
    """Factory of unique ring names (``ring_names.new()``); all are unlinked at teardown."""
    names = RingNames()
    yield names
    leftovers = names.cleanup()
    assert not leftovers, f"/dev/shm entries left behind after unlink: {leftovers}"


@pytest.fixture
def ring_name(ring_names) -> str:
    """One unique ring name for this test, unlinked at teardown."""
    return ring_names.new()


@pytest.fixture
def children(ring_names):
    """Start child processes (``children.role(...)`` / ``children.python(...)``).

    Depends on ``ring_names`` so that children are killed and reaped before the rings are unlinked.
    """
    kids = Children()
    try:
        yield kids
    finally:
        kids.kill_all()
        assert all(p.returncode is not None for p in kids.procs)


@pytest.fixture
def wait_until():
    """``wait_until(predicate, timeout, interval=0.001, what=...)``: poll, fail the test on timeout."""

    def poll(predicate, timeout: float, interval: float = 0.001, what: str = "condition"):
        return wait.wait_until(predicate, timeout, interval, what)

    return poll


@pytest.fixture
def raw_segment():
    """Open a ring's segment bytes independently of ringbuf: ``raw_segment(name) -> mmap``.

    Tests read and write control-block words and slots through this view at literal offsets, so
    the layout is checked against the bytes rather than against ringbuf's own accessors.
    """
    maps: list[mmap.mmap] = []

    def open_raw(name: str) -> mmap.mmap:
        bare = name.lstrip("/")
        with open(SHM_DIR / bare, "r+b") as f:
            mm = mmap.mmap(f.fileno(), 0)
        maps.append(mm)
        return mm

    yield open_raw
    for mm in maps:
        try:
            mm.close()
        except BufferError:  # pragma: no cover - a test still holds a view
            pass


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


@pytest.fixture
def capture_path():
    """The real Bitget v1 capture (686 lines), vendored in the repository (data/bitget/): its absence
    fails the test (it is data the suite needs, not an optional dependency)."""
    if not CAPTURE_PATH.is_file():
        pytest.fail(f"vendored Bitget capture not found at {CAPTURE_PATH} (data/bitget/ in the repository)")
    return CAPTURE_PATH
