"""EXEC_REPORTs out (pipeline/trading/sender/reports.py): never waiting; held in order, or dropped and counted."""

from __future__ import annotations

import collections

import numpy as np

from pipeline.trading.messages import EXEC_DTYPE, ExecReason, ExecType, Kind
from pipeline.trading.sender.reports import ExecReporter


class Port:
    """``emit_nowait`` stand-in: writes while ``room``, else refuses."""

    def __init__(self):
        self.room = True
        self.got: list[tuple[int, int, int]] = []  # (order id, exec type, ts)

    def emit_nowait(self, port, kind, payload, ts) -> bool:
        assert kind == Kind.EXEC_REPORT
        if self.room:
            r = np.frombuffer(bytes(payload), EXEC_DTYPE, 1)[0]
            self.got.append((int(r["order_id"]), int(r["exec_type"]), ts))
        return self.room


def test_reports_that_find_the_ring_full_are_held_in_order_and_written_as_room_comes():
    port, stats = Port(), collections.defaultdict(int)
    rep = ExecReporter(port.emit_nowait, "exec", False, stats)
    rep.report(1, ExecType.ACKED, None, order_id=1)
    port.room = False
    rep.report(2, ExecType.ACKED, None, order_id=2)
    port.room = True
    rep.report(3, ExecType.ACKED, None, order_id=3)  # behind a held one: held too, never overtakes it
    assert port.got == [(1, ExecType.ACKED, 1)] and len(rep.held) == 2 and stats["held_max"] == 2
    assert rep.flush_held() == 2 and not rep.held
    assert port.got[1:] == [(2, ExecType.ACKED, 2), (3, ExecType.ACKED, 3)]


def test_on_a_drop_ring_a_report_that_finds_it_full_is_dropped_and_counted():
    port, stats = Port(), collections.defaultdict(int)
    rep = ExecReporter(port.emit_nowait, "exec", True, stats)
    port.room = False
    rep.report(1, ExecType.REJECTED, None, order_id=1, reason=ExecReason.NOT_FOUND)
    assert not rep.held and stats["out_drops"] == 1
