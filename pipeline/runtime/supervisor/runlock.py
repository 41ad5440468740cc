"""The run lock: one supervisor per run dir, held as ``flock(LOCK_EX)`` on ``<run_dir>/supervisor.pid``.

``up`` takes it before it touches anything (a second ``up`` of the same run dir fails at once,
naming the holder) and writes its pid into the file; ``down`` removes the file while still holding
it, then lets go. The kernel drops the lock when its holder dies, however it dies, so a killed
supervisor leaves no lock behind (only a pid file, cleaned by the next ``up`` or ``down``).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from pipeline.runtime.errors import StartupError

#: the run lock's file in the run dir; it holds the supervisor's pid
PID_FILE = "supervisor.pid"


def _flock_holder(fd: int) -> int:
    """The pid holding a ``flock`` on the file open as ``fd``, from /proc/locks (0: not found)."""
    st = os.fstat(fd)
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1234 08:01:567 0 EOF"
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[3] == "WRITE" and f[5].rsplit(":", 1)[-1] == str(st.st_ino):
            try:
                return int(f[4])
            except ValueError:
                return 0
    return 0


class RunLockHeld(StartupError):
    """Another process holds the run lock; ``pid`` is its pid (0: unknown)."""

    def __init__(self, message: str, pid: int):
        super().__init__(message)
        self.pid = pid


class RunLock:
    """The exclusive lock of one run dir: ``flock(LOCK_EX)`` on ``<run_dir>/supervisor.pid``.

    Held by the supervisor from the first thing ``up`` does until the end of ``down``; the kernel
    drops it when the process dies, however it dies. The descriptor is close-on-exec and the
    supervisor's children are started with ``close_fds``, so no child keeps it.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / PID_FILE
        self.fd: int | None = None
        self.previous_pid = 0  # the pid the file held when we took the lock (a killed supervisor's)
        self.was_held = False  # taken at least once

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self, *, create: bool = True, write_pid: bool = True) -> None:
        """Take the lock without waiting; with ``create``, make the run dir (0700) and the pid file
        (0600) when missing; with ``write_pid``, write this process's pid into the pid file.

        Raises:
            RunLockHeld: another process holds the lock (a StartupError naming its pid).
            StartupError: the run dir or the pid file cannot be created or written (the path and
                the OS's reason).
            FileNotFoundError: ``create`` is False and there is no pid file.
        """
        if self.fd is not None:
            return
        if create:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise StartupError(f"cannot create the run directory {self.run_dir}: {exc.strerror or exc}") from None
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        for _ in range(100):
            try:
                fd = os.open(self.path, flags, 0o600)
            except FileNotFoundError:
                if not create:
                    raise
                raise StartupError(f"cannot create the pid file {self.path}: {os.strerror(2)}") from None
            except OSError as exc:
                raise StartupError(f"cannot open the pid file {self.path}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                who = f"pid {holder}" if holder else "pid unknown"
                raise RunLockHeld(f"a supervisor ({who}) is already running for {self.run_dir} "
                                  f"(it holds the lock on {self.path}); `make down` first", holder) from None
            except OSError as exc:
                os.close(fd)
                raise StartupError(f"cannot lock the pid file {self.path}: {exc.strerror or exc}") from None
            # a supervisor going down unlinks the file it locked: ours must still be the one at the path
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
            if not create:
                raise FileNotFoundError(2, os.strerror(2), str(self.path))
        else:  # pragma: no cover - the file replaced under us 100 times in a row
            raise StartupError(f"cannot lock the pid file {self.path}: it keeps being replaced")
        self.fd = fd
        self.was_held = True
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            self.previous_pid = int(text) if text.isdigit() else 0
        except OSError:
            self.previous_pid = 0
        if write_pid:
            try:
                os.fchmod(fd, 0o600)
                os.ftruncate(fd, 0)
                data = f"{os.getpid()}\n".encode()
                if os.pwrite(fd, data, 0) != len(data):
                    raise OSError(28, os.strerror(28))
            except OSError as exc:
                self.release(unlink=True)
                raise StartupError(f"cannot write the pid file {self.path}: {exc.strerror or exc}") from None

    def _holder(self, fd: int) -> int:
        """The pid of the lock's holder: the pid file's content (it writes it right after locking,
        so wait up to 1 s for it), else /proc/locks; 0 when neither tells."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                if text.isdigit() and int(text) > 0:
                    return int(text)
            except OSError:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return _flock_holder(fd)

    def release(self, *, unlink: bool = False) -> bool:
        """Let go of the lock (idempotent); with ``unlink``, remove the pid file first (while still
        holding it, so no other process's pid file is removed). Returns whether it was removed."""
        if self.fd is None:
            return False
        removed = False
        if unlink:
            try:
                if os.path.samestat(os.fstat(self.fd), os.stat(self.path)):
                    os.unlink(self.path)
                    removed = True
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None
        return removed


