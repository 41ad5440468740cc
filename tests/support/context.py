"""Building the ``AgentContext`` of a stage under test, driven in-process without the runner.

The config comes from config text (``tests.support.configtext``); the ports are doubles
(``tests.support.ports``) or anything with the ring API; the log is a ``ListLog`` unless given.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.runtime.agent import AgentContext
from pipeline.runtime.config import ProcessConfig, parse_config
from pipeline.runtime.log import open_event_log
from tests.support.configtext import INSTRUMENTS, dirs, process, ring
from tests.support.ports import ListLog, RecordingPort


def stage_context(config_text: str, process: ProcessConfig | str, *, inputs: dict | None = None,
                  outputs: dict | None = None, log=None, clock=time.monotonic_ns) -> AgentContext:
    """The context of ``process`` (a ``ProcessConfig``, or the name of one of the config's processes)
    under the config parsed from ``config_text``, with the given ports (default: none) and ``log``
    (default: a fresh ``ListLog``).

    Raises:
        ConfigError: the config text does not parse or validate.
        KeyError: ``process`` names no process of the config.
    """
    cfg = parse_config(config_text)
    proc = cfg.process(process) if isinstance(process, str) else process
    return AgentContext(config=cfg, process=proc, inputs=inputs or {}, outputs=outputs or {},
                        log=ListLog() if log is None else log, clock=clock)


def feed_context(params: dict, *, batch: int = 256, clock=time.monotonic_ns, port: RecordingPort | None = None,
                 module: str = "procs.feed:BitgetFeedAgent") -> AgentContext:
    """The context of a feed stage ``feed`` writing ring ``md`` (a ``drop`` ring) into ``port``
    (default: a fresh ``RecordingPort``), with the two test instruments."""
    proc = ProcessConfig(name="feed", module=module, outputs=["md"], batch=batch, params=params)
    return stage_context(ring("md", payload=512, policy="drop") + INSTRUMENTS, proc,
                         outputs={"md": port or RecordingPort()}, clock=clock)


def venue_context(tmp_path: Path, params: str) -> AgentContext:
    """The context of the paper venue stage ``venue`` (``procs.venue:VenueAgent``) with ``params`` (the
    body of a TOML inline table), the two test instruments, its run and log dirs under ``tmp_path``
    and its real event log there (``logs/venue.log``)."""
    text = dirs(tmp_path) + process("venue", "procs.venue:VenueAgent", params=params) + INSTRUMENTS
    return stage_context(text, "venue", log=open_event_log("venue", tmp_path / "logs"))
