"""The paper venue as a supervised stage: ``procs.venue:VenueAgent``.

It serves Bitget v2 public WebSocket market data on 127.0.0.1 (``pipeline.venue.server``) from a
background thread with its own asyncio loop; the runner's loop only idles (``do_work`` returns 0),
beats, publishes the counters and handles SIGTERM. No rings: the venue talks to the feed over the
socket, like the real exchange.

Config (one process entry; every param optional, unknown params fail the start)::

    [[processes]]
    name = "venue"
    module = "procs.venue:VenueAgent"
    wait = "back-off"            # the runner must not busy-spin: the server thread needs the GIL
    [processes.params]
    port = 0                     # 0: a free port, written to the port file
    port_file = ""               # default <supervisor.run_dir>/<process name>.port, e.g. run/venue.port
    source = "synthetic"         # or "replay"
    capture = ""                 # replay: a capture file (cryptofeed line format, v1 or v2 frames)
    speed = 1.0                  # market time per real time; 0 = as fast as the clients take it
    seed = 1                     # synthetic model seed (and the drop_prob fault's)
    step_ms = 20                 # synthetic step (one book update per instrument per step)
    loop = false                 # replay: start again at the end
    delay_ms = 0.0               # faults at start (see pipeline.venue.server)
    drop_prob = 0.0
    itch_port = 0                # > 0: also send a synthetic ITCH 5.0 session over MoldUDP64 to this
                                 # UDP port on 127.0.0.1 (re-requests: to the packets' source port)
    itch_events = 100000         # order-flow messages of the session (pipeline.itch.synth)
    itch_rate = 10000.0          # messages a second (0 = as fast as possible)
    itch_drop_prob = 0.0         # fault: data packets dropped at random

Instruments: the synthetic source makes a market in every ``[[instruments]]`` entry with
``venue = "paper"`` (symbol, tick_size, lot_size); a replay serves the instruments of its capture.

Finding the port: the venue writes the bound port (decimal + newline, atomically) to the port file
once it listens, and removes it on a clean stop. A client reads it with
``pipeline.venue.server.read_port_file`` and connects to ``ws://127.0.0.1:<port>/v2/ws/public``.

Counters (``ctx.stats``, shown by ``status``): connections, subscriptions, frames_sent,
frames_dropped, faults_injected, slow_disconnects, book_events, trade_events, and itch_msgs (messages
sent over MoldUDP64) when ITCH is on.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from pipeline.agent import Agent, AgentContext
from pipeline.venue.errors import VenueError
from pipeline.venue.itch_udp import ItchUdpPublisher, MoldStream
from pipeline.venue.server import VenueServer, VenueThread, instrument_specs, make_source, write_port_file

PARAMS = frozenset({"port", "port_file", "source", "capture", "speed", "seed", "step_ms", "loop", "delay_ms",
                    "drop_prob", "itch_port", "itch_events", "itch_rate", "itch_drop_prob"})
PUBLISHED_STATS = ("connections", "subscriptions", "frames_sent", "frames_dropped", "faults_injected",
                   "slow_disconnects", "book_events", "trade_events")
STATS_INTERVAL_NS = 100_000_000


class VenueAgent(Agent):
    """Runs a ``VenueServer`` in a thread for the runner (see the module docstring)."""

    def on_start(self, ctx: AgentContext) -> None:
        """Raises:
        VenueError: an unknown param, a bad value, no paper instrument, an unreadable capture, or the
            server thread not starting. OSError: the port cannot be bound.
        """
        self.ctx = ctx
        p = dict(ctx.params)
        unknown = sorted(set(p) - PARAMS)
        if unknown:
            raise VenueError(f"unknown venue params {unknown}; known: {sorted(PARAMS)}")
        kind = str(p.get("source", "synthetic"))
        seed = int(p.get("seed", 1))
        step_ms = p.get("step_ms")
        specs = instrument_specs(ctx.config.instruments)
        if kind == "synthetic" and not specs:
            raise VenueError("no [[instruments]] with venue = 'paper' to make a market in")
        source = make_source(kind, instruments=specs, capture=p.get("capture") or None, seed=seed,
                             step_ms=int(step_ms) if step_ms is not None else None)
        self.server = VenueServer(source, port=int(p.get("port", 0)), speed=float(p.get("speed", 1.0)),
                                  loop_replay=bool(p.get("loop", False)), delay_ms=float(p.get("delay_ms", 0.0)),
                                  drop_prob=float(p.get("drop_prob", 0.0)), fault_seed=seed)
        self.itch = None
        itch_port = int(p.get("itch_port", 0))
        if itch_port:
            stream = MoldStream.synthetic(seed, int(p.get("itch_events", 100_000)))
            self.itch = ItchUdpPublisher(stream, itch_port, rate_msgs_per_s=float(p.get("itch_rate", 10_000.0)),
                                         drop_prob=float(p.get("itch_drop_prob", 0.0)), fault_seed=seed)
        self.thread = VenueThread(self.server, name=f"{ctx.name}-ws", extra=[self.itch] if self.itch else [])
        port = self.thread.start()
        self.port_file = Path(p.get("port_file") or Path(ctx.config.supervisor.run_dir) / f"{ctx.name}.port")
        write_port_file(self.port_file, port)
        self._next_stats_ns = 0
        self._dead = False
        self._publish_stats()
        ctx.log.info("venue_listening", url=self.server.url, source=kind, instruments=self.server.inst_ids,
                     port_file=str(self.port_file))

    def _publish_stats(self) -> None:
        s = self.server.stats()
        self.ctx.stats.update({k: s[k] for k in PUBLISHED_STATS})
        if self.itch is not None:
            self.ctx.stats["itch_msgs"] = self.itch.stats["messages_sent"]

    def do_work(self) -> int:
        """Publish the counters now and then; raise if the server thread died. Never any work."""
        if self._dead:  # every call raises, so the runner's error limit ends the process (exit 70)
            raise VenueError(f"venue server thread ended: {self.thread.error!r}")
        now = self.ctx.clock()
        if now >= self._next_stats_ns:
            self._next_stats_ns = now + STATS_INTERVAL_NS
            self._publish_stats()
            if not self.thread.alive:
                self._dead = True
                raise VenueError(f"venue server thread ended: {self.thread.error!r}")
        return 0

    def on_close(self) -> None:
        thread = getattr(self, "thread", None)
        if thread is None:
            return
        thread.stop()
        self._publish_stats()
        with suppress(OSError):
            os.unlink(self.port_file)
        self.ctx.log.info("venue_stopped", **self.server.stats())
