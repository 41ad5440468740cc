"""The ring's binary layout, pinned as golden bytes.

These tests are the specification of what lies where in a segment (``ringbuf/layout.py`` draws the
same diagram). They compare against literal bytes and literal offsets, and read the segment through
an independent mmap of ``/dev/shm/NAME`` rather than through ringbuf's own accessors, so a change of
the layout cannot pass unnoticed: a deliberate change must bump ``LAYOUT_VERSION`` and these bytes.
"""

from __future__ import annotations

import os
import threading
import time

import crc32c
import pytest

from ringbuf import Ring, slot_size_for
from ringbuf import layout as L


def u64_at(raw, off: int) -> int:
    return int.from_bytes(raw[off : off + 8], "little")


def u32_at(raw, off: int) -> int:
    return int.from_bytes(raw[off : off + 4], "little")


# ----------------------------------------------------------------------------------- slot header


def test_slot_header_packs_to_golden_bytes():
    hdr = L.HEADER.pack(0x0102030405060708, 0x0A0B, 0x0C0D, 0xDEADBEEF)
    assert hdr == bytes.fromhex("0807060504030201" "0b0a" "0d0c" "efbeadde")
    assert L.HEADER_BYTES == 16 == len(hdr)


def test_slot_header_unpacks_ts_kind_length_crc_in_that_order():
    raw = bytes.fromhex("15cd5b0700000000" "0300" "0500" "cced684b")
    assert L.HEADER.unpack(raw) == (123456789, 3, 5, 0x4B68EDCC)


def test_crc_prefix_is_sequence_then_header_bytes_0_to_11():
    buf = bytearray(L.CRC_PREFIX.size)
    L.CRC_PREFIX.pack_into(buf, 0, 5, 0x1122334455667788, 7, 14)
    assert bytes(buf) == bytes.fromhex("0500000000000000" "8877665544332211" "0700" "0e00")
    hdr = L.HEADER.pack(0x1122334455667788, 7, 14, 0xFFFFFFFF)
    assert bytes(buf[8:]) == hdr[:12]


# ----------------------------------------------------------------------------------------- CRC


def test_crc32c_package_computes_castagnoli_standard_check_value():
    # The CRC-32C "check" value from the catalogue of parametrised CRCs (and RFC 3720's polynomial).
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_crc32c_package_chains_like_one_pass():
    data = b"sequence-then-header-then-payload"
    assert crc32c.crc32c(data[10:], crc32c.crc32c(data[:10])) == crc32c.crc32c(data)


def test_written_slot_matches_golden_bytes(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        assert ring.writer().try_write(3, b"hello", 123456789)
        slot = bytes(ring.slot_view(0))
    # ts=123456789, kind=3, length=5, crc32c(seq 0 | header 0..11 | b"hello") = 0x4B68EDCC, payload.
    assert slot[:21] == bytes.fromhex("15cd5b0700000000" "0300" "0500" "cced684b" "68656c6c6f")


def test_crc_covers_sequence_header_and_payload_computed_independently(ring_name):
    seq, ts, kind, payload = 5, 0x1122334455667788, 7, b"golden payload"
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w = ring.writer()
        for i in range(seq):
            assert w.try_write(0, b"", i)
        assert w.position == seq
        assert w.try_write(kind, payload, ts)
        slot = bytes(ring.slot_view(seq))

    independent = crc32c.crc32c(
        seq.to_bytes(8, "little")
        + ts.to_bytes(8, "little")
        + kind.to_bytes(2, "little")
        + len(payload).to_bytes(2, "little")
        + payload
    )
    assert independent == 0x2CF084EB  # golden
    assert int.from_bytes(slot[12:16], "little") == independent
    assert slot[: 16 + len(payload)] == (
        ts.to_bytes(8, "little") + kind.to_bytes(2, "little") + len(payload).to_bytes(2, "little")
        + independent.to_bytes(4, "little") + payload
    )


def test_same_message_at_another_sequence_has_another_crc(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2) as ring:
        w, r = ring.writer(), ring.reader()
        crcs = []
        for _ in range(4):
            assert w.try_write(1, b"same", 42)
            crcs.append(bytes(ring.slot_view(w.position - 1)[12:16]))
            assert r.try_read() is not None
    assert len(set(crcs)) == 4


# ------------------------------------------------------------------------------- control block


def test_control_block_geometry_golden_bytes(ring_name, raw_segment):
    Ring.create(ring_name, slot_size=128, capacity=16, full_policy="backpressure").close()
    raw = raw_segment(ring_name)
    assert raw[:32] == bytes.fromhex(
        "53484d52494e4700"  # magic b"SHMRING\0"
        "01000000"          # version 1
        "80000000"          # slot_size 128
        "1000000000000000"  # capacity 16
        "01000000"          # full_policy 1 = backpressure
        "00020000"          # control_bytes 512
    )
    assert raw[:8] == b"SHMRING\x00"
    assert len(raw) == 512 + 128 * 16


def test_control_block_drop_policy_code_is_zero(ring_name, raw_segment):
    Ring.create(ring_name, slot_size=64, capacity=2, full_policy="drop").close()
    raw = raw_segment(ring_name)
    assert raw[:32] == bytes.fromhex("53484d52494e4700" "01000000" "40000000" "0200000000000000" "00000000" "00020000")


def test_fresh_control_block_is_zero_after_geometry(ring_name, raw_segment):
    Ring.create(ring_name, slot_size=64, capacity=4).close()
    raw = raw_segment(ring_name)
    assert raw[32:512] == bytes(480)
    assert raw[512:] == bytes(64 * 4)


def test_named_offsets_are_pinned():
    assert (L.CONTROL_BYTES, L.HEADER_BYTES, L.CACHE_LINE_BYTES, L.SLOT_ALIGN_BYTES) == (512, 16, 64, 64)
    assert (L.OFF_MAGIC, L.OFF_VERSION, L.OFF_SLOT_SIZE, L.OFF_CAPACITY, L.OFF_FULL_POLICY, L.OFF_CONTROL_BYTES) == (
        0, 8, 12, 16, 24, 28)
    assert L.OFF_WRITE_CURSOR == 64
    assert L.OFF_READ_CURSOR == 128
    assert (L.OFF_WRITER_PID, L.OFF_WRITER_HEARTBEAT_NS, L.OFF_WRITTEN, L.OFF_DROPPED, L.OFF_FULL_EVENTS, L.OFF_STALL_NS) == (
        192, 200, 208, 216, 224, 232)
    assert (L.OFF_READER_PID, L.OFF_READER_HEARTBEAT_NS, L.OFF_READ, L.OFF_CRC_ERRORS, L.OFF_WAKEUPS, L.OFF_MISSED_WAKEUPS) == (
        256, 264, 272, 280, 288, 296)
    assert L.OFF_READER_PARKED == 320
    assert L.MAGIC == int.from_bytes(b"SHMRING\x00", "little")
    assert L.LAYOUT_VERSION == 1


def test_word_indexes_are_offsets_divided_by_eight():
    for name in dir(L):
        if name.startswith("W_"):
            assert getattr(L, name) * 8 == getattr(L, "OFF_" + name[2:]), name


WRITER_WORDS = {"WRITE_CURSOR"} | {"WRITER_PID", "WRITER_HEARTBEAT_NS", "WRITTEN", "DROPPED", "FULL_EVENTS", "STALL_NS"}
READER_WORDS = {"READ_CURSOR"} | {"READER_PID", "READER_HEARTBEAT_NS", "READ", "CRC_ERRORS", "WAKEUPS", "MISSED_WAKEUPS"}


def _words_by_line() -> dict[int, set[str]]:
    lines: dict[int, set[str]] = {}
    for name in dir(L):
        if name.startswith("OFF_") and getattr(L, name) >= 32:  # beyond the creator's geometry block
            off = getattr(L, name)
            assert off % 8 == 0, f"{name} at {off} is not 8-byte aligned"
            lines.setdefault(off // 64, set()).add(name[4:])
    return lines


def test_each_cursor_sits_alone_on_its_cache_line():
    lines = _words_by_line()
    assert lines[1] == {"WRITE_CURSOR"}
    assert lines[2] == {"READ_CURSOR"}


def test_writer_words_share_line_3_and_reader_words_line_4():
    lines = _words_by_line()
    assert lines[3] == WRITER_WORDS - {"WRITE_CURSOR"}
    assert lines[4] == READER_WORDS - {"READ_CURSOR"}
    assert lines[5] == {"READER_PARKED"}
    assert set(lines) == {1, 2, 3, 4, 5}
    assert L.OFF_READER_PARKED + 8 <= L.CONTROL_BYTES


def test_writer_words_are_written_at_their_offsets(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        raw = raw_segment(ring_name)
        w = ring.writer()
        assert u64_at(raw, 192) == os.getpid()
        for i in range(3):
            assert w.try_write(1, b"x", i)
        assert u64_at(raw, 64) == 3  # write cursor
        assert u64_at(raw, 208) == 3  # written
        w.heartbeat(0x0123_4567_89AB_CDEF)
        assert u64_at(raw, 200) == 0x0123_4567_89AB_CDEF
        for i in range(10):  # 5 fit, 5 are refused by the drop policy, in one full episode
            w.try_write(1, b"x", i)
        assert u64_at(raw, 64) == 8
        assert u64_at(raw, 216) == 5  # dropped
        assert u64_at(raw, 224) == 1  # full_events
        assert u64_at(raw, 232) == 0  # stall_ns: a drop ring never waits
        assert u64_at(raw, 128) == 0  # the writer never touches the read cursor


def test_stall_ns_is_written_at_offset_232(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=2, full_policy="backpressure") as ring:
        raw = raw_segment(ring_name)
        w = ring.writer()
        assert w.try_write(1, b"a", 0) and w.try_write(1, b"b", 0)
        assert w.write(1, b"c", 0, timeout_ns=2_000_000) is False
        assert u64_at(raw, 232) >= 2_000_000
        assert u64_at(raw, 224) == 1
        assert u64_at(raw, 216) == 0


def test_reader_words_are_written_at_their_offsets(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        raw = raw_segment(ring_name)
        w = ring.writer()
        for i in range(4):
            assert w.try_write(1, b"abc", i)
        r = ring.reader()
        assert u64_at(raw, 256) == os.getpid()
        assert len(r.try_read_batch(2)) == 2
        assert u64_at(raw, 128) == 0  # handed out, not yet committed
        r.commit()
        assert u64_at(raw, 128) == 2  # read cursor
        assert u64_at(raw, 272) == 2  # read
        r.heartbeat(0x0FED_CBA9_8765_4321)
        assert u64_at(raw, 264) == 0x0FED_CBA9_8765_4321
        raw[512 + 2 * 64 + 16] ^= 0x01  # corrupt the payload of message 2
        assert [m.seq for m in r.try_read_batch(10)] == [3]
        assert u64_at(raw, 280) == 1  # crc_errors
        assert u64_at(raw, 64) == 4  # the reader never touches the write cursor


def test_parked_flag_at_320_and_wakeups_at_288(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        raw = raw_segment(ring_name)
        r, w = ring.reader(), ring.writer()
        result = []
        t = threading.Thread(target=lambda: result.append(r.wait(10_000_000_000, spins=0, park_ns=10_000_000_000)))
        t.start()
        try:
            deadline = time.monotonic() + 10
            while u64_at(raw, 320) != 1 and time.monotonic() < deadline:
                time.sleep(0.0005)
            assert u64_at(raw, 320) == 1  # parked
            time.sleep(0.02)
            assert w.try_write(1, b"wake", 0)  # sees the flag, clears it and posts the semaphore
        finally:
            t.join(15)
        assert result == [True]
        assert u64_at(raw, 320) == 0
        assert u64_at(raw, 288) == 1  # wakeups
        assert u64_at(raw, 296) == 0  # missed_wakeups


def test_lost_wakeup_is_counted_at_offset_296(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        raw = raw_segment(ring_name)
        r, w = ring.reader(), ring.writer()
        result = []
        t = threading.Thread(target=lambda: result.append(r.wait(10_000_000_000, spins=0, park_ns=200_000_000)))
        t.start()
        try:
            deadline = time.monotonic() + 10
            while u64_at(raw, 320) != 1 and time.monotonic() < deadline:
                time.sleep(0.0005)
            time.sleep(0.02)
            raw[320:328] = bytes(8)  # hide the parked flag: the writer will not post (a lost wake-up)
            assert w.try_write(1, b"late", 0)
        finally:
            t.join(15)
        assert result == [True]  # the bounded park noticed the data anyway
        assert u64_at(raw, 296) == 1
        assert u64_at(raw, 288) == 0


# ------------------------------------------------------------------------------------ geometry


@pytest.mark.parametrize(
    ("max_payload", "slot"),
    [(0, 64), (1, 64), (48, 64), (49, 128), (112, 128), (113, 192), (1000, 1024), (1008, 1024), (1009, 1088),
     (65535, 65600)],
)
def test_slot_size_for_rounds_header_plus_payload_up_to_64(max_payload, slot):
    assert slot_size_for(max_payload) == slot
    assert slot % 64 == 0 and slot - 16 >= max_payload > slot - 16 - 64


@pytest.mark.parametrize("bad", [-1, 65536, 10**6])
def test_slot_size_for_rejects_payloads_a_u16_length_cannot_hold(bad):
    with pytest.raises(ValueError):
        slot_size_for(bad)


def test_slot_n_starts_at_control_bytes_plus_n_slot_sizes(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=128, capacity=4) as ring:
        raw = raw_segment(ring_name)
        w, r = ring.writer(), ring.reader()
        for seq in range(4):
            assert w.try_write(seq, bytes([seq]) * 3, seq)
        assert len(r.try_read_batch(4)) == 4
        r.commit()
        for seq in range(4, 6):  # the second lap: message 5 lands in slot 1
            assert w.try_write(seq, bytes([seq]) * 3, seq)
        off = 512 + (5 & 3) * 128
        assert raw[off + 8 : off + 12] == bytes.fromhex("0500" "0300")  # kind 5, length 3
        assert raw[off + 16 : off + 19] == b"\x05\x05\x05"
        assert bytes(ring.slot_view(5)) == raw[off : off + 128]
