"""Capture files of WebSocket traffic, in cryptofeed's raw-data line format (record and replay).

One event a line, UTF-8, ``\\n``-terminated; T is UNIX time in seconds as Python prints a float::

    URL <-> T            connection to URL opened at T                    direction OPEN
    URL <- T: TEXT       TEXT sent by us to URL at T (subscribe, ping)    direction SEND
    T: TEXT              TEXT received at T                               direction RECV
    URL -> T: TEXT       an HTTP response from URL (REST snapshots)       direction HTTP

This is what ``bmoscon/cryptofeed`` writes (``AsyncFileCallback``) and what the shared
``BITGET.ws.1.0`` holds: its second line is our subscribe request (``<-``, sent), every other
frame is a bare ``T: TEXT`` (received). (The shared data README calls ``<-`` lines "received";
cryptofeed's writer, and the subscribe request on that line, say otherwise.) cryptofeed may append
`` header: {...}`` to an HTTP line; it is left in TEXT.

``parse_line`` / ``format_line`` are pure; ``read_capture`` reads a path, ``CaptureWriter`` writes
to a text file the caller opened (record mode), with times the caller supplies; ``CaptureRecorder``
is the never-raising form a live connection records through.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, TextIO

from pipeline.trading.bitget.errors import CaptureError

OPEN = "open"
SEND = "send"
RECV = "recv"
HTTP = "http"
_ARROWS = {"<->": OPEN, "<-": SEND, "->": HTTP}
_ARROW_OF = {SEND: "<-", HTTP: "->"}


class CaptureLine(NamedTuple):
    """One capture event: when (UNIX s), which way (OPEN / SEND / RECV / HTTP), and the frame
    text (empty for OPEN)."""

    receive_time_s: float
    direction: str
    text: str


def _time(token: str, lineno: int) -> float:
    try:
        t = float(token)
    except ValueError:
        raise CaptureError(f"line {lineno}: bad time {token[:40]!r}") from None
    if not (t >= 0.0 and t != float("inf")):
        raise CaptureError(f"line {lineno}: bad time {token[:40]!r}")
    return t


def parse_line(line: str, lineno: int = 0) -> CaptureLine:
    """Parse one line (a trailing newline is ignored).

    Raises:
        CaptureError: the line matches none of the four forms, or its time is not a finite
            non-negative number.
    """
    line = line.rstrip("\r\n")
    head, sep, text = line.partition(": ")
    if " " not in head:  # "T: TEXT"
        if not sep:
            raise CaptureError(f"line {lineno}: no time prefix in {line[:60]!r}")
        return CaptureLine(_time(head, lineno), RECV, text)
    fields = head.split(" ")
    if len(fields) == 3 and fields[1] in _ARROWS:
        direction = _ARROWS[fields[1]]
        if direction == OPEN:
            if sep:
                raise CaptureError(f"line {lineno}: text after an open event")
            return CaptureLine(_time(fields[2], lineno), OPEN, "")
        if not sep:
            raise CaptureError(f"line {lineno}: {fields[1]} line without text")
        return CaptureLine(_time(fields[2], lineno), direction, text)
    raise CaptureError(f"line {lineno}: unrecognised line {line[:60]!r}")


def parse_lines(lines: Iterable[str]) -> Iterator[CaptureLine]:
    """``parse_line`` over lines (numbered from 1 in errors); blank lines are skipped.

    Raises:
        CaptureError: as ``parse_line``.
    """
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            yield parse_line(line, lineno)


def read_capture(path: str | Path) -> Iterator[CaptureLine]:
    """Every event of a capture file, in file order.

    Raises:
        CaptureError: a malformed line. OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as f:
        yield from parse_lines(f)


def format_line(receive_time_s: float, direction: str, text: str = "", url: str = "") -> str:
    """One capture line (with its newline) for an event.

    Raises:
        CaptureError: an unknown direction, a URL missing (OPEN/SEND/HTTP) or containing a space,
            text on an OPEN event, a negative or non-finite time, or text containing a newline
            (the format is one event a line).
    """
    t = float(receive_time_s)
    if not (t >= 0.0 and t != float("inf")):
        raise CaptureError(f"bad time {receive_time_s!r}")
    if "\n" in text or "\r" in text:
        raise CaptureError("frame text contains a line break; the capture format is one frame a line")
    if direction == RECV:
        return f"{t}: {text}\n"
    if direction not in (OPEN, SEND, HTTP):
        raise CaptureError(f"unknown direction {direction!r}")
    if not url or " " in url:
        raise CaptureError(f"{direction} events need a URL without spaces, got {url!r}")
    if direction == OPEN:
        if text:
            raise CaptureError("an open event carries no text")
        return f"{url} <-> {t}\n"
    return f"{url} {_ARROW_OF[direction]} {t}: {text}\n"


class CaptureWriter:
    """Record mode: appends events for one connection URL to a text file opened by the caller.

    Times are supplied by the caller (``time.time()`` at receipt in the feed process), so the
    writer reads no clock. Each method raises ``CaptureError`` as ``format_line`` does.
    """

    def __init__(self, fp: TextIO, url: str) -> None:
        self._fp = fp
        self.url = url
        self.lines_written = 0

    def opened(self, time_s: float) -> None:
        """Record that the connection opened."""
        self._write(format_line(time_s, OPEN, "", self.url))

    def sent(self, time_s: float, text: str) -> None:
        """Record a frame we sent."""
        self._write(format_line(time_s, SEND, text, self.url))

    def received(self, time_s: float, text: str) -> None:
        """Record a frame we received."""
        self._write(format_line(time_s, RECV, text, self.url))

    def _write(self, line: str) -> None:
        self._fp.write(line)
        self.lines_written += 1


class CaptureRecorder:
    """Record mode of a feed: the events of one connection after another, as ``CaptureWriter`` lines
    into a text file the caller opened (and closes). Never raises: each method returns False when
    the event could not be recorded (a frame the line format cannot hold: a line break, not UTF-8;
    or an I/O error), for the caller to count."""

    def __init__(self, fp: TextIO) -> None:
        self._fp = fp
        self._writer = CaptureWriter(fp, "ws://unknown")

    def opened(self, time_s: float, url: str) -> bool:
        """Record that a connection to ``url`` opened (spaces in the URL written as ``%20``)."""
        self._writer.url = url.replace(" ", "%20")
        return self._call(self._writer.opened, time_s)

    def sent(self, time_s: float, text: str) -> bool:
        """Record a frame we sent."""
        return self._call(self._writer.sent, time_s, text)

    def received(self, time_s: float, frame: str | bytes) -> bool:
        """Record a frame we received (bytes must be UTF-8)."""
        return self._call(self._received_text, time_s, frame)

    def flush(self) -> bool:
        """Flush the file."""
        return self._call(self._fp.flush)

    def _received_text(self, time_s: float, frame: str | bytes) -> None:
        self._writer.received(time_s, frame if isinstance(frame, str) else frame.decode("utf-8"))

    @staticmethod
    def _call(fn, *args) -> bool:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a failed record is the caller's to count
            return False
        return True
