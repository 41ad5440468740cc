"""``/health``: 200 while every stage is RUNNING and trading is not halted, else 503; the JSON body
says why. A pure function of a snapshot (``ops.snapshot``).

Trading counts as halted when the supervisor has halted it (an operator halt or kill switch, a FATAL
stage) or a risk gateway reports HALTED (a halt it decided itself: the daily loss limit). The
supervisor's latency guard above OK (a stage's p99 over its budget: REDUCING or HALTED until an
operator resumes) is a 503 too, with its reason. A gateway that is REDUCING for another reason (a
position that differed from the venue's) is still trading: it is named in the body, with a 200.
"""

from __future__ import annotations

from pipeline.runtime.ops.metrics import stage_kind

RUNNING = "RUNNING"


def health(snap: dict) -> tuple[int, dict]:
    """(HTTP status, body) for ``snap``. The body::

        {"ok": bool, "why": [sentences, empty when ok], "stages": {name: state},
         "risk": {risk stage: ACTIVE / REDUCING / HALTED}, "halted": the supervisor's flag,
         "latency_guard": the guard's state (OK / REDUCING / HALTED; absent without a guard)}
    """
    stages = {p["name"]: p["state"] for p in snap["processes"]}
    risk = {p["name"]: (p.get("stage") or {})["state"] for p in snap["processes"]
            if stage_kind(p.get("stage") or {}) == "risk"}
    why = []
    if not stages:
        why.append("no stage is configured")
    why += [f"stage {name} is {state}, not RUNNING" for name, state in stages.items() if state != RUNNING]
    if snap["halted"]:
        why.append("trading is halted by the supervisor (operator halt, kill switch or a FATAL stage) until resume")
    why += [f"risk gateway {name} is HALTED" for name, state in risk.items() if state == "HALTED"]
    guard = snap.get("latency_guard") or {}
    if guard.get("level"):
        why.append(f"latency guard {guard.get('state')}: {guard.get('reason') or 'a stage over its budget'}")
    body = {"ok": not why, "why": why, "stages": stages, "risk": risk, "halted": bool(snap["halted"])}
    if guard:
        body["latency_guard"] = guard.get("state")
    return (200 if not why else 503), body
