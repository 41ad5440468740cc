"""The kill switch against the real pipeline (issue #9): run by ``bench.chaos`` and ``tests/chaos``.

``kill_switch``: lean quoting with GTC orders (they rest at the venue), then the ``kill-switch``
control command. Pass: no order request sent later than ``STOP_LIMIT_MS`` (100 ms) after it (the
sender's latency tap), no working order (venue, sender and risk ``open``) ``WATCH_S`` (2 s) after it,
risk state HALTED. The two time limits are judged in full mode (``make chaos``); quick mode (the tests)
waits until nothing is working (hang guard ``harness.QUICK_HANG_GUARD_S``), watches 1 s more, and
requires that no order request was sent once nothing was working, reporting the times against the limits.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench.chaos.harness import QUICK_HANG_GUARD_S, Row, judged_row, latency_taps, read_tap, soft_wait
from bench.chaos.rewrite import no_emergency, replace_process, set_risk_limits
from bench.pipeline_config import KEY
from pipeline.runtime.agent import MARK_ORDER_SENT, Agent, mark_code
from pipeline.trading.messages import INSTRUCTION_DTYPE, Action, Kind, OrderOrigin

#: the kill switch's time limits (judged in full mode): no order request later than this after the command
STOP_LIMIT_MS = 100
#: ... and nothing working this long after it
WATCH_S = 2.0


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
    text = replace_process(text, "llm", ct.process(
        "llm", "bench.chaos.kill_switch:FlowInjector", inputs=["sig_llm"], outputs=["instr"], wait="back-off",
        params={"every_ms": 50, "max_lots": 10, "offset_ticks": 20, "ttl_ms": 10000}))
    return no_emergency(set_risk_limits(text, FLOW_LIMITS))


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


def _settled(p) -> bool:
    """Nothing working: none at the venue, none open at the sender or the gateway, and risk HALTED."""
    return (venue_open_orders(p) == 0 and p.stage("sender").get("open", 0) == 0
            and (r := p.stage("risk")).get("open", 0) == 0 and r.get("state") == "HALTED")


def _pull_the_switch(p, quick: bool) -> dict:
    """The kill switch pulled on pipeline ``p``; what the sender, risk and the venue show at ``WATCH_S``
    after it and, in quick mode, once nothing is working (within the hang guard), then 1 s more."""
    t_ks = time.monotonic_ns()
    resp = p.control("kill-switch")
    t_ack = time.monotonic_ns()
    samples = []
    while time.monotonic_ns() - t_ks < WATCH_S * 1e9:
        samples.append((time.monotonic_ns() - t_ks, p.stage("sender").get("sent", 0), p.stage("venue").get("orders_placed", 0)))
        time.sleep(0.05)
    out = {"t_ks": t_ks, "t_ack": t_ack, "resp": resp, "samples": samples, "sender": p.stage("sender"),
           "risk": p.stage("risk"), "venue": p.stage("venue"), "venue_open": venue_open_orders(p), "t_settled": None}
    if quick:  # the time limits are full mode's: here, that it settles (hang guard), then a second of watching
        if soft_wait(p, lambda: _settled(p), QUICK_HANG_GUARD_S):
            out["t_settled"] = time.monotonic_ns()
        time.sleep(1.0)
        out.update(sender=p.stage("sender"), risk=p.stage("risk"), venue=p.stage("venue"), venue_open=venue_open_orders(p))
    return out


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
            k = _pull_the_switch(p, quick)
        tap = read_tap(lat, "sender")
    t_ks, sender, risk, venue_open_after = k["t_ks"], k["sender"], k["risk"], k["venue_open"]
    sent_codes = [mark_code(MARK_ORDER_SENT, o) for o in OrderOrigin]
    sent = tap[np.isin(tap["code"], sent_codes)]
    after = sent[sent["at_ns"] > t_ks + STOP_LIMIT_MS * 1_000_000]
    last_ms = (int(sent["at_ns"][sent["at_ns"] > t_ks].max()) - t_ks) / 1e6 if (sent["at_ns"] > t_ks).any() else None
    nothing_working = (venue_open_after == 0 and sender.get("open", 0) == 0 and risk.get("open", 0) == 0)
    if quick:
        settled = k["t_settled"] is not None
        late = int((sent["at_ns"] > k["t_settled"]).sum()) if settled else -1
        stop_check = {"order requests stopped: none once nothing was working, nor in the second after "
                      f"(the {STOP_LIMIT_MS} ms limit is judged in full mode)": settled and late == 0,
                      "zero working orders (venue, sender, risk; the 2 s limit is judged in full mode)": nothing_working}
    else:
        stop_check = {f"zero order requests > {STOP_LIMIT_MS} ms after": after.size == 0,
                      f"zero working orders after {WATCH_S:g} s (venue, sender, risk)": nothing_working}
    checks = {
        "orders were flowing and working": sent_rate > 0 and sent.size > 0 and venue_open_before > 0,
        "kill switch accepted": bool(k["resp"].get("ok")),
        **stop_check,
        "risk HALTED": risk.get("state") == "HALTED",
    }
    return judged_row(
        "kill_switch", checks, name_failed=False,
        injected=f"kill-switch command after {load_s:.0f} s of GTC orders (FlowInjector) ({sent_rate:.0f} orders/s sent, "
                 f"{venue_open_before} working at the venue)",
        did=f"order requests after +{STOP_LIMIT_MS} ms: {after.size}; last order request at "
            f"{'none after the command' if last_ms is None else f'+{last_ms:.1f} ms'}; after {WATCH_S:g} s"
            f"{' and settling' if quick else ''} venue working {venue_open_after}, sender open "
            f"{sender.get('open')}, risk open {risk.get('open')}, risk {risk.get('state')}",
        figure=f"{after.size} orders after {STOP_LIMIT_MS} ms{' (limit judged in full mode)' if quick else ''}, "
               f"{venue_open_after} working after {WATCH_S:g} s{' and settling' if quick else ''}",
        details={"ack_ms": (k["t_ack"] - t_ks) / 1e6, "samples": k["samples"][-5:], "last_request_ms": last_ms,
                 "venue": {x: k["venue"].get(x) for x in ("orders_placed", "cancels", "fills")}})
