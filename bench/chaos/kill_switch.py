"""The kill switch against the real pipeline (issue #9): run by ``bench.chaos`` and ``tests/chaos``.

``kill_switch``: lean quoting with GTC orders (they rest at the venue), then the ``kill-switch``
control command. Pass: no order request sent later than 100 ms after it (the sender's latency tap),
no working order (sender and risk ``open``) 2 s after it, risk state HALTED.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench.chaos.harness import Row, judged_row, latency_taps, read_tap
from bench.chaos.rewrite import no_emergency, replace_process, set_risk_limits
from bench.pipeline_config import KEY
from pipeline.runtime.agent import MARK_ORDER_SENT, Agent, mark_code
from pipeline.trading.messages import INSTRUCTION_DTYPE, Action, Kind, OrderOrigin


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
    return judged_row(
        "kill_switch", checks, name_failed=False,
        injected=f"kill-switch command after {load_s:.0f} s of GTC orders (FlowInjector) ({sent_rate:.0f} orders/s sent, "
                 f"{venue_open_before} working at the venue)",
        did=f"order requests after +100 ms: {after.size}; last order request at "
            f"{'none after the command' if last_ms is None else f'+{last_ms:.1f} ms'}; after 2 s venue working {venue_open_after}, sender open "
            f"{sender.get('open')}, risk open {risk.get('open')}, risk {risk.get('state')}",
        figure=f"{after.size} orders after 100 ms, {venue_open_after} working after 2 s",
        details={"ack_ms": (t_ack - t_ks) / 1e6, "samples": samples[-5:],
                 "venue": {k: venue.get(k) for k in ("orders_placed", "cancels", "fills")}})
