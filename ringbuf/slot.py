"""The slot codec the writer and the reader share on the per-message path.

``ringbuf.layout`` declares the bytes; this module binds what the hot paths call per message (the
header and CRC-prefix ``struct`` methods, CRC-32C) and the control-block word indexes they use, as
plain module names. ``writer`` and ``reader`` import these names into their own globals, so each
per-message use stays one global load (no attribute chain through ``layout``).
"""

from __future__ import annotations

import crc32c as _crc32c_mod

from ringbuf import layout as L

crc = _crc32c_mod.crc32c  # crc(data, seed=0) -> CRC-32C
HDR_PACK = L.HEADER.pack_into  # (buf, off, ts_origin_ns, kind, length, crc)
HDR_UNPACK = L.HEADER.unpack_from  # (buf, off) -> (ts_origin_ns, kind, length, crc)
PRE_PACK = L.CRC_PREFIX.pack_into  # (buf, off, seq, ts_origin_ns, kind, length)
HB = L.HEADER_BYTES
CB = L.CONTROL_BYTES
WC = L.W_WRITE_CURSOR
RC = L.W_READ_CURSOR
WRITTEN = L.W_WRITTEN
READ = L.W_READ
PARKED = L.W_READER_PARKED
