"""The journal's group commit: records made durable by one fsync, off the path from ORDER to request.

Every record is written without an fsync (``OrderLedger.record``): from then on it survives the
sender being killed (it is in the page cache). ``GroupCommit`` makes them durable together, by one
fsync, in one of two orderings (the sender's ``journal_sync`` param):

- ``after_send`` (the default): a NEW's intent is written, its request sent, and the fsync comes
  later, off the ORDER -> request path and off the sender's loop: ``tick`` (called at the end of
  every duty cycle, after the cycle's requests have started) begins one fsync once ``window_ns`` has
  passed since the oldest un-fsync'd record was written (``OrderLedger.unsynced_since_ns``), or once
  ``max_records`` records are un-fsync'd, whichever comes first. The fsync runs on the journal's
  thread (``Journal.start_sync``; ``os.fsync`` releases the GIL while the disk works), so an ORDER
  that arrives meanwhile is read and sent at once; ``tick`` applies the outcome when it is known
  (looked for every ``POLL_NS``). The bound: a record is durable once the disk has answered the fsync
  begun at the end of the first duty cycle that ends ``window_ns`` or more after its write, or in
  which the ``max_records``-th un-fsync'd record was written (one fsync runs at a time: a record
  written while one runs waits for the next). What a machine crash can lose is that window, and the
  sender's reconciliation with the venue recovers it (``pipeline.trading.sender.recovery``). A disk
  that takes longer than ``STALL_NS`` to answer an fsync would let the window grow without bound:
  from then until it answers the group commit is ``stalled`` and no new order is sent (the admission
  answers each NEW REJECTED HALTED; ``jstalls`` counts such fsyncs, ``sender_journal_stalled`` logs
  them), so an order is never more than ``STALL_NS`` plus the window ahead of the disk.
- ``before_send``: ``before_send`` fsyncs the intents of a batch of ORDERs once they are all written,
  and waits for it, before any of them is sent (a burst of new orders pays one fsync, not one each);
  ``tick`` still bounds the other records (acks, fills) the same way.

When an fsync fails the journal is in doubt (``Journal.doubt``) until a recovery succeeds: no new
intent is written, so no new order is sent (each NEW is answered REJECTED HALTED by the admission);
cancels still go out. ``tick`` retries the recovery every ``RETRY_NS`` (it writes the tail again and
fsyncs), and every admission tries it too. The intents the failed fsync covered:

- not yet sent (``before_send``; or, ``after_send``, still waiting in the outbox for a token or for a
  request they must not race, never tried): none of them is sent: each one's NEW leaves the outbox,
  ``never_sent`` is journaled (kept in memory while the disk refuses it) and it is answered REJECTED
  (HALTED), counted in ``journal_errors`` and logged (``sender_journal_failed``);
- already sent (``after_send``): they are at the venue or on their way; the sender goes on tracking
  them (answers, fills, cancels) and keeps what it learns in memory until the journal recovers. The
  failure is logged with their ids (``sender_journal_failed``, ``sent``) and counted
  (``journal_errors``, ``jdoubt``). Should the sender die before the journal recovers, the restart's
  reconciliation finds them at the venue (adopted from its open orders and fills).
"""

from __future__ import annotations

from typing import Callable

import msgspec

from pipeline.runtime.agent import MARK_INTENT_SYNCED, mark_code
from pipeline.trading.messages import ExecReason, ExecType

RETRY_NS = 100_000_000  # while the journal is in doubt, the recovery is retried this often (and by every NEW)
POLL_NS = 500_000  # while an fsync runs on the journal's thread, its outcome is looked for this often
STALL_NS = 500_000_000  # an fsync running longer than this holds new orders back (``stalled``) until it returns


class PendingIntent(msgspec.Struct, gc=False):
    """An intent written to the journal and not yet fsync'd."""

    order_id: int
    origin: int  # the ORDER's ``OrderOrigin`` (for the latency mark)
    ts_origin_ns: int


class GroupCommit:
    """The journal's fsyncs (see the module docstring).

    Collaborators: ``ledger`` (``OrderLedger``: the journal), ``outbox`` (``Outbox``: ``never_tried``,
    ``drop_new``), ``report`` (``ExecReporter.report``), ``mark`` (``AgentContext.mark``), ``crash``
    (the test-only crash hook: point "sync", after an fsync that made intents durable).
    """

    def __init__(self, ledger, outbox, report: Callable, mark: Callable[[int, int], None], stats: dict, log,
                 crash: Callable[[str], None], *, window_ns: int, max_records: int):
        self.ledger = ledger
        self.outbox = outbox
        self.report = report
        self.mark = mark
        self.stats = stats
        self.log = log
        self.crash = crash
        self.window_ns = window_ns
        self.max_records = max_records
        self.pending: list[PendingIntent] = []  # intents written since the last fsync (the admission appends)
        self.syncing: list[PendingIntent] = []  # the intents the running fsync (``Journal.start_sync``) covers
        self.sync_began_ns = 0  # when the running fsync began
        self.stall_logged = False  # the running fsync's stall is logged
        self.retry_ns = 0  # while in doubt: the next recovery attempt

    def stalled(self, now: int) -> bool:
        """Whether the running fsync has taken longer than ``STALL_NS``: no new order may go out until it
        returns (see the module docstring); logged and counted once per fsync."""
        if not self.ledger.journal.syncing or now - self.sync_began_ns <= STALL_NS:
            return False
        if not self.stall_logged:
            self.stall_logged = True
            self.stats["jstalls"] = self.stats.get("jstalls", 0) + 1
            self.log.error("sender_journal_stalled", ms=(now - self.sync_began_ns) // 1_000_000,
                           unsynced=self.ledger.journal.unsynced)
        return True

    # ------------------------------------------------------------------------------------ when
    def due_ns(self, now: int) -> int | None:
        """When ``tick`` has work: the window's end, ``now`` once ``max_records`` are un-fsync'd, the
        next recovery attempt while in doubt, within ``POLL_NS`` while an fsync runs (to apply its
        outcome); None when every record is durable."""
        journal = self.ledger.journal
        if journal.syncing:
            return now + POLL_NS
        if journal.in_doubt:
            return self.retry_ns
        n = journal.unsynced
        if not n:
            return None
        return now if n >= self.max_records else self.ledger.unsynced_since_ns + self.window_ns

    def tick(self, now: int) -> int:
        """Begin the fsync when due (``due_ns``), without waiting for it (``Journal.start_sync``: on the
        journal's fsync thread), and apply its outcome once known; while the journal is in doubt,
        retry its recovery every ``RETRY_NS`` (waiting for it: rare). Returns 1 when it began, applied
        or retried one, else 0."""
        journal = self.ledger.journal
        began = 0
        if not journal.syncing:
            if self.syncing:  # its outcome was applied by a step that waited for it (a recovery)
                self._settled(self.syncing, journal.doubt if journal.in_doubt else "")
                self.syncing = []
            due = self.due_ns(now)
            if due is None or now < due:
                return 0
            if journal.in_doubt:
                if not self.commit(sent=True):
                    self.retry_ns = now + RETRY_NS
                return 1
            self.syncing, self.pending = self.pending, []
            if journal.start_sync():
                self.sync_began_ns, self.stall_logged = now, False
            began = 1
        outcome = journal.sync_outcome()
        if outcome is None:
            return began
        group, self.syncing = self.syncing, []
        if outcome:
            self.retry_ns = now + RETRY_NS
        self._settled(group, outcome)
        return 1

    def before_send(self) -> None:
        """``before_send`` ordering: fsync the batch's intents before any of them is sent, waiting for
        it; when it fails none of them is sent."""
        if self.pending:
            self.commit(sent=False)

    # ------------------------------------------------------------------------------------ the fsync
    def commit(self, *, sent: bool) -> bool:
        """Fsync every record written so far and wait for it (a running fsync is waited for first; a
        journal in doubt is recovered); True when it succeeded. ``sent``: whether the pending intents'
        requests may already have gone out (see the module docstring for what a failure does with
        them)."""
        journal = self.ledger.journal
        if journal.syncing or self.syncing:
            outcome = journal.sync_outcome(wait=True)
            group, self.syncing = self.syncing, []
            self._settled(group, outcome if outcome is not None else journal.doubt if journal.in_doubt else "")
        group, self.pending = self.pending, []
        was_in_doubt = journal.in_doubt
        try:
            journal.sync()
        except OSError as exc:
            self.stats["jdoubt"] = 1
            if group or not was_in_doubt:  # a retry that fails again is not news
                self._failed(group, f"{type(exc).__name__}: {exc.strerror}", sent)
            return False
        self._durable(group, was_in_doubt)
        return True

    def _settled(self, group: list[PendingIntent], outcome: str) -> None:
        """An fsync that ran without the caller waiting has ended: ``outcome`` "" (durable) or why not."""
        if outcome:
            self.stats["jdoubt"] = 1
            self._failed(group, outcome, True)
        else:
            self._durable(group, False)

    def _durable(self, group: list[PendingIntent], recovered: bool) -> None:
        """Every record up to ``synced_bytes`` is durable: ``group``'s intents marked, counted."""
        journal = self.ledger.journal
        self.stats["jdoubt"] = int(journal.in_doubt)
        self.stats["jsynced"] = journal.synced_bytes
        if recovered:
            self.log.info("sender_journal_recovered", bytes=journal.synced_bytes)
        mark = self.mark
        for intent in group:
            mark(mark_code(MARK_INTENT_SYNCED, intent.origin), intent.ts_origin_ns)
        if group:
            self.crash("sync")

    def _failed(self, group: list[PendingIntent], error: str, sent: bool) -> None:
        """The fsync failed: the group's intents not sent are dropped (never_sent, HALTED); those sent
        are tracked on, their ids logged. Counted in ``journal_errors``: the failed fsync once when
        intents may be out (``sent``), each intent not sent (and its never_sent record while the disk
        refuses it)."""
        if sent:
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
        waiting = self.outbox.never_tried
        unsent = [i for i in group if not sent or waiting(i.order_id)]
        out = [i.order_id for i in group if sent and not waiting(i.order_id)]
        self.log.error("sender_journal_failed", record="fsync", error=error, doubt=self.ledger.journal.doubt,
                       sent=out, not_sent=[i.order_id for i in unsent])
        if unsent:
            self._never_sent(unsent, error)

    def _never_sent(self, group: list[PendingIntent], error: str) -> None:
        """None of ``group`` is sent: each is journaled never_sent and answered HALTED."""
        self.outbox.drop_new({intent.order_id for intent in group})
        ledger = self.ledger
        for intent in group:
            oid = intent.order_id
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
            self.log.error("sender_journal_failed", order_id=oid, error=error)
            ledger.bodies.pop(oid, None)
            ledger.record({"t": "never_sent", "oid": oid})  # kept in memory when the disk refuses it
            self.report(intent.ts_origin_ns, ExecType.REJECTED, ledger.orders[oid], reason=ExecReason.HALTED,
                        leaves=0.0)
