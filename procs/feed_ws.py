"""The Bitget feed's network thread: one asyncio loop, one websockets connection at a time.

Connects (back-off with jitter between attempts), subscribes, sends ``ping`` every
``ping_interval_s``, paces outgoing frames (``SendPacer``), reconnects when the peer closes, on an
error or when nothing arrived for ``stale_after_s``. Every frame is stamped ``time.monotonic_ns()``
on arrival and handed over as ``(ts, frame)``: to ``on_item`` on this thread (``decode_in =
"network"``), or appended to the bounded ``inbox`` deque for the agent thread (a full inbox drops
the frame, counts ``queue_drops`` and puts a ``MARK_GAP`` before the next frame). Connection
events are handed over the same way as markers (negative ``ts``: ``session.MARK_*``). In record
mode every event also goes to a ``CaptureRecorder``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Callable

from pipeline.trading.bitget.capture import CaptureRecorder
from pipeline.trading.bitget.frames import MAX_FRAME_BYTES, PING_TEXT
from pipeline.trading.bitget.pacing import Backoff, SendPacer
from pipeline.trading.bitget.session import MARK_CONNECTED, MARK_DISCONNECTED, MARK_GAP

#: counters the network thread owns (mirrored into ctx.stats by the agent)
NET_COUNTERS = ("reconnects", "stale_timeouts", "queue_drops", "connects", "connect_failures", "disconnects",
                "sends_discarded", "record_errors")


class NetCounters:
    """Counters the network thread owns; ``version`` moves whenever one of them does."""

    __slots__ = NET_COUNTERS + ("version", "frames_in", "sent")

    def __init__(self) -> None:
        for k in self.__slots__:
            setattr(self, k, 0)

    def bump(self, name: str, n: int = 1) -> None:
        setattr(self, name, getattr(self, name) + n)
        self.version += 1


class WsClient(threading.Thread):
    """The feed's network thread: one asyncio loop, one websockets connection at a time.

    ``inbox`` receives ``(ts_ns, frame)`` and the markers; ``send(conn_id, texts)`` is the one
    thread-safe way in. ``stop(timeout_s)`` cancels everything, closes the connection and joins.
    """

    def __init__(self, *, url_fn: Callable[[], str], subscribe_texts: list[str], inbox: collections.deque,
                 queue_max: int, backoff: Backoff, ping_interval_s: float, stale_after_s: float,
                 open_timeout_s: float, max_msgs_per_s: float, log, recorder: CaptureRecorder | None = None,
                 name: str = "feed-ws",
                 wake: threading.Event | None = None, on_item: Callable[[int, object], None] | None = None):
        super().__init__(name=name, daemon=True)
        #: when set, every frame and marker is handed to it on this thread instead of the inbox
        self.on_item = on_item
        self.url_fn = url_fn
        self.subscribe_texts = subscribe_texts
        self.inbox = inbox
        self.wake = wake if wake is not None else threading.Event()  # set after each append
        self.queue_max = queue_max
        self.backoff = backoff
        self.ping_interval_s = ping_interval_s
        self.stale_ns = int(stale_after_s * 1e9)
        self.open_timeout_s = open_timeout_s
        self.pacer = SendPacer(max_msgs_per_s)
        self.log = log
        self.recorder = recorder
        self.counters = NetCounters()
        self.conn_id = 0
        self.connected = False
        self.loop = asyncio.new_event_loop()
        self._outq: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._gap_pending = False
        self._last_rx_ns = 0

    # -- agent side
    def send(self, conn_id: int, texts: list[str]) -> bool:
        """Queue ``texts`` for connection ``conn_id`` (discarded if that connection is gone)."""
        try:
            for t in texts:
                self.loop.call_soon_threadsafe(self._outq.put_nowait, (conn_id, t))
        except RuntimeError:  # loop closed
            return False
        return True

    def stop(self, timeout_s: float) -> bool:
        """Cancel the network task, wait up to ``timeout_s`` for the thread; True when it ended."""
        self._stopping = True
        try:
            self.loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:
            pass
        if self.is_alive():
            self.join(timeout_s)
        return not self.is_alive()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # -- thread
    def run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            self._task = loop.create_task(self._main())
            if self._stopping:
                self._task.cancel()
            try:
                loop.run_until_complete(self._task)
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # a bug here must not go unnoticed
                self.log.error("ws_thread_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
            self._flush_record()

    async def _main(self) -> None:
        from websockets.asyncio.client import connect

        first = True
        failures_logged = 0
        while not self._stopping:
            ws = None
            try:
                url = self.url_fn()
                ws = await connect(url, open_timeout=self.open_timeout_s, ping_interval=None, close_timeout=0.5,
                                   max_size=MAX_FRAME_BYTES, proxy=None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.counters.bump("connect_failures")
                if failures_logged < 5 or self.counters.connect_failures % 100 == 0:
                    self.log.warning("ws_connect_failed", error=f"{type(exc).__name__}: {exc}",
                                     failures=self.counters.connect_failures)
                failures_logged += 1
            if ws is not None:
                failures_logged = 0
                got_frames = await self._session(ws, url, first)
                first = False
                if got_frames:
                    self.backoff.reset()
            if self._stopping:
                break
            await asyncio.sleep(self.backoff.next_delay_s())

    async def _session(self, ws, url: str, first: bool) -> bool:
        """One connection: subscribe, then receive / ping / send / watch until one of them ends.
        Returns whether any frame arrived."""
        self.conn_id += 1
        cid = self.conn_id
        c = self.counters
        c.bump("connects")
        if not first:
            c.bump("reconnects")
        frames_before = c.frames_in
        self._put(MARK_CONNECTED, cid)
        self.connected = True
        self._last_rx_ns = time.monotonic_ns()
        self._gap_pending = False
        if self.recorder is not None:
            self._count_record(self.recorder.opened(time.time(), url))
        self.log.info("ws_connected", url=url, conn=cid, reconnect=not first)
        tasks: list[asyncio.Task] = []
        reason = "closed"
        try:
            for text in self.subscribe_texts:
                await self._send(ws, text)
            tasks = [asyncio.create_task(self._recv(ws, cid), name="recv"),
                     asyncio.create_task(self._pinger(ws), name="ping"),
                     asyncio.create_task(self._sender(ws, cid), name="send"),
                     asyncio.create_task(self._watchdog(), name="watchdog")]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            t = next(iter(done))
            exc = t.exception()
            reason = f"{t.get_name()}: {type(exc).__name__}: {exc}" if exc is not None else f"{t.get_name()}: {t.result()}"
        except asyncio.CancelledError:
            reason = "stopping"
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            try:
                await asyncio.wait_for(ws.close(), 1.0)
            except BaseException:  # noqa: BLE001 - closing is best effort (cancelled, timed out, broken)
                if ws.transport is not None:
                    ws.transport.abort()
            self.connected = False
            self._put(MARK_DISCONNECTED, cid)
            c.bump("disconnects")
            self.log.info("ws_disconnected", conn=cid, reason=reason[:300], frames=c.frames_in - frames_before)
            self._flush_record()
        return c.frames_in > frames_before

    def _put(self, ts: int, item) -> None:
        if self.on_item is not None:
            self.on_item(ts, item)
        else:
            self.inbox.append((ts, item))
            self.wake.set()

    async def _recv(self, ws, cid: int) -> str:
        inbox, qmax, c = self.inbox, self.queue_max, self.counters
        mono, rec, on_item = time.monotonic_ns, self.recorder, self.on_item
        async for frame in ws:
            ts = mono()
            self._last_rx_ns = ts
            c.frames_in += 1
            if rec is not None:
                self._count_record(rec.received(time.time(), frame))
            if on_item is not None:  # decode here: no queue, no hand-over to the agent thread
                on_item(ts, frame)
                continue
            if len(inbox) >= qmax:
                c.bump("queue_drops")
                self._gap_pending = True
                continue
            if self._gap_pending:
                self._gap_pending = False
                inbox.append((MARK_GAP, cid))
            inbox.append((ts, frame))
            self.wake.set()
        return "closed by peer"

    async def _pinger(self, ws) -> None:
        while True:
            await asyncio.sleep(self.ping_interval_s)
            await self._send(ws, PING_TEXT)

    async def _sender(self, ws, cid: int) -> None:
        while True:
            to, text = await self._outq.get()
            if to != cid:
                self.counters.bump("sends_discarded")
                continue
            await self._send(ws, text)

    async def _watchdog(self) -> str:
        period = min(max(self.stale_ns / 4e9, 0.01), 1.0)
        last_flush = time.monotonic()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic_ns()
            if self.recorder is not None and now / 1e9 - last_flush >= 1.0:
                self._flush_record()
                last_flush = now / 1e9
            if now - self._last_rx_ns > self.stale_ns:
                self.counters.bump("stale_timeouts")
                self.log.warning("ws_stale", silent_ms=(now - self._last_rx_ns) // 1_000_000)
                return "stale"

    async def _send(self, ws, text: str) -> None:
        """Send one frame, pacing to ``max_msgs_per_s`` over a sliding second."""
        pacer = self.pacer
        while (wait_s := pacer.wait_s(time.monotonic())) > 0.0:
            await asyncio.sleep(wait_s)
        pacer.sent(time.monotonic())
        await ws.send(text)
        self.counters.sent += 1
        if self.recorder is not None:
            self._count_record(self.recorder.sent(time.time(), text))

    def _count_record(self, recorded: bool) -> None:
        if not recorded:  # a frame the line format cannot hold (line break, not UTF-8), or I/O
            self.counters.bump("record_errors")

    def _flush_record(self) -> None:
        if self.recorder is not None:
            self._count_record(self.recorder.flush())
