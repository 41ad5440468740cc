"""``up``'s status view (pipeline/runtime/supervisor/termview.py): on a terminal one screen redrawn in
place, otherwise the status table appended once per interval; the snapshot drawn with rich; and
``up`` itself under a pseudo-terminal and redirected to a pipe."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
from rich.console import Console

from pipeline.runtime.supervisor.status import format_status
from pipeline.runtime.supervisor.termview import LiveView, LogView, make_view, render
from tests.pipeline.runtime.supervisor.test_status import GUARD_OK, REASON, RISK, snapshot
from tests.support.configtext import BACK_OFF, process
from tests.support.paths import REPO_ROOT
from tests.support.processes import child_env

UP_ERASE = "\x1b[1A\x1b[2K"  # cursor one line up, erase that line: how rich's Live goes back over a frame


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def status(**kw) -> dict:
    st = {**snapshot(RISK), "latency_guard": GUARD_OK,
          "rings": [{"name": "md", "full_policy": "drop", "depth": 3, "capacity": 8192, "write_cursor": 123456,
                     "dropped": 0, "crc_errors": 0}]}
    return {**st, **kw}


def drawn(renderable, width: int = 140) -> str:
    console = Console(record=True, width=width, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def test_the_view_follows_the_output_a_terminal_or_not():
    assert isinstance(make_view(Terminal()), LiveView)
    assert isinstance(make_view(io.StringIO()), LogView)


def test_the_snapshot_drawn_holds_what_the_table_holds():
    text = drawn(render(status(), {"feed": (5, 1)}, 1.0, symbols={1: "BTCUSDT"}))
    lines = text.splitlines()
    assert lines[0] == "pipeline  supervisor pid 42  trading  plan  launcher: fork"
    assert lines[1].split() == ["process", "state", "pid", "core", "rst", "in/s", "out/s", "depth", "drops", "crc",
                                "p50us", "p99us", "last", "error"]
    feed = next(line for line in lines if line.startswith("feed ") and "RUNNING" in line)
    assert feed.split() == ["feed", "RUNNING", "100", "1", "0", "5", "4", "0", "0", "0", "1.0", "2.0"]  # 5 in/s, 4 out/s
    assert "latency guard: OK (acts when a stage's p99 stays above a budget for 5000 ms)" in lines
    assert any(line.split() == ["BTCUSDT", "(1)", "risk", "3.0", "1,234.50"] for line in lines)
    assert any(line.split() == ["md", "drop", "3", "8192", "123456", "0", "0"] for line in lines)
    assert lines[-1].startswith("risk       state=ACTIVE synced=1")  # the counters last: a short screen cuts them first
    reducing = {**GUARD_OK, "level": 1, "state": "REDUCING", "reason": REASON, "for_ms": 1_500}
    text = drawn(render(status(latency_guard=reducing)), width=240)
    assert text.splitlines()[0].split()[4] == "REDUCING"
    assert f"latency guard: REDUCING for 1.5 s: {REASON}; only an operator's resume lifts it" in text


def test_the_log_view_appends_the_table_and_a_blank_line():
    out = io.StringIO()
    view = LogView(out)
    view.say("note")
    view.show(status(), None, 1.0)
    view.show(status(), {"feed": (5, 1)}, 1.0)
    view.close()
    assert out.getvalue() == ("note\n" + format_status(status(), None, 1.0) + "\n\n"
                              + format_status(status(), {"feed": (5, 1)}, 1.0) + "\n\n")


def frame_starts(text: str) -> list[int]:
    """Where each frame of the live view begins (its bold header)."""
    return [i for i in range(len(text)) if text.startswith("\x1b[1mpipeline", i)]


def lines_advanced(text: str) -> int:
    """How many lines the terminal moved down, less those it went back up."""
    return text.count("\n") - text.count("\x1b[1A")


def test_the_live_view_draws_each_frame_over_the_last_and_says_above_it():
    out = Terminal()
    view = LiveView(out)
    view.show(status(), None, 1.0)
    view.say("fork server lost")
    view.show(status(), {"feed": (5, 1)}, 1.0)
    view.close()
    text = out.getvalue()
    heads = frame_starts(text)
    assert len(heads) == 4  # shown, drawn again under the line said, shown, drawn once more on close
    said = text.index("fork server lost\n")
    assert text[said - len(UP_ERASE):said] == UP_ERASE  # written over the screen, which is drawn again below it
    assert heads[1] == said + len("fork server lost\n")
    assert all(text[i - len(UP_ERASE):i] == UP_ERASE for i in heads[2:])  # each frame drawn over the one before
    assert lines_advanced(text) == 1 + text[heads[-1]:].count("\n")  # that line and one screen, not a log
    assert text.endswith("\n\x1b[?25h")  # stopped: the cursor shown again, below the last frame


def _read_all(fd: int, proc: subprocess.Popen, timeout_s: float) -> bytes:
    chunks, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_on_a_terminal_redraws_one_screen_and_redirected_appends_the_table(pipe):
    pipe.write_config(process("idle", "Idle", extra=BACK_OFF) + process("idle2", "Idle", extra=BACK_OFF))
    argv = [sys.executable, "-m", "pipeline", "--config", str(pipe.cfg_path), "up", "--run-for", "1.5",
            "--status-every", "0.2"]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 140, 0, 0))
    try:
        sup = subprocess.Popen(argv, cwd=REPO_ROOT, env={**child_env(), "TERM": "xterm-256color"},
                               stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        pipe.supervisors.append(sup)
        os.close(slave)
        text = _read_all(master, sup, 40).decode("utf-8", "replace")
    finally:
        os.close(master)
    assert sup.wait(20) == 0, text[-2000:]
    frames = text.count("supervisor pid")
    assert frames >= 4, text[-2000:]
    heads = frame_starts(text)
    assert len(heads) == frames
    assert all(text[i - len(UP_ERASE):i] == UP_ERASE for i in heads[1:])  # each drawn over the one before
    screen = text[heads[-1]:]
    assert lines_advanced(text) == text[:heads[0]].count("\n") + screen.count("\n")  # one screen, not a log
    assert "idle2" in screen and "RUNNING" in screen

    r = pipe.cli("up", "--run-for", "1.5", "--status-every", "0.2", timeout=40)  # output to a pipe
    assert r.returncode == 0, r
    assert "\x1b[" not in r.stdout
    blocks = [b for b in r.stdout.split("\n\n") if "supervisor pid" in b]
    assert len(blocks) >= 4 and all(b.strip().splitlines()[-1].startswith("idle2 ") for b in blocks[1:])
