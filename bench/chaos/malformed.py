"""Bad input against the real pipeline (issue #9): run by ``bench.chaos`` and ``tests/chaos``.

``malformed_frames``: the feed is pointed (its ``port_file``) at ``GarbageVenue``, a WebSocket server
on 127.0.0.1 that acknowledges the subscription, sends one valid ``books15`` snapshot, then N
malformed frames (``fuzz_frames``: random binary, truncated JSON, NaN literals, invalid UTF-8, non-objects,
objects of no known kind, missing fields, wrong types, bad numbers, unsorted sides, bad actions, empty
data, unknown channels / events) and ~1 % well-formed pushes with a wrong checksum, then 20 valid
snapshots. Pass: the feed keeps its pid and connection (no restart, no reconnect, errors 0), its
``rejected`` counter grows by exactly the malformed count (and ``checksum_failures`` by the bad-checksum
count), and every valid snapshot after the garbage becomes a BOOK.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.chaos.harness import Row, judged_row
from pipeline.trading.bitget.book import bitget_checksum

SYMBOL = "BTCUSDT"


def _levels(mid: float, n: int = 15, tick: float = 0.1) -> tuple[list, list]:
    bids = [[f"{mid - tick * (i + 1):.1f}", f"{0.5 + i * 0.1:.4f}"] for i in range(n)]
    asks = [[f"{mid + tick * (i + 1):.1f}", f"{0.5 + i * 0.1:.4f}"] for i in range(n)]
    return bids, asks


def book_push(seq: int, *, mid: float = 50_000.0, bad_checksum: bool = False, action: str = "snapshot",
              channel: str = "books15") -> dict:
    """A ``books15`` push (a dict, for mutation) with a correct checksum unless ``bad_checksum``."""
    bids, asks = _levels(mid + (seq % 7) * 0.1)
    cs = bitget_checksum(bids, asks)
    if bad_checksum:
        cs = cs ^ 0x5A5A5A5A or 1
    ts = 1_700_000_000_000 + seq
    return {"action": action, "arg": {"instType": "SPOT", "channel": channel, "instId": SYMBOL},
            "data": [{"asks": asks, "bids": bids, "checksum": cs, "seq": seq, "ts": str(ts)}], "ts": ts}


def fuzz_frames(n: int, seed: int, first_seq: int) -> tuple[list, int]:
    """``n`` bad frames (str: text frame, bytes: binary frame) and how many of them are well-formed
    pushes with a wrong checksum (about 1 %, every 97th); every other one is malformed."""
    rng = random.Random(seed)
    good = orjson.dumps(book_push(first_seq)).decode()
    out: list = []
    badsum = 0
    for i in range(n):
        seq = first_seq + 1 + i
        k = i % 16
        if i % 97 == 96:
            out.append(orjson.dumps(book_push(seq, bad_checksum=True)).decode())
            badsum += 1
            continue
        if k == 0:  # random binary, never valid UTF-8 at its first byte
            out.append(b"\xff" + rng.randbytes(rng.randint(0, 300)))
        elif k == 1:  # truncated JSON
            out.append(good[: rng.randint(1, len(good) - 1)])
        elif k == 2:  # a NaN literal
            out.append(good.replace('"checksum":', '"checksum":NaN,"x":', 1))
        elif k == 3:  # invalid UTF-8 inside a JSON string, binary
            out.append(b'{"action":"snapshot","arg":{"instId":"\xc3\x28"}}')
        elif k == 4:  # JSON, not an object
            out.append(rng.choice(["[]", "1", "\"books\"", "null", "true", "[1,2,{\"a\":3}]", str(rng.random())]))
        elif k == 5:  # an object of no known kind
            out.append(orjson.dumps({"junk": rng.randint(0, 10**9), "nested": {"a": [1, 2]}}).decode())
        elif k == 6:  # a push without data
            d = book_push(seq)
            del d["data"]
            out.append(orjson.dumps(d).decode())
        elif k == 7:  # wrong types
            d = book_push(seq)
            d["data"][0]["asks"] = rng.choice([5, "asks", [["1"]], [[1, 2, 3]], {"p": 1}])
            out.append(orjson.dumps(d).decode())
        elif k == 8:  # bad numbers
            d = book_push(seq)
            d["data"][0]["bids"][0][0] = rng.choice(["abc", "NaN", "-5", "1e400", "", "0x10", "inf", "0"])
            out.append(orjson.dumps(d).decode())
        elif k == 9:  # unsorted side
            d = book_push(seq)
            d["data"][0]["bids"] = list(reversed(d["data"][0]["bids"]))
            out.append(orjson.dumps(d).decode())
        elif k == 10:  # bad action
            out.append(orjson.dumps(book_push(seq, action=rng.choice(["explode", "", "SNAPSHOT"]))).decode())
        elif k == 11:  # empty data
            d = book_push(seq)
            d["data"] = []
            out.append(orjson.dumps(d).decode())
        elif k == 12:  # unknown channel
            out.append(orjson.dumps(book_push(seq, channel=rng.choice(["ticker", "candle1m", "books999"]))).decode())
        elif k == 13:  # unknown event
            out.append(orjson.dumps({"event": rng.choice(["boom", "login", ""]), "arg": {}}).decode())
        elif k == 14:  # random printable junk
            out.append("".join(rng.choice("{}[]\":,0123456789abcdefnulltrue ") for _ in range(rng.randint(1, 200))))
        else:  # checksum / seq of the wrong JSON type
            d = book_push(seq)
            d["data"][0]["seq"] = rng.choice([-1, 1e30, [1], {"a": 1}, True, "x"])
            out.append(orjson.dumps(d).decode())
    return out, badsum


@dataclass(slots=True)
class Sent:
    """What ``GarbageVenue`` did: connections accepted, garbage frames and valid snapshots sent."""

    connections: int = 0
    garbage: int = 0
    good: int = 0


class GarbageVenue(threading.Thread):
    """A Bitget-dialect public WebSocket on 127.0.0.1 serving one connection: subscription acks, one
    valid snapshot, ``garbage`` (pre-built frames), then ``good_after`` valid snapshots; it answers
    ``ping`` and (un)subscribe requests afterwards. The port goes to ``port_file`` once listening."""

    def __init__(self, port_file: Path, garbage: list, good_after: int, first_seq: int):
        super().__init__(name="garbage-venue", daemon=True)
        self.port_file, self.garbage, self.good_after, self.seq = port_file, garbage, good_after, first_seq
        self.sent = Sent()
        self.done, self.ready = threading.Event(), threading.Event()  # the frames all sent; listening
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop_ev: asyncio.Event | None = None

    def run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        self._stop_ev = asyncio.Event()
        async with serve(self._serve_connection, "127.0.0.1", 0, max_size=None, ping_interval=None) as server:
            port = server.sockets[0].getsockname()[1]
            tmp = self.port_file.with_suffix(".tmp")
            tmp.write_text(str(port))
            os.replace(tmp, self.port_file)
            self.ready.set()
            await self._stop_ev.wait()

    async def _reply(self, ws, text) -> None:
        """Answer ``ping`` with ``pong`` and a (un)subscribe request with an event per argument."""
        if text == "ping":
            await ws.send("pong")
            return
        with contextlib.suppress(Exception):
            req = orjson.loads(text)
            for arg in req.get("args", []):
                await ws.send(orjson.dumps({"event": req.get("op"), "arg": arg}).decode())

    async def _serve_connection(self, ws) -> None:
        self.sent.connections += 1
        first = self.sent.connections == 1
        await self._reply(ws, await ws.recv())  # the subscription

        async def reader():
            async for msg in ws:
                await self._reply(ws, msg)

        rt = asyncio.create_task(reader())
        try:
            self.seq += 1
            await ws.send(orjson.dumps(book_push(self.seq)).decode())
            self.sent.good += 1
            if first:
                for i, frame in enumerate(self.garbage):
                    await ws.send(frame)
                    self.sent.garbage += 1
                    if i % 256 == 0:
                        await asyncio.sleep(0)
                self.seq += len(self.garbage) + 1
                for _ in range(self.good_after):
                    self.seq += 1
                    await ws.send(orjson.dumps(book_push(self.seq)).decode())
                    self.sent.good += 1
                    await asyncio.sleep(0.005)
                self.done.set()
            while True:  # keep the connection fresh (no stale reconnect) without more BOOKs
                await asyncio.sleep(1.0)
                await ws.send("pong")
        except Exception:
            pass
        finally:
            rt.cancel()

    def stop(self) -> None:
        if self.loop is not None and self._stop_ev is not None:
            self.loop.call_soon_threadsafe(self._stop_ev.set)
        self.join(5)


def malformed_frames(ChaosPipeline, quick: bool) -> Row:
    from pipeline.trading.bitget.protocol import FrameKind, make_decoder

    n = 10_000 if quick else 100_000
    good_after = 20
    garbage, badsum = fuzz_frames(n, seed=9, first_seq=1_000)
    dec = make_decoder()  # the generator's own check: every frame is refused or fails its checksum
    kinds = [dec.decode(f).kind for f in garbage]
    malformed = sum(k in (FrameKind.REJECTED, FrameKind.UNKNOWN) for k in kinds)
    well_formed = sum(k == FrameKind.SNAPSHOT for k in kinds)
    with tempfile.TemporaryDirectory(prefix="chaos-ws-") as d:
        port_file = Path(d) / "garbage.port"
        srv = GarbageVenue(port_file, garbage, good_after, first_seq=999)

        def hook(text: str) -> str:
            new, k = re.subn(r'port_file = "[^"]*venue\.port", channels', f'port_file = "{port_file}", channels', text)
            assert k == 1, "feed port_file not found in the config"
            return new

        srv.start()
        srv.ready.wait(10)
        try:
            with ChaosPipeline(rate=200, llm=False, text_hook=hook, name="malformed") as p:
                pid0 = p.pids()
                srv.done.wait(120 if not quick else 60)
                want_rej = malformed

                def settled():
                    s = p.stage("feed")
                    return s if (s.get("rejected", 0) >= want_rej and s.get("checksum_failures", 0) >= badsum
                                 and s.get("books_emitted", 0) >= 1 + good_after) else None

                with contextlib.suppress(TimeoutError):
                    p.wait(settled, 30, "the feed to count every frame", 0.1)
                time.sleep(0.3)
                feed = p.proc("feed")
                st = feed["stage"]
                pid1 = p.pids()
        finally:
            srv.stop()
    rej = st.get("rejected", 0)
    rej_by = {k: v for k, v in st.items() if k.startswith("rej_")}
    checks = {
        "generator: all malformed or bad checksum": malformed + well_formed == n and well_formed == badsum,
        "feed pid unchanged, no restart": pid1 == pid0 and feed["restarts"] == 0,
        "errors 0": feed["errors"] == 0 and st.get("errors", 0) == 0,
        "one connection, no reconnect": srv.sent.connections == 1 and st.get("reconnects", 0) == 0,
        "rejected == malformed sent": rej == malformed and sum(rej_by.values()) == malformed,
        "checksum_failures == bad checksums sent": st.get("checksum_failures", 0) == badsum,
        "every valid snapshot became a BOOK": st.get("books_emitted", 0) == srv.sent.good == 1 + good_after,
    }
    return judged_row(
        "malformed_frames", checks, name_failed=False,
        injected=f"{n:,} bad frames into the feed's WebSocket ({malformed:,} malformed: binary, truncated, "
                 f"NaN, bad UTF-8, wrong types...; {badsum} bad checksums) between valid snapshots",
        did=f"feed pid kept, restarts {feed['restarts']}, errors {feed['errors']}, reconnects "
            f"{st.get('reconnects', 0)}; rejected {rej:,} ({', '.join(f'{k[4:]} {v}' for k, v in sorted(rej_by.items()))}), "
            f"checksum failures {st.get('checksum_failures', 0)}; BOOKs {st.get('books_emitted', 0)} of "
            f"{srv.sent.good} valid snapshots",
        figure=f"{rej + st.get('checksum_failures', 0):,} of {n:,} counted, 0 crashes",
        details={"stage": st, "sent_garbage": srv.sent.garbage})
