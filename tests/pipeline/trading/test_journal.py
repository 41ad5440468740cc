"""The order journal (pipeline/trading/journal.py): records survive a reopen, a torn tail is detected, ignored
and truncated, a record is fsync'd right after its write or, written without, by the next ``sync`` (a group
commit; after a failed fsync the tail is written again), and the replay rebuilds order states and positions
from the fills."""

from __future__ import annotations

import os
import stat

import pytest

from pipeline.trading.journal import (CANCELLED, FILLED, LIVE, NEVER_SENT, PARTIAL, PENDING, REJECTED, UNKNOWN, Journal,
                              JournalState, Position, decode_line, encode_record, replay)


def intent(oid, side=1, sz=0.02, px=100.0, iid=1):
    return {"t": "intent", "oid": oid, "coid": f"tp{oid:016x}", "iid": iid, "sym": "BTCUSDT", "side": side, "tif": 1,
            "px": px, "sz": sz, "oseq": 7, "ts_ms": 1}


def fill(oid, tid, sz, px, side=1, iid=1):
    return {"t": "fill", "oid": oid, "tid": tid, "px": px, "sz": sz, "side": side, "iid": iid, "ts_ms": 2}


def test_line_format_is_crc_space_json_newline_and_corruption_is_detected():
    line = encode_record({"t": "ack", "oid": 5, "vid": "v1"})
    assert line.endswith(b"\n") and line[8:9] == b" " and line[9:] == b'{"t":"ack","oid":5,"vid":"v1"}\n'
    assert decode_line(line[:-1]) == {"t": "ack", "oid": 5, "vid": "v1"}
    assert decode_line(line[:-1].replace(b"v1", b"v2")) is None  # CRC mismatch
    assert decode_line(line[:20]) is None
    assert decode_line(encode_record({"t": "nonsense"})[:-1]) is None


def test_write_then_reopen_replays_every_order_state(tmp_path):
    path = tmp_path / "s.journal"
    j = Journal(path)
    j.open()
    for rec in (intent(1), {"t": "ack", "oid": 1, "vid": "v1"}, intent(2), {"t": "reject", "oid": 2, "code": "43012"},
                intent(3), {"t": "unknown", "oid": 3}, intent(4), intent(5), {"t": "ack", "oid": 5, "vid": "v5"},
                {"t": "cancel", "oid": 5}, intent(6), {"t": "never_sent", "oid": 6},
                intent(7), {"t": "state", "oid": 7, "status": "partially_filled", "vid": "v7"}):
        j.append(rec)
    j.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    st = Journal(path).open()
    got = {oid: o.status for oid, o in st.orders.items()}
    assert got == {1: LIVE, 2: REJECTED, 3: UNKNOWN, 4: PENDING, 5: CANCELLED, 6: NEVER_SENT, 7: PARTIAL}
    assert st.orders[1].vid == "v1" and st.orders[2].code == "43012" and st.orders[7].vid == "v7"
    assert st.orders[1].coid == "tp0000000000000001" and st.records == 14 and st.torn == 0


def test_a_torn_last_line_is_ignored_counted_and_truncated_so_the_next_record_is_clean(tmp_path):
    path = tmp_path / "s.journal"
    j = Journal(path)
    j.open()
    j.append(intent(1))
    j.append({"t": "ack", "oid": 1, "vid": "v1"})
    j.close()
    whole = path.read_bytes()
    torn = encode_record(fill(1, 10, 0.01, 100.0))[:-7]  # a crash in the middle of the write
    path.write_bytes(whole + torn)
    j2 = Journal(path)
    st = j2.open()
    assert st.torn == 1 and st.records == 2 and st.orders[1].status == LIVE and st.orders[1].filled == 0
    assert path.read_bytes() == whole  # the torn bytes are gone
    j2.append(fill(1, 11, 0.02, 100.0))
    j2.close()
    st3 = Journal(path).open()
    assert st3.torn == 0 and st3.orders[1].status == FILLED and st3.last_trade_id == 11


def test_a_corrupt_line_in_the_middle_is_skipped_and_counted():
    data = encode_record(intent(1)) + b"00000000 {garbage}\n" + encode_record({"t": "ack", "oid": 1, "vid": "v"})
    st, end = replay(data)
    assert st.torn == 1 and st.orders[1].status == LIVE and end == len(data)


def test_every_record_is_fsynced_right_after_its_write_and_before_append_returns(tmp_path):
    calls = []
    j = Journal(tmp_path / "s.journal", write=lambda fd, b: (calls.append(("write", b[9:30])), os.write(fd, b))[1],
                fsync=lambda fd: calls.append(("fsync",)))
    j.open()
    j.append(intent(1))
    calls.append(("send",))  # what the sender does next
    j.append({"t": "ack", "oid": 1, "vid": "v"})
    assert [c[0] for c in calls] == ["write", "fsync", "send", "write", "fsync"]
    assert calls[0][1].startswith(b'{"t":"intent"')


def test_a_failed_write_raises_so_the_caller_does_not_send(tmp_path):
    def broken(fd, b):
        raise OSError(28, "No space left on device")

    j = Journal(tmp_path / "s.journal", write=broken)
    j.open()
    with pytest.raises(OSError):
        j.append(intent(1))
    assert 1 not in j.state.orders


def test_positions_and_average_entry_from_fills():
    st = JournalState()
    for rec in (intent(1, side=1, sz=0.03), fill(1, 1, 0.01, 100.0), fill(1, 2, 0.02, 103.0),
                fill(1, 2, 0.02, 103.0)):  # a fill seen twice counts once
        st.apply(rec)
    pos = st.position(1)
    assert pos.qty == pytest.approx(0.03) and pos.avg_px == pytest.approx(102.0)
    assert st.orders[1].status == FILLED and st.last_trade_id == 2
    st.apply(intent(2, side=2, sz=0.05))
    st.apply(fill(2, 3, 0.01, 110.0, side=2))  # reducing keeps the entry price
    assert st.position(1).qty == pytest.approx(0.02) and st.position(1).avg_px == pytest.approx(102.0)
    st.apply(fill(2, 4, 0.04, 90.0, side=2))  # through zero: the remainder opened at 90
    assert st.position(1).qty == pytest.approx(-0.02) and st.position(1).avg_px == pytest.approx(90.0)
    assert st.orders[2].status == FILLED
    st.apply(intent(3, side=1, sz=0.02))
    st.apply(fill(3, 5, 0.02, 95.0))
    assert st.position(1).qty == 0.0 and st.position(1).avg_px == 0.0
    assert st.position(2) == Position()


def test_records_about_an_order_without_intent_are_orphans_not_errors():
    st = JournalState()
    st.apply({"t": "ack", "oid": 9, "vid": "v"})
    st.apply(fill(9, 1, 1.0, 1.0))
    assert st.orphans == 2 and not st.orders and st.last_trade_id == 0


def test_late_state_records_never_revive_a_terminal_order():
    st = JournalState()
    for rec in (intent(1), {"t": "cancel", "oid": 1}, {"t": "state", "oid": 1, "status": "live", "vid": "v"},
                {"t": "ack", "oid": 1, "vid": "v"}):
        st.apply(rec)
    assert st.orders[1].status == CANCELLED


# ------------------------------------------------------------------------------ a failed write (disk full)
class ShortThenFull:
    """``os.write`` that writes ``room`` bytes in all, then fails with ENOSPC (a disk filling up)."""

    def __init__(self, room: int):
        self.room = room

    def __call__(self, fd, data):
        if self.room <= 0:
            raise OSError(28, "No space left on device")
        n = os.write(fd, data[:self.room])
        self.room -= n
        return n


def test_a_write_that_fails_half_way_leaves_the_file_as_it_was_and_the_journal_in_doubt(tmp_path):
    path = tmp_path / "s.journal"
    full = ShortThenFull(10**9)
    j = Journal(path, write=full)
    j.open()
    j.append(intent(1))
    before = path.read_bytes()
    full.room = 20  # the next record gets 20 bytes out, then ENOSPC
    with pytest.raises(OSError):
        j.append(intent(2))
    assert path.read_bytes() == before and j.bytes == len(before)  # the fragment was cut away
    assert j.in_doubt and "No space left" in j.doubt and 2 not in j.state.orders
    full.room = 10**9  # space comes back
    j.append(intent(3))
    assert not j.in_doubt
    st = Journal(path).open()
    assert st.torn == 0 and set(st.orders) == {1, 3}


def test_while_the_fragment_cannot_be_cut_away_nothing_is_appended(tmp_path):
    path = tmp_path / "s.journal"
    full = ShortThenFull(10**9)
    cut = {"ok": False}

    def truncate(fd, n):
        if not cut["ok"]:
            raise OSError(5, "Input/output error")
        os.ftruncate(fd, n)

    j = Journal(path, write=full, truncate=truncate)
    j.open()
    j.append(intent(1))
    full.room = 20
    with pytest.raises(OSError):
        j.append(intent(2))
    assert j.in_doubt and not path.read_bytes().endswith(b"\n")  # the fragment is still there
    full.room = 10**9
    with pytest.raises(OSError):  # recovery fails first: the new record is not glued onto the fragment
        j.append(intent(3))
    assert 3 not in j.state.orders and not path.read_bytes().endswith(b"\n")
    cut["ok"] = True
    j.append(intent(4))
    st = Journal(path).open()
    assert st.torn == 0 and set(st.orders) == {1, 4}


def test_a_failed_fsync_rolls_the_record_back_and_the_next_append_syncs_again(tmp_path):
    path = tmp_path / "s.journal"
    calls = {"fail": True, "n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["fail"]:
            raise OSError(5, "Input/output error")
        os.fsync(fd)

    j = Journal(path, fsync=fsync)
    j.open()
    with pytest.raises(OSError):
        j.append(intent(1))
    assert path.read_bytes() == b"" and j.in_doubt and 1 not in j.state.orders
    calls["fail"] = False
    j.append(intent(2))
    assert not j.in_doubt and calls["n"] == 3  # the failed one, recovery's, the append's
    assert set(Journal(path).open().orders) == {2}


def test_kept_records_are_applied_now_and_written_first_once_the_disk_has_room(tmp_path):
    path = tmp_path / "s.journal"
    full = ShortThenFull(10**9)
    j = Journal(path, write=full)
    j.open()
    j.append(intent(1))
    full.room = 0
    with pytest.raises(OSError):
        j.append(fill(1, 10, 0.01, 100.0))
    j.keep(fill(1, 10, 0.01, 100.0))  # it happened at the venue: applied, queued
    assert j.state.position(1).qty == pytest.approx(0.01) and j.in_doubt
    full.room = 10**9
    j.append(fill(1, 11, 0.01, 100.0))
    st = Journal(path).open()
    assert [r for r in sorted(st.trade_ids)] == [10, 11] and st.position(1).qty == pytest.approx(0.02)


def _tmpfs(path, size_bytes: int) -> bool:
    """Mount a tmpfs of ``size_bytes`` at ``path``; False where this machine cannot (not root, no
    mount namespace rights)."""
    import subprocess
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                       capture_output=True, timeout=10)
    return r.returncode == 0


def test_on_a_real_full_tmpfs_every_record_that_was_appended_replays_after_space_returns(tmp_path):
    """The issue's scenario: the journal on a small tmpfs filled to the brim by another file, appends
    fail with ENOSPC part way, then the filler is removed: every append that returned replays, no
    line is torn, and the record after the failure is not glued onto a fragment."""
    import subprocess
    mnt = tmp_path / "mnt"
    if not _tmpfs(mnt, 256 * 1024):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        path = mnt / "sender.journal"
        partial = {"n": 0}

        def write(fd, data):  # os.write, noting a short write (the case that left a fragment)
            n = os.write(fd, data)
            partial["n"] += n < len(data)
            return n

        j = Journal(path, write=write)
        j.open()
        ok, failed = [1, 2, 3], 0
        for oid in ok:  # the journal's last page is partly used: appends then fill it and break off mid-line
            j.append(intent(oid))
        filler = mnt / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # fill to the brim: page by page, then byte by byte
            for chunk in (b"x" * 4096, b"x"):
                try:
                    while True:
                        os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == 28
        finally:
            os.close(fd)
        oid = 3
        while failed < 3:  # the disk is full: every append is refused, the file stays clean
            oid += 1
            try:
                j.append(intent(oid))
                ok.append(oid)
            except OSError as exc:
                assert exc.errno == 28
                failed += 1
                assert path.read_bytes().endswith(b"\n") or path.stat().st_size == 0
        assert j.in_doubt
        filler.unlink()
        for _ in range(5):
            oid += 1
            j.append(intent(oid))
            ok.append(oid)
        j.close()
        st = Journal(path).open()
        assert st.torn == 0 and sorted(st.orders) == ok and len(ok) >= 10 and partial["n"] >= 1
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)


# ------------------------------------------------------------------------------ group commit: write now, fsync later
def test_records_written_without_sync_wait_in_the_tail_until_one_fsync_makes_them_all_durable(tmp_path):
    fsyncs = []
    j = Journal(tmp_path / "s.journal", fsync=lambda fd: (fsyncs.append(fd), os.fsync(fd))[1])
    j.open()
    for oid in (1, 2, 3):
        j.append(intent(oid), sync=False)
    size = (tmp_path / "s.journal").stat().st_size
    assert (j.unsynced, j.synced_bytes, j.bytes, fsyncs) == (3, 0, size, [])
    assert set(Journal(tmp_path / "s.journal").open().orders) == {1, 2, 3}  # in the file (the page cache) already
    j.sync()
    assert (j.unsynced, j.synced_bytes, len(fsyncs)) == (0, size, 1)


def test_open_fsyncs_what_it_replayed_so_a_killed_writers_records_are_durable_first(tmp_path, monkeypatch):
    from pipeline.trading import journal as journal_module

    path = tmp_path / "s.journal"
    path.write_bytes(encode_record(intent(1)))  # left by a process killed before its fsync
    fsyncs = []
    real = journal_module.os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    j = Journal(path)
    j.open()
    assert len(fsyncs) == 1 and j.synced_bytes == j.bytes == path.stat().st_size and j.unsynced == 0


def test_after_a_failed_fsync_recovery_writes_the_tail_again_from_the_last_synced_length(tmp_path):
    """The kernel may drop the pages a failed fsync could not write: recovery does not trust them, it
    cuts the file back to the last fsync'd length and writes the tail again from memory."""
    path = tmp_path / "s.journal"
    fail = {"on": False}

    def fsync(fd):
        if fail["on"]:
            raise OSError(5, "Input/output error")
        os.fsync(fd)

    j = Journal(path, fsync=fsync)
    j.open()
    j.append(intent(1))  # fsync'd
    synced = j.synced_bytes
    j.append(intent(2), sync=False)
    j.append(intent(3), sync=False)
    fail["on"] = True
    with pytest.raises(OSError):
        j.sync()
    assert j.in_doubt and "fsync" in j.doubt and j.unsynced == 2
    os.truncate(path, synced)  # the tail's pages lost
    with pytest.raises(OSError):  # nothing new while the disk fails
        j.append(intent(4), sync=False)
    fail["on"] = False
    j.append(intent(5), sync=False)  # recovers first: the tail again, then the new record
    assert not j.in_doubt and j.synced_bytes == j.bytes - len(encode_record(intent(5)))
    st = Journal(path).open()
    assert sorted(st.orders) == [1, 2, 3, 5] and st.torn == 0


def test_a_record_kept_while_in_doubt_is_written_after_the_tail_it_follows(tmp_path):
    path = tmp_path / "s.journal"
    fail = {"on": False}

    def fsync(fd):
        if fail["on"]:
            raise OSError(5, "Input/output error")
        os.fsync(fd)

    j = Journal(path, fsync=fsync)
    j.open()
    j.append(intent(1), sync=False)
    fail["on"] = True
    with pytest.raises(OSError):
        j.sync()
    j.keep({"t": "ack", "oid": 1, "vid": "v1"})
    fail["on"] = False
    j.sync()  # a journal in doubt: recovered
    assert not j.in_doubt and j.synced_bytes == j.bytes == path.stat().st_size
    st = Journal(path).open()
    assert st.orders[1].status == LIVE and st.records == 2


def test_an_fsync_begun_on_the_journals_thread_does_not_hold_the_writer_and_covers_what_was_written_before_it(
        tmp_path):
    import threading

    release, fail = threading.Event(), {"on": False}

    def fsync(fd):
        release.wait(5.0)
        if fail["on"]:
            raise OSError(5, "Input/output error")
        os.fsync(fd)

    j = Journal(tmp_path / "s.journal", fsync=fsync, fsync_thread=True)
    j.open()
    j.append(intent(1), sync=False)
    covered = j.bytes
    assert j.start_sync() and j.syncing and not j.start_sync()  # one at a time
    j.append(intent(2), sync=False)  # written while the disk works
    assert j.sync_outcome() is None and j.synced_bytes == 0
    release.set()
    assert j.sync_outcome(wait=True) == "" and not j.syncing
    assert (j.synced_bytes, j.unsynced) == (covered, 1)  # the record written meanwhile waits for the next
    fail["on"] = True
    assert j.start_sync() and j.sync_outcome(wait=True) == "fsync: Input/output error" and j.in_doubt
    assert not j.start_sync()  # in doubt: recover, not start_sync
    fail["on"] = False
    j.recover()
    assert not j.in_doubt and j.synced_bytes == j.bytes and j.unsynced == 0
    j.close()
    assert sorted(Journal(tmp_path / "s.journal").open().orders) == [1, 2]


def test_an_intents_reduce_only_replays_and_an_intent_written_before_the_field_reads_as_false(tmp_path):
    path = tmp_path / "s.journal"
    j = Journal(path)
    j.open()
    for rec in ({**intent(1), "ro": True}, intent(2), {**intent(3), "ro": False}):
        j.append(rec)
    j.close()
    st = Journal(path).open()
    assert [st.orders[oid].reduce_only for oid in (1, 2, 3)] == [True, False, False]
