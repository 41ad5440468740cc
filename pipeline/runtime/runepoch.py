"""The run epoch: a random 64-bit number that is new at every ``up``.

The supervisor writes it once per ``up`` (after taking the run lock, before any stage starts) to
``<run_dir>/run.epoch``: the number as decimal text and a newline, mode 0600, replaced atomically
(written to a temporary file in the same directory, then renamed), so a reader never sees a partial
file. A stage restart does not change it. Stages that need ids unique across runs (the risk
gateway's order ids) read it with ``read_run_epoch``.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from pipeline.runtime.errors import StartupError

EPOCH_FILE = "run.epoch"
EPOCH_BITS = 64
_TEXT = re.compile(rb"^[0-9]{1,20}\n$")


def epoch_path(run_dir: str | os.PathLike) -> Path:
    """``<run_dir>/run.epoch``."""
    return Path(run_dir) / EPOCH_FILE


def write_run_epoch(run_dir: str | os.PathLike) -> int:
    """Draw a fresh random epoch in [1, 2**64) and write it to ``<run_dir>/run.epoch`` (mode 0600,
    atomically replacing any earlier one). ``run_dir`` must exist. Returns the epoch.

    Raises:
        StartupError: the file cannot be written (the message names the path and the OS's reason,
            e.g. "No space left on device"); no partial or temporary file is left behind.
    """
    value = 0
    while value == 0:  # 0 is kept free as "no epoch"
        value = secrets.randbits(EPOCH_BITS)
    path = epoch_path(run_dir)
    tmp = path.with_name(f".{EPOCH_FILE}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            data = f"{value}\n".encode()
            if os.write(fd, data) != len(data):
                raise OSError(28, os.strerror(28), str(tmp))  # a short write: the device is full
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StartupError(f"cannot write the run epoch {path}: {exc.strerror or exc}") from None
    return value


def read_run_epoch(run_dir: str | os.PathLike) -> int:
    """The epoch of the current run, from ``<run_dir>/run.epoch``.

    Raises:
        StartupError: the file is missing or unreadable (is the supervisor up?), or its content is
            not one decimal integer in [0, 2**64) followed by a newline (the message names the path).
    """
    path = epoch_path(run_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StartupError(f"run epoch {path} does not exist (it is written by the supervisor at `up`)") from None
    except OSError as exc:
        raise StartupError(f"cannot read the run epoch {path}: {exc.strerror or exc}") from None
    if not _TEXT.match(data):
        raise StartupError(f"run epoch {path} is garbled: expected a decimal integer and a newline, got {data[:40]!r}")
    value = int(data)
    if value >= 1 << EPOCH_BITS:
        raise StartupError(f"run epoch {path} is garbled: {value} does not fit in {EPOCH_BITS} bits")
    return value
