"""Corrupt, torn and stale slots are counted and skipped; clean ones are delivered exactly.

The reader verifies each slot's CRC-32C (seeded with the slot's sequence number) before it hands the
message out. These tests inject faults straight into the slot bytes (``Ring.slot_view``, or a raw
mmap of the segment) and check the three read paths (``try_read``, ``try_read_batch``, ``poll``):

- no corrupt message is ever delivered, and each one adds exactly 1 to ``crc_errors``;
- every clean message around it is delivered with its exact sequence number, header and payload;
- no fault makes a read call raise.
"""

from __future__ import annotations

import random

import crc32c
import pytest

from ringbuf import Ring
from ringbuf import layout as L

READ_APIS = ("try_read", "try_read_batch", "poll")


def read_all(reader, api: str) -> list[tuple[int, int, int, bytes]]:
    """Everything the reader delivers now, as (seq, ts, kind, payload bytes), through one API."""
    out: list[tuple[int, int, int, bytes]] = []
    if api == "try_read":
        while (m := reader.try_read()) is not None:
            out.append((m.seq, m.ts_origin_ns, m.kind, bytes(m.payload)))
        reader.commit()
    elif api == "try_read_batch":
        while True:
            before = reader.position
            batch = reader.try_read_batch(3)
            out.extend((m.seq, m.ts_origin_ns, m.kind, bytes(m.payload)) for m in batch)
            if reader.position == before:
                break
        reader.commit()
    else:
        while True:
            before = reader.position
            reader.poll(lambda seq, ts, kind, p: out.append((seq, ts, kind, bytes(p))), 3)
            if reader.position == before:
                break
    return out


def reseal(slot, seq: int) -> None:
    """Recompute a slot's CRC for its current header and payload bytes, as the writer would."""
    ts, kind, n, _ = L.HEADER.unpack_from(slot, 0)
    pre = L.CRC_PREFIX.pack(seq, ts, kind, n)
    payload = bytes(slot[16 : 16 + n])
    L.HEADER.pack_into(slot, 0, ts, kind, n, crc32c.crc32c(payload, crc32c.crc32c(pre)))


# ================================================================================= bit flips


@pytest.mark.parametrize("api", READ_APIS)
def test_every_single_bit_flip_is_rejected_and_clean_messages_pass(ring_name, api):
    rng = random.Random({"try_read": 11, "try_read_batch": 22, "poll": 33}[api])
    trials = 5000
    slot_size, capacity = 128, 16
    maxn = slot_size - 16
    with Ring.create(ring_name, slot_size=slot_size, capacity=capacity) as ring:
        w, r = ring.writer(), ring.reader()
        flips = 0
        for trial in range(trials):
            expected = []
            corrupt_seqs = []
            for slot_role in ["clean"] * rng.randint(0, 2) + ["flip"] + ["clean"] * rng.randint(0, 2):
                seq = w.position
                n = rng.choice((0, 1, maxn, rng.randint(0, maxn)))
                payload = rng.randbytes(n)
                ts, kind = rng.getrandbits(64), rng.getrandbits(16)
                assert w.try_write(kind, payload, ts)
                if slot_role == "clean":
                    expected.append((seq, ts, kind, payload))
                    continue
                sv = ring.slot_view(seq)
                bit = rng.randrange((16 + n) * 8)  # only the meaningful bytes: header + payload
                sv[bit // 8] ^= 1 << (bit % 8)
                sv.release()
                flips += 1
                corrupt_seqs.append(seq)
            got = read_all(r, api)
            assert got == expected, f"trial {trial}: flipped {corrupt_seqs}"
            assert ring.stats().crc_errors == flips, f"trial {trial}"
        st = ring.stats()
        assert st.crc_errors == flips == trials
        assert st.read == st.written


def test_a_flip_in_every_bit_of_one_message_is_rejected(ring_name):
    payload = bytes(range(40))
    with Ring.create(ring_name, slot_size=64, capacity=2) as ring:
        w, r = ring.writer(), ring.reader()
        nbits = (16 + len(payload)) * 8
        for bit in range(nbits):
            seq = w.position
            assert w.try_write(0x0102, payload, 0x1122334455667788)
            sv = ring.slot_view(seq)
            sv[bit // 8] ^= 1 << (bit % 8)
            sv.release()
            assert r.try_read() is None, f"bit {bit} flipped and still accepted"
        assert ring.stats().crc_errors == nbits


def test_a_flip_beyond_the_payload_length_is_harmless(ring_name):
    with Ring.create(ring_name, slot_size=64, capacity=2) as ring:
        w, r = ring.writer(), ring.reader()
        assert w.try_write(1, b"short", 7)
        sv = ring.slot_view(0)
        sv[16 + 5] ^= 0xFF  # padding after the payload is not part of the message
        sv.release()
        assert bytes(r.try_read().payload) == b"short"
        assert ring.stats().crc_errors == 0


# ============================================================================ stale and torn


@pytest.mark.parametrize("api", READ_APIS)
def test_a_slot_left_from_an_earlier_lap_is_rejected(ring_name, api):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(8):
            assert w.try_write(1, b"lap one", 100 + seq)
        old_slot_3 = bytes(ring.slot_view(3))
        assert len(read_all(r, api)) == 8
        for seq in range(8, 16):
            assert w.try_write(1, b"lap two", 100 + seq)
        ring.slot_view(11)[:] = old_slot_3  # message 11 reuses slot 3: put lap one's bytes back
        got = read_all(r, api)
        assert [g[0] for g in got] == [8, 9, 10, 12, 13, 14, 15]
        assert all(g[3] == b"lap two" for g in got)
        assert ring.stats().crc_errors == 1


@pytest.mark.parametrize("api", READ_APIS)
def test_a_valid_slot_copied_to_another_position_is_rejected(ring_name, api):
    with Ring.create(ring_name, slot_size=64, capacity=8) as ring:
        w, r = ring.writer(), ring.reader()
        for seq in range(4):
            assert w.try_write(1, seq.to_bytes(8, "little"), seq)
        ring.slot_view(2)[:] = bytes(ring.slot_view(1))  # same bytes, wrong sequence number
        assert [g[0] for g in read_all(r, api)] == [0, 1, 3]
        assert ring.stats().crc_errors == 1


def test_cursor_advanced_over_an_unwritten_slot_rejects_the_stale_lap(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        raw = raw_segment(ring_name)
        w, r = ring.writer(), ring.reader()
        for seq in range(4):
            assert w.try_write(1, b"old", seq)
        assert len(read_all(r, "try_read")) == 4
        raw[64:72] = (6).to_bytes(8, "little")  # publish 4 and 5 without writing them
        assert read_all(r, "try_read_batch") == []
        assert ring.stats().crc_errors == 2
        w2 = ring.writer()  # a writer resumes at the published cursor
        assert w2.position == 6
        assert w2.try_write(1, b"new", 6)
        assert read_all(r, "poll") == [(6, 6, 1, b"new")]


def test_a_never_written_zero_slot_is_not_a_valid_message(ring_name, raw_segment):
    with Ring.create(ring_name, slot_size=64, capacity=4) as ring:
        raw = raw_segment(ring_name)
        r = ring.reader()
        raw[64:72] = (1).to_bytes(8, "little")
        assert read_all(r, "try_read") == []
        assert ring.stats().crc_errors == 1


@pytest.mark.parametrize("api", READ_APIS)
def test_a_torn_payload_is_rejected(ring_name, api):
    with Ring.create(ring_name, slot_size=128, capacity=2) as ring:
        w, r = ring.writer(), ring.reader()
        assert w.try_write(1, b"A" * 100, 0)
        read_all(r, api)
        assert w.try_write(1, b"A" * 100, 0)
        assert w.try_write(1, b"B" * 100, 0)
        sv = ring.slot_view(2)  # message 2 reuses slot 0: its second half still holds lap one's bytes
        sv[16 + 50 : 16 + 100] = b"A" * 50
        sv.release()
        assert [g[0] for g in read_all(r, api)] == [1]
        assert ring.stats().crc_errors == 1


# =============================================================================== bad lengths


@pytest.mark.parametrize("api", READ_APIS)
@pytest.mark.parametrize("where", ["middle slot", "last slot"])
@pytest.mark.parametrize("length", ["max+1", "slot_size", "0xffff"])
def test_a_length_larger_than_the_slot_is_rejected_even_with_a_matching_crc(ring_name, raw_segment, api, where, length):
    slot_size, capacity = 64, 4
    with Ring.create(ring_name, slot_size=slot_size, capacity=capacity) as ring:
        raw = raw_segment(ring_name)
        w, r = ring.writer(), ring.reader()
        bad_seq = 1 if where == "middle slot" else capacity - 1
        for seq in range(capacity):
            assert w.try_write(1, bytes([seq]) * 8, seq)
        n = {"max+1": slot_size - 16 + 1, "slot_size": slot_size, "0xffff": 0xFFFF}[length]
        off = 512 + (bad_seq % capacity) * slot_size
        ts, kind, _, _ = L.HEADER.unpack_from(raw, off)
        # seal it with the CRC of whatever bytes lie there (the next slot, or past the segment's end):
        # only the reader's bounds check can tell it is bad
        covered = bytes(raw[off + 16 : off + 16 + n])
        crc = crc32c.crc32c(covered, crc32c.crc32c(L.CRC_PREFIX.pack(bad_seq, ts, kind, n)))
        L.HEADER.pack_into(raw, off, ts, kind, n, crc)
        got = read_all(r, api)
        assert [g[0] for g in got] == [s for s in range(capacity) if s != bad_seq]
        assert all(g[3] == bytes([g[0]]) * 8 for g in got)
        assert ring.stats().crc_errors == 1


@pytest.mark.parametrize("api", READ_APIS)
def test_random_garbage_in_every_slot_never_raises_and_is_never_delivered(ring_name, raw_segment, api):
    rng = random.Random(1234)
    slot_size, capacity = 64, 8
    with Ring.create(ring_name, slot_size=slot_size, capacity=capacity) as ring:
        raw = raw_segment(ring_name)
        r = ring.reader()
        published = 0
        for round_ in range(300):
            for i in range(capacity):
                off = 512 + i * slot_size
                garbage = bytearray(rng.randbytes(slot_size))
                if round_ % 3 == 0:  # plausible lengths too, not only huge ones
                    garbage[10:12] = rng.randint(0, slot_size).to_bytes(2, "little")
                raw[off : off + slot_size] = bytes(garbage)
            published += capacity
            raw[64:72] = published.to_bytes(8, "little")
            assert read_all(r, api) == []
        st = ring.stats()
        assert st.crc_errors == published
        assert st.read_cursor == published  # skipped slots are consumed, the reader never stalls
