"""Message kinds and the payload layouts the runtime itself sends.

Kinds travel in the ring header's ``kind`` field (u16). Each payload layout is declared once,
here or in the stage that owns it, with its offsets, and pinned by a golden-bytes test.

CONTROL payload (16 bytes)::

    0        2        4                8               16
    +--------+--------+----------------+----------------+
    | cmd    | reason | reserved (0)   | issued_ns      |
    | u16 LE | u16 LE | u32            | u64 LE         |
    +--------+--------+----------------+----------------+
"""

from __future__ import annotations

import enum
import struct


class Kind(enum.IntEnum):
    """What a ring message carries."""

    BOOK = 1
    TRADE = 2
    FEATURES = 3
    SIGNAL = 4
    INSTRUCTION = 5
    ORDER = 6
    EXEC_REPORT = 7
    CONTROL = 8


class ControlCmd(enum.IntEnum):
    """CONTROL commands: imperatives for the risk gateway."""

    HALT = 1  # stop sending new orders; cancel working ones
    RESUME = 2  # back to ACTIVE
    KILL_SWITCH = 3  # HALT, cancel all, and stay halted until a person resumes
    REDUCE_ONLY = 4  # only exposure-reducing orders pass


class ControlReason(enum.IntEnum):
    """Why a CONTROL command was issued."""

    OPERATOR = 1  # a person, through the CLI
    STAGE_FATAL = 2  # the supervisor gave up restarting a stage
    SHUTDOWN = 3  # orderly `down`


OFF_CONTROL_CMD = 0
OFF_CONTROL_REASON = 2
OFF_CONTROL_ISSUED_NS = 8
CONTROL = struct.Struct("<HHIQ")
assert CONTROL.size == 16


def pack_control(cmd: ControlCmd, reason: ControlReason, issued_ns: int) -> bytes:
    """The CONTROL payload for ``cmd``."""
    return CONTROL.pack(int(cmd), int(reason), 0, issued_ns)


def unpack_control(payload) -> tuple[ControlCmd, ControlReason, int] | None:
    """Decode a CONTROL payload; None when it is malformed (wrong size or unknown codes)."""
    if len(payload) != CONTROL.size:
        return None
    cmd, reason, _, issued_ns = CONTROL.unpack_from(payload, 0)
    try:
        return ControlCmd(cmd), ControlReason(reason), issued_ns
    except ValueError:
        return None
