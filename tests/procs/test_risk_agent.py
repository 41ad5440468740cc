"""The risk stage (procs/risk.py): bytes in, ORDER bytes and audit lines out, with test doubles; and end to
end under the supervisor: a kill switch on the control ring gives CANCEL_ALL and no new order after it."""

from __future__ import annotations

import os
import stat

import numpy as np
import orjson
import pytest

from pipeline.runtime.agent import Agent
from pipeline.runtime.config import ProcessConfig
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import (INSTRUCTION_DTYPE, ORDER_DTYPE, SIGNAL_DTYPE, Action, ControlCmd, ExecType, Kind, Label,
                               OrderCmd, Side, order_id_for, unpack_position)
from pipeline.runtime.runepoch import epoch_path, read_run_epoch, write_run_epoch
from procs.risk import RiskAgent
from tests.support.agents import read_payloads
from tests.support.clock import ManualClock
from tests.support.configtext import BACK_OFF, INSTRUMENTS, dirs, process, ring
from tests.support.context import stage_context
from tests.support.ports import ListInput, RecordingPort
from tests.support.processes import read_log
from tests.support.risk import ctl, ex  # the EXEC_REPORT and CONTROL builders of the core's tests
from tests.support.wait import wait_until

MID = 50_000.0  # BTCUSDT of INSTRUMENTS: tick 0.1, lot 0.0001 -> one lot is 5 of notional


def sig(seq=1, *, iid=1, mid=MID, label=Label.HOLD) -> bytes:
    r = np.zeros(1, SIGNAL_DTYPE)
    r["instrument_id"], r["label"], r["feature_seq"], r["ref_mid"], r["ref_spread"] = iid, label, seq, mid, 1.0
    return r.tobytes()


def instr(issued_ns, *, seq=1, target=4, action=Action.BUY, iid=1, ttl_ms=5_000) -> bytes:
    r = np.zeros(1, INSTRUCTION_DTYPE)
    r["instrument_id"], r["action"], r["target_lots"], r["signal_seq"] = iid, action, target, seq
    r["issued_ns"], r["ttl_ms"], r["instruction_id"] = issued_ns, ttl_ms, seq
    return r.tobytes()


def orders(port) -> list[np.void]:
    return [np.frombuffer(p, ORDER_DTYPE, 1)[0] for k, p, _, _ in port.msgs if k == Kind.ORDER]


def make(tmp_path, *, control=(), exec_=(), signals=(), instrs=(), params=None, inputs=("control", "exec", "sig_risk",
                                                                                         "instr"), clock=None,
         outputs=("orders",)):
    feeds = {"control": control, "exec": exec_, "sig_risk": signals, "instr": instrs}
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    if not epoch_path(run_dir).exists():
        write_run_epoch(run_dir)
    text = (dirs(tmp_path) + ring("sig_risk") + ring("instr", payload=128) + ring("exec", payload=128)
            + ring("control", payload=16) + ring("orders", payload=128) + ring("pos", payload=32) + INSTRUMENTS)
    proc = ProcessConfig(name="risk", module="procs.risk:RiskAgent", inputs=list(inputs), outputs=list(outputs),
                         batch=64, params=params or {})
    ctx = stage_context(text, proc, inputs={n: ListInput(feeds[n]) for n in inputs},
                        outputs={n: RecordingPort() for n in outputs}, clock=clock or ManualClock())
    agent = RiskAgent()
    agent.on_start(ctx)
    return agent, ctx


def drain(agent):
    while agent.do_work():
        pass


def audit(tmp_path, name="risk_audit.jsonl") -> list[dict]:
    return [orjson.loads(line) for line in (tmp_path / "logs" / name).read_bytes().splitlines()]


def test_sync_then_an_instruction_becomes_new_orders_and_every_decision_is_audited(tmp_path):
    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)],
                      signals=[(Kind.SIGNAL, sig(1), t - 5_000_000)],
                      instrs=[(Kind.INSTRUCTION, instr(t, seq=11, target=12, ttl_ms=1000), t - 3_000_000),
                              (Kind.INSTRUCTION, instr(t - 2_000_000_000, seq=12, ttl_ms=1000), t - 2_000_000)],
                      params={"limits": {"max_child_lots": 5, "min_notional": 0.0}}, clock=clock)
    port = ctx.outputs["orders"]
    assert [int(o["cmd"]) for o in orders(port)] == [OrderCmd.SYNC]  # written by on_start
    drain(agent)
    got = orders(port)
    assert [int(o["cmd"]) for o in got] == [OrderCmd.SYNC, OrderCmd.NEW, OrderCmd.NEW, OrderCmd.NEW]
    new = got[1:]
    assert [round(float(o["size"]), 8) for o in new] == [0.0005, 0.0005, 0.0002]
    assert {float(o["price"]) for o in new} == {49_999.5} and {int(o["side"]) for o in new} == {Side.BUY}
    epoch = read_run_epoch(tmp_path / "run")
    assert [int(o["order_id"]) for o in new] == [order_id_for(1, 11, leg, epoch) for leg in range(3)]
    assert {int(o["origin_seq"]) for o in new} == {11} and {int(o["decided_ns"]) for o in new} == {t}
    assert [ts for k, _, ts, _ in port.msgs][1:] == [t - 3_000_000] * 3  # the instruction's origin stamp
    st = ctx.stats
    assert (st["approved"], st["expired"], st["open"], st["synced"], st["state"]) == (3, 1, 3, 1, "ACTIVE")
    lines = audit(tmp_path)
    assert [d["ev"] for d in lines] == ["SyncRequested", "Synced", "InstructionPlanned", "OrderApproved",
                                        "OrderApproved", "OrderApproved", "InstructionExpired"]
    assert lines[3]["order_id"] == order_id_for(1, 11, 0, epoch) and lines[6]["signal_seq"] == 12
    assert stat.S_IMODE(os.stat(tmp_path / "logs" / "risk_audit.jsonl").st_mode) == 0o600
    agent.on_close()


def test_control_is_read_before_instructions_and_a_kill_switch_cancels_everything(tmp_path):
    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, control=[(Kind.CONTROL, ctl(ControlCmd.KILL_SWITCH), t)],
                      exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)],
                      signals=[(Kind.SIGNAL, sig(1), t)], instrs=[(Kind.INSTRUCTION, instr(t), t)], clock=clock)
    drain(agent)
    got = orders(ctx.outputs["orders"])
    assert [(int(o["cmd"]), int(o["instrument_id"])) for o in got] == [
        (OrderCmd.SYNC, 0), (OrderCmd.CANCEL_ALL, 1), (OrderCmd.CANCEL_ALL, 2)]
    st = ctx.stats
    assert st["state"] == "HALTED" and st["deny_halted"] == 1 and st["approved"] == 0 and st["cancel_all"] == 2
    denied = [d for d in audit(tmp_path) if d["ev"] == "OrderDenied"]
    assert denied[0]["code"] == "HALTED" and denied[0]["reason"] == 1
    state = ctx.log.named("risk_state")
    assert state and state[0]["new"] == "HALTED" and state[0]["cause"] == "kill_switch" and state[0]["latched"]


def test_emergency_signal_cancels_all_at_once_and_counts(tmp_path):
    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, signals=[(Kind.SIGNAL, sig(5, label=Label.EMERGENCY), t)], inputs=("sig_risk",),
                      clock=clock)
    drain(agent)
    got = orders(ctx.outputs["orders"])
    assert [(int(o["cmd"]), int(o["instrument_id"]), int(o["origin_seq"])) for o in got][1:] == [
        (OrderCmd.CANCEL_ALL, 1, 5)]
    assert ctx.stats["emerg"] == 1 and ctx.stats["cancel_all"] == 1


def test_exec_reports_move_position_and_open_order_counters(tmp_path):
    clock = ManualClock()
    t = clock()
    rep = [(Kind.EXEC_REPORT, ex(ExecType.POSITION, price=49_000.0, size=0.0003), t),
           (Kind.EXEC_REPORT, ex(ExecType.OPEN_ORDER, oid=9, side=Side.SELL, price=50_100.0, size=0.0002,
                                 leaves=0.0002), t),
           (Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t),
           (Kind.EXEC_REPORT, ex(ExecType.FILLED, oid=9, side=Side.SELL, price=50_100.0, size=0.0002), t)]
    agent, ctx = make(tmp_path, exec_=rep, inputs=("exec",), clock=clock)
    drain(agent)
    st = ctx.stats
    assert st["pos_lots_1"] == 1.0 and st["pos_lots_2"] == 0 and st["open"] == 0 and st["fills"] == 1
    synced = ctx.log.named("risk_synced")[0]
    assert synced["positions"]["1"] == pytest.approx(0.0003) and synced["open_orders"] == 1


def test_position_changes_are_written_for_the_llm_in_lots_without_waiting(tmp_path):
    """The optional ``pos`` output: every instrument once at the first SYNC_DONE, then one POSITION per
    fill; a later SYNC_DONE writes only what changed; a refused write is counted, never waited on."""
    clock = ManualClock()
    t = clock()
    rep = [(Kind.EXEC_REPORT, ex(ExecType.POSITION, price=49_000.0, size=0.0003), t),
           (Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t),
           (Kind.EXEC_REPORT, ex(ExecType.FILLED, oid=9, side=Side.SELL, price=50_100.0, size=0.0005), t)]
    agent, ctx = make(tmp_path, exec_=rep, inputs=("exec",), outputs=("orders", "pos"), clock=clock)
    drain(agent)
    pos = ctx.outputs["pos"]
    assert {k for k, _, _, _ in pos.msgs} == {Kind.POSITION}
    assert [unpack_position(p) for _, p, _, _ in pos.msgs] == [(1, 3, t), (2, 0, t), (1, -2, t)]
    clock.advance(5)
    ctx.inputs["exec"].msgs += [(Kind.EXEC_REPORT, ex(ExecType.POSITION, price=50_100.0, size=-0.0002), t),
                                (Kind.EXEC_REPORT, ex(ExecType.POSITION, iid=2, price=3_000.0, size=0.004), t),
                                (Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)]
    drain(agent)
    assert [unpack_position(p) for _, p, _, _ in pos.msgs][3:] == [(2, 4, t + 5)]  # instrument 1 did not change
    pos.accept = False  # the llm's ring is full: try_write refuses; a waiting write would be a bug
    pos.write = lambda *a, **k: pytest.fail("risk waited for room in the position ring")
    ctx.inputs["exec"].msgs.append((Kind.EXEC_REPORT, ex(ExecType.FILLED, side=Side.BUY, price=50_000.0,
                                                         size=0.0001), t))
    drain(agent)
    assert ctx.stats["pos_dropped"] == 1 and ctx.stats["fills"] == 2 and len(pos.msgs) == 4
    # POSITIONs have their own count; msgs_out stays the ORDERs' (the start-up SYNC here), as the chaos order counts read it
    assert ctx.stats["pos_written"] == 4 and ctx.msgs_out == len(ctx.outputs["orders"].msgs) == 1  # the SYNC
    agent.on_close()


def test_malformed_input_and_wrong_kinds_are_counted_not_raised(tmp_path):
    t = ManualClock()()
    agent, ctx = make(tmp_path, signals=[(Kind.SIGNAL, b"\0" * 12, t), (Kind.BOOK, sig(1), t)],
                      control=[(Kind.CONTROL, b"\xff" * 16, t)], inputs=("control", "sig_risk"))
    drain(agent)
    assert ctx.stats["rejected"] == 3 and ctx.log.named("risk_input_rejected")
    assert [d["ev"] for d in audit(tmp_path)].count("MessageRejected") == 3


def test_an_order_the_port_refuses_is_counted_and_no_longer_open(tmp_path):
    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)],
                      signals=[(Kind.SIGNAL, sig(1), t)], instrs=[(Kind.INSTRUCTION, instr(t, target=2), t)],
                      clock=clock)
    ctx.outputs["orders"].accept = False
    drain(agent)
    assert ctx.stats["order_drops"] == 1 and ctx.stats["open"] == 0 and ctx.log.named("risk_order_dropped")


def test_a_new_order_whose_audit_record_cannot_be_written_is_not_sent_but_cancels_are(tmp_path):
    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)],
                      signals=[(Kind.SIGNAL, sig(1), t)], instrs=[(Kind.INSTRUCTION, instr(t, target=2), t)],
                      clock=clock)
    os.close(agent.audit_fd)
    agent.audit_fd = os.open(os.devnull, os.O_RDONLY)  # every write now fails (EBADF)
    drain(agent)
    assert [int(o["cmd"]) for o in orders(ctx.outputs["orders"])] == [OrderCmd.SYNC]
    st = ctx.stats
    assert st["audit_blocked"] == 1 and st["audit_errors"] >= 1 and st["open"] == 0
    assert ctx.log.named("risk_audit_write_failed")
    ctx.inputs["sig_risk"].msgs.append((Kind.SIGNAL, sig(2, label=Label.EMERGENCY), t))
    drain(agent)
    assert [int(o["cmd"]) for o in orders(ctx.outputs["orders"])][-1] == OrderCmd.CANCEL_ALL, "cancels still leave"
    agent.on_close()


def test_bad_limits_fail_the_start_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match="max_open_ordrs"):
        make(tmp_path, params={"limits": {"max_open_ordrs": 3}})
    with pytest.raises(ConfigError, match="risk: bad params: Object contains unknown field `limit`"):
        make(tmp_path, params={"limit": {}})
    with pytest.raises(ConfigError, match="risk: bad params: .*audit_path"):
        make(tmp_path, params={"audit_path": 3})


def test_audit_path_param(tmp_path):
    path = tmp_path / "logs" / "elsewhere.jsonl"
    agent, _ = make(tmp_path, params={"audit_path": str(path)}, inputs=("instr",))
    agent.on_close()
    assert [d["ev"] for d in audit(tmp_path, "elsewhere.jsonl")] == ["SyncRequested"]


# ------------------------------------------------------------------------------------- end to end
class RiskFeeder(Agent):
    """Feeds the risk stage through real rings: SYNC_DONE on ``exec``, then SIGNALs (instrument 1, mid
    50 000) every ``signal_ms``, an INSTRUCTION (alternating BUY 4 / SELL -4 lots) every ``instr_ms``,
    and CONTROL KILL_SWITCH on ``control`` after ``kill_after_ms`` (noted in ``params.out``); it goes on
    sending instructions after the kill."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.sig, self.ins = ctx.outputs["sig_risk"], ctx.outputs["instr"]
        self.ctl, self.exec = ctx.outputs["control"], ctx.outputs["exec"]
        p = ctx.params
        self.signal_ns, self.instr_ns = int(p["signal_ms"]) * 1_000_000, int(p["instr_ms"]) * 1_000_000
        self.kill_ns = int(p["kill_after_ms"]) * 1_000_000
        self.out = p["out"]
        self.t0 = ctx.clock()
        self.next_sig = self.next_ins = self.t0
        self.seq = 0
        self.n_ins = 0
        self.killed = False
        now = ctx.clock()
        ctx.emit(self.exec, Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), now)

    def do_work(self) -> int:
        now = self.ctx.clock()
        n = 0
        if now >= self.next_sig:
            self.seq += 1
            self.ctx.emit(self.sig, Kind.SIGNAL, sig(self.seq), now)
            self.next_sig = now + self.signal_ns
            n += 1
        if now >= self.next_ins and self.seq:
            self.n_ins += 1
            buy = self.n_ins % 2 == 1
            self.ctx.emit(self.ins, Kind.INSTRUCTION, instr(now, seq=self.seq, target=4 if buy else -4,
                                                           action=Action.BUY if buy else Action.SELL), now)
            self.next_ins = now + self.instr_ns
            n += 1
            if self.killed:
                with open(self.out, "a") as f:
                    f.write("instr_after_kill\n")
        if not self.killed and now - self.t0 >= self.kill_ns:
            self.ctx.emit(self.ctl, Kind.CONTROL, ctl(ControlCmd.KILL_SWITCH), now)
            self.killed = True
            with open(self.out, "a") as f:
                f.write("kill\n")
            n += 1
        return n


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_kill_switch_through_real_rings_cancels_all_and_no_new_order_follows(pipe):
    me = "tests.procs.test_risk_agent"
    orders_out, feeder_out = pipe.tmp / "orders.txt", pipe.tmp / "feeder.txt"
    body = (ring("sig_risk", payload=64, capacity=1024, policy="drop") + ring("instr", payload=128, capacity=256)
            + ring("exec", payload=128, capacity=256) + ring("control", payload=16, capacity=64)
            + ring("orders", payload=128, capacity=1024)
            + process("src", f"{me}:RiskFeeder", outputs=["sig_risk", "instr", "exec", "control"], extra=BACK_OFF,
                      params=f'signal_ms = 20, instr_ms = 100, kill_after_ms = 1500, out = "{feeder_out}"')
            + process("risk", "procs.risk:RiskAgent", inputs=["control", "exec", "sig_risk", "instr"],
                      outputs=["orders"], extra=BACK_OFF, params="limits = { min_notional = 0.0 }")
            + process("sink", "PayloadSink", inputs=["orders"], extra='wait = "blocking"\n',
                      params=f'out = "{orders_out}"')
            + INSTRUMENTS)
    pipe.write_config(body)
    pipe.up()

    def lines(path):
        return path.read_text().splitlines() if path.exists() else []

    def cmds():
        return [OrderCmd(int(o["cmd"])).name for _, _, o in read_payloads(orders_out, ORDER_DTYPE)]

    wait_until(lambda: lines(feeder_out).count("instr_after_kill") >= 5, 20, 0.05, "5 instructions after the kill")
    wait_until(lambda: cmds().count("CANCEL_ALL") >= 2, 10, 0.05, "CANCEL_ALL")
    got = cmds()
    assert got[0] == "SYNC"
    first_kill = got.index("CANCEL_ALL")
    assert "NEW" in got[:first_kill]  # it was trading before the kill
    assert got[first_kill:first_kill + 2] == ["CANCEL_ALL", "CANCEL_ALL"]  # both instruments
    assert "NEW" not in got[first_kill:]  # and nothing new after it
    st = pipe.procs()["risk"]["stage"]
    assert st["state"] == "HALTED" and st.get("deny_halted", 0) >= 1
    events = read_log(pipe.log_dir / "risk_audit.jsonl")
    assert any(e["ev"] == "StateChanged" and e["cause"] == "kill_switch" for e in events)
    assert pipe.down() == 0


def test_keep_warm_runs_the_fast_paths_on_a_shadow_and_leaves_the_real_gateway_untouched(tmp_path, monkeypatch):
    import procs.risk as risk_mod

    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)], signals=[(Kind.SIGNAL, sig(1), t)],
                      params={"limits": {"lean_lots": 2, "min_notional": 0.0}}, clock=clock)
    drain(agent)
    port = ctx.outputs["orders"]
    before = (len(port.msgs), dict(ctx.stats), (tmp_path / "logs" / "risk_audit.jsonl").read_bytes())
    real = agent.gw.books[1]
    mid, working, pos = real.mid, dict(real.working), real.position
    seen = []
    step = risk_mod._Shadow.step
    monkeypatch.setattr(risk_mod._Shadow, "step", lambda self: seen.append(step(self)) or seen[-1])
    for _ in range(40):
        agent.keep_warm()
    kinds = {type(e).__name__ for evs in seen for e in evs}
    assert {"OrderApproved", "CancelAllSent", "EmergencyReceived"} <= kinds  # the paths a fast-path message takes
    assert agent._shadow.gw is not agent.gw and agent._shadow.gw.books[1].working == {}  # the shadow stays flat
    assert (len(port.msgs), dict(ctx.stats), (tmp_path / "logs" / "risk_audit.jsonl").read_bytes()) == before
    assert (real.mid, real.working, real.position) == (mid, working, pos)
    # and the real gateway decides exactly as it would have: an EMERGENCY still cancels at once
    ctx.inputs["sig_risk"].msgs.append((Kind.SIGNAL, sig(9, label=Label.EMERGENCY), t))
    drain(agent)
    assert [(int(o["cmd"]), int(o["origin_seq"])) for o in orders(port)][-1] == (OrderCmd.CANCEL_ALL, 9)
    agent.on_close()


def test_without_a_run_epoch_the_stage_does_not_start(tmp_path):
    """Order ids must not repeat across runs: a risk stage started outside `up` (no run epoch) refuses."""
    from pipeline.runtime.errors import StartupError
    proc = ProcessConfig(name="risk", module="procs.risk:RiskAgent", inputs=["exec"], outputs=["orders"], params={})
    ctx = stage_context(dirs(tmp_path, run="empty") + ring("exec", payload=128) + ring("orders", payload=128)
                        + INSTRUMENTS, proc, inputs={"exec": ListInput([])}, outputs={"orders": RecordingPort()},
                        clock=ManualClock())
    with pytest.raises(StartupError, match="run.epoch"):
        RiskAgent().on_start(ctx)


def test_net_pnl_per_instrument_is_published_in_the_stats(tmp_path):
    """``pnl_<id>``: realized + unrealized at the latest mid, in cents; at once on a fill or a sync,
    otherwise once a heartbeat interval (100 ms) of message time has passed since the last refresh."""
    clock = ManualClock()
    t, ms = clock(), 1_000_000
    rep = [(Kind.EXEC_REPORT, ex(ExecType.POSITION, price=49_000.0, size=0.0003), t),
           (Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)]
    agent, ctx = make(tmp_path, exec_=rep, inputs=("exec", "sig_risk"), clock=clock)
    st = ctx.stats
    keys = list(st)  # from the start, right after the positions (the status record keeps the first keys)
    assert keys[keys.index("pos_lots_2") + 1:keys.index("pos_lots_2") + 3] == ["pnl_1", "pnl_2"]
    drain(agent)
    assert (st["pnl_1"], st["pnl_2"]) == (0.0, 0.0)  # long 3 lots from 49,000, no mid yet
    sigs = ctx.inputs["sig_risk"].msgs
    sigs.append((Kind.SIGNAL, sig(1, mid=50_000.0), t + 50 * ms))
    drain(agent)
    assert st["pnl_1"] == 0.0  # not due yet: the sync refreshed it 50 ms ago
    sigs.append((Kind.SIGNAL, sig(2, mid=50_000.0), t + 100 * ms))
    drain(agent)
    assert st["pnl_1"] == 0.3  # 0.0003 * (50,000 - 49,000)
    ctx.inputs["exec"].msgs.append((Kind.EXEC_REPORT, ex(ExecType.FILLED, oid=9, side=Side.SELL, price=50_100.0,
                                                         size=0.0002), t + 110 * ms))
    drain(agent)
    assert st["pnl_1"] == 0.32  # at once: realized 0.0002 * 1,100 = 0.22, + 0.0001 * 1,000 unrealized
    ctx.inputs["exec"].msgs.append((Kind.EXEC_REPORT, ex(ExecType.FILLED, iid=2, oid=10, side=Side.BUY,
                                                         price=3_000.0, size=0.004), t + 120 * ms))
    sigs.append((Kind.SIGNAL, sig(3, iid=2, mid=2_990.0), t + 250 * ms))
    drain(agent)
    assert (st["pnl_1"], st["pnl_2"]) == (0.32, -0.04)  # 0.004 * (2,990 - 3,000)
    assert st["pnl_1"] + st["pnl_2"] == pytest.approx(agent.gw.pnl())  # the gateway's P&L, split per instrument
    ctx.inputs["exec"].msgs += [(Kind.EXEC_REPORT, ex(ExecType.POSITION, price=49_000.0, size=0.0005), t + 260 * ms),
                                (Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t + 260 * ms)]
    drain(agent)
    assert (st["pnl_1"], st["pnl_2"]) == (0.72, 0.0)  # at once: 0.22 + 0.0005 * 1,000; #2 flat (not reported)
    agent.on_close()


def test_bad_execution_params_or_risk_aversion_fail_the_start_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"params\.execution.*planner"):
        make(tmp_path, params={"execution": {"planner": "fancy"}})
    with pytest.raises(ConfigError, match="liquidity_ration"):
        make(tmp_path, params={"execution": {"liquidity_ration": 1.2}})
    with pytest.raises(ConfigError, match=r"params\.limits\.risk_aversion"):
        make(tmp_path, params={"limits": {"risk_aversion": 2.5}})


def _depth_sig(seq, asks=()):
    from tests.support.depth import depth_sig

    return depth_sig(1, mid=MID, spread=1.0, seq=seq, asks=asks)


def test_the_depth_planner_waits_for_liquidity_and_status_shows_each_parents_state(tmp_path):
    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)],
                      signals=[(Kind.SIGNAL, _depth_sig(1), t)], params={"execution": {"planner": "depth"}},
                      clock=clock)
    drain(agent)
    assert ctx.stats["par_1"] == "-" and ctx.stats["par_2"] == "-"
    keys = list(ctx.stats)
    assert keys.index("par_1") == keys.index("pnl_2") + 1  # early in the record: the status keeps the first keys
    ctx.inputs["instr"].msgs.append((Kind.INSTRUCTION, instr(t, seq=5, target=4), t))
    drain(agent)
    new = lambda: [o for o in orders(ctx.outputs["orders"]) if o["cmd"] == OrderCmd.NEW]  # noqa: E731
    assert not new() and ctx.stats["par_1"] == "WAIT 0/4"
    # the buy rests 5 ticks under the mid; 1.0 of asks within 5 ticks above it is > 1.2 x 0.0004
    ctx.inputs["sig_risk"].msgs.append((Kind.SIGNAL, _depth_sig(2, asks=[(5.0, 1.0)]), t))
    drain(agent)
    [o] = new()
    assert (float(o["price"]), float(o["size"])) == (49_999.5, 0.0004)
    assert ctx.stats["par_1"] == "SUBM 0/4"
    ctx.inputs["exec"].msgs.append((Kind.EXEC_REPORT, ex(ExecType.FILLED, oid=int(o["order_id"]), side=Side.BUY,
                                                         price=49_999.5, size=0.0001, leaves=0.0003), t))
    drain(agent)
    assert ctx.stats["par_1"] == "PART 1/4"
    lines = [(a["old"], a["new"]) for a in audit(tmp_path) if a["ev"] == "ParentChanged"]
    assert lines == [("", "WAIT_LIQUIDITY"), ("WAIT_LIQUIDITY", "SUBMITTED"), ("SUBMITTED", "PARTIAL_FILLED")]
    agent.on_close()


def test_keep_warm_takes_the_depth_planners_paths_on_its_shadow(tmp_path, monkeypatch):
    import procs.risk as risk_mod

    clock = ManualClock()
    t = clock()
    agent, ctx = make(tmp_path, exec_=[(Kind.EXEC_REPORT, ex(ExecType.SYNC_DONE), t)],
                      signals=[(Kind.SIGNAL, _depth_sig(1), t)], clock=clock,
                      params={"limits": {"lean_lots": 2, "min_notional": 0.0}, "execution": {"planner": "depth"}})
    drain(agent)
    before = (len(ctx.outputs["orders"].msgs), dict(ctx.stats))
    seen = []
    step = risk_mod._Shadow.step
    monkeypatch.setattr(risk_mod._Shadow, "step", lambda self: seen.append(step(self)) or seen[-1])
    for _ in range(12):
        agent.keep_warm()
    kinds = {type(e).__name__ for evs in seen for e in evs}
    assert {"ParentChanged", "OrderApproved", "CancelAllSent"} <= kinds
    assert agent._shadow.gw.depth_mode and agent._shadow.gw.books[1].working == {}
    assert (len(ctx.outputs["orders"].msgs), dict(ctx.stats)) == before
    agent.on_close()


@pytest.mark.parametrize("planner, size", [("simple", "SIGNAL_STRUCT"), ("depth", "SIGNAL_DEPTH_DTYPE")])
def test_the_keep_warm_shadow_feeds_its_planner_the_signal_shape_it_reads_and_takes_the_order_path(planner, size):
    """The depth planner reads SIGNALs with depth (deep at the touch, so its gate opens), the simple one
    the plain ones; either way the shadow's LEAN_BUY is approved."""
    import procs.risk as risk_mod
    from pipeline.runtime.config import InstrumentConfig
    from pipeline.trading.messages import SIGNAL_DEPTH_DTYPE, SIGNAL_STRUCT
    from pipeline.trading.risk.execution import ExecutionParams
    from pipeline.trading.risk.limits import RiskLimits

    instruments = [InstrumentConfig(id=1, symbol="BTCUSDT", venue="paper", tick_size=0.1, lot_size=0.0001)]
    shadow = risk_mod._Shadow(instruments, RiskLimits(lean_lots=2), ExecutionParams(planner=planner))
    want = {"SIGNAL_STRUCT": SIGNAL_STRUCT.size, "SIGNAL_DEPTH_DTYPE": SIGNAL_DEPTH_DTYPE.itemsize}[size]
    assert [len(m) for m in shadow.msgs if m is not None] == [want] * 3
    events = [e for _ in range(2) for e in shadow.step()]
    assert any(type(e).__name__ == "OrderApproved" for e in events), events
