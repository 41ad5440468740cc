"""Fixtures shared by the test suite: unique ring names, child processes, and guaranteed cleanup.

Rules every test here follows (and these fixtures enforce):

- A ring used by a test is named through ``ring_name`` / ``ring_names``: unique per test
  (``t-<pytest pid>-<8 hex>``), and unlinked (segment and wake-up semaphore) at teardown even when
  the test fails. After that, no ``/dev/shm`` entry carrying one of the test's names may remain.
- Child processes are started through ``children`` as ``sys.executable <script>`` or
  ``sys.executable -c CODE`` (never a fork of pytest). At teardown every child still running is
  SIGKILLed and every child is reaped, before the rings are unlinked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ringbuf import Ring

REPO_ROOT = Path(__file__).resolve().parents[1]
SHM_DIR = Path("/dev/shm")
RING_CHILD = REPO_ROOT / "tests" / "ringbuf" / "ring_child.py"


def shm_entries_for(bare_name: str) -> list[str]:
    """Entries of /dev/shm that belong to ring ``bare_name``: the segment and its semaphore."""
    wanted = {bare_name, f"sem.{bare_name}.wake"}
    return sorted(e for e in os.listdir(SHM_DIR) if e in wanted or e.startswith(f"sem.{bare_name}"))


class RingNames:
    """Hands out unique ring names and remembers them for cleanup."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def new(self) -> str:
        name = f"t-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        return name

    def cleanup(self) -> list[str]:
        """Unlink every ring handed out; return the /dev/shm entries that still remain."""
        for name in self.names:
            Ring.unlink(name)
        return [e for name in self.names for e in shm_entries_for(name)]


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


class Children:
    """Starts child Python processes and guarantees they are killed and reaped."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _popen(self, argv: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def role(self, role: str, *args: object) -> subprocess.Popen:
        """Run ``tests/ringbuf/ring_child.py ROLE ARGS...`` (see that file for the roles)."""
        return self._popen([sys.executable, str(RING_CHILD), role, *map(str, args)])

    def python(self, code: str, *args: object) -> subprocess.Popen:
        """Run ``sys.executable -c CODE ARGS...``."""
        return self._popen([sys.executable, "-c", code, *map(str, args)])

    @staticmethod
    def finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, str]:
        """Wait for a child to exit by itself; return (returncode, stdout, stderr)."""
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err

    @staticmethod
    def sigkill(proc: subprocess.Popen) -> int:
        """SIGKILL a child and reap it; return its status (-9 unless it had already exited)."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        return proc.returncode

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGKILL)
                except ProcessLookupError:  # pragma: no cover - exited between poll and kill
                    pass
        for proc in self.procs:
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


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


def _wait_until(predicate, timeout: float, interval: float = 0.001, what: str = "condition") -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def wait_until():
    """``wait_until(predicate, timeout, interval=0.001, what=...)``: poll, fail the test on timeout."""
    return _wait_until


@pytest.fixture
def raw_segment():
    """Open a ring's segment bytes independently of ringbuf: ``raw_segment(name) -> mmap``.

    Tests read and write control-block words and slots through this view at literal offsets, so
    the layout is checked against the bytes rather than against ringbuf's own accessors.
    """
    import mmap

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
