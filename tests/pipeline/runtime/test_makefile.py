"""The user's path: `make up`, `make status`, `make down` (with CONFIG= pointing at a test config).

`make setup` has already run (the suite runs under `make test`), so these targets only run the CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.configtext import process
from tests.support.paths import REPO_ROOT
from tests.support.processes import child_env
from tests.support.shm import shm_entries
from tests.support.wait import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
              pytest.mark.skipif(not (REPO_ROOT / ".venv" / "bin" / "python").exists(), reason="needs `make setup`")]


def _make(target: str, cfg, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", target, f"CONFIG={cfg}"], cwd=REPO_ROOT, env=child_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(120)
def test_make_up_status_down_leaves_nothing(pipe):
    cfg = pipe.write_config(process("idle", "Idle"))
    out = open(pipe.tmp / "make-up.out", "wb")
    up = subprocess.Popen(["make", "-s", "up", f"CONFIG={cfg}"], cwd=REPO_ROOT, env=child_env(),
                          stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    pipe.supervisors.append(up)
    try:
        wait_until(lambda: "RUNNING" in _make("status", cfg, timeout=20).stdout, 45, 0.2,
                   "`make status` to show the stage RUNNING")
        idle_row = next(line for line in _make("status", cfg).stdout.splitlines() if line.startswith("idle "))
        assert "RUNNING" in idle_row
        down = _make("down", cfg)
        assert down.returncode == 0, down.stderr
        assert "every segment removed" in down.stdout
        up.wait(timeout=20)
        assert up.returncode == 0, (pipe.tmp / "make-up.out").read_text()
    finally:
        if up.poll() is None:
            os.killpg(up.pid, 9)
            up.wait()
    view = (pipe.tmp / "make-up.out").read_text()
    assert "idle" in view and "RUNNING" in view, "make up printed no live status view"
    assert shm_entries(pipe.prefix) == []
    assert not (pipe.run_dir / "supervisor.pid").exists()
    assert not (pipe.run_dir / "control.sock").exists()
