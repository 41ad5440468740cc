"""Fault injection against the real pipeline: ``make chaos`` (``python -m bench.chaos``).

Each scenario runs the whole pipeline (the same graph and settings as ``bench.pipeline``: venue, feed,
features, fast, llm, risk, sender as real processes under the supervisor, in a private shm prefix and
run folder) under load, injects one kind of fault, and checks its pass criterion. The scenarios live in
``bench/chaos_process.py`` (process and ring faults), ``bench/chaos_position.py`` (the position against
the venue: a full journal disk, a venue reset, a position changed behind the back) and
``bench/chaos_input.py`` (bad input, the LLM, risk limits, the kill switch, key and permission scans);
each is a function ``(ChaosPipeline-factory, quick: bool) -> Row``. The same scenarios run as tests (``tests/chaos``, marked ``chaos``) with
``quick=True``.

Output: ``bench/results/<UTC>-chaos/report.md`` and ``results.json``: a table, scenario by scenario,
of what was injected, what the pipeline did, the measured figure, and the verdict: PASS, FAIL, or
INCONCLUSIVE (a criterion the machine could not resolve in this run, by a rule the scenario states
before any result: only ``llm_faults``'s p99 criterion has one; INCONCLUSIVE is never counted as a
pass). Exit status: 0 when every scenario passed, 1 when any failed, 3 when none failed but some were
inconclusive.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import msgspec

from bench import report
from bench.pipeline import REPO, Scenario, config_text
from pipeline.runtime.config import Config, load_config
from pipeline.runtime.control import request
from pipeline.runtime.errors import ControlError
from pipeline.runtime.supervisor import clean_stale


PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)


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


class ChaosPipeline:
    """The real pipeline, started for one scenario; always torn down (processes and shm) on exit.

    ``with ChaosPipeline(rate=1000, **overrides) as p:`` starts it and waits until every process is
    RUNNING and the risk gateway has synced. ``venue`` / ``risk`` / ``llm`` / ``fast`` / ``sender`` dicts
    in the constructor are merged into those processes' params (``limits`` into risk's limits);
    ``text_hook(text) -> text`` may rewrite the config text before it is written; ``model`` names the
    fast stage's classifier (``bench.pipeline.MODELS``; None: bench.pipeline's default).
    """

    def __init__(self, *, rate: int = 1_000, instruments: int = 1, llm: bool = True, venue: dict | None = None,
                 text_hook: Callable[[str], str] | None = None, name: str = "chaos", ready_timeout_s: float = 90,
                 model: str | None = None):
        extra = {"model": model} if model is not None else {}  # None: bench.pipeline's default model
        self.scenario = Scenario(name, rate, instruments=instruments, llm=llm, faults=dict(venue or {}), **extra)
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
        return Path("/dev/shm") / self.cfg.segment_name(ring).lstrip("/")


def scenarios() -> list[tuple[str, Callable]]:
    """Every scenario of the three modules, in order."""
    from bench import chaos_input, chaos_position, chaos_process

    return [*chaos_process.SCENARIOS, *chaos_input.SCENARIOS, *chaos_position.SCENARIOS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter scenarios (what the tests run)")
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out_dir, machine = report.start("chaos", args.out)
    rows: list[Row] = []
    for name, fn in scenarios():
        if args.only and name not in args.only.split(","):
            continue
        print(f"-- {name}", flush=True)
        t0 = time.monotonic()
        try:
            row = fn(ChaosPipeline, args.quick)
        except Exception as exc:  # a scenario that cannot run is a failure, reported as such
            row = Row(scenario=name, injected="(did not run)", did=f"{type(exc).__name__}: {exc}"[:500], figure="-",
                      verdict=FAIL)
        row.details["seconds"] = round(time.monotonic() - t0, 1)
        print(f"   {row.verdict}: {row.figure}", flush=True)
        rows.append(row)
    n = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    md = [f"# Chaos report {machine['date']}", "", report.machine_line(machine),
          f"{n[PASS]} of {len(rows)} scenarios passed, {n[FAIL]} failed, {n[INCONCLUSIVE]} inconclusive"
          + (" (quick mode)" if args.quick else "") + ".",
          "", "| scenario | injected | what the pipeline did | measured | verdict |", "|---|---|---|---|---|"]
    md += [f"| {r.scenario} | {r.injected} | {r.did} | {r.figure} | {r.verdict} |" for r in rows]
    report.write(out_dir, {"machine": machine, "quick": args.quick, "verdicts": n,
                           "rows": [msgspec.to_builtins(r) for r in rows]}, md)
    return exit_status(rows)


def exit_status(rows: list[Row]) -> int:
    """0: every row PASS; 1: any FAIL; 3: no FAIL, some INCONCLUSIVE (not a pass: a run to repeat)."""
    if any(r.verdict == FAIL for r in rows):
        return 1
    return 3 if any(r.verdict == INCONCLUSIVE for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
