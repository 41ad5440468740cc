"""Config text for tests: TOML snippets of rings, processes and instruments, joined into a config.

``process(name, "SeqSource")`` names an agent of ``tests.support.agents`` by its class alone; any
other agent is named ``package.module:Class``.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.runtime.config import parse_config

#: the module a bare agent class name refers to
TEST_AGENTS = "tests.support.agents"

#: for Idle stages: with a core each, "auto" would busy-spin a core of a 2-core box
BACK_OFF = 'wait = "back-off"\n'

#: the two instruments of the stage tests (ids 1 and 2), as config text
INSTRUMENTS = """
[[instruments]]
id = 1
symbol = "BTCUSDT"
tick_size = 0.1
lot_size = 0.0001

[[instruments]]
id = 2
symbol = "ETHUSDT"
tick_size = 0.01
lot_size = 0.001
"""


def instruments() -> dict:
    """``INSTRUMENTS`` parsed: id -> ``InstrumentConfig``."""
    return {i.id: i for i in parse_config(INSTRUMENTS).instruments}


def dirs(tmp_path: Path, *, run: str = "run", logs: str = "logs") -> str:
    """A ``[supervisor]`` section putting the run and log dirs under ``tmp_path``."""
    return f'[supervisor]\nrun_dir = "{tmp_path / run}"\nlog_dir = "{tmp_path / logs}"\n\n'


def ring(name: str, *, payload: int = 64, capacity: int = 1024, policy: str = "backpressure") -> str:
    return (f'[[rings]]\nname = "{name}"\nmax_payload_bytes = {payload}\ncapacity = {capacity}\n'
            f'full_policy = "{policy}"\n\n')


def process(name: str, agent: str, *, inputs=(), outputs=(), extra: str = "", params: str = "") -> str:
    """A ``[[processes]]`` entry; ``agent`` is ``module:Class`` or a class of ``TEST_AGENTS``."""
    module = agent if ":" in agent else f"{TEST_AGENTS}:{agent}"
    text = f'[[processes]]\nname = "{name}"\nmodule = "{module}"\n'
    if inputs:
        text += "inputs = [" + ", ".join(f'"{i}"' for i in inputs) + "]\n"
    if outputs:
        text += "outputs = [" + ", ".join(f'"{o}"' for o in outputs) + "]\n"
    text += extra
    if params:
        text += "params = { " + params + " }\n"
    return text + "\n"


def chain(total: int, rate: int, *, sink_out: str = "$tmp/sink.txt", capacity: int = 1024, extra: str = "") -> str:
    """SeqSource -> ring a -> Relay -> ring b -> SeqSink, two backpressure rings."""
    return (ring("a", capacity=capacity) + ring("b", capacity=capacity)
            + process("src", "SeqSource", outputs=["a"], extra=extra, params=f"rate_per_s = {rate}, total = {total}")
            + process("relay", "Relay", inputs=["a"], outputs=["b"], extra=extra)
            + process("sink", "SeqSink", inputs=["b"], extra=extra, params=f'out = "{sink_out}"'))


def control(out: str = "$tmp/control.txt") -> str:
    """The control ring and a ControlSink reading it (set ``control_ring = "control"``); it parks
    on the ring (``wait = "blocking"``) rather than busy-spinning when it gets a core of its own."""
    return ring("control", payload=16, capacity=64) + process("ctl", "ControlSink", inputs=["control"],
                                                             extra='wait = "blocking"\n', params=f'out = "{out}"')
