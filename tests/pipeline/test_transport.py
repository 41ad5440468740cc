"""The zmq transport (kept for comparison): the same chain delivers every message, in order."""

from __future__ import annotations

import os
import stat

import pytest

from tests.pipeline._support import chain, count_lines, read_seqs, wait_until


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
    # the counters (published with each heartbeat) agree: nothing dropped or duplicated on the way
    def counted():
        p = pipe.procs()
        got = (p["src"]["msgs_out"], p["relay"]["msgs_in"], p["relay"]["msgs_out"], p["sink"]["msgs_in"])
        return p if got == (total,) * 4 else None

    procs = wait_until(counted, 5, 0.05, "src out == relay in == relay out == sink in == total")
    assert all(p["restarts"] == 0 for p in procs.values())
    assert pipe.down() == 0
    assert list(pipe.run_dir.glob("zmq-*.sock")) == []
