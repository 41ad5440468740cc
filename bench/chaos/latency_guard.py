"""The latency guard against the real pipeline (issue #26): run by ``bench.chaos`` and ``tests/chaos``.

``latency_guard``: the market at 200 updates/s, orders flowing (``kill_switch.order_flow``: the llm
stage replaced by an injector of BUY plans of growing size and FLATTEN, GTC near the mid), the
features stage replaced by
``SlowFeatures`` (``procs.features``' agent that sleeps after each batch for as many milliseconds as
``<run_dir>/features.delay_ms`` says), and a latency budget on features (``GUARD``). Phases: fast
until the guard has armed features; slowed over the reduce budget, until the supervisor sends
REDUCE_ONLY and the risk gateway is REDUCING, held ``hold_s`` (quick 1 s, full 10 s); slowed over the
halt budget, until HALTED, held; fast again, held (the guard must not lift itself); then the
operator's ``resume``. No budget for features in the status (no guard) is a FAIL.
A run in which features' own p99 never came within the reduce budget before the slowdown (the guard
never armed: a machine too loaded to tell a stage slowed on purpose from its own latency) is
INCONCLUSIVE, not a pass.

Pass (``judge_audit`` over the risk gateway's audit log, and the status): the gateway went REDUCING
with cause ``reduce_only:latency_budget``, then HALTED with cause ``halt:latency_budget``; every order
it approved after REDUCING reduced the position it had then (no risk-increasing order leaves), and
risk-increasing ones were refused with REDUCING (so the check is about real orders); none approved
after HALTED; still HALTED, and the guard too, after the stage was fast again; ACTIVE after resume.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.chaos.flow import FLOW_MODEL
from bench.chaos.harness import FAIL, INCONCLUSIVE, Row, judged_row, read_audit, soft_wait
from bench.chaos.kill_switch import order_flow
from bench.chaos.rewrite import with_process_lines
from pipeline.trading.messages import Side
from procs.features import FeatureAgent

#: the file in the run dir ``SlowFeatures`` reads its delay from
DELAY_FILE = "features.delay_ms"
#: features' budgets (p99 since the venue frame: a few ms here, tens in a burst on a loaded 2-core box)
REDUCE_US, HALT_US = 100_000, 600_000
#: the delays after each batch that put features' p99 over the reduce budget only (about the delay:
#: 200 ms), then over the halt budget too (1 s and more)
SLOW_MS, SLOWER_MS = 200, 1_000
GUARD = f"""
[latency_guard]
window_ms = 1000
min_samples = 3

[latency_guard.budgets]
features = {{ reduce_p99_us = {REDUCE_US}, halt_p99_us = {HALT_US} }}
"""
LOT_EPS = 1e-9
#: how long features may take to arm the guard (its own p99 within budget) before the run is INCONCLUSIVE
ARM_WAIT_S = 60.0
#: how long the risk gateway may take to go REDUCING, then HALTED, after each slowdown (the window is 1 s)
STATE_WAIT_S = 20.0


class SlowFeatures(FeatureAgent):
    """``procs.features.FeatureAgent`` slowed on purpose: after each batch with work it sleeps the
    milliseconds written in ``<run_dir>/features.delay_ms`` (read every 50 ms; missing: 0), so its
    outputs wait for it. Stage stats: ``delay_ms`` once it applies."""

    def on_start(self, ctx) -> None:
        super().on_start(ctx)
        self.delay_path = Path(ctx.config.supervisor.run_dir) / DELAY_FILE
        self.delay_ms = 0
        self.next_look_ns = 0
        self.stats["delay_ms"] = 0

    def do_work(self) -> int:
        now = self.ctx.clock()
        if now >= self.next_look_ns:
            try:
                self.delay_ms = int(self.delay_path.read_text().strip() or 0)
            except (FileNotFoundError, ValueError):
                self.delay_ms = 0
            self.stats["delay_ms"] = self.delay_ms
            self.next_look_ns = now + 50_000_000
        n = super().do_work()
        if n and self.delay_ms:
            time.sleep(self.delay_ms / 1000)
        return n


def guard_config(text: str) -> str:
    """Config hook: orders flowing (``order_flow``), features slowed on purpose (``SlowFeatures``, its
    heartbeat timeout long enough for a slow batch), and the budgets (``GUARD``)."""
    text = with_process_lines(order_flow(text), "features",
                              'module = "bench.chaos.latency_guard:SlowFeatures"\nheartbeat_timeout_ms = 20000')
    return text + GUARD


def reduces(side: int, size: float, position: float) -> bool:
    """Whether an order of ``side`` and ``size`` (base units) only reduces ``position`` (not to the other
    side)."""
    if side == Side.SELL:
        return position > LOT_EPS and size <= position + LOT_EPS
    if side == Side.BUY:
        return position < -LOT_EPS and size <= -position + LOT_EPS
    return False


def judge_audit(events: list[dict]) -> dict:
    """The facts of an audit log (one dict an event, in order) the scenario is judged on: the index of
    the first REDUCING with cause ``reduce_only:latency_budget`` and of the first HALTED with cause
    ``halt:latency_budget`` after it (None: not there); between them, the orders approved (each
    ``reduces`` the position the gateway had then, from the latest Synced / FillApplied) and those
    denied REDUCING; after the halt and up to the operator's resume (cause ``resume``: nothing after it
    is judged), the orders approved and whether anything else moved the gateway out of HALTED."""
    pos: dict[int, float] = {}
    reduced_at = halted_at = None
    approved, increasing, denied_reducing, after_halt, lifted = 0, [], 0, 0, False
    for i, ev in enumerate(events):
        kind = ev.get("ev")
        if kind == "Synced":
            pos.update({int(k): float(v) for k, v in ev.get("positions", {}).items()})
        elif kind == "FillApplied":
            pos[ev["instrument_id"]] = float(ev["position"])
        elif kind == "StateChanged":
            if reduced_at is None and ev["new"] == "REDUCING" and ev["cause"] == "reduce_only:latency_budget":
                reduced_at = i
            elif (reduced_at is not None and halted_at is None and ev["new"] == "HALTED"
                  and ev["cause"] == "halt:latency_budget"):
                halted_at = i
            elif halted_at is not None and ev["cause"] == "resume":
                break  # the operator's resume: what follows is trading again, not judged
            elif halted_at is not None and ev["new"] != "HALTED":
                lifted = True  # loosened by something other than the operator's resume
        elif reduced_at is not None and kind == "OrderApproved":
            if halted_at is not None:
                after_halt += 1
                continue
            approved += 1
            here = pos.get(ev["instrument_id"], 0.0)
            if not reduces(ev["side"], ev["size"], here):
                increasing.append({"order_id": ev["order_id"], "side": ev["side"], "size": ev["size"], "position": here})
        elif reduced_at is not None and halted_at is None and kind == "OrderDenied" and ev.get("code") == "REDUCING":
            denied_reducing += 1
    return {"reduced_at": reduced_at, "halted_at": halted_at, "approved_while_reducing": approved,
            "increasing": increasing, "denied_reducing": denied_reducing, "approved_after_halt": after_halt,
            "lifted_without_resume": lifted}


def _slow(p, ms: int) -> None:
    """Ask ``SlowFeatures`` for ``ms`` and wait until it says it applies it."""
    path = Path(p.cfg.supervisor.run_dir) / DELAY_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(ms))
    tmp.replace(path)
    p.wait(lambda: p.stage("features").get("delay_ms") == ms, 10, f"features slowed to {ms} ms")


def latency_guard(P, quick: bool) -> Row:
    hold_s = 1.0 if quick else 10.0
    # 200 updates/s: orders flow as at 1,000 (the injector places them), with less of the box taken by
    # the market, so features' own p99 is far under its budget whatever else the machine runs
    with P(rate=200, name="latency_guard", llm=True, text_hook=guard_config, model=FLOW_MODEL) as p:
        guard = lambda: p.status()["latency_guard"]  # noqa: E731
        if "features" not in guard()["stages"]:
            return Row(scenario="latency_guard", injected="nothing", did="the supervisor has no latency budget for "
                       "features (no guard to trip)", figure="-", verdict=FAIL, details={"guard": guard()})
        if not soft_wait(p, lambda: guard()["stages"]["features"]["armed"], ARM_WAIT_S):
            st = p.proc("features")
            return Row(scenario="latency_guard", injected="nothing: the guard never armed", verdict=INCONCLUSIVE,
                       did=f"features' p99 stayed above its {REDUCE_US // 1000} ms reduce budget for {ARM_WAIT_S:g} s "
                           f"before any slowdown (p50 {st['p50_us']:.0f} us, p99 {st['p99_us']:.0f} us)",
                       figure="-", details={"guard": guard()})
        soft_wait(p, lambda: p.stage("sender").get("sent", 0) >= 5, 20)  # orders flowing (judged on the audit)
        time.sleep(hold_s)
        quiet = guard()["level"] == 0
        t0 = time.monotonic()
        _slow(p, SLOW_MS)
        went = soft_wait(p, lambda: p.stage("risk").get("state") == "REDUCING", STATE_WAIT_S)
        to_reducing_s = time.monotonic() - t0 if went else None
        time.sleep(hold_s)
        reducing = {"guard": guard(), "risk": p.stage("risk")}
        t0 = time.monotonic()
        _slow(p, SLOWER_MS)
        went = soft_wait(p, lambda: p.stage("risk").get("state") == "HALTED", STATE_WAIT_S)
        to_halted_s = time.monotonic() - t0 if went else None
        time.sleep(hold_s)
        _slow(p, 0)
        time.sleep(hold_s)
        held = {"guard": guard(), "risk_state": p.stage("risk").get("state"), "halted": p.status()["halted"]}
        resumed = p.control("resume")
        soft_wait(p, lambda: p.stage("risk").get("state") == "ACTIVE", 10)
        after = {"guard": guard(), "risk_state": p.stage("risk").get("state")}
        audit = judge_audit(read_audit(p))
    g = reducing["guard"]
    checks = {
        "no trip while features was fast": quiet,
        "REDUCING for latency_budget, then HALTED for latency_budget (audit)":
            audit["reduced_at"] is not None and audit["halted_at"] is not None,
        "no risk-increasing order approved while REDUCING": not audit["increasing"],
        "risk-increasing orders refused with REDUCING (there were some)": audit["denied_reducing"] > 0,
        "no order approved after HALTED": audit["approved_after_halt"] == 0,
        "still HALTED once features was fast again (no recovery but resume)":
            held["guard"]["state"] == "HALTED" and held["risk_state"] == "HALTED" and held["halted"]
            and not audit["lifted_without_resume"],
        "the reason in the status": g["state"] == "REDUCING" and g["reason"].startswith("features p99 above"),
        "ACTIVE after the operator's resume, the guard OK": bool(resumed.get("ok")) and after["risk_state"] == "ACTIVE"
                                                              and after["guard"]["level"] == 0,
    }
    return judged_row(
        "latency_guard", checks,
        injected=(f"features slowed on purpose ({SLOW_MS} ms, then {SLOWER_MS} ms after each batch; budgets p99 "
                  f"{REDUCE_US // 1000} ms reduce / {HALT_US // 1000} ms halt, window 1 s) while GTC orders flow "
                  f"(FlowInjector); then fast again; then resume"),
        did=(f"REDUCING {secs(to_reducing_s)} after the first slowdown ({g['reason'] or 'no reason'}); "
             f"{audit['approved_while_reducing']} orders approved while REDUCING, "
             f"{len(audit['increasing'])} risk-increasing, {audit['denied_reducing']} denied REDUCING; HALTED "
             f"{secs(to_halted_s)} after the second, {audit['approved_after_halt']} approved after; "
             f"{held['risk_state']} {hold_s:g} s after features was fast again; {after['risk_state']} after resume"),
        figure=(f"{len(audit['increasing'])} risk-increasing orders after REDUCING, {audit['approved_after_halt']} "
                f"orders after HALTED; REDUCING after {secs(to_reducing_s)}, HALTED after {secs(to_halted_s)}"),
        details={"audit": audit, "reducing": reducing, "held": held, "after": after,
                 "to_reducing_s": to_reducing_s, "to_halted_s": to_halted_s})


def secs(s: float | None) -> str:
    """A duration for the row, or "never" (the state did not come within ``STATE_WAIT_S``)."""
    return "never" if s is None else f"{s:.1f} s"
