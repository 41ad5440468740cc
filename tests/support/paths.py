"""Where the tests find the repository and what lies beside it.

Everything the suite reads lives in the repository (a clone alone passes): the real Bitget capture is
vendored under ``data/bitget/`` with its licence and provenance.
"""

from __future__ import annotations

from pathlib import Path

#: the repository root (the folder holding pipeline/, procs/, ringbuf/, tests/)
REPO_ROOT = Path(__file__).resolve().parents[2]
#: where POSIX shared memory (ring segments, process tables, semaphores) lives
SHM_DIR = Path("/dev/shm")
#: the real Bitget v1 WebSocket capture (686 lines, vendored: data/bitget/README.md)
CAPTURE_PATH = REPO_ROOT / "data" / "bitget" / "BITGET.ws.1.0"
