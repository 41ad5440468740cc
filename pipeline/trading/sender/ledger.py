"""The sender's orders as its journal knows them, and the records that change them.

``OrderLedger`` owns the ``Journal`` (``pipeline.trading.journal``) and what the sender derives from it:
``orders`` (the replayed ``OrderEntry`` per order id), ``open`` (the ids not terminal),
``origin_ts`` (the NEW's ``ts_origin_ns`` of this process's orders, for the reports about them),
``bodies`` (an admitted order's place-order body, until answered) and ``last_trade_id`` (the last
venue trade id seen). ``record`` is the only way a record reaches the journal while running.

Durability (``record``): a record is written, not fsync'd: it survives this process dying (it is in
the page cache). ``GroupCommit`` makes records durable together, by one fsync, within a bounded
window of the oldest un-fsync'd one (``unsynced_since_ns``: when the journal's tail began). A machine
crash can lose only that un-fsync'd tail; what it held (intents of orders already sent, acks, fills,
cancels) is recovered from the venue on restart (``pipeline.trading.sender.recovery``, then the
reconciliation's queries).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from pipeline.trading.journal import WORKING, Journal, JournalState, OrderEntry


class OrderLedger:
    """The journal and the order state replayed from it (see the module docstring).

    Raises:
        OSError: ``journal`` cannot be replayed (``Journal.open``).
    """

    def __init__(self, journal: Journal, stats: dict, log, clock: Callable[[], int]):
        self.journal = journal
        self.stats = stats
        self.log = log
        self.clock = clock
        self.state: JournalState = journal.open()
        self.orders: dict[int, OrderEntry] = self.state.orders  # replaced with the journal (set_aside)
        # the containers below are cleared, never replaced: the hot path keeps references to them
        self.open: set[int] = {oid for oid, o in self.orders.items() if not o.terminal}  # non-terminal ids
        self.origin_ts: dict[int, int] = {}  # order id -> the NEW's ts_origin_ns (this process's orders)
        self.bodies: dict[int, str] = {}  # order id -> its place-order body, from admission until answered
        self.last_trade_id = self.state.last_trade_id
        self.unsynced_since_ns = 0  # when the oldest record not yet fsync'd was written (the journal has a tail)

    def record(self, rec: dict) -> None:
        """Journal one record, written, not fsync'd (see the module docstring), and bring ``open`` and
        ``origin_ts`` up to date with the order's state.

        A record other than an intent describes what already happened at the venue: when its write
        fails (a full disk) it is kept (``Journal.keep``: applied now, written first once the journal
        recovers), counted in ``journal_errors`` and logged (``sender_journal_failed``); the journal is
        then in doubt and no intent is written, so no new order is sent, until it recovers.

        Raises:
            OSError: an intent's write failed (nothing applied; it must not be sent)."""
        journal = self.journal
        try:
            self.stats["jbytes"] += journal.append(rec, sync=False)
            if journal.unsynced == 1:  # the first record of a new tail: the group commit's window starts
                self.unsynced_since_ns = self.clock()
        except OSError as exc:
            if rec["t"] == "intent":
                raise
            self.journal.keep(rec)
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
            self.log.error("sender_journal_failed", record=rec["t"], order_id=rec.get("oid", 0),
                           error=f"{type(exc).__name__}: {exc.strerror}", kept=len(self.journal.backlog))
        self.stats["jdoubt"] = int(self.journal.in_doubt)
        oid = rec.get("oid")
        if oid is None:  # account, adjust: about no order
            return
        o = self.orders.get(oid)
        if o is not None and not o.terminal:
            self.open.add(o.oid)
        else:
            self.open.discard(oid)
            self.origin_ts.pop(oid, None)

    def ts_of(self, oid: int) -> int:
        """The origin time for a report about ``oid``: its NEW's, else now."""
        return self.origin_ts.get(oid) or self.clock()

    def open_orders(self) -> list[OrderEntry]:
        """The orders not terminal when called, by id (a snapshot: records may end them meanwhile)."""
        return [self.orders[i] for i in sorted(self.open)]

    def working(self) -> list[OrderEntry]:
        """The working orders (acked, not terminal), by id."""
        return [o for o in map(self.orders.get, sorted(self.open)) if o.status in WORKING]

    def set_aside(self, old_account: str, wall_ms: int) -> Path:
        """Make the journal durable, rename it aside (``<journal>.<old_account>.<wall_ms>``) and begin a
        fresh one: no order, no position, no trade id; returns the path set aside.

        Raises:
            OSError: the fsync, the rename or the new journal failed."""
        path = self.journal.path
        aside = path.with_name(f"{path.name}.{old_account}.{wall_ms}")
        self.journal.sync()
        self.journal.close()
        os.replace(path, aside)
        self.journal = Journal(path, fsync_thread=self.journal.fsync_thread)
        self.state = self.journal.open()
        self.orders = self.state.orders
        self.open.clear()
        self.origin_ts.clear()
        self.bodies.clear()
        self.last_trade_id = 0
        return aside
