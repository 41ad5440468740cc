"""The accept path of the paper venue's WebSocket server (``pipeline.venue.server``), bounded.

``listen`` binds 127.0.0.1:``port`` and serves ``handler`` with ``websockets``: at most
``ACCEPTS_PER_PASS`` connections are accepted per pass of the loop (asyncio's ``backlog`` argument,
which it also gives the kernel as its queue length; ``listen`` then sets that queue to
``ACCEPT_BACKLOG``), so a flood of connections takes turns with the connected clients and whatever
else runs on the loop (the publishing, the REST server); at most ``limits.max_connections`` are open
at once (handshaking or served): one beyond that is reset as it is accepted, with no handshake and
no task (``limits.refused`` counts it); a handshake not done within ``OPEN_TIMEOUT_S`` ends the
connection.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Protocol

from websockets.asyncio.server import Server, ServerConnection, serve

#: connections accepted per pass of the loop at most (asyncio's own default: 100)
ACCEPTS_PER_PASS = 16
#: the kernel's queue of connections not accepted yet (the OS caps it at its somaxconn)
ACCEPT_BACKLOG = 1024
OPEN_TIMEOUT_S = 2.0  # a WebSocket handshake not done by then ends the connection
MAX_REQUEST_BYTES = 64 * 1024


class Limits(Protocol):
    """The server's cap and its counts, updated in place on the loop."""

    max_connections: int
    open_connections: int  # handshaking or served now

    def refused(self) -> None: ...


class CappedConnection(ServerConnection):
    """A connection that, made while ``limits.max_connections`` are open, is reset at once: no
    handshake, no handler task (``limits.refused()``)."""

    def __init__(self, limits: Limits, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        limits = self._limits
        if limits.open_connections >= limits.max_connections:
            self._refused = True
            limits.refused()
            transport.abort()
            return
        limits.open_connections += 1
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._limits.open_connections -= 1
        super().connection_lost(exc)


async def listen(handler, host: str, port: int, limits: Limits) -> Server:
    """Serve ``handler`` on ``host``:``port`` (0: a free port) with the bounds of the module docstring.

    Raises:
        OSError: the port cannot be bound.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    server = await serve(handler, sock=sock, backlog=ACCEPTS_PER_PASS, compression=None, max_size=MAX_REQUEST_BYTES,
                         ping_interval=None, open_timeout=OPEN_TIMEOUT_S,
                         create_connection=lambda *a, **k: CappedConnection(limits, *a, **k))
    sock.listen(ACCEPT_BACKLOG)  # the kernel's queue; asyncio still accepts ACCEPTS_PER_PASS a pass
    return server
