"""The ops server's HTTP rules, sans-I/O: a request (method, path, headers, peer address) in, a decision
out. ``server.py`` does the sockets.

Routes (on 127.0.0.1 only):

- ``GET /`` and ``GET /static/<name>``: the dashboard's files (from the package; nothing else is served);
- ``GET /metrics``: the Prometheus text format; ``GET /health``: 200 / 503 with a JSON body;
- ``GET /ws``: the dashboard's WebSocket (the page's own origin only);
- ``POST /api/halt``, ``/api/resume``, ``/api/kill-switch``, ``/api/restart/<stage>``: the control
  plane's requests, with ``Authorization: Bearer <token>`` (the operator token file's content).

Refusals, checked in this order, each counted by status code and answered with a one-line JSON error:
403 for a peer that is not a loopback address, for a ``Host`` that is not this server's own
(``127.0.0.1:<port>`` or ``localhost:<port>``: a page on another site that resolves its name to
127.0.0.1, DNS rebinding, is refused) and for an ``Origin`` that is not this server's (a page on
another site must not act or read); 404 for an unknown path; 405 for another method; 401 for a control
request without the token or with a wrong one; 503 for a control request while the server has no
token (the file is missing or unsafe: the reason, never the file's content, is in the answer). The
page, ``/metrics`` and ``/health`` need no token: they only read.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

import orjson

from pipeline.runtime.ops.tokenfile import token_matches

_STAGE = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
#: the control requests the page may make: path -> control-plane command
CONTROL_PATHS = {"/api/halt": "halt", "/api/resume": "resume", "/api/kill-switch": "kill-switch"}
RESTART_PREFIX = "/api/restart/"
JSON = "application/json"


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, content type, body and extra headers."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Control:
    """An authorised control request, to be sent to the control plane (``{"cmd": ..., "name": ...}``)."""

    request: dict


@dataclass(frozen=True)
class Read:
    """An allowed read: ``what`` is "metrics", "health" or "ws" (the WebSocket upgrade)."""

    what: str


def error(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply(status, JSON, orjson.dumps({"ok": False, "error": message}), headers)


def is_loopback(host: str) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1, and IPv4-mapped 127.x); False for anything else,
    names included."""
    try:
        addr = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def bearer(headers) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None without one."""
    value = headers.get("Authorization") or ""
    scheme, _, tok = value.partition(" ")
    return tok.strip() if scheme.lower() == "bearer" and tok.strip() else None


@dataclass
class WebRules:
    """The decisions for one server: its port, its token (None: control refused with ``token_error``),
    its static files (name -> (content type, bytes); ``index.html`` is ``/``) and refusal counters."""

    port: int
    token: str | None
    token_error: str = ""
    static: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    refused: dict[int, int] = field(default_factory=dict)

    @property
    def origins(self) -> tuple[str, ...]:
        return (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")

    @property
    def hosts(self) -> tuple[str, ...]:
        return (f"127.0.0.1:{self.port}", f"localhost:{self.port}")

    def refuse(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
        self.refused[status] = self.refused.get(status, 0) + 1
        return error(status, message, headers)

    def decide(self, method: str, target: str, headers, peer: str) -> Reply | Control | Read:
        """What to do with one request (module docstring); ``headers`` is a mapping with ``get``
        (case-insensitive, as websockets' ``Headers``), ``peer`` the client's IP address."""
        if not is_loopback(peer):
            return self.refuse(403, "only loopback clients are served")
        if (headers.get("Host") or "").lower() not in self.hosts:
            return self.refuse(403, "Host must be this server's own (127.0.0.1 or localhost with its port)")
        origin = headers.get("Origin")
        if origin is not None and origin not in self.origins:
            return self.refuse(403, "cross-origin requests are refused")
        path = target.split("?", 1)[0]
        if path in CONTROL_PATHS or path.startswith(RESTART_PREFIX):
            return self._control(method, path, headers)
        page = {"/": "index.html"}.get(path) or (path[len("/static/"):] if path.startswith("/static/") else None)
        reads = {"/metrics": "metrics", "/health": "health", "/ws": "ws"}
        if path not in reads and (page is None or page not in self.static):
            return self.refuse(404, f"no such path {path[:80]!r}")
        if method != "GET":
            return self.refuse(405, f"{path} answers GET only", (("Allow", "GET"),))
        if path in reads:
            return Read(reads[path])
        ctype, body = self.static[page]
        return Reply(200, ctype, body)

    def _control(self, method: str, path: str, headers) -> Reply | Control:
        if method != "POST":
            return self.refuse(405, f"{path} answers POST only", (("Allow", "POST"),))
        if path.startswith(RESTART_PREFIX):
            name = path[len(RESTART_PREFIX):]
            if not _STAGE.match(name):
                return self.refuse(404, "restart needs a stage name ([a-z][a-z0-9_]*)")
            req = {"cmd": "restart", "name": name}
        else:
            req = {"cmd": CONTROL_PATHS[path]}
        if self.token is None:
            return self.refuse(503, f"control is off: {self.token_error}")
        given = bearer(headers)
        if given is None:
            return self.refuse(401, "this request needs the operator token (Authorization: Bearer <token>)",
                               (("WWW-Authenticate", 'Bearer realm="shmpipe"'),))
        if not token_matches(self.token, given):
            return self.refuse(401, "wrong operator token", (("WWW-Authenticate", 'Bearer realm="shmpipe"'),))
        return Control(req)


def control_reply(answer: dict) -> Reply:
    """The HTTP answer to a control-plane answer: 200 when it says ok, 409 with its error otherwise."""
    return Reply(200 if answer.get("ok") else 409, JSON, orjson.dumps(answer))


def security_headers(port: int) -> tuple[tuple[str, str], ...]:
    """Headers on every answer: no caching, no sniffing, no framing (a framed page's buttons could be
    clicked by another site), scripts and connections only from this server."""
    csp = (f"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
           f"connect-src 'self' ws://127.0.0.1:{port} ws://localhost:{port}; frame-ancestors 'none'; base-uri 'none'; "
           "form-action 'none'")
    return (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
            ("Referrer-Policy", "no-referrer"), ("Content-Security-Policy", csp))
