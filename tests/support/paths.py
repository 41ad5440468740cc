"""Where the tests find the repository and what lies beside it.

The repository is ``<root>/main`` and data shared between checkouts is ``<root>/shared``; tests that
need shared data skip, saying where they looked, when it is absent.
"""

from __future__ import annotations

from pathlib import Path

#: the repository root (the folder holding pipeline/, procs/, ringbuf/, tests/)
REPO_ROOT = Path(__file__).resolve().parents[2]
#: where POSIX shared memory (ring segments, process tables, semaphores) lives
SHM_DIR = Path("/dev/shm")
#: data shared between checkouts, beside the repository
SHARED_DIR = REPO_ROOT.parent / "shared"
#: the real Bitget v1 WebSocket capture (686 lines)
CAPTURE_PATH = SHARED_DIR / "data" / "bitget" / "BITGET.ws.1.0"
