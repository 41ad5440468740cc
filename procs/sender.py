"""The order sender: ORDERs from the risk gateway in, signed Bitget v2 REST requests out, EXEC_REPORTs back.

``SenderAgent`` (``module = "procs.sender:SenderAgent"``) is the only process that holds the API key.
It is the shell: it moves bytes (the rings, the venue's sockets) and time (the clock, the waits) and
wires the cores of ``pipeline.trading.sender``, which hold the logic:

- ``admission``: a NEW's duplicate check, validation and journaled intent (a repeated ``order_id`` is
  answered DUPLICATE, never sent again, never with a fill);
- ``groupcommit``: the journal's records made durable by one fsync, after the requests have gone out,
  within a bounded window (or, ``journal_sync = "before_send"``, a batch's intents before it is sent);
- ``outbox``: the FIFO of commands waiting to start (rate limit, retries' back-off, the ordering rules);
- ``inflight``: place and cancel requests in flight, one per order connection, answers read as they come;
- ``answers``: those answers classified, retried, journaled and reported;
- ``lane``: fill polls, the periodic poll and order queries, one request at a time on their own connection;
- ``queries``: what those requests learn (unknown outcomes resolved, fills journaled and reported);
- ``reconcile``: start-up and periodic checks of the account and the positions, the state report;
- ``recovery``: at start, the orders the venue holds that the journal lost (a machine crash's window);
- ``ledger``: the journal (``pipeline.trading.journal``) and the order state replayed from it;
- ``reports``: EXEC_REPORTs written without ever waiting for room;
- ``client``, ``connection``, ``ratelimit``: the requests' exchange, the sockets, the token bucket.

Input ring ``orders`` (ORDER, ``pipeline.trading.messages.ORDER_DTYPE``); output ring ``exec`` (EXEC_REPORT,
``EXEC_DTYPE``). The ``ts_origin_ns`` of a report is the ORDER's for a direct answer, the clock's for
what the sender learns by itself (polled fills, reconciliation).

Per order (``clientOid = client_oid(order_id)``): NEW -> intent journaled (written, not yet fsync'd),
place-order sent (its instrument's product's: spot, or a perpetual's mix place-order, ``reduceOnly``
"YES" when the ORDER carries ``ORDER_FLAG_REDUCE_ONLY``; a flagged spot order is answered REJECTED
MALFORMED, never sent), the intent fsync'd with the records around it by the group commit (begun at
most ``sync_window_us`` after the oldest un-fsync'd record, or once ``sync_max_records`` wait, on the
journal's own thread); the answer journaled and reported (ACKED, REJECTED with its reason, UNKNOWN then
queried every ``poll_interval_ms`` until the venue knows it: never resent under a new id). CANCEL by
clientOid -> the fills before it reported first, then CANCELLED; CANCEL_ALL (instrument 0: every
configured instrument) -> each of ours it names CANCELLED. While orders work, every
``poll_interval_ms``: unfilled-orders, then the new fills (FILLED, ``fill_id`` = trade id). SYNC -> the
state report (POSITIONs, POSITION_MISMATCHes, OPEN_ORDERs, SYNC_DONE). After a (re)start, before any
ORDER is read: reconciliation (``pipeline.trading.sender.reconcile``), then the state report.

Concurrency: place and cancel requests go out without waiting for answers, one in flight per order
connection (``connections`` keep-alive connections); the sender goes on reading its ring and starting
requests, and reads each answer as it arrives (a zero-timeout select, then non-blocking reads: an
answer partway in is kept for the next cycle, so a peer that trickles stalls no other; unanswered past
``timeout_ms``, or not whole 0.5 s after its first bytes: an unknown outcome). The lane runs the rest on its own connection, also without
waiting; only reconciliation waits for its answers. While requests are in flight the idle wait on the
ring is at most ``INFLIGHT_NAP_NS``. An ORDER's batch is committed on the ring once its requests have
started: a crash after that finds the order through its journaled intent (reconciliation), not
through the ring, or, when a machine crash took the intent, through the venue (``recovery``). NEW
orders of one batch go first: a cancel's round trip must not delay an order decided on the same tick.
The ring is read only while the outbox is shorter than ``ctx.batch``.

Params: ``input`` ("orders"), ``output`` ("exec"), ``journal_path`` ("<run_dir>/<name>.journal"),
``venue_port_file`` ("<run_dir>/venue.rest.port") or ``base_url`` ("https://api.bitget.com" for the live
exchange: TLS, the system's trust store, or ``ca_file`` as the only trusted CA; plain
"http://127.0.0.1:PORT" for a paper venue only),
``key_file`` ("secrets/paper.json"; "" = environment), ``timeout_ms`` (2000), ``poll_interval_ms``
(50; the polls go no faster than their endpoints' budget allows), ``rate_limit_per_s`` (10, place and
cancel requests; burst of the same size), ``endpoint_rate_scale`` (1.0, > 0: the lane's requests, polls,
queries, account checks and reconciliation, each take a token of their endpoint's budget,
``ratelimit.EndpointBudget``: the exchange's documented per-endpoint rate, ``pipeline.venue.limits``,
times this scale, with headroom; a paper venue whose ``rate_limit_per_s`` raises its limits by a factor
takes the same factor), ``max_retries`` (3), ``retry_backoff_ms`` (20),
``reconcile_grace_ms`` (0 = 2 * timeout_ms), ``connections`` (order connections: 4; 1..16),
``account_check_ms`` (1000; 0 = only at start: how often the running sender checks the venue's
account id and compares positions with balances), ``journal_sync`` ("after_send": intents fsync'd by
the group commit after their requests; "before_send": a batch's intents fsync'd before any of it is
sent), ``sync_window_us`` (2000; 0..100000: the group commit's window), ``sync_max_records`` (64;
1..4096: so many un-fsync'd records close the window early), ``crash_after`` ("" | "journal" | "send"
| "ack" | "sync"; tests only, effective only when the environment has ``SHMPIPE_TEST_CRASH=1``:
SIGKILL itself once at that point of a place (the intent written; the request sent; its answer read;
the fsync that made it durable); the marker file "<journal>.crashed" makes it once) and
``crash_mode`` ("process", or "machine": first cut the journal back to its last fsync'd length, as a
machine crash would leave it).

Counters (``ctx.stats``): sent, acked, rejected, fills, cancels, unknown, retries, dups, rl (rate
limited after retries), rl_wait (waits for a token), rl_venue (answers 429 from the venue, any request),
pace_wait (lane requests held for their endpoint's token), jbytes, jsynced (the journal's bytes made durable),
rec_ms, rec_n, torn, polls, http_err, malformed, never_sent, out_drops, journal_errors, jdoubt (1 while
the journal is in doubt: no new order is sent), open (orders not terminal); when they happen: errors,
held_max, acct_changed, pdiff_<id>, adopted, adopt_skipped, jstalls (fsyncs that ran past the stall
limit), jstalled (NEWs answered HALTED meanwhile).
"""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from pipeline.runtime import http1
from pipeline.runtime.agent import Agent
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.portfile import read_port_file
from pipeline.trading.bitget.signing import load_credentials
from pipeline.trading.journal import Journal
from pipeline.trading.messages import (ORDER_DTYPE, ORDER_STRUCT, ExecReason, ExecType, Kind, OrderCmd, OrderOrigin,
                                       Side, TimeInForce, decode_order)
from pipeline.trading.sender.admission import NewOrderAdmission
from pipeline.trading.sender.answers import OrderAnswers
from pipeline.trading.sender.client import VenueClient
from pipeline.trading.sender.connection import HttpTransport, loopback_pair, parse_base_url, readable
from pipeline.trading.sender.groupcommit import GroupCommit
from pipeline.trading.sender.inflight import InFlightRequests
from pipeline.trading.sender.lane import Lane
from pipeline.trading.sender.ledger import OrderLedger
from pipeline.trading.sender.outbox import Outbox, OutboxItem
from pipeline.trading.sender.queries import VenueQueries
from pipeline.trading.sender.ratelimit import EndpointBudget, TokenBucket
from pipeline.trading.sender.reconcile import Reconciler, base_coins
from pipeline.trading.sender.recovery import WindowRecovery
from pipeline.trading.sender.reports import ExecReporter

CRASH_ENV = "SHMPIPE_TEST_CRASH"
_ORDER_BYTES = ORDER_DTYPE.itemsize
_NS_PER_MS = 1_000_000
MAX_CONNECTIONS = 16
INFLIGHT_NAP_NS = 50_000  # while requests are in flight the idle wait is at most this: answers wait <= 50 µs


class SenderParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The stage's params (see the module docstring)."""

    input: str = "orders"
    output: str = "exec"
    journal_path: str = ""
    venue_port_file: str = ""
    base_url: str = ""
    ca_file: str = ""
    key_file: str = "secrets/paper.json"
    timeout_ms: int = msgspec.field(default=2000)
    poll_interval_ms: int = 50
    rate_limit_per_s: float = 10.0
    endpoint_rate_scale: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    max_retries: int = 3
    retry_backoff_ms: int = 20
    reconcile_grace_ms: int = 0
    crash_after: Literal["", "journal", "send", "ack", "sync"] = ""
    crash_mode: Literal["process", "machine"] = "process"
    connections: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONNECTIONS)] = 4
    account_check_ms: Annotated[int, msgspec.Meta(ge=0)] = 1000
    journal_sync: Literal["after_send", "before_send"] = "after_send"
    sync_window_us: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 2000
    sync_max_records: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 64


def _wall_ms() -> int:
    """The wall clock in ms: what signs a request and dates an intent."""
    return time.time_ns() // _NS_PER_MS


def _venue_address(p: SenderParams, run_dir: Path):
    """(address(), TLS context or None): ``base_url``'s, else the paper venue's on 127.0.0.1, its port
    read from the port file at every (re)connection (it may appear late).

    Raises:
        ConfigError: a bad ``base_url`` or ``ca_file`` (``parse_base_url``)."""
    if p.base_url:
        (host, port), tls = parse_base_url(p.base_url, p.ca_file)
        return (lambda: (host, port)), tls
    port_file = p.venue_port_file or str(run_dir / "venue.rest.port")
    return (lambda: ("127.0.0.1", read_port_file(port_file))), None


class SenderAgent(Agent):
    """ORDER in, REST out, EXEC_REPORT back (see the module docstring)."""

    params_type = SenderParams

    # ------------------------------------------------------------------------------------ start / stop
    def on_start(self, ctx) -> None:
        """Resolve the rings, open the journal, load the key and wire the cores; reconciliation starts
        with the first ``do_work``.

        Raises:
            ConfigError: bad params, a missing ring, no instruments, a symbol without a base coin, a
                bad ``base_url`` / ``ca_file`` / key file, or ``rate_limit_per_s`` not > 0.
            OSError: the journal cannot be opened.
        """
        self.ctx = ctx
        p = self.p = parse_stage_params(ctx.name, ctx.params, SenderParams)
        self.inp, self.out = ctx.input(p.input), ctx.output(p.output)
        ring_cfg = next((r for r in ctx.config.rings if r.name == p.output), None)
        self.instruments = {i.id: i for i in ctx.config.instruments}
        if not self.instruments:
            raise ConfigError("sender: no instruments configured")
        coins = base_coins(self.instruments)
        run_dir = Path(ctx.config.supervisor.run_dir)
        self.creds = load_credentials(p.key_file or None)  # ConfigError names the file, never a value
        address, tls = _venue_address(p, run_dir)
        self.stats = stats = ctx.stats
        self.timeout_ns = p.timeout_ms * _NS_PER_MS
        self.reporter = ExecReporter(ctx.emit_nowait, self.out, ring_cfg is not None and ring_cfg.full_policy == "drop",
                                     stats)
        self.client = VenueClient(stats, ctx.mark, self._crash)
        # place / cancel requests: one in flight per order connection; the lane: everything else
        pool = [HttpTransport(address, p.timeout_ms / 1000.0, tls) for _ in range(p.connections)]
        self.lane = Lane(HttpTransport(address, p.timeout_ms / 1000.0, tls), self.client, self.timeout_ns, stats,
                         ctx.log, budget=EndpointBudget(p.endpoint_rate_scale, ctx.clock()), clock=ctx.clock)
        self.ledger = OrderLedger(Journal(p.journal_path or run_dir / f"{ctx.name}.journal", fsync_thread=True),
                                  stats, ctx.log, ctx.clock)
        now = ctx.clock()
        bucket = TokenBucket(p.rate_limit_per_s, max(1.0, p.rate_limit_per_s), now)
        self._wire(p, pool, bucket, coins, now)
        self._batch: list = []  # (seq, ts, kind, payload) of the ORDER messages of one poll, NEW first
        self._warm_pair = None  # keep_warm's loopback TCP pair
        self._warm_order = ORDER_STRUCT.pack(min(self.instruments), OrderCmd.CANCEL_ALL, 0, 0, OrderOrigin.FAST, 0, 0,
                                             0.0, 0.0, 0, 0)
        journal, state = self.ledger.journal, self.ledger.state
        self.crash_marker = Path(str(journal.path) + ".crashed")
        self.crash_armed = bool(p.crash_after) and os.environ.get(CRASH_ENV) == "1"
        stats.update(sent=0, acked=0, rejected=0, fills=0, cancels=0, unknown=0, retries=0, dups=0, rl=0,
                     rl_wait=0, rl_venue=0, pace_wait=0, jbytes=journal.bytes, rec_ms=0, rec_n=0, torn=state.torn,
                     polls=0,
                     http_err=0, malformed=0, never_sent=0, out_drops=0, open=len(self.ledger.open), journal_errors=0,
                     jdoubt=0, jsynced=journal.synced_bytes)
        if p.crash_after and not self.crash_armed:
            ctx.log.warning("sender_crash_param_ignored", crash_after=p.crash_after, env=CRASH_ENV)
        ctx.log.info("sender_ready", journal=str(journal.path), records=state.records,
                     torn=state.torn, orders=len(state.orders), key_fp=self.creds.fingerprint,
                     last_trade_id=self.ledger.last_trade_id)

    def _wire(self, p: SenderParams, pool: list, bucket: TokenBucket, coins: dict, now: int) -> None:
        """Make the cores and join them; bind the per-message calls (bound methods, for the hot path)."""
        ctx, stats, log, clock = self.ctx, self.stats, self.ctx.log, self.ctx.clock
        ledger, lane, client, report = self.ledger, self.lane, self.client, self.reporter.report
        poll_ns = max(1, p.poll_interval_ms) * _NS_PER_MS
        self.queries = VenueQueries(ledger, lane, report, self.creds, _wall_ms, clock, stats, log, poll_ns=poll_ns,
                                    grace_ms=p.reconcile_grace_ms or 2 * p.timeout_ms, batch=ctx.batch, now_ns=now)
        recovery = WindowRecovery(ledger, self.creds, self.instruments, _wall_ms, stats, log)
        self.reconciler = Reconciler(ledger, self.queries, recovery, lane, client, report, self.creds,
                                     self.instruments, coins, _wall_ms, clock, stats, log,
                                     retry_backoff_ms=p.retry_backoff_ms,
                                     account_check_ns=p.account_check_ms * _NS_PER_MS, now_ns=now)
        self.requests = InFlightRequests(pool, client, ledger, self.creds, self.instruments, _wall_ms, self.timeout_ns,
                                         stats, self._crash)
        self.outbox = Outbox(ledger, self.requests, lane, bucket, report, self.reconciler.report_state, stats,
                             ctx.batch)
        self.requests.on_answer = OrderAnswers(ledger, self.queries, lane, report, self.outbox.requeue, clock, stats,
                                               log, self._crash, max_retries=p.max_retries,
                                               retry_backoff_ms=p.retry_backoff_ms, poll_ns=poll_ns).on_answer
        self.group = group = GroupCommit(ledger, self.outbox, report, ctx.mark, stats, log, self._crash,
                                         window_ns=p.sync_window_us * 1000, max_records=p.sync_max_records)
        admission = NewOrderAdmission(ledger, group, self.outbox, self.requests, self.queries.owed, report,
                                      self.instruments, _wall_ms, clock, ctx.mark, stats, log)
        # the per-message path: ORDER read -> admitted -> queued -> request started; the intents'
        # fsync after it (the group commit's tick), or before it with journal_sync = "before_send"
        self._admit_new = admission.admit
        self._queue = self.outbox.items.append
        self._sync_before_send = group.before_send if p.journal_sync == "before_send" else None
        self._sync_tick = group.tick
        self._run_outbox = self.outbox.run
        self._read_answers = self.requests.read_answers
        self._run_lane = lane.run
        self._query_owed = self.queries.query_owed
        self._report = report

    def on_close(self) -> None:
        """Read the answers still in flight (at most ``timeout_ms``), so that their outcomes are
        journaled and reported rather than left to the next start's reconciliation; then close."""
        requests, lane, reporter = self.requests, self.lane, self.reporter
        deadline = time.monotonic() + self.timeout_ns / 1e9
        while (requests.inflight or lane.busy) and time.monotonic() < deadline:
            socks = requests.socks()
            if lane.job is not None and lane.conn.sock is not None:
                socks.append(lane.conn.sock)
            try:
                select.select(socks, [], [], 0.01)
            except (OSError, ValueError):
                pass
            now = self.ctx.clock()
            requests.read_answers(now)
            lane.run(now)
        while reporter.held and time.monotonic() < deadline:  # reports held back by a full exec ring
            if not reporter.flush_held():
                time.sleep(0.001)
        if reporter.held:
            self.ctx.log.warning("sender_reports_unsent", count=len(reporter.held))  # the next start's report has them
        for conn in (*requests.pool, lane.conn):
            conn.close()
        for sock in self._warm_pair or ():
            sock.close()
        if not self.group.commit(sent=True):  # logged; the next start's open() fsyncs what is in the file
            self.ctx.log.warning("sender_journal_not_synced_at_close", doubt=self.ledger.journal.doubt)
        self.ledger.journal.close()

    # ------------------------------------------------------------------------------------ duty cycle
    def do_work(self) -> int:
        now = self.ctx.clock()
        reporter = self.reporter
        flushed = reporter.flush_held() if reporter.held else 0
        reconciler = self.reconciler
        if reconciler.reconciling:
            if now < reconciler.due_ns:
                return self._sync_tick(now)
            return 1 if reconciler.attempt(now) else flushed
        work = flushed + self._read_answers(now)
        work += self._run_lane(now)
        work += self._run_outbox(now)
        room = self.ctx.batch - len(self.outbox.items)
        if room > 0:
            batch = self._batch
            read_batch = getattr(self.inp, "try_read_batch", None)
            if read_batch is not None:  # a ring: views, committed only once all are handled
                batch.extend((m.seq, m.ts_origin_ns, m.kind, m.payload) for m in read_batch(room))
                n = len(batch)
            else:  # other transports hand messages over once; copies
                n = self.inp.poll(self._collect, room)
            if n:
                self.ctx.received(n)
                work += n
                # NEW orders first: a cancel's round trip must not delay an order decided on the same
                # tick. Safe: the gateway counts an order being cancelled as still working, so a new
                # order never crosses it (self-trade) nor breaks a limit because it went first.
                if n > 1:
                    batch.sort(key=self._new_first)
                for seq, ts, kind, payload in batch:
                    try:
                        self._on_order(seq, ts, kind, payload)
                    except Exception as exc:  # a bug on one order must not lose the others: counted, logged
                        self.stats["errors"] = self.stats.get("errors", 0) + 1
                        self.ctx.log.error("sender_order_failed", error=f"{type(exc).__name__}: {exc}"[:300])
                batch.clear()
                if self._sync_before_send is not None:
                    self._sync_before_send()  # one fsync for the batch's new orders, before any of them is sent
                work += self._run_outbox(self.ctx.clock())
                if read_batch is not None:
                    self.inp.commit()  # a crash before this line sees the whole batch again
        work += self._query_owed(now)
        self.stats["open"] = len(self.ledger.open)
        queries = self.queries
        if now >= queries.next_poll_ns:
            queries.queue_poll(now)
        if reconciler.account_check_ns and now >= reconciler.next_account_check_ns:
            reconciler.queue_account_check(now)
        work += self._run_lane(now)
        return work + self._sync_tick(now)  # the group commit, after this cycle's requests have gone out

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): the cancel-all and place paths up to the bytes
        that would be written (ORDER decode, body, signature, HTTP encoding) for the first instrument,
        through the builders of its own product (``OrderApi``: spot, or a perpetual's mix requests),
        written nowhere; then the kernel's send path, which a request after milliseconds of idling
        finds cold: a zero-timeout select on the idle order
        connections and one byte through a private loopback TCP pair (as a NIC stack's warm send).
        Nothing journaled, counted or reported, and nothing reaches the venue."""
        o = decode_order(self._warm_order)
        inst = self.instruments[o.instrument_id]
        api = self.requests.api
        for req in (api.cancel_all(inst, _wall_ms()),
                    api.place(inst, _wall_ms(), Side.BUY, TimeInForce.IOC, inst.tick_size * 1000, inst.lot_size * 10,
                              "warm")):
            http1.encode_request(req.method, req.target, "127.0.0.1:0", req.headers, req.body.encode())
        # the kernel's side of a send: the reuse check's zero-timeout select (on the idle order
        # connections, result unused), and one byte through a private loopback TCP connection
        pool = self.requests.pool
        readable(pool[k].sock for k in self.requests.free)
        if self._warm_pair is None:
            self._warm_pair = loopback_pair()
        a, b = self._warm_pair
        try:
            a.send(b"w")
            b.recv(64)
        except BlockingIOError:  # not arrived yet: read with the next one
            pass

    def wait_for_work(self, timeout_ns: int) -> bool:
        """The runner's park when idle: on the ``orders`` ring (its blocking wait, where the transport
        has one), but never past the sender's own next timed work: a retry or rate-limit token due, a
        reconciliation attempt, the next fill poll while orders work, an unknown outcome to query, the
        group commit's next step, the token a lane request is held for; and for at most
        ``INFLIGHT_NAP_NS`` while an answer (a query's included) is awaited or a lane job is queued (the
        ring's wait cannot also watch the sockets)."""
        now = self.ctx.clock()
        due = now + timeout_ns
        lane_held = self.lane.held_until()
        if self.requests.inflight or (self.lane.busy and lane_held is None) or self.reporter.held:
            # answers come on sockets (room for held reports in the exec ring), orders on the ring:
            # nap on the ring, briefly
            due = min(due, now + INFLIGHT_NAP_NS)
        if lane_held is not None:
            due = min(due, lane_held)
        if self.reconciler.reconciling:
            due = min(due, self.reconciler.due_ns)
        outbox_due = self.outbox.next_due_ns()
        if outbox_due is not None:
            due = min(due, max(outbox_due, now + 200_000))
        owed_due = self.queries.next_due_ns()
        if owed_due is not None:
            due = min(due, owed_due)
        if self.ledger.open:
            due = min(due, self.queries.next_poll_ns)
        sync_due = self.group.due_ns(now)
        if sync_due is not None:
            due = min(due, sync_due)
        left = due - now
        if left <= 0:
            return True
        wait = getattr(self.inp, "wait", None)
        if wait is not None:
            return wait(left)
        time.sleep(min(left, 1_000_000) / 1e9)  # a transport without a blocking wait: short naps
        return False

    # ------------------------------------------------------------------------------------ input
    def _collect(self, seq, ts, kind, payload) -> None:
        self._batch.append((seq, ts, kind, bytes(payload)))

    @staticmethod
    def _new_first(item) -> int:
        payload = item[3]
        return 0 if item[2] == Kind.ORDER and len(payload) == ORDER_DTYPE.itemsize and payload[2] == OrderCmd.NEW else 1

    def _on_order(self, seq, ts, kind, payload) -> None:
        """One ORDER message: decoded and checked (a malformed one is counted and answered REJECTED
        MALFORMED), a NEW admitted (``NewOrderAdmission``), then queued in the outbox."""
        if kind != Kind.ORDER or len(payload) != _ORDER_BYTES:
            self.stats["malformed"] += 1
            self.ctx.log.warning("sender_bad_message", kind=int(kind), size=len(payload))
            return
        o = decode_order(payload)
        try:
            cmd = OrderCmd(o.cmd)
        except ValueError:
            cmd = None
        iid, oid = o.instrument_id, o.order_id
        if cmd is None or (cmd in (OrderCmd.NEW, OrderCmd.CANCEL) and oid == 0) or (
                cmd is not OrderCmd.SYNC and iid not in self.instruments and not (cmd is OrderCmd.CANCEL_ALL
                                                                                  and iid == 0)):
            self.stats["malformed"] += 1
            self._report(ts, ExecType.REJECTED, None, reason=ExecReason.MALFORMED, iid=iid, order_id=oid,
                         side=o.side)
            return
        if cmd is OrderCmd.NEW and not self._admit_new(o, ts):
            return
        if cmd is OrderCmd.CANCEL_ALL and iid == 0:  # every instrument: one cancel-all each
            for i in sorted(self.instruments):
                self._queue(OutboxItem(cmd, o._replace(instrument_id=i), ts))
            return
        self._queue(OutboxItem(cmd, o, ts))

    # ------------------------------------------------------------------------------------ test hook
    def _crash(self, point: str) -> None:
        """SIGKILL this process at ``point`` of a place, once (``crash_after``; tests only); with
        ``crash_mode = "machine"`` the journal is first cut back to its last fsync'd length, which is
        what a machine crash at that point leaves on the disk (the marker then holds the point, the synced and
        written lengths and the crash's CLOCK_MONOTONIC ns)."""
        if self.crash_armed and self.p.crash_after == point and not self.crash_marker.exists():
            if self.p.crash_mode == "machine":
                journal = self.ledger.journal
                os.truncate(journal.path, journal.synced_bytes)
                self.crash_marker.write_text(f"{point} {journal.synced_bytes} {journal.bytes} {time.monotonic_ns()}")
            else:
                self.crash_marker.write_text(point)
            os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------------------------------ views (tests, status)
    @property
    def journal(self) -> Journal:
        """The journal now (a new account replaces it)."""
        return self.ledger.journal

    @property
    def reconciling(self) -> bool:
        """True until the start-up reconciliation has completed."""
        return self.reconciler.reconciling

    @property
    def inflight(self) -> dict:
        """Order connection -> its request in flight."""
        return self.requests.inflight

    @property
    def pool(self) -> list[HttpTransport]:
        """The order connections."""
        return self.requests.pool

    @property
    def held(self):
        """The reports held back by a full exec ring."""
        return self.reporter.held

    @property
    def check(self) -> dict[int, int]:
        """Order id -> when its owed query is due."""
        return self.queries.owed

    @property
    def querying(self) -> set[int]:
        """Order ids with a query on the lane."""
        return self.queries.querying

    @property
    def last_http_error(self) -> str:
        """The latest transport failure (never carries a key)."""
        return self.client.last_http_error
