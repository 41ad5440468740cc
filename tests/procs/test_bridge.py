"""The bridge stages as the runner drives them (in-process, ring ports as doubles, real sockets on
127.0.0.1 with plain tcp, which these tests say): a book crosses MD out -> MD in into the receiving
ring; an ORDER crosses shard -> shared gateway and its EXEC_REPORT comes back once; bad params and
a plain endpoint off loopback fail the start naming the field."""

from __future__ import annotations

import struct
import time

import msgspec
import pytest

from pipeline.runtime.bridge import curve
from pipeline.runtime.bridge.params import GatewayParams, MdOutParams, ShardParams, check_security
from pipeline.runtime.config import load_config
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.runner import load_stage_params
from pipeline.trading.messages import EXEC_STRUCT, ExecType, Kind, OrderCmd, decode_order
from procs.bridge import GatewayAgent, MdInAgent, MdOutAgent, ShardAgent
from tests.support.bridge import free_port, order_payload, sender_reports, state_item
from tests.support.configtext import BACK_OFF, INSTRUMENTS, dirs, process, ring
from tests.support.context import stage_context
from tests.support.paths import REPO_ROOT
from tests.support.wait import wait_until
from tests.support.ports import ListInput, RecordingPort

PLAIN = 'security = { mode = "plain-loopback" }'


def run_until(agents, done, timeout_s=3.0):
    end = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < end, "timed out"
        for a in agents:
            a.do_work()
        time.sleep(0.001)


def start(agent, tmp_path, name, module, params, *, inputs=None, outputs=None):
    rings = "".join(ring(r, payload=512) for r in ("a", "b"))
    text = dirs(tmp_path) + rings + process(name, module, inputs=list(inputs or {}), outputs=list(outputs or {}),
                                             params=params) + INSTRUMENTS
    (tmp_path / "run").mkdir(exist_ok=True)
    ctx = stage_context(text, name, inputs=inputs, outputs=outputs)
    agent.on_start(ctx)
    return agent


def sync_with_sender(gw, to_sender, from_sender, items=()):
    """The gateway's start-up SYNC read from its output ring and answered as its sender would: the
    state report ``items`` then SYNC_DONE."""
    run_until([gw], lambda: to_sender.msgs)
    (kind, payload, _, _), = to_sender.msgs
    assert (kind, decode_order(payload).cmd) == (Kind.ORDER, OrderCmd.SYNC)
    to_sender.msgs.clear()
    for item in (*items, state_item(0, ExecType.SYNC_DONE)):
        from_sender.msgs.append((Kind.EXEC_REPORT, item, 0))
    run_until([gw], lambda: gw.shell.core.checks.synced)


def test_a_book_crosses_from_md_out_into_the_receiving_ring(tmp_path):
    pub, snap = free_port(), free_port()
    eps = f'pub_endpoint = "tcp://127.0.0.1:{pub}", snapshot_endpoint = "tcp://127.0.0.1:{snap}", {PLAIN}'
    src, dst = ListInput([(Kind.BOOK, struct.pack("<H", 1) + bytes(30), 123)]), RecordingPort()
    out = start(MdOutAgent(), tmp_path, "mdout", "procs.bridge:MdOutAgent", eps, inputs={"a": src})
    inn = start(MdInAgent(), tmp_path, "mdin", "procs.bridge:MdInAgent", eps, outputs={"b": dst})
    try:
        run_until([out, inn], lambda: dst.msgs)
        kind, payload, ts, _ = dst.msgs[0]
        assert (kind, payload[:2], ts) == (Kind.BOOK, b"\x01\x00", 123)
        assert (tmp_path / "run" / "mdin.mdseq").exists()
    finally:
        inn.on_close()
        out.on_close()


def test_an_order_crosses_to_the_shared_gateway_its_sender_and_its_reports_come_back_once(tmp_path):
    port = free_port()
    gw_params = (f'endpoint = "tcp://127.0.0.1:{port}", shards = {{ "1" = [1], "2" = [2] }}, {PLAIN}, '
                 'limits = { max_order_lots = 1000000, max_position_lots = 1000000 }')
    orders, reports = ListInput([(Kind.ORDER, order_payload(1, 77, 100.0, 0.01), 9)]), RecordingPort()
    to_sender, from_sender = RecordingPort(), ListInput([])
    gw = start(GatewayAgent(), tmp_path, "gw", "procs.bridge:GatewayAgent", gw_params,
               inputs={"a": from_sender}, outputs={"b": to_sender})
    sync_with_sender(gw, to_sender, from_sender)
    shard = start(ShardAgent(), tmp_path, "shard", "procs.bridge:ShardAgent",
                  f'shard_id = 1, instruments = [1], gateway_endpoint = "tcp://127.0.0.1:{port}", {PLAIN}',
                  inputs={"a": orders}, outputs={"b": reports})
    try:
        run_until([gw, shard], lambda: to_sender.msgs)
        (kind, payload, ts, _), = to_sender.msgs
        assert (kind, payload, ts) == (Kind.ORDER, order_payload(1, 77, 100.0, 0.01), 9)  # the shard's ORDER as is
        assert reports.msgs == []  # the gateway fills nothing itself
        for rep in sender_reports(payload, 123):  # the sender's ACKED and FILLED
            from_sender.msgs.append((Kind.EXEC_REPORT, rep, ts))
        from_sender.msgs.append((Kind.EXEC_REPORT, sender_reports(payload, 123)[1], ts))  # a copy: once only
        run_until([gw, shard], lambda: len(reports.msgs) == 2)
        time.sleep(0.05)
        for _ in range(20):
            gw.do_work(), shard.do_work()
        got = [(k, EXEC_STRUCT.unpack(p)[1], EXEC_STRUCT.unpack(p)[4], t) for k, p, t, _ in reports.msgs]
        assert got == [(Kind.EXEC_REPORT, ExecType.ACKED, 77, 9), (Kind.EXEC_REPORT, ExecType.FILLED, 77, 9)]
        assert gw.shell.core.position_lots(1) == pytest.approx(100)
        assert gw.shell.core.stats["duplicate_fills"] == 1
    finally:
        shard.on_close()
        gw.on_close()


@pytest.mark.parametrize("agent, module, params, field", [
    (ShardAgent, "ShardAgent", f'shard_id = 1, instruments = [1], gateway_endpoint = "tcp://10.0.0.1:5000", {PLAIN}',
     "security.mode"),
    (ShardAgent, "ShardAgent", 'shard_id = 1, instruments = [1], gateway_endpoint = "tcp://10.0.0.1:5000"',
     "security.secret_key_file"),
    (GatewayAgent, "GatewayAgent", f'endpoint = "tcp://127.0.0.1:5000", shards = {{ "x" = [1] }}, {PLAIN}',
     "shards.x"),
    (GatewayAgent, "GatewayAgent", f'endpoint = "tcp://127.0.0.1:5000", shards = {{ "1" = [1], "2" = [1] }}, {PLAIN}',
     "shards.2"),
    (MdInAgent, "MdInAgent", 'pub_endpoint = "tcp://127.0.0.1:1", snapshot_endpoint = "tcp://127.0.0.1:2", '
     'seq_fil = "x"', "seq_fil"),
])
def test_bad_params_fail_the_start_naming_the_field(tmp_path, agent, module, params, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        start(agent(), tmp_path, "b", f"procs.bridge:{module}", params)


def test_a_restarted_shards_sync_is_answered_with_its_state_in_the_shared_gateway(tmp_path):
    port = free_port()
    gw_params = (f'endpoint = "tcp://127.0.0.1:{port}", shards = {{ "1" = [1], "2" = [2] }}, {PLAIN}, '
                 'limits = { max_order_lots = 1000000, max_position_lots = 1000000 }')
    to_sender, from_sender = RecordingPort(), ListInput([])
    gw = start(GatewayAgent(), tmp_path, "gw", "procs.bridge:GatewayAgent", gw_params,
               inputs={"a": from_sender}, outputs={"b": to_sender})
    sync_with_sender(gw, to_sender, from_sender)
    shard_params = f'shard_id = 1, instruments = [1], gateway_endpoint = "tcp://127.0.0.1:{port}", {PLAIN}'
    orders, reports = ListInput([(Kind.ORDER, order_payload(1, 78, 100.0, 0.02), 9)]), RecordingPort()
    shard = start(ShardAgent(), tmp_path, "shard", "procs.bridge:ShardAgent", shard_params,
                  inputs={"a": orders}, outputs={"b": reports})
    again = None
    try:
        run_until([gw, shard], lambda: to_sender.msgs)
        for rep in sender_reports(to_sender.msgs[0][1], 5):  # filled: 200 lots at the shared gateway
            from_sender.msgs.append((Kind.EXEC_REPORT, rep, 9))
        run_until([gw, shard], lambda: len(reports.msgs) == 2)
        shard.on_close()  # the shard host restarts: a new bridge, its local risk asks SYNC
        shard = None
        sync = ListInput([(Kind.ORDER, order_payload(0, 0, 0.0, 0.0, cmd=OrderCmd.SYNC), 4)])
        state = RecordingPort()
        again = start(ShardAgent(), tmp_path, "shard", "procs.bridge:ShardAgent", shard_params,
                      inputs={"a": sync}, outputs={"b": state})
        run_until([gw, again], lambda: len(state.msgs) >= 2)
        got = [EXEC_STRUCT.unpack(p) for _, p, _, _ in state.msgs]
        assert [(r[0], r[1]) for r in got] == [(1, ExecType.POSITION), (0, ExecType.SYNC_DONE)]
        assert (got[0][6], got[0][5]) == pytest.approx((0.02, 100.0))  # its position, average entry
    finally:
        for a in (shard, again, gw):
            if a is not None:
                a.on_close()


MULTIHOST = sorted((REPO_ROOT / "configs" / "multihost").glob("*.toml"))


@pytest.mark.parametrize("path", MULTIHOST, ids=lambda p: p.name)
def test_multihost_examples_load_and_their_bridge_params_hold(path):
    cfg = load_config(path)
    bridges = [p for p in cfg.processes if p.module.startswith("procs.bridge:")]
    assert bridges
    for proc in bridges:
        params = load_stage_params(proc)
        server = isinstance(params, (MdOutParams, GatewayParams))
        eps = [getattr(params, f) for f in ("pub_endpoint", "snapshot_endpoint", "gateway_endpoint", "endpoint")
               if hasattr(params, f)]
        check_security(proc.name, params.security, eps, server=server)
        assert params.security.mode == "curve"


def test_multihost_shards_claim_what_the_gateway_gives_them():
    gw = load_stage_params(load_config(REPO_ROOT / "configs/multihost/gateway.toml").process("gateway"))
    claims = {}
    for name in ("shard-a", "shard-b"):
        p = load_stage_params(load_config(REPO_ROOT / f"configs/multihost/{name}.toml").process("shard"))
        claims[str(p.shard_id)] = p.instruments
    assert claims == gw.shards


def test_bridge_stages_under_the_supervisor_carry_books_between_rings(pipe):
    """md -> md_out ==tcp 127.0.0.1 (plain, this test says so)==> md_in -> md2: the last book always
    arrives (in the stream or as a snapshot after a counted gap), none twice, in order."""
    src_out, sink_out = pipe.tmp / "src.txt", pipe.tmp / "sink.txt"
    pub, snap = free_port(), free_port()
    eps = f'pub_endpoint = "tcp://127.0.0.1:{pub}", snapshot_endpoint = "tcp://127.0.0.1:{snap}", {PLAIN}'
    pipe.write_config(
        ring("md", payload=512, capacity=1024, policy="drop") + ring("md2", payload=512, capacity=1024, policy="drop")
        + process("src", "BookSource", outputs=["md"], extra=BACK_OFF, params=f'out = "{src_out}", total = 40')
        + process("md_out", "procs.bridge:MdOutAgent", inputs=["md"], extra=BACK_OFF, params=eps)
        + process("md_in", "procs.bridge:MdInAgent", outputs=["md2"], extra=BACK_OFF,
                  params=eps + f', seq_file = "{pipe.tmp / "md_in.seq"}"')
        + process("sink", "BookCounter", inputs=["md2"], extra=BACK_OFF, params=f'out = "{sink_out}"')
        + INSTRUMENTS)
    pipe.up()

    def seqs():
        text = sink_out.read_text() if sink_out.exists() else ""
        return [int(ln.split()[2]) for ln in text.splitlines()]

    got = wait_until(lambda: (s := seqs()) and s[-1] == 40 and s, 15, 0.02, "book 40 through the bridge")
    assert got == sorted(set(got))
    st = wait_until(lambda: pipe.procs()["md_out"]["stage"].get("published") == 40 or None, 5, 0.05, "md_out stats")
    assert st
    assert pipe.down() == 0


def test_preflight_refuses_missing_or_open_key_files_before_anything_starts(tmp_path):
    _, secret = curve.generate(tmp_path, "shard")
    curve.generate(tmp_path, "gw")
    ok = msgspec.convert({"shard_id": 1, "instruments": [1], "gateway_endpoint": "tcp://10.0.0.1:7000",
                          "security": {"secret_key_file": str(secret), "server_key_file": str(tmp_path / "gw.key")}},
                         ShardParams)
    ok.preflight()
    secret.chmod(0o644)
    with pytest.raises(ConfigError, match="must be 0600"):
        ok.preflight()
    missing = msgspec.convert({"shard_id": 1, "instruments": [1], "gateway_endpoint": "tcp://10.0.0.1:7000",
                               "security": {"secret_key_file": str(tmp_path / "nope.key_secret"),
                                            "server_key_file": str(tmp_path / "gw.key")}}, ShardParams)
    with pytest.raises(ConfigError, match="nope.key_secret: cannot read key file"):
        missing.preflight()
    twice = msgspec.convert({"endpoint": "tcp://127.0.0.1:7000", "shards": {"1": [1], "2": [1]},
                             "security": {"mode": "plain-loopback"}}, GatewayParams)
    with pytest.raises(ConfigError, match="shards.2: instrument 1 is already owned by shard 1"):
        twice.preflight()
