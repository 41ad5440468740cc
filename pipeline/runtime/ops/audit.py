"""The dashboard's "last denials": the newest ``OrderDenied`` events of the risk gateway's audit log
(one JSON object a line, appended by the risk stage; ``procs/risk.py``), read from the file's tail.

Only the tail is read (``TAIL_BYTES``), and only when the file grew or was replaced, so a long run
costs the same as a short one. A line that does not parse (a partial last line, a torn write) is
skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from pipeline.runtime.config import Config

TAIL_BYTES = 65_536
#: the fields of an OrderDenied event the dashboard shows (never an order id: it is not needed there)
DENIAL_FIELDS = ("ts_ns", "instrument_id", "side", "price", "size", "code", "detail")


def audit_paths(cfg: Config) -> list[Path]:
    """The audit log of every risk stage in ``cfg`` (its ``audit_path`` param, else the stage's default
    ``<log_dir>/risk_audit.jsonl``)."""
    out = []
    for p in cfg.processes:
        if p.module.split(":")[0] == "procs.risk":
            out.append(Path(p.params.get("audit_path") or Path(cfg.supervisor.log_dir) / "risk_audit.jsonl"))
    return out


def denials_in(tail: bytes, n: int) -> list[dict]:
    """The last ``n`` OrderDenied events in ``tail`` (lines of JSON; the first line may be cut and is
    skipped when it does not parse), oldest first, each reduced to ``DENIAL_FIELDS``."""
    found = []
    for line in reversed(tail.splitlines()):
        if b'"OrderDenied"' not in line:
            continue
        try:
            ev = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(ev, dict) and ev.get("ev") == "OrderDenied":
            found.append({k: ev.get(k) for k in DENIAL_FIELDS})
            if len(found) == n:
                break
    found.reverse()
    return found


class DenialTail:
    """The newest denials of one audit log, re-read only when the file changed."""

    def __init__(self, path: Path, n: int = 10):
        self.path = path
        self.n = n
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns)
        self.last: list[dict] = []

    def read(self) -> list[dict]:
        """The newest ``n`` denials (oldest first); [] while the file does not exist."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._seen, self.last = None, []
            return self.last
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._seen:
            try:
                with open(self.path, "rb") as f:
                    f.seek(max(st.st_size - TAIL_BYTES, 0))
                    self.last = denials_in(f.read(TAIL_BYTES), self.n)
                self._seen = key
            except OSError:
                pass
        return self.last
