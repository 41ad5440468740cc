"""The process table: one shared-memory record per process, written by its runner, read by the
supervisor (liveness, readiness, the status view). The supervisor creates and unlinks it.

Segment ``<shm_prefix>.procs``, mode 0600::

    0                64               64 + 1024         64 + 2*1024
    +----------------+----------------+-----------------+-- ... --+
    | table header   | record 0       | record 1        |         |
    +----------------+----------------+-----------------+-- ... --+

Table header: ``magic u64 = b"PROCTAB\\x00"``, ``version u32``, ``n_records u32``.

Record (1024 bytes; every number an aligned u64 written with one 8-byte store)::

    offset  field            meaning
      0     pid              the runner's pid (0 = never started)
      8     heartbeat_ns     CLOCK_MONOTONIC of the runner's last beat
     16     phase            PHASE_* below, as the runner sees itself
     24     core_plus_one    the core it is pinned to, plus one (0 = not pinned)
     32     msgs_in          messages taken from its inputs
     40     msgs_out         messages written to its outputs
     48     errors           exceptions caught by the runner's error handler
     56     lat_p50_ns       p50 of (now - ts_origin_ns) of its recent outputs
     64     lat_p99_ns       p99 of the same
     72     started_ns       when the runner started
     80     ready_ns         when on_start finished (0 = not ready yet)
     88     error_len        bytes used in last_error
     96     last_error       UTF-8, 160 bytes, truncated
    256     stats_len        bytes used in stage_stats
    264     stage_stats      UTF-8 JSON object, 760 bytes: the stage's own counters (reconnects,
                             resyncs, rejected frames...), published with each heartbeat
   1024     lat_hist         LAT_BUCKETS u64: how many outputs had an origin-to-output latency up to
                             each bound of LAT_BOUNDS_NS (1 us .. 1 s, 1-2-5 per decade; bucket i holds
                             LAT_BOUNDS_NS[i-1] < latency <= LAT_BOUNDS_NS[i], the last one the rest),
                             counted since the process started, published with each heartbeat
   1184     lat_sum_ns       u64: the sum of those latencies (ns)
   1192     (reserved to 1280)
"""

from __future__ import annotations

import mmap
import os
import struct

import orjson
import posix_ipc

from pipeline.runtime.errors import StartupError

MAGIC = int.from_bytes(b"PROCTAB\x00", "little")
VERSION = 4
HEADER_BYTES = 64
RECORD_BYTES = 1280
ERROR_BYTES = 160
STATS_BYTES = 760

OFF_PID = 0
OFF_HEARTBEAT_NS = 8
OFF_PHASE = 16
OFF_CORE_PLUS_ONE = 24
OFF_MSGS_IN = 32
OFF_MSGS_OUT = 40
OFF_ERRORS = 48
OFF_LAT_P50_NS = 56
OFF_LAT_P99_NS = 64
OFF_STARTED_NS = 72
OFF_READY_NS = 80
OFF_ERROR_LEN = 88
OFF_LAST_ERROR = 96
OFF_STATS_LEN = 256
OFF_STAGE_STATS = 264
OFF_LAT_HIST = 1024

#: the latency histogram's upper bounds (ns): 1 us to 1 s, 1-2-5 per decade (the metrics' buckets)
LAT_BOUNDS_NS = tuple(m * 10**e for e in range(3, 9) for m in (1, 2, 5)) + (10**9,)
LAT_BUCKETS = len(LAT_BOUNDS_NS) + 1  # the last bucket: above 1 s
OFF_LAT_SUM_NS = OFF_LAT_HIST + 8 * LAT_BUCKETS

PHASE_NONE = 0
PHASE_STARTING = 1
PHASE_READY = 2
PHASE_STOPPING = 3

_TABLE_HEADER = struct.Struct("<QII")


def segment_name(prefix: str) -> str:
    return f"/{prefix}.procs"


class ProcRecord:
    """One process's record, as a view of u64 words."""

    __slots__ = ("_w", "_raw")

    def __init__(self, raw: memoryview):
        self._raw = raw
        self._w = raw.cast("Q")

    def get(self, off: int) -> int:
        return self._w[off // 8]

    def set(self, off: int, value: int) -> None:
        self._w[off // 8] = value

    def add(self, off: int, delta: int) -> None:
        self._w[off // 8] += delta

    def last_error(self) -> str:
        n = min(self._w[OFF_ERROR_LEN // 8], ERROR_BYTES)
        return bytes(self._raw[OFF_LAST_ERROR : OFF_LAST_ERROR + n]).decode("utf-8", "replace")

    def set_last_error(self, text: str) -> None:
        data = text.encode("utf-8")[:ERROR_BYTES]
        self._w[OFF_ERROR_LEN // 8] = 0
        self._raw[OFF_LAST_ERROR : OFF_LAST_ERROR + len(data)] = data
        self._w[OFF_ERROR_LEN // 8] = len(data)

    def stage_stats(self) -> dict:
        """The stage's own counters ({} when none or unreadable)."""
        n = min(self._w[OFF_STATS_LEN // 8], STATS_BYTES)
        try:
            doc = orjson.loads(bytes(self._raw[OFF_STAGE_STATS : OFF_STAGE_STATS + n])) if n else {}
        except orjson.JSONDecodeError:  # caught mid-update; the next read has it
            return {}
        return doc if isinstance(doc, dict) else {}

    def set_stage_stats(self, stats: dict) -> None:
        """Publish the stage's counters (JSON, truncated to whole entries that fit STATS_BYTES)."""
        data = orjson.dumps(stats)
        while len(data) > STATS_BYTES and stats:
            stats = dict(list(stats.items())[:-1])
            data = orjson.dumps(stats)
        self._w[OFF_STATS_LEN // 8] = 0
        self._raw[OFF_STAGE_STATS : OFF_STAGE_STATS + len(data)] = data
        self._w[OFF_STATS_LEN // 8] = len(data)

    def latency_histogram(self) -> tuple[list[int], int]:
        """(counts per bucket of ``LAT_BOUNDS_NS`` and above, sum in ns) as last published; a read may
        fall between two of the runner's stores, each count is whole."""
        first = OFF_LAT_HIST // 8
        return list(self._w[first:first + LAT_BUCKETS]), self._w[OFF_LAT_SUM_NS // 8]

    def set_latency_histogram(self, counts, sum_ns: int) -> None:
        """Publish the latency histogram (``LAT_BUCKETS`` counts, the sum in ns)."""
        first = OFF_LAT_HIST // 8
        for i in range(LAT_BUCKETS):
            self._w[first + i] = int(counts[i])
        self._w[OFF_LAT_SUM_NS // 8] = int(sum_ns)

    def clear(self) -> None:
        self._raw[:] = bytes(RECORD_BYTES)

    def release(self) -> None:
        self._w.release()
        self._raw.release()


class ProcTable:
    """The mapped table. ``create`` (supervisor) or ``attach`` (runner)."""

    def __init__(self, name: str, mm: mmap.mmap, n: int):
        self.name = name
        self.n = n
        self._mm = mm
        self._mv = memoryview(mm)
        self._records = [ProcRecord(self._mv[HEADER_BYTES + i * RECORD_BYTES : HEADER_BYTES + (i + 1) * RECORD_BYTES]) for i in range(n)]

    @classmethod
    def create(cls, prefix: str, n: int) -> "ProcTable":
        """Create (replacing any stale one) a zeroed table of ``n`` records, mode 0600."""
        name = segment_name(prefix)
        cls.unlink(prefix)
        size = HEADER_BYTES + max(n, 1) * RECORD_BYTES
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
        try:
            os.fchmod(shm.fd, 0o600)
            mm = mmap.mmap(shm.fd, size)
        finally:
            shm.close_fd()
        _TABLE_HEADER.pack_into(mm, 0, MAGIC, VERSION, n)
        return cls(name, mm, n)

    @classmethod
    def attach(cls, prefix: str) -> "ProcTable":
        """Map the supervisor's table.

        Raises:
            StartupError: missing, or not a process table of this version.
        """
        name = segment_name(prefix)
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError:
            raise StartupError(f"process table {name} does not exist (start processes through the supervisor)") from None
        try:
            mm = mmap.mmap(shm.fd, shm.size)
        finally:
            shm.close_fd()
        magic, version, n = _TABLE_HEADER.unpack_from(mm, 0)
        if magic != MAGIC or version != VERSION:
            mm.close()
            raise StartupError(f"process table {name}: magic/version {magic:#x}/{version} differ from {MAGIC:#x}/{VERSION}")
        return cls(name, mm, n)

    @staticmethod
    def unlink(prefix: str) -> bool:
        try:
            posix_ipc.unlink_shared_memory(segment_name(prefix))
            return True
        except posix_ipc.ExistentialError:
            return False

    def record(self, index: int) -> ProcRecord:
        return self._records[index]

    def close(self) -> None:
        for r in self._records:
            r.release()
        self._mv.release()
        self._mm.close()
