"""Orders flowing through the chaos pipeline, and the pipeline settled and reconciled after a fault:
the config with orders and fills flowing (``orders_flow``, ``FLOW_MODEL``), the least flow a run must
carry (``MIN_ORDERS``, ``MIN_FILLS``, ``flow_check``), ``quiesce`` (halt and wait until nothing is
open or in flight), the sender's journal against the venue and the risk gateway (``reconcile``,
positions in ``whole_lots``), every NEW order the risk gateway approved accounted for from its audit log
(``new_orders_ledger``, ``ledger_problems``), and every ORDER counted at both ends (``order_counts_check``)."""

from __future__ import annotations

import math
import re
import time

from bench.chaos.harness import read_audit, soft_wait
from pipeline.trading.journal import PENDING, UNKNOWN, replay

#: the least each pipeline run of sigkill_each and consumer_stall must carry, quick or full: NEW orders
#: journaled by the sender and fills journaled, so that "0 lost, 0 duplicated, positions equal" is
#: about real orders (with orders_flow the 2-core VM made ~10-30 orders and ~5-20 fills a second,
#: 2026-12-01, loaded by other tests; each run waits for this much flow before its fault, at most
#: ``FLOW_WAIT_S``)
MIN_ORDERS = 20
MIN_FILLS = 5
FLOW_WAIT_S = 20.0

#: the fast stage's classifier where orders must flow (sigkill_each, consumer_stall): bench.pipeline's
#: hand-set MLP, which follows the book imbalance, so LEAN signals come at a known, high rate; the
#: shipped model (models/generated/fast.onnx) LEANs on about 1 % of updates by its card's thresholds,
#: too few for the order minimums of a scenario's window (not measured in chaos runs)
FLOW_MODEL = "hand-set"

#: the llm stage's minimum gap between generations where orders must flow (``orders_flow``)
LLM_GAP_MS = 2000


def orders_flow(text: str) -> str:
    """The config with orders and fills flowing (with ``FLOW_MODEL``'s LEAN signals): the risk
    gateway's lean quotes GTC (they rest at the venue, so its market fills them) at
    ``risk_aversion = 1.0`` and ``lean_offset_ticks = 0`` (near the mid; the bench's 20 ticks further
    out, so that nothing fills there), and the
    fast stage's EMERGENCY label off (threshold 2: never; buy / sell at procs.fast's defaults), so no
    cool-down stops the flow, and the llm stage (if any) asking at most every ``LLM_GAP_MS``. On the 2-core VM (2026-12-01) that is ~30 ORDERs and ~20 fills a second.

    Raises:
        ValueError: the config text lacks what it rewrites (the bench config changed).
    """
    new, k1 = re.subn(r'(limits = \{[^}]*)tif = "IOC"', r'\1tif = "GTC"', text, count=1)
    new, k2 = re.subn(r"(limits = \{[^}]*)risk_aversion = [0-9.]+", r"\1risk_aversion = 1.0", new, count=1)
    # at the touch, not the bench's lean_offset_ticks away from it (there, orders must never fill)
    new, k4 = re.subn(r"(limits = \{[^}]*)lean_offset_ticks = \d+", r"\1lean_offset_ticks = 0", new, count=1)
    flow_th = "thresholds = { buy = 0.4, sell = 0.4, emergency = 2.0 }"
    new, k3 = re.subn(r'(module = "procs.fast:FastAgent"\n(?:[^\n]*\n)*?params = \{[^\n]*?)thresholds = \{[^}]*\}',
                      r"\g<1>" + flow_th, new, count=1)  # the model card's thresholds, when the config has them
    if not k3:
        new, k3 = re.subn(r'(module = "procs.fast:FastAgent"\n(?:[^\n]*\n)*?params = \{ )', r"\g<1>" + flow_th + ", ",
                          new, count=1)
    if (k1, k2, k3, k4) != (1, 1, 1, 1):
        raise ValueError(f"orders_flow: the config text changed (tif {k1}, risk_aversion {k2}, fast params {k3}, "
                         f"lean_offset_ticks {k4})")
    # the llm stage (when there is one) asks at most every LLM_GAP_MS: the stand-in's instructions all
    # validate under the grammar, and each (a CANCEL, a FLATTEN, a plan that blocks lean quotes for its
    # ttl) would otherwise stop the lean flow several times a second
    new, _ = re.subn(r'(module = "procs.llm:LlmAgent"\n(?:[^\n]*\n)*?params = \{[^\n]*?)min_gap_ms = \d+',
                     r"\g<1>min_gap_ms = " + str(LLM_GAP_MS), new, count=1)
    return new


def flowing(p, timeout_s: float = FLOW_WAIT_S) -> None:
    """Until the sender has sent ``MIN_ORDERS`` orders and had ``MIN_FILLS`` fills, at most ``timeout_s``
    (soft: ``flow_check`` on the journal at the end judges)."""
    soft_wait(p, lambda: (s := p.stage("sender")).get("sent", 0) >= MIN_ORDERS and s.get("fills", 0) >= MIN_FILLS,
              timeout_s)


def quiesce(p, timeout_s: float = 20.0) -> bool:
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

    if not soft_wait(p, settled, timeout_s):
        return False
    time.sleep(1.0)
    return soft_wait(p, settled, timeout_s)


def reconcile(p) -> dict:
    """The sender's journal against the venue's ledger and the risk gateway (after ``quiesce``)."""
    journal = p.tmp / "run" / "sender.journal"
    st, _ = replay(journal.read_bytes())
    acked = [o for o in st.orders.values() if o.vid]
    unresolved = [o.oid for o in st.orders.values() if o.status in (PENDING, UNKNOWN)]
    venue = p.stage("venue")
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


def flow_check(orders: int, fills: int, min_orders: int, min_fills: int) -> tuple[bool, str]:
    """Whether a run carried enough to judge (at least ``min_orders`` NEW orders and ``min_fills``
    fills), and the figures: "0 lost, 0 duplicated, positions equal" over no order is no evidence."""
    ok = orders >= min_orders and fills >= min_fills
    return ok, f"{orders} orders (min {min_orders}), {fills} fills (min {min_fills})"


#: the reasons the sender refuses a NEW with before its journal holds it (``sender.admission``): HALTED (its
#: journal could not take the intent, or its fsync stalled), MALFORMED (does not fit the instrument)
NEW_REFUSALS = ("HALTED", "MALFORMED")


#: how long before a machine crash of the sender an approved NEW may have been approved and still be the
#: crash's (unsent in the sender's memory when the machine went, or sent and ended without a fill inside the
#: journal's cut window); a healthy sender sends an order within milliseconds of its approval
CRASH_WINDOW_NS = 1_000_000_000


def new_orders_ledger(audit: list[dict], journal_oids, crash_ns=(), crash_window_ns: int = CRASH_WINDOW_NS) -> dict:
    """Every NEW order the risk gateway approved, accounted for by id: ``audit`` is its audit log (one
    dict an event, ``harness.read_audit``: appended to by every life of the risk stage, so it spans its
    restarts; an ``OrderApproved`` is written before its ORDER leaves), ``journal_oids`` the order ids of
    the sender's journal (every life of the sender: it replays and appends to the same file).

    Returns ``risk_approved`` (OrderApproved events), ``journal_new`` (orders in the journal),
    ``sender_refused`` (approved, not journaled, answered REJECTED with a reason the sender refuses a NEW
    with before its journal takes it, ``NEW_REFUSALS``: the audit's ``RejectReceived``; a cancel of an
    order the sender does not know is answered NOT_FOUND, which says nothing of the NEW) with
    ``refused_by_reason`` (code -> count), ``lost`` (approved, neither journaled nor refused) and
    ``unapproved`` (journaled with no approval on record), with up to 10 ids of each of the last two
    (``lost_ids``, ``unapproved_ids``). Every approved NEW is journaled or refused exactly when ``lost`` and
    ``unapproved`` are 0 (then ``risk_approved == journal_new + sender_refused``). A risk stage killed
    between its audit write and the ORDER's write, or a refusal read by a risk stage killed before its
    end-of-batch audit write, counts as lost: a false alarm, never a hidden loss.

    ``crash_ns``: the CLOCK_MONOTONIC times of machine crashes of the sender (``position.machine_crash_sender``).
    An approved NEW neither journaled nor refused whose approval (its audit ``ts_ns``) came at most
    ``crash_window_ns`` before one of them is ``crash_dropped`` (ids in ``crash_dropped_ids``), not lost: the
    crash's cut window took it, either held unsent in the sender's memory when the machine went, or sent
    and ended at the venue without a fill before the restart (not adopted: it holds no position and is not
    open; ``position.machine_crash_sender`` bounds those by the venue's count). A machine crash takes the
    risk stage's approval with it; here risk lives on and re-syncs from the restarted sender. Any other is
    lost, as without crashes."""
    approved = {int(e["order_id"]) for e in audit if e.get("ev") == "OrderApproved" and "order_id" in e}
    approved_ns = {int(e["order_id"]): int(e.get("ts_ns", -1)) for e in audit
                   if e.get("ev") == "OrderApproved" and "order_id" in e}
    journaled = {int(o) for o in journal_oids}
    refused: dict[int, str] = {}
    for e in audit:
        if (e.get("ev") == "RejectReceived" and e.get("code") in NEW_REFUSALS and e.get("order_id") in approved
                and e["order_id"] not in journaled):
            refused.setdefault(int(e["order_id"]), str(e.get("code", "?")))
    unsent = sorted(approved - journaled - refused.keys())
    dropped = [o for o in unsent if any(0 <= c - approved_ns[o] <= crash_window_ns for c in crash_ns)]
    lost = [o for o in unsent if o not in set(dropped)]
    unapproved = sorted(journaled - approved)
    by_reason: dict[str, int] = {}
    for code in refused.values():
        by_reason[code] = by_reason.get(code, 0) + 1
    return {"risk_approved": len(approved), "journal_new": len(journaled), "sender_refused": len(refused),
            "refused_by_reason": by_reason, "crash_dropped": len(dropped), "lost": len(lost),
            "unapproved": len(unapproved), "crash_dropped_ids": dropped[:10], "lost_ids": lost[:10],
            "unapproved_ids": unapproved[:10]}


def venue_journal_lost(led: dict, crash_dropped: int = 0) -> int:
    """Orders lost between the venue and the journal, from ``reconcile``'s ``led``: venue orders the journal
    lacks beyond the ``crash_dropped`` a machine crash's cut window may have taken (ended without a fill
    before the restart, so not adopted), journaled orders the venue lacks, and unresolved ones."""
    unjournaled = led["venue_placed"] - led["journal_acked"]
    return max(0, unjournaled - crash_dropped) + max(0, -unjournaled) + led["unresolved"]


def ledger_problems(c: dict) -> list[str]:
    """What does not hold of ``new_orders_ledger``'s counts ``c``: every NEW approved is journaled or
    refused with a reason (none lost), and nothing journaled without an approval (counts without
    ``lost`` / ``unapproved``: judged on ``risk_approved == journal_new + sender_refused``)."""
    bad = []
    refused, unapproved, dropped = c.get("sender_refused", 0), c.get("unapproved", 0), c.get("crash_dropped", 0)
    lost = c.get("lost", c["risk_approved"] - c["journal_new"] - refused - dropped + unapproved)
    if lost or c["risk_approved"] != c["journal_new"] + refused + dropped - unapproved:
        why = ", ".join(f"{k} {n}" for k, n in sorted(c.get("refused_by_reason", {}).items()))
        bad.append(f"NEW orders approved by risk {c['risk_approved']}, journaled by the sender {c['journal_new']}, "
                   f"refused by it {refused}" + (f" ({why})" if why else "") + f": {lost} lost"
                   + (f" {c['lost_ids']}" if c.get("lost_ids") else ""))
    if unapproved:
        bad.append(f"NEW orders journaled with no approval in risk's audit log: {unapproved} "
                   f"{c.get('unapproved_ids', [])}")
    return bad


#: the check of ``ledger_problems``, by name, in every scenario that judges it
LOST_CHECK = "0 lost: every NEW risk approved (its audit log) journaled or refused with a reason"
#: the counts of ``new_orders_ledger`` a report shows, per scenario and run
LEDGER_KEYS = ("risk_approved", "journal_new", "sender_refused", "refused_by_reason", "crash_dropped", "lost",
               "unapproved")


def ledger_entry(run: str, c: dict) -> dict:
    """The report's line of one pipeline run's ledger (``LEDGER_KEYS`` of ``c``, named ``run``)."""
    return {"run": run, **{k: c.get(k) for k in LEDGER_KEYS}}


def ledger_text(c: dict) -> str:
    """The ledger in words: approved (risk's audit log) = journaled + refused (reasons) + lost."""
    why = ", ".join(f"{k} {n}" for k, n in sorted((c.get("refused_by_reason") or {}).items()))
    return (f"NEW orders approved by risk (audit log) {c['risk_approved']} = journaled by the sender "
            f"{c['journal_new']} + refused {c['sender_refused']}{f' ({why})' if why else ''}"
            + (f" + taken by a machine crash's window {c['crash_dropped']}" if c.get("crash_dropped") else "")
            + f"; lost {c['lost']}, journaled unapproved {c['unapproved']}")


def ledger_table(rows) -> list[str]:
    """The report's orders ledger (markdown lines): for each row (``harness.Row``) with
    ``details["orders_ledger"]`` (``ledger_entry`` lines), one line a pipeline run; none: no lines."""
    lines = [(r.scenario, e) for r in rows for e in r.details.get("orders_ledger", [])]
    if not lines:
        return []
    md = ["", "## Orders ledger", "",
          "NEW orders approved by the risk gateway (its audit log, across its restarts) = journaled by the sender "
          "+ refused by the sender (reason) + taken by a machine crash of the sender (approved within "
          f"{CRASH_WINDOW_NS / 1e9:g} s before it: unsent, or ended at the venue without a fill) + lost; "
          "unapproved: journaled with no approval on record.", "",
          "| scenario | run | approved (risk audit) | journaled (sender) | refused (reason) | taken by a crash | lost "
          "| unapproved |",
          "|---|---|---|---|---|---|---|---|"]
    for scenario, e in lines:
        why = ", ".join(f"{k} {n}" for k, n in sorted((e.get("refused_by_reason") or {}).items()))
        md.append(f"| {scenario} | {e.get('run') or '-'} | {e.get('risk_approved')} | {e.get('journal_new')} | "
                  f"{e.get('sender_refused')}{f' ({why})' if why else ''} | {e.get('crash_dropped') or 0} | "
                  f"{e.get('lost')} | {e.get('unapproved')} |")
    return md


def order_ledger(p, crash_ns=()) -> dict:
    """``new_orders_ledger`` of pipeline ``p`` (after ``quiesce``): its risk audit log against its sender's
    journal (``crash_ns``: the sender's machine crashes, if any)."""
    st, _ = replay((p.tmp / "run" / "sender.journal").read_bytes())
    return new_orders_ledger(read_audit(p), st.orders.keys(), crash_ns)


def order_counts_check(c: dict) -> tuple[bool, list[str]]:
    """Every ORDER the risk gateway wrote arrived at the sender, none twice, counted from both ends
    (after ``quiesce``, in a run without restarts): ``risk_out`` (risk's own msgs_out) ==
    ``ring_written`` (the orders ring's write cursor) == ``ring_read`` (its read cursor) == ``sender_in``
    (the sender's msgs_in); every NEW approved in risk's audit log journaled by the sender or refused by
    it with a reason (``ledger_problems`` of ``new_orders_ledger``'s counts: ``risk_approved`` ==
    ``journal_new`` + ``sender_refused``, e.g. NEWs answered REJECTED HALTED without an intent while the
    journal's fsync was stalled: a stopped sender's fsync, resumed, counts as stalled until it returns;
    none ``lost``, none ``unapproved``); ``sender_dups`` (a NEW read again) == 0 and ``sender_malformed``
    == 0. Returns (ok, what did not hold)."""
    ends = {k: c[k] for k in ("risk_out", "ring_written", "ring_read", "sender_in")}
    bad = [] if len(set(ends.values())) == 1 else [
        "ORDERs written != read: " + ", ".join(f"{k} {v}" for k, v in ends.items())]
    bad += ledger_problems(c)
    if c["sender_dups"]:
        bad.append(f"NEW orders read twice by the sender: {c['sender_dups']}")
    if c["sender_malformed"]:
        bad.append(f"ORDERs the sender could not read: {c['sender_malformed']}")
    return not bad, bad


def order_ends(p) -> dict:
    """The counts ``order_counts_check`` compares, and the run's flow (after ``quiesce``)."""
    st, _ = replay((p.tmp / "run" / "sender.journal").read_bytes())
    risk, sender, ring = p.proc("risk"), p.proc("sender"), p.ring("orders")
    return {"risk_out": risk["msgs_out"], "ring_written": ring["write_cursor"], "ring_read": ring["read_cursor"],
            "sender_in": sender["msgs_in"], **new_orders_ledger(read_audit(p), st.orders.keys()),
            "sender_jstalled": sender["stage"].get("jstalled", 0), "sender_dups": sender["stage"].get("dups", -1),
            "sender_malformed": sender["stage"].get("malformed", -1), "journal_fills": len(st.trade_ids),
            "venue_fills": int(p.stage("venue").get("fills", -1)), "risk_cancels": risk["stage"].get("cancels", -1)}
