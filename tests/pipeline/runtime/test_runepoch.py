"""The run epoch file (pipeline/runtime/runepoch.py): a fresh random 64-bit number per `up`, 0600,
decimal and a newline; a missing or garbled file is a clear StartupError."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from pipeline.runtime import runepoch
from pipeline.runtime.errors import StartupError
from pipeline.runtime.runepoch import EPOCH_FILE, read_run_epoch, write_run_epoch


def test_write_then_read_round_trips_with_mode_0600_and_decimal_text(tmp_path):
    old = os.umask(0)  # a permissive umask must not widen the file
    try:
        value = write_run_epoch(tmp_path)
    finally:
        os.umask(old)
    path = tmp_path / EPOCH_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes() == f"{value}\n".encode()
    assert 0 < value < 1 << 64
    assert read_run_epoch(tmp_path) == value
    assert read_run_epoch(str(tmp_path)) == value  # a str run dir too
    assert sorted(os.listdir(tmp_path)) == [EPOCH_FILE]  # no temporary file left


def test_every_write_draws_a_new_epoch_and_replaces_the_file(tmp_path):
    values = [write_run_epoch(tmp_path) for _ in range(20)]
    assert len(set(values)) == 20
    assert read_run_epoch(tmp_path) == values[-1]
    assert sorted(os.listdir(tmp_path)) == [EPOCH_FILE]


def test_missing_epoch_is_a_startup_error_naming_the_file(tmp_path):
    with pytest.raises(StartupError, match=r"run epoch .*run\.epoch does not exist"):
        read_run_epoch(tmp_path)


@pytest.mark.parametrize("data", [b"", b"\n", b"12", b"12 \n", b"-1\n", b"0x10\n", b"1\n2\n", b"abc\n",
                                  b"123456789012345678901\n", str(1 << 64).encode() + b"\n"])
def test_garbled_epoch_is_a_startup_error_naming_the_file(tmp_path, data):
    (tmp_path / EPOCH_FILE).write_bytes(data)
    with pytest.raises(StartupError, match=r"run epoch .*run\.epoch is garbled"):
        read_run_epoch(tmp_path)


def test_largest_64_bit_value_reads_back(tmp_path):
    (tmp_path / EPOCH_FILE).write_bytes(f"{(1 << 64) - 1}\n".encode())
    assert read_run_epoch(tmp_path) == (1 << 64) - 1


def test_unreadable_epoch_is_a_startup_error(tmp_path):
    (tmp_path / EPOCH_FILE).mkdir()  # a directory where the file should be: EISDIR
    with pytest.raises(StartupError, match=r"cannot read the run epoch .*run\.epoch"):
        read_run_epoch(tmp_path)


def test_write_into_a_missing_run_dir_is_a_startup_error_naming_the_path(tmp_path):
    with pytest.raises(StartupError, match=r"cannot write the run epoch .*nosuch/run\.epoch: No such file or directory"):
        write_run_epoch(tmp_path / "nosuch")


def test_a_full_disk_is_a_startup_error_and_leaves_no_file(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(runepoch.os, "write", full)
    with pytest.raises(StartupError, match=r"cannot write the run epoch .*run\.epoch: No space left on device"):
        write_run_epoch(tmp_path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_the_supervisor_re_exports_read_run_epoch():
    from pipeline.runtime import supervisor

    assert supervisor.read_run_epoch is read_run_epoch
