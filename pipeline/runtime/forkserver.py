"""The fork server: stage processes forked from a process that has already imported their code.

A stage started as ``python -m pipeline.runtime.runner`` spends most of its start-up importing (numpy, the
runner, its agent module: ~100-200 ms of a core here), and a restart after a crash pays it again on
a core the running stages share. The supervisor therefore starts one fork server before the stages
(``supervisor.launcher = "fork-server"``, the default): a process that imports ``pipeline.runtime.runner``
and every configured agent module once (plus the agent module's ``FORK_PRELOAD`` names), checks it
is still single-threaded (forking a process with threads is unsafe), freezes its objects out of the
garbage collector's reach (``gc.freeze``: pages stay shared with its children), and then forks one
stage per request. The stage runs ``pipeline.runtime.runner.main`` with the same arguments it would get on
a command line, so everything after the imports (config, pinning, rings, the agent's ``on_start``)
is as fresh as an exec'd process's.

Parentage: a request forks twice (server -> intermediate -> stage) and the intermediate exits at
once; the supervisor has made itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so the
orphaned stage becomes the supervisor's child, as an exec'd one would be: the supervisor reaps it
with ``waitpid`` and sees its exit status and signal (``ForkedProcess``), and the stage's
``--supervisor-pid`` death signal is set once that parentage holds (the stage waits for it).

Protocol (two pipes; JSON, one object a line; the supervisor is the only peer)::

    server -> supervisor, once:  {"ready": true, "preloaded": [...], "failed": {module: error}}
                                 | {"ready": false, "error": "..."}  (then the server exits 1)
    supervisor -> server:        {"argv": [...runner arguments...], "out": "<stdout+stderr file>",
                                  "name": "<stage>"}
    server -> supervisor:        {"pid": N}  |  {"error": "..."}

End of file on the request pipe stops the server. Its own output goes to ``<log_dir>/forkserver.out``.

What it does not do: reload code. A stage forked from it runs the code imported when the server
started (``make up``); a changed config (a new model path) is read afresh by each new stage, a
changed Python source needs a new ``make up``. With ``launcher = "exec"`` every stage is a fresh
``python -m pipeline.runtime.runner`` instead.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import select
import signal
import subprocess
import sys
import time
import traceback

import orjson

from pipeline.runtime.linux import PR_SET_CHILD_SUBREAPER, PR_SET_NAME, die_with_parent, prctl
from pipeline.runtime.log import open_private_append

#: where the stage processes' BLAS would start worker threads at import (numpy's OpenBLAS does so
#: unless told otherwise); each stage is one pinned core, and the fork server must stay single-threaded
SINGLE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1"}

#: how long a forked stage waits to become the supervisor's child before it gives up (exit 1)
REPARENT_TIMEOUT_S = 5.0


class ForkServerError(Exception):
    """The fork server could not start, or could not fork a stage (the message says why)."""


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    Raises:
        OSError: the kernel refused.
    """
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def thread_count() -> int:
    """The number of threads of this process, native ones included (from /proc)."""
    return len(os.listdir("/proc/self/task"))


# ------------------------------------------------------------------------------------------ server
def _write(fd: int, doc: dict) -> None:
    data = orjson.dumps(doc) + b"\n"
    while data:
        data = data[os.write(fd, data):]


def preload(modules: list[str]) -> tuple[list[str], dict[str, str]]:
    """Import ``modules`` and the ``FORK_PRELOAD`` names each one declares. Returns (imported, failed:
    module -> error); a failure is reported, not raised: the stage that needs the module will fail
    its own start with the same error, where its log says so."""
    done: list[str] = []
    failed: dict[str, str] = {}
    queue = list(modules)
    while queue:
        name = queue.pop(0)
        if name in done or name in failed:
            continue
        try:
            mod = importlib.import_module(name)
        except BaseException as exc:  # an import may raise anything (SystemExit included)
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        done.append(name)
        queue.extend(getattr(mod, "FORK_PRELOAD", ()))
    return done, failed


def _stage(req: dict, supervisor_pid: int, fds: tuple[int, int]) -> None:
    """In the forked stage: standard streams, no inherited descriptors, wait to be the supervisor's
    child, then the runner. Never returns."""
    code = 1
    try:
        for fd in fds:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        out = open_private_append(req["out"])
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as an exec'd stage: nothing inherited (an import leaves no descriptor open)
        deadline = time.monotonic() + REPARENT_TIMEOUT_S
        while os.getppid() != supervisor_pid:
            if time.monotonic() > deadline:
                print(f"{req.get('name')}: not the supervisor's child after {REPARENT_TIMEOUT_S} s "
                      f"(parent {os.getppid()}, supervisor {supervisor_pid}); is it a subreaper?", file=sys.stderr)
                raise SystemExit(1)
            time.sleep(0.0002)
        try:
            prctl(PR_SET_NAME, str(req.get("name", "stage"))[:15].encode())
        except OSError:
            pass  # the name in ps is a convenience
        from pipeline.runtime.runner import main

        code = main(list(req["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            import logging

            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _fork_stage(req: dict, supervisor_pid: int, fds: tuple[int, int]) -> int:
    """Fork the stage through an intermediate that exits at once; returns the stage's pid once the
    intermediate is reaped (from then on the stage is the supervisor's child).

    Raises:
        ForkServerError: the request is malformed or a fork failed.
    """
    if not isinstance(req, dict) or not isinstance(req.get("argv"), list) or not isinstance(req.get("out"), str):
        raise ForkServerError("a request needs argv (a list) and out (a path)")
    if not all(isinstance(a, str) for a in req["argv"]):
        raise ForkServerError("argv must be strings")
    r, w = os.pipe()
    try:
        mid = os.fork()
    except OSError as exc:
        os.close(r)
        os.close(w)
        raise ForkServerError(f"fork failed: {exc}") from None
    if mid == 0:  # the intermediate
        rc = 1
        try:
            os.close(r)
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _stage(req, supervisor_pid, fds)
            os.write(w, str(pid).encode())
            rc = 0
        finally:
            os._exit(rc)
    os.close(w)
    data = b""
    while chunk := os.read(r, 64):
        data += chunk
    os.close(r)
    _, status = os.waitpid(mid, 0)
    if not data or os.waitstatus_to_exitcode(status) != 0:
        raise ForkServerError(f"the intermediate fork failed (status {os.waitstatus_to_exitcode(status)})")
    return int(data)


def serve(modules: list[str], supervisor_pid: int, req_fd: int, rep_fd: int) -> int:
    """The server's life: preload, report ready (or why not), then one stage per request line until
    end of file. Returns the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    done, failed = preload(modules)
    n = thread_count()
    if n != 1:
        import threading

        named = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        _write(rep_fd, {"ready": False, "error": f"{n} threads after preloading {done} (forking threads is unsafe; "
                        f"Python threads: {', '.join(named) or 'none, so native ones'}): a module started a thread "
                        f"at import, or a BLAS thread count above 1 is set in the environment"})
        return 1
    gc.freeze()
    _write(rep_fd, {"ready": True, "preloaded": done, "failed": failed, "pid": os.getpid()})
    buf = b""
    while True:
        chunk = os.read(req_fd, 65536)
        if not chunk:
            return 0
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                pid = _fork_stage(orjson.loads(line), supervisor_pid, (req_fd, rep_fd))
                _write(rep_fd, {"pid": pid})
            except (ForkServerError, orjson.JSONDecodeError, ValueError) as exc:
                _write(rep_fd, {"error": f"{type(exc).__name__}: {exc}"})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.runtime.forkserver", description="Fork pipeline stages (started by the supervisor).")
    ap.add_argument("--config", required=True, help="the supervisor's config (for ps and stale-run cleaning)")
    ap.add_argument("--supervisor-pid", type=int, required=True)
    ap.add_argument("--fds", required=True, help="REQUEST_FD,REPLY_FD")
    ap.add_argument("--preload", default="", help="comma-separated modules")
    args = ap.parse_args(argv)
    if not die_with_parent(args.supervisor_pid):  # the supervisor died before the request took effect
        return 1
    req_fd, rep_fd = (int(x) for x in args.fds.split(","))
    return serve([m for m in args.preload.split(",") if m], args.supervisor_pid, req_fd, rep_fd)


# ------------------------------------------------------------------------------------------ client
class ForkedProcess:
    """A stage the fork server forked, now a child of this (subreaper) process, seen through the
    ``subprocess.Popen`` calls the supervisor uses: ``pid``, ``returncode``, ``poll`` (negative
    signal numbers, like Popen), ``kill``, ``terminate``, ``wait`` (raising
    ``subprocess.TimeoutExpired``). No signal is sent once it has been reaped (its pid may be reused)."""

    def __init__(self, pid: int, name: str):
        self.pid = pid
        self.args = name
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours to reap (cannot happen once the server replied)
                self.returncode = 255
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.002)
        return self.returncode


class ForkServer:
    """The supervisor's handle on a running fork server (see the module docstring)."""

    def __init__(self, popen: subprocess.Popen, req_fd: int, rep_fd: int, preloaded: list[str], failed: dict[str, str]):
        self.popen = popen
        self.pid = popen.pid
        self._req = req_fd
        self._rep = rep_fd
        self._buf = b""
        self.preloaded = preloaded
        self.failed = failed

    @classmethod
    def start(cls, config_path: str, modules: list[str], out_path: str, *, timeout_s: float = 60.0) -> "ForkServer":
        """Start a fork server preloading ``modules`` and wait for its ready line. The caller must be
        a child subreaper (``become_subreaper``) for the stages to become its children.

        Raises:
            ForkServerError: it did not start, did not report ready within ``timeout_s``, or refused
                (it would have had to fork threads).
        """
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = dict(os.environ)
        for k, v in SINGLE_THREAD_ENV.items():
            env.setdefault(k, v)
        out = open(open_private_append(out_path), "ab")
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "pipeline.runtime.forkserver", "--config", config_path, "--supervisor-pid", str(os.getpid()),
                 "--fds", f"{req_r},{rep_w}", "--preload", ",".join(modules)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True,
                pass_fds=(req_r, rep_w), env=env)
        except OSError as exc:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            raise ForkServerError(f"could not start the fork server: {exc}") from None
        finally:
            out.close()
        os.close(req_r)
        os.close(rep_w)
        server = cls(popen, req_w, rep_r, [], {})
        try:
            hello = server._reply(timeout_s)
        except ForkServerError:
            server.close()
            raise
        if not hello.get("ready"):
            server.close()
            raise ForkServerError(f"the fork server refused: {hello.get('error')}")
        server.preloaded = list(hello.get("preloaded", []))
        server.failed = dict(hello.get("failed", {}))
        return server

    def _reply(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(f"no answer from the fork server within {timeout_s} s")
            ready, _, _ = select.select([self._rep], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._rep, 65536)
            if not chunk:
                rc = self.popen.poll()
                raise ForkServerError(f"the fork server closed its pipe (exit status {rc})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ForkServerError(f"unreadable answer from the fork server: {line[:200]!r}") from None
        if not isinstance(doc, dict):
            raise ForkServerError(f"unreadable answer from the fork server: {line[:200]!r}")
        return doc

    def spawn(self, argv: list[str], out_path: str, name: str, *, timeout_s: float = 2.0) -> ForkedProcess:
        """Fork one stage running ``pipeline.runtime.runner.main(argv)``, its output appended to ``out_path``.
        An answer takes a few milliseconds; ``timeout_s`` bounds how long a hung server can hold the
        supervisor's loop.

        Raises:
            ForkServerError: the server is gone, did not answer in time, or could not fork.
        """
        try:
            _write(self._req, {"argv": argv, "out": out_path, "name": name})
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone ({exc})") from None
        doc = self._reply(timeout_s)
        if "pid" not in doc:
            raise ForkServerError(f"the fork server could not fork {name}: {doc.get('error')}")
        return ForkedProcess(int(doc["pid"]), name)

    def close(self, timeout_s: float = 2.0) -> None:
        """End of file to the server, then SIGKILL if it has not exited within ``timeout_s``. Idempotent."""
        for fd in (self._req, self._rep):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._req = self._rep = -1
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


if __name__ == "__main__":
    sys.exit(main())
