"""The small agents of the tests (the product has no placeholder stages), and the readers of what
they write. Configs name them ``tests.support.agents:Class`` (``configtext.process`` adds the module
to a bare class name).

Sequence agents: the payload of every message is a u64 LE application sequence number, zero padded
to ``size``. Sinks append one line per message to ``params.out``; ``read_seqs`` / ``read_payloads``
read those files back.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import numpy as np

from pipeline.runtime.agent import Agent
from pipeline.trading.messages import BOOK_DTYPE, FEATURES_DTYPE, TRADE_DTYPE, Kind, unpack_control

SEQ = struct.Struct("<Q")
KIND_SEQ = 100


# ------------------------------------------------------------------------------------- sequence agents
class SeqSource(Agent):
    """Writes sequence-numbered messages at ``rate_per_s`` until ``total`` (resumes after a restart
    at the ring's write position, so application seq == ring seq)."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.out = next(iter(ctx.outputs.values()))
        self.rate = float(ctx.params.get("rate_per_s", 1000))
        self.total = int(ctx.params.get("total", 1 << 62))
        self.size = int(ctx.params.get("size", 64))
        self.t0 = ctx.clock()
        # rings resume at their write position; other transports keep no position and start at 0
        self.base = getattr(self.out, "position", 0)
        self.sent = 0
        self.buf = bytearray(self.size)

    def do_work(self) -> int:
        due = min(self.base + int((self.ctx.clock() - self.t0) * self.rate / 1e9), self.total)
        n = 0
        while self.base + self.sent < due and n < self.ctx.batch:
            SEQ.pack_into(self.buf, 0, self.base + self.sent)
            if not self.ctx.emit(self.out, KIND_SEQ, self.buf, self.ctx.clock()):
                break
            self.sent += 1
            n += 1
        return n


class _Reader(Agent):
    """Reads its one input with ``_on(seq, ts, kind, payload)``, counting what it received."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))

    def _on(self, seq, ts, kind, payload):  # pragma: no cover - every reader defines it
        raise NotImplementedError

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        self.ctx.received(n)
        return n


class Relay(_Reader):
    """Copies every message from its one input to its one output (commit after the write)."""

    def on_start(self, ctx):
        super().on_start(ctx)
        self.out = next(iter(ctx.outputs.values()))

    def _on(self, seq, ts, kind, payload):
        self.ctx.emit(self.out, kind, payload, ts)


class SeqSink(_Reader):
    """Appends each new application seq to ``params.out`` (one decimal a line), deduplicating
    redeliveries by sequence: it resumes after the last seq in its file."""

    def on_start(self, ctx):
        super().on_start(ctx)
        self.path = ctx.params["out"]
        self.next = 0
        self.dups = 0
        self.gaps = 0
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                lines = f.read().splitlines()
            if lines:
                self.next = int(lines[-1]) + 1
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _on(self, seq, ts, kind, payload):
        app = SEQ.unpack_from(payload, 0)[0]
        if app < self.next:
            self.dups += 1
            return
        if app > self.next:
            self.gaps += 1
            self.ctx.log.error("gap", expected=self.next, got=app)
        os.write(self.fd, b"%d\n" % app)
        self.next = app + 1

    def on_close(self):
        self.ctx.log.info("sink_closed", duplicates_skipped=self.dups, gaps=self.gaps)
        os.close(self.fd)


def read_seqs(path: Path) -> list[int]:
    """The sequence numbers a ``SeqSink`` wrote (complete lines only)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [int(x) for x in data[: data.rfind(b"\n") + 1].split()]


def count_lines(path: Path) -> int:
    """How many complete lines a sink wrote (0 while the file is absent)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# ------------------------------------------------------------------------------------- control and lifecycle
class ControlSink(Agent):
    """Records every CONTROL command it reads to ``params.out`` as ``CMD REASON`` lines."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.inp = next(iter(ctx.inputs.values()))
        self.path = ctx.params["out"]

    def _on(self, seq, ts, kind, payload):
        c = unpack_control(payload)
        line = f"{c[0].name} {c[1].name}\n" if c else "MALFORMED\n"
        with open(self.path, "a") as f:
            f.write(line)

    def do_work(self) -> int:
        return self.inp.poll(self._on, self.ctx.batch)


class CrashAtStart(Agent):
    """Fails every start."""

    def on_start(self, ctx):
        raise RuntimeError("deliberate start failure")

    def do_work(self) -> int:  # pragma: no cover - never reached
        return 0


class CrashAtRestart(CrashAtStart):
    """Starts fine the first time (then idles), fails every later start: ``params.marker`` is a file
    created by the first start. Lets a crash loop begin after ``up`` has brought the system up
    (``up`` refuses to finish when a process goes FATAL during the initial start)."""

    def on_start(self, ctx):
        marker = ctx.params["marker"]
        if os.path.exists(marker):
            super().on_start(ctx)  # raises: deliberate start failure
        with open(marker, "w") as f:
            f.write(f"{os.getpid()}\n")

    def do_work(self) -> int:
        return 0


class Idle(Agent):
    """Does nothing; only beats (for heartbeat and signal tests)."""

    def do_work(self) -> int:
        return 0


class Warmable(Agent):
    """Never has work; counts ``keep_warm`` calls in its stage stats (``warm``). ``params.fail``:
    the first keep_warm call raises."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.fail = bool(ctx.params.get("fail", False))
        ctx.stats["warm"] = 0

    def do_work(self) -> int:
        return 0

    def keep_warm(self) -> None:
        self.ctx.stats["warm"] += 1
        if self.fail:
            raise RuntimeError("warm-up broke")


class ThreadedIdle(Agent):
    """Starts one helper thread in on_start (it waits forever) and publishes its native id
    (``thread_tid``); never has work."""

    def on_start(self, ctx):
        started = threading.Event()
        self._stop = threading.Event()

        def run():
            ctx.stats["thread_tid"] = threading.get_native_id()
            started.set()
            self._stop.wait()

        threading.Thread(target=run, daemon=True).start()
        started.wait(5)

    def do_work(self) -> int:
        return 0

    def on_close(self):
        self._stop.set()


# ------------------------------------------------------------------------------------- market data agents
class PayloadSink(_Reader):
    """Appends ``kind ts_origin_ns payload-hex`` per message of its one input to ``params.out``
    (read back with ``read_payloads``)."""

    def on_start(self, ctx):
        super().on_start(ctx)
        self.fd = os.open(ctx.params["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _on(self, seq, ts, kind, payload):
        os.write(self.fd, f"{int(kind)} {ts} {bytes(payload).hex()}\n".encode())

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


class FeatureCounter(PayloadSink):
    """Reads its one input; appends ``FEATURES iid book_seq flags ref_mid ref_spread f65 f62 ts_origin_ns``
    per FEATURES message (f65: microprice offset, f62: imbalance over 5 levels) to ``params.out``."""

    def _on(self, seq, ts, kind, payload):
        if kind != Kind.FEATURES:
            os.write(self.fd, f"OTHER {kind} {ts}\n".encode())
            return
        r = np.frombuffer(payload, FEATURES_DTYPE, 1)[0]
        f = r["features"]
        os.write(self.fd, (f"FEATURES {r['instrument_id']} {r['book_seq']} {r['flags']} {float(r['ref_mid'])!r} "
                           f"{float(r['ref_spread'])!r} {float(f[65])!r} {float(f[62])!r} {ts}\n").encode())


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
