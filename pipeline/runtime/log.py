"""Structured logging: one JSON object a line in ``<log_dir>/<process>.log``, rotated by size.

Each line: ``ts`` (wall clock, ISO 8601 UTC), ``mono_ns`` (CLOCK_MONOTONIC), ``proc``, ``level``,
``event`` and the event's fields. Callers pass no key material; as a second line of defence the value
of every field whose name says it holds a secret (``redact.fields``: token, secret, passphrase,
signature, ``*_key``...) is written as ``<redacted>``. Log files are created 0600 (in a 0700 folder).
"""

from __future__ import annotations

import datetime as _dt
import logging
import logging.handlers
import os
import time
from pathlib import Path

import orjson

from pipeline.runtime import redact


class _JsonFormatter(logging.Formatter):
    def __init__(self, proc: str):
        super().__init__()
        self.proc = proc

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(timespec="microseconds"),
            "mono_ns": getattr(record, "mono_ns", time.monotonic_ns()),
            "proc": self.proc,
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            for k, v in fields.items():
                doc.setdefault(k, v)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


class EventLog:
    """A process's structured logger: ``log.info("ring_attached", ring="md", capacity=4096)``."""

    def __init__(self, logger: logging.Logger):
        self._logger = logger

    def _emit(self, level: int, event: str, fields: dict, exc_info=None) -> None:
        self._logger.log(level, event, extra={"fields": redact.fields(fields), "mono_ns": time.monotonic_ns()}, exc_info=exc_info)

    def debug(self, event: str, **fields) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, exc_info=None, **fields) -> None:
        self._emit(logging.ERROR, event, fields, exc_info=exc_info)


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file created with mode 0600 (each file after a rotation too)."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)  # a file an older run left with a wider mode
        except OSError:
            pass
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


def open_private_append(path: str | os.PathLike) -> int:
    """A file descriptor appending to ``path``, created 0600 (a file an older run left with a wider
    mode is narrowed): a stage's or the fork server's ``.out`` (its stdout and stderr).

    Raises:
        OSError: the file cannot be opened.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        pass
    return fd


def open_event_log(proc: str, log_dir: str | os.PathLike, max_bytes: int = 10_000_000, backups: int = 3, *, stderr: bool = False) -> EventLog:
    """Log for ``proc`` into ``log_dir/proc.log`` (0600; the folder created 0700 if missing), rotating at
    ``max_bytes``."""
    d = Path(log_dir)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    logger = logging.getLogger(f"pipeline.{proc}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    fh = _PrivateRotatingFileHandler(d / f"{proc}.log", maxBytes=max_bytes, backupCount=backups)
    fh.setFormatter(_JsonFormatter(proc))
    logger.addHandler(fh)
    if stderr:
        sh = logging.StreamHandler()
        sh.setFormatter(_JsonFormatter(proc))
        logger.addHandler(sh)
    return EventLog(logger)
