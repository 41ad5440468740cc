"""A lean HTTP/1.1 client connection for the order sender's hot path.

``http.client.HTTPConnection.request`` does more work than the sender needs: it validates every header name and value with regular expressions,
builds the head line by line and goes through its state machine. The sender's requests are few,
small and made of values it produced itself, so the request side here is one pure function
(``encode_request``: method, target, host, headers, body -> the bytes on the wire, checked once for
characters that would split a header) and one ``sendall``. The answer is read by a small bounded
parser (``Connection.receive``: status line, headers, a Content-Length, chunked or read-until-close
body, whether the server closes), which runs after the request has left.

The answer is bounded, so that a venue cannot hold the caller or fill its memory: ``receive``
finishes within ``timeout_s`` in total (not per read: a server that trickles a byte at a time is cut
off at the deadline), the head (status line and headers) within ``MAX_HEAD_BYTES`` and the body as
sent within ``max_response_bytes`` (a Content-Length above it is refused before a byte of the body is
read). Whatever goes wrong on the way in (deadline, size, a connection closed or reset, bytes that
are not HTTP) comes out as ``ReceiveFailed`` and nothing else, and the connection is closed: the
caller cannot know whether the request took effect (an unknown outcome).

Wire layout of a request (ASCII; every line ends CR LF)::

    POST /api/v2/spot/trade/place-order HTTP/1.1     request line: method SP target SP version
    Host: 127.0.0.1:8443
    ACCESS-KEY: ...                                  the caller's headers, in the caller's order
    Content-Length: 42                               always written (0 without a body)
                                                     empty line
    {"symbol":"BTCUSDT",...}                         body, UTF-8

Readiness-driven reading (``Connection.receive_ready``): the caller that has several connections in
flight (the sender) asks each one only for what has arrived, never waiting: every call takes what
the socket holds (non-blocking reads, until it would block), parses the answer from all bytes
received so far, and returns it once whole (None while it is not); the bounds and the failures are
``receive``'s, the deadline is the caller's (``first_bytes_s`` says since when bytes of the answer
have been arriving). So one peer that trickles its answer never holds the reads of the others.

One request at a time: ``send`` then ``receive`` or ``receive_ready`` (no pipelining). Keep-alive: the connection is
reused until the server says ``Connection: close``, an error occurs, or ``close`` is called. Before a
request goes out on a reused connection, the connection is checked (a zero-timeout ``select``): one
the server has closed while it sat idle (its idle timeout) is replaced by a fresh one first, so the
request is not written into a dead socket, whose outcome the caller could not know.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
from time import monotonic

_FORBIDDEN = ("\r", "\n", "\0")
_PART_BAD = re.compile("[\r\n\0 ]")  # in the method, target or host
_NAME_BAD = re.compile("[\r\n\0 :]")  # in a header name
_VALUE_BAD = re.compile("[\r\n\0]")  # in a header value
_RESERVED = frozenset(("host", "content-length"))  # header names encode_request writes itself

MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers with the empty line (interim 1xx answers too)
_RECV_BYTES = 64 * 1024  # the most one recv asks for (a larger buffer costs an mmap per call)
_HEAD_END = re.compile(rb"\n\r?\n")  # the empty line that ends a head (bare LF line ends tolerated)
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) +([1-9][0-9][0-9])(?:[ \t][^\r\n]*)?\r?")  # fullmatch
# the three headers that frame an answer, in a head in lower case (a line that starts with a blank
# continues the line before: not one of them)
_FRAMING = re.compile(rb"\n(content-length|transfer-encoding|connection)[ \t]*:([^\n]*)")
_CHUNK_SIZE = re.compile(rb"[ \t]*([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?\r?")  # fullmatch; extensions ignored
_DIGITS = re.compile(rb"[0-9]{1,18}")  # fullmatch


class HeaderError(ValueError):
    """A method, target, header name or value that would break the request's framing."""


def encode_request(method: str, target: str, host: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """The bytes of one HTTP/1.1 request (see the module docstring for the layout).

    ``headers`` must not hold Host or Content-Length (both are written here).

    Raises:
        HeaderError: a CR, LF or NUL anywhere in the method, target, host, a header name or value; a
            space or colon in a header name; an empty header name; Host or Content-Length given.
    """
    # one C-level pass over everything; the per-part checks below only run to name what is wrong
    if (not (method and target and host) or _PART_BAD.search(method + target + host) is not None
            or not all(headers) or _NAME_BAD.search("".join(headers)) is not None
            or not _RESERVED.isdisjoint(map(str.lower, headers))
            or _VALUE_BAD.search("".join(headers.values())) is not None):
        _explain(method, target, host, headers)
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}\r\n\r\n")
    return "".join(lines).encode("latin-1") + body


def _explain(method: str, target: str, host: str, headers: dict[str, str]) -> None:
    """Raise the HeaderError that names the first bad part (``encode_request`` found one)."""
    for part in (method, target, host):
        if any(c in part for c in _FORBIDDEN) or " " in part or not part:
            raise HeaderError(f"bad request line part {part!r}")
    for name, value in headers.items():
        if not name or any(c in name for c in (*_FORBIDDEN, " ", ":")):
            raise HeaderError(f"bad header name {name!r}")
        if name.lower() in _RESERVED:
            raise HeaderError(f"header {name!r} is written by encode_request")
        if any(c in value for c in _FORBIDDEN):
            raise HeaderError(f"header {name!r} has a CR, LF or NUL in its value")
    raise AssertionError("encode_request found a bad part that _explain does not")  # pragma: no cover


class ConnectFailed(Exception):
    """No connection could be made: nothing was sent."""


class SendFailed(Exception):
    """The connection broke while sending: the request may or may not have reached the server."""


class ReceiveFailed(Exception):
    """No complete answer; the message says why: "deadline" (not complete within ``timeout_s``),
    "too large: ..." (head or body over its limit), "closed" (end of file before the answer was
    complete), "malformed: ..." (not HTTP/1.x, a bad Content-Length or chunk size), the name of the
    ``OSError`` (e.g. "ConnectionResetError"), "stale" (below) or "not connected".

    ``stale`` is True when a reused keep-alive connection turned out to be closed or reset by the
    server before a byte of the answer came (the request was most likely never seen; the caller decides
    whether a retry is safe)."""

    def __init__(self, why: str, stale: bool = False):
        super().__init__(why)
        self.stale = stale


class Connection:
    """One keep-alive TCP connection (TCP_NODELAY) to ``address()`` = (host, port), opened on first use
    and after any failure. ``timeout_s`` bounds connect, each send, and each ``receive`` in total.
    ``tls``: an ``ssl.SSLContext`` to wrap the socket in (the certificate is checked against ``host``,
    as the context says); None: plain TCP. ``max_response_bytes``: the most an answer's body may take
    on the wire (chunk framing and trailers included); its head is bounded by ``MAX_HEAD_BYTES``.

    Between calls the socket's timeout is ``timeout_s``."""

    def __init__(self, address, timeout_s: float, tls: ssl.SSLContext | None = None, *,
                 max_response_bytes: int = 1 << 20):
        self.address = address
        self.timeout_s = timeout_s
        self.tls = tls
        self.max_response_bytes = max_response_bytes
        self.sock: socket.socket | None = None
        self.host = ""
        self.reused = False
        self._method = "GET"
        self._rx = bytearray()  # receive_ready: the bytes of the answer received so far
        #: receive_ready: monotonic seconds when the answer's first bytes arrived (None: none yet)
        self.first_bytes_s: float | None = None

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def connect(self) -> None:
        """Open the connection if none is open.

        Raises:
            ConnectFailed: the address is unknown (``address()`` raised OSError or ValueError), the
                connection was refused or timed out, or the TLS handshake failed (e.g. a certificate
                that does not verify; the reason is in the message).
        """
        if self.sock is not None:
            return
        try:
            host, port = self.address()
            sock = socket.create_connection((host, port), timeout=self.timeout_s)
        except (OSError, ValueError) as exc:
            raise ConnectFailed(type(exc).__name__) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_hostname=host)
            except (OSError, ValueError) as exc:  # ssl.SSLError (a bad certificate) is an OSError
                sock.close()
                raise ConnectFailed(f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"[:200]) from None
        default_port = 443 if self.tls is not None else 80
        self.sock, self.host, self.reused = sock, host if port == default_port else f"{host}:{port}", False

    def send(self, method: str, target: str, headers: dict[str, str], body: bytes = b"") -> None:
        """Write one request (``encode_request``) in one ``sendall``.

        Raises:
            ConnectFailed: as ``connect`` (nothing sent).
            HeaderError: as ``encode_request`` (nothing sent).
            SendFailed: the connection broke during the write (the connection is closed).
        """
        if self.sock is not None and not self._idle_and_open():
            self.close()
        if self.sock is None:
            self.connect()
        else:
            self.reused = True
        data = encode_request(method, target, self.host, headers, body)
        self._rx.clear()
        self.first_bytes_s = None
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise SendFailed(type(exc).__name__) from None
        self._method = method

    def _idle_and_open(self) -> bool:
        """False when the server has closed or reset this idle connection, or sent bytes nobody asked
        for: either way it must not carry the next request."""
        sock = self.sock
        try:
            readable = select.select([sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False
        if not readable:
            return True
        if self.tls is None:
            return False  # end of file, a reset, or unasked-for bytes
        # TLS 1.3 servers send session tickets after the handshake: readable, but no application data
        try:
            sock.setblocking(False)
            sock.recv(1)
        except ssl.SSLWantReadError:
            return True
        except OSError:
            return False
        finally:
            sock.settimeout(self.timeout_s)
        return False

    def receive(self, timeout_s: float | None = None) -> tuple[int, bytes]:
        """The answer to the last ``send``: (status, body), complete within ``timeout_s`` of the call
        (the connection's ``timeout_s`` when None).
        Interim 1xx answers are skipped. The connection is closed afterwards when the server asked for
        it (``Connection: close``, HTTP/1.0 without keep-alive, a body that ends when the connection
        does) or sent bytes beyond the answer.

        Raises:
            ReceiveFailed: no complete answer (the connection is closed): the deadline passed, the
                head is over ``MAX_HEAD_BYTES`` or the body over ``max_response_bytes`` (a
                Content-Length over it is refused before the body is read), the connection was
                closed or reset before the answer was complete (``stale`` when that happened on a
                reused connection before a byte of the answer), or the bytes are not an HTTP/1.x
                answer (bad status line, Content-Length, chunk size or chunk end).
        """
        sock = self.sock
        if sock is None:
            raise ReceiveFailed("not connected")
        wire = _Wire(sock, monotonic() + (self.timeout_s if timeout_s is None else timeout_s))
        try:
            status, body, will_close = _read_answer(wire, self._method, self.max_response_bytes)
        except ReceiveFailed:
            self.close()
            if self.reused and wire.dropped and not wire.got:
                raise ReceiveFailed("stale", stale=True) from None
            raise
        if will_close:
            self.close()
        elif wire.retimed:
            sock.settimeout(self.timeout_s)
        return status, body


    def receive_ready(self) -> tuple[int, bytes] | None:
        """The answer to the last ``send`` if it has arrived whole, else None; never waits: reads what
        the socket holds (until a read would block, at most the answer's bounds), parses every byte of
        the answer received so far. ``first_bytes_s`` is set when its first bytes arrive. Closes the
        connection as ``receive`` does.

        Raises:
            ReceiveFailed: as ``receive`` (but "deadline", which is the caller's to decide: it closes
                the connection itself).
        """
        sock = self.sock
        if sock is None:
            raise ReceiveFailed("not connected")
        buf = self._rx
        had = len(buf)
        eof, failed = self._read_available(sock, buf, MAX_HEAD_BYTES + self.max_response_bytes + 1)
        if failed is not None or (eof and not buf):
            self.close()
            if self.reused and not buf and (eof or isinstance(failed, ConnectionError)):
                raise ReceiveFailed("stale", stale=True)
            raise ReceiveFailed("closed" if failed is None else type(failed).__name__)
        if len(buf) == had and not eof:
            return None
        if not had:
            self.first_bytes_s = monotonic()
        try:
            status, body, will_close = _read_answer(_Received(buf, eof), self._method, self.max_response_bytes)
        except _Incomplete:
            return None
        except ReceiveFailed:
            self.close()
            raise
        self._rx = bytearray()
        self.first_bytes_s = None
        if will_close:
            self.close()
        return status, body

    def _read_available(self, sock, buf: bytearray, limit: int) -> tuple[bool, OSError | None]:
        """Read into ``buf`` what ``sock`` holds without waiting, until a read would block or ``buf``
        is over ``limit`` (the parser then refuses it). Returns (end of file seen, the error a read
        raised, or None); the socket's timeout is ``timeout_s`` again afterwards."""
        sock.settimeout(0.0)
        try:
            while len(buf) <= limit:
                try:
                    data = sock.recv(_RECV_BYTES)
                except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                    return False, None
                except OSError as exc:  # ssl.SSLError included
                    return False, exc
                if not data:
                    return True, None
                buf += data
            return False, None
        finally:
            if self.sock is not None:
                sock.settimeout(self.timeout_s)


class _Incomplete(Exception):
    """``_Received``: the answer needs bytes that have not arrived yet."""


class _Received:
    """The reading side of ``receive_ready``: the bytes received so far (``buf``), nothing more to
    wait for; ``more`` raises ``_Incomplete`` when the parser needs bytes not there yet."""

    __slots__ = ("buf", "eof")

    def __init__(self, buf: bytearray, eof: bool):
        self.buf = buf
        self.eof = eof

    def more(self, want_bytes: int, eof_ok: bool = False) -> bool:
        """As ``_Wire.more`` over the bytes received so far.

        Raises:
            _Incomplete: not at the end of file: more bytes may come.
            ReceiveFailed: "closed" (the end of file, unless ``eof_ok``).
        """
        if not self.eof:
            raise _Incomplete
        if eof_ok:
            return False
        raise ReceiveFailed("closed")


class _Wire:
    """The reading side of one ``receive``: every byte received so far (``buf``; an answer is parsed
    by index into it), under one deadline (``monotonic()`` seconds)."""

    __slots__ = ("sock", "deadline", "buf", "got", "retimed", "dropped")

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.got = 0  # bytes received
        self.retimed = False  # the socket's timeout was changed
        self.dropped = False  # the server closed or reset the connection

    def more(self, want_bytes: int, eof_ok: bool = False) -> bool:
        """Receive at least one and at most ``want_bytes`` (>= 1) more bytes into ``buf``, waiting no
        later than the deadline. False: end of file, when ``eof_ok``.

        Raises:
            ReceiveFailed: "deadline", "closed" (end of file, unless ``eof_ok``), or the name of the
                ``OSError``.
        """
        sock = self.sock
        if self.got:  # the first read waits at most the socket's timeout, which is the whole allowance
            left_s = self.deadline - monotonic()
            if left_s <= 0:
                raise ReceiveFailed("deadline")
            sock.settimeout(left_s)
            self.retimed = True
        try:
            data = sock.recv(min(want_bytes, _RECV_BYTES))
        except TimeoutError:
            raise ReceiveFailed("deadline") from None
        except OSError as exc:  # ssl.SSLError included
            self.dropped = isinstance(exc, ConnectionError)
            raise ReceiveFailed(type(exc).__name__) from None
        if not data:
            if eof_ok:
                return False
            self.dropped = True
            raise ReceiveFailed("closed")
        self.got += len(data)
        self.buf += data
        return True


def _read_answer(w: _Wire | _Received, method: str, max_body_bytes: int) -> tuple[int, bytes, bool]:
    """(status, body, whether the connection must be closed after it), read through ``w``.

    Raises:
        ReceiveFailed: as ``Connection.receive``.
    """
    buf = w.buf
    start = 0
    while True:
        # the head: status line, headers, empty line (with the interim answers before it: all within
        # MAX_HEAD_BYTES)
        scan = start
        while (end := _HEAD_END.search(buf, scan)) is None:
            if len(buf) > MAX_HEAD_BYTES:
                raise ReceiveFailed(f"too large: head over {MAX_HEAD_BYTES} bytes")
            scan = max(start, len(buf) - 2)
            w.more(MAX_HEAD_BYTES + 1 - len(buf))
        head_end = end.end()
        if head_end > MAX_HEAD_BYTES:
            raise ReceiveFailed(f"too large: head over {MAX_HEAD_BYTES} bytes")
        line_end = buf.find(b"\n", start)
        status_line = _STATUS_LINE.fullmatch(buf, start, line_end)
        if status_line is None:
            raise ReceiveFailed(f"malformed: status line {bytes(buf[start:min(line_end, start + 40)])!r}")
        status = int(status_line[2])
        if status >= 200:
            break
        start = head_end  # an interim answer (100 Continue, 103 Early Hints): the real one follows
    lengths, codings, options = [], [], []
    # the head from the LF that ends the status line, in lower case
    for name, value in _FRAMING.findall(bytes(buf[line_end:head_end]).lower()):
        (lengths if name == b"content-length" else codings if name == b"transfer-encoding" else options).append(value)
    if options:
        options = [o.strip() for o in b",".join(options).split(b",")]
    will_close = b"close" in options if status_line[1] == b"1" else b"keep-alive" not in options
    if method == "HEAD" or status in (204, 304):
        return status, b"", will_close or len(buf) > head_end
    if codings:
        if codings[-1].rpartition(b",")[2].strip() != b"chunked":
            # a coding this client did not ask for and cannot undo: the body ends with the connection
            return status, _read_to_close(w, head_end, max_body_bytes), True
        body, end = _read_chunked(w, head_end, max_body_bytes)
        return status, body, True if lengths else will_close or len(buf) > end
    if lengths:
        if len(lengths) == 1 and len(value := lengths[0].strip()) < 19 and value.isdigit():
            length = int(value)  # the usual case, checked without the general rule
        else:
            length = _content_length(lengths)
        if length > max_body_bytes:
            raise ReceiveFailed(f"too large: Content-Length {length} over {max_body_bytes} bytes")
        end = head_end + length
        while len(buf) < end:
            w.more(end - len(buf))
        return status, bytes(buf[head_end:end]), will_close or len(buf) > end
    return status, _read_to_close(w, head_end, max_body_bytes), True


def _content_length(values: list[bytes]) -> int:
    """The one length the Content-Length values (a header may repeat, or list, the same one) agree on.

    Raises:
        ReceiveFailed: "malformed: ..." (not digits, or two different lengths).
    """
    lengths = {v.strip() for v in b",".join(values).split(b",")}
    if len(lengths) != 1 or _DIGITS.fullmatch(value := lengths.pop()) is None:
        raise ReceiveFailed(f"malformed: Content-Length {b','.join(values)[:40]!r}")
    return int(value)


def _read_to_close(w: _Wire | _Received, start: int, max_body_bytes: int) -> bytes:
    """The body from ``start`` to the end of the connection (at most ``max_body_bytes``).

    Raises:
        ReceiveFailed: as ``_Wire.more`` (but for the end of file), "too large: ...".
    """
    buf = w.buf
    limit = start + max_body_bytes
    while True:
        if len(buf) > limit:
            raise ReceiveFailed(f"too large: body over {max_body_bytes} bytes")
        if not w.more(limit + 1 - len(buf), eof_ok=True):
            return bytes(buf[start:])


def _read_chunked(w: _Wire | _Received, start: int, max_body_bytes: int) -> tuple[bytes, int]:
    """(the body, the index just past its end in ``w.buf``) of a chunked body from ``start``: chunks
    (size in hex, optional extensions, CR LF, data, CR LF) up to a zero-size one, then trailer lines up
    to an empty line, all of it at most ``max_body_bytes`` on the wire.

    Raises:
        ReceiveFailed: as ``_Wire.more``, "too large: ...", "malformed: ..." (a bad chunk size line or
            chunk end).
    """
    buf = w.buf
    limit = start + max_body_bytes
    too_large = f"too large: chunked body over {max_body_bytes} bytes"
    parts = []
    pos = start
    in_trailers = False
    while True:
        scan = pos
        while (line_end := buf.find(b"\n", scan)) < 0:  # the next line: a chunk size or a trailer
            if len(buf) > limit:
                raise ReceiveFailed(too_large)
            scan = len(buf)
            w.more(limit + 1 - len(buf))
        if line_end >= limit:
            raise ReceiveFailed(too_large)
        if in_trailers:
            empty = line_end == pos or (line_end == pos + 1 and buf[pos] == 13)
            pos = line_end + 1
            if empty:
                return b"".join(parts), pos
            continue
        size = _CHUNK_SIZE.fullmatch(buf, pos, line_end)
        if size is None:
            raise ReceiveFailed(f"malformed: chunk size line {bytes(buf[pos:min(line_end, pos + 40)])!r}")
        n = int(size[1], 16)
        pos = line_end + 1
        if n == 0:
            in_trailers = True
            continue
        end = pos + n + 2  # the data and its CR LF
        if end > limit:
            raise ReceiveFailed(too_large)
        while len(buf) < end:
            w.more(end - len(buf))
        if buf[end - 2:end] != b"\r\n":
            raise ReceiveFailed("malformed: chunk not ended by CR LF")
        parts.append(buf[pos:end - 2])
        pos = end
