"""The paper venue's account log: the file that makes the venue's account outlive its process.

An exchange keeps an account's orders, fills and balances across its own restarts; so does the paper
venue. ``OrderEngine`` (``pipeline.venue.orders``, sans-I/O) hands every state change to its
``on_event`` callback as one record; ``AccountLog.append`` writes it here as it happens, and on the
next start ``AccountLog.open`` reads the records back for ``OrderEngine.restore``.

File: default ``<run_dir>/<process name>.account`` (``run/venue.account``), mode 0600, append-only,
one record a line in the order sender's journal line format (``pipeline.trading.journal.encode_record``)::

    CCCCCCCC {json object}\\n      CCCCCCCC: CRC-32 (zlib) of the JSON bytes, 8 lowercase hex digits

with ``"t"`` naming the record (``account``, ``order``, ``fill``, ``cancel``, ``adjust``: fields in
``pipeline.venue.account_state``). The first line is the ``account`` record: ``account_id`` (the decimal
string of a random 63-bit integer, never 0) and ``created_ms``. A line is valid when it is exactly
what ``encode_record`` makes of its JSON (so the CRC matches and the JSON is the venue's own).

Writes: one ``os.write`` of a whole line on an ``O_APPEND`` descriptor per record, no fsync (a paper
venue: a process crash keeps the page cache; a machine crash may lose the tail, like an exchange's
own outage would). Reading: a last line that is torn (no newline, or not valid) is a write the
process did not finish: ignored and truncated away, so the next record starts on a clean line. An
invalid line before the last one is not a crash artifact: ``open`` refuses the file (``VenueError``)
rather than guess an account.

Resetting on purpose (a new account: a different account id, no orders, flat): the venue param
``reset_account = true`` (``open(reset=True)``) renames the old file aside to
``<path>.<UTC timestamp>.bak`` and starts a new one; by hand, with the venue stopped,
``rm run/venue.account`` or ``python -m pipeline.venue.account reset run/venue.account``
(``show`` prints what a file holds). One process at a time: ``open`` takes an exclusive ``flock``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from pipeline.trading.journal import encode_record
from pipeline.venue.errors import VenueError
from pipeline.venue.account_state import ACCOUNT_RECORDS

ACCOUNT_ID_BITS = 63


def new_account_record(now_ms: int, account_id: int | None = None) -> dict:
    """The first record of a new account: a random 63-bit ``account_id`` (decimal string, > 0)
    unless one is given, and ``created_ms``."""
    aid = account_id if account_id is not None else secrets.randbelow((1 << ACCOUNT_ID_BITS) - 1) + 1
    return {"t": "account", "account_id": str(aid), "created_ms": int(now_ms)}


def decode_account_line(line: bytes) -> dict | None:
    """The record of one complete line (without its newline), or None when it is not a valid
    account-log line (torn, CRC mismatch, not JSON, not an object, an unknown ``"t"``)."""
    if len(line) < 11 or line[8:9] != b" ":
        return None
    try:
        rec = orjson.loads(line[9:])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or rec.get("t") not in ACCOUNT_RECORDS:
        return None
    try:
        same = encode_record(rec) == line + b"\n"
    except TypeError:
        return None
    return rec if same else None


def parse_account_log(data: bytes) -> tuple[list[dict], int]:
    """The records of an account log's bytes, and the length of the clean prefix (every valid line;
    a torn last line is left out).

    Raises:
        VenueError: an invalid line before the last one (the file is corrupt, not torn).
    """
    records: list[dict] = []
    pos = 0
    n = len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        end = n if nl < 0 else nl
        rec = decode_account_line(data[pos:end]) if nl >= 0 else None
        if rec is None:
            if nl >= 0 and nl + 1 < n:
                raise VenueError(f"account log corrupt at byte {pos} (line {len(records) + 1}); reset the account "
                                 f"(reset_account = true) or move the file away")
            break  # a torn last line: a write the process did not finish
        records.append(rec)
        pos = nl + 1
    return records, pos


class AccountLog:
    """The account log file (see the module docstring): ``open`` reads (or creates) it and returns the
    records to restore; ``append`` is the engine's ``on_event``; ``close`` releases it.

    ``write`` defaults to ``os.write`` and ``clock_ms`` to the wall clock; tests inject them.
    """

    def __init__(self, path: str | os.PathLike, *, write: Callable[[int, bytes], int] = os.write,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.path = Path(path)
        self._write = write
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.fd = -1
        self.bytes = 0
        self.records = 0
        #: bytes of a torn last line truncated by ``open``; the file the reset renamed aside (or None);
        #: True when ``open`` made a new account
        self.torn_bytes = 0
        self.backup: Path | None = None
        self.created = False

    def open(self, *, reset: bool = False) -> list[dict]:
        """Open the log for appending and return its records, the ``account`` record first: the old
        account's (a torn last line truncated), or, when the file is missing or empty or ``reset``
        is set, a new account's (the old file renamed aside to ``<path>.<UTC timestamp>.bak``).

        Raises:
            VenueError: the file is corrupt (see ``parse_account_log``) or another process holds it.
            OSError: the file or its directory cannot be created, read, locked, renamed or written.
        """
        if self.fd >= 0:
            raise VenueError(f"{self.path} is already open")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._open_locked()
        try:
            if reset:
                if os.fstat(fd).st_size:
                    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock_ms() / 1000))
                    backup = self.path.with_name(f"{self.path.name}.{stamp}.bak")
                    k = 1
                    while backup.exists():
                        backup = self.path.with_name(f"{self.path.name}.{stamp}-{k}.bak")
                        k += 1
                    os.replace(self.path, backup)  # renamed while we hold its lock
                    self.backup = backup
                    os.close(fd)
                    fd = -1
                    fd = self._open_locked()
            chunks = []
            while b := os.read(fd, 1 << 20):
                chunks.append(b)
            data = b"".join(chunks)
            records, end = parse_account_log(data)
            if end < len(data):
                os.ftruncate(fd, end)
                self.torn_bytes = len(data) - end
            self.fd = fd
            self.bytes = end
            if not records:  # a new file (or one whose only line is a torn account record)
                rec = new_account_record(self._clock_ms())
                self.append(rec)
                self.created = True
                return [rec]
        except BaseException:
            self.fd = -1
            if fd >= 0:
                os.close(fd)
            raise
        self.records = len(records)
        return records

    def _open_locked(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise VenueError(f"{self.path} is held by another venue process") from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def append(self, rec: dict) -> None:
        """Write one record as one line (the engine's ``on_event``).

        Raises:
            VenueError: the log is not open. TypeError: ``rec`` is not JSON-serialisable.
            OSError: the write failed (the record may be missing from the file).
        """
        if self.fd < 0:
            raise VenueError(f"{self.path} is not open")
        line = encode_record(rec)
        n = self._write(self.fd, line)
        while n < len(line):  # a short write to a regular file: finish it
            n += self._write(self.fd, line[n:])
        self.bytes += len(line)
        self.records += 1

    def close(self) -> None:
        """Release the file (and its lock). Safe to call twice."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def summary(records: list[dict]) -> dict:
    """What a list of account records holds (for ``show``): account id, created ms, counts."""
    first = records[0] if records else {}
    counts: dict[str, int] = {}
    for r in records:
        counts[r.get("t", "?")] = counts.get(r.get("t", "?"), 0) + 1
    return {"account_id": first.get("account_id"), "created_ms": first.get("created_ms"), "records": counts}


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.venue.account {show,reset} PATH`` (run ``reset`` with the venue stopped)."""
    ap = argparse.ArgumentParser(prog="python -m pipeline.venue.account",
                                 description="Show or reset the paper venue's account log.")
    ap.add_argument("command", choices=["show", "reset"])
    ap.add_argument("path", nargs="?", default="run/venue.account")
    args = ap.parse_args(argv)
    path = Path(args.path)
    if args.command == "show":
        try:
            records, end = parse_account_log(path.read_bytes())
        except (OSError, VenueError) as exc:
            print(f"account: {exc}", file=sys.stderr)
            return 1
        print(orjson.dumps(summary(records)).decode())
        return 0
    log = AccountLog(path)
    try:
        log.open(reset=True)
    except (OSError, VenueError) as exc:
        print(f"account: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()
    print(f"account: new account in {path}" + (f"; the old one is {log.backup}" if log.backup else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
