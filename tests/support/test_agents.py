"""The test agents of tests/support/agents.py, driven in-process with fake ports and a manual clock."""

from __future__ import annotations

from tests.support.agents import SEQ, SeqSource
from tests.support.clock import ManualClock
from tests.support.context import stage_context


class _PortWithoutPosition:
    """An output port like the zmq one: ``write`` only, no ``position``."""

    def __init__(self):
        self.seqs: list[int] = []

    def write(self, kind, payload, ts_origin_ns, timeout_ns=None) -> bool:
        self.seqs.append(SEQ.unpack_from(payload, 0)[0])
        return True


def test_seq_source_paces_at_rate_on_ports_without_position():
    """Without ``out.position`` (the zmq transport) SeqSource still paces at ``rate_per_s``: it
    sends what is due since its start, not everything at once."""
    text = ('[[rings]]\nname = "a"\nmax_payload_bytes = 64\ncapacity = 1024\nfull_policy = "backpressure"\n'
            '[[processes]]\nname = "src"\nmodule = "tests.support.agents:SeqSource"\noutputs = ["a"]\n'
            'batch = 65536\nparams = { rate_per_s = 1000, total = 100000 }\n')
    clock = ManualClock(0)
    port = _PortWithoutPosition()
    ctx = stage_context(text, "src", outputs={"a": port}, clock=clock)
    src = SeqSource()
    src.on_start(ctx)
    clock.advance_s(1)  # one second later: 1000 are due
    assert src.do_work() == 1000
    assert src.do_work() == 0, "no time passed, nothing more is due"
    clock.advance_s(1)
    src.do_work()
    assert port.seqs == list(range(2000)), f"{len(port.seqs)} sent after 2 s at 1000/s"
