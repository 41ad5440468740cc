"""Chaos scenarios of bad input, the LLM, risk limits, the kill switch, and key / permission scans.

Each scenario is a function ``(ChaosPipeline-factory, quick) -> Row`` (``bench.chaos``) that starts the
real pipeline (the ``bench.pipeline`` config, rewritten by a ``text_hook`` where the scenario needs an
injector), injects its fault, measures and judges:

- ``malformed_frames``: the feed is pointed (its ``port_file``) at ``GarbageVenue``, a WebSocket server
  on 127.0.0.1 that acknowledges the subscription, sends one valid ``books15`` snapshot, then N
  malformed frames (``fuzz_frames``: random binary, truncated JSON, NaN literals, invalid UTF-8, non-objects,
  objects of no known kind, missing fields, wrong types, bad numbers, unsorted sides, bad actions, empty
  data, unknown channels / events) and ~1 % well-formed pushes with a wrong checksum, then 20 valid
  snapshots. Pass: the feed keeps its pid and connection (no restart, no reconnect, errors 0), its
  ``rejected`` counter grows by exactly the malformed count (and ``checksum_failures`` by the bad-checksum
  count), and every valid snapshot after the garbage becomes a BOOK.
- ``llm_faults``: the llm stage is ``FaultyLlmAgent`` (the real ``procs.llm.LlmAgent``, real model, real
  breaker and validation gate) whose fault phase is switched at run time through a file: ``idle`` (no
  generation: the unloaded baseline), ``garbage`` (no grammar, temperature 5: the model answers free
  text), ``timeout`` (``deadline_ms`` 1), ``slow`` (every token takes ``slow_token_ms`` of CPU work in
  the generation thread, busy, not asleep, so an answer would take 30 s; quick: 3 s: a model that slow
  uses its core for the whole generation, with the real one's SCHED_IDLE and niceness; ``busy_cpu``);
  a ``normal`` phase (the healthy hub) is measured too, for context, not judged. Each phase starts
  with a fresh breaker. Safety checks, always judged: no INSTRUCTION written and no LLM-origin ORDER
  decided or sent (risk's and the sender's latency taps, the audit log) in any fault phase, and the
  breaker opens (stage counter and an ``llm_breaker`` log event) in each.

  The fast path's p99 criterion. STATISTIC AND VERDICT RULE, FIXED AS OF 2026-12-01 (issue #19), before
  the results of any run judged by them; they must not be changed after seeing results (the statistic
  was changed six times after failing runs before this; a change now needs its own issue, argued and
  decided before the runs it is to judge):

  * Statistic (``window_p99s``, ``trimmed_gmean``): the fast path's SIGNAL p99 (latency tap: frame
    received -> SIGNAL written, each SIGNAL once) in each of short interleaved windows (30 rounds of
    2 s: idle, garbage, idle, timeout, idle, slow; quick: 2 rounds of 1 s); a condition's figure is
    the geometric mean of its windows' p99s without the lowest and the highest tenth of them
    (``int(n / 10)`` at each end, none below ten windows); a fault's ratio is its figure over idle's.
    Limit: every fault's ratio <= 1.10 (``P99_LIMIT``). A/A control: idle's windows split alternately
    into two halves, the ratio of the two halves' figures (``idle_aa``).
  * Verdict (``p99_verdict``), with s = max(A/A, 1 / A/A), the machine's own idle-against-idle
    deviation in the same run:
      - FAIL when a fault's ratio or the A/A ratio is not a finite positive number (nothing
        measured is neither a pass nor the machine's noise);
      - when s <= 1.05 (``AA_BAND``: the machine resolves the limit, its own deviation within half
        the 10 % margin): PASS when every fault's ratio <= 1.10, else FAIL;
      - when s > 1.05 (it does not resolve the limit): FAIL when some fault's ratio > 1.10 * s (over
        the limit by more than the machine's own deviation), PASS when every fault's ratio <=
        1.10 / s (under it by more), else INCONCLUSIVE, reported as such (never as a pass).
    The scenario's verdict is FAIL when a safety check failed, else this verdict.

  Reported beside it, not judged: the median of each condition's window p99s, the pooled p99 of all
  its windows (one burst of host noise moves it: in four runs of one build it put garbage at
  0.94-1.11x, timeout at 0.92-1.18x, slow at 0.85-1.21x), and 10 s phases judged A/B/A against the
  idle phases on either side (a noise floor of 15-30 % between the run's own idle phases: why the
  judged figure uses interleaved windows, so the machine's drift lands on every condition alike).
  Why this statistic (chosen 2026-11-30): one window's p99 here moves between ~0.7x and ~1.8x of
  the median; resampling six twenty-round runs gave the trimmed geometric mean a standard error of
  the log ratio of 0.055 against 0.073 for the median of the windows (~4.6 % over thirty rounds).
  A fresh breaker in each window keeps the faulty LLM working the whole time, the harsher case.
- ``risk_limits``: the llm stage is ``RiskInjector``: it writes INSTRUCTIONs into ``instr`` each built
  to breach one pre-trade check, and CONTROL HALT / REDUCE_ONLY / KILL_SWITCH / RESUME into its own
  control ring (``ctl_inj``, risk's ``control_input``), with lean quoting off. Pass: every instruction
  denied with its expected reason (the audit log, by ``origin_seq``), the deny_<reason> counters agree,
  no OrderApproved at all, and the venue's ``orders_placed`` and the sender's ``sent`` stay 0.
- ``kill_switch``: lean quoting with GTC orders (they rest at the venue), then the ``kill-switch``
  control command. Pass: no order request sent later than 100 ms after it (the sender's latency tap),
  no working order (sender and risk ``open``) 2 s after it, risk state HALTED.
- ``secrets_and_permissions``: a run with orders flowing, then every file of the run (logs, audit log,
  sender journal, supervisor output, config), the status (CLI text and JSON) and every file under
  ``bench/results`` scanned for the paper key's api key, secret and passphrase; every /dev/shm entry of
  the run (segments, semaphores) and every socket file in its run folder must be mode 0600; every
  LISTEN TCP socket owned by the run's processes must be bound to 127.0.0.1 / ::1.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import os
import random
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import numpy as np
import orjson

from bench import report
from bench.chaos import FAIL, INCONCLUSIVE, PASS, Row
from bench.pipeline import KEY, REPO
from pipeline.runtime.agent import LATENCY_DIR_ENV, MARK_DECIDED, MARK_ORDER_SENT, Agent, mark_code
from pipeline.trading.bitget.book import bitget_checksum
from pipeline.trading.messages import (INSTRUCTION_DTYPE, Action, ControlCmd, ControlReason, Kind, OrderOrigin,
                               pack_control)

# ============================================================================================ helpers


@contextlib.contextmanager
def latency_taps(folder: Path):
    """Set ``SHMPIPE_LATENCY_DIR`` for the pipeline started inside (ChaosPipeline copies os.environ)."""
    old = os.environ.get(LATENCY_DIR_ENV)
    os.environ[LATENCY_DIR_ENV] = str(folder)
    try:
        yield folder
    finally:
        if old is None:
            os.environ.pop(LATENCY_DIR_ENV, None)
        else:
            os.environ[LATENCY_DIR_ENV] = old


def read_tap(folder: Path, process: str) -> np.ndarray:
    """A process's latency tap records (fields code, lat_ns, at_ns); empty when none was dumped."""
    path = folder / f"{process}.lat.npy"
    if not path.exists():
        return np.zeros(0, [("code", "<u2"), ("lat_ns", "<i8"), ("at_ns", "<i8")])
    return np.load(path)


def read_audit(p) -> list[dict]:
    path = p.logs() / "risk_audit.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(Exception):
            out.append(orjson.loads(line))
    return out


def log_events(p, process: str) -> list[dict]:
    out = []
    for path in sorted(p.logs().glob(f"{process}.log*"), reverse=True):  # rotated backups first
        for line in path.read_bytes().splitlines():
            with contextlib.suppress(Exception):
                out.append(orjson.loads(line))
    return out


def p99_us(lat_ns: np.ndarray) -> float:
    """The p99 of nanosecond latencies in µs, from an HdrHistogram (``bench.report.hdr_us``); NaN for none."""
    return report.hdr_us(lat_ns, (99.0,))[0]


#: the share of a condition's windows left out at each end before the judged mean (the bursts)
TRIM_SHARE = 0.1


def trimmed_gmean(values) -> float:
    """The geometric mean of ``values`` (> 0) without the lowest and the highest ``TRIM_SHARE`` of them
    (``int(n * TRIM_SHARE)`` at each end); nan values are left out first; nan when none is left."""
    v = np.sort(np.asarray([x for x in values if x == x], float))
    k = int(v.size * TRIM_SHARE)
    v = v[k : v.size - k]
    return float(np.exp(np.log(v).mean())) if v.size else float("nan")


def window_p99s(at_ns: np.ndarray, lat_ns: np.ndarray, spans: dict[str, list[tuple[int, int]]]) -> dict:
    """The p99 judgement on interleaved windows: per condition, the p99 (µs) of each of its windows
    (samples whose ``at_ns`` falls in it) and their ``trimmed_gmean`` (``judged_us``; the median is
    reported beside it, ``median_us``); per fault condition (every key but ``idle``), that mean over
    idle's (``ratio``); and an A/A control, idle's windows split alternately into two halves, the
    ratio of their means (``idle_aa``): how far two samples of the same condition differ here.

    Why this statistic: a burst of the host's noise moves one window's p99 (and the pooled p99 of a
    condition with it), so the bursts at either end are left out, while a load a fault adds shows in
    every window. Of the statistics compared that do that, the mean of the log p99s trimmed by a
    tenth resolves the most: resampling the rounds of six twenty-round runs (2026-11-30) gave a
    standard error of the log ratio of 0.055 for it, 0.059 trimmed by a fifth, 0.073 for the median
    of the windows' p99s (0.050 untrimmed, which one burst window moves)."""
    per = {m: [p99_us(lat_ns[(at_ns >= a) & (at_ns < b)]) for a, b in sp] for m, sp in spans.items()}
    judged = {m: trimmed_gmean(v) for m, v in per.items()}
    med = {m: float(np.nanmedian(v)) if v and not all(x != x for x in v) else float("nan") for m, v in per.items()}
    idle = judged.get("idle", float("nan"))
    ok = idle == idle and idle > 0
    ratio = {m: judged[m] / idle if ok else float("nan") for m in per if m != "idle"}
    iv = per.get("idle", [])
    a, b = iv[0::2], iv[1::2]
    aa = trimmed_gmean(a) / trimmed_gmean(b) if a and b else float("nan")
    return {"windows_us": per, "judged_us": judged, "median_us": med, "ratio": ratio, "idle_aa": aa}


#: the limit on a fault condition's judged p99 ratio to idle's (fixed 2026-12-01: see the module docstring)
P99_LIMIT = 1.10
#: the A/A deviation up to which the machine is taken to resolve ``P99_LIMIT`` (half its margin)
AA_BAND = 1.05
#: the fewest windows per condition with which the statistic can resolve ``P99_LIMIT`` (docstring)
MIN_WINDOWS = 10


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and x == x and 0 < x < float("inf")


def p99_verdict(ratios: dict[str, float], idle_aa: float, limit: float = P99_LIMIT,
                band: float = AA_BAND, windows: int | None = None) -> tuple[str, str]:
    """(verdict, why) of the fast path's p99 criterion from each fault's judged ratio to idle and the
    A/A control, by the rule fixed in the module docstring (2026-12-01): FAIL when anything is not a
    finite positive number; fewer than ``MIN_WINDOWS`` windows per condition (``windows``, None:
    enough): INCONCLUSIVE; with s = max(aa, 1 / aa): s <= ``band``: PASS iff every ratio <= ``limit``;
    s > ``band``: FAIL when some ratio > limit * s, PASS when every ratio <= limit / s, else
    INCONCLUSIVE. ``why`` names the rule's branch and the figures."""
    figs = ", ".join(f"{m} {r:.3f}x" for m, r in ratios.items()) + f"; A/A {idle_aa:.3f}x"
    bad = [m for m, r in ratios.items() if not _finite_positive(r)]
    if not ratios or bad or not _finite_positive(idle_aa):
        return FAIL, f"not measured ({', '.join(bad) or ('A/A' if ratios else 'no fault condition')}): {figs}"
    if windows is not None and windows < MIN_WINDOWS:
        return INCONCLUSIVE, (f"{windows} windows per condition, fewer than the {MIN_WINDOWS} that resolve "
                              f"{limit:g} (quick mode judges the safety checks only): {figs}")
    s = max(idle_aa, 1 / idle_aa)
    worst = max(ratios, key=ratios.get)
    if s <= band:
        if ratios[worst] <= limit:
            return PASS, f"A/A within [1/{band:g}, {band:g}] and every ratio <= {limit:g}: {figs}"
        return FAIL, f"A/A within [1/{band:g}, {band:g}] and {worst} over {limit:g}: {figs}"
    if ratios[worst] > limit * s:
        return FAIL, f"A/A outside [1/{band:g}, {band:g}] but {worst} over {limit:g} x {s:.3f} = {limit * s:.3f}: {figs}"
    if ratios[worst] <= limit / s:
        return PASS, f"A/A outside [1/{band:g}, {band:g}] but every ratio <= {limit:g} / {s:.3f} = {limit / s:.3f}: {figs}"
    return INCONCLUSIVE, (f"A/A outside [1/{band:g}, {band:g}]: the machine does not resolve {limit:g} in this run "
                          f"({worst} between {limit / s:.3f} and {limit * s:.3f}): {figs}")


def replace_process(text: str, name: str, block: str) -> str:
    """The config text with process ``name``'s ``[[processes]]`` block replaced by ``block``."""
    pat = re.compile(r'\[\[processes\]\]\nname = "' + re.escape(name) + r'"\n.*?(?=\n\[\[|\Z)', re.S)
    new, n = pat.subn(lambda _m: block.strip() + "\n", text, count=1)
    if n != 1:
        raise ValueError(f"no process {name!r} in the config text")
    return new


def set_risk_limits(text: str, limits: str, extra_params: str = "") -> str:
    new, n = re.subn(r"limits = \{[^}]*\}", "limits = { " + limits + " }" + extra_params, text, count=1)
    if n != 1:
        raise ValueError("no risk limits table in the config text")
    return new


# ============================================================================================ 1. malformed frames
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


class GarbageVenue(threading.Thread):
    """A Bitget-dialect public WebSocket on 127.0.0.1 serving one connection: subscription acks, one
    valid snapshot, ``garbage`` (pre-built frames), then ``good_after`` valid snapshots; it answers
    ``ping`` and (un)subscribe requests afterwards. The port goes to ``port_file`` once listening."""

    def __init__(self, port_file: Path, garbage: list, good_after: int, first_seq: int):
        super().__init__(name="garbage-venue", daemon=True)
        self.port_file = port_file
        self.garbage = garbage
        self.good_after = good_after
        self.seq = first_seq
        self.connections = 0
        self.sent_garbage = 0
        self.sent_good = 0
        self.done = threading.Event()
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop_ev: asyncio.Event | None = None

    def run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        from websockets.asyncio.server import serve

        self._stop_ev = asyncio.Event()
        async with serve(self._handler, "127.0.0.1", 0, max_size=None, ping_interval=None) as server:
            port = server.sockets[0].getsockname()[1]
            tmp = self.port_file.with_suffix(".tmp")
            tmp.write_text(str(port))
            os.replace(tmp, self.port_file)
            self.ready.set()
            await self._stop_ev.wait()

    async def _answer(self, ws, text) -> None:
        if text == "ping":
            await ws.send("pong")
            return
        with contextlib.suppress(Exception):
            req = orjson.loads(text)
            for arg in req.get("args", []):
                await ws.send(orjson.dumps({"event": req.get("op"), "arg": arg}).decode())

    async def _handler(self, ws) -> None:
        self.connections += 1
        first = self.connections == 1
        await self._answer(ws, await ws.recv())  # the subscription

        async def reader():
            async for msg in ws:
                await self._answer(ws, msg)

        rt = asyncio.create_task(reader())
        try:
            self.seq += 1
            await ws.send(orjson.dumps(book_push(self.seq)).decode())
            self.sent_good += 1
            if first:
                for i, frame in enumerate(self.garbage):
                    await ws.send(frame)
                    self.sent_garbage += 1
                    if i % 256 == 0:
                        await asyncio.sleep(0)
                self.seq += len(self.garbage) + 1
                for _ in range(self.good_after):
                    self.seq += 1
                    await ws.send(orjson.dumps(book_push(self.seq)).decode())
                    self.sent_good += 1
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
        "one connection, no reconnect": srv.connections == 1 and st.get("reconnects", 0) == 0,
        "rejected == malformed sent": rej == malformed and sum(rej_by.values()) == malformed,
        "checksum_failures == bad checksums sent": st.get("checksum_failures", 0) == badsum,
        "every valid snapshot became a BOOK": st.get("books_emitted", 0) == srv.sent_good == 1 + good_after,
    }
    ok = all(checks.values())
    return Row(scenario="malformed_frames",
               injected=f"{n:,} bad frames into the feed's WebSocket ({malformed:,} malformed: binary, truncated, "
                        f"NaN, bad UTF-8, wrong types...; {badsum} bad checksums) between valid snapshots",
               did=f"feed pid kept, restarts {feed['restarts']}, errors {feed['errors']}, reconnects "
                   f"{st.get('reconnects', 0)}; rejected {rej:,} ({', '.join(f'{k[4:]} {v}' for k, v in sorted(rej_by.items()))}), "
                   f"checksum failures {st.get('checksum_failures', 0)}; BOOKs {st.get('books_emitted', 0)} of "
                   f"{srv.sent_good} valid snapshots",
               figure=f"{rej + st.get('checksum_failures', 0):,} of {n:,} counted, 0 crashes",
               passed=ok, details={"checks": checks, "stage": st, "sent_garbage": srv.sent_garbage})


# ============================================================================================ 2. LLM faults
try:  # the injector's base; absent llama-cpp does not break importing this module
    from procs.llm import LlmAgent as _LlmBase
except Exception:  # pragma: no cover
    _LlmBase = Agent


#: what ``busy_cpu`` hashes: 256 KiB, so that each call runs ~0.1 ms without the GIL
_BUSY_BUF = bytes(256 * 1024)


def busy_cpu(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of wall time, the way a model's generation does:
    SHA-256 over a 256 KiB buffer again and again. hashlib lets go of the GIL while it hashes (as
    llama.cpp's calls do), so the process's other threads still run; the thread's own scheduling
    (the generation worker's SCHED_IDLE and niceness) applies to the load."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(_BUSY_BUF)


def slow_tokens(tokens, per_token_s: float):
    """``tokens`` with ``per_token_s`` of CPU work (``busy_cpu``) before each one: a model that slow,
    using the CPU all along, not sleeping between tokens."""
    for tok in tokens:
        busy_cpu(per_token_s)
        yield tok


class FaultyLlmAgent(_LlmBase):
    """``procs.llm.LlmAgent`` with a fault phase read from ``params.fault_file`` (checked every 50 ms):
    ``idle`` (signals drained, nothing generated), ``normal``, ``garbage`` (no grammar, temperature 5),
    ``timeout`` (deadline 1 ms), ``slow`` (each token takes ``slow_token_ms`` more of CPU work in the
    generation thread: ``slow_tokens``). A phase change waits
    for the generation in flight, starts a fresh circuit breaker and is logged (``fault_phase``). Test
    and bench use only."""

    def on_start(self, ctx) -> None:
        ctx.params = dict(ctx.params)
        self.fault_file = Path(ctx.params.pop("fault_file"))
        self.slow_token_ms = float(ctx.params.pop("slow_token_ms", 300))
        super().on_start(ctx)
        self.mode = "idle"
        self._wanted: str | None = None  # a phase asked for, applied once no generation is in flight
        self._base_p = self.hub.p
        self._base_deadline_ns = self.deadline_ns
        self._base_grammar = self.hub._grammar
        self._base_generate = self.hub.llm.generate
        self._next_check = 0
        self.stats["fault"] = self.mode

    def _set_mode(self, mode: str) -> None:
        from pipeline.trading.llm.breaker import CircuitBreaker

        hub = self.hub
        hub.p, self.deadline_ns, hub._grammar = self._base_p, self._base_deadline_ns, self._base_grammar
        hub.llm.generate = self._base_generate
        if mode == "garbage":
            hub.p = msgspec.structs.replace(self._base_p, temperature=5.0, top_k=0, top_p=1.0)
            hub._grammar = lambda iid: None
        elif mode == "timeout":
            self.deadline_ns = 1_000_000
        elif mode == "slow":
            base, per_token_s = self._base_generate, self.slow_token_ms / 1000

            def slow_generate(*a, **kw):  # runs in the generation worker's thread
                return slow_tokens(base(*a, **kw), per_token_s)

            hub.llm.generate = slow_generate
        self.breaker = CircuitBreaker(self.p.breaker, self.ctx.clock)
        self.stats.update(fault=mode, breaker=self.breaker.state.value)
        self.ctx.log.info("fault_phase", mode=mode)
        self.mode = mode

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now >= self._next_check:
            self._next_check = now + 50_000_000
            with contextlib.suppress(OSError):
                mode = self.fault_file.read_text().strip()
                self._wanted = mode if mode and mode != self.mode else None
        if self._wanted is not None:
            # a generation in flight runs with its own phase's settings to the end (switching the
            # grammar or temperature under it would make a fault phase's job a healthy one): no new
            # one starts, its result is still taken; then the new phase applies
            if self.worker.busy:
                self.next_start_ns = max(self.next_start_ns, now + 3_600_000_000_000)
                return super().do_work()
            self._set_mode(self._wanted)
            self._wanted = None
            self.next_start_ns = now
        if self.mode == "idle":
            got = self.inp.poll(lambda *a: None, self.ctx.batch)
            if got:
                self.ctx.received(got)
            self.pending = None
            return got
        return super().do_work()


def llm_faults(ChaosPipeline, quick: bool, nice: int = 10) -> Row:
    """``nice``: the llm process's niceness (the default config's 10; 0 to see the hub at normal priority)."""
    phase_s = 3.0 if quick else 10.0
    cycles, sub_s = (2, 1.0) if quick else (30, 2.0)  # the interleaved windows the p99 is judged on
    slow_answer_s = 3.0 if quick else 30.0
    max_tokens = 96
    breaker = ("breaker = { trip_after_s = 0.5, min_samples = 3, cooldown_s = 60.0 }" if quick
               else "breaker = { cooldown_s = 120.0 }")
    with tempfile.TemporaryDirectory(prefix="chaos-llm-") as d:
        fault_file = Path(d) / "fault"
        fault_file.write_text("idle")
        lat = Path(d) / "lat"
        lat.mkdir()

        def hook(text: str) -> str:
            from bench.pipeline import TINY
            return replace_process(text, "llm", f"""
[[processes]]
name = "llm"
module = "bench.chaos_input:FaultyLlmAgent"
inputs = ["sig_llm"]
outputs = ["instr"]
wait = "back-off"
nice = {nice}
params = {{ model_path = "{TINY}", n_ctx = 2048, max_tokens = {max_tokens}, deadline_ms = 500, min_gap_ms = 200, min_ttl_ms = 100, max_ttl_ms = 250, fault_file = "{fault_file}", slow_token_ms = {1000 * slow_answer_s / max_tokens:.1f}, {breaker} }}
""")

        windows: dict[str, tuple[int, int]] = {}
        pooled: dict[str, list[tuple[int, int]]] = {m: [] for m in ("idle", "garbage", "timeout", "slow")}
        phases: dict[str, dict] = {}
        with latency_taps(lat), ChaosPipeline(rate=1000, llm=True, text_hook=hook, name="llm") as p:
            time.sleep(1.0)  # warm up
            t0 = time.monotonic_ns()
            time.sleep(phase_s)
            windows["idle"] = (t0, time.monotonic_ns())
            fault_file.write_text("normal")  # context: a healthy LLM's load on the fast path (not judged)
            p.wait(lambda: p.stage("llm").get("fault") == "normal", 10, "the normal phase")
            t0 = time.monotonic_ns()
            time.sleep(phase_s)
            windows["normal"] = (t0, time.monotonic_ns())
            normal_instructions = p.stage("llm").get("instructions", 0)
            fault_file.write_text("idle")  # let a generation in flight finish before the faults
            p.wait(lambda: p.stage("llm").get("fault") == "idle", 10, "the idle gap")
            time.sleep(1.0)
            for k, mode in enumerate(("garbage", "timeout", "slow")):
                if k:  # an idle window between fault phases: each is judged against the idle on both sides
                    fault_file.write_text("idle")
                    p.wait(lambda: p.stage("llm").get("fault") == "idle", 10, "an idle window")
                    t0 = time.monotonic_ns()
                    time.sleep(phase_s)
                    windows[f"idle{k}"] = (t0, time.monotonic_ns())
                fault_file.write_text(mode)
                p.wait(lambda: p.stage("llm").get("fault") == mode, 10, f"fault phase {mode}")
                t0 = time.monotonic_ns()
                opened = None
                with contextlib.suppress(TimeoutError):
                    p.wait(lambda: p.stage("llm").get("breaker") == "open", 60 if quick else 120,
                           f"the breaker to open under {mode}", 0.05)
                    opened = (time.monotonic_ns() - t0) / 1e9
                time.sleep(max(0.0, phase_s - (time.monotonic_ns() - t0) / 1e9))
                windows[mode] = (t0, time.monotonic_ns())
                st = p.stage("llm")
                phases[mode] = {"breaker_open_after_s": opened, "breaker": st.get("breaker"),
                                "rejects": {k: v for k, v in st.items() if k.startswith("rej_")}}
            fault_file.write_text("idle")
            p.wait(lambda: p.stage("llm").get("fault") == "idle", 10, "the last idle window")
            t0 = time.monotonic_ns()
            time.sleep(phase_s)
            windows["idle3"] = (t0, time.monotonic_ns())
            # the judged p99: short windows, idle and each fault in turn (window_p99s), so that
            # the machine's drift over the run lands on every condition alike (a phase change starts a
            # fresh breaker: in these windows the faulty LLM works all the time, the harsher case)
            for _ in range(cycles):
                for mode in ("idle", "garbage", "idle", "timeout", "idle", "slow"):
                    fault_file.write_text(mode)
                    p.wait(lambda: p.stage("llm").get("fault") == mode, 10, f"an interleaved {mode} window")
                    t0 = time.monotonic_ns()
                    time.sleep(sub_s)
                    pooled[mode].append((t0, time.monotonic_ns()))
            fault_file.write_text("idle")
            llm_stage = p.stage("llm")
            llm_pid = p.proc("llm")["pid"]
            events = log_events(p, "llm")
            audit = read_audit(p)
        fast = read_tap(lat, "fast")
        risk = read_tap(lat, "risk")
        sender = read_tap(lat, "sender")
        llm_tap = read_tap(lat, "llm")
    sig = fast[fast["code"] == Kind.SIGNAL]
    _, first = np.unique(sig["at_ns"] - sig["lat_ns"], return_index=True)  # non-HOLD: written twice, count once
    sig = sig[np.sort(first)]
    p99 = {m: p99_us(sig["lat_ns"][(sig["at_ns"] >= a) & (sig["at_ns"] < b)]) for m, (a, b) in windows.items()}

    def in_any(spans):
        at = sig["at_ns"]
        mask = np.zeros(at.size, bool)
        for a, b in spans:
            mask |= (at >= a) & (at < b)
        return mask

    pooled_p99 = {m: p99_us(sig["lat_ns"][in_any(spans)]) for m, spans in pooled.items()}
    pooled_n = {m: int(in_any(spans).sum()) for m, spans in pooled.items()}
    idle_pooled = pooled_p99["idle"]
    pooled_ratio = {m: pooled_p99[m] / idle_pooled if idle_pooled == idle_pooled and idle_pooled > 0
                    else float("nan") for m in ("garbage", "timeout", "slow")}
    win = window_p99s(sig["at_ns"], sig["lat_ns"], pooled)
    judged = win["ratio"]
    n_sig = {m: int(((sig["at_ns"] >= a) & (sig["at_ns"] < b)).sum()) for m, (a, b) in windows.items()}
    # from the first fault phase to the last interleaved window: only idle and fault windows, no healthy LLM
    fa, fb = windows["garbage"][0], max(b for spans in pooled.values() for _, b in spans)
    llm_decided = risk[(risk["code"] == mark_code(MARK_DECIDED, OrderOrigin.LLM)) & (risk["at_ns"] >= fa) & (risk["at_ns"] < fb)]
    llm_sent = sender[(sender["code"] == mark_code(MARK_ORDER_SENT, OrderOrigin.LLM)) & (sender["at_ns"] >= fa)
                      & (sender["at_ns"] < fb)]
    instr = llm_tap[(llm_tap["code"] == Kind.INSTRUCTION) & (llm_tap["at_ns"] >= fa) & (llm_tap["at_ns"] < fb)]
    llm_approved = [e for e in audit if e.get("ev") == "OrderApproved" and e.get("origin") == OrderOrigin.LLM
                    and fa <= e.get("ts_ns", 0) < fb]
    opens = [e for e in events if e.get("event") == "llm_breaker" and e.get("new") == "open"]
    base = p99["idle"]
    # each fault phase against the mean of the idle windows on its two sides (A/B/A: the machine's
    # drift and noise over the run land on both), and, for the record, against the first idle window
    around = {"garbage": ("idle", "idle1"), "timeout": ("idle1", "idle2"), "slow": ("idle2", "idle3")}
    unloaded = {m: (p99[a] + p99[b]) / 2 for m, (a, b) in around.items()}
    ratios = {m: p99[m] / unloaded[m] if unloaded[m] == unloaded[m] and unloaded[m] > 0 else float("nan")
              for m in around}
    vs_first = {m: p99[m] / base if base == base and base > 0 else float("nan") for m in around}
    checks = {
        "no INSTRUCTION written in a fault phase": instr.size == 0,
        "no LLM-origin ORDER decided or sent": llm_decided.size == 0 and llm_sent.size == 0 and not llm_approved,
        "breaker opened in every fault phase": all(ph["breaker_open_after_s"] is not None for ph in phases.values())
                                               and len(opens) >= 3,
    }
    # the p99 criterion: the statistic and the three-valued rule fixed on 2026-12-01 (module docstring)
    n_win = min(len(v) for m, v in win["windows_us"].items() if m != "idle")
    p99_v, p99_why = p99_verdict(judged, win["idle_aa"], windows=n_win)
    safe = all(checks.values())
    verdict = p99_v if safe else FAIL
    fig = ", ".join(f"{m} {p99[m]:.0f} us ({ratios[m]:.2f}x of {unloaded[m]:.0f}; {vs_first[m]:.2f}x the first idle)"
                    for m in ratios)
    judged_fig = ", ".join(f"{m} {win['judged_us'][m]:.0f} us ({judged[m]:.2f}x)" for m in judged)
    median_fig = ", ".join(f"{m} {win['median_us'][m] / win['median_us']['idle']:.2f}x" for m in judged)
    pooled_fig = ", ".join(f"{m} {pooled_ratio[m]:.2f}x" for m in pooled_ratio)
    idles = ", ".join(f"{p99[w]:.0f}" for w in ("idle", "idle1", "idle2", "idle3"))
    return Row(scenario="llm_faults",
               injected=f"LLM hub: garbage (no grammar, temperature 5), timeout (deadline 1 ms), slow (a "
                        f"{slow_answer_s:.0f} s answer, the generation thread's CPU busy all along); {phase_s:.0f} s "
                        f"a phase, an idle window ({phase_s:.0f} s) before "
                        f"and after each; then {cycles} rounds of {sub_s:.0f} s windows idle, garbage, idle, timeout, "
                        f"idle, slow (judged: each condition's window p99s, trimmed geometric mean)",
               did=f"INSTRUCTIONs in fault phases {instr.size}, LLM-origin orders {llm_decided.size}; breaker opened "
                   f"after " + ", ".join(f"{m} {ph['breaker_open_after_s'] if ph['breaker_open_after_s'] is None else round(ph['breaker_open_after_s'], 1)} s"
                                         for m, ph in phases.items())
                   + f" ({len(opens)} llm_breaker open events); llm pid {llm_pid}",
               figure=f"p99 criterion {p99_v} ({p99_why}); "
                      f"fast SIGNAL p99, trimmed geometric mean of the interleaved windows: idle {win['judged_us']['idle']:.0f} us, "
                      f"{judged_fig} (idle vs idle, alternate windows: {win['idle_aa']:.2f}x); median of the windows: "
                      f"{median_fig}; pooled: idle "
                      f"{idle_pooled:.0f} us, {pooled_fig}; "
                      f"long phases: idle windows {idles} us; {fig} (healthy LLM: {p99['normal']:.0f} us, "
                      f"{p99['normal'] / base:.2f}x the first idle, {normal_instructions} instructions)",
               verdict=verdict, details={"checks": checks, "p99_verdict": p99_v, "p99_why": p99_why,
                                         "p99_limit": P99_LIMIT, "aa_band": AA_BAND, "p99_us": p99, "signals": n_sig, "phases": phases,
                                   "unloaded_p99_us": unloaded, "ratio_vs_first_idle": vs_first,
                                   "pooled_p99_us": pooled_p99, "pooled_signals": pooled_n, "pooled_ratio": pooled_ratio,
                                   "judged_ratio": judged, "window_p99_us": win["windows_us"],
                                   "window_median_p99_us": win["median_us"], "window_judged_p99_us": win["judged_us"], "idle_aa_ratio": win["idle_aa"],
                                   "llm_stage": llm_stage})


# ============================================================================================ 3. risk limits
# BTCUSDT (id 1) starts near 50,000: 1 lot (0.0001) is ~5 notional; ETHUSDT (id 2) is configured, not fed.
_COMMON = ("max_gross_notional = 10000000.0, daily_loss_limit = 1000000.0, risk_aversion = 1.0, lean_lots = 0, "
           "emergency_cooldown_ms = 0, collar_bps = 200.0, max_order_lots = 100, reprice_sigmas = 1000.0")
#: run 1: checks that deny an order before anything is approved (nothing at all may reach the venue)
LIMITS_DENY = ("max_position_lots = 4, max_child_lots = 100, min_notional = 10.0, max_notional = 80.0, "
               "max_gross_notional = 12.0, tif = \"GTC\", max_open_orders = 50, max_orders_per_s = 100, "
               "max_notional_per_min = 100000000.0, " + _COMMON.replace("max_gross_notional = 10000000.0, ", ""))
#: run 2: checks that count what was already approved (IOC 1-lot children, cancelled by the venue at once;
#: no reprice, so a plan is never re-planned):
#: only the orders within the limits reach the venue
LIMITS_COUNTED = ("max_position_lots = 100, max_child_lots = 1, min_notional = 0.0, max_notional = 1000000.0, "
                  "tif = \"IOC\", max_open_orders = 2, max_orders_per_s = 3, max_notional_per_min = 22.5, " + _COMMON)
S = 7_000_000_000
#: step = (what, instrument_id, action, target_lots, limit_offset_ticks, CONTROLs before, signal_seq,
#:         ms after the previous step, expected deny codes (in order), orders it may approve)
RISK_PLANS = {
    "deny": [
        ("unconfigured instrument", 99, Action.BUY, 3, 0, (), S + 0, 300, ["NOT_ALLOWED"], 0),
        ("instrument without a reference price", 2, Action.BUY, 3, 0, (), S + 1, 300, ["STALE_REF"], 0),
        ("negative price (offset past zero)", 1, Action.BUY, 3, 1_000_000, (), S + 2, 300, ["BAD_PRICE"], 0),
        ("price 3 % from the mid (collar 2 %)", 1, Action.BUY, 3, 15_000, (), S + 3, 300, ["COLLAR"], 0),
        ("1 lot, under min_notional 10", 1, Action.BUY, 1, 0, (), S + 4, 300, ["MIN_NOTIONAL"], 0),
        ("40 lots, over max_notional 80", 1, Action.BUY, 40, 0, (), S + 5, 300, ["MAX_NOTIONAL"], 0),
        ("8 lots long, over max_position 4", 1, Action.BUY, 8, 0, (), S + 6, 300, ["MAX_POSITION"], 0),
        ("8 lots short, over max_position 4", 1, Action.SELL, -8, 0, (), S + 7, 300, ["MAX_POSITION"], 0),
        ("3 lots (15), over max_gross_notional 12", 1, Action.BUY, 3, 0, (), S + 8, 300, ["GROSS"], 0),
        ("3 lots while HALTED", 1, Action.BUY, 3, 0, (ControlCmd.HALT,), S + 9, 300, ["HALTED"], 0),
        ("3 lots long, REDUCE_ONLY and flat", 1, Action.BUY, 3, 0, (ControlCmd.RESUME, ControlCmd.REDUCE_ONLY),
         S + 10, 300, ["REDUCING"], 0),
        ("3 lots after the KILL_SWITCH", 1, Action.BUY, 3, 0, (ControlCmd.RESUME, ControlCmd.KILL_SWITCH), S + 11,
         300, ["HALTED"], 0),
    ],
    "counted": [
        ("3 lots in 1-lot children, max_open_orders 2", 1, Action.BUY, 3, 20, (), S + 20, 300, ["MAX_OPEN"], 2),
        ("3 lots, the 4th order within 1 s (max 3/s)", 1, Action.BUY, 3, 20, (), S + 21, 300, ["RATE"], 1),
        ("the first instruction again (same order ids)", 1, Action.BUY, 3, 20, (), S + 20, 1_200, ["DUPLICATE"], 0),
        ("2 lots, notional over 22.5 a minute", 1, Action.BUY, 2, 20, (), S + 23, 300, ["NOTIONAL_RATE"], 1),
    ],
}


class RiskInjector(Agent):
    """Replaces the llm stage: after ``warmup_ms`` and ``min_signals`` SIGNAL_CTX seen, plays
    ``RISK_PLANS[params.plan]``: each step waits its gap, writes its CONTROL commands (to ``ctl_inj``,
    100 ms apart, so risk applies them before the instruction) then its INSTRUCTION (``instr``, ttl 100 ms:
    no re-plan outlives the step). Drains ``sig_llm`` and the supervisor's ``control`` ring.
    Counters: signals, step, instructions, controls, done."""

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.instr = ctx.outputs["instr"]
        self.ctl = ctx.outputs["ctl_inj"]
        self.t0 = ctx.clock()
        self.warm_ns = int(ctx.params.get("warmup_ms", 1500)) * 1_000_000
        self.min_signals = int(ctx.params.get("min_signals", 20))
        self.queue: list[tuple] = []  # (gap_ns, item)
        for i, (_w, iid, act, lots, off, ctl, seq, gap_ms, _codes, _n) in enumerate(RISK_PLANS[ctx.params["plan"]]):
            gap = gap_ms * 1_000_000
            for c in ctl:
                self.queue.append((gap, ("ctl", c)))
                gap = 100_000_000
            self.queue.append((gap, ("instr", i, iid, act, lots, off, seq)))
        self.last_ns = 0
        self.stats = ctx.stats
        self.stats.update(signals=0, step=0, instructions=0, controls=0, done=0)

    def _sig(self, seq, ts, kind, payload) -> None:
        self.stats["signals"] += 1

    def do_work(self) -> int:
        n = 0
        sig_in = self.ctx.inputs.get("sig_llm")
        for port in self.ctx.inputs.values():
            n += port.poll(self._sig if port is sig_in else (lambda *a: None), self.ctx.batch)
        now = self.ctx.clock()
        if not self.queue or now - self.t0 < self.warm_ns or self.stats["signals"] < self.min_signals:
            return n
        gap, item = self.queue[0]
        if self.last_ns and now - self.last_ns < gap:
            return n
        self.queue.pop(0)
        if item[0] == "ctl":
            self.ctx.emit(self.ctl, Kind.CONTROL, pack_control(item[1], ControlReason.OPERATOR, now), now)
            self.stats["controls"] += 1
        else:
            _, i, iid, act, lots, off, seq = item
            rec = np.zeros(1, INSTRUCTION_DTYPE)
            rec["instrument_id"], rec["action"], rec["limit_offset_ticks"] = iid, int(act), off
            rec["target_lots"], rec["signal_seq"], rec["issued_ns"] = lots, seq, now
            rec["ttl_ms"], rec["confidence"], rec["instruction_id"] = 100, 0.9, i + 1
            self.ctx.emit(self.instr, Kind.INSTRUCTION, rec.tobytes(), now)
            self.stats["instructions"] += 1
            self.stats["step"] = i + 1
        self.last_ns = now
        if not self.queue:
            self.stats["done"] = 1
        return n + 1


def _risk_hook(plan: str, limits: str):
    def hook(text: str) -> str:
        text = replace_process(text, "llm", f"""
[[processes]]
name = "llm"
module = "bench.chaos_input:RiskInjector"
inputs = ["sig_llm", "control"]
outputs = ["instr", "ctl_inj"]
wait = "back-off"
params = {{ plan = "{plan}", warmup_ms = 1500, min_signals = 20 }}
""")
        text = text.replace('[[rings]]\nname = "control"',
                            '[[rings]]\nname = "ctl_inj"\nmax_payload_bytes = 16\ncapacity = 64\nfull_policy = "backpressure"\n\n'
                            '[[rings]]\nname = "control"', 1)
        text = text.replace('inputs = ["control", "exec", "sig_risk", "instr"]',
                            'inputs = ["ctl_inj", "exec", "sig_risk", "instr"]', 1)
        text = set_risk_limits(text, limits, ', control_input = "ctl_inj"')
        new, k = re.subn(r'(port_file = "[^"]*venue\.port", channels = \["books15", "trade"\])',
                         r'\1, instruments = ["BTCUSDT"]', text)
        if k != 1:
            raise ValueError("no feed port_file in the config text")
        return no_emergency(new)
    return hook


def _play_risk_plan(ChaosPipeline, plan: str, limits: str) -> dict:
    steps = RISK_PLANS[plan]
    want = [(seq, code) for *_, seq, _gap, codes, _n in steps for code in codes]
    with ChaosPipeline(rate=500, instruments=2, llm=True, text_hook=_risk_hook(plan, limits), name=f"risk-{plan}") as p:
        placed0 = p.stage("venue").get("orders_placed", 0)
        p.wait(lambda: p.stage("llm").get("done") == 1, 60, "the injector to play its plan", 0.1)

        def denials():
            got = [(e["origin_seq"], e["code"]) for e in read_audit(p) if e.get("ev") == "OrderDenied"]
            return got if all(w in got for w in want) else None

        with contextlib.suppress(TimeoutError):
            p.wait(denials, 10, "a denial for every instruction", 0.1)
        with contextlib.suppress(TimeoutError):  # every approved order answered by the venue
            p.wait(lambda: p.stage("sender").get("open", 1) == 0, 5, "the sender to have nothing open", 0.1)
        time.sleep(0.3)
        return {"audit": read_audit(p), "risk": p.stage("risk"), "venue": p.stage("venue"), "sender": p.stage("sender"),
                "placed0": placed0, "want": want}


def risk_limits(ChaosPipeline, quick: bool) -> Row:
    runs = {"deny": _play_risk_plan(ChaosPipeline, "deny", LIMITS_DENY),
            "counted": _play_risk_plan(ChaosPipeline, "counted", LIMITS_COUNTED)}
    checks, wrong, codes, extra = {}, [], set(), {}
    n_want = n_right = placed_total = approved_total = 0
    deny_counts: dict[str, int] = {}
    for plan, r in runs.items():
        steps = RISK_PLANS[plan]
        denied = [(e["origin_seq"], e["code"]) for e in r["audit"] if e.get("ev") == "OrderDenied"]
        approved = [e for e in r["audit"] if e.get("ev") == "OrderApproved"]
        expect_approved = sum(st[-1] for st in steps)
        for what, *_, seq, _gap, want_codes, _n in steps:
            for c in want_codes:
                codes.add(c)
                n_want += 1
                if (seq, c) in denied:
                    n_right += 1
                else:
                    wrong.append(f"{what}: got {[d for s_, d in denied if s_ == seq]} (want {c})")
        seqs = {seq for seq, _c in r["want"]}
        unexpected = [d for d in denied if d[0] not in seqs]  # a live plan re-planned may meet another limit too
        placed = r["venue"].get("orders_placed", 0) - r["placed0"]
        placed_total += placed
        approved_total += len(approved)
        for k, v in r["risk"].items():
            if k.startswith("deny_"):
                deny_counts[k] = deny_counts.get(k, 0) + v
        checks[f"{plan}: every breach denied with its reason"] = all((s_, c) in denied for s_, c in r["want"])
        checks[f"{plan}: no denial of anything else"] = not unexpected
        extra[plan] = [d for d in denied if d not in r["want"]]
        checks[f"{plan}: approved only the orders within the limits ({expect_approved})"] = len(approved) == expect_approved
        checks[f"{plan}: the venue placed exactly the approved orders"] = (placed == len(approved) == r["sender"].get("sent", 0)
                                                                           and r["venue"].get("orders_placed", 0) == placed)
        per_code: dict[str, int] = {}
        for c in (c for _s, c in r["want"]):
            per_code[c] = per_code.get(c, 0) + 1
        audit_codes: dict[str, int] = {}
        for _s, c in denied:
            audit_codes["deny_" + c.lower()] = audit_codes.get("deny_" + c.lower(), 0) + 1
        checks[f"{plan}: deny_<reason> counters agree with the audit log"] = (
            all(r["risk"].get("deny_" + c.lower(), 0) >= k for c, k in per_code.items())
            and {k: v for k, v in r["risk"].items() if k.startswith("deny_")} == audit_codes)
    checks["deny: risk HALTED (the kill switch latched)"] = runs["deny"]["risk"].get("state") == "HALTED"
    ok = all(checks.values())
    return Row(scenario="risk_limits",
               injected=f"{sum(len(v) for v in RISK_PLANS.values())} INSTRUCTIONs breaching {len(codes)} checks "
                        f"({', '.join(sorted(codes))}), with CONTROL HALT / REDUCE_ONLY / KILL_SWITCH; two runs",
               did=f"{n_right} of {n_want} breaches denied with the expected reason"
                   + (f" (wrong: {wrong})" if wrong else "")
                   + f"; {approved_total} orders within the limits approved (IOC set-up of the counted checks), "
                     f"{placed_total} placed at the venue; risk {runs['deny']['risk'].get('state')} after the kill switch",
               figure=f"{100 * n_right / max(1, n_want):.0f} % denied with the right reason, 0 breaches at the venue "
                      f"({placed_total} placed = {approved_total} approved)" if ok else
                      f"{100 * n_right / max(1, n_want):.0f} % denied right; {placed_total} placed vs {approved_total} approved",
               passed=ok, details={"checks": checks, "deny_counters": deny_counts, "re_plan_denials": extra,
                                   "not_reachable": "BAD_SIZE (the planner never exceeds max_order_lots), NOT_SYNCED, "
                                                    "COOLDOWN (the bench model never labels EMERGENCY), SELF_TRADE, "
                                                    "DAILY_LOSS, INTERNAL_ERROR: not produced by an INSTRUCTION here"})


# ============================================================================================ 4. kill switch
class FlowInjector(Agent):
    """Replaces the llm stage to keep orders flowing whatever the fast model says: every ``every_ms``
    an INSTRUCTION for instrument 1: BUY targets 1, 2, ... ``max_lots`` lots (each adds a resting GTC
    child ``offset_ticks`` from the mid), then FLATTEN (cancels them), over and over; ttl ``ttl_ms`` (a
    live plan is repriced when the mid moves: more cancels and new orders). Drains its inputs.
    Counters: signals, instructions."""

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.out = ctx.outputs["instr"]
        p = ctx.params
        self.every_ns = int(p.get("every_ms", 50)) * 1_000_000
        self.max_lots = int(p.get("max_lots", 10))
        self.offset = int(p.get("offset_ticks", 20))
        self.ttl_ms = int(p.get("ttl_ms", 10_000))
        self.warm_ns = int(p.get("warmup_ms", 500)) * 1_000_000
        self.t0 = ctx.clock()
        self.next_ns = 0
        self.i = 0
        self.stats = ctx.stats
        self.stats.update(signals=0, instructions=0)

    def _sig(self, *a) -> None:
        self.stats["signals"] += 1

    def do_work(self) -> int:
        n = sum(port.poll(self._sig, self.ctx.batch) for port in self.ctx.inputs.values())
        now = self.ctx.clock()
        if now < self.next_ns or now - self.t0 < self.warm_ns or self.stats["signals"] < 5:
            return n
        k = self.i % (self.max_lots + 1)
        rec = np.zeros(1, INSTRUCTION_DTYPE)
        rec["instrument_id"], rec["limit_offset_ticks"] = 1, self.offset
        rec["action"], rec["target_lots"] = (int(Action.BUY), k + 1) if k < self.max_lots else (int(Action.FLATTEN), 0)
        rec["signal_seq"], rec["issued_ns"], rec["ttl_ms"] = 9_000_000_000 + self.i, now, self.ttl_ms
        rec["confidence"], rec["instruction_id"] = 0.9, self.i + 1
        if self.ctx.emit(self.out, Kind.INSTRUCTION, rec.tobytes(), now):
            self.stats["instructions"] += 1
        self.i += 1
        self.next_ns = now + self.every_ns
        return n + 1


FLOW_LIMITS = ("lean_lots = 0, tif = \"GTC\", risk_aversion = 1.0, max_position_lots = 20, collar_bps = 200.0, "
               "max_orders_per_s = 100, max_open_orders = 50, max_notional = 1000000.0, max_gross_notional = 10000000.0, "
               "max_notional_per_min = 100000000.0, daily_loss_limit = 1000000.0, min_notional = 0.0, "
               "emergency_cooldown_ms = 0")


def order_flow(text: str) -> str:
    """Config hook: the llm stage replaced by ``FlowInjector``; GTC orders, no lean quoting, no EMERGENCY."""
    text = replace_process(text, "llm", """
[[processes]]
name = "llm"
module = "bench.chaos_input:FlowInjector"
inputs = ["sig_llm"]
outputs = ["instr"]
wait = "back-off"
params = { every_ms = 50, max_lots = 10, offset_ticks = 20, ttl_ms = 10000 }
""")
    return no_emergency(set_risk_limits(text, FLOW_LIMITS))


def no_emergency(text: str) -> str:
    """The fast stage never labels EMERGENCY (its threshold above any probability), so lean quoting is
    not suppressed by EMERGENCY cancel-alls and cooldowns (the generated model labels most books so)."""
    new, k = re.subn(r"emergency = [0-9.]+ \}", "emergency = 2.0 }", text, count=1)
    if k == 0:  # no thresholds table: add one that keeps the bench's defaults but never EMERGENCY
        new, k = re.subn(r'(module = "procs.fast:FastAgent"\n(?:.*\n)*?params = \{ )',
                         r"\1thresholds = { buy = 0.3, sell = 0.3, emergency = 2.0 }, ", text, count=1)
    if k != 1:
        raise ValueError("no fast stage params in the config text")
    return new




def venue_open_orders(p) -> int:
    """The paper venue's own count of working orders (signed GET unfilled-orders, every symbol).

    Raises:
        RuntimeError: the venue did not answer OK.
    """
    import http.client

    from pipeline.trading.bitget.rest import Outcome, build_unfilled, classify_response, parse_orders
    from pipeline.trading.bitget.signing import load_credentials
    from pipeline.runtime.portfile import read_port_file

    req = build_unfilled(load_credentials(KEY), int(time.time() * 1000))
    conn = http.client.HTTPConnection("127.0.0.1", int(read_port_file(p.cfg.supervisor.run_dir + "/venue.rest.port")),
                                      timeout=5)
    try:
        conn.request(req.method, req.target, body=req.body or None, headers=req.headers)
        resp = conn.getresponse()
        res = classify_response(resp.status, resp.read())
    finally:
        conn.close()
    if res.outcome != Outcome.OK:
        raise RuntimeError(f"unfilled-orders: {res.status} {res.code} {res.msg}")
    return len(parse_orders(res.data or []))


def kill_switch(ChaosPipeline, quick: bool) -> Row:
    load_s = 3.0 if quick else 10.0
    with tempfile.TemporaryDirectory(prefix="chaos-ks-") as d:
        lat = Path(d)
        with latency_taps(lat), ChaosPipeline(rate=1000, llm=True, text_hook=order_flow, name="killswitch") as p:
            s0 = p.stage("sender").get("sent", 0)
            time.sleep(load_s)
            before = p.stage("sender")
            venue_open_before = 0
            with contextlib.suppress(TimeoutError):  # pull the switch while orders are working at the venue
                venue_open_before = p.wait(lambda: venue_open_orders(p), 10, "working orders at the venue", 0.05)
            sent_rate = (before.get("sent", 0) - s0) / load_s
            t_ks = time.monotonic_ns()
            resp = p.control("kill-switch")
            t_ack = time.monotonic_ns()
            samples = []
            while time.monotonic_ns() - t_ks < 2_000_000_000:
                samples.append((time.monotonic_ns() - t_ks, p.stage("sender").get("sent", 0), p.stage("venue").get("orders_placed", 0)))
                time.sleep(0.05)
            sender = p.stage("sender")
            risk = p.stage("risk")
            venue = p.stage("venue")
            venue_open_after = venue_open_orders(p)
        tap = read_tap(lat, "sender")
    sent_codes = [mark_code(MARK_ORDER_SENT, o) for o in OrderOrigin]
    sent = tap[np.isin(tap["code"], sent_codes)]
    after = sent[sent["at_ns"] > t_ks + 100_000_000]
    last_ms = (int(sent["at_ns"][sent["at_ns"] > t_ks].max()) - t_ks) / 1e6 if (sent["at_ns"] > t_ks).any() else None
    checks = {
        "orders were flowing and working": sent_rate > 0 and sent.size > 0 and venue_open_before > 0,
        "kill switch accepted": bool(resp.get("ok")),
        "zero order requests > 100 ms after": after.size == 0,
        "zero working orders after 2 s (venue, sender, risk)": venue_open_after == 0 and sender.get("open", 0) == 0
                                                               and risk.get("open", 0) == 0,
        "risk HALTED": risk.get("state") == "HALTED",
    }
    ok = all(checks.values())
    return Row(scenario="kill_switch",
               injected=f"kill-switch command after {load_s:.0f} s of GTC orders (FlowInjector) ({sent_rate:.0f} orders/s sent, "
                        f"{venue_open_before} working at the venue)",
               did=f"order requests after +100 ms: {after.size}; last order request at "
                   f"{'none after the command' if last_ms is None else f'+{last_ms:.1f} ms'}; after 2 s venue working {venue_open_after}, sender open "
                   f"{sender.get('open')}, risk open {risk.get('open')}, risk {risk.get('state')}",
               figure=f"{after.size} orders after 100 ms, {venue_open_after} working after 2 s",
               passed=ok, details={"checks": checks, "ack_ms": (t_ack - t_ks) / 1e6, "samples": samples[-5:],
                                   "venue": {k: venue.get(k) for k in ("orders_placed", "cancels", "fills")}})


# ============================================================================================ 5. secrets & permissions
def _socket_inodes(pid: int) -> set[int]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    out.add(int(link[8:-1]))
    return out


def listening_sockets(pids) -> list[tuple[int, str, int]]:
    """(pid, local address, port) of every TCP LISTEN socket owned by ``pids`` (/proc/net/tcp, tcp6)."""
    owner = {}
    for pid in pids:
        for ino in _socket_inodes(pid):
            owner[ino] = pid
    out = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                f = line.split()
                if f[3] != "0A" or int(f[9]) not in owner:
                    continue
                hexaddr, hexport = f[1].split(":")
                raw = bytes.fromhex(hexaddr)
                if name == "tcp":
                    addr = ".".join(str(b) for b in raw[::-1])
                else:
                    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                    addr = str(ipaddress.IPv6Address(b"".join(words)))
                out.append((owner[int(f[9])], addr, int(hexport, 16)))
    return out


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def key_material_hits(needles: dict[str, bytes], files, texts=()) -> tuple[list[str], int]:
    """Where any of ``needles`` (name -> bytes) occurs: ``"<name> in <file>"`` / ``"<name> in text <i>"``
    for each hit in the files (unreadable ones skipped) and the texts; and how many files were read."""
    hits, read = [], 0
    for q in files:
        try:
            data = Path(q).read_bytes()
        except OSError:
            continue
        read += 1
        hits += [f"{k} in {q}" for k, v in needles.items() if v in data]
    for i, t in enumerate(texts):
        hits += [f"{k} in text {i}" for k, v in needles.items() if v in t]
    return hits, read


def secrets_and_permissions(ChaosPipeline, quick: bool) -> Row:
    from pipeline.trading.bitget.signing import load_credentials

    creds = load_credentials(KEY)
    needles = {"api_key": creds.api_key, "secret": creds.secret, "passphrase": creds.passphrase}
    needles = {k: v.encode() for k, v in needles.items() if v}
    run_s = 2.0 if quick else 10.0
    bad_modes, listens = [], []
    with ChaosPipeline(rate=1000, llm=True, text_hook=order_flow, name="secrets") as p:
        time.sleep(run_s)
        cfg = p.cfg
        prefix = cfg.supervisor.shm_prefix
        shm = [e for e in Path("/dev/shm").iterdir() if prefix in e.name]
        for e in shm:
            mode = stat.S_IMODE(e.stat().st_mode)
            if mode != 0o600:
                bad_modes.append(f"{e} {mode:o}")
        socks = [q for q in Path(cfg.supervisor.run_dir).rglob("*") if q.is_socket()]
        for q in socks:
            mode = stat.S_IMODE(q.stat().st_mode)
            if mode != 0o600:
                bad_modes.append(f"{q} {mode:o}")
        st = p.status()
        pids = [st["supervisor_pid"]] + [x["pid"] for x in st["processes"] if x["pid"]]
        listens = listening_sockets(pids)
        texts = [orjson.dumps(st)]
        r = subprocess.run([sys.executable, "-m", "pipeline", "--config", str(p.cfg_path), "status"], cwd=REPO,
                           capture_output=True, timeout=60)
        texts += [r.stdout, r.stderr]
        sent = p.stage("sender").get("sent", 0)
        # stop here, so the logs are complete, then scan the whole run folder before it is removed
        subprocess.run([sys.executable, "-m", "pipeline", "--config", str(p.cfg_path), "down"], cwd=REPO,
                       capture_output=True, timeout=60)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.up_proc.wait(timeout=30)
        files = [q for q in p.tmp.rglob("*") if q.is_file()]
        results = REPO / "bench" / "results"
        files += [q for q in results.rglob("*") if q.is_file()] if results.exists() else []
        found, scanned = key_material_hits(needles, files, texts)
    not_local = [x for x in listens if x[1] not in LOOPBACK]
    checks = {
        "orders were signed and sent": sent > 0,
        "no key material anywhere": not found,
        "every shm entry and socket file 0600": not bad_modes and len(shm) > 0 and len(socks) > 0,
        "nothing listens beyond 127.0.0.1": not not_local and len(listens) > 0,
    }
    ok = all(checks.values())
    return Row(scenario="secrets_and_permissions",
               injected=f"a {run_s:.0f} s run with signed orders ({sent} sent); scan for the paper key's api key, "
                        f"secret, passphrase",
               did=f"scanned {scanned} files + status text/JSON: {len(found)} hits{(' ' + str(found[:5])) if found else ''}; "
                   f"{len(shm)} shm entries + {len(socks)} socket files, {len(bad_modes)} not 0600"
                   f"{(' ' + str(bad_modes[:5])) if bad_modes else ''}; {len(listens)} LISTEN sockets, "
                   f"{len(not_local)} beyond loopback{(' ' + str(not_local)) if not_local else ''}",
               figure=f"{len(found)} key hits, {len(bad_modes)} bad modes, {len(not_local)} non-local listeners",
               passed=ok, details={"checks": checks, "listens": listens, "shm": [e.name for e in shm]})


SCENARIOS = [
    ("malformed_frames", malformed_frames),
    ("llm_faults", llm_faults),
    ("risk_limits", risk_limits),
    ("kill_switch", kill_switch),
    ("secrets_and_permissions", secrets_and_permissions),
]
