"""The sender's connections to the venue: the only sockets of ``pipeline.trading.sender``.

``HttpTransport`` is one keep-alive HTTP/1.1 connection (``pipeline.runtime.http1``: the request
written in one ``sendall``), reopened when it drops; ``send`` raises ``NotSent`` (nothing left) or
``Lost`` (it may have left); ``receive_ready`` takes what has arrived of the answer without waiting
(the duty cycle's reads), ``receive`` waits for it (reconciliation). ``parse_base_url`` turns the
``base_url`` param into an address and a TLS context; ``readable`` is the zero-timeout select over
connections in flight; ``loopback_pair`` is the private TCP pair ``SenderAgent.keep_warm`` sends a
byte through.
"""

from __future__ import annotations

import select
import socket
import ssl
from time import monotonic

from pipeline.runtime import http1
from pipeline.runtime.errors import ConfigError
from pipeline.trading.bitget import rest

RECEIVE_DEADLINE_S = 0.5  # an answer whose first bytes arrived must be whole by then (heartbeat: 2 s)


class NotSent(Exception):
    """The request did not leave (no port, connection refused)."""


class Lost(Exception):
    """The request may have reached the venue; no usable answer (timeout, connection lost)."""


def parse_base_url(url: str, ca_file: str = "") -> tuple[tuple[str, int], "ssl.SSLContext | None"]:
    """``base_url`` -> ((host, port), TLS context or None).

    ``http://127.0.0.1:PORT`` (or ``localhost``): plain HTTP, for the paper venue only: a key never
    crosses a network in clear. ``https://HOST[:PORT]`` (port 443 by default): TLS with the system's
    trust store and hostname checking, or with ``ca_file`` as the only trusted CA when given.

    Raises:
        ConfigError: any other scheme, plain HTTP to a host other than the loopback, a missing or bad
            port, or a ``ca_file`` that cannot be loaded.
    """
    scheme, sep, rest_ = url.partition("://")
    hostport = rest_.rstrip("/")
    if not sep or "/" in hostport or "?" in hostport or not hostport:
        raise ConfigError(f"sender: base_url must be https://HOST[:PORT] or http://127.0.0.1:PORT, not {url!r}")
    host, colon, port_s = hostport.rpartition(":")
    if not colon:
        host, port_s = hostport, ""
    if scheme == "http":
        if host not in ("127.0.0.1", "localhost") or not port_s.isdigit():
            raise ConfigError(f"sender: plain http is for the paper venue on 127.0.0.1 only (keys never travel "
                              f"in clear); base_url must be http://127.0.0.1:PORT or https://..., not {url!r}")
        return ("127.0.0.1", int(port_s)), None
    if scheme != "https" or not host or (port_s and not port_s.isdigit()):
        raise ConfigError(f"sender: base_url must be https://HOST[:PORT] or http://127.0.0.1:PORT, not {url!r}")
    try:
        tls = ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"sender: cannot load ca_file {ca_file!r}: {exc}") from None
    return (host, int(port_s) if port_s else 443), tls


def readable(socks) -> set:
    """Which of ``socks`` have something to read (a zero-timeout select); a closed one (None) counts as
    readable, and all do when the select itself fails: reading then fails and says why."""
    socks = tuple(socks)
    try:
        ready = set(select.select([s for s in socks if s is not None], [], [], 0)[0])
    except (OSError, ValueError):
        return set(socks)
    if None in socks:
        ready.add(None)
    return ready


def loopback_pair() -> tuple[socket.socket, socket.socket]:
    """Two non-blocking ends of one TCP connection on 127.0.0.1 (TCP_NODELAY, as the order
    connections), for ``keep_warm``: the listener is closed once the connection is made."""
    with socket.create_server(("127.0.0.1", 0)) as lst:
        a = socket.create_connection(lst.getsockname(), timeout=1.0)
        b, _ = lst.accept()
    for sock in (a, b):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
    return a, b


class HttpTransport:
    """A keep-alive connection to the venue (``pipeline.runtime.http1``: the request written in one
    ``sendall``), reopened when it drops. ``address()`` gives (host, port) at every (re)connection (the
    port file may appear late). An answer whose first bytes have arrived must be whole within
    ``receive_deadline_s`` (default ``RECEIVE_DEADLINE_S``) of them."""

    def __init__(self, address, timeout_s: float, tls: "ssl.SSLContext | None" = None, *,
                 receive_deadline_s: float = RECEIVE_DEADLINE_S):
        self.conn = http1.Connection(address, timeout_s, tls)
        self.receive_deadline_s = receive_deadline_s

    @property
    def sock(self):
        """The open socket (None when closed): what a select waits on while a request is in flight."""
        return self.conn.sock

    def close(self) -> None:
        self.conn.close()

    def send(self, req: rest.Request) -> None:
        """Send ``req``.

        Raises:
            NotSent: nothing left (no port, connection refused, a header that would split).
            Lost: it may have left.
        """
        try:
            self.conn.send(req.method, req.target, req.headers, req.body.encode() if req.body else b"")
        except (http1.ConnectFailed, http1.HeaderError) as exc:
            raise NotSent(type(exc).__name__ if isinstance(exc, http1.HeaderError) else str(exc)) from None
        except http1.SendFailed as exc:
            raise Lost(str(exc)) from None

    @property
    def answer_started(self) -> bool:
        """Bytes of the answer to the last ``send`` have arrived, not all of it (``receive_ready``)."""
        return self.conn.first_bytes_s is not None

    def receive_ready(self) -> tuple[int, bytes] | None:
        """The answer (status, body) to the last ``send`` once it has arrived whole, else None; never
        waits: what has arrived is read and kept for the next call. An answer still not whole
        ``receive_deadline_s`` after its first bytes is cut off (the connection closed).

        Raises:
            Lost: "deadline", "stale", "too large: ...", "closed", or the connection failed (as
                ``receive``).
        """
        conn = self.conn
        try:
            got = conn.receive_ready()
        except http1.ReceiveFailed as exc:
            raise Lost(str(exc)) from None
        started = conn.first_bytes_s
        if got is None and started is not None and monotonic() - started > self.receive_deadline_s:
            conn.close()
            raise Lost("deadline")
        return got

    def receive(self, wait: bool = False) -> tuple[int, bytes]:
        """The answer (status, body) to the last ``send``, whole within ``receive_deadline_s`` of its
        first bytes (a venue that trickles or floods its answer cannot hold the sender past its
        heartbeat). Called once those bytes are there, or with ``wait`` (a caller that just sent:
        reconciliation), which first waits up to ``timeout_s`` for them.

        Raises:
            Lost: "stale" (a reused keep-alive the venue had closed), "deadline", "too large: ..."
                (the bounds of ``pipeline.runtime.http1``), or the connection failed.
        """
        sock = self.conn.sock
        if wait and sock is not None:
            try:
                select.select([sock], [], [], self.conn.timeout_s)
            except (OSError, ValueError):  # the receive below fails and says why
                pass
        try:
            return self.conn.receive(min(self.receive_deadline_s, self.conn.timeout_s))
        except http1.ReceiveFailed as exc:
            raise Lost(str(exc)) from None
