"""Test agents for the stage-process tests."""

from __future__ import annotations

import os
import time

import numpy as np

from pipeline.runtime.agent import Agent
from pipeline.trading.messages import BOOK_DTYPE, TRADE_DTYPE, Kind


class PayloadSink(Agent):
    """Appends ``kind ts_origin_ns payload-hex`` per message of its one input to ``params.out``
    (read back with ``read_payloads``)."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.fd = os.open(ctx.params["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _on(self, seq, ts, kind, payload):
        os.write(self.fd, f"{int(kind)} {ts} {bytes(payload).hex()}\n".encode())

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        self.ctx.received(n)
        return n

    def on_close(self):
        os.close(self.fd)


def read_payloads(path, dtype) -> list[tuple[int, int, np.void]]:
    """``(kind, ts_origin_ns, record)`` per line a ``PayloadSink`` wrote (none while the file is absent);
    the record is the payload's first ``dtype`` item."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [ln.split() for ln in f.read().splitlines()]
    return [(int(k), int(ts), np.frombuffer(bytes.fromhex(h), dtype, 1)[0]) for k, ts, h in rows]


class BookCounter(PayloadSink):
    """Reads the md ring; appends one line per message to ``params.out``:
    ``BOOK iid seq n_bids n_asks best_bid best_ask ts_origin_ns read_ns`` or
    ``TRADE iid trade_id price size ts_origin_ns read_ns`` (``read_ns``: monotonic when read)."""

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


class BookSource(Agent):
    """Writes ``params.total`` BOOK records (instrument ``params.instrument``, default 1) into its one
    output, one per ``do_work``: seq 1.., best bid 100.0 + seq * 0.1, 15 levels a side 0.1 apart,
    spread 0.5. BOOKs whose seq is in ``params.crossed`` are crossed (best bid above best ask).
    Appends ``seq ts_origin_ns`` per BOOK written to ``params.out``."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.out = next(iter(ctx.outputs.values()))
        self.total = int(ctx.params.get("total", 10))
        self.crossed = set(ctx.params.get("crossed", []))
        self.seq = 0
        self.rec = np.zeros(1, BOOK_DTYPE)
        self.rec["instrument_id"] = int(ctx.params.get("instrument", 1))
        self.rec["n_bids"] = self.rec["n_asks"] = 15
        self.rec["bid_sz"][0] = np.arange(1, 16)
        self.rec["ask_sz"][0] = np.arange(2, 17)
        self.fd = os.open(ctx.params["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def do_work(self) -> int:
        if self.seq >= self.total:
            return 0
        seq = self.seq + 1
        bid = 100.0 + seq * 0.1
        ask = bid - 0.5 if seq in self.crossed else bid + 0.5
        self.rec["seq"], self.rec["exch_ts_ns"] = seq, 1_700_000_000_000_000_000 + seq * 1_000_000
        self.rec["bid_px"][0] = bid - 0.1 * np.arange(15)
        self.rec["ask_px"][0] = ask + 0.1 * np.arange(15)
        ts = time.monotonic_ns()
        if not self.ctx.emit(self.out, Kind.BOOK, self.rec.tobytes(), ts):
            return 0
        self.seq = seq
        os.write(self.fd, f"{seq} {ts}\n".encode())
        return 1

    def on_close(self):
        os.close(self.fd)


class FeatureCounter(Agent):
    """Reads its one input; appends ``FEATURES iid book_seq flags ref_mid ref_spread f65 f62 ts_origin_ns``
    per FEATURES message (f65: microprice offset, f62: imbalance over 5 levels) to ``params.out``."""

    def on_start(self, ctx):
        from pipeline.trading.messages import FEATURES_DTYPE

        self.dtype = FEATURES_DTYPE
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.fd = os.open(ctx.params["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _on(self, seq, ts, kind, payload):
        if kind != Kind.FEATURES:
            os.write(self.fd, f"OTHER {kind} {ts}\n".encode())
            return
        r = np.frombuffer(payload, self.dtype, 1)[0]
        f = r["features"]
        os.write(self.fd, (f"FEATURES {r['instrument_id']} {r['book_seq']} {r['flags']} {float(r['ref_mid'])!r} "
                           f"{float(r['ref_spread'])!r} {float(f[65])!r} {float(f[62])!r} {ts}\n").encode())

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        self.ctx.received(n)
        return n

    def on_close(self):
        os.close(self.fd)
