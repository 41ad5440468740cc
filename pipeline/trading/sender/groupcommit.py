"""The journal's group commit: the intents of one batch of ORDERs made durable by one fsync.

Each NEW's intent is written to the journal when it is admitted (``NewOrderAdmission``) and added to
``GroupCommit.pending``; once the batch has been read, ``commit`` fsyncs the journal once
(``Journal.sync``: it flushes every record written so far), before any of the batch's orders is
sent: a burst of new orders pays for one fsync, not one each. When the fsync fails none of them is
sent: each one's NEW leaves the outbox, ``never_sent`` is journaled (best effort: kept in memory
when the disk refuses it; a restart that finds only the intent reconciles it with the venue, which
never saw it), and it is answered REJECTED (HALTED), counted in ``journal_errors`` and logged
(``sender_journal_failed``).
"""

from __future__ import annotations

from typing import Callable

import msgspec

from pipeline.runtime.agent import MARK_INTENT_SYNCED, mark_code
from pipeline.trading.messages import ExecReason, ExecType


class PendingIntent(msgspec.Struct, gc=False):
    """An intent written to the journal and not yet fsync'd."""

    order_id: int
    origin: int  # the ORDER's ``OrderOrigin`` (for the latency mark)
    ts_origin_ns: int


class GroupCommit:
    """The intents waiting for the batch's fsync (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``: the journal), ``drop_new`` (``Outbox.drop_new``),
    ``report`` (``ExecReporter.report``), ``mark`` (``AgentContext.mark``).
    """

    def __init__(self, ledger, drop_new: Callable[[set[int]], None], report: Callable,
                 mark: Callable[[int, int], None], stats: dict, log):
        self.ledger = ledger
        self.drop_new = drop_new
        self.report = report
        self.mark = mark
        self.stats = stats
        self.log = log
        self.pending: list[PendingIntent] = []  # written since the last commit (the admission appends)

    def commit(self) -> None:
        """Fsync once for every intent written since the last commit; on failure none of them is
        sent (see the module docstring)."""
        group = self.pending
        if not group:
            return
        self.pending = []
        try:
            self.ledger.journal.sync()
        except OSError as exc:
            self._fail(group, f"{type(exc).__name__}: {exc.strerror}")
            return
        mark = self.mark
        for intent in group:
            mark(mark_code(MARK_INTENT_SYNCED, intent.origin), intent.ts_origin_ns)

    def _fail(self, group: list[PendingIntent], error: str) -> None:
        """The fsync failed: none of ``group`` is sent; each is journaled never_sent and answered HALTED."""
        self.drop_new({intent.order_id for intent in group})
        ledger = self.ledger
        for intent in group:
            oid = intent.order_id
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
            self.log.error("sender_journal_failed", order_id=oid, error=error)
            ledger.bodies.pop(oid, None)
            ledger.record({"t": "never_sent", "oid": oid})  # kept in memory when the disk refuses it
            self.report(intent.ts_origin_ns, ExecType.REJECTED, ledger.orders[oid], reason=ExecReason.HALTED,
                        leaves=0.0)
