"""Reconciliation: the sender's journal brought in line with the venue, at start and while running.

After a (re)start, before any ORDER is read (``Reconciler.attempt``, retried every
``retry_backoff_ms * 2**n`` up to 1 s while the venue cannot be reached):

1. the venue's account id (account/info) against the journal's: a journal without one records it;
   another one means the venue was reset to a new account: the journal is set aside and a fresh one
   begun (``OrderLedger.set_aside``), so no old order or fill is replayed into the new account, and
   every state report from then on ends with SYNC_DONE reason ACCOUNT_CHANGED;
2. the orders the venue holds that the journal lost (a machine crash's un-fsync'd window) are found
   and adopted (``WindowRecovery.adopt_gen``: the venue's open orders, and the orders behind the fills
   after the journal's last trade id);
3. every non-terminal journaled order is queried (``VenueQueries.query_gen``; an intent the venue
   does not know past the grace becomes ``never_sent``);
4. the fills after the last journaled trade id are fetched and journaled;
5. each instrument's journaled position is compared, in whole lots, with the venue's: a spot
   instrument's balance of its base coin (account/assets), a perpetual's signed position
   (mix all-position; one-way mode), read between two fill polls that agree: a difference is journaled
   (``adjust``: the journal takes the venue's position), counted (``pdiff_<id>``), logged
   (``sender_position_mismatch``) and carried by every state report as POSITION_MISMATCH (the risk
   gateway then reduces until an operator resumes);
6. the state report goes out unsolicited (``report_state``).

A live spot account that holds base coins the pipeline did not buy reads as a difference: trading
then only reduces.

While running, every ``account_check_ms`` (``queue_account_check``; a lane job): the account id again
(another one: the process exits with ``EXIT_ACCOUNT_CHANGED`` and the supervisor's restart
reconciles from scratch), then the positions; a new difference sends an unsolicited state report.

The state report (also the answer to SYNC): one POSITION per configured instrument (size = signed
position, base units; price = average entry), one POSITION_MISMATCH per instrument found apart from
the venue since this process started (size = the venue's position, price = the journal's before),
one OPEN_ORDER per order not yet terminal (working, or sent and not yet answered), then SYNC_DONE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pipeline.runtime.errors import ConfigError
from pipeline.trading.bitget import rest
from pipeline.trading.bitget.orderapi import OrderApi
from pipeline.trading.bitget.protocol import base_coin
from pipeline.trading.bitget.rest import Outcome
from pipeline.trading.messages import ExecReason, ExecType
from pipeline.trading.sender.lane import ACCOUNT
from pipeline.trading.sender.ratelimit import backoff_ns

EXIT_ACCOUNT_CHANGED = 75  # the venue answers for another account while running: restart and reconcile
_NS_PER_MS = 1_000_000


def base_coins(instruments: dict) -> dict[int, str]:
    """Instrument id -> the base coin whose balance is its position.

    Raises:
        ConfigError: a symbol whose base coin cannot be told (positions are reconciled against spot
            balances).
    """
    try:
        return {i: base_coin(inst.symbol) for i, inst in instruments.items()}
    except ValueError as exc:
        raise ConfigError(f"sender: {exc} (positions are reconciled against spot balances)") from None


@dataclass(slots=True, frozen=True)
class PositionMismatch:
    """An instrument's position as the journal had it and as the venue's balance says."""

    journal_qty: float
    venue_qty: float


class Reconciler:
    """Start-up reconciliation, the running account checks and the state report (see the module
    docstring).

    Collaborators: ``ledger`` (``OrderLedger``), ``queries`` (``VenueQueries``), ``recovery``
    (``WindowRecovery``), ``lane`` (``Lane``: ``run_sync`` at start, jobs while running), ``client``
    (``VenueClient``: the last transport failure, for the logs), ``report`` (``ExecReporter.report``).
    """

    def __init__(self, ledger, queries, recovery, lane, client, report: Callable, creds, instruments: dict,
                 coins: dict[int, str], wall_ms: Callable[[], int], clock: Callable[[], int], stats: dict, log, *,
                 retry_backoff_ms: int, account_check_ns: int, now_ns: int):
        self.ledger = ledger
        self.queries = queries
        self.recovery = recovery
        self.lane = lane
        self.client = client
        self.report = report
        self.creds = creds
        self.instruments = instruments
        self.coins = coins
        self.api = OrderApi(creds, instruments)  # each instrument's requests by its product type
        queries.api = self.api
        self.wall_ms = wall_ms
        self.clock = clock
        self.stats = stats
        self.log = log
        self.retry_backoff_ms = retry_backoff_ms
        self.account_check_ns = account_check_ns  # 0: only at start
        self.next_account_check_ns = now_ns + account_check_ns
        self.reconciling = True  # until the start-up reconciliation has completed
        self.due_ns = now_ns  # its next attempt
        self.attempts = 0  # failed attempts since the last success
        self.t0_ns = now_ns  # when the first attempt began
        self.mismatches: dict[int, PositionMismatch] = {}  # instrument -> found apart since this start
        self.account_changed = False

    # ------------------------------------------------------------------------------------ at start
    def attempt(self, now: int) -> bool:
        """One reconciliation attempt, waiting for each answer; True when it completed (the state
        report is out), else the next attempt is due after the back-off."""
        if self.attempts == 0:
            self.t0_ns = now
        ts = now
        run_sync = self.lane.run_sync
        ok = run_sync(self._account_gen())
        if ok:
            ok = run_sync(self.recovery.adopt_gen())
        for o in self.ledger.open_orders() if ok else ():
            if o.terminal:
                continue
            res = run_sync(self.queries.query_gen(o, ts))
            if not (res.ok or o.terminal):
                ok = False  # unreachable, or 43001 inside the grace: try again later
                if res.outcome is Outcome.REJECTED and res.code not in (rest.CODE_NO_ORDER,):
                    self.log.error("sender_reconcile_refused", order_id=o.oid, code=res.code, msg=res.msg)
        if ok:
            ok = run_sync(self.queries.poll_fills_gen())
        if ok:
            ok = run_sync(self._positions_gen())
        if not ok:
            if self.attempts == 0:
                self.log.warning("sender_reconcile_waiting", open_orders=len(self.ledger.open),
                                 http_errors=self.stats["http_err"], last_http_error=self.client.last_http_error)
            self.attempts += 1
            self.due_ns = self.clock() + backoff_ns(self.retry_backoff_ms, self.attempts)
            return False
        self.reconciling = False
        self.attempts = 0
        self.stats["rec_ms"] = (self.clock() - self.t0_ns) // _NS_PER_MS
        self.stats["rec_n"] += 1
        self.report_state(self.clock())
        ledger = self.ledger
        self.log.info("sender_reconciled", orders=len(ledger.orders), last_trade_id=ledger.last_trade_id,
                      positions={str(i): ledger.state.position(i).qty for i in self.instruments},
                      ms=self.stats["rec_ms"])
        return True

    def _account_gen(self):
        """Which venue account answers: a journal without one records it; one that names another
        account is set aside and a fresh journal begins. A request generator; returns True when done."""
        uid = yield from self._account_id_gen()
        if uid is None:
            return False
        known = self.ledger.state.account
        if known and known != uid:
            try:
                self._begin_new_account(known, uid)
            except OSError as exc:
                self.log.error("sender_journal_failed", record="account", error=f"{exc.strerror}")
                return False
        if not self.ledger.state.account:
            self.ledger.record({"t": "account", "id": uid})
        return True

    def _account_id_gen(self):
        """account/info's account id; None when the venue refused (logged), could not be reached, or
        answered without one (counted in ``malformed``, logged). A request generator."""
        res = yield rest.build_account_info(self.creds, self.wall_ms())
        if not res.ok:
            if res.outcome is Outcome.REJECTED:
                self.log.error("sender_reconcile_refused", request="account/info", code=res.code, msg=res.msg)
            return None
        try:
            return rest.parse_account_id(res.data)
        except ValueError as exc:
            self.stats["malformed"] += 1
            self.log.error("sender_bad_answer", request="account/info", error=str(exc))
            return None

    def _begin_new_account(self, old: str, new: str) -> None:
        """The venue answers for account ``new``, the journal is about ``old``: the journal is set
        aside (``<journal>.<old>.<ms>``) and a fresh one opened; every state report from now on ends
        with SYNC_DONE reason ACCOUNT_CHANGED.

        Raises:
            OSError: the rename or the new journal failed."""
        aside = self.ledger.set_aside(old, self.wall_ms())
        self.queries.owed.clear()
        self.account_changed = True
        self.stats["acct_changed"] = self.stats.get("acct_changed", 0) + 1
        self.log.error("sender_venue_account_changed", old=old, new=new, journal_aside=str(aside))

    def _positions_gen(self):
        """Each instrument's journaled position against the venue's balance of its base coin (whole
        lots), the balances read between two fill polls that agree (up to three tries), so that a fill
        arriving meanwhile is not a difference. A request generator; returns True when done."""
        ledger = self.ledger
        for _ in range(3):
            before = ledger.last_trade_id
            answers = []
            for product, req in self.api.position_requests(self.wall_ms()):
                res = yield req
                if not res.ok:
                    return False
                answers.append((product, res.data))
            try:
                venue_pos = self.api.positions(answers)
            except ValueError as exc:
                self.stats["malformed"] += 1
                self.log.error("sender_bad_answer", request="positions", error=str(exc))
                return False
            if not (yield from self.queries.poll_fills_gen()):
                return False
            if ledger.last_trade_id == before:
                break
        else:
            return False  # fills keep coming: try again later
        for iid, inst in sorted(self.instruments.items()):
            venue = venue_pos.get(iid, 0.0)
            ours = ledger.state.position(iid).qty
            lots = round((venue - ours) / inst.lot_size)
            if lots:
                ledger.record({"t": "adjust", "iid": iid, "qty": venue, "was": ours})
                self.mismatches[iid] = PositionMismatch(ours, venue)
                self.stats[f"pdiff_{iid}"] = lots
                self.log.error("sender_position_mismatch", instrument_id=iid, symbol=inst.symbol, journal=ours,
                               venue=venue, diff_lots=lots)
        return True

    # ------------------------------------------------------------------------------------ while running
    def queue_account_check(self, now: int) -> None:
        """The running account check is due (``next_account_check_ns``, with ``account_check_ns`` set):
        queue it when none is queued or running and account/info has a token (``Lane.ready_at``; else
        it is due when it has); the next is due ``account_check_ms`` from ``now``."""
        self.next_account_check_ns = now + self.account_check_ns
        if not self.lane.has(ACCOUNT):
            ready = self.lane.ready_at((rest.ACCOUNT_INFO_PATH,), now)
            if ready > now:
                self.next_account_check_ns = ready
                return
            self.lane.queue(self._account_check_gen(), ACCOUNT)

    def _account_check_gen(self):
        """Lane job: the venue's account id, then the positions against the balances; a difference it
        finds sends an unsolicited state report. An answer that fails leaves it to the next round.

        Raises:
            SystemExit: ``EXIT_ACCOUNT_CHANGED``, the venue answers for another account (past the
                lane's error handler: the supervisor restarts the sender, which reconciles)."""
        uid = yield from self._account_id_gen()
        if uid is None:
            return
        if uid != self.ledger.state.account:
            self.log.error("sender_venue_account_changed", old=self.ledger.state.account, new=uid, live=True)
            raise SystemExit(EXIT_ACCOUNT_CHANGED)
        known = dict(self.mismatches)
        if (yield from self._positions_gen()) and self.mismatches != known:
            self.report_state(self.clock())

    # ------------------------------------------------------------------------------------ the report
    def report_state(self, ts: int) -> None:
        """The state report with origin time ``ts`` (see the module docstring)."""
        report, ledger = self.report, self.ledger
        for iid in sorted(self.instruments):
            pos = ledger.state.position(iid)
            report(ts, ExecType.POSITION, None, iid=iid, price=pos.avg_px, size=pos.qty, leaves=0.0)
        for iid, m in sorted(self.mismatches.items()):
            report(ts, ExecType.POSITION_MISMATCH, None, iid=iid, price=m.journal_qty, size=m.venue_qty, leaves=0.0)
        for o in map(ledger.orders.get, sorted(ledger.open)):  # working, and sent or sending but not yet
            if not o.terminal:                                   # answered: the gateway must count them all
                report(ts, ExecType.OPEN_ORDER, o)
        report(ts, ExecType.SYNC_DONE, None,
               reason=ExecReason.ACCOUNT_CHANGED if self.account_changed else ExecReason.NONE)
