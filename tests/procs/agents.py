"""Test agents for the stage-process tests."""

from __future__ import annotations

import os
import time

import numpy as np

from pipeline.agent import Agent
from pipeline.messages import BOOK_DTYPE, TRADE_DTYPE, Kind


class BookCounter(Agent):
    """Reads the md ring; appends one line per message to ``params.out``:
    ``BOOK iid seq n_bids n_asks best_bid best_ask ts_origin_ns read_ns`` or
    ``TRADE iid trade_id price size ts_origin_ns read_ns`` (``read_ns``: monotonic when read)."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.fd = os.open(ctx.params["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _on(self, seq, ts, kind, payload):
        now = time.monotonic_ns()
        if kind == Kind.BOOK:
            b = np.frombuffer(payload, BOOK_DTYPE, 1)[0]
            line = (f"BOOK {b['instrument_id']} {b['seq']} {b['n_bids']} {b['n_asks']} "
                    f"{float(b['bid_px'][0])!r} {float(b['ask_px'][0])!r} {ts} {now}\n")
        elif kind == Kind.TRADE:
            t = np.frombuffer(payload, TRADE_DTYPE, 1)[0]
            line = f"TRADE {t['instrument_id']} {t['trade_id']} {float(t['price'])!r} {float(t['size'])!r} {ts} {now}\n"
        else:
            line = f"OTHER {kind} {ts} {now}\n"
        os.write(self.fd, line.encode())

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        self.ctx.received(n)
        return n

    def on_close(self):
        os.close(self.fd)
