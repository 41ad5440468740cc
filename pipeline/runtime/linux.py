"""The Linux process controls the runtime uses (prctl(2)), behind one ctypes wrapper.

- ``PR_SET_PDEATHSIG``: a stage (and the fork server) asks for a signal when the supervisor dies,
  so a killed supervisor leaves no orphan processes (``die_with_parent``).
- ``PR_SET_CHILD_SUBREAPER``: the supervisor adopts the stages the fork server forks, so they are
  its children as exec'd ones are (pipeline/runtime/forkserver.py).
- ``PR_SET_NAME``: a forked stage shows its stage's name in ``ps`` / ``top``.

And ``set_fifo``: SCHED_FIFO for every thread of the process (sched_setscheduler(2)).
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36

_libc = None


def prctl(option: int, arg) -> None:
    """``prctl(option, arg, 0, 0, 0)``.

    Raises:
        OSError: the kernel refused (errno and its text).
    """
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> bool:
    """Ask for ``sig`` when the parent dies; False when ``parent_pid`` is no longer the parent (it
    died, or the process was reparented, before the request took effect).

    Raises:
        OSError: the kernel refused.
    """
    prctl(PR_SET_PDEATHSIG, sig)
    return os.getppid() == parent_pid


def set_fifo(priority: int, *, setscheduler=os.sched_setscheduler, task_dir: str = "/proc/self/task") -> int:
    """SCHED_FIFO at ``priority`` for every thread the process has now (``task_dir``'s entries);
    threads made later inherit it. ``setscheduler``: the syscall (injected in tests). Returns how
    many threads were set.

    Raises:
        OSError: the kernel refused (EPERM: no CAP_SYS_NICE and RLIMIT_RTPRIO below ``priority``;
            EINVAL: a priority outside 1..99).
    """
    param = os.sched_param(priority)
    tids = sorted(int(t) for t in os.listdir(task_dir))
    for tid in tids:
        setscheduler(tid, os.SCHED_FIFO, param)
    return len(tids)
