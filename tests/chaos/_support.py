"""What the chaos tests share: a ``ChaosPipeline`` that tracks what each run started, and the check
that a run left no process and no /dev/shm entry behind."""

from __future__ import annotations

from bench.chaos.harness import ChaosPipeline, shm_left
from tests.support.processes import pid_gone


def alive(pids: list[int]) -> list[int]:
    """The pids of ``pids`` that still run (zombies excluded)."""
    return [pid for pid in pids if not pid_gone(pid)]


class TrackingPipeline(ChaosPipeline):
    """``ChaosPipeline`` that remembers every run's prefix and every pid it saw, for the clean-up checks.
    A test sets ``TrackingPipeline.runs = []`` before its scenario."""

    runs: list["TrackingPipeline"] = []

    def __enter__(self):
        TrackingPipeline.runs.append(self)
        self.seen_pids: set[int] = set()
        return super().__enter__()

    def status(self) -> dict:
        st = super().status()
        self.seen_pids.update(p["pid"] for p in st["processes"] if p["pid"])
        self.seen_pids.add(st["supervisor_pid"])
        return st


def left_nothing() -> None:
    """Every run the scenario started left no /dev/shm entry and no process."""
    assert TrackingPipeline.runs, "the scenario started no pipeline"
    for run in TrackingPipeline.runs:
        assert shm_left(run.prefix) == [], f"/dev/shm entries of {run.prefix} left behind"
        assert alive(sorted(run.seen_pids)) == [], "processes of the run left behind"
