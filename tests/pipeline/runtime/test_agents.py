"""The test agents of tests/agents.py, driven in-process with fake ports and a fake clock."""

from __future__ import annotations

from pipeline.runtime.agent import AgentContext
from pipeline.runtime.config import parse_config
from tests.agents import SEQ, SeqSource


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
    cfg = parse_config('[[rings]]\nname = "a"\nmax_payload_bytes = 64\ncapacity = 1024\nfull_policy = "backpressure"\n'
                       '[[processes]]\nname = "src"\nmodule = "tests.agents:SeqSource"\noutputs = ["a"]\n'
                       'batch = 65536\nparams = { rate_per_s = 1000, total = 100000 }\n')
    now = [0]
    port = _PortWithoutPosition()
    ctx = AgentContext(config=cfg, process=cfg.process("src"), inputs={}, outputs={"a": port}, log=None,
                       clock=lambda: now[0])
    src = SeqSource()
    src.on_start(ctx)
    now[0] = 1_000_000_000  # one second later: 1000 are due
    assert src.do_work() == 1000
    assert src.do_work() == 0, "no time passed, nothing more is due"
    now[0] = 2_000_000_000
    src.do_work()
    assert port.seqs == list(range(2000)), f"{len(port.seqs)} sent after 2 s at 1000/s"
