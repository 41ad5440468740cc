"""The stress bench's lossy order path: a TCP proxy between the order sender and the paper venue's REST
API that loses a share of the order requests, so the sender must recover (its timeout, then its
queries and reconciliation: ``procs.sender``).

What is lost (``LossPlan``, seeded): each order request (a POST whose path ends in one of
``ORDER_ENDPOINTS``: place, cancel, cancel-all of a symbol) with probability ``drop_prob``; the request
never reaches the venue and nothing is answered, as when the request's packets are lost; the sender's
timeout turns it into an unknown outcome, its queries find the venue never saw it. Every other request
(orderInfo, fills, unfilled orders, the account) and every answer pass unchanged.

Pure parts: ``RequestSplitter`` cuts a connection's bytes into whole HTTP/1.1 requests (head up to the
blank line, then ``Content-Length`` bytes; a head without a request line, or a bad length, ends the
split: ``broken``) and ``LossPlan`` decides. The shell, ``LossyProxy``, runs on an asyncio loop in a
thread: each accepted connection opens one to the venue (whose port it reads from the venue's REST port
file when the connection comes), copies answers back as they come, and forwards or swallows each
request. Counters (``stats``): connections, requests, order_requests, dropped, broken, upstream_errors.
"""

from __future__ import annotations

import asyncio
import random
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from pipeline.runtime.portfile import read_port_file, write_port_file

#: the last path segment of an order request (spot and mix alike)
ORDER_ENDPOINTS = ("place-order", "cancel-order", "cancel-symbol-order")
#: a request head longer than this ends the split (``broken``)
MAX_HEAD_BYTES = 16_384


class RequestSplitter:
    """Whole HTTP/1.1 requests from a byte stream (sans-I/O): ``feed(data)`` returns the requests
    completed by ``data``, each as (method, path, raw bytes). After a malformed head ``broken`` is set
    and nothing more is returned (the raw bytes of what follows are in ``rest``)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.broken = False

    @property
    def rest(self) -> bytes:
        return bytes(self.buf)

    def feed(self, data: bytes) -> list[tuple[str, str, bytes]]:
        self.buf += data
        out = []
        while not self.broken:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                self.broken = len(self.buf) > MAX_HEAD_BYTES
                break
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip()) if value.strip().isdigit() else -1
            if len(parts) != 3 or length < 0:
                self.broken = True
                break
            total = end + 4 + length
            if len(self.buf) < total:
                break
            out.append((parts[0], parts[1].split("?", 1)[0], bytes(self.buf[:total])))
            del self.buf[:total]
        return out


def is_order_request(method: str, path: str) -> bool:
    """Whether a request is an order request (POST to one of ``ORDER_ENDPOINTS``)."""
    return method == "POST" and path.rsplit("/", 1)[-1] in ORDER_ENDPOINTS


class LossPlan:
    """Which requests are lost: each order request with probability ``drop_prob`` (a generator seeded
    by ``seed``: the same seed loses the same ones); never any other request.

    Raises:
        ValueError: ``drop_prob`` outside [0, 1].
    """

    def __init__(self, drop_prob: float, seed: int = 1) -> None:
        if not 0.0 <= drop_prob <= 1.0:
            raise ValueError(f"order drop_prob must be within [0, 1], not {drop_prob!r}")
        self.drop_prob = drop_prob
        self.rng = random.Random(seed)

    def lose(self, method: str, path: str) -> bool:
        return is_order_request(method, path) and self.rng.random() < self.drop_prob


class LossyProxy:
    """The proxy (see the module docstring): listens on 127.0.0.1 (a free port, written to ``port_file``
    by ``start``), forwards to the port in ``upstream_port_file``."""

    def __init__(self, upstream_port_file: Path, port_file: Path, plan: LossPlan) -> None:
        self.upstream_port_file, self.port_file, self.plan = Path(upstream_port_file), Path(port_file), plan
        self.stats = dict.fromkeys(("connections", "requests", "order_requests", "dropped", "broken",
                                    "upstream_errors"), 0)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="lossy-proxy", daemon=True)

    def start(self) -> None:
        """Listen, write the port file, serve in the thread.

        Raises:
            OSError: the port cannot be bound or the port file written."""
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        write_port_file(self.port_file, self.server.sockets[0].getsockname()[1])
        self.thread.start()

    def stop(self) -> None:
        """Close every connection and end the thread."""
        async def close() -> None:
            self.server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", read_port_file(self.upstream_port_file))
        except (OSError, ValueError):
            self.stats["upstream_errors"] += 1
            writer.close()
            return
        back = asyncio.ensure_future(self._copy(up_reader, writer))
        split = RequestSplitter()
        try:
            while data := await reader.read(65536):
                for method, path, raw in split.feed(data):
                    self.stats["requests"] += 1
                    self.stats["order_requests"] += is_order_request(method, path)
                    if self.plan.lose(method, path):
                        self.stats["dropped"] += 1
                        continue
                    up_writer.write(raw)
                if split.broken:  # no longer framed: pass the rest through unchanged
                    self.stats["broken"] += 1
                    up_writer.write(split.rest)
                    await self._copy(reader, up_writer)
                    break
                await up_writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            back.cancel()
            for w in (up_writer, writer):
                with suppress(Exception):
                    w.close()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with suppress(Exception):
            writer.close()


@contextmanager
def lossy_order_path(upstream_port_file: Path, port_file: Path, drop_prob: float, seed: int = 1) -> Iterator[dict]:
    """A ``LossyProxy`` running while the block runs; yields its counters (final once the block ends).

    Raises:
        ValueError: a bad ``drop_prob``. OSError: the proxy cannot listen."""
    proxy = LossyProxy(upstream_port_file, port_file, LossPlan(drop_prob, seed))
    proxy.start()
    try:
        yield proxy.stats
    finally:
        proxy.stop()
