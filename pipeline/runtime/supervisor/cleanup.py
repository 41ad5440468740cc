"""What a run leaves behind, and its removal: runners still alive, ring segments and semaphores,
the process table, the control socket, the run epoch, the pid file, the zmq transport sockets.

``clean_stale`` is what ``up`` runs before it creates anything (a killed supervisor's leftovers),
what ``down`` runs last, and what the CLI's ``down`` runs under the run lock when no supervisor
answers.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pipeline.runtime import proctable as PT
from pipeline.runtime.config import Config
from pipeline.runtime.runepoch import EPOCH_FILE
from pipeline.runtime.supervisor.launcher import RUNNER_ENV
from pipeline.runtime.supervisor.runlock import PID_FILE
from ringbuf import Ring


def resources_of(cfg: Config) -> tuple[list[str], str]:
    """(ring segment names, process table name) of a configuration."""
    return [cfg.segment_name(r.name) for r in cfg.rings], PT.segment_name(cfg.supervisor.shm_prefix)


def clean_stale(cfg: Config, *, kill_runners: bool = True, keep_pid_file: bool = False) -> list[str]:
    """Remove every resource of this configuration: runners still alive (from the process table),
    ring segments and semaphores, the process table, the control socket, the run epoch, the pid
    file (unless ``keep_pid_file``: the caller holds the run lock on it), and the zmq transport
    sockets. Returns what was removed. Call it only while no supervisor of the run is alive (the
    CLI's ``down`` holds the run lock while it does).
    """
    removed: list[str] = []
    if kill_runners:
        try:
            table = PT.ProcTable.attach(cfg.supervisor.shm_prefix)
        except Exception:
            table = None
        if table is not None:
            for i in range(table.n):
                pid = table.record(i).get(PT.OFF_PID)
                if pid and pid != os.getpid() and _pid_alive(pid) and _is_our_runner(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                        removed.append(f"runner pid {pid}")
                    except ProcessLookupError:
                        pass
            table.close()
    segs, table_name = resources_of(cfg)
    for s in segs:
        if Ring.unlink(s):
            removed.append(s)
    if PT.ProcTable.unlink(cfg.supervisor.shm_prefix):
        removed.append(table_name)
    run_dir = Path(cfg.supervisor.run_dir)
    ep = cfg.control_endpoint()
    paths = [run_dir / EPOCH_FILE] + ([] if keep_pid_file else [run_dir / PID_FILE])
    if ep.startswith("ipc://"):
        paths.append(Path(ep[len("ipc://"):]))
    paths += list(run_dir.glob(f"zmq-{cfg.supervisor.shm_prefix}-*.sock")) if run_dir.exists() else []
    for path in paths:
        try:
            path.unlink()
            removed.append(str(path))
        except (FileNotFoundError, NotADirectoryError):
            pass
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_runner(pid: int) -> bool:
    """A ``python -m pipeline.runtime.runner`` process, or a runner started as a multiprocessing process."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if b"pipeline.runtime.runner" in cmd or b"pipeline.runtime.forkserver" in cmd:  # exec'd, or forked by the fork server
        return True
    if b"--multiprocessing-fork" not in cmd:
        return False
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(e.startswith(RUNNER_ENV.encode() + b"=") for e in env)

