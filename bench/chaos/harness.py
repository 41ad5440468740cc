"""The chaos harness: a scenario's verdict (PASS, FAIL, INCONCLUSIVE) and its ``Row``, the real
pipeline started for one scenario (``ChaosPipeline``: the ``bench.pipeline`` graph under the supervisor,
in a private shm prefix and run folder, always torn down), and what a run leaves to judge it by: the
processes' latency taps, the risk audit log, a process's log events. The scenario modules import it;
it imports none of them (``bench.chaos.registry`` lists the scenarios)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import msgspec
import numpy as np
import orjson

from bench.pipeline_config import REPO, Scenario, config_text
from pipeline.runtime.agent import LATENCY_DIR_ENV
from pipeline.runtime.config import Config, load_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ControlError
from pipeline.runtime.supervisor import clean_stale


SHM = Path("/dev/shm")
PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)
#: quick mode (what ``make test`` runs) waits this long for what full mode must see within a time limit:
#: a hang guard, not a limit. The limits themselves are judged by ``make chaos`` (full mode); quick mode
#: measures and reports the time and judges that it happened.
QUICK_HANG_GUARD_S = 30.0


class Row(msgspec.Struct):
    """One scenario's outcome. ``verdict`` is PASS, FAIL or INCONCLUSIVE; given ``passed`` only, it is
    PASS or FAIL from it; ``passed`` is True exactly when the verdict is PASS (INCONCLUSIVE is not)."""

    scenario: str
    injected: str
    did: str  # what the pipeline did, in a sentence with the figures
    figure: str  # the measured figure the criterion is judged on
    passed: bool = False
    details: dict = {}
    verdict: str = ""

    def __post_init__(self):
        if not self.verdict:
            self.verdict = PASS if self.passed else FAIL
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        self.passed = self.verdict == PASS


def failed_checks(checks: dict[str, bool]) -> list[str]:
    """The names of the checks that did not hold."""
    return [k for k, v in checks.items() if not v]


def judged_row(scenario: str, checks: dict[str, bool], *, injected: str, did: str, figure: str, details: dict,
               name_failed: bool = True) -> Row:
    """A scenario's Row judged by its ``checks``: PASS when every one held, else FAIL, with the failed
    ones' names appended to ``figure`` when ``name_failed``; ``details`` after the checks."""
    failed = failed_checks(checks)
    shown = f"; FAILED: {failed}" if failed and name_failed else ""
    return Row(scenario=scenario, injected=injected, did=did, figure=figure + shown, passed=not failed,
               details={"checks": checks, **details})


def exit_status(rows: list[Row]) -> int:
    """0: every row PASS; 1: any FAIL; 3: no FAIL, some INCONCLUSIVE (not a pass: a run to repeat)."""
    if any(r.verdict == FAIL for r in rows):
        return 1
    return 3 if any(r.verdict == INCONCLUSIVE for r in rows) else 0


class ChaosPipeline:
    """The real pipeline, started for one scenario; always torn down (processes and shm) on exit.

    ``with ChaosPipeline(rate=1000, **overrides) as p:`` starts it and waits until every process is
    RUNNING and the risk gateway has synced. ``venue`` is merged into the paper venue's params (its
    faults, ``allow_admin``); ``text_hook(text) -> text`` may rewrite the config text before it is written; ``model`` names the
    fast stage's classifier (``bench.pipeline_config.MODELS``; default ``"hand-set"``, bench.pipeline's
    imbalance-following MLP: the shipped model, trained on the calibrated market's ~550 ms books, meets
    inputs outside its card's bounds at the scenarios' 1,000 updates/s and says HOLD on every update,
    which would leave the scenarios without signals, LLM work or orders).
    """

    def __init__(self, *, rate: int = 1_000, instruments: int = 1, llm: bool = True, venue: dict | None = None,
                 text_hook: Callable[[str], str] | None = None, name: str = "chaos", ready_timeout_s: float = 90,
                 model: str = "hand-set"):
        self.scenario = Scenario(name, rate, instruments=instruments, llm=llm, faults=dict(venue or {}), model=model)
        self.text_hook = text_hook
        self.ready_timeout_s = ready_timeout_s
        self.tmpdir: tempfile.TemporaryDirectory | None = None
        self.up_proc: subprocess.Popen | None = None
        self.cfg: Config | None = None

    # -- lifecycle
    def __enter__(self) -> "ChaosPipeline":
        self.tmpdir = tempfile.TemporaryDirectory(prefix="chaos-")
        self.tmp = Path(self.tmpdir.name)
        self.prefix = f"ch{os.getpid() % 100000}{int(time.time() * 1000) % 100000}"
        text = config_text(self.scenario, self.tmp, self.prefix)
        if self.text_hook is not None:
            text = self.text_hook(text)
        self.cfg_path = self.tmp / "chaos.toml"
        self.cfg_path.write_text(text)
        self.cfg = load_config(self.cfg_path)
        self.out_path = self.tmp / "up.out"
        with open(self.out_path, "wb") as out:
            self.up_proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "--config", str(self.cfg_path), "up", "--status-every", "0"],
                cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        try:
            self.wait_all_running(self.ready_timeout_s)
            self.wait(lambda: self.stage("risk").get("synced") == 1, 30, "the risk gateway synced")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.up_proc is not None and self.up_proc.poll() is None:
                subprocess.run([sys.executable, "-m", "pipeline", "--config", str(self.cfg_path), "down"], cwd=REPO,
                               capture_output=True, timeout=60)
                try:
                    self.up_proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.up_proc.pid, signal.SIGKILL)
                    self.up_proc.wait()
        finally:
            if self.cfg is not None:
                for pid in self._all_pids():  # a SIGSTOPped runner ignores SIGTERM: wake it to die
                    for sig in (signal.SIGCONT, signal.SIGKILL):
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            pass
                clean_stale(self.cfg)
            if self.tmpdir is not None:
                self.tmpdir.cleanup()

    def _all_pids(self) -> list[int]:
        try:
            return [p["pid"] for p in self.status()["processes"] if p["pid"]]
        except (ControlError, KeyError, TypeError):
            return []

    # -- looking
    def status(self) -> dict:
        """The supervisor's status (``pipeline.runtime.supervisor.Supervisor.status``)."""
        return request(self.cfg, {"cmd": "status"}, timeout_ms=5_000)["status"]

    def proc(self, name: str) -> dict:
        return next(p for p in self.status()["processes"] if p["name"] == name)

    def stage(self, name: str) -> dict:
        """A process's own counters (``ctx.stats``)."""
        return self.proc(name)["stage"]

    def pids(self) -> dict[str, int]:
        return {p["name"]: p["pid"] for p in self.status()["processes"]}

    def ring(self, name: str) -> dict:
        return next(r for r in self.status()["rings"] if r["name"] == name)

    def control(self, cmd: str, **kw) -> dict:
        """A control request (``status`` / ``restart`` / ``halt`` / ``resume`` / ``down``...)."""
        return request(self.cfg, {"cmd": cmd, **kw}, timeout_ms=5_000)

    @staticmethod
    def wait(predicate, timeout_s: float, what: str, interval_s: float = 0.02):
        """Poll until ``predicate()`` is truthy (returned); raise TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                v = predicate()
            except (ControlError, StopIteration, KeyError):
                v = None
            if v:
                return v
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
            time.sleep(interval_s)

    def wait_all_running(self, timeout_s: float) -> dict:
        names = {p.name for p in self.cfg.processes}

        def ready():
            if self.up_proc.poll() is not None:
                raise RuntimeError(f"the supervisor exited: {self.out_path.read_text()[-3000:]}")
            st = self.status()
            return st if {p["name"] for p in st["processes"] if p["state"] == "RUNNING"} == names else None

        return self.wait(ready, timeout_s, "every process RUNNING", 0.05)

    # -- injecting
    def signal(self, name: str, sig: int) -> int:
        """Send ``sig`` to a stage's runner; its pid."""
        pid = self.proc(name)["pid"]
        os.kill(pid, sig)
        return pid

    def logs(self) -> Path:
        return Path(self.cfg.supervisor.log_dir)

    def ring_segment(self, ring: str) -> Path:
        """The ring's file under /dev/shm (for corruption scenarios)."""
        return SHM / self.cfg.segment_name(ring).lstrip("/")


def limit_wait_s(limit_s: float, quick: bool) -> float:
    """How long a scenario waits for what must happen within ``limit_s``: the limit in full mode, the
    hang guard (``QUICK_HANG_GUARD_S``) in quick mode, where the limit is reported, not judged."""
    return max(limit_s, QUICK_HANG_GUARD_S) if quick else limit_s


def soft_wait(p, predicate, timeout_s: float) -> bool:
    """``p.wait`` that returns False instead of raising on a time-out."""
    try:
        return bool(p.wait(predicate, timeout_s, "(optional)", 0.05))
    except TimeoutError:
        return False


def shm_left(prefix: str) -> list[str]:
    """Entries of /dev/shm that carry ``prefix`` (segments and semaphores of a run)."""
    return sorted(e for e in os.listdir(SHM) if e.startswith((f"{prefix}.", f"sem.{prefix}.")))


def proc_state(pid: int) -> str:
    """The state letter of ``pid`` in /proc (``T``: stopped), "" when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]


def wait_stopped(pid: int, timeout_s: float = 2.0) -> None:
    """Until ``pid`` is stopped; raises TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while proc_state(pid) not in ("T", "t"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} did not stop (state {proc_state(pid)!r})")
        time.sleep(0.002)


# ------------------------------------------------------------------------------------ what a run left
@contextlib.contextmanager
def latency_taps(folder: Path):
    """Set ``SHMPIPE_LATENCY_DIR`` for the pipeline started inside (ChaosPipeline copies os.environ)."""
    old = os.environ.get(LATENCY_DIR_ENV)
    os.environ[LATENCY_DIR_ENV] = str(folder)
    try:
        yield folder
    finally:
        if old is None:
            os.environ.pop(LATENCY_DIR_ENV, None)
        else:
            os.environ[LATENCY_DIR_ENV] = old


def read_tap(folder: Path, process: str) -> np.ndarray:
    """A process's latency tap records (fields code, lat_ns, at_ns); empty when none was dumped."""
    path = folder / f"{process}.lat.npy"
    if not path.exists():
        return np.zeros(0, [("code", "<u2"), ("lat_ns", "<i8"), ("at_ns", "<i8")])
    return np.load(path)


def read_audit(p) -> list[dict]:
    """The risk gateway's audit log of pipeline ``p``, one dict a line (unreadable lines left out)."""
    path = p.logs() / "risk_audit.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(Exception):
            out.append(orjson.loads(line))
    return out


def log_events(p, process: str) -> list[dict]:
    """The log events of ``process`` in pipeline ``p``, rotated backups first (unreadable lines left out)."""
    out = []
    for path in sorted(p.logs().glob(f"{process}.log*"), reverse=True):  # rotated backups first
        for line in path.read_bytes().splitlines():
            with contextlib.suppress(Exception):
                out.append(orjson.loads(line))
    return out
