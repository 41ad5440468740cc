"""The order journal (pipeline/journal.py): records survive a reopen, a torn tail is detected, ignored
and truncated, every record is fsync'd right after its write, and the replay rebuilds order states and
positions from the fills."""

from __future__ import annotations

import os
import stat

import pytest

from pipeline.journal import (CANCELLED, FILLED, LIVE, NEVER_SENT, PARTIAL, PENDING, REJECTED, UNKNOWN, Journal,
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
