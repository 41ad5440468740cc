"""Process and ring faults against the real pipeline (issue #9); run by ``bench.chaos`` and ``tests/chaos``.

Each scenario is ``fn(ChaosPipeline, quick) -> Row``: it starts the whole pipeline (venue, feed,
features, fast, llm, risk, sender under the real supervisor, ``bench.chaos.ChaosPipeline``), injects one
kind of fault, measures, and judges its criterion. ``quick`` runs fewer rounds / shorter outages (what
the tests run); full mode is the issue's numbers.

- ``sigkill_each``: SIGKILL every stage but the venue (the paper venue keeps its orders in memory, so
  killing it is an exchange outage, covered by ``venue_outage``), in turn, 10 times each (quick: 2), under
  1,000 updates/s with GTC orders near the mid (``orders_flow``, ``FLOW_MODEL``). Each must be RUNNING
  again within 500 ms by the supervisor's own measure (``recoveries_ms``: death seen -> RUNNING), the
  others keep their pids;
  then, after a ``halt``, the run must settle (nothing open at the sender or the gateway, the orders and
  exec rings empty) and the sender's journal and the venue agree: no clientOid refused as a duplicate
  (``dup_coid``), no order left pending or unknown, as many orders placed at the venue as the journal
  has venue-acknowledged, every venue fill journaled, and the same position at the venue, in the
  journal and in the risk gateway, in whole lots, exactly. Minimum flow: at least ``MIN_ORDERS`` (20)
  NEW orders and ``MIN_FILLS`` (5) fills in the journal (``flow_check``), else FAIL.
- ``sigstop_10s``: SIGSTOP ``features`` for 10 s (quick: 3 s): the supervisor sees the heartbeat stop,
  replaces it (new pid, RUNNING), the others keep their pids and BOOKs keep flowing.
- ``ring_corruption``: random bytes XORed into the CRC-covered bytes of slots written but not yet read
  (the consumer is SIGSTOPped for under a second so that such slots exist), on ``md`` and ``feat``, many
  rounds, plus blind writes into random slots anywhere: the ring's ``crc_errors`` grows by exactly the
  number of corrupted slots (none accepted), the consumers count nothing strange, nothing restarts.
- ``consumer_stall``: two pipelines, GTC orders near the mid (``orders_flow``, ``FLOW_MODEL``), long
  heartbeat timeouts.
  Run 1 (md 1,024 slots, orders 2 slots, exec 4,096): SIGSTOP ``features`` 10 s (quick: 3 s; md, drop):
  drops counted, the same number by the ring and by the feed (``out_drops``), and the feed goes on making
  BOOKs at at least half its rate before; then SIGSTOP ``sender`` 5 s (quick: 2 s; orders, backpressure):
  the risk gateway must find the ring full (``full_events`` > 0). Run 2 (exec 2 slots, orders 4,096):
  SIGSTOP ``sender`` for 1 s and until ``QUEUED_ORDERS`` (3) ORDERs wait in its ring, SIGSTOP ``risk``,
  SIGCONT ``sender``, held 5 s (quick: 2 s; exec, backpressure): the sender must find the ring full.
  (Each backpressure stall is held on past its time, ``HOLD_EXTRA_S`` (10 s) at most, until the writer
  finds the ring full: the order rate varies with the market.) (One ring small at a time: with both
  orders and exec at 2 slots, the gateway waiting for room in orders and the sender for room in exec
  wait for each other, a deadlock seen on 2026-12-01.) After SIGCONT, each run drains, settles after
  a ``halt``, and every ORDER the gateway wrote arrived at the sender, none twice, counted at both ends
  (``order_counts_check``: risk's msgs_out == the ring's write and read cursors == the sender's
  msgs_in; NEW orders approved == NEW orders journaled; the sender's dups == 0), every venue fill is
  journaled, each run carries at least ``MIN_ORDERS`` (20) orders and ``MIN_FILLS`` (5) fills, the
  same pids throughout, no restart. (The feed's p99 is reported, not judged: its latency window holds
  written BOOKs only, so it does not move while md is full.)
- ``venue_outage``: SIGSTOP the venue for 30 s (quick: 6 s; its heartbeat timeout raised so the supervisor
  does not replace it): no BOOK, SIGNAL or approved order during the outage; BOOKs again within 5 s of
  SIGCONT. Then a second pipeline on the ``books`` channel (checksummed updates) with timed sequence gaps,
  bad checksums and disconnects at the venue: every bad checksum detected, answered by a resync, no BOOK
  silence longer than 5 s.
"""

from __future__ import annotations

import math
import mmap
import os
import random
import re
import signal
import statistics
import time
from pathlib import Path

from bench.chaos import Row
from pipeline.trading.journal import PENDING, UNKNOWN, replay
from ringbuf import layout as L

SHM = Path("/dev/shm")
RECOVERY_LIMIT_MS = 500.0
#: the least each pipeline run of sigkill_each and consumer_stall must carry, quick or full: NEW orders
#: journaled by the sender and fills journaled, so that "0 lost, 0 duplicated, positions equal" is
#: about real orders (with orders_flow the 2-core VM made ~10-30 orders and ~5-20 fills a second,
#: 2026-12-01, loaded by other tests; each run waits for this much flow before its fault, at most
#: ``FLOW_WAIT_S``)
MIN_ORDERS = 20
MIN_FILLS = 5
FLOW_WAIT_S = 20.0
RESYNC_LIMIT_S = 5.0
#: stages SIGKILLed by sigkill_each (not the venue: see the module docstring)
KILL_TARGETS = ("feed", "features", "fast", "llm", "risk", "sender")


# ---------------------------------------------------------------------------------------------- helpers
def shm_left(prefix: str) -> list[str]:
    """Entries of /dev/shm that carry ``prefix`` (segments and semaphores of a run)."""
    return sorted(e for e in os.listdir(SHM) if e.startswith((f"{prefix}.", f"sem.{prefix}.")))


def proc_state(pid: int) -> str:
    """The state letter of ``pid`` in /proc (``T``: stopped), "" when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]


def _wait_stopped(pid: int, timeout_s: float = 2.0) -> None:
    """Until ``pid`` is stopped; raises TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while proc_state(pid) not in ("T", "t"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} did not stop (state {proc_state(pid)!r})")
        time.sleep(0.002)


def _cont(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def _with_process_lines(text: str, name: str, lines: str) -> str:
    """The config text with ``lines`` (``key = value``) set in process ``name``'s table: a key the
    table already has is replaced, a new one goes after its ``module`` line."""
    pat = re.compile(r'\[\[processes\]\]\nname = "' + re.escape(name) + r'"\nmodule = "[^"]+"\n(?:(?!\[\[)[^\n]*\n)*')
    matches = list(pat.finditer(text))
    if len(matches) != 1:
        raise ValueError(f"process {name!r} not found once in the config text")
    m = matches[0]
    block = m.group(0)
    for line in lines.strip().splitlines():
        key = line.split("=", 1)[0].strip()
        kp = re.compile(r"^" + re.escape(key) + r" = [^\n]*$", re.M)
        if kp.search(block):
            block = kp.sub(line.strip(), block, count=1)
        else:
            head = re.match(r'\[\[processes\]\]\nname = "[^"]+"\nmodule = "[^"]+"\n', block).group(0)
            block = head + line.strip() + "\n" + block[len(head):]
    return text[: m.start()] + block + text[m.end():]


def _with_ring_capacity(text: str, ring: str, capacity: int) -> str:
    pat = re.compile(r'(\[\[rings\]\]\nname = "' + re.escape(ring) + r'"\nmax_payload_bytes = \d+\ncapacity = )\d+')
    new, n = pat.subn(lambda m: m.group(1) + str(capacity), text)
    if n != 1:
        raise ValueError(f"ring {ring!r} not found once in the config text")
    return new


class RingFile:
    """A ring segment mapped read-write from /dev/shm, for fault injection (layout: ``ringbuf.layout``)."""

    def __init__(self, path: Path):
        self.path = path
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        _magic, _ver, self.slot_size, self.capacity, _pol, self.control = L.GEOMETRY.unpack_from(self.mm, 0)

    def _u64(self, off: int) -> int:
        return int.from_bytes(self.mm[off:off + 8], "little")

    @property
    def write_cursor(self) -> int:
        return self._u64(L.OFF_WRITE_CURSOR)

    @property
    def read_cursor(self) -> int:
        return self._u64(L.OFF_READ_CURSOR)

    @property
    def crc_errors(self) -> int:
        return self._u64(L.OFF_CRC_ERRORS)

    def slot_offset(self, seq: int) -> int:
        return self.control + (seq % self.capacity) * self.slot_size

    def corrupt(self, seq: int, rng: random.Random, nbytes: int = 4) -> None:
        """XOR ``nbytes`` random non-zero bytes into the CRC-covered bytes (header and payload) of the
        slot holding message ``seq``."""
        off = self.slot_offset(seq)
        n = L.HEADER.unpack_from(self.mm, off)[2]
        covered = L.HEADER_BYTES + min(n, self.slot_size - L.HEADER_BYTES)
        for i in rng.sample(range(covered), min(nbytes, covered)):
            self.mm[off + i] ^= rng.randrange(1, 256)

    def scribble(self, rng: random.Random, nbytes: int = 8) -> None:
        """Random bytes at a random place of a random slot (anywhere: read, unread or being written)."""
        off = self.slot_offset(rng.randrange(self.capacity)) + rng.randrange(self.slot_size - nbytes)
        self.mm[off:off + nbytes] = rng.randbytes(nbytes)

    def close(self) -> None:
        self.mm.close()


def _soft_wait(p, predicate, timeout_s: float) -> bool:
    """``p.wait`` that returns False instead of raising on a time-out."""
    try:
        return bool(p.wait(predicate, timeout_s, "(optional)", 0.05))
    except TimeoutError:
        return False


def _venue_ledger(p) -> dict:
    return p.stage("venue")


def _quiesce(p, timeout_s: float = 20.0) -> bool:
    """``halt``, then wait until nothing is open or in flight, and one more quiet second; whether it
    settled so (False: an order still open at the sender or the gateway, or an ORDER / report left in
    a ring, after ``timeout_s``: a lost order keeps the gateway waiting for its answer)."""
    p.control("halt")
    p.wait(lambda: p.stage("risk").get("state") == "HALTED", 10, "risk HALTED")

    def settled():
        s, r = p.stage("sender"), p.stage("risk")
        rings = {x["name"]: x for x in p.status()["rings"]}
        return (s.get("open") == 0 and r.get("open") == 0 and rings["orders"]["depth"] == 0
                and rings["exec"]["depth"] == 0)

    if not _soft_wait(p, settled, timeout_s):
        return False
    time.sleep(1.0)
    return _soft_wait(p, settled, timeout_s)


def _reconcile(p) -> dict:
    """The sender's journal against the venue's ledger and the risk gateway (after ``_quiesce``)."""
    journal = p.tmp / "run" / "sender.journal"
    st, _ = replay(journal.read_bytes())
    acked = [o for o in st.orders.values() if o.vid]
    unresolved = [o.oid for o in st.orders.values() if o.status in (PENDING, UNKNOWN)]
    venue = _venue_ledger(p)
    risk = p.stage("risk")
    pos, lots = {}, {}
    for ins in p.cfg.instruments:
        risk_lots = float(risk.get(f"pos_lots_{ins.id}", float("nan")))
        pos[ins.symbol] = {"venue": float(venue.get("positions", {}).get(ins.symbol, float("nan"))),
                           "journal": st.position(ins.id).qty, "risk": risk_lots * ins.lot_size}
        lots[ins.symbol] = {"venue": whole_lots(pos[ins.symbol]["venue"] / ins.lot_size),
                            "journal": whole_lots(pos[ins.symbol]["journal"] / ins.lot_size),
                            "risk": whole_lots(risk_lots)}
    pos_diff = max((max(v.values()) - min(v.values()) for v in pos.values()), default=0.0)
    # positions are whole lots by construction: reconciled exactly as integers (the base-unit floats
    # above differ by ~1e-19 with the order the fills were summed in)
    lot_diff = (max((max(v.values()) - min(v.values()) for v in lots.values()), default=0)
                if all(x is not None for v in lots.values() for x in v.values()) else None)
    coids = [o.coid for o in st.orders.values()]
    return {"journal_orders": len(st.orders), "journal_acked": len(acked), "unresolved": len(unresolved),
            "journal_fills": len(st.trade_ids), "venue_fills": int(venue.get("fills", -1)),
            "journal_torn": st.torn, "coids_unique": len(set(coids)) == len(coids),
            "venue_placed": int(venue.get("orders_placed", -1)), "venue_rejected": int(venue.get("orders_rejected", -1)),
            "dup_coid": int(venue.get("dup_coid", -1)), "positions": pos, "position_diff": pos_diff,
            "position_lots": lots, "position_diff_lots": lot_diff}


def whole_lots(x: float) -> int | None:
    """``x`` (a position in lots) as an int when it is within 1e-6 of one; None otherwise (not a
    whole number of lots, nan, infinite): a position that cannot be reconciled exactly."""
    if not math.isfinite(x) or abs(x - round(x)) > 1e-6:
        return None
    return round(x)


# ---------------------------------------------------------------------------------------------- scenarios
def sigkill_each(P, quick: bool) -> Row:
    kills = 2 if quick else 10
    min_orders, min_fills = MIN_ORDERS, MIN_FILLS
    with P(rate=1_000, name="sigkill_each", text_hook=orders_flow, model=FLOW_MODEL) as p:
        _flowing(p)
        base = {n: len(p.proc(n)["recoveries_ms"]) for n in KILL_TARGETS}
        pid_moves: list[str] = []
        timeouts: list[str] = []
        for _ in range(kills):
            for name in KILL_TARGETS:
                before = p.pids()
                n_rec = len(p.proc(name)["recoveries_ms"])
                p.signal(name, signal.SIGKILL)
                try:
                    p.wait(lambda: (x := p.proc(name))["state"] == "RUNNING" and x["pid"] != before[name]
                           and len(x["recoveries_ms"]) > n_rec, 30, f"{name} RUNNING again", 0.01)
                except TimeoutError as exc:
                    timeouts.append(str(exc))
                    continue
                after = p.pids()
                pid_moves += [f"{o} (killing {name})" for o in before if o != name and after[o] != before[o]]
                if name in ("risk", "sender"):  # the gateway re-syncs with the sender before trading on
                    p.wait(lambda: p.stage("risk").get("synced") == 1, 30, "risk synced again")
                time.sleep(0.2)
        rec = {n: p.proc(n)["recoveries_ms"][base[n]:] for n in KILL_TARGETS}
        sent_before_halt = p.stage("sender").get("sent", 0)
        settled = _quiesce(p)
        led = _reconcile(p)
        restarts = {n: p.proc(n)["restarts"] for n in KILL_TARGETS}
    allrec = [x for v in rec.values() for x in v]
    p50, mx = (statistics.median(allrec), max(allrec)) if allrec else (float("nan"), float("nan"))
    worst = max(rec, key=lambda n: max(rec[n], default=0))
    ok_rec = len(allrec) == kills * len(KILL_TARGETS) and mx <= RECOVERY_LIMIT_MS
    ok_orders = (led["dup_coid"] == 0 and led["unresolved"] == 0 and led["coids_unique"]
                 and led["venue_placed"] == led["journal_acked"] and led["position_diff_lots"] == 0)
    ok_flow, flow_fig = flow_check(led["journal_orders"], led["journal_fills"], min_orders, min_fills)
    ok_fills = led["journal_fills"] == led["venue_fills"]
    checks = {f"every stage RUNNING again within {RECOVERY_LIMIT_MS:.0f} ms": ok_rec and not timeouts,
              "no other stage's pid moved": not pid_moves,
              "settled after halt (nothing open, nothing in the orders / exec rings)": settled,
              "0 duplicated, 0 lost, 0 unresolved, positions equal in whole lots": ok_orders,
              "every venue fill journaled": ok_fills,
              f"enough flow (>= {min_orders} orders, >= {min_fills} fills)": ok_flow}
    passed = all(checks.values())
    per = ", ".join(f"{n} p50 {statistics.median(v):.0f} / max {max(v):.0f}" for n, v in rec.items() if v)
    return Row(
        scenario="sigkill_each",
        injected=f"SIGKILL of each of {', '.join(KILL_TARGETS)} (venue excluded: it stands for the exchange), "
                 f"{kills} times each in turn, 1,000 updates/s, GTC orders near the mid (orders_flow); at least "
                 f"{min_orders} orders and {min_fills} fills required",
        did=(f"{len(allrec)} of {kills * len(KILL_TARGETS)} restarts RUNNING again ({per} ms); other pids moved: "
             f"{pid_moves or 'none'}; {led['journal_orders']} orders journaled ({sent_before_halt} sent since the sender's last restart), "
             f"{led['journal_acked']} acknowledged by the venue, venue placed {led['venue_placed']}; fills "
             f"{led['journal_fills']} journaled, {led['venue_fills']} at the venue; "
             f"duplicate clientOids refused {led['dup_coid']}; unresolved {led['unresolved']}; positions "
             + "; ".join(f"{s}: venue {v['venue']:g} journal {v['journal']:g} risk {v['risk']:g}"
                         for s, v in led["positions"].items())
             + (f"; timeouts: {timeouts}" if timeouts else "")),
        figure=(f"recovery p50 {p50:.0f} ms, max {mx:.0f} ms ({worst}; limit {RECOVERY_LIMIT_MS:.0f}); "
                f"duplicated {led['dup_coid']}, lost {abs(led['venue_placed'] - led['journal_acked']) + led['unresolved']}, "
                f"position diff {led['position_diff_lots']} lots; flow {flow_fig}"
                + (f"; FAILED: {[k for k, v in checks.items() if not v]}" if not passed else "")),
        passed=passed,
        details={"checks": checks, "recoveries_ms": rec, "ledger": led, "pid_moves": pid_moves, "restarts": restarts,
                 "timeouts": timeouts, "prefix": p.prefix},
    )


def sigstop_10s(P, quick: bool) -> Row:
    hold_s = 3.0 if quick else 10.0
    victim = "features"
    with P(rate=1_000, name="sigstop_10s") as p:
        hb_ms = p.cfg.process(victim).heartbeat_timeout_ms
        before = p.pids()
        books0 = p.stage("feed")["books_emitted"]
        t0 = time.monotonic()
        os.kill(before[victim], signal.SIGSTOP)
        _wait_stopped(before[victim])
        replaced = None
        try:
            x = p.wait(lambda: (y := p.proc(victim))["state"] == "RUNNING" and y["pid"] != before[victim] and y,
                       hb_ms / 1000 + 30, f"{victim} replaced", 0.01)
            replaced = time.monotonic() - t0
        except TimeoutError:
            x = p.proc(victim)
        why = x.get("last_error") or ""
        in0 = p.proc(victim)["msgs_in"]
        sig0 = p.stage("fast").get("signals", 0)
        time.sleep(max(0.0, hold_s - (time.monotonic() - t0)) + 1.0)  # the rest of the hold, and a second more
        _cont(before[victim])  # the old runner is dead by now (SIGKILLed by the supervisor): no-op then
        after = p.pids()
        st = {n: p.proc(n) for n in before}
        books1 = p.stage("feed")["books_emitted"]
        in1, sig1 = st[victim]["msgs_in"], st["fast"]["stage"].get("signals", 0)
        rec = st[victim]["recoveries_ms"]
    moved = [n for n in before if n != victim and after[n] != before[n]]
    flowing = books1 > books0 and in1 > in0 and sig1 > sig0
    passed = replaced is not None and after[victim] != before[victim] and not moved and flowing
    return Row(
        scenario="sigstop_10s",
        injected=f"SIGSTOP of {victim} (pid {before[victim]}), held {hold_s:g} s, heartbeat timeout {hb_ms} ms",
        did=(f"the supervisor SIGKILLed and replaced it ({why or 'no reason shown'}); new pid {after[victim]} RUNNING "
             f"{'%.2f s' % replaced if replaced else 'never'} after the SIGSTOP; supervisor recovery {rec} ms; other pids "
             f"moved: {moved or 'none'}; BOOKs {books0} -> {books1}, {victim} msgs_in {in0} -> {in1} and fast signals "
             f"{sig0} -> {sig1} after the replacement"),
        figure=f"detected and replaced in {replaced:.2f} s" if replaced else "not replaced",
        passed=passed,
        details={"replaced_s": replaced, "moved": moved, "prefix": p.prefix, "recoveries_ms": rec},
    )


def ring_corruption(P, quick: bool) -> Row:
    rounds = 3 if quick else 20
    per_round = 20 if quick else 50
    blind = 300 if quick else 5_000
    rng = random.Random(9)
    consumers = {"md": "features", "feat": "fast"}
    with P(rate=1_000, name="ring_corruption") as p:
        pids0 = p.pids()
        hb_ms = min(p.cfg.process(c).heartbeat_timeout_ms for c in consumers.values())
        stop_max_s = min(1.0, hb_ms / 1000 / 2)
        rings = {r: RingFile(p.ring_segment(r)) for r in consumers}
        try:
            crc0 = {r: f.crc_errors for r, f in rings.items()}
            stats0 = {c: dict(p.stage(c)) for c in consumers.values()}
            corrupted = dict.fromkeys(consumers, 0)
            for _ in range(rounds):
                for ring, consumer in consumers.items():
                    f = rings[ring]
                    pid = p.proc(consumer)["pid"]
                    os.kill(pid, signal.SIGSTOP)
                    try:
                        _wait_stopped(pid)
                        t0 = time.monotonic()
                        w0 = f.write_cursor + 1  # written after the stop: certainly not yet read
                        while f.write_cursor < w0 + per_round + 4 and time.monotonic() - t0 < stop_max_s:
                            time.sleep(0.01)
                        w1 = f.write_cursor - 1  # committed (the writer may be filling w1 + 1)
                        seqs = rng.sample(range(w0, w1), min(per_round, max(0, w1 - w0)))
                        for s in seqs:
                            f.corrupt(s, rng)
                        corrupted[ring] += len(seqs)
                    finally:
                        os.kill(pid, signal.SIGCONT)
                    p.wait(lambda: f.read_cursor > w1, 10, f"{consumer} past the corrupted slots of {ring}")
            counted = {r: f.crc_errors - crc0[r] for r, f in rings.items()}
            exact = counted == corrupted
            for _ in range(blind):  # anywhere, while running: only must not crash anything
                rings["md" if rng.random() < 0.5 else "feat"].scribble(rng)
            time.sleep(0.5)
            stats1 = {c: dict(p.stage(c)) for c in consumers.values()}
            crc_total = {r: f.crc_errors - crc0[r] for r, f in rings.items()}
        finally:
            for f in rings.values():
                f.close()
        time.sleep(0.3)
        st = p.status()
        pids1 = {x["name"]: x["pid"] for x in st["processes"]}
        restarts = {x["name"]: x["restarts"] for x in st["processes"] if x["restarts"]}
        errors = {x["name"]: x["errors"] for x in st["processes"] if x["errors"]}
        running = all(x["state"] == "RUNNING" for x in st["processes"])
    strange = ("unknown_kind", "bad_size", "unknown_instrument", "errors")
    odd = {c: {k: stats1[c].get(k, 0) - stats0[c].get(k, 0) for k in (*strange, "rejected")
               if stats1[c].get(k, 0) != stats0[c].get(k, 0)} for c in stats1}
    odd = {c: v for c, v in odd.items() if v}
    passed = exact and not odd and not restarts and not errors and running and pids1 == pids0
    return Row(
        scenario="ring_corruption",
        injected=(f"{rounds} rounds x {per_round} slots of md and of feat with 4 random bytes XORed into the CRC-covered "
                  f"bytes of unread messages (consumer SIGSTOPped < {stop_max_s:g} s), then {blind} blind 8-byte writes "
                  f"into random slots while running"),
        did=(f"crc_errors grew by {counted} for {corrupted} corrupted messages (after the blind writes: {crc_total}); "
             f"consumer counters changed: {odd or 'none'}; restarts {restarts or 'none'}, stage errors "
             f"{errors or 'none'}, all RUNNING {running}, pids unchanged {pids1 == pids0}"),
        figure=f"{sum(counted.values())} of {sum(corrupted.values())} corrupt messages counted and skipped, 0 accepted"
        if exact else f"counted {counted} != corrupted {corrupted}",
        passed=passed,
        details={"corrupted": corrupted, "counted": counted, "after_blind": crc_total, "odd": odd, "prefix": p.prefix},
    )


#: the fast stage's classifier where orders must flow (sigkill_each, consumer_stall): bench.pipeline's
#: hand-set MLP, which follows the book imbalance, so LEAN signals come; the shipped model
#: (models/generated/fast.onnx, bench.pipeline's default since 2026-12-01) labelled 3,131 of 3,131
#: updates HOLD here with EMERGENCY off (and calls EMERGENCY on nearly every one with it on): no order
FLOW_MODEL = "hand-set"


def orders_flow(text: str) -> str:
    """The config with orders and fills flowing (with ``FLOW_MODEL``'s LEAN signals): the risk
    gateway's lean quotes GTC (they rest at the venue, so its market fills them) at
    ``risk_aversion = 1.0`` (near the mid; the bench's 50 quotes so deep that nothing fills), and the
    fast stage's EMERGENCY label off (threshold 2: never; buy / sell at procs.fast's defaults), so no
    cool-down stops the flow. On the 2-core VM (2026-12-01) that is ~30 ORDERs and ~20 fills a second.

    Raises:
        ValueError: the config text lacks what it rewrites (the bench config changed).
    """
    new, k1 = re.subn(r'(limits = \{[^}]*)tif = "IOC"', r'\1tif = "GTC"', text, count=1)
    new, k2 = re.subn(r"(limits = \{[^}]*)risk_aversion = [0-9.]+", r"\1risk_aversion = 1.0", new, count=1)
    new, k3 = re.subn(r'(module = "procs.fast:FastAgent"\n(?:[^\n]*\n)*?params = \{ )',
                      r"\1thresholds = { buy = 0.4, sell = 0.4, emergency = 2.0 }, ", new, count=1)
    if (k1, k2, k3) != (1, 1, 1):
        raise ValueError(f"orders_flow: the config text changed (tif {k1}, risk_aversion {k2}, fast params {k3})")
    return new


def flow_check(orders: int, fills: int, min_orders: int, min_fills: int) -> tuple[bool, str]:
    """Whether a run carried enough to judge (at least ``min_orders`` NEW orders and ``min_fills``
    fills), and the figures: "0 lost, 0 duplicated, positions equal" over no order is no evidence."""
    ok = orders >= min_orders and fills >= min_fills
    return ok, f"{orders} orders (min {min_orders}), {fills} fills (min {min_fills})"


def order_counts_check(c: dict) -> tuple[bool, list[str]]:
    """Every ORDER the risk gateway wrote arrived at the sender, none twice, counted from both ends
    (after ``_quiesce``, in a run without restarts): ``risk_out`` (risk's own msgs_out) ==
    ``ring_written`` (the orders ring's write cursor) == ``ring_read`` (its read cursor) == ``sender_in``
    (the sender's msgs_in); ``risk_approved`` (NEW orders risk wrote) == ``journal_new`` (distinct
    NEW orders in the sender's journal); ``sender_dups`` (a NEW read again) == 0 and
    ``sender_malformed`` == 0. Returns (ok, what did not hold)."""
    bad = []
    ends = {k: c[k] for k in ("risk_out", "ring_written", "ring_read", "sender_in")}
    if len(set(ends.values())) != 1:
        bad.append("ORDERs written != read: " + ", ".join(f"{k} {v}" for k, v in ends.items()))
    if c["risk_approved"] != c["journal_new"]:
        bad.append(f"NEW orders approved by risk {c['risk_approved']} != journaled by the sender {c['journal_new']}")
    if c["sender_dups"]:
        bad.append(f"NEW orders read twice by the sender: {c['sender_dups']}")
    if c["sender_malformed"]:
        bad.append(f"ORDERs the sender could not read: {c['sender_malformed']}")
    return not bad, bad


def _order_ends(p) -> dict:
    """The counts ``order_counts_check`` compares, and the run's flow (after ``_quiesce``)."""
    st, _ = replay((p.tmp / "run" / "sender.journal").read_bytes())
    risk, sender, ring = p.proc("risk"), p.proc("sender"), p.ring("orders")
    return {"risk_out": risk["msgs_out"], "ring_written": ring["write_cursor"], "ring_read": ring["read_cursor"],
            "sender_in": sender["msgs_in"], "risk_approved": risk["stage"].get("approved", -1),
            "journal_new": len(st.orders), "sender_dups": sender["stage"].get("dups", -1),
            "sender_malformed": sender["stage"].get("malformed", -1), "journal_fills": len(st.trade_ids),
            "venue_fills": int(p.stage("venue").get("fills", -1)), "risk_cancels": risk["stage"].get("cancels", -1)}


def _stall_config(md: int | None = None, orders: int = 4096, exec_: int = 4096):
    """Config hook: orders flowing (``orders_flow``), the given ring capacities, and heartbeat timeouts
    long enough that a stalled stage is not replaced."""
    def hook(text: str) -> str:
        text = orders_flow(text)
        if md is not None:
            text = _with_ring_capacity(text, "md", md)
        text = _with_ring_capacity(text, "orders", orders)
        text = _with_ring_capacity(text, "exec", exec_)
        for name in ("features", "sender", "risk"):
            text = _with_process_lines(text, name, "heartbeat_timeout_ms = 120000")
        return text
    return hook


def _flowing(p, timeout_s: float = FLOW_WAIT_S) -> None:
    """Until the sender has sent ``MIN_ORDERS`` orders and had ``MIN_FILLS`` fills, at most ``timeout_s``
    (soft: ``flow_check`` on the journal at the end judges)."""
    _soft_wait(p, lambda: (s := p.stage("sender")).get("sent", 0) >= MIN_ORDERS and s.get("fills", 0) >= MIN_FILLS,
               timeout_s)


#: ORDERs left waiting in the orders ring (the sender stopped) before consumer_stall's run 2 stops the
#: risk gateway: each is answered by at least one report, so three must find the 2-slot exec ring full
QUEUED_ORDERS = 3
#: how much longer than its set time a backpressure stall is held, at most, for the writer to meet the
#: full ring (the order rate varies with the market: ~3 to ~30 a second)
HOLD_EXTRA_S = 10.0


def _hold(p, min_s: float, until, extra_s: float = HOLD_EXTRA_S) -> bool:
    """Sleep ``min_s``, then on until ``until()`` or ``extra_s`` more; whether ``until()`` came."""
    time.sleep(min_s)
    return _soft_wait(p, until, extra_s)


def _books_made(feed: dict) -> int:
    """BOOKs the feed made: written, or refused by a full drop ring."""
    return feed.get("books_emitted", 0) + feed.get("out_drops", 0)


def consumer_stall(P, quick: bool) -> Row:
    stall_s = 3.0 if quick else 10.0
    bp_stall_s = 2.0 if quick else 5.0
    min_orders, min_fills = MIN_ORDERS, MIN_FILLS
    # run 1: md (drop) and orders (backpressure) small; exec large, so the sender never waits on it
    with P(rate=1_000, name="consumer_stall", text_hook=_stall_config(md=1024, orders=2), model=FLOW_MODEL) as p:
        pids0 = p.pids()
        _flowing(p)
        # the feed's rate before: BOOKs made over a second
        f0, t0 = p.stage("feed"), time.monotonic()
        lat_before = []
        for _ in range(10):
            lat_before.append(p.proc("feed")["p99_us"])
            time.sleep(0.1)
        f1, t1 = p.stage("feed"), time.monotonic()
        rate_before = (_books_made(f1) - _books_made(f0)) / (t1 - t0)
        md0 = p.ring("md")
        p.signal("features", signal.SIGSTOP)
        _wait_stopped(pids0["features"])
        t0 = time.monotonic()
        f0 = p.stage("feed")
        lat_during = []
        while time.monotonic() - t0 < stall_s:
            time.sleep(0.1)
            lat_during.append(p.proc("feed")["p99_us"])
        md1, f1, t1 = p.ring("md"), p.stage("feed"), time.monotonic()
        rate_during = (_books_made(f1) - _books_made(f0)) / (t1 - t0)
        os.kill(pids0["features"], signal.SIGCONT)
        p.wait(lambda: p.proc("features")["msgs_in"] > 0 and p.ring("md")["depth"] < 64, 20, "features caught up")
        # the orders ring (2 slots): the sender stalled, the risk gateway must wait for room
        o0 = p.ring("orders")
        os.kill(pids0["sender"], signal.SIGSTOP)
        _wait_stopped(pids0["sender"])
        _hold(p, bp_stall_s, lambda: p.ring("orders")["full_events"] > o0["full_events"])
        o1 = p.ring("orders")
        os.kill(pids0["sender"], signal.SIGCONT)
        o_drained = _soft_wait(p, lambda: p.ring("orders")["read_cursor"] >= o1["write_cursor"], 20)
        flowing = _soft_wait(p, lambda: _books_made(p.stage("feed")) > _books_made(f1)
                             and p.stage("sender").get("sent", 0) > 0, 10)
        settled1 = _quiesce(p)
        ends1 = _order_ends(p)
        st = p.status()
        md_end, feed_end = p.ring("md"), p.stage("feed")
        pids1 = {x["name"]: x["pid"] for x in st["processes"]}
        restarts = {x["name"]: x["restarts"] for x in st["processes"] if x["restarts"]}
    # run 2: exec (backpressure) small; orders large. The sender stalled for a second (orders wait in
    # its ring), then the risk gateway stopped and the sender let go: its reports must wait for room
    with P(rate=1_000, name="consumer_stall_exec", text_hook=_stall_config(exec_=2), model=FLOW_MODEL) as q:
        qpids0 = q.pids()
        _flowing(q)
        os.kill(qpids0["sender"], signal.SIGSTOP)
        _wait_stopped(qpids0["sender"])
        _hold(q, 1.0, lambda: q.ring("orders")["depth"] >= QUEUED_ORDERS)
        e0 = q.ring("exec")
        os.kill(qpids0["risk"], signal.SIGSTOP)
        _wait_stopped(qpids0["risk"])
        queued = q.ring("orders")["depth"]
        os.kill(qpids0["sender"], signal.SIGCONT)
        _hold(q, bp_stall_s, lambda: q.ring("exec")["full_events"] > e0["full_events"])
        e1 = q.ring("exec")
        os.kill(qpids0["risk"], signal.SIGCONT)
        e_drained = _soft_wait(q, lambda: q.ring("exec")["read_cursor"] >= e1["write_cursor"], 20)
        settled2 = _quiesce(q)
        ends2 = _order_ends(q)
        st2 = q.status()
        qpids1 = {x["name"]: x["pid"] for x in st2["processes"]}
        restarts2 = {x["name"]: x["restarts"] for x in st2["processes"] if x["restarts"]}
    md_drops = md1["dropped"] - md0["dropped"]
    bp = {"orders": {"full_events": o1["full_events"] - o0["full_events"], "written": o1["write_cursor"] - o0["write_cursor"],
                     "depth_at_end": o1["depth"], "consumed_after_cont": o_drained},
          "exec": {"full_events": e1["full_events"] - e0["full_events"], "written": e1["write_cursor"] - e0["write_cursor"],
                   "depth_at_end": e1["depth"], "consumed_after_cont": e_drained, "orders_queued": queued}}
    counts = {}
    for run, ends in (("run 1", ends1), ("run 2", ends2)):
        ok, bad = order_counts_check(ends)
        counts[run] = (ok, bad)
    flow = {run: flow_check(e["journal_new"], e["journal_fills"], min_orders, min_fills)
            for run, e in (("run 1", ends1), ("run 2", ends2))}
    checks = {
        "md drops counted (ring and feed agree)": md_drops > 0 and md_end["dropped"] == feed_end.get("out_drops", -1),
        "the feed went on making BOOKs while md was full (>= half its rate before)": rate_during >= 0.5 * rate_before > 0,
        "orders ring: the risk gateway found it full while the sender was stopped": bp["orders"]["full_events"] > 0,
        "exec ring: the sender found it full while the risk gateway was stopped": bp["exec"]["full_events"] > 0,
        "both rings drained after SIGCONT": o_drained and e_drained,
        "settled after halt (nothing open, nothing in the orders / exec rings; both runs)": settled1 and settled2,
        "every ORDER written arrived at the sender, none twice (both runs)": all(ok for ok, _ in counts.values()),
        f"enough flow (>= {min_orders} orders and >= {min_fills} fills a run)": all(ok for ok, _ in flow.values()),
        "every venue fill journaled (both runs)": all(e["journal_fills"] == e["venue_fills"] for e in (ends1, ends2)),
        "BOOKs and orders flowing after the stalls": bool(flowing),
        "same pids, no restarts": pids1 == pids0 and qpids1 == qpids0 and not restarts and not restarts2,
    }
    passed = all(checks.values())
    base = statistics.median(lat_before)
    worst = max(lat_during) if lat_during else float("nan")
    failed = [k for k, v in checks.items() if not v]
    fmt = lambda e: (f"risk wrote {e['risk_out']} ORDERs (ring {e['ring_written']}), the sender read {e['sender_in']} "  # noqa: E731
                     f"(ring {e['ring_read']}); {e['risk_approved']} NEW approved, {e['journal_new']} journaled, "
                     f"dups {e['sender_dups']}; fills {e['journal_fills']} journaled / {e['venue_fills']} at the venue")
    return Row(
        scenario="consumer_stall",
        injected=(f"run 1: SIGSTOP features {stall_s:g} s (md ring 1,024 slots, drop), then SIGSTOP sender {bp_stall_s:g} s "
                  f"(orders ring 2 slots, backpressure); run 2: SIGSTOP sender >= 1 s (until {QUEUED_ORDERS} ORDERs "
                  f"wait), then SIGSTOP risk and SIGCONT sender, held {bp_stall_s:g} s (exec ring 2 slots, "
                  f"backpressure); each backpressure stall held up to {HOLD_EXTRA_S:g} s more until the ring is "
                  f"full; GTC orders near the mid "
                  f"(orders_flow); at least {min_orders} orders and {min_fills} fills required a run"),
        did=(f"md: {md_drops} drops counted (ring {md_end['dropped']}, feed out_drops {feed_end.get('out_drops')} in all), "
             f"BOOKs made {rate_during:.0f}/s during the stall vs {rate_before:.0f}/s before; orders: {bp['orders']}; "
             f"exec: {bp['exec']}; run 1: {fmt(ends1)}; run 2: {fmt(ends2)}"
             + (f"; count problems: {[b for _, b in counts.values() if b]}" if not all(ok for ok, _ in counts.values()) else "")
             + f"; restarts {restarts or 'none'} / {restarts2 or 'none'}"),
        figure=(f"md drops {md_drops}; orders full_events {bp['orders']['full_events']}, exec full_events "
                f"{bp['exec']['full_events']}; ORDERs written/read {ends1['ring_written']}/{ends1['sender_in']} and "
                f"{ends2['ring_written']}/{ends2['sender_in']}, dups {ends1['sender_dups']}+{ends2['sender_dups']}; "
                f"flow {flow['run 1'][1]} / {flow['run 2'][1]}; feed BOOK p99 {base:.0f} us before, {worst:.0f} us "
                f"during (not judged: the feed's latency window holds written BOOKs only)"
                + (f"; FAILED: {failed}" if failed else "")),
        passed=passed,
        details={"checks": checks, "lat_before_us": lat_before, "lat_during_us": lat_during, "backpressure": bp,
                 "ends": {"run 1": ends1, "run 2": ends2}, "rate_before": rate_before, "rate_during": rate_during,
                 "prefix": p.prefix, "prefix_exec": q.prefix, "restarts": [restarts, restarts2]},
    )


def _poll_books_silence(p, seconds: float) -> tuple[float, int]:
    """(longest time with no new BOOK, BOOKs emitted) over ``seconds``, by status polling."""
    t_end = time.monotonic() + seconds
    last_n = p.stage("feed")["books_emitted"]
    last_t = time.monotonic()
    n0, worst = last_n, 0.0
    while time.monotonic() < t_end:
        time.sleep(0.05)
        n = p.stage("feed")["books_emitted"]
        now = time.monotonic()
        if n > last_n:
            worst = max(worst, now - last_t)
            last_n, last_t = n, now
    worst = max(worst, time.monotonic() - last_t)
    return worst, last_n - n0


def _books_channel(text: str) -> str:
    return text.replace('channels = ["books15", "trade"]', 'channels = ["books", "trade"]')


def venue_outage(P, quick: bool) -> Row:
    outage_s = 6.0 if quick else 30.0
    faults_s = 8.0 if quick else 30.0
    hook = lambda t: _with_process_lines(t, "venue", "heartbeat_timeout_ms = 300000")  # noqa: E731
    with P(rate=1_000, name="venue_outage", text_hook=hook) as p:
        pids0 = p.pids()
        p.wait(lambda: p.stage("fast").get("signals", 0) > 0, 30, "signals flowing")
        os.kill(pids0["venue"], signal.SIGSTOP)
        _wait_stopped(pids0["venue"])
        t_stop = time.monotonic()
        time.sleep(0.5)  # what was already on its way goes through

        def snap():
            f, fa, r = p.stage("feed"), p.stage("fast"), p.stage("risk")
            return {"books": f["books_emitted"], "signals": fa.get("signals", 0), "approved": r.get("approved", 0),
                    "deny_stale_ref": r.get("deny_stale_ref", 0), "instr": p.ring("instr")["write_cursor"],
                    "orders": p.ring("orders")["write_cursor"]}

        s0 = snap()
        time.sleep(max(0.0, outage_s - (time.monotonic() - t_stop)))
        s1 = snap()
        feed_mid = p.stage("feed")
        os.kill(pids0["venue"], signal.SIGCONT)
        t_cont = time.monotonic()
        try:
            p.wait(lambda: p.stage("feed")["books_emitted"] > s1["books"], 30, "BOOKs after the venue came back", 0.01)
            resync_s = time.monotonic() - t_cont
        except TimeoutError:
            resync_s = float("inf")
        time.sleep(0.5)
        feed_end = p.stage("feed")
        moved = {x["name"]: x["last_error"] or "?" for x in p.status()["processes"] if x["pid"] != pids0[x["name"]]}
    during = {k: s1[k] - s0[k] for k in s0}
    silent = during["books"] == 0 and during["signals"] == 0 and during["approved"] == 0
    # part 2: the books channel (checksummed updates) with timed gaps, bad checksums and disconnects
    # intervals that never coincide within the run: a checksum corrupted at the moment of a disconnect
    # reaches no client and cannot be detected, so it would not measure the feed
    venue_faults = {"gap_every_s": 2.0, "bad_checksum_every_s": 3.0, "disconnect_every_s": 5.5}
    with P(rate=1_000, name="venue_faults", venue=venue_faults, text_hook=_books_channel) as q:
        q.wait(lambda: q.stage("feed")["books_emitted"] > 0, 30, "BOOKs on the books channel")
        worst_gap_s, books = _poll_books_silence(q, faults_s)
        v, f = q.stage("venue"), q.stage("feed")
        sig_ok = q.stage("fast").get("signals", 0) > 0
    n_inst = 1
    detected = f["checksum_failures"] >= v["bad_checksums"] * n_inst and v["bad_checksums"] > 0
    resynced = f["resyncs"] + f.get("resyncs_throttled", 0) >= f["checksum_failures"] + f["seq_gaps"]
    passed = (silent and resync_s <= RESYNC_LIMIT_S and detected and resynced
              and worst_gap_s <= RESYNC_LIMIT_S and sig_ok)
    return Row(
        scenario="venue_outage",
        injected=(f"venue SIGSTOPped {outage_s:g} s then SIGCONT; then, on the books channel, the venue's timed faults "
                  f"{venue_faults} for {faults_s:g} s"),
        did=(f"during the outage (after a 0.5 s grace): BOOKs +{during['books']}, SIGNALs +{during['signals']}, "
             f"approved orders +{during['approved']}, instructions +{during['instr']}, ORDERs +{during['orders']} "
             f"(feed stale_timeouts {feed_mid.get('stale_timeouts')}, reconnects {feed_end.get('reconnects')}); "
             f"BOOKs again {resync_s:.2f} s after SIGCONT; replaced meanwhile: {moved or 'none'}; faults: venue gaps {v['gaps']}, "
             f"bad checksums {v['bad_checksums']}, disconnects {v['disconnects']} -> feed seq_gaps {f['seq_gaps']}, "
             f"checksum_failures {f['checksum_failures']}, resyncs {f['resyncs']} (throttled "
             f"{f.get('resyncs_throttled', 0)}), reconnects {f['reconnects']}, pushes without a BOOK "
             f"{f.get('books_dropped', 0)}, {books} BOOKs in {faults_s:g} s"),
        figure=(f"resync {resync_s:.2f} s after the outage (limit {RESYNC_LIMIT_S:g}); longest BOOK silence under "
                f"gap/checksum/disconnect faults {worst_gap_s:.2f} s; 0 BOOK/SIGNAL/order during the outage: {silent}"),
        passed=passed,
        details={"during": during, "resync_s": resync_s, "replaced": moved, "venue": v, "feed": f, "prefix": p.prefix,
                 "prefix_faults": q.prefix},
    )


SCENARIOS = [
    ("sigkill_each", sigkill_each),
    ("sigstop_10s", sigstop_10s),
    ("ring_corruption", ring_corruption),
    ("consumer_stall", consumer_stall),
    ("venue_outage", venue_outage),
]
