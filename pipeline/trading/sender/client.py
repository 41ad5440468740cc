"""One request's exchange with the venue: written on a connection, its answer read and classified.

``VenueClient`` turns the transport's failures into ``rest`` Results (``NotSent``: not sent;
``Lost``: an unknown outcome), counts each in ``http_err`` and keeps the latest in
``last_http_error`` (for the logs; it never carries a key), counts every answer 429 (the venue's
rate limit) in ``rl_venue``, stamps the bench's latency marks, and
fires the test-only crash point once a request has left. Every request of the sender goes through it:
the order connections' (``inflight``) and the lane's (``lane``).
"""

from __future__ import annotations

from typing import Callable

from pipeline.trading.bitget import rest
from pipeline.trading.bitget.rest import Result
from pipeline.trading.sender.connection import HttpTransport, Lost, NotSent


class VenueClient:
    """Requests written and answers read for the sender (see the module docstring).

    ``mark(code, ts_origin_ns)`` records a latency point (``AgentContext.mark``); ``crash(point)`` is
    the test-only crash hook (``SenderAgent._crash``).
    """

    def __init__(self, stats: dict, mark: Callable[[int, int], None], crash: Callable[[str], None]):
        self.stats = stats
        self.mark = mark
        self.crash = crash
        self.last_http_error = ""  # the latest transport failure, for the logs (never carries a key)

    def _failed(self, sent: bool, why: str) -> Result:
        """Count a transport failure and classify it (``sent``: it may have reached the venue)."""
        self.stats["http_err"] += 1
        self.last_http_error = why
        return rest.classify_transport_error(sent, why)

    def send(self, conn: HttpTransport, req: rest.Request, crash_point: str = "", *, sent_mark: int = 0,
             ts: int = 0) -> Result | None:
        """Write ``req`` on ``conn``: None once it has left, else the failure's Result. ``sent_mark``: the
        latency-tap code stamped (for the bench) against ``ts`` (the ORDER's origin) once it has left;
        ``crash_point``: the crash hook's point fired then."""
        try:
            conn.send(req)
        except NotSent as exc:
            return self._failed(False, str(exc))
        except Lost as exc:
            return self._failed(True, str(exc))
        if sent_mark:
            self.mark(sent_mark, ts)
        if crash_point:
            self.crash(crash_point)
        return None

    def receive(self, conn: HttpTransport, req: rest.Request, *, wait: bool = False, ack_mark: int = 0,
                ts: int = 0) -> Result:
        """The answer to ``req``, sent on ``conn``, classified (``wait``: see ``HttpTransport.receive``).
        ``ack_mark``: as ``sent_mark``, once read. A GET whose reused keep-alive the venue had closed is
        sent once more on a fresh connection."""
        try:
            status, body = conn.receive(wait)
        except Lost as exc:
            res = self._failed(True, str(exc))
            if str(exc) == "stale" and req.method == "GET":
                res = self.send(conn, req)
                return res if res is not None else self.receive(conn, req, wait=True)
            return res
        return self._answered(status, body, ack_mark, ts)

    def _answered(self, status: int, body: bytes, ack_mark: int, ts: int) -> Result:
        """An answer read: the latency mark stamped, classified, a 429 counted."""
        if ack_mark:
            self.mark(ack_mark, ts)
        res = rest.classify_response(status, body)
        if res.code == rest.CODE_RATE_LIMIT:
            self.stats["rl_venue"] = self.stats.get("rl_venue", 0) + 1
        return res

    def read_answer(self, conn: HttpTransport, req: rest.Request, deadline_ns: int, now: int, ready: bool, *,
                    ack_mark: int = 0, ts: int = 0) -> Result | None:
        """The answer to ``req``, in flight on ``conn``, never waiting: what has arrived is read once
        ``ready`` (its socket is readable or gone) or while the answer is partway in
        (``HttpTransport.receive_ready``, whose receive deadline cuts off a trickle); None while it is
        not whole; a transport failure ("timeout", the connection closed) once ``deadline_ns`` has
        passed before a byte of it came. A GET whose reused keep-alive the venue had closed is sent
        once more on a fresh connection and stays in flight (None)."""
        started = conn.answer_started
        if ready or started:
            try:
                got = conn.receive_ready()
            except Lost as exc:
                res = self._failed(True, str(exc))
                if str(exc) == "stale" and req.method == "GET":
                    return self.send(conn, req)
                return res
            if got is not None:
                return self._answered(got[0], got[1], ack_mark, ts)
            if conn.answer_started:
                return None
        if now < deadline_ns:
            return None
        conn.close()
        return self._failed(True, "timeout")

    def call(self, conn: HttpTransport, req: rest.Request) -> Result:
        """Write ``req`` on ``conn`` and wait for its answer (reconciliation: nothing else in flight)."""
        res = self.send(conn, req)
        return res if res is not None else self.receive(conn, req, wait=True)
