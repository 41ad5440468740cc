"""A lean HTTP/1.1 client connection for the order sender's hot path.

``http.client.HTTPConnection.request`` costs about 30 µs warm on the test machine and several
times that with cold caches: it validates every header name and value with regular expressions,
builds the head line by line and goes through its state machine. The sender's requests are few,
small and made of values it produced itself, so the request side here is one pure function
(``encode_request``: method, target, host, headers, body -> the bytes on the wire, checked once for
characters that would split a header) and one ``sendall``. The answer is parsed by the standard
library's ``http.client.HTTPResponse`` (status line, headers, Content-Length or chunked body,
``will_close``), which runs after the request has left and is off the latency path.

Wire layout of a request (ASCII; every line ends CR LF)::

    POST /api/v2/spot/trade/place-order HTTP/1.1     request line: method SP target SP version
    Host: 127.0.0.1:8443
    ACCESS-KEY: ...                                  the caller's headers, in the caller's order
    Content-Length: 42                               always written (0 without a body)
                                                     empty line
    {"symbol":"BTCUSDT",...}                         body, UTF-8

One request at a time: ``send`` then ``receive`` (no pipelining). Keep-alive: the connection is
reused until the server says ``Connection: close``, an error occurs, or ``close`` is called. Before a
request goes out on a reused connection, the connection is checked (a zero-timeout ``select``): one
the server has closed while it sat idle (its idle timeout) is replaced by a fresh one first, so the
request is not written into a dead socket, whose outcome the caller could not know.
"""

from __future__ import annotations

import http.client
import re
import select
import socket
import ssl

_FORBIDDEN = ("\r", "\n", "\0")
_PART_BAD = re.compile("[\r\n\0 ]")  # in the method, target or host
_NAME_BAD = re.compile("[\r\n\0 :]")  # in a header name
_VALUE_BAD = re.compile("[\r\n\0]")  # in a header value
_RESERVED = frozenset(("host", "content-length"))  # header names encode_request writes itself


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
    """No complete answer: timeout, connection reset or closed, malformed response.

    ``stale`` is True when a reused keep-alive connection turned out to be closed or reset by the
    server before it answered (the request was most likely never seen; the caller decides whether a
    retry is safe)."""

    def __init__(self, why: str, stale: bool = False):
        super().__init__(why)
        self.stale = stale


class Connection:
    """One keep-alive TCP connection (TCP_NODELAY) to ``address()`` = (host, port), opened on first use
    and after any failure. ``timeout_s`` bounds connect, each send and each read. ``tls``: an
    ``ssl.SSLContext`` to wrap the socket in (the certificate is checked against ``host``, as the
    context says); None: plain TCP."""

    def __init__(self, address, timeout_s: float, tls: ssl.SSLContext | None = None):
        self.address = address
        self.timeout_s = timeout_s
        self.tls = tls
        self.sock: socket.socket | None = None
        self.host = ""
        self.reused = False
        self._method = "GET"

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

    def receive(self) -> tuple[int, bytes]:
        """The answer to the last ``send``: (status, body). The connection is closed afterwards when the
        server asked for it.

        Raises:
            ReceiveFailed: timeout, reset, closed before a complete answer, malformed response (the
                connection is closed).
        """
        if self.sock is None:
            raise ReceiveFailed("not connected")
        resp = http.client.HTTPResponse(self.sock, method=self._method)
        try:
            resp.begin()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            # closed (RemoteDisconnected) or reset before a byte of answer, on a reused connection
            stale = self.reused and isinstance(exc, ConnectionResetError)
            self.close()
            raise ReceiveFailed("stale" if stale else type(exc).__name__, stale=stale) from None
        finally:
            resp.close()  # the response's file object only; the socket stays open
        if resp.will_close:
            self.close()
        return resp.status, body
