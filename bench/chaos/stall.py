"""A stalled consumer against the real pipeline (issue #9): run by ``bench.chaos`` and ``tests/chaos``.

``consumer_stall``: two pipelines, GTC orders near the mid (``orders_flow``, ``FLOW_MODEL``), long
heartbeat timeouts.
Run 1 (md 1,024 slots, orders 2 slots, exec 4,096): SIGSTOP ``features`` 10 s (quick: 3 s; md, drop):
drops counted, the same number by the ring and by the feed (``out_drops``), and the feed goes on making
BOOKs at at least half its rate before; then SIGSTOP ``sender`` 5 s (quick: 2 s; orders, backpressure):
the risk gateway must find the ring full (``full_events`` > 0) and wait for room (the ring's ``dropped``
unchanged: no ORDER refused). Run 2 (exec 2 slots, orders 4,096):
SIGSTOP ``sender`` for 1 s and until ``QUEUED_ORDERS`` (3) ORDERs wait in its ring, SIGSTOP ``risk``,
SIGCONT ``sender``, held 5 s (quick: 2 s; exec, backpressure): the sender must find the ring full
(and wait: nothing dropped).
(Each backpressure stall is held on past its time, ``HOLD_EXTRA_S`` (10 s) at most, until the writer
finds the ring full: the order rate varies with the market.) (One ring small at a time: with both
orders and exec at 2 slots, the gateway waiting for room in orders and the sender for room in exec
wait for each other, a deadlock seen on 2026-12-01.) After SIGCONT, each run drains, settles after
a ``halt``, and every ORDER the gateway wrote arrived at the sender, none twice, counted at both ends
(``order_counts_check``: risk's msgs_out == the ring's write and read cursors == the sender's
msgs_in; every NEW order approved in risk's audit log journaled or refused with a reason; the sender's
dups == 0), every venue fill is
journaled, each run carries at least ``MIN_ORDERS`` (20) orders and ``MIN_FILLS`` (5) fills, the
same pids throughout, no restart. (The feed's p99 is reported, not judged: its latency window holds
written BOOKs only, so it does not move while md is full.)
"""

from __future__ import annotations

import os
import signal
import statistics
import time

from bench.chaos.flow import (FLOW_MODEL, MIN_FILLS, MIN_ORDERS, flow_check, flowing, ledger_entry, ledger_text,
                              order_counts_check, order_ends, orders_flow, quiesce)
from bench.chaos.harness import Row, judged_row, soft_wait, wait_stopped
from bench.chaos.rewrite import with_process_lines, with_ring_capacity

#: the backpressure checks (``full_events``), by name: the writer met the full ring and waited for room
ORDERS_FULL_CHECK = "orders ring: the risk gateway found it full while the sender was stopped, and waited (0 dropped)"
EXEC_FULL_CHECK = "exec ring: the sender found it full while the risk gateway was stopped, and waited (0 dropped)"
#: ORDERs left waiting in the orders ring (the sender stopped) before consumer_stall's run 2 stops the
#: risk gateway: each is answered by at least one report, so three must find the 2-slot exec ring full
QUEUED_ORDERS = 3
#: how much longer than its set time a backpressure stall is held, at most, for the writer to meet the
#: full ring (the order rate varies with the market: ~3 to ~30 a second)
HOLD_EXTRA_S = 10.0


def hold(p, min_s: float, until, extra_s: float = HOLD_EXTRA_S) -> bool:
    """Sleep ``min_s``, then on until ``until()`` or ``extra_s`` more; whether ``until()`` came."""
    time.sleep(min_s)
    return soft_wait(p, until, extra_s)


def books_made(feed: dict) -> int:
    """BOOKs the feed made: written, or refused by a full drop ring."""
    return feed.get("books_emitted", 0) + feed.get("out_drops", 0)


def stall_config(md: int | None = None, orders: int = 4096, exec_: int = 4096):
    """Config hook: orders flowing (``orders_flow``), the given ring capacities, and heartbeat timeouts
    long enough that a stalled stage is not replaced."""
    def hook(text: str) -> str:
        text = orders_flow(text)
        if md is not None:
            text = with_ring_capacity(text, "md", md)
        text = with_ring_capacity(text, "orders", orders)
        text = with_ring_capacity(text, "exec", exec_)
        for name in ("features", "sender", "risk"):
            text = with_process_lines(text, name, "heartbeat_timeout_ms = 120000")
        return text
    return hook


def consumer_stall(P, quick: bool) -> Row:
    stall_s = 3.0 if quick else 10.0
    bp_stall_s = 2.0 if quick else 5.0
    min_orders, min_fills = MIN_ORDERS, MIN_FILLS
    r1 = _stall_md_and_orders(P, stall_s, bp_stall_s)
    r2 = _stall_exec(P, bp_stall_s)
    md0, md1, md_end, feed_end = r1["md0"], r1["md1"], r1["md_end"], r1["feed_end"]
    o0, o1, e0, e1 = r1["o0"], r1["o1"], r2["e0"], r2["e1"]
    ends1, ends2 = r1["ends"], r2["ends"]
    md_drops = md1["dropped"] - md0["dropped"]
    bp = {"orders": {"full_events": o1["full_events"] - o0["full_events"], "written": o1["write_cursor"] - o0["write_cursor"],
                     "dropped": o1["dropped"] - o0["dropped"], "depth_at_end": o1["depth"],
                     "consumed_after_cont": r1["drained"]},
          "exec": {"full_events": e1["full_events"] - e0["full_events"], "written": e1["write_cursor"] - e0["write_cursor"],
                   "dropped": e1["dropped"] - e0["dropped"], "depth_at_end": e1["depth"],
                   "consumed_after_cont": r2["drained"], "orders_queued": r2["queued"]}}
    counts = {}
    for run, ends in (("run 1", ends1), ("run 2", ends2)):
        ok, bad = order_counts_check(ends)
        counts[run] = (ok, bad)
    flow = {run: flow_check(e["journal_new"], e["journal_fills"], min_orders, min_fills)
            for run, e in (("run 1", ends1), ("run 2", ends2))}
    checks = {
        "md drops counted (ring and feed agree)": md_drops > 0 and md_end["dropped"] == feed_end.get("out_drops", -1),
        "the feed went on making BOOKs while md was full (>= half its rate before)":
            r1["rate_during"] >= 0.5 * r1["rate_before"] > 0,
        ORDERS_FULL_CHECK: bp["orders"]["full_events"] > 0 and bp["orders"]["dropped"] == 0,
        EXEC_FULL_CHECK: bp["exec"]["full_events"] > 0 and bp["exec"]["dropped"] == 0,
        "both rings drained after SIGCONT": r1["drained"] and r2["drained"],
        "settled after halt (nothing open, nothing in the orders / exec rings; both runs)": r1["settled"] and r2["settled"],
        "every ORDER written arrived at the sender, none twice (both runs)": all(ok for ok, _ in counts.values()),
        f"enough flow (>= {min_orders} orders and >= {min_fills} fills a run)": all(ok for ok, _ in flow.values()),
        "every venue fill journaled (both runs)": all(e["journal_fills"] == e["venue_fills"] for e in (ends1, ends2)),
        "BOOKs and orders flowing after the stalls": bool(r1["flowing"]),
        "same pids, no restarts": (r1["pids1"] == r1["pids0"] and r2["pids1"] == r2["pids0"] and not r1["restarts"]
                                   and not r2["restarts"]),
    }
    base = statistics.median(r1["lat_before"])
    worst = max(r1["lat_during"]) if r1["lat_during"] else float("nan")
    fmt = lambda e: (f"risk wrote {e['risk_out']} ORDERs (ring {e['ring_written']}), the sender read {e['sender_in']} "  # noqa: E731
                     f"(ring {e['ring_read']}); {ledger_text(e)}; "
                     f"dups {e['sender_dups']}; fills {e['journal_fills']} journaled / {e['venue_fills']} at the venue")
    restarts, restarts2 = r1["restarts"], r2["restarts"]
    return judged_row(
        "consumer_stall", checks,
        injected=(f"run 1: SIGSTOP features {stall_s:g} s (md ring 1,024 slots, drop), then SIGSTOP sender {bp_stall_s:g} s "
                  f"(orders ring 2 slots, backpressure); run 2: SIGSTOP sender >= 1 s (until {QUEUED_ORDERS} ORDERs "
                  f"wait), then SIGSTOP risk and SIGCONT sender, held {bp_stall_s:g} s (exec ring 2 slots, "
                  f"backpressure); each backpressure stall held up to {HOLD_EXTRA_S:g} s more until the ring is "
                  f"full; GTC orders near the mid "
                  f"(orders_flow); at least {min_orders} orders and {min_fills} fills required a run"),
        did=(f"md: {md_drops} drops counted (ring {md_end['dropped']}, feed out_drops {feed_end.get('out_drops')} in all), "
             f"BOOKs made {r1['rate_during']:.0f}/s during the stall vs {r1['rate_before']:.0f}/s before; orders: {bp['orders']}; "
             f"exec: {bp['exec']}; run 1: {fmt(ends1)}; run 2: {fmt(ends2)}"
             + (f"; count problems: {[b for _, b in counts.values() if b]}" if not all(ok for ok, _ in counts.values()) else "")
             + f"; restarts {restarts or 'none'} / {restarts2 or 'none'}"),
        figure=(f"md drops {md_drops}; orders full_events {bp['orders']['full_events']}, exec full_events "
                f"{bp['exec']['full_events']}; ORDERs written/read {ends1['ring_written']}/{ends1['sender_in']} and "
                f"{ends2['ring_written']}/{ends2['sender_in']}, dups {ends1['sender_dups']}+{ends2['sender_dups']}; "
                f"flow {flow['run 1'][1]} / {flow['run 2'][1]}; feed BOOK p99 {base:.0f} us before, {worst:.0f} us "
                f"during (not judged: the feed's latency window holds written BOOKs only)"),
        details={"lat_before_us": r1["lat_before"], "lat_during_us": r1["lat_during"], "backpressure": bp,
                 "ends": {"run 1": ends1, "run 2": ends2},
                 "orders_ledger": [ledger_entry("run 1", ends1), ledger_entry("run 2", ends2)],
                 "rate_before": r1["rate_before"],
                 "rate_during": r1["rate_during"], "prefix": r1["prefix"], "prefix_exec": r2["prefix"],
                 "restarts": [restarts, restarts2]},
    )


def _stall_md_and_orders(P, stall_s: float, bp_stall_s: float) -> dict:
    """Run 1: md (drop) and orders (backpressure) small; exec large, so the sender never waits on it.
    ``features`` stopped ``stall_s``, then ``sender`` ``bp_stall_s`` (``hold``); what each ring and the
    feed counted, the run's order ends after ``quiesce``, pids and restarts."""
    with P(rate=1_000, name="consumer_stall", text_hook=stall_config(md=1024, orders=2), model=FLOW_MODEL) as p:
        pids0 = p.pids()
        flowing(p)
        # the feed's rate before: BOOKs made over a second
        f0, t0 = p.stage("feed"), time.monotonic()
        lat_before = []
        for _ in range(10):
            lat_before.append(p.proc("feed")["p99_us"])
            time.sleep(0.1)
        f1, t1 = p.stage("feed"), time.monotonic()
        rate_before = (books_made(f1) - books_made(f0)) / (t1 - t0)
        md0 = p.ring("md")
        p.signal("features", signal.SIGSTOP)
        wait_stopped(pids0["features"])
        t0 = time.monotonic()
        f0 = p.stage("feed")
        lat_during = []
        while time.monotonic() - t0 < stall_s:
            time.sleep(0.1)
            lat_during.append(p.proc("feed")["p99_us"])
        md1, f1, t1 = p.ring("md"), p.stage("feed"), time.monotonic()
        rate_during = (books_made(f1) - books_made(f0)) / (t1 - t0)
        os.kill(pids0["features"], signal.SIGCONT)
        p.wait(lambda: p.proc("features")["msgs_in"] > 0 and p.ring("md")["depth"] < 64, 20, "features caught up")
        # the orders ring (2 slots): the sender stalled, the risk gateway must wait for room
        o0 = p.ring("orders")
        os.kill(pids0["sender"], signal.SIGSTOP)
        wait_stopped(pids0["sender"])
        hold(p, bp_stall_s, lambda: p.ring("orders")["full_events"] > o0["full_events"])
        o1 = p.ring("orders")
        os.kill(pids0["sender"], signal.SIGCONT)
        o_drained = soft_wait(p, lambda: p.ring("orders")["read_cursor"] >= o1["write_cursor"], 20)
        flow_after = soft_wait(p, lambda: books_made(p.stage("feed")) > books_made(f1)
                               and p.stage("sender").get("sent", 0) > 0, 10)
        settled = quiesce(p)
        ends = order_ends(p)
        st = p.status()
        md_end, feed_end = p.ring("md"), p.stage("feed")
        return {"pids0": pids0, "rate_before": rate_before, "rate_during": rate_during, "lat_before": lat_before,
                "lat_during": lat_during, "md0": md0, "md1": md1, "o0": o0, "o1": o1, "drained": o_drained,
                "flowing": flow_after, "settled": settled, "ends": ends, "md_end": md_end, "feed_end": feed_end,
                "pids1": {x["name"]: x["pid"] for x in st["processes"]},
                "restarts": {x["name"]: x["restarts"] for x in st["processes"] if x["restarts"]}, "prefix": p.prefix}


def _stall_exec(P, bp_stall_s: float) -> dict:
    """Run 2: exec (backpressure) small; orders large. The sender stalled for a second (orders wait in
    its ring), then the risk gateway stopped and the sender let go: its reports must wait for room."""
    with P(rate=1_000, name="consumer_stall_exec", text_hook=stall_config(exec_=2), model=FLOW_MODEL) as q:
        qpids0 = q.pids()
        flowing(q)
        os.kill(qpids0["sender"], signal.SIGSTOP)
        wait_stopped(qpids0["sender"])
        hold(q, 1.0, lambda: q.ring("orders")["depth"] >= QUEUED_ORDERS)
        e0 = q.ring("exec")
        os.kill(qpids0["risk"], signal.SIGSTOP)
        wait_stopped(qpids0["risk"])
        queued = q.ring("orders")["depth"]
        os.kill(qpids0["sender"], signal.SIGCONT)
        hold(q, bp_stall_s, lambda: q.ring("exec")["full_events"] > e0["full_events"])
        e1 = q.ring("exec")
        os.kill(qpids0["risk"], signal.SIGCONT)
        e_drained = soft_wait(q, lambda: q.ring("exec")["read_cursor"] >= e1["write_cursor"], 20)
        settled = quiesce(q)
        ends = order_ends(q)
        st2 = q.status()
        return {"pids0": qpids0, "e0": e0, "e1": e1, "queued": queued, "drained": e_drained, "settled": settled,
                "ends": ends, "pids1": {x["name"]: x["pid"] for x in st2["processes"]},
                "restarts": {x["name"]: x["restarts"] for x in st2["processes"] if x["restarts"]}, "prefix": q.prefix}
