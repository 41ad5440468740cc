"""Control-plane client: one JSON request to the supervisor's REP socket, one JSON answer."""

from __future__ import annotations

import orjson
import zmq

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ControlError


def request(cfg: Config, req: dict, timeout_ms: int = 3_000) -> dict:
    """Send ``req`` to the supervisor of ``cfg`` and return its answer.

    Raises:
        ControlError: the endpoint is not ``ipc://`` (the only kind a supervisor binds), or no
            supervisor answered within ``timeout_ms``.
    """
    ep = cfg.control_endpoint()
    if not ep.startswith("ipc://"):
        raise ControlError(f"control endpoint {ep!r}: only ipc:// is supported")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
    sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
    try:
        sock.connect(ep)
        sock.send(orjson.dumps(req))
        return orjson.loads(sock.recv())
    except zmq.Again:
        raise ControlError(f"no supervisor answered at {ep} within {timeout_ms} ms (is `make up` running?)") from None
    finally:
        sock.close(0)
        ctx.term()
