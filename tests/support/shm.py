"""What a test owns in /dev/shm, by name: ring segments ``P.ring``, the process table ``P.procs`` and
the wake-up semaphores ``sem.P.ring.wake`` of a pipeline prefix ``P``, or the segment and semaphore of
one bare ring; and ``RingNames``, which hands out unique ring names and unlinks them."""

from __future__ import annotations

import os
import uuid

from ringbuf import Ring
from tests.support.paths import SHM_DIR


def shm_entries(prefix: str) -> list[str]:
    """/dev/shm entries of a pipeline prefix: ring segments, the process table, semaphores."""
    return sorted(e for e in os.listdir(SHM_DIR) if e.startswith(prefix + ".") or e.startswith(f"sem.{prefix}."))


def expected_entries(prefix: str, rings: list[str]) -> list[str]:
    """The /dev/shm entries of a running pipeline of ``prefix`` with ``rings``."""
    return sorted([f"{prefix}.procs"] + [f"{prefix}.{r}" for r in rings] + [f"sem.{prefix}.{r}.wake" for r in rings])


def ring_entries(bare_name: str) -> list[str]:
    """Entries of /dev/shm that belong to ring ``bare_name``: the segment and its semaphore."""
    wanted = {bare_name, f"sem.{bare_name}.wake"}
    return sorted(e for e in os.listdir(SHM_DIR) if e in wanted or e.startswith(f"sem.{bare_name}"))


class RingNames:
    """Hands out unique ring names (``t-<pid>-<8 hex>``) and remembers them for cleanup."""

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
        return [e for name in self.names for e in ring_entries(name)]
