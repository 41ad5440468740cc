"""The ops server's first look at a request's bytes, sans-I/O: the head (request line and headers)
checked and bounded before websockets parses it, and the body's length taken out of it.

websockets' own parser answers nothing to a request it cannot take: a body (any Content-Length but
0), a Transfer-Encoding, a malformed line: it closes the connection without an answer, and the
server's ``process_request`` (which counts refusals) is never called. So ``check_head`` looks at the
head first, with rules at least as strict as websockets' (a head it passes, websockets parses):

- over ``MAX_HEAD_BYTES``: 431; a request line that is not ``METHOD SP TARGET SP HTTP/1.x``, a header
  line that is not ``name: value`` (a token name, a value of visible ASCII, tabs, spaces or
  Latin-1 bytes), a bare LF: 400; another HTTP version: 505; more than ``MAX_HEADERS`` headers: 431;
- a ``Transfer-Encoding``: 411 (a body must come with a Content-Length); Content-Length values
  that are not digits or disagree: 400; a Content-Length over ``MAX_BODY_BYTES``: 413 (the body is
  never read);
- otherwise ``Head``: the head without its Content-Length lines (what websockets is given) and
  the body's length (0: none), which the server reads, bounded, before it answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD_BYTES = 8_192
MAX_HEADERS = 64
MAX_BODY_BYTES = 4_096
HEAD_END = b"\r\n\r\n"

_REQUEST_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/([0-9.]+)")
_HEADER = re.compile(rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+):[ \t]*([\x09\x20-\x7e\x80-\xff]*?)[ \t]*")


@dataclass(frozen=True)
class Head:
    """A head websockets may parse (``head``: Content-Length lines removed), its request target and
    the length of the body that follows it."""

    head: bytes
    target: str
    body_bytes: int


@dataclass(frozen=True)
class BadHead:
    """A head refused before websockets sees it: the HTTP status, why, and the target when the
    request line could be read ("" otherwise)."""

    status: int
    why: str
    target: str = ""


def incomplete(buf: bytes | bytearray) -> BadHead | None:
    """The refusal of a head not complete yet (no empty line in ``buf``): 431 over ``MAX_HEAD_BYTES``,
    400 for a bare LF line end; None while it may still complete."""
    if len(buf) > MAX_HEAD_BYTES:
        return BadHead(431, f"request line and headers over {MAX_HEAD_BYTES} bytes")
    if b"\n" in bytes(buf).replace(b"\r\n", b""):
        return BadHead(400, "bad line ending (bare LF)")
    return None


def check_head(head: bytes) -> Head | BadHead:
    """Judge a complete head (``head`` ends with the empty line, CR LF CR LF); the module docstring
    says how."""
    if len(head) > MAX_HEAD_BYTES:
        return BadHead(431, f"request line and headers over {MAX_HEAD_BYTES} bytes")
    lines = head[:-len(HEAD_END)].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        return BadHead(400, "malformed request line")
    target = line[2].decode("ascii")
    if line[3] not in (b"1.1", b"1.0"):
        return BadHead(505, "HTTP/1.1 or HTTP/1.0 only", target)
    if len(lines) - 1 > MAX_HEADERS:
        return BadHead(431, f"more than {MAX_HEADERS} headers", target)
    kept, lengths = [lines[0]], []
    for raw in lines[1:]:
        h = _HEADER.fullmatch(raw)
        if h is None:
            return BadHead(400, "malformed header line", target)
        name = h[1].lower()
        if name == b"transfer-encoding":
            return BadHead(411, "Transfer-Encoding is not accepted: send a body with a Content-Length", target)
        if name == b"content-length":
            lengths += [v.strip() for v in h[2].split(b",")]
            continue
        kept.append(raw)
    body_bytes = 0
    if lengths:
        if len(set(lengths)) != 1 or not (lengths[0].isdigit() and len(lengths[0]) <= 18):
            return BadHead(400, "malformed Content-Length", target)
        body_bytes = int(lengths[0])
        if body_bytes > MAX_BODY_BYTES:
            return BadHead(413, f"body over {MAX_BODY_BYTES} bytes", target)
    return Head(b"\r\n".join(kept) + HEAD_END, target, body_bytes)
