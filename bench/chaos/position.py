"""Position and account faults against the real pipeline (issue #20); run by ``bench.chaos`` and ``tests/chaos``.

Acceptance (issue #20): after each scenario, the risk gateway's positions equal the venue's, or trading
is REDUCING with the difference shown (``pdiff_lots_<iid>``). Each scenario is ``fn(ChaosPipeline, quick)
-> Row`` like those of ``bench.chaos.process``; orders flow with ``bench.chaos.flow.orders_flow`` (GTC lean quotes near the
mid). Positions are compared in whole lots (``whole_lots``): the venue's from its status counter
``positions`` (base units per symbol), the gateway's from ``pos_lots_<iid>``.

- ``disk_full_journal``: the sender's journal on a real tmpfs of ``TMPFS_SIZE`` (``mount -t tmpfs``; a
  mount that fails makes the verdict INCONCLUSIVE with the reason, never PASS). With orders flowing
  (at least ``MIN_PLACED`` orders placed at the venue), a filler file fills the tmpfs until ENOSPC, held
  3 s (full: 10 s): the sender must count ``journal_errors`` > 0; the filler is removed, 2 s more, then
  ``restart sender``; after it re-synced and 2 s more flow, a ``halt`` and settling: every instrument's
  position at the venue == the gateway's, or the gateway was REDUCING (before the halt) with
  ``pdiff_lots`` shown. The tmpfs is unmounted in ``finally``.
- ``venue_fresh_state``: orders flowing and filled (at least ``MIN_FILLS_FRESH`` fills); then
  run/venue.account is deleted and the venue restarted (a new account, flat); within
  ``DETECT_FRESH_S`` the gateway must show ``acct_changed`` >= 1 and be REDUCING; after 1 s and a
  ``halt``: its positions == the new venue's (no old fill replayed: the new venue starts flat).
- ``position_behind_back``: venue ``allow_admin = true``; orders flowing; the signed admin route
  ``POST /api/v2/paper/adjust-position`` moves instrument 1's position by ``ADJUST_LOTS`` lots away from
  flat; within ``DETECT_BEHIND_S`` the gateway must be REDUCING with ``pdiff_lots_1`` != 0; from that
  moment, held 3 s (full: 10 s): no NEW order approved on the increasing side (from the risk audit log,
  the position tracked by its FillApplied / Synced lines), and the venue's |position| never above its
  |position| at detection plus the orders open then (resting orders may still fill).

- ``machine_crash_sender``: orders flowing (at least ``MIN_PLACED`` placed and a fill); then, ``crashes``
  times (1; full: 3), the sender is restarted with its test hook armed (``SHMPIPE_TEST_CRASH=1``,
  ``crash_after = "send"``, ``crash_mode = "machine"``): at its first place, once the request has left,
  it cuts its journal back to the last fsync'd length (what a machine crash leaves on the disk: the
  group commit's window, which then always holds the intent of that order, now at the venue) and
  SIGKILLs itself; the supervisor restarts it, and the ORDER, not yet committed on the ring, comes again
  (a sender that did not find the order at the venue would send it again: the venue would refuse it,
  43118, counted as a duplicate). After 2 s more flow, a
  ``halt`` and settling: every crash cut a non-empty window, the restarted sender adopted at least one
  order from the venue, no clientOid was refused as a duplicate, no order lost (every order the venue
  placed is in the journal with its venue id, none unresolved; every NEW order the risk gateway approved
  in the journal or refused with a reason: ``flow.order_ledger``), every venue fill journaled, and the
  venue's, the journal's and the gateway's positions equal in whole lots.

The detection limits (``DETECT_FRESH_S``, ``DETECT_BEHIND_S``) are judged in full mode (``make chaos``);
quick mode (the tests) waits up to ``harness.QUICK_HANG_GUARD_S``, judges that detection happened and
reports its time against the limit.

Each takes ``account_check_ms`` (the sender's; None = its default, 1000): 0 turns the running sender's
account checks off, the sabotage the tests use to show each scenario FAILs when detection is missing.
``disk_full_journal`` also takes ``sabotage_adjust_lots`` (a position moved behind the back while the
disk is full, with no restart of the sender) for the same purpose.
"""

from __future__ import annotations

import errno
import http.client
import os
import re
import shutil
import subprocess
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import orjson

from bench.chaos.flow import (FLOW_MODEL, FLOW_WAIT_S, LOST_CHECK, ledger_entry, ledger_problems, ledger_text,
                              order_ledger, orders_flow, quiesce, reconcile, venue_journal_lost, whole_lots)
from bench.chaos.harness import INCONCLUSIVE, Row, judged_row, limit_wait_s, soft_wait
from bench.chaos.rewrite import sender_params
from bench.pipeline_config import KEY
from pipeline.trading.bitget.signing import load_credentials
from pipeline.venue.rest import ADJUST_POSITION
from pipeline.runtime.portfile import read_port_file

TMPFS_SIZE = "2m"
MIN_PLACED = 5  # orders placed at the venue before the fault, so that the result is not vacuous
MIN_FILLS_FRESH = 2
ADJUST_LOTS = 5
DETECT_FRESH_S = 8.0
DETECT_BEHIND_S = 3.0


# ---------------------------------------------------------------------------------------------- helpers
def position_hook(account_check_ms: int | None, **sender):
    """Config hook: orders flowing (``orders_flow``) and ``sender`` set in the sender's params, with
    ``account_check_ms`` (None: the sender's default)."""
    def hook(text: str) -> str:
        text = orders_flow(text)
        kv = dict(sender)
        if account_check_ms is not None:
            kv["account_check_ms"] = account_check_ms
        return sender_params(text, **kv) if kv else text
    return hook


def positions(p) -> dict:
    """Per symbol: the venue's and the gateway's position in lots (whole lots, None when not whole)."""
    venue, risk = p.stage("venue"), p.stage("risk")
    out = {}
    for ins in p.cfg.instruments:
        v = float(venue.get("positions", {}).get(ins.symbol, 0.0)) / ins.lot_size
        r = float(risk.get(f"pos_lots_{ins.id}", float("nan")))
        out[ins.symbol] = {"iid": ins.id, "venue": whole_lots(v), "risk": whole_lots(r)}
    return out


def _pdiff(risk: dict) -> dict:
    """The gateway's ``pdiff_lots_<iid>`` counters."""
    return {k: v for k, v in risk.items() if k.startswith("pdiff_lots_")}


def acceptance(pos: dict, state: str, pdiff: dict) -> tuple[bool, str]:
    """Issue #20's criterion: every instrument's venue position == the gateway's in whole lots, or the
    gateway REDUCING with the difference shown (a non-zero ``pdiff_lots_<iid>`` for each apart)."""
    apart = {s: v for s, v in pos.items() if v["venue"] is None or v["venue"] != v["risk"]}
    if not apart:
        return True, "positions equal: " + "; ".join(f"{s} {v['venue']} lots" for s, v in pos.items())
    shown = state == "REDUCING" and all(pdiff.get(f"pdiff_lots_{v['iid']}") for v in apart.values())
    what = "; ".join(f"{s} venue {v['venue']} / risk {v['risk']} lots" for s, v in apart.items())
    return shown, (f"positions apart ({what}), REDUCING with pdiff {pdiff}" if shown
                   else f"positions apart ({what}), state {state}, pdiff {pdiff or 'none'}")


def adjust_position(p, symbol: str, delta: str) -> dict:
    """The venue's signed admin route (needs ``allow_admin``): the answer's ``data`` (symbol, position)."""
    creds = load_credentials(KEY)
    port = read_port_file(p.tmp / "run" / "venue.rest.port")
    body = orjson.dumps({"symbol": symbol, "delta": delta}).decode()
    headers = creds.headers(int(time.time() * 1000), "POST", ADJUST_POSITION, "", body)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", ADJUST_POSITION, body=body.encode(), headers=headers)
        resp = conn.getresponse()
        doc = orjson.loads(resp.read())
    finally:
        conn.close()
    if resp.status != 200 or doc.get("code") != "00000":
        raise RuntimeError(f"adjust-position answered {resp.status}: {doc}")
    return doc["data"]


def _lots_str(lots: int, lot_size: float) -> str:
    """``lots`` lots of ``lot_size`` in base units, as a decimal string."""
    return format(Decimal(str(lot_size)) * lots, "f")


def _checks_off(account_check_ms: int | None) -> str:
    """What the injected line adds when the sender's account checks were set (the sabotage: 0)."""
    return f"; sender account_check_ms {account_check_ms}" if account_check_ms is not None else ""


def _detection(detect_s: float | None, limit_s: float, quick: bool) -> str:
    """The detection time against its limit, for the figure."""
    return (f"detection {'%.2f s' % detect_s if detect_s is not None else 'none'} (limit {limit_s:g}"
            f"{', judged in full mode' if quick else ''})")


def _detected_check(what: str, limit_s: float, quick: bool) -> str:
    """The detection check's name: within ``limit_s`` in full mode; in quick mode that it happened
    (within the hang guard), the limit being judged by ``make chaos``."""
    return (f"detected ({what}; the {limit_s:g} s limit is judged in full mode)" if quick
            else f"detected within {limit_s:g} s ({what})")


def _fill_until_enospc(path: Path) -> int:
    """Write ``path`` until the file system is full; the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 512, 16):
            buf = b"\0" * chunk
            while True:
                try:
                    f.write(buf)
                    n += chunk
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return n


def _restart_and_resync(p, name: str, timeout_s: float = 30.0) -> float:
    """Restart process ``name`` and wait until it runs again and the gateway has re-synced; the seconds it took."""
    old = p.proc(name)["pid"]
    t0 = time.monotonic()
    p.control("restart", name=name)
    p.wait(lambda: (x := p.proc(name))["state"] == "RUNNING" and x["pid"] != old, timeout_s, f"{name} restarted", 0.05)
    p.wait(lambda: p.stage("risk").get("synced") == 1, timeout_s, "risk synced again", 0.05)
    return time.monotonic() - t0


# ---------------------------------------------------------------------------------------------- scenarios
def disk_full_journal(P, quick: bool, *, account_check_ms: int | None = None, sabotage_adjust_lots: int = 0) -> Row:
    hold_s = 3.0 if quick else 10.0
    injected = (f"sender journal on a {TMPFS_SIZE} tmpfs, filled with a filler file until ENOSPC for {hold_s:g} s "
                f"under GTC orders near the mid (orders_flow), filler removed, 2 s, restart sender"
                + (f"; SABOTAGE: account_check_ms {account_check_ms}, {sabotage_adjust_lots} lots moved behind "
                   f"the back while full, no restart" if sabotage_adjust_lots else ""))
    mnt = Path(tempfile.mkdtemp(prefix="chaos-jfull-"))
    mounted = False
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            why = (r.stderr or r.stdout).strip() or f"exit {r.returncode}"
            return Row(scenario="disk_full_journal", injected=injected, did=f"(not run) mount -t tmpfs failed: {why}",
                       figure="-", verdict=INCONCLUSIVE, details={"mount_error": why})
        mounted = True
        hook = position_hook(account_check_ms, journal_path=str(mnt / "sender.journal"))
        venue = {"allow_admin": True} if sabotage_adjust_lots else None
        with P(rate=1_000, name="disk_full_journal", text_hook=hook, venue=venue, model=FLOW_MODEL) as p:
            soft_wait(p, lambda: p.stage("venue").get("orders_placed", 0) >= MIN_PLACED
                       and p.stage("sender").get("fills", 0) >= 1, FLOW_WAIT_S)
            placed0 = p.stage("venue").get("orders_placed", 0)
            filler = mnt / "filler"
            filled = _fill_until_enospc(filler)
            t_full = time.monotonic()
            if sabotage_adjust_lots:
                ins = p.cfg.instruments[0]
                adjust_position(p, ins.symbol, _lots_str(sabotage_adjust_lots, ins.lot_size))
            soft_wait(p, lambda: p.stage("sender").get("journal_errors", 0) > 0, hold_s)
            time.sleep(max(0.0, t_full + hold_s - time.monotonic()))
            s_full = dict(p.stage("sender"))
            filler.unlink()
            time.sleep(2.0)
            s_after = dict(p.stage("sender"))
            restart_s = None
            if not sabotage_adjust_lots:
                restart_s = _restart_and_resync(p, "sender")
            time.sleep(2.0)
            placed = p.stage("venue").get("orders_placed", 0)
            risk = dict(p.stage("risk"))
            state, pdiff = risk.get("state", "?"), _pdiff(risk)
            settled = quiesce(p)
            pos = positions(p)
            risk_end = dict(p.stage("risk"))
            pdiff = {**pdiff, **_pdiff(risk_end)}
            restarts = p.proc("sender")["restarts"]
    finally:
        if mounted:
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)
    ok_pos, pos_fig = acceptance(pos, state, pdiff)
    jerr = s_full.get("journal_errors", 0)
    checks = {"journal write errors counted while the disk was full (journal_errors > 0)": jerr > 0,
              f"enough flow (>= {MIN_PLACED} orders placed at the venue)": placed >= MIN_PLACED,
              "settled after halt": settled,
              "positions equal in whole lots, or REDUCING with the difference shown": ok_pos}
    return judged_row(
        "disk_full_journal", checks, injected=injected,
        did=(f"{placed0} orders placed before the fault, {placed} in all; filler {filled} bytes; while full: sender "
             f"journal_errors {jerr}, jdoubt {s_full.get('jdoubt')}, sent {s_full.get('sent')}; 2 s after the filler "
             f"went: journal_errors {s_after.get('journal_errors')}, jdoubt {s_after.get('jdoubt')}; sender restarted "
             + (f"and risk re-synced in {restart_s:.2f} s" if restart_s is not None else "not (sabotage)")
             + f" (restarts {restarts}); risk state before the halt {state}, pdiff {pdiff or 'none'}; {pos_fig}"),
        figure=(f"journal_errors {jerr}; {placed} orders placed (min {MIN_PLACED}); {pos_fig}"),
        details={"positions": pos, "state": state, "pdiff": pdiff, "sender_full": s_full,
                 "sender_after": s_after, "risk_end": risk_end, "prefix": p.prefix},
    )


def venue_fresh_state(P, quick: bool, *, account_check_ms: int | None = None) -> Row:
    with P(rate=1_000, name="venue_fresh_state", text_hook=position_hook(account_check_ms), model=FLOW_MODEL) as p:
        # wait for what the check below asks of the flow before (fills and orders placed), not only the fills
        soft_wait(p, lambda: p.stage("sender").get("fills", 0) >= MIN_FILLS_FRESH
                  and p.stage("venue").get("orders_placed", 0) >= MIN_PLACED, FLOW_WAIT_S)
        before = positions(p)
        v0 = dict(p.stage("venue"))
        acct0 = p.stage("risk").get("acct_changed", 0)
        (p.tmp / "run" / "venue.account").unlink()
        t0 = time.monotonic()
        vpid = p.proc("venue")["pid"]
        p.control("restart", name="venue")
        p.wait(lambda: (x := p.proc("venue"))["state"] == "RUNNING" and x["pid"] != vpid, 30, "venue restarted", 0.05)
        venue_up_s = time.monotonic() - t0
        detected = soft_wait(p, lambda: (r := p.stage("risk")).get("acct_changed", 0) > acct0
                              and r.get("state") == "REDUCING", limit_wait_s(DETECT_FRESH_S, quick))
        detect_s = time.monotonic() - t0 if detected else None
        time.sleep(1.0)
        risk = dict(p.stage("risk"))
        state, pdiff = risk.get("state", "?"), _pdiff(risk)
        settled = quiesce(p)
        pos = positions(p)
        v1 = dict(p.stage("venue"))
        sender = p.proc("sender")
        log = (p.logs() / "sender.log")
        said = log.exists() and "sender_venue_account_changed" in log.read_text(errors="replace")
    ok_pos, pos_fig = acceptance(pos, state, pdiff)
    flat_new = all(v["venue"] == 0 for v in pos.values()) and v1.get("fills", 0) == 0
    checks = {f"enough flow before (>= {MIN_FILLS_FRESH} fills, {MIN_PLACED} orders placed)":
              v0.get("fills", 0) >= MIN_FILLS_FRESH and v0.get("orders_placed", 0) >= MIN_PLACED,
              _detected_check("risk acct_changed >= 1 and REDUCING", DETECT_FRESH_S, quick): detected,
              "settled after halt": settled,
              "no old fill replayed: positions equal to the new venue's": ok_pos and state == "REDUCING"}
    return judged_row(
        "venue_fresh_state", checks,
        injected=(f"after {v0.get('orders_placed')} orders and {v0.get('fills')} fills (positions "
                  f"{ {s: v['venue'] for s, v in before.items()} } lots): run/venue.account deleted, restart venue"
                  + _checks_off(account_check_ms)),
        did=(f"venue RUNNING again in {venue_up_s:.2f} s; "
             + (f"risk acct_changed {risk.get('acct_changed')} and REDUCING {detect_s:.2f} s after the restart"
                if detected else f"not detected within {limit_wait_s(DETECT_FRESH_S, quick):g} s (acct_changed "
                                 f"{risk.get('acct_changed', 0)}, "
                                 f"state {state})")
             + f"; sender restarts {sender['restarts']}, its log says account changed: {said}; new venue fills "
               f"{v1.get('fills')}, orders placed {v1.get('orders_placed')}, flat: {flat_new}; {pos_fig}"),
        figure=f"{_detection(detect_s, DETECT_FRESH_S, quick)}; state {state}; {pos_fig}",
        details={"before": before, "positions": pos, "state": state, "pdiff": pdiff,
                 "venue_before": v0, "venue_after": v1, "prefix": p.prefix},
    )


def _increasing_after_reducing(audit: Path, iid: int) -> tuple[int, int]:
    """From the risk audit log: (NEW orders of ``iid`` approved after the first REDUCING that increase
    |position|, all NEW orders approved after it). The position is tracked from Synced / FillApplied."""
    pos, reducing, inc, n = 0.0, False, 0, 0
    for line in audit.read_bytes().splitlines():
        try:
            ev = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        kind = ev.get("ev")
        if kind == "Synced":
            pos = float(ev.get("positions", {}).get(str(iid), pos))
        elif kind == "FillApplied" and ev.get("instrument_id") == iid:
            pos = float(ev["position"])
        elif kind == "StateChanged" and ev.get("new") == "REDUCING":
            reducing = True
        elif kind == "OrderApproved" and reducing and ev.get("instrument_id") == iid:
            n += 1
            buy = ev["side"] == 1
            if (buy and pos >= 0) or (not buy and pos <= 0):
                inc += 1
    return inc, n


def position_behind_back(P, quick: bool, *, account_check_ms: int | None = None) -> Row:
    hold_s = 3.0 if quick else 10.0
    with P(rate=1_000, name="position_behind_back", venue={"allow_admin": True}, text_hook=position_hook(account_check_ms),
           model=FLOW_MODEL) as p:
        ins = p.cfg.instruments[0]
        soft_wait(p, lambda: p.stage("venue").get("orders_placed", 0) >= MIN_PLACED
                   and p.stage("sender").get("fills", 0) >= 1, FLOW_WAIT_S)
        v0 = dict(p.stage("venue"))
        pos0 = positions(p)[ins.symbol]["venue"] or 0
        sign = -1 if pos0 < 0 else 1
        ans = adjust_position(p, ins.symbol, _lots_str(sign * ADJUST_LOTS, ins.lot_size))
        t0 = time.monotonic()
        adj_lots = whole_lots(float(ans["position"]) / ins.lot_size)
        detected = soft_wait(p, lambda: (r := p.stage("risk")).get("state") == "REDUCING"
                              and r.get(f"pdiff_lots_{ins.id}"), limit_wait_s(DETECT_BEHIND_S, quick))
        detect_s = time.monotonic() - t0 if detected else None
        risk_d = dict(p.stage("risk"))
        at_det = abs(positions(p)[ins.symbol]["venue"] or 0)
        open_det = int(risk_d.get("open", 0))
        worst = at_det
        t_end = time.monotonic() + hold_s
        while time.monotonic() < t_end:
            v = positions(p)[ins.symbol]["venue"]
            worst = max(worst, abs(v if v is not None else 10 ** 9))
            time.sleep(0.05)
        risk = dict(p.stage("risk"))
        state, pdiff = risk.get("state", "?"), _pdiff(risk)
        settled = quiesce(p)
        pos = positions(p)
        audit = p.logs() / "risk_audit.jsonl"
        inc, n_after = _increasing_after_reducing(audit, ins.id) if audit.exists() else (-1, -1)
    ok_pos, pos_fig = acceptance(pos, state, pdiff)
    bound = max(at_det, abs(adj_lots or 0)) + open_det
    checks = {f"enough flow before (>= {MIN_PLACED} orders placed)": v0.get("orders_placed", 0) >= MIN_PLACED,
              _detected_check(f"REDUCING, pdiff_lots_{ins.id} shown", DETECT_BEHIND_S, quick): bool(detected),
              "no risk-increasing NEW order approved after REDUCING (audit)": detected and inc == 0,
              "venue |position| not above |position at detection| + orders open then": bool(detected) and worst <= bound,
              "settled after halt": settled,
              "positions equal in whole lots, or REDUCING with the difference shown": ok_pos}
    return judged_row(
        "position_behind_back", checks,
        injected=(f"after {v0.get('orders_placed')} orders placed: {ins.symbol} moved {sign * ADJUST_LOTS:+d} lots by the "
                  f"venue's admin route ({pos0} -> {adj_lots} lots), watched {hold_s:g} s"
                  + _checks_off(account_check_ms)),
        did=((f"risk REDUCING with pdiff_lots_{ins.id} {risk_d.get(f'pdiff_lots_{ins.id}')} {detect_s:.2f} s after the "
              f"adjustment" if detected else f"not detected within {limit_wait_s(DETECT_BEHIND_S, quick):g} s (state "
                                             f"{risk_d.get('state')}, pdiff {_pdiff(risk_d) or 'none'})")
             + f"; venue |position| {at_det} lots at detection ({open_det} orders open), at most {worst} after "
               f"(bound {bound}); NEW orders approved after REDUCING {n_after}, increasing {inc}; {pos_fig}"),
        figure=(f"{_detection(detect_s, DETECT_BEHIND_S, quick)}; increasing orders after it {inc}; max |pos| {worst} "
                f"(bound {bound}); {pos_fig}"),
        details={"positions": pos, "state": state, "pdiff": pdiff, "adjusted_lots": adj_lots,
                 "prefix": p.prefix},
    )



CRASH_ENV = "SHMPIPE_TEST_CRASH"  # procs.sender's: arms its test-only crash hook


def machine_crash_sender(P, quick: bool, *, crashes: int | None = None, sender_module: str = "") -> Row:
    """See the module docstring. ``sender_module``: the sender's module replaced (the tests' sabotage)."""
    n = crashes or (1 if quick else 3)

    def hook(text: str) -> str:
        text = orders_flow(text)
        if sender_module:
            text = text.replace('module = "procs.sender:SenderAgent"', f'module = "{sender_module}"', 1)
        return text

    old_env = os.environ.get(CRASH_ENV)
    os.environ[CRASH_ENV] = "1"  # the stages inherit it; the hook fires only once crash_after is set
    try:
        with P(rate=1_000, name="machine_crash_sender", text_hook=hook, model=FLOW_MODEL) as p:
            soft_wait(p, lambda: p.stage("venue").get("orders_placed", 0) >= MIN_PLACED
                      and p.stage("sender").get("fills", 0) >= 1, FLOW_WAIT_S)
            placed0 = p.stage("venue").get("orders_placed", 0)
            marker = p.tmp / "run" / "sender.journal.crashed"
            cuts: list[int] = []
            crash_ns: list[int] = []
            p.cfg_path.write_text(_arm(p.cfg_path.read_text()))  # read by the sender's next start
            for _ in range(n):
                marker.unlink(missing_ok=True)
                _restart_and_resync(p, "sender")
                if soft_wait(p, marker.exists, 20.0):
                    _point, synced, written, at_ns = marker.read_text().split()
                    cuts.append(int(written) - int(synced))
                    crash_ns.append(int(at_ns))
                    p.wait(lambda: p.proc("sender")["state"] == "RUNNING", 30, "sender RUNNING after its crash", 0.05)
                    p.wait(lambda: p.stage("risk").get("synced") == 1, 30, "risk synced again", 0.05)
            time.sleep(2.0)
            settled = quiesce(p)
            led = reconcile(p)
            news = order_ledger(p, crash_ns=crash_ns)
            log = p.logs() / "sender.log"
            adopted = log.read_text(errors="replace").count("sender_order_adopted") if log.exists() else 0
            restarts = p.proc("sender")["restarts"]
    finally:
        if old_env is None:
            os.environ.pop(CRASH_ENV, None)
        else:
            os.environ[CRASH_ENV] = old_env
    # venue orders the journal lacks: a crash's cut window can hold orders that ended without a fill before the
    # restart (not adopted: no position, not open, recovery.py), at most the orders the ledger gives the crashes
    lost = venue_journal_lost(led, news["crash_dropped"])
    checks = {f"enough flow (>= {MIN_PLACED} orders placed before)": placed0 >= MIN_PLACED,
              f"{n} machine crash(es), each cutting a non-empty window": len(cuts) == n and all(c > 0 for c in cuts),
              "the restarted sender adopted orders the venue holds": adopted >= 1,
              "settled after halt": settled,
              "0 duplicated (no clientOid refused by the venue), 0 lost (every venue order journaled but those "
              "a crash's window took), 0 unresolved":
                  led["dup_coid"] == 0 and lost == 0 and led["coids_unique"],
              LOST_CHECK: not ledger_problems(news),
              "every venue fill journaled": led["journal_fills"] == led["venue_fills"],
              "positions equal in whole lots (venue, journal, risk)": led["position_diff_lots"] == 0}
    pos = "; ".join(f"{s}: venue {v['venue']:g} journal {v['journal']:g} risk {v['risk']:g}"
                    for s, v in led["positions"].items())
    return judged_row(
        "machine_crash_sender", checks,
        injected=(f"after {placed0} orders placed: {n} x the sender restarted with its crash hook armed (crash_after "
                  f"send, crash_mode machine): journal cut to its last fsync'd length, SIGKILL"
                  + (f"; SABOTAGE: sender module {sender_module}" if sender_module else "")),
        did=(f"windows cut {cuts} bytes; sender restarts {restarts}; orders adopted from the venue {adopted}; "
             f"{led['journal_orders']} orders journaled, {led['journal_acked']} with a venue id, venue placed "
             f"{led['venue_placed']}; fills {led['journal_fills']} journaled, {led['venue_fills']} at the venue; "
             f"duplicate clientOids refused {led['dup_coid']}; unresolved {led['unresolved']}; {ledger_text(news)}; {pos}"),
        figure=(f"adopted {adopted}; duplicated {led['dup_coid']}, lost {lost} (venue vs journal) / {news['lost']} (risk "
                f"audit); position diff "
                f"{led['position_diff_lots']} lots"),
        details={"ledger": led, "news": news, "orders_ledger": [ledger_entry("", news)], "cuts": cuts,
                 "crash_ns": crash_ns, "restarts": restarts, "prefix": p.prefix},
    )


def _arm(text: str) -> str:
    """The config text with the sender's crash hook armed (``crash_after = "send"``, machine mode), whatever
    its module.

    Raises:
        ValueError: no sender params in the text."""
    new, k = re.subn(r'(name = "sender"\nmodule = "[^"]+"\n(?:[^\n]*\n)*?params = \{ )',
                     r'\1crash_after = "send", crash_mode = "machine", ', text, count=1)
    if k != 1:
        raise ValueError("the sender's params not found in the config text")
    return new
