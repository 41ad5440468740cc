"""Port files: how a process that listens tells the others where (the paper venue writes one, the feed
and the order sender read it). A port file holds the port in decimal and a newline."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_port_file(path: str | Path, port: int) -> None:
    """Write ``port`` (decimal, newline) to ``path`` atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


def read_port_file(path: str | Path) -> int:
    """The port in a port file: ``8080`` (what ``write_port_file`` writes), ``host:8080``, or a
    JSON object with ``port``.

    Raises:
        OSError: the file cannot be read. ValueError: no valid port in it.
    """
    text = Path(path).read_text().strip()
    if text.startswith("{"):
        doc = json.loads(text)
        port = doc.get("port", doc.get("ws_port"))
    else:
        port = text.rsplit(":", 1)[-1]
    port = int(port)
    if not 0 < port <= 65535:
        raise ValueError(f"{path}: not a port: {port}")
    return port
