"""HTTP/1.1 on the wire for the paper venue's REST server (sans-I/O): bytes in, ``HttpRequest``s
out (``HttpParser``), and a response's bytes (``http_response``).

The parser takes the request line, headers and a ``Content-Length`` body; keep-alive by HTTP/1.1
rules. Bounded: the request line and headers at most ``MAX_HEADER_BYTES``, a body at most
``MAX_BODY_BYTES``, at most ``MAX_HEADERS`` header lines. Malformed input raises ``HttpError``,
whose status the server answers with: 400 malformed, a bare LF / bare CR line ending (at once,
before the head is complete), or a request cut short by the peer's end of file; 413 body too
large; 431 head too large; 501 chunked body or another HTTP version. After an ``HttpError`` the
connection cannot be reused: its framing is lost.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
MAX_HEADERS = 64

#: the reason phrase of each status the server answers with
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed",
           408: "Request Timeout", 413: "Payload Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
           503: "Service Unavailable"}


class HttpError(Exception):
    """Input that is not an HTTP/1.1 request this server takes: ``status`` (400, 413, 431, 501) and
    a short ``msg``. The connection cannot be reused after it."""

    def __init__(self, status: int, msg: str) -> None:
        super().__init__(f"{status} {msg}")
        self.status = status
        self.msg = msg


class HttpRequest(NamedTuple):
    method: str  # upper case
    path: str  # the target before "?"
    query: str  # the exact text after "?" ("" when none)
    headers: dict  # lower-cased names -> values (latin-1 decoded, stripped)
    body: bytes
    keep_alive: bool


_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HttpParser:
    """Incremental request parser for one connection: ``feed(data)`` returns the requests completed
    by ``data`` (possibly several: pipelining), keeping a partial one for the next call.

    A bare LF (an LF not after a CR) or a bare CR (a CR not before an LF) in the request line or
    headers fails the parser as soon as the byte is fed, not only once the head is complete (a peer
    that ends its lines with LF alone would otherwise wait for a CRLF CRLF that never comes).

    Raises (from ``feed``):
        HttpError: 400 malformed request line / header / Content-Length, a bare LF or bare CR line
            ending, a target not starting with "/"; 431 request line and headers over ``max_header_bytes``;
            413 a body over ``max_body_bytes``; 501 Transfer-Encoding (chunked bodies) or an HTTP
            version other than 1.0 / 1.1. Requests completed before the error in the same ``feed``
            are returned first (``failed`` is then set, and the next ``feed`` raises); after an
            error the parser stays failed.
    """

    def __init__(self, max_header_bytes: int = MAX_HEADER_BYTES, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self._buf = bytearray()
        self._head: tuple | None = None  # parsed head waiting for its body: (method, path, query, headers, ka, n)
        self._failed: HttpError | None = None
        self._scanned = 0  # bytes of a partial head already checked for bare LF / CR

    def feed(self, data: bytes) -> list[HttpRequest]:
        if self._failed is not None:
            raise self._failed
        self._buf += data
        out = []
        try:
            while True:
                if self._head is None:
                    end = self._buf.find(b"\r\n\r\n")
                    if end < 0:
                        self._check_line_endings()
                        if len(self._buf) > self.max_header_bytes:
                            raise HttpError(431, "request line and headers too large")
                        break
                    if end + 4 > self.max_header_bytes:
                        raise HttpError(431, "request line and headers too large")
                    head = bytes(self._buf[:end])
                    del self._buf[: end + 4]
                    self._scanned = 0
                    if not head:  # an empty line before a request line (RFC 9112 2.2): ignored
                        continue
                    self._head = self._parse_head(head)
                n = self._head[5]
                if len(self._buf) < n:
                    break
                body = bytes(self._buf[:n])
                del self._buf[:n]
                self._scanned = 0
                method, path, query, headers, ka, _ = self._head
                self._head = None
                out.append(HttpRequest(method, path, query, headers, body, ka))
        except HttpError as exc:
            self._failed = exc
            if not out:
                raise
        return out  # requests completed before an error: answered first; ``failed`` then says why it stopped

    @property
    def failed(self) -> HttpError | None:
        """The error that stopped this parser (the next ``feed`` raises it), or None."""
        return self._failed

    def feed_eof(self) -> None:
        """The peer ended its side of the connection (end of file): a partial request can never complete.

        Raises:
            HttpError: 400 when part of a request is buffered (a head without its blank line, or a body
                shorter than its Content-Length); the parser is then failed. The error that already
                failed the parser, if any.
        """
        if self._failed is not None:
            raise self._failed
        if self._head is not None:
            self._failed = HttpError(400, f"body shorter than its Content-Length ({self._head[5]})")
        elif self._buf:
            self._failed = HttpError(400, "request head cut short by end of file")
        else:
            return
        raise self._failed

    @property
    def idle(self) -> bool:
        """No partial request buffered."""
        return self._head is None and not self._buf

    @property
    def awaiting_body(self) -> bool:
        """A request's head is complete and its body is not."""
        return self._head is not None

    def _check_line_endings(self) -> None:
        """Check the partial head's new bytes (each byte once; a CR at the very end waits for the next).

        Raises:
            HttpError: 400 on a bare LF (not after a CR) or a bare CR (not before an LF).
        """
        buf = self._buf
        i = buf.find(b"\n", self._scanned)
        while i >= 0:
            if i == 0 or buf[i - 1] != 0x0D:
                raise HttpError(400, "bad line ending (bare LF)")
            i = buf.find(b"\n", i + 1)
        i = buf.find(b"\r", self._scanned)
        while 0 <= i < len(buf) - 1:
            if buf[i + 1] != 0x0A:
                raise HttpError(400, "bad line ending (bare CR)")
            i = buf.find(b"\r", i + 1)
        self._scanned = len(buf) - 1 if buf.endswith(b"\r") else len(buf)

    def _parse_head(self, head: bytes) -> tuple:
        lines = head.split(b"\r\n")
        if any(b"\n" in ln or b"\r" in ln for ln in lines):
            raise HttpError(400, "bad line ending")
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            raise HttpError(400, "malformed request line")
        method, target, version = parts
        if not method or not all(c in _TOKEN for c in method):
            raise HttpError(400, "malformed method")
        if version not in (b"HTTP/1.1", b"HTTP/1.0"):
            if version.startswith(b"HTTP/"):
                raise HttpError(501, "HTTP version not supported")
            raise HttpError(400, "malformed request line")
        if not target.startswith(b"/") or any(c <= 0x20 or c >= 0x7F for c in target):
            raise HttpError(400, "malformed request target")
        if len(lines) - 1 > MAX_HEADERS:
            raise HttpError(431, "too many headers")
        headers: dict[str, str] = {}
        for ln in lines[1:]:
            name, sep, value = ln.partition(b":")
            if not sep or not name or not all(c in _TOKEN for c in name):
                raise HttpError(400, "malformed header line")
            key = name.decode("ascii").lower()
            val = value.strip(b" \t").decode("latin-1")
            if key in headers:
                if key in ("content-length", "host", "transfer-encoding"):
                    raise HttpError(400, f"duplicate {key} header")
                headers[key] = headers[key] + ", " + val
            else:
                headers[key] = val
        if "transfer-encoding" in headers:
            raise HttpError(501, "Transfer-Encoding is not supported; send a Content-Length body")
        cl = headers.get("content-length", "0")
        if not (cl.isascii() and cl.isdigit()) or len(cl) > 12:
            raise HttpError(400, "malformed Content-Length")
        n = int(cl)
        if n > self.max_body_bytes:
            raise HttpError(413, f"body over {self.max_body_bytes} bytes")
        conn = headers.get("connection", "").lower()
        ka = ("close" not in conn) if version == b"HTTP/1.1" else ("keep-alive" in conn)
        t = target.decode("ascii")
        path, _, query = t.partition("?")
        return method.decode("ascii").upper(), path, query, headers, ka, n


def http_response(status: int, body: bytes, keep_alive: bool, extra_headers: tuple = ()) -> bytes:
    """A complete HTTP/1.1 response with a JSON body."""
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: " + ("keep-alive" if keep_alive else "close"), *extra_headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body

