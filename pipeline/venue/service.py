"""Running the paper venue's asyncio services: the service shape they share, stopping a task, and
``VenueThread``, which runs a market server and its companions on one loop in a daemon thread.

A service (``VenueServer``, ``rest.RestServer``, ``itch_udp.ItchUdpPublisher``) has ``async start()``
(bind, start its task), ``async stop()`` (end its task, close its sockets) and ``pump_task`` (the
task that runs until ``stop``; done earlier only on a bug).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Protocol

from pipeline.venue.errors import VenueError


class Service(Protocol):
    """What ``VenueThread`` runs (see the module docstring)."""

    async def start(self) -> int: ...

    async def stop(self) -> None: ...

    @property
    def pump_task(self) -> asyncio.Task | None: ...


async def cancel_task(task: asyncio.Task | None) -> None:
    """Cancel ``task`` (None: nothing) and wait until it has ended; its cancellation is not raised."""
    if task is not None:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def call_on_loop(loop: asyncio.AbstractEventLoop | None, timeout_s: float, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` run on ``loop`` and its result returned (or what it raised, raised):
    called at once when ``loop`` is None or closed (a service not started yet) or is the running
    loop; from another thread, scheduled on ``loop`` and waited for at most ``timeout_s``.

    Raises:
        TimeoutError: ``loop`` did not run it within ``timeout_s``. Whatever ``fn`` raises.
    """
    if loop is None or loop.is_closed():
        return fn(*args, **kwargs)
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        return fn(*args, **kwargs)
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller's thread
            fut.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return fut.result(timeout=timeout_s)


class VenueThread:
    """Runs a ``VenueServer`` on its own asyncio loop in a daemon thread.

    ``start()`` returns the bound port once the server listens (or raises what failed);
    ``stop()`` closes it and joins the thread. ``error`` holds an exception that ended the thread.
    """

    def __init__(self, server, name: str = "venue", extra: Sequence[Service] = ()) -> None:
        """``server``: the ``VenueServer``; ``extra``: more services to run on the same loop (each
        a ``Service``), e.g. an ``itch_udp.ItchUdpPublisher``."""
        self.server = server
        self.extra = list(extra)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_ev: asyncio.Event | None = None

    def start(self, timeout: float = 10.0) -> int:
        """Raises:
        OSError: the port cannot be bound. VenueError: the server did not start in time.
        """
        self._thread.start()
        if not self._ready.wait(timeout):
            raise VenueError(f"venue server did not start within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.server.port

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported through .error
            self.error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_ev = asyncio.Event()
        services = [self.server, *self.extra]
        started = []
        try:
            for svc in services:
                await svc.start()
                started.append(svc)
            self._ready.set()
            stop_task = asyncio.create_task(self._stop_ev.wait())
            pumps = [svc.pump_task for svc in services]
            try:
                await asyncio.wait({stop_task, *pumps}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_task.cancel()
        finally:
            for svc in reversed(started):
                await svc.stop()
        for pump in pumps:
            if pump.done() and not pump.cancelled() and pump.exception() is not None:
                raise pump.exception()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join the thread (at most ``timeout`` s)."""
        loop, ev = self._loop, self._stop_ev
        if loop is not None and ev is not None and not loop.is_closed():
            with suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(ev.set)
        if self._thread.is_alive():
            self._thread.join(timeout)
