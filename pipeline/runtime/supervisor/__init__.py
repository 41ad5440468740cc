"""The supervisor: creates the rings, starts, watches, pins and restarts every process.

One module per job:

- ``states``: the process states and the pure transition function (the restart policy applied);
- ``core``: the ``Supervisor`` loop (``up``: check, lock, clean, create, start, supervise; ``down``);
- ``launcher``: starting a stage (fork server, exec, or spawned under transport mp-queue);
- ``preflight``: the checks before anything is created (every stage's params, the GPU budget);
- ``runlock``: the run lock (one supervisor per run dir) and its pid file;
- ``cleanup``: removing what a run leaves behind (``clean_stale``);
- ``controlplane``: the ``ipc://`` REP socket answering ``status``, ``restart``, ``halt``...;
- ``status``: the status snapshot and its table view;
- ``budget``: the latency-budget guard (pure: runs above each budget, the level, the command);
- ``termview``: ``up``'s status view (a live screen on a terminal, the table appended otherwise).

The names below are what the CLI (``pipeline/__main__.py``), the tests and the bench use.
"""

from pipeline.runtime.runepoch import read_run_epoch
from pipeline.runtime.supervisor.cleanup import clean_stale, resources_of
from pipeline.runtime.supervisor.core import Proc, Supervisor
from pipeline.runtime.supervisor.launcher import RUNNER_ENV, SpawnedProcess
from pipeline.runtime.supervisor.runlock import PID_FILE, RunLock, RunLockHeld
from pipeline.runtime.supervisor.states import EXIT_START_PERMANENT, State
from pipeline.runtime.supervisor.status import format_status

__all__ = [
    "EXIT_START_PERMANENT", "PID_FILE", "RUNNER_ENV", "Proc", "RunLock", "RunLockHeld", "SpawnedProcess", "State",
    "Supervisor", "clean_stale", "format_status", "read_run_epoch", "resources_of",
]
