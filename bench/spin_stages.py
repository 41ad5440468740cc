"""The stages of ``bench.spin_ab``'s pipeline measurements (bench use only): the real feed and the paper
venue, each with its idle switched by a file (``PhaseSwitch``; ``PhasedFeedAgent``, ``StampedVenueAgent``,
which also stamps each depth frame as it sends it), and a parked sink recording each BOOK (``BookSink``)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.spin_hops import ARMS, runner_spin
from pipeline.runtime.agent import Agent
from pipeline.trading.messages import BOOK_HEAD_STRUCT, Kind
from procs.feed import BitgetFeedAgent, BitgetFeedParams
from procs.venue import VenueAgent
from ringbuf import BusySpin

PHASE_POLL_NS = 20_000_000


class PhasedFeedParams(BitgetFeedParams, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``PhasedFeedAgent``'s params: the feed's, ``phase_file`` (park / spin / yield, read every 20 ms)
    and ``warm_us`` (its keep-warm period)."""

    phase_file: str
    warm_us: int = 200


class PhaseSwitch:
    """A bench stage's idle arm, read from ``path`` (park / spin / yield; every 20 ms, ``park`` while the
    file is missing) and mirrored in ``stats["phase"]``; ``idle(now, park)`` waits as the arm says:
    ``park()`` (the stage's own park), ``BusySpin`` or the runner's busy-spin (``runner_spin``)."""

    def __init__(self, path: Path, stats: dict):
        self.path, self.stats, self.phase, self._next_check = path, stats, "park", 0
        self.idles = {"spin": BusySpin(), "yield": runner_spin()}
        stats["phase"] = self.phase

    def idle(self, now: int, park) -> None:
        if now >= self._next_check:
            self._next_check = now + PHASE_POLL_NS
            try:
                want = self.path.read_text().strip()
            except OSError:
                want = self.phase
            if want in ARMS:
                self.phase = self.stats["phase"] = want
        if self.phase == "park":
            park()
        else:
            self.idles[self.phase].idle(0)


class PhasedFeedAgent(BitgetFeedAgent):
    """The real feed whose idle is the arm named in a file (bench use only). Run under ``wait =
    "busy-spin"`` with ``keep_warm_us = 0``: ``do_work`` never reports 0 to the runner, and does what the
    runner would after an empty duty cycle itself: the feed's keep-warm every ``warm_us``, then the arm's
    wait (``PhaseSwitch``; ``park``: ``wait_for_work`` until the next warm-up)."""

    params_type = PhasedFeedParams

    def on_start(self, ctx) -> None:
        super().on_start(ctx)
        self.switch = PhaseSwitch(Path(self.p.phase_file), ctx.stats)
        self.warm_ns, self._next_warm = self.p.warm_us * 1_000, 0

    def do_work(self) -> int:
        n = super().do_work()
        if n:
            return n
        now = self.ctx.clock()
        if now >= self._next_warm:
            self.keep_warm()
            self._next_warm = self.ctx.clock() + self.warm_ns
        self.switch.idle(now, lambda: self.wait_for_work(max(self._next_warm - now, 0)))
        return 1


class StampedVenueAgent(VenueAgent):
    """The paper venue that stamps every books15 frame as its server thread sends it (``time.monotonic_ns``,
    the frame's timestamp in ms, ``time.time_ns``), saved to ``<run_dir>/venue.sends.npy`` on close; its
    idle is the arm named in ``<run_dir>/venue.phase`` (``PhaseSwitch``; ``park`` while it is missing: the
    venue's own ``wait_for_work``, as under back-off). Run under ``wait = "busy-spin"``: ``do_work``
    never reports 0 to the runner (bench only)."""

    def on_start(self, ctx) -> None:
        super().on_start(ctx)
        run_dir = Path(ctx.config.supervisor.run_dir)
        self.switch = PhaseSwitch(run_dir / "venue.phase", ctx.stats)
        self.sends: list[tuple[int, int, int]] = []
        clients = self.server._clients
        plain = clients._writer

        async def stamped(conn) -> None:  # the clients' writer, each depth frame stamped before its send
            q, sends, mono, wall = conn.queue, self.sends, time.monotonic_ns, time.time_ns
            real_get = q.get

            async def get():
                due, data = await real_get()
                if not due and isinstance(data, bytes) and b'"books15"' in data[:120]:
                    at = data.rfind(b'"ts":"') + 6  # the entry's ts: the BOOK's exch_ts_ns in ms
                    end = data.find(b'"', at)
                    if at > 5 and end > at:
                        sends.append((mono(), int(data[at:end]), wall()))
                return due, data

            q.get = get
            await plain(conn)

        clients._writer = stamped

    def do_work(self) -> int:
        super().do_work()
        self.switch.idle(self.ctx.clock(), lambda: self.wait_for_work(100_000_000))
        return 1

    def on_close(self) -> None:
        super().on_close()
        arr = np.array(self.sends, np.int64).reshape(-1, 3)
        np.save(Path(self.ctx.config.supervisor.run_dir) / "venue.sends.npy", arr)


class BookSink(Agent):
    """Reads BOOKs; per BOOK (read ``time.monotonic_ns``, ``ts_origin_ns``, exch ts ms) saved to the
    ``out`` param's path (``.npy``) on close (bench only)."""

    def on_start(self, ctx) -> None:
        self.ctx, self.inp, self.rows = ctx, next(iter(ctx.inputs.values())), []
        self.path, self.clock = str(ctx.params["out"]), time.monotonic_ns
        ctx.stats["books"] = 0

    def _on(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind == Kind.BOOK:
            self.rows.append((self.clock(), ts_origin_ns, BOOK_HEAD_STRUCT.unpack_from(payload)[5] // 1_000_000))

    def do_work(self) -> int:
        got = self.inp.poll(self._on, self.ctx.batch)
        if got:
            self.ctx.received(got)
            self.ctx.stats["books"] = len(self.rows)
        return got

    def on_close(self) -> None:
        np.save(self.path, np.array(self.rows, np.int64).reshape(-1, 3))
