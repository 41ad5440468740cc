"""The process table (pipeline/runtime/proctable.py): its layout constants and golden bytes in the
segment; attaching a missing table raises."""

from __future__ import annotations

import mmap
import struct
import uuid

import pytest

from pipeline.runtime import proctable as PT
from pipeline.runtime.errors import StartupError
from tests.support.paths import SHM_DIR
from tests.support.shm import shm_entries


def test_proctable_layout_constants():
    assert (PT.HEADER_BYTES, PT.RECORD_BYTES, PT.ERROR_BYTES, PT.STATS_BYTES) == (64, 1280, 160, 760)
    offsets = [PT.OFF_PID, PT.OFF_HEARTBEAT_NS, PT.OFF_PHASE, PT.OFF_CORE_PLUS_ONE, PT.OFF_MSGS_IN, PT.OFF_MSGS_OUT,
               PT.OFF_ERRORS, PT.OFF_LAT_P50_NS, PT.OFF_LAT_P99_NS, PT.OFF_STARTED_NS, PT.OFF_READY_NS,
               PT.OFF_ERROR_LEN, PT.OFF_LAST_ERROR, PT.OFF_STATS_LEN, PT.OFF_STAGE_STATS, PT.OFF_LAT_HIST,
               PT.OFF_LAT_SUM_NS]
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 256, 264, 1024, 1184]
    assert PT.OFF_LAST_ERROR + PT.ERROR_BYTES == 256
    assert PT.OFF_STAGE_STATS + PT.STATS_BYTES == 1024
    assert PT.LAT_BOUNDS_NS == (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
                                2_000_000, 5_000_000, 10_000_000, 20_000_000, 50_000_000, 100_000_000, 200_000_000,
                                500_000_000, 1_000_000_000)
    assert PT.LAT_BUCKETS == 20 and PT.OFF_LAT_SUM_NS + 8 <= PT.RECORD_BYTES
    assert (PT.PHASE_NONE, PT.PHASE_STARTING, PT.PHASE_READY, PT.PHASE_STOPPING) == (0, 1, 2, 3)
    assert PT.MAGIC.to_bytes(8, "little") == b"PROCTAB\x00"


def raw_len_and_text(prefix: str, base_record: int) -> tuple[int, bytes]:
    with open(SHM_DIR / f"{prefix}.procs", "rb") as f:
        raw = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        base = 64 + 1280 * base_record
        n = struct.unpack_from("<Q", raw, base + 256)[0]
        return n, bytes(raw[base + 264 : base + 264 + n])
    finally:
        raw.close()


def test_proctable_golden_bytes_in_the_segment():
    """Write through ProcRecord; read the segment's bytes independently at literal offsets."""
    prefix = "t" + uuid.uuid4().hex[:8]
    table = PT.ProcTable.create(prefix, 3)
    try:
        rec = table.record(1)
        values = {0: 4242, 8: 0x1122334455667788, 16: 2, 24: 3, 32: 1000, 40: 999, 48: 7, 56: 1500, 64: 9000,
                  72: 123456789, 80: 123456999}
        for off, v in values.items():
            rec.set(off, v)
        rec.set_last_error("boom: é")
        assert (SHM_DIR / f"{prefix}.procs").stat().st_mode & 0o777 == 0o600
        with open(SHM_DIR / f"{prefix}.procs", "rb") as f:
            raw = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            assert len(raw) == 64 + 3 * 1280
            assert raw[0:16] == b"PROCTAB\x00" + bytes.fromhex("04000000" "03000000")
            base = 64 + 1280
            for off, v in values.items():
                assert struct.unpack_from("<Q", raw, base + off)[0] == v, off
            err = "boom: é".encode()
            assert struct.unpack_from("<Q", raw, base + 88)[0] == len(err)
            assert raw[base + 96 : base + 96 + len(err)] == err
            assert raw[64 : 64 + 1280] == bytes(1280) and raw[64 + 2560 :] == bytes(1280)  # neighbours untouched
        finally:
            raw.close()
        assert rec.last_error() == "boom: é"
        rec.set_stage_stats({"reconnects": 3, "resyncs": 1})
        stats = b'{"reconnects":3,"resyncs":1}'
        assert raw_len_and_text(prefix, base_record=1) == (len(stats), stats)
        assert rec.stage_stats() == {"reconnects": 3, "resyncs": 1}
        rec.set_latency_histogram(list(range(100, 120)), 987654321)
        with open(SHM_DIR / f"{prefix}.procs", "rb") as f:
            raw = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            assert struct.unpack_from("<20Q", raw, base + 1024) == tuple(range(100, 120))
            assert struct.unpack_from("<Q", raw, base + 1184)[0] == 987654321
        finally:
            raw.close()
        assert rec.latency_histogram() == (list(range(100, 120)), 987654321)
        rec.set_stage_stats({f"counter_{i:03d}": 10**12 for i in range(40)})  # too big: whole entries dropped
        assert 0 < len(rec.stage_stats()) < 40 and all(v == 10**12 for v in rec.stage_stats().values())
        rec.set_last_error("x" * 500)
        assert rec.last_error() == "x" * 160  # truncated to the field
        attached = PT.ProcTable.attach(prefix)
        assert attached.n == 3 and attached.record(1).get(PT.OFF_PID) == 4242
        attached.close()
    finally:
        table.close()
        PT.ProcTable.unlink(prefix)
    assert shm_entries(prefix) == []


def test_proctable_attach_missing_raises():
    with pytest.raises(StartupError, match="does not exist"):
        PT.ProcTable.attach("t" + uuid.uuid4().hex[:8])
