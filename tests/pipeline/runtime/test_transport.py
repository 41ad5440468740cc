"""The comparison transports (zmq, mp-queue): the same chain delivers every message, in order; the
control ring stays a shared-memory ring under every transport; mp-queue stages restart and go down
like the others."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat

import pytest

from pipeline.runtime.runner import StopRequested
from pipeline.runtime.transport import MpQueueIn, MpQueueOut, encode_frame
from ringbuf import PayloadTooLargeError
from tests.support.agents import count_lines, read_seqs
from tests.support.configtext import BACK_OFF, chain, control, process
from tests.support.processes import pid_gone, pids_running_with
from tests.support.wait import wait_until


def _counted(pipe, total):
    """Waits until the counters (published with each heartbeat) agree: nothing dropped or duplicated."""
    def counted():
        p = pipe.procs()
        got = (p["src"]["msgs_out"], p["relay"]["msgs_in"], p["relay"]["msgs_out"], p["sink"]["msgs_in"])
        return p if got == (total,) * 4 else None

    return wait_until(counted, 5, 0.05, "src out == relay in == relay out == sink in == total")


class _StopAfter:
    """An idle strategy that raises after ``n`` idles (as the runner's does on SIGTERM)."""

    def __init__(self, n):
        self.n = n
        self.calls = 0

    def idle(self, work_count):
        self.calls += 1
        if self.calls >= self.n:
            raise StopRequested()

    def reset(self):
        pass


def _queue(maxsize):
    return multiprocessing.get_context("spawn").Queue(maxsize=maxsize)


@pytest.mark.timeout(30)
def test_mp_queue_ports_carry_header_and_payload_and_count_bad_frames():
    q = _queue(16)
    out, inp = MpQueueOut(q, drop=False, max_payload=8), MpQueueIn(q, max_payload=8)
    assert inp.wait(1_000_000) is False, "nothing written yet"
    for i in range(3):
        assert out.write(100 + i, bytes([i]) * 8, 1_000 + i)
    bad = bytearray(encode_frame(7, b"x" * 8, 5))
    bad[-1] ^= 1  # a payload bit flipped after the CRC was computed
    q.put(bytes(bad))
    q.put(b"short")
    assert out.write(200, b"", 9)
    got = []
    while len(got) < 4:
        assert inp.wait(2_000_000_000), "the feeder thread delivers within 2 s"
        inp.poll(lambda seq, ts, kind, payload: got.append((seq, ts, kind, bytes(payload))), 10)
    assert got == [(0, 1_000, 100, b"\0" * 8), (1, 1_001, 101, b"\1" * 8), (2, 1_002, 102, b"\2" * 8), (5, 9, 200, b"")]
    assert inp.crc_errors == 2
    assert inp.try_read() is None
    with pytest.raises(PayloadTooLargeError):
        out.write(1, b"x" * 9, 0)
    out.close()


@pytest.mark.timeout(30)
def test_mp_queue_writer_drops_or_waits_with_its_idle_strategy_when_full():
    drop = MpQueueOut(_queue(2), drop=True, max_payload=8)
    assert [drop.write(1, b"a", 0) for _ in range(3)] == [True, True, False]
    assert drop.try_write(1, b"a", 0) is False
    assert drop.dropped == 2

    idle = _StopAfter(10**9)
    bp = MpQueueOut(_queue(1), drop=False, max_payload=8, idle=idle)
    assert bp.write(1, b"a", 0)
    assert bp.try_write(1, b"a", 0) is False and bp.dropped == 0
    assert bp.write(1, b"a", 0, timeout_ns=5_000_000) is False, "full: gives up after the timeout"
    assert idle.calls >= 1, "the idle strategy ran between tries"
    idle.calls, idle.n = 0, 3
    with pytest.raises(StopRequested):
        bp.write(1, b"a", 0)
    assert idle.calls == 3
    for w in (drop, bp):
        w.close()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_zmq_transport_delivers_source_relay_sink_in_order(pipe):
    total = 2_000
    sink = pipe.tmp / "sink.txt"
    pipe.write_config(chain(total, 1_000), supervisor='transport = "zmq"\n')
    pipe.up()
    socks = sorted(p.name for p in pipe.run_dir.glob(f"zmq-{pipe.prefix}-*.sock"))
    assert socks == [f"zmq-{pipe.prefix}-a.sock", f"zmq-{pipe.prefix}-b.sock"]
    for s in socks:
        assert stat.S_IMODE(os.stat(pipe.run_dir / s).st_mode) == 0o600

    # (SeqSource does not pace on zmq ports, see test_agents.py: the messages come in one burst)
    wait_until(lambda: count_lines(sink) >= total, 20, 0.02, f"{total} messages through zmq")
    assert read_seqs(sink) == list(range(total))
    procs = _counted(pipe, total)
    assert all(p["restarts"] == 0 for p in procs.values())
    assert pipe.down() == 0
    assert list(pipe.run_dir.glob("zmq-*.sock")) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_mp_queue_transport_delivers_source_relay_sink_in_order(pipe):
    total = 2_000
    sink = pipe.tmp / "sink.txt"
    pipe.write_config(chain(total, 1_000), supervisor='transport = "mp-queue"\n')
    pids = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    # the stages are multiprocessing processes of the supervisor, found through their environment
    runners = set(pids_running_with(str(pipe.cfg_path.resolve()))) - {pipe.sup.pid}
    assert runners == set(pids.values())
    for pid in pids.values():
        assert b"--multiprocessing-fork" in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        assert int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) == pipe.sup.pid

    wait_until(lambda: count_lines(sink) >= total, 20, 0.02, f"{total} messages through mp-queue")
    assert read_seqs(sink) == list(range(total))
    procs = _counted(pipe, total)
    assert all(p["restarts"] == 0 for p in procs.values())
    assert pipe.down() == 0
    assert all(pid_gone(pid) for pid in pids.values())
    # stdout/stderr of each stage went to logs/<name>.out, as with subprocess-started stages
    assert {p.name for p in pipe.log_dir.glob("*.out")} == {"src.out", "relay.out", "sink.out"}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["zmq", "mp-queue"])
def test_halt_reaches_the_control_sink_under_every_transport(pipe, transport):
    """The supervisor writes CONTROL into the control ring itself, so the control ring is a
    shared-memory ring whatever ``supervisor.transport`` says; its consumer reads it there."""
    out = pipe.tmp / "control.txt"
    pipe.write_config(control() + process("bystander", "Idle", extra=BACK_OFF),
                      supervisor=f'control_ring = "control"\ntransport = "{transport}"\n')
    pipe.up()
    resp = pipe.request({"cmd": "halt"})
    assert resp["ok"], resp
    wait_until(lambda: out.exists() and out.read_text() == "HALT OPERATOR\n", 5, 0.01, "HALT OPERATOR at the sink")
    assert pipe.status()["halted"] is True
    assert pipe.down() == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_mp_queue_sigkilled_relay_is_restarted_and_down_leaves_nothing(pipe):
    total = 1_000_000
    sink = pipe.tmp / "sink.txt"
    pipe.write_config(chain(total, 500), supervisor='transport = "mp-queue"\n')
    first = {p["name"]: p["pid"] for p in pipe.up()["processes"]}
    wait_until(lambda: count_lines(sink) >= 50, 10, 0.02, "flow through the chain")

    os.kill(first["relay"], signal.SIGKILL)

    def back():
        st = pipe.procs()
        p = st["relay"]
        return st if p["state"] == "RUNNING" and p["pid"] not in (0, first["relay"]) else None

    st = wait_until(back, 10, 0.01, "relay RUNNING again with a new pid")
    assert pid_gone(first["relay"])
    assert st["relay"]["restarts"] == 1
    assert {n: st[n]["pid"] for n in ("src", "sink")} == {n: first[n] for n in ("src", "sink")}
    assert all(st[n]["state"] == "RUNNING" for n in st)
    relay_log = [e for e in pipe.log("supervisor") if e["event"] == "state" and e.get("stage") == "relay"]
    assert any(e["to"] == "EXITED" and e["why"] == "killed by SIGKILL" for e in relay_log), relay_log

    cfg = str(pipe.cfg_path.resolve())
    assert set(pids_running_with(cfg)) - {pipe.sup.pid} == {p["pid"] for p in st.values()}
    assert pipe.down() == 0
    pids = {*first.values(), *(p["pid"] for p in st.values())}
    wait_until(lambda: all(pid_gone(p) for p in pids), 5, 0.01, "every stage gone")
    assert pids_running_with(cfg) == []
    assert not (pipe.run_dir / "supervisor.pid").exists()
    assert not (pipe.run_dir / "control.sock").exists()
    assert "stop_grace_expired" not in {e["event"] for e in pipe.log("supervisor")}
    # (the fixture then checks that no /dev/shm entry of the prefix is left)


def test_doorbell_ring_is_the_first_shared_memory_input_of_a_multi_input_consumer():
    from pipeline.runtime.config import parse_config
    from pipeline.runtime.transport import doorbell_ring

    body = "".join(f'[[rings]]\nname = "{r}"\nmax_payload_bytes = 64\ncapacity = 64\nfull_policy = "drop"\n'
                   for r in ("a", "b", "c", "d"))
    body += ('[[processes]]\nname = "multi"\nmodule = "x:Y"\ninputs = ["b", "a", "c"]\n'
             '[[processes]]\nname = "single"\nmodule = "x:Y"\ninputs = ["d"]\n')
    cfg = parse_config(body)
    assert [doorbell_ring(cfg, r) for r in ("a", "b", "c", "d")] == ["b", "b", "b", None]
    assert doorbell_ring(cfg, "nobody-reads-it") is None
    zmq_cfg = parse_config(body + '[supervisor]\ntransport = "zmq"\n')
    assert doorbell_ring(zmq_cfg, "a") is None, "sockets wake their readers themselves"
