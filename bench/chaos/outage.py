"""The venue's outage and its feed faults against the real pipeline (issue #9): run by ``bench.chaos`` and
``tests/chaos``.

``venue_outage``: SIGSTOP the venue for 30 s (quick: 6 s; its heartbeat timeout raised so the supervisor
does not replace it): no BOOK, SIGNAL or approved order during the outage; BOOKs again within
``RESYNC_LIMIT_S`` of SIGCONT. Then a second pipeline on the ``books`` channel (checksummed updates)
with the venue's timed faults (``VENUE_FAULTS``: sequence gaps, bad checksums, disconnects) for 30 s
(quick: 12 s). Counted over that window, from the venue's and the feed's counters read while they
agree (``settled_counts``): every injected sequence gap detected by the feed (``seq_gaps`` grows by
exactly the venue's ``gaps``, at least one), every bad checksum detected (``checksum_failures`` grows
by at least ``bad_checksums``, at least one), each detection answered by a resync (``resyncs`` +
``resyncs_throttled`` grow by at least both together), and no BOOK silence longer than
``RESYNC_LIMIT_S``.

The time limits (``RESYNC_LIMIT_S`` after SIGCONT and as the longest silence under the faults) are
judged in full mode (``make chaos``); quick mode (the tests) judges that BOOKs came back within the
hang guard (``harness.QUICK_HANG_GUARD_S``) and reports the times against the limit.
"""

from __future__ import annotations

import os
import signal
import time

from bench.chaos.harness import QUICK_HANG_GUARD_S, Row, judged_row, soft_wait, wait_stopped
from bench.chaos.rewrite import with_process_lines

RESYNC_LIMIT_S = 5.0
#: the venue's timed faults (s of market time: real time at the scenarios' pace). The periods are chosen
#: so that in the first 170 s no fault comes less than 0.8 s after a disconnect or 0.2 s after another
#: fault: a fault that reaches the feed while it has no valid book (reconnecting, or waiting for a
#: resync's snapshot) cannot be seen by it, so it would not measure the feed. Resyncs stay under the
#: feed's 30 a minute (60 / 4.6 + 60 / 7.8 = 21). A gap steps the seq back (``pipeline.venue.faults.GAP_SEQ``).
VENUE_FAULTS = {"gap_every_s": 4.6, "bad_checksum_every_s": 7.8, "disconnect_every_s": 9.4}
#: the checks on the faults window (``faults_checks``), named for the reports and the sabotage tests
GAP_CHECK = "every injected sequence gap detected by the feed (seq_gaps == venue gaps >= 1)"
CHECKSUM_CHECK = "every bad checksum detected by the feed (checksum_failures >= venue bad_checksums >= 1)"
RESYNC_CHECK = "every detected gap and bad checksum answered by a resync"
#: the counters compared over the faults window: (stage, counter)
COUNTERS = (("venue", "gaps"), ("venue", "bad_checksums"), ("venue", "disconnects"), ("feed", "seq_gaps"),
            ("feed", "checksum_failures"), ("feed", "resyncs"), ("feed", "resyncs_throttled"),
            ("feed", "reconnects"))


def _books(p) -> int:
    """The feed's ``books_emitted``, read again while a status read shows no such counter (a read that met
    the process table's counters mid-publication sees none).

    Raises:
        KeyError: the counter never showed within ~1 s."""
    for _ in range(100):
        n = p.stage("feed").get("books_emitted")
        if n is not None:
            return n
        time.sleep(0.01)
    raise KeyError("books_emitted: not in the feed's counters for 1 s")


def _poll_books_silence(p, seconds: float) -> tuple[float, int]:
    """(longest time with no new BOOK, BOOKs emitted) over ``seconds``, by status polling."""
    t_end = time.monotonic() + seconds
    last_n = _books(p)
    last_t = time.monotonic()
    n0, worst = last_n, 0.0
    while time.monotonic() < t_end:
        time.sleep(0.05)
        n = _books(p)
        now = time.monotonic()
        if n > last_n:
            worst = max(worst, now - last_t)
            last_n, last_t = n, now
    worst = max(worst, time.monotonic() - last_t)
    return worst, last_n - n0


def books_channel(text: str) -> str:
    """The config with the feed on the ``books`` channel (snapshot + checksummed updates)."""
    return text.replace('channels = ["books15", "trade"]', 'channels = ["books", "trade"]')


def fault_counts(p) -> dict[str, int]:
    """The venue's injected faults and the feed's detections, resyncs and reconnects (``COUNTERS``)."""
    stages = {"venue": p.stage("venue"), "feed": p.stage("feed")}
    return {name: int(stages[stage].get(name, 0)) for stage, name in COUNTERS}


def settled_counts(p, timeout_s: float = 10.0, apart_s: float = 0.4) -> tuple[dict[str, int], bool]:
    """``fault_counts`` read twice ``apart_s`` apart until both reads agree (no fault in flight between
    the venue's counting and the feed's, both published since), at most ``timeout_s``: (the counts,
    whether they settled)."""
    deadline = time.monotonic() + timeout_s
    last = fault_counts(p)
    while time.monotonic() < deadline:
        time.sleep(apart_s)
        now = fault_counts(p)
        if now == last:
            return now, True
        last = now
    return last, False


def faults_checks(c0: dict[str, int], c1: dict[str, int]) -> dict[str, bool]:
    """The gap, checksum and resync checks over the window from counts ``c0`` to ``c1``."""
    d = {k: c1[k] - c0[k] for k in c1}
    return {GAP_CHECK: d["gaps"] >= 1 and d["seq_gaps"] == d["gaps"],
            CHECKSUM_CHECK: d["bad_checksums"] >= 1 and d["checksum_failures"] >= d["bad_checksums"],
            RESYNC_CHECK: d["resyncs"] + d["resyncs_throttled"] >= d["seq_gaps"] + d["checksum_failures"]}


def _outage(P, quick: bool) -> dict:
    """Part 1: the venue SIGSTOPped, then SIGCONT; what flowed during it and how soon BOOKs came back."""
    outage_s = 6.0 if quick else 30.0
    hook = lambda t: with_process_lines(t, "venue", "heartbeat_timeout_ms = 300000")  # noqa: E731
    with P(rate=1_000, name="venue_outage", text_hook=hook) as p:
        pids0 = p.pids()
        p.wait(lambda: p.stage("fast").get("signals", 0) > 0, 30, "signals flowing")
        os.kill(pids0["venue"], signal.SIGSTOP)
        wait_stopped(pids0["venue"])
        t_stop = time.monotonic()
        time.sleep(0.5)  # what was already on its way goes through

        def snap():
            fa, r = p.stage("fast"), p.stage("risk")
            return {"books": _books(p), "signals": fa.get("signals", 0), "approved": r.get("approved", 0),
                    "deny_stale_ref": r.get("deny_stale_ref", 0), "instr": p.ring("instr")["write_cursor"],
                    "orders": p.ring("orders")["write_cursor"]}

        s0 = snap()
        time.sleep(max(0.0, outage_s - (time.monotonic() - t_stop)))
        s1 = snap()
        feed_mid = p.stage("feed")
        os.kill(pids0["venue"], signal.SIGCONT)
        t_cont = time.monotonic()
        try:
            p.wait(lambda: _books(p) > s1["books"], max(30.0, QUICK_HANG_GUARD_S),
                   "BOOKs after the venue came back", 0.01)
            resync_s = time.monotonic() - t_cont
        except TimeoutError:
            resync_s = float("inf")
        time.sleep(0.5)
        feed_end = p.stage("feed")
        moved = {x["name"]: x["last_error"] or "?" for x in p.status()["processes"] if x["pid"] != pids0[x["name"]]}
    return {"outage_s": outage_s, "during": {k: s1[k] - s0[k] for k in s0}, "resync_s": resync_s, "moved": moved,
            "feed_mid": feed_mid, "feed_end": feed_end, "prefix": p.prefix}


def _faults(P, quick: bool) -> dict:
    """Part 2: the books channel under the venue's timed faults; counts over the window, BOOK silences."""
    faults_s = 12.0 if quick else 30.0
    with P(rate=1_000, name="venue_faults", venue=VENUE_FAULTS, text_hook=books_channel) as q:
        q.wait(lambda: _books(q) > 0, 30, "BOOKs on the books channel")
        c0, settled0 = settled_counts(q)
        worst_gap_s, books = _poll_books_silence(q, faults_s)
        n_end = _books(q)
        books_after = soft_wait(q, lambda: _books(q) > n_end, QUICK_HANG_GUARD_S)
        c1, settled1 = settled_counts(q)
        sig_ok = q.stage("fast").get("signals", 0) > 0
    return {"faults_s": faults_s, "c0": c0, "c1": c1, "settled": settled0 and settled1, "worst_gap_s": worst_gap_s,
            "books": books, "books_after": books_after, "sig_ok": sig_ok, "prefix": q.prefix}


def venue_outage(P, quick: bool) -> Row:
    o = _outage(P, quick)
    f = _faults(P, quick)
    during, resync_s, worst_s = o["during"], o["resync_s"], f["worst_gap_s"]
    silent = during["books"] == 0 and during["signals"] == 0 and during["approved"] == 0
    judged = "; the limit is judged in full mode" if quick else ""
    checks = {
        "0 BOOK / SIGNAL / approved order during the outage": silent,
        (f"BOOKs again after SIGCONT{judged}" if quick else f"BOOKs again within {RESYNC_LIMIT_S:g} s of SIGCONT"):
            resync_s <= (QUICK_HANG_GUARD_S if quick else RESYNC_LIMIT_S),
        "the venue's and the feed's counters settled at both ends of the faults window": f["settled"],
        **faults_checks(f["c0"], f["c1"]),
        (f"BOOKs and SIGNALs go on under the faults{judged}" if quick else
         f"BOOKs and SIGNALs go on under the faults, no BOOK silence over {RESYNC_LIMIT_S:g} s"):
            f["sig_ok"] and f["books"] > 0 and f["books_after"] and (quick or worst_s <= RESYNC_LIMIT_S),
    }
    d = {k: f["c1"][k] - f["c0"][k] for k in f["c1"]}
    return judged_row(
        "venue_outage", checks,
        injected=(f"venue SIGSTOPped {o['outage_s']:g} s then SIGCONT; then, on the books channel, the venue's timed "
                  f"faults {VENUE_FAULTS} for {f['faults_s']:g} s"),
        did=(f"during the outage (after a 0.5 s grace): BOOKs +{during['books']}, SIGNALs +{during['signals']}, "
             f"approved orders +{during['approved']}, instructions +{during['instr']}, ORDERs +{during['orders']} "
             f"(feed stale_timeouts {o['feed_mid'].get('stale_timeouts')}, reconnects "
             f"{o['feed_end'].get('reconnects')}); BOOKs again {resync_s:.2f} s after SIGCONT; replaced meanwhile: "
             f"{o['moved'] or 'none'}; in the {f['faults_s']:g} s of faults: venue gaps {d['gaps']}, bad checksums "
             f"{d['bad_checksums']}, disconnects {d['disconnects']} -> feed seq_gaps {d['seq_gaps']}, "
             f"checksum_failures {d['checksum_failures']}, resyncs {d['resyncs']} (throttled "
             f"{d['resyncs_throttled']}), reconnects {d['reconnects']}; {f['books']} BOOKs"),
        figure=(f"resync {resync_s:.2f} s after the outage (limit {RESYNC_LIMIT_S:g}{judged}); longest BOOK silence "
                f"under the faults {worst_s:.2f} s; gaps detected {d['seq_gaps']} of {d['gaps']}, bad checksums "
                f"{d['checksum_failures']} of {d['bad_checksums']}; 0 BOOK/SIGNAL/order during the outage: {silent}"),
        details={"during": during, "resync_s": resync_s, "replaced": o["moved"], "counts": {"start": f["c0"],
                 "end": f["c1"]}, "worst_gap_s": worst_s, "prefix": o["prefix"], "prefix_faults": f["prefix"]},
    )
