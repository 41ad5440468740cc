"""The risk gateway stage: the only way to the order sender. ``module = "procs.risk:RiskAgent"``.

The decisions are ``pipeline.trading.risk.gateway.RiskGateway``'s (see there); this stage moves bytes:

- inputs (ring names from params, each optional: an input absent from the config is not read; none of
  them: ConfigError), read in priority order each ``do_work``, each drained up to ``ctx.batch``
  messages: ``control`` (CONTROL), ``exec`` (EXEC_REPORT), ``sig_risk`` (SIGNAL), ``instr`` (INSTRUCTION);
- output ``orders`` (ORDER, a ``backpressure`` ring: ``ctx.emit`` waits for room). The ORDER's
  ``ts_origin_ns`` is that of the message the decision came from (``clock()`` for the start-up SYNC);
  an ORDER the port refuses anyway (a ``drop`` ring) is counted (``order_drops``), logged, and no
  longer counted as open;
- optional output ``pos`` (POSITION, for the llm stage; absent from the config: none written): one
  message, the instrument's position in whole lots as of the gateway's decision, whenever a fill moves
  it, and at each SYNC_DONE for every instrument whose lots differ from the latest written (so every
  instrument once after the first). Written with ``ctx.emit_nowait``: risk never waits for the llm; a
  refused write is counted (``pos_dropped``) and written again at the next SYNC_DONE or fill;
- ``on_start`` reads the run epoch (``<run_dir>/run.epoch``, written by ``up``: order ids never repeat
  across runs; StartupError when it is missing) and writes one ORDER SYNC; new orders are NOT_SYNCED
  until EXEC_REPORT SYNC_DONE;
- every decision event goes to the audit log: one JSON object a line (``msgspec`` encoding of the event,
  ``ev`` = its type), appended (O_APPEND, created 0600) to ``audit_path``, one ``write`` per
  ``do_work``; no fsync (the sender's journal is the durable record of what was sent).

Params (``RiskParams``: an unknown or ill-typed field fails the start naming the process and the field):
``limits`` (table, ``pipeline.trading.risk.limits.RiskLimits``; ConfigError naming the bad field;
``risk_aversion`` outside [0.1, 2.0] too), ``execution`` (table, ``pipeline.trading.risk.execution.ExecutionParams``:
``planner = "simple" | "depth"`` and the depth-aware planner's settings; ConfigError naming the bad field),
``audit_path`` ("<supervisor.log_dir>/risk_audit.jsonl"), ``control_input`` ("control"), ``exec_input``
("exec"), ``signal_input`` ("sig_risk"), ``instruction_input`` ("instr"), ``output`` ("orders"),
``position_output`` ("pos").

Counters (``ctx.stats``, short keys: the status record holds 760 bytes of JSON): state (ACTIVE /
REDUCING / HALTED), synced (0/1), open (open orders), approved, denied, expired, cancels, cancel_all,
emerg, fills, rejected (malformed input), order_drops, errors, pos_lots_<id> (position in lots), pnl_<id>
(the gateway's P&L of the instrument, quote currency, rounded to cents: its realized P&L, the change of the
gateway's realized P&L at each of its fills, plus the unrealized at the latest ref_mid as ``Ledger.pnl``
values it; refreshed at every fill and sync, and otherwise on the first ``do_work`` batch whose
message time is a heartbeat interval past the last refresh: one comparison per batch, none per message),
pdiff_lots_<id> (the venue's position minus the journal's, in lots, when the sender found them apart: risk
is then REDUCING), acct_changed (state reports from a sender that found a new venue account),
pos_written / pos_dropped (POSITION messages written / refused by the position output), deny_<reason lower> per denial reason
seen (``deny_max_position``...), and with ``planner = "depth"`` par_<id> (right after the pnl_<id>: the
instrument's latest parent order, ``execution.SHORT`` of its state and its filled / target lots, e.g.
``PART 2/5``; "-" before the first).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from pipeline.runtime.agent import MARK_DECIDED, Agent, mark_code
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.runtime.runepoch import read_run_epoch
from pipeline.trading.messages import (EXEC_STRUCT, SIGNAL_DEPTH_DTYPE, SIGNAL_STRUCT, ExecType, Kind, Label,
                                       pack_position)
from pipeline.trading.risk.checks import DenyReason
from pipeline.trading.risk.events import (CancelAllSent, CancelSent, EmergencyReceived, FillApplied, InstructionExpired,
                                          MessageRejected, OrderApproved, OrderDenied, PositionMismatch, StateChanged,
                                          Synced, SyncStarted, VenueAccountChanged, encode_order)
from pipeline.trading.risk.events import ParentChanged
from pipeline.trading.risk.execution import SHORT, ExecutionParams, ParentState, decode_execution
from pipeline.trading.risk.gateway import RiskGateway
from pipeline.trading.risk.limits import RiskLimits, decode_limits

_DENY_KEYS = {r: "deny_" + r.name.lower() for r in DenyReason}


class _Shadow:
    """keep_warm's gateway: the real instruments and limits (rate limits, the minimum notional and the
    EMERGENCY cool-down relaxed so the same paths keep being taken), synced flat, its own clock
    advancing 10 ms a step. ``step`` feeds one message in a cycle of four (a HOLD, a LEAN_BUY, the
    CANCELLED of what it opened, an EMERGENCY) and returns its events."""

    def __init__(self, instruments, limits: RiskLimits, execution: ExecutionParams | None = None):
        self.t = 10**12
        lim = msgspec.structs.replace(limits, max_orders_per_s=1_000_000, max_notional_per_min=1e300, min_notional=0.0,
                                      emergency_cooldown_ms=0)
        self.gw = RiskGateway(instruments, lim, lambda: self.t, execution=execution)
        self.gw.start()
        self.gw.on_exec(EXEC_STRUCT.pack(0, ExecType.SYNC_DONE, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0))
        spec = instruments[0]
        self.iid, mid = spec.id, spec.tick_size * 100_000
        head = lambda label: SIGNAL_STRUCT.pack(  # noqa: E731
            self.iid, label, 0, 1, 0, mid, 2 * spec.tick_size, 0.0, 0.0, 0.0, 0.0)

        def deep(label):  # SIGNALs with depth, deep at the touch: the gate opens, the same paths are taken
            r = np.frombuffer(head(label) + bytes(SIGNAL_DEPTH_DTYPE.itemsize - SIGNAL_STRUCT.size),
                              SIGNAL_DEPTH_DTYPE, 1).copy()
            r["depth_bid_dist"][0, 0] = r["depth_ask_dist"][0, 0] = 1.0
            r["depth_bid_sz"][0, 0] = r["depth_ask_sz"][0, 0] = 1e12
            return r.tobytes()

        sig = deep if self.gw.depth_mode else head
        self.msgs = [sig(Label.HOLD), sig(Label.LEAN_BUY), None, sig(Label.EMERGENCY)]
        self.i = 0

    def step(self) -> list:
        self.t += 10_000_000
        k, self.i = self.i, (self.i + 1) % len(self.msgs)
        if k == 2:  # close whatever the lean signal opened, so the shadow stays flat
            events = []
            for oid in list(self.gw.books[self.iid].working):
                events += self.gw.on_exec(EXEC_STRUCT.pack(self.iid, ExecType.CANCELLED, 0, 0, oid, 0.0, 0.0, 0.0, 0,
                                                           0))
            return events
        return self.gw.on_signal(self.msgs[k], self.t)


class RiskParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The stage's params (see the module docstring); ``limits`` is decoded by ``decode_limits``."""

    limits: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None
    audit_path: str = ""
    control_input: str = "control"
    exec_input: str = "exec"
    signal_input: str = "sig_risk"
    instruction_input: str = "instr"
    output: str = "orders"
    position_output: str = "pos"


class RiskAgent(Agent):
    """CONTROL / EXEC_REPORT / SIGNAL / INSTRUCTION in, ORDER out (see the module docstring)."""

    params_type = RiskParams

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        prm = parse_stage_params(ctx.name, ctx.params, RiskParams)
        limits = decode_limits(prm.limits)
        self.execution = execution = decode_execution(prm.execution)
        epoch = read_run_epoch(ctx.config.supervisor.run_dir)  # StartupError: not started by `up`
        self.gw = RiskGateway(ctx.config.instruments, limits, ctx.clock, epoch=epoch, execution=execution)
        self.out = ctx.output(prm.output)
        self.pos_out = ctx.output(prm.position_output, required=False)  # None: no POSITION messages
        self._pos_sent: dict[int, int] = {}  # instrument -> the lots of its latest POSITION written
        # (port, handler) in priority order; each input is optional
        self.inputs = [(ctx.input(name), handler) for name, handler in (
            (prm.control_input, self._on_control), (prm.exec_input, self._on_exec),
            (prm.signal_input, self._on_signal), (prm.instruction_input, self._on_instruction)) if name in ctx.inputs]
        if not self.inputs:
            raise ConfigError(f"risk: none of its inputs among {sorted(ctx.inputs)}")
        path = Path(prm.audit_path or Path(ctx.config.supervisor.log_dir) / "risk_audit.jsonl")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.audit_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StartupError(f"risk: cannot open the audit log {str(path)!r}: {exc.strerror}") from None
        self.audit_path = str(path)
        self.enc = msgspec.json.Encoder()
        self.buf = bytearray()
        self.stats = ctx.stats
        self.stats.update(state=self.gw.state.name, synced=0, open=0, approved=0, denied=0, expired=0, cancels=0,
                          cancel_all=0, emerg=0, fills=0, rejected=0)
        for iid in self.gw.books:
            self.stats[f"pos_lots_{iid}"] = 0
        self._realized = {iid: 0.0 for iid in self.gw.books}  # per instrument: the realized P&L of its fills
        self._realized_seen = self.gw.realized_pnl  # the gateway's realized P&L as of the latest FillApplied
        self._pnl_keys = [(f"pnl_{iid}", iid, bk) for iid, bk in self.gw.books.items()]
        self._pnl_every_ns = ctx.config.supervisor.heartbeat_interval_ms * 1_000_000
        self._pnl_due_ns = 0
        self._shadow = None  # keep_warm's private gateway, made on first use
        self._ts = ctx.clock()
        self._publish_pnl()  # every pnl_<id> 0.0, after the pos_lots_<id> (the status record keeps the first keys)
        if self.gw.depth_mode:  # each instrument's parent order: "-" until its first
            for iid in self.gw.books:
                self.stats[f"par_{iid}"] = "-"
        self._handle(self.gw.start())
        self._flush()
        ctx.log.info("risk_ready", audit_path=self.audit_path, inputs=[p for p in ctx.inputs],
                     instruments=sorted(self.gw.books), tif=limits.tif, planner=execution.planner)

    # ---------------------------------------------------------------------------------------- input
    def _on_control(self, seq, ts, kind, payload):
        self._decide(ts, kind, Kind.CONTROL, "control", self.gw.on_control, payload)

    def _on_exec(self, seq, ts, kind, payload):
        self._decide(ts, kind, Kind.EXEC_REPORT, "exec", self.gw.on_exec, payload)

    def _on_signal(self, seq, ts, kind, payload):
        self._ts = ts
        if kind != Kind.SIGNAL:
            self._handle(self._bad_kind("sig_risk", kind))
            return
        try:
            events = self.gw.on_signal(payload, ts)
        except Exception as exc:  # a bug in the core: nothing is sent for this message
            self._internal_error("sig_risk", exc)
            return
        self._handle(events)

    def _on_instruction(self, seq, ts, kind, payload):
        self._decide(ts, kind, Kind.INSTRUCTION, "instr", self.gw.on_instruction, payload)

    def _decide(self, ts, kind, want, ring, fn, payload) -> None:
        self._ts = ts
        if kind != want:
            self._handle(self._bad_kind(ring, kind))
            return
        try:
            events = fn(payload)
        except Exception as exc:  # a bug in the core: fail closed, nothing is sent for this message
            self._internal_error(ring, exc)
            return
        self._handle(events)

    def _internal_error(self, ring: str, exc: Exception) -> None:
        self.stats["errors"] = self.stats.get("errors", 0) + 1
        self.buf += self.enc.encode({"ev": "InternalError", "ts_ns": self.ctx.clock(), "ring": ring,
                                     "error": f"{type(exc).__name__}: {exc}"[:300]}) + b"\n"
        self.ctx.log.error("risk_internal_error", ring=ring, error=f"{type(exc).__name__}: {exc}"[:300])

    def _bad_kind(self, ring: str, kind: int) -> list:
        return [MessageRejected(ts_ns=self.ctx.clock(), kind=f"kind {kind} on {ring}", why="unexpected kind")]

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): the SIGNAL paths a fast-path message takes (an
        EMERGENCY's cancel-all, a LEAN_BUY's order when ``lean_lots`` is set, a plain reference
        update), the EXEC_REPORT that closes the order, audit encoding and ORDER packing, all on a
        private shadow gateway with its own clock. Nothing is written; the real gateway is untouched."""
        sh = self._shadow
        if sh is None:
            sh = self._shadow = _Shadow(self.ctx.config.instruments, self.gw.limits, self.execution)
        for ev in sh.step():
            self.enc.encode(ev)
            if ev.cmd:
                encode_order(ev)

    def do_work(self) -> int:
        total = 0
        batch = self.ctx.batch
        try:
            for port, handler in self.inputs:
                n = port.poll(handler, batch)
                total += n
        finally:
            if total:
                self.ctx.received(total)
                if self._ts >= self._pnl_due_ns:
                    self._publish_pnl()
            self._flush()
        return total

    def _publish_pnl(self) -> None:
        """``pnl_<id>`` per instrument: its realized P&L plus ``Book.unrealized_pnl`` (the rule
        ``Ledger.pnl`` sums), rounded to cents; the next refresh is due a heartbeat interval after the
        latest message time."""
        st, realized = self.stats, self._realized
        for key, iid, bk in self._pnl_keys:
            st[key] = round(realized[iid] + bk.unrealized_pnl(), 2)
        self._pnl_due_ns = self._ts + self._pnl_every_ns

    # ---------------------------------------------------------------------------------------- output
    def _handle(self, events) -> None:
        """Audit lines for every event, counters, and the ORDERs of the events that carry one. A
        decision whose ORDERs are cancels only (an EMERGENCY's, a reprice's) writes them before
        encoding its audit lines: they reduce risk, and the lines leave with this ``do_work``'s flush
        either way; one with a new order is audited first (``_send``)."""
        orders = [ev for ev in events if ev.cmd]
        if orders and not any(isinstance(ev, OrderApproved) for ev in orders):
            self._send(orders)
            self._audit(events)
        else:
            self._audit(events)
            if orders:
                self._send(orders)
        for ev in events:
            if not ev.cmd:
                self._count(ev)
        self.stats["open"] = self.gw.open_count

    def _audit(self, events) -> None:
        """One audit line per event into the buffer ``_flush`` writes."""
        for ev in events:
            try:
                line = self.enc.encode(ev)
            except Exception as exc:  # never lose the decision itself: write what can be written
                line = self.enc.encode({"ev": type(ev).__name__, "encode_error": repr(exc)})
                self.stats["errors"] = self.stats.get("errors", 0) + 1
            self.buf += line
            self.buf += b"\n"

    def _send(self, orders: list) -> None:
        """Write the ORDERs of one decision together, so that the sender reads them in one batch (and
        sends the new ones before the cancels). A new order's decision is on record before it leaves:
        one audit write before the first, and new orders whose record could not be written do not
        leave; an EMERGENCY's or a reprice's cancels without a new order leave at once, their audit
        lines written at the end of this ``do_work`` (a cancel only reduces risk)."""
        st, gw, ctx = self.stats, self.gw, self.ctx
        audited = self._flush() if any(isinstance(ev, OrderApproved) for ev in orders) else True
        for ev in orders:
            if isinstance(ev, OrderApproved) and not audited:
                st["audit_blocked"] = st.get("audit_blocked", 0) + 1
                gw.forget_order(ev.instrument_id, ev.order_id)
                continue
            if ctx.emit(self.out, Kind.ORDER, encode_order(ev), self._ts):
                ctx.mark(mark_code(MARK_DECIDED, getattr(ev, "origin", 0)), self._ts)
            else:
                st["order_drops"] = st.get("order_drops", 0) + 1
                ctx.log.error("risk_order_dropped", ev=type(ev).__name__, instrument_id=getattr(ev, "instrument_id", 0),
                              order_id=getattr(ev, "order_id", 0))
                if isinstance(ev, OrderApproved):
                    gw.forget_order(ev.instrument_id, ev.order_id)
                continue
            self._count(ev)

    def _count(self, ev) -> None:
        """The counters (and the log lines) of one event."""
        st, gw, ctx = self.stats, self.gw, self.ctx
        if isinstance(ev, OrderApproved):
            st["approved"] += 1
        elif isinstance(ev, OrderDenied):
            st["denied"] += 1
            k = _DENY_KEYS[ev.reason]
            st[k] = st.get(k, 0) + 1
        elif isinstance(ev, CancelSent):
            st["cancels"] += 1
        elif isinstance(ev, CancelAllSent):
            st["cancel_all"] += 1
        elif isinstance(ev, InstructionExpired):
            st["expired"] += 1
        elif isinstance(ev, FillApplied):
            st["fills"] += 1
            bk = gw.books[ev.instrument_id]
            st[f"pos_lots_{ev.instrument_id}"] = round(bk.position / bk.spec.lot, 3)
            self._realized[ev.instrument_id] += ev.realized_pnl - self._realized_seen
            self._realized_seen = ev.realized_pnl
            self._publish_pnl()
            if self.pos_out is not None:
                self._write_position(ev.instrument_id, ev.position, ev.ts_ns)
        elif isinstance(ev, EmergencyReceived):
            st["emerg"] += 1
        elif isinstance(ev, MessageRejected):
            st["rejected"] += 1
            if st["rejected"] <= 10 or st["rejected"] % 1000 == 0:
                ctx.log.warning("risk_input_rejected", kind=ev.kind, why=ev.why, count=st["rejected"])
        elif isinstance(ev, StateChanged):
            st["state"] = ev.new
            log = ctx.log.warning if ev.new != "ACTIVE" else ctx.log.info
            log("risk_state", old=ev.old, new=ev.new, cause=ev.cause, latched=ev.latched)
        elif isinstance(ev, Synced):
            st["synced"] = 1
            for iid, bk in gw.books.items():
                st[f"pos_lots_{iid}"] = round(bk.position / bk.spec.lot, 3)
            self._publish_pnl()
            if self.pos_out is not None:
                for iid, position in ev.positions.items():
                    self._write_position(iid, position, ev.ts_ns, changed_only=True)
            ctx.log.info("risk_synced", positions={str(k): v for k, v in ev.positions.items()},
                         open_orders=ev.open_orders, solicited=ev.solicited)
        elif isinstance(ev, PositionMismatch):
            st[f"pdiff_lots_{ev.instrument_id}"] = ev.diff_lots
            ctx.log.error("risk_position_mismatch", instrument_id=ev.instrument_id, ours=ev.ours, venue=ev.venue,
                          diff_lots=ev.diff_lots)
        elif isinstance(ev, VenueAccountChanged):
            st["acct_changed"] = st.get("acct_changed", 0) + 1
            ctx.log.error("risk_venue_account_changed")
        elif isinstance(ev, SyncStarted):
            st["synced"] = 0
            ctx.log.warning("risk_sync_started", solicited=ev.solicited)
        elif isinstance(ev, ParentChanged):
            plan = gw.books[ev.instrument_id].plan
            lots = f" {round(ev.filled / gw.books[ev.instrument_id].spec.lot, 3):g}/{plan.target_lots}" if plan else ""
            st[f"par_{ev.instrument_id}"] = SHORT[ParentState[ev.new]] + lots

    def _write_position(self, iid: int, position: float, as_of_ns: int, changed_only: bool = False) -> None:
        """One POSITION message (``position``, base units, in whole lots) on the position output (with
        ``changed_only``: unless those lots are the latest written), never waiting for room: a refused
        write is counted (``pos_dropped``) and not remembered as written. Written straight to the port,
        not through ``ctx.emit``: the stage's msgs_out and output latency stay those of its ORDERs (what
        the chaos order counts and the benches read); POSITIONs are counted in ``pos_written``."""
        lots = round(position / self.gw.books[iid].spec.lot)
        if changed_only and self._pos_sent.get(iid) == lots:
            return
        if self.pos_out.try_write(Kind.POSITION, pack_position(iid, lots, as_of_ns), self._ts):
            self._pos_sent[iid] = lots
            self.stats["pos_written"] = self.stats.get("pos_written", 0) + 1
        else:
            self.stats["pos_dropped"] = self.stats.get("pos_dropped", 0) + 1

    def _flush(self) -> bool:
        """Write the buffered audit lines; False (counted, logged) when the write failed."""
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            try:
                n = os.write(self.audit_fd, data)
                while n < len(data):
                    n += os.write(self.audit_fd, data[n:])
            except OSError as exc:
                self.stats["audit_errors"] = self.stats.get("audit_errors", 0) + 1
                self.ctx.log.error("risk_audit_write_failed", error=exc.strerror, bytes=len(data))
                return False
        return True

    def on_close(self) -> None:
        fd = getattr(self, "audit_fd", None)
        if fd is not None:
            self._flush()
            os.close(fd)
            self.audit_fd = None
