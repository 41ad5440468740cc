"""The control plane's server: a zmq REP socket on ``ipc://`` only, answering one JSON request with
one JSON answer, without blocking (the supervisor polls it between ticks, during start-up too).

The socket file is created mode 0600, by default in the 0700 run dir: only this user can connect.
There is no TCP option, as anyone who can connect can halt, restart or stop the pipeline. The
requests (``{"cmd": "status" | "restart" | "halt" | "kill-switch" | "resume" | "down", "name": ...}``)
are answered by ``Supervisor.handle_request``; the client is ``pipeline.runtime.control.request``.
"""

from __future__ import annotations

from typing import Callable

import orjson
import zmq

from pipeline.runtime.errors import StartupError
from pipeline.runtime.log import EventLog
from pipeline.runtime.transport import bind_private


class ControlServer:
    """The supervisor's REP socket (closed until ``open``)."""

    def __init__(self, log: EventLog):
        self.log = log
        self.zctx: zmq.Context | None = None
        self.sock: zmq.Socket | None = None

    @property
    def is_open(self) -> bool:
        return self.sock is not None

    def open(self, endpoint: str) -> str:
        """Bind the socket at ``endpoint``: ``ipc://`` only, the socket file created 0600.
        Returns the endpoint.

        Raises:
            StartupError: the endpoint is not ``ipc://`` (a TCP control socket would let any local
                user halt, restart or stop the pipeline), or it cannot be bound (the endpoint and why).
        """
        if not endpoint.startswith("ipc://"):
            raise StartupError(f"control endpoint {endpoint!r}: only ipc:// is allowed (any local user could use a TCP one)")
        self.zctx = zmq.Context()
        self.sock = self.zctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            bind_private(self.sock, endpoint)
        except (zmq.ZMQError, OSError) as exc:
            raise StartupError(f"cannot bind the control socket {endpoint}: {getattr(exc, 'strerror', None) or exc}") from None
        self.log.info("control_listening", endpoint=endpoint)
        return endpoint

    def serve(self, handle: Callable[[dict], dict]) -> None:
        """Answer every pending request with ``handle(request)`` (non-blocking). A request that is
        not a JSON object, or that ``handle`` raises on, is answered ``{"ok": false, "error": ...}``
        and logged; it never stops the supervisor."""
        while True:
            try:
                raw = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                req = orjson.loads(raw)
                if not isinstance(req, dict):
                    raise ValueError("request must be a JSON object")
                resp = handle(req)
            except Exception as exc:  # a bad request never stops the supervisor
                self.log.warning("bad_control_request", error=str(exc))
                resp = {"ok": False, "error": f"bad request: {exc}"}
            self.sock.send(orjson.dumps(resp))

    def close(self) -> None:
        """Close the socket and its context (idempotent)."""
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        if self.zctx is not None:
            self.zctx.term()
            self.zctx = None
