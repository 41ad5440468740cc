"""The order sender: ORDERs from the risk gateway in, signed Bitget v2 REST requests out, EXEC_REPORTs back.

``SenderAgent`` (``module = "procs.sender:SenderAgent"``) is the only process that holds the API key.

Input ring ``orders`` (ORDER, ``pipeline.trading.messages.ORDER_DTYPE``); output ring ``exec`` (EXEC_REPORT,
``EXEC_DTYPE``). The ``ts_origin_ns`` of a report is the ORDER's for a direct answer, the clock's for
what the sender learns by itself (polled fills, reconciliation).

Order of work, per order (``clientOid = client_oid(order_id)``):

1. NEW: an ``order_id`` already in the journal is NOT sent again: the answer carries reason DUPLICATE
   and says only whether that order still works (ACKED with leaves while it works, UNKNOWN while its
   outcome is being queried, REJECTED with leaves 0 once it is terminal); never FILLED: a fill is
   reported once, when the sender receives it, so a repeated id cannot move a position. Otherwise an
   ``intent`` record is written to the journal and fsync'd (with the batch's other intents), and only
   then is place-order sent (an intent whose write or fsync fails, or that finds the journal in doubt
   and unable to recover, is not sent: REJECTED with reason HALTED, ``journal_errors`` counted,
   ``sender_journal_failed`` logged).
2. The answer is classified (``pipeline.trading.bitget.rest``): OK -> ``ack`` journaled, ACKED; REJECTED ->
   ``reject`` journaled, REJECTED (BAD_SIGNATURE for 40009, else VENUE_REJECTED; 43118, a clientOid
   the venue already has, is queried instead); RETRYABLE -> retried after ``retry_backoff_ms * 2**n``
   up to ``max_retries`` times, then REJECTED RATE_LIMITED (429), HALTED (venue unreachable: never
   sent) or, for a 5xx, UNKNOWN; UNKNOWN -> ``unknown`` journaled, UNKNOWN (TIMEOUT), then orderInfo
   is queried every ``poll_interval_ms`` until the venue knows it (or, after ``reconcile_grace_ms``
   from the intent, answers 43001: ``never_sent``, REJECTED NOT_FOUND). Never resent under a new id.
3. CANCEL by clientOid: OK -> fills are polled first (fills before the cancel are reported before it),
   then ``cancel`` journaled, CANCELLED (leaves 0); SYNC and a CANCEL that is answered locally wait
   until those polls are done. 43001: the order is queried and reported as the
   venue has it. A CANCEL of an order not journaled or already terminal answers REJECTED NOT_FOUND; a
   refused or failed cancel answers REJECTED with the order's leaves (> 0: it still works).
   CANCEL_ALL -> cancel-symbol-order (instrument 0: one per configured instrument, each its own
   request), each of ours it names CANCELLED; a refused one answers REJECTED with order_id 0.
4. While an order works, every ``poll_interval_ms``: unfilled-orders, then fills with
   ``idGreaterThan`` the last trade id; each new fill of ours is journaled, then FILLED (price, size,
   leaves, venue_ts_ns, fill_id = trade id); a working order missing from unfilled-orders is queried
   (cancelled at the venue -> CANCELLED).
5. SYNC: a state report: one POSITION per configured instrument (size = signed position, base units;
   price = average entry), one POSITION_MISMATCH per instrument found apart from the venue since this
   process started (size = the venue's position, price = the journal's before), one OPEN_ORDER per
   order not yet terminal (working, or sent and not yet answered: price, size, leaves), then SYNC_DONE.

After a (re)start, before reading any ORDER: the venue's account id (account/info) is checked against
the journal's (a different one: the venue was reset to a new account; the journal is set aside and a
fresh one begun, ``_new_account``); every non-terminal journaled order is queried (orderInfo by
clientOid); an order with an intent and no ack that the venue does not know (43001, past the grace)
becomes ``never_sent`` and is reported REJECTED NOT_FOUND; fills after the last journaled trade id are
fetched and journaled; each instrument's journaled position is compared, in whole lots, with the
venue's balance of its base coin (account/assets; ``_positions_gen``): a difference is journaled, the
journal takes the venue's position, and the state report carries POSITION_MISMATCH (the risk gateway
then REDUCES until an operator resumes); then the state report above goes out unsolicited (SYNC_DONE
with reason ACCOUNT_CHANGED after a new account). A venue that cannot be reached keeps the sender
reconciling (retried every ``retry_backoff_ms * 2**n`` up to 1 s). A live spot account that holds
base coins the pipeline did not buy reads as a difference: trading then only reduces.

Concurrency: the intents of one batch of ORDERs are written, then fsync'd once (a group commit),
before any of them is sent. Place and cancel requests then go out without waiting for answers, one in
flight per order connection (``connections`` keep-alive connections): the sender goes on reading its
ring and starting requests, and reads each answer when it arrives (``_read_answers``; a zero-timeout
select; unanswered past ``timeout_ms``: an unknown outcome). A request waits for one in flight when
they must not race (``_must_wait``): a CANCEL for its order's NEW (a cancel never overtakes its
order), an order of an instrument for that instrument's CANCEL_ALL, a CANCEL_ALL for that
instrument's orders. Fill polls (the one a successful cancel needs before its CANCELLED, and the
periodic poll of step 4) and order queries (unknown outcomes, a cancel's 43001, surprises: orderInfo,
then the order's fills when the venue has more) run on "the lane", a connection of their own, one
request at a time, also without waiting (``_run_lane``: request generators sent each answer as it
arrives), so a venue slow to answer a query holds no new order and no cancel. Only reconciliation
waits for its answers, on the lane too: it runs before anything else, so the lane is idle. While
requests are in flight the idle wait on the ring is at most 50 µs. An ORDER's batch is committed on
the ring once its requests have started: a crash after that finds the order through its journaled
intent (reconciliation), not through the ring.

Place and cancel requests pass a client-side token bucket (``rate_limit_per_s``, burst of the same
size); an ORDER that finds no token waits in a FIFO outbox (ORDERs behind it wait too; the ring is read
only while the outbox is shorter than ``ctx.batch``).

Params: ``input`` ("orders"), ``output`` ("exec"), ``journal_path`` ("<run_dir>/<name>.journal"),
``venue_port_file`` ("<run_dir>/venue.rest.port") or ``base_url`` ("https://api.bitget.com" for the live
exchange: TLS, the system's trust store, or ``ca_file`` as the only trusted CA; plain
"http://127.0.0.1:PORT" for a paper venue only),
``key_file`` ("secrets/paper.json"; "" = environment), ``timeout_ms`` (2000), ``poll_interval_ms``
(50), ``rate_limit_per_s`` (10), ``max_retries`` (3), ``retry_backoff_ms`` (20),
``reconcile_grace_ms`` (0 = 2 * timeout_ms), ``connections`` (order connections: 4; 1..16),
``account_check_ms`` (1000; 0 = only at start: how often the running sender checks the venue's
account id and compares positions with balances), ``crash_after`` ("" | "journal" | "send" | "ack"; tests only, effective only when the environment has
``SHMPIPE_TEST_CRASH=1``: SIGKILL itself once at that point of a place; the marker file
"<journal>.crashed" makes it once).

Counters (``ctx.stats``): sent, acked, rejected, fills, cancels, unknown, retries, dups, rl (rate
limited after retries), rl_wait (waits for a token), jbytes, rec_ms, rec_n, torn, polls, http_err,
malformed, never_sent, out_drops, journal_errors, jdoubt (1 while the journal is in doubt: no new order
is sent), open (orders not terminal).
"""

from __future__ import annotations

import collections
import os
import select
import signal
import socket
import ssl
import time
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import numpy as np

from pipeline.runtime import http1
from pipeline.runtime.agent import (MARK_CANCEL_SENT, MARK_INTENT_SYNCED, MARK_ORDER_READ, MARK_ORDER_SENT, MARK_VENUE_ACK,
                            Agent, mark_code)
from pipeline.trading.bitget import rest
from pipeline.trading.bitget.protocol import base_coin
from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.bitget.signing import load_credentials
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.trading.journal import (CANCELLED, FILLED, LIVE, PARTIAL, PENDING, UNKNOWN, WORKING,
                              Journal, OrderEntry)
from pipeline.trading.messages import (EXEC_DTYPE, ORDER_DTYPE, ORDER_STRUCT, ExecReason, ExecType, Kind, OrderCmd, OrderOrigin,
                               Side, TimeInForce, client_oid, decode_order, order_id_from_client_oid)
from pipeline.runtime.portfile import read_port_file

CRASH_ENV = "SHMPIPE_TEST_CRASH"
_ORDER_BYTES = ORDER_DTYPE.itemsize
_NS_PER_MS = 1_000_000
FILL_PAGE = 100  # a fills answer this long may have more after it
MAX_CONNECTIONS = 16
_POLL, _FILLS, _QUERY, _ACCOUNT = "poll", "fills", "query", "account"  # kinds of lane jobs
RECEIVE_DEADLINE_S = 0.5  # an answer whose first bytes arrived must be whole by then (heartbeat: 2 s)
EXIT_ACCOUNT_CHANGED = 75  # the venue answers for another account while running: restart and reconcile
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
    max_retries: int = 3
    retry_backoff_ms: int = 20
    reconcile_grace_ms: int = 0
    crash_after: Literal["", "journal", "send", "ack"] = ""
    connections: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONNECTIONS)] = 4
    account_check_ms: Annotated[int, msgspec.Meta(ge=0)] = 1000


class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` banked. Pure (times in ns given by the caller)."""

    def __init__(self, rate_per_s: float, burst: float, now_ns: int):
        if rate_per_s <= 0 or burst < 1:
            raise ConfigError(f"sender: rate_limit_per_s must be > 0 (got {rate_per_s})")
        self.rate = float(rate_per_s)
        self.burst = float(burst)
        self.tokens = float(burst)
        self.t = now_ns

    def _refill(self, now_ns: int) -> None:
        if now_ns > self.t:
            self.tokens = min(self.burst, self.tokens + (now_ns - self.t) * self.rate / 1e9)
            self.t = now_ns

    def take(self, now_ns: int) -> bool:
        """Spend one token if there is one."""
        self._refill(now_ns)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def ready_at(self, now_ns: int) -> int:
        """When the next token will be there."""
        self._refill(now_ns)
        return now_ns if self.tokens >= 1.0 else now_ns + int((1.0 - self.tokens) / self.rate * 1e9) + 1


class NotSent(Exception):
    """The request did not leave (no port, connection refused)."""


class Lost(Exception):
    """The request may have reached the venue; no usable answer (timeout, connection lost)."""


def parse_base_url(url: str, ca_file: str = "") -> tuple[tuple[str, int], "ssl.SSLContext | None"]:
    """``base_url`` -> ((host, port), TLS context or None).

    ``http://127.0.0.1:PORT`` (or ``localhost``): plain HTTP, for the paper venue only: a key never
    crosses a network in clear. ``https://HOST[:PORT]`` (port 443 by default): TLS with the system's
    trust store and hostname checking, or with ``ca_file`` as the only trusted CA when given.

    Raises:
        ConfigError: any other scheme, plain HTTP to a host other than the loopback, a missing or bad
            port, or a ``ca_file`` that cannot be loaded.
    """
    scheme, sep, rest = url.partition("://")
    hostport = rest.rstrip("/")
    if not sep or "/" in hostport or "?" in hostport or not hostport:
        raise ConfigError(f"sender: base_url must be https://HOST[:PORT] or http://127.0.0.1:PORT, not {url!r}")
    host, colon, port_s = hostport.rpartition(":")
    if not colon:
        host, port_s = hostport, ""
    if scheme == "http":
        if host not in ("127.0.0.1", "localhost") or not port_s.isdigit():
            raise ConfigError(f"sender: plain http is for the paper venue on 127.0.0.1 only (keys never travel "
                              f"in clear); base_url must be http://127.0.0.1:PORT or https://..., not {url!r}")
        return ("127.0.0.1", int(port_s)), None
    if scheme != "https" or not host or (port_s and not port_s.isdigit()):
        raise ConfigError(f"sender: base_url must be https://HOST[:PORT] or http://127.0.0.1:PORT, not {url!r}")
    try:
        tls = ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"sender: cannot load ca_file {ca_file!r}: {exc}") from None
    return (host, int(port_s) if port_s else 443), tls


def _readable(socks) -> set:
    """Which of ``socks`` have something to read (a zero-timeout select); a closed one (None) counts as
    readable, and all do when the select itself fails: reading then fails and says why."""
    socks = tuple(socks)
    try:
        ready = set(select.select([s for s in socks if s is not None], [], [], 0)[0])
    except (OSError, ValueError):
        return set(socks)
    if None in socks:
        ready.add(None)
    return ready


def _loopback_pair() -> tuple[socket.socket, socket.socket]:
    """Two non-blocking ends of one TCP connection on 127.0.0.1 (TCP_NODELAY, as the order
    connections), for ``keep_warm``: the listener is closed once the connection is made."""
    with socket.create_server(("127.0.0.1", 0)) as lst:
        a = socket.create_connection(lst.getsockname(), timeout=1.0)
        b, _ = lst.accept()
    for sock in (a, b):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
    return a, b


class HttpTransport:
    """The sender's keep-alive connection to 127.0.0.1 (``pipeline.runtime.http1``: the request written in one
    ``sendall``), reopened when it drops. ``address()`` gives (host, port) at every (re)connection (the
    port file may appear late)."""

    def __init__(self, address, timeout_s: float, tls: "ssl.SSLContext | None" = None):
        self.conn = http1.Connection(address, timeout_s, tls)

    @property
    def sock(self):
        """The open socket (None when closed): what a select waits on while a request is in flight."""
        return self.conn.sock

    def close(self) -> None:
        self.conn.close()

    def send(self, req: rest.Request) -> None:
        """Send ``req``. Raises NotSent (nothing left) or Lost (it may have left)."""
        try:
            self.conn.send(req.method, req.target, req.headers, req.body.encode() if req.body else b"")
        except (http1.ConnectFailed, http1.HeaderError) as exc:
            raise NotSent(type(exc).__name__ if isinstance(exc, http1.HeaderError) else str(exc)) from None
        except http1.SendFailed as exc:
            raise Lost(str(exc)) from None

    def receive(self, wait: bool = False) -> tuple[int, bytes]:
        """The answer to the last ``send``, whole within ``RECEIVE_DEADLINE_S`` of its first bytes (a
        venue that trickles or floods its answer cannot hold the sender past its heartbeat). Called
        once those bytes are there, or with ``wait`` (a caller that just sent: reconciliation), which
        first waits up to ``timeout_s`` for them. Raises Lost ("stale": a reused keep-alive the venue
        had closed; "deadline", "too large: ...": the bounds of ``pipeline.runtime.http1``)."""
        sock = self.conn.sock
        if wait and sock is not None:
            try:
                select.select([sock], [], [], self.conn.timeout_s)
            except (OSError, ValueError):  # the receive below fails and says why
                pass
        try:
            return self.conn.receive(min(RECEIVE_DEADLINE_S, self.conn.timeout_s))
        except http1.ReceiveFailed as exc:
            raise Lost(str(exc)) from None


class SenderAgent(Agent):
    """ORDER in, REST out, EXEC_REPORT back (see the module docstring)."""

    params_type = SenderParams

    # ------------------------------------------------------------------------------------ start / stop
    def on_start(self, ctx) -> None:
        self.ctx = ctx
        p = parse_stage_params(ctx.name, ctx.params, SenderParams)
        self.p = p
        if p.input not in ctx.inputs:
            raise ConfigError(f"sender: input ring {p.input!r} is not among {sorted(ctx.inputs)}")
        if p.output not in ctx.outputs:
            raise ConfigError(f"sender: output ring {p.output!r} is not among {sorted(ctx.outputs)}")
        self.inp, self.out = ctx.inputs[p.input], ctx.outputs[p.output]
        ring_cfg = next((r for r in ctx.config.rings if r.name == p.output), None)
        self.out_drop = ring_cfg is not None and ring_cfg.full_policy == "drop"
        self.held: collections.deque = collections.deque()  # (report bytes, ts) waiting for room in exec
        self.instruments = {i.id: i for i in ctx.config.instruments}
        if not self.instruments:
            raise ConfigError("sender: no instruments configured")
        try:
            self.coins = {i: base_coin(inst.symbol) for i, inst in self.instruments.items()}
        except ValueError as exc:
            raise ConfigError(f"sender: {exc} (positions are reconciled against spot balances)") from None
        self.mismatches: dict[int, tuple[float, float]] = {}  # instrument -> (journal's, venue's) position
        self.account_changed = False
        run_dir = Path(ctx.config.supervisor.run_dir)
        self.creds = load_credentials(p.key_file or None)  # ConfigError names the file, never a value
        tls = None
        if p.base_url:
            (host, port), tls = parse_base_url(p.base_url, p.ca_file)
            address = lambda: (host, port)  # noqa: E731
        else:
            port_file = p.venue_port_file or str(run_dir / "venue.rest.port")
            address = lambda: ("127.0.0.1", read_port_file(port_file))  # noqa: E731
        # place / cancel requests: one in flight per order connection
        self.pool = [HttpTransport(address, p.timeout_ms / 1000.0, tls) for _ in range(p.connections)]
        self.free = list(range(p.connections - 1, -1, -1))  # order connections with nothing in flight
        self.inflight: dict[int, tuple] = {}  # connection -> (outbox item, request, deadline ns), in send order
        self.timeout_ns = p.timeout_ms * _NS_PER_MS
        # the lane: fill polls, the periodic poll and order queries, one request at a time, answers read
        # as they come (reconciliation, before any of them, waits for its answers on it)
        self.lane = HttpTransport(address, p.timeout_ms / 1000.0, tls)
        self.jobs: collections.deque = collections.deque()  # [request generator, callbacks, kind]
        self.job: tuple | None = None  # (generator, request in flight, deadline ns, callbacks, kind)
        self.journal = Journal(p.journal_path or run_dir / f"{ctx.name}.journal")
        self.state = self.journal.open()
        self.orders = self.state.orders
        self.poll_ns = max(1, p.poll_interval_ms) * _NS_PER_MS
        self.grace_ms = p.reconcile_grace_ms or 2 * p.timeout_ms
        now = ctx.clock()
        self.bucket = TokenBucket(p.rate_limit_per_s, max(1.0, p.rate_limit_per_s), now)
        self.wall_ms = lambda: time.time_ns() // _NS_PER_MS
        self.outbox: collections.deque = collections.deque()  # [cmd, ORDER record, ts, attempts, due_ns, done]
        self.check: dict[int, int] = {}  # order id -> when to query it next
        self.querying: set[int] = set()  # order ids with an orderInfo query on the lane
        self._batch: list = []  # ORDER messages of one poll, executed NEW first
        self._unsynced: list[tuple[int, int, int]] = []  # (order id, origin, ts) of intents written, not fsync'd
        self.origin_ts: dict[int, int] = {}  # order id -> the NEW's ts_origin_ns (this process's orders)
        self.bodies: dict[int, str] = {}  # order id -> its place-order body, from admission until answered
        self.last_tid = self.state.last_trade_id
        self.open = {oid for oid, o in self.orders.items() if not o.terminal}  # non-terminal order ids
        self.next_poll = now
        self.account_check_ns = p.account_check_ms * _NS_PER_MS
        self.next_account_check = now + self.account_check_ns
        self.reconciling = True
        self.rec_due = now
        self.rec_attempt = 0
        self.rec_t0 = now
        self.last_http_error = ""  # the latest transport failure, for the logs (never carries a key)
        self.rep = np.zeros(1, EXEC_DTYPE)
        self._warm_pair: tuple[socket.socket, socket.socket] | None = None  # keep_warm's loopback TCP pair
        self._warm_order = ORDER_STRUCT.pack(min(self.instruments), OrderCmd.CANCEL_ALL, 0, 0, OrderOrigin.FAST, 0, 0.0,
                                             0.0, 0, 0)
        self.rep_bytes = memoryview(self.rep).cast("B")
        self.crash_marker = Path(str(self.journal.path) + ".crashed")
        self.crash_armed = bool(p.crash_after) and os.environ.get(CRASH_ENV) == "1"
        self.stats = ctx.stats
        self.stats.update(sent=0, acked=0, rejected=0, fills=0, cancels=0, unknown=0, retries=0, dups=0, rl=0,
                          rl_wait=0, jbytes=self.journal.bytes, rec_ms=0, rec_n=0, torn=self.state.torn, polls=0,
                          http_err=0, malformed=0, never_sent=0, out_drops=0, open=len(self.open), journal_errors=0,
                          jdoubt=0)
        if p.crash_after and not self.crash_armed:
            ctx.log.warning("sender_crash_param_ignored", crash_after=p.crash_after, env=CRASH_ENV)
        ctx.log.info("sender_ready", journal=str(self.journal.path), records=self.state.records,
                     torn=self.state.torn, orders=len(self.orders), key_fp=self.creds.fingerprint,
                     last_trade_id=self.last_tid)

    def on_close(self) -> None:
        """Read the answers still in flight (at most ``timeout_ms``), so that their outcomes are
        journaled and reported rather than left to the next start's reconciliation; then close."""
        deadline = time.monotonic() + self.timeout_ns / 1e9
        while (self.inflight or self.job is not None or self.jobs) and time.monotonic() < deadline:
            socks = [s for s in (self.pool[k].sock for k in self.inflight) if s is not None]
            if self.job is not None and self.lane.sock is not None:
                socks.append(self.lane.sock)
            try:
                select.select(socks, [], [], 0.01)
            except (OSError, ValueError):
                pass
            now = self.ctx.clock()
            self._read_answers(now)
            self._run_lane(now)
        while self.held and time.monotonic() < deadline:  # reports held back by a full exec ring
            if not self._flush_held():
                time.sleep(0.001)
        if self.held:
            self.ctx.log.warning("sender_reports_unsent", count=len(self.held))  # the next start's report has them
        for conn in (*self.pool, self.lane):
            conn.close()
        for sock in self._warm_pair or ():
            sock.close()
        self.journal.close()

    # ------------------------------------------------------------------------------------ duty cycle
    def do_work(self) -> int:
        now = self.ctx.clock()
        flushed = self._flush_held() if self.held else 0
        if self.reconciling:
            if now < self.rec_due:
                return 0
            return 1 if self._reconcile(now) else flushed
        work = flushed + self._read_answers(now)
        work += self._run_lane(now)
        work += self._run_outbox(now)
        room = self.ctx.batch - len(self.outbox)
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
                self._commit_intents()  # one fsync for the batch's new orders, before any of them is sent
                work += self._run_outbox(self.ctx.clock())
                if read_batch is not None:
                    self.inp.commit()  # a crash before this line sees the whole batch again
        work += self._resolve(now)
        self.stats["open"] = len(self.open)
        if now >= self.next_poll:
            self.next_poll = now + self.poll_ns
            if self._working() and not self._lane_has(_POLL):
                self.jobs.append([self._poll_gen(now), None, _POLL])
        if self.account_check_ns and now >= self.next_account_check:
            self.next_account_check = now + self.account_check_ns
            if not self._lane_has(_ACCOUNT):
                self.jobs.append([self._account_check_gen(), None, _ACCOUNT])
        work += self._run_lane(now)
        return work

    def _account_check_gen(self):
        """Lane job, every ``account_check_ms`` while running: the venue's account id (another one:
        the venue was reset under us; this process exits with ``EXIT_ACCOUNT_CHANGED`` and the
        supervisor's restart reconciles from scratch, ``_account_gen``), then the positions against
        the balances (``_positions_gen``); a difference it finds sends an unsolicited state report
        carrying POSITION_MISMATCH. An answer that fails leaves it to the next round."""
        uid = yield from self._account_id_gen()
        if uid is None:
            return
        if uid != self.state.account:
            self.ctx.log.error("sender_venue_account_changed", old=self.state.account, new=uid, live=True)
            raise SystemExit(EXIT_ACCOUNT_CHANGED)  # past the lane's error handler: restart, reconcile
        known = dict(self.mismatches)
        if (yield from self._positions_gen()) and self.mismatches != known:
            self._state_report(self.ctx.clock())

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): the cancel-all and place paths up to the bytes
        that would be written (ORDER decode, body, signature, HTTP encoding) for the first instrument,
        written nowhere; then the kernel's send path, which a request after milliseconds of idling
        finds cold: a zero-timeout select on the idle order
        connections and one byte through a private loopback TCP pair (as a NIC stack's warm send).
        Nothing journaled, counted or reported, and nothing reaches the venue."""
        o = decode_order(self._warm_order)
        inst = self.instruments[o.instrument_id]
        for req in (rest.build_cancel_symbol(self.creds, self._wall(), inst.symbol),
                    rest.build_place(self.creds, self._wall(), inst.symbol, Side.BUY, TimeInForce.IOC,
                                     inst.tick_size * 1000, inst.lot_size * 10, "warm", inst.tick_size, inst.lot_size)):
            http1.encode_request(req.method, req.target, "127.0.0.1:0", req.headers, req.body.encode())
        # the kernel's side of a send: the reuse check's zero-timeout select (on the idle order
        # connections, result unused), and one byte through a private loopback TCP connection
        _readable(self.pool[k].sock for k in self.free)
        if self._warm_pair is None:
            self._warm_pair = _loopback_pair()
        a, b = self._warm_pair
        try:
            a.send(b"w")
            b.recv(64)
        except BlockingIOError:  # not arrived yet: read with the next one
            pass

    def wait_for_work(self, timeout_ns: int) -> bool:
        """The runner's park when idle: on the ``orders`` ring (its blocking wait, where the transport
        has one), but never past the sender's own next timed work: a retry or rate-limit token due, a
        reconciliation attempt, the next fill poll while orders work, an unknown outcome to query;
        and for at most ``INFLIGHT_NAP_NS`` while an answer (a query's included) is awaited or a lane
        job is queued (the ring's wait cannot also watch the sockets)."""
        now = self.ctx.clock()
        due = now + timeout_ns
        if self.inflight or self.job is not None or self.jobs or self.held:
            # answers come on sockets (room for held reports in the exec ring), orders on the ring:
            # nap on the ring, briefly
            due = min(due, now + INFLIGHT_NAP_NS)
        if self.reconciling:
            due = min(due, self.rec_due)
        if self.outbox:
            due = min(due, max(min(item[4] for item in self.outbox), now + 200_000))
        owed = [t for oid, t in self.check.items() if oid not in self.querying]  # a query queued: the lane's
        if owed:
            due = min(due, min(owed))
        if self.open:
            due = min(due, self.next_poll)
        left = due - now
        if left <= 0:
            return True
        wait = getattr(self.inp, "wait", None)
        if wait is not None:
            return wait(left)
        time.sleep(min(left, 1_000_000) / 1e9)  # a transport without a blocking wait: short naps
        return False

    # ------------------------------------------------------------------------------------ helpers
    def _wall(self) -> int:
        return self.wall_ms()

    def _jot(self, rec: dict) -> None:
        """Journal one record, written, not fsync'd: intents are made durable together by
        ``_commit_intents`` before any of them is sent; every other record (it survives this process
        dying) becomes durable with the next commit's fsync, which flushes the file up to it. A machine
        crash can lose only that un-fsync'd tail, and it holds no intent that was sent: what it knew
        (acks, fills, cancels) is recovered by querying the venue on restart.

        A record other than an intent describes what already happened at the venue: when its write
        fails (a full disk) it is kept (``Journal.keep``: applied now, written first once the journal
        recovers), counted in ``journal_errors`` and logged; the journal is then in doubt and no
        intent is written, so no new order is sent, until it recovers.

        Raises:
            OSError: an intent's write failed (nothing applied; it must not be sent)."""
        try:
            self.stats["jbytes"] += self.journal.append(rec, sync=False)
        except OSError as exc:
            if rec["t"] == "intent":
                raise
            self.journal.keep(rec)
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
            self.ctx.log.error("sender_journal_failed", record=rec["t"], order_id=rec.get("oid", 0),
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

    def _crash(self, point: str) -> None:
        if self.crash_armed and self.p.crash_after == point and not self.crash_marker.exists():
            self.crash_marker.write_text(point)
            os.kill(os.getpid(), signal.SIGKILL)

    def _call(self, req: rest.Request) -> Result:
        """One request on the lane and its answer, waiting for it: reconciliation only, which runs
        before the lane has any job."""
        res = self._send(self.lane, req)
        return res if res is not None else self._receive(self.lane, req, wait=True)

    def _send(self, conn: HttpTransport, req: rest.Request, crash_point: str = "", *, sent_mark: int = 0,
              ts: int = 0) -> Result | None:
        """Write ``req`` on ``conn``: None once it has left, else the failure's Result. ``sent_mark``: the
        latency-tap code stamped (for the bench) against ``ts`` (the ORDER's origin) once it has left."""
        try:
            conn.send(req)
        except NotSent as exc:
            self.stats["http_err"] += 1
            self.last_http_error = str(exc)
            return rest.classify_transport_error(False, str(exc))
        except Lost as exc:
            self.stats["http_err"] += 1
            self.last_http_error = str(exc)
            return rest.classify_transport_error(True, str(exc))
        if sent_mark:
            self.ctx.mark(sent_mark, ts)
        if crash_point:
            self._crash(crash_point)
        return None

    def _receive(self, conn: HttpTransport, req: rest.Request, *, wait: bool = False, ack_mark: int = 0,
                 ts: int = 0) -> Result:
        """The answer to ``req``, sent on ``conn``, classified (``wait``: see ``HttpTransport.receive``).
        ``ack_mark``: as ``sent_mark``, once read. A GET whose reused keep-alive the venue had closed is
        sent once more on a fresh connection."""
        try:
            status, body = conn.receive(wait)
        except Lost as exc:
            self.stats["http_err"] += 1
            self.last_http_error = str(exc)
            if str(exc) == "stale" and req.method == "GET":
                res = self._send(conn, req)
                return res if res is not None else self._receive(conn, req, wait=True)
            return rest.classify_transport_error(True, str(exc))
        if ack_mark:
            self.ctx.mark(ack_mark, ts)
        return rest.classify_response(status, body)

    def _report(self, ts: int, etype: ExecType, o: OrderEntry | None, *, reason: ExecReason = ExecReason.NONE,
                price: float | None = None, size: float | None = None, leaves: float | None = None,
                venue_ts_ns: int = 0, fill_id: int = 0, iid: int = 0, side: int = 0, order_id: int = 0) -> None:
        r = self.rep[0]
        r["instrument_id"] = o.iid if o is not None else iid
        r["exec_type"] = etype
        r["side"] = o.side if o is not None else side
        r["reason"] = reason
        r["order_id"] = o.oid if o is not None else order_id
        r["price"] = price if price is not None else (o.px if o is not None else 0.0)
        r["size"] = size if size is not None else (o.sz if o is not None else 0.0)
        r["leaves"] = leaves if leaves is not None else (o.leaves if o is not None else 0.0)
        r["venue_ts_ns"] = venue_ts_ns
        r["fill_id"] = fill_id
        if self.held or not self.ctx.emit_nowait(self.out, Kind.EXEC_REPORT, self.rep_bytes, ts):
            if self.out_drop:
                self.stats["out_drops"] += 1
            else:  # a full backpressure ring: held here, in order, never waited for (see _flush_held)
                self.held.append((bytes(self.rep_bytes), ts))
                self.stats["held_max"] = max(self.stats.get("held_max", 0), len(self.held))

    def _flush_held(self) -> int:
        """Write the reports held back by a full ``exec`` ring, oldest first, as room comes. The sender
        never waits for room: the risk gateway may be waiting for room in the ``orders`` ring, which
        only the sender drains (a wait on both sides would deadlock). Returns how many were written."""
        held, n = self.held, 0
        while held and self.ctx.emit_nowait(self.out, Kind.EXEC_REPORT, held[0][0], held[0][1]):
            held.popleft()
            n += 1
        return n

    def _ts(self, oid: int) -> int:
        return self.origin_ts.get(oid) or self.ctx.clock()

    def _backoff_ns(self, attempt: int) -> int:
        return min(self.p.retry_backoff_ms * (2 ** min(attempt, 20)), 1000) * _NS_PER_MS

    # ------------------------------------------------------------------------------------ input
    def _collect(self, seq, ts, kind, payload) -> None:
        self._batch.append((seq, ts, kind, bytes(payload)))

    @staticmethod
    def _new_first(item) -> int:
        payload = item[3]
        return 0 if item[2] == Kind.ORDER and len(payload) == ORDER_DTYPE.itemsize and payload[2] == OrderCmd.NEW else 1

    def _on_order(self, seq, ts, kind, payload) -> None:
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
                self.outbox.append([cmd, o._replace(instrument_id=i), ts, 0, 0])
            return
        self.outbox.append([cmd, o, ts, 0, 0])  # command, ORDER record, ts_origin_ns, attempts, due_ns

    def _admit_new(self, o, ts: int) -> bool:
        """Duplicate check, validation and the intent written (fsync'd by ``_commit_intents``); False
        when answered here."""
        self.ctx.mark(mark_code(MARK_ORDER_READ, o.origin), ts)
        oid, iid = o.order_id, o.instrument_id
        prev = self.orders.get(oid)
        if prev is not None:
            self.stats["dups"] += 1
            self._report_duplicate(ts, prev)
            if prev.status in (PENDING, UNKNOWN) and not any(
                    it[0] is OrderCmd.NEW and it[1].order_id == oid
                    for it in (*self.outbox, *(f[0] for f in self.inflight.values()))):
                self.check.setdefault(oid, self.ctx.clock())
            return False
        inst = self.instruments[iid]
        coid = client_oid(oid)
        try:
            body = rest.place_body(inst.symbol, o.side, o.tif, o.price, o.size, coid, inst.tick_size, inst.lot_size)
        except ValueError as exc:
            self.stats["malformed"] += 1
            self.ctx.log.warning("sender_bad_order", order_id=oid, error=str(exc))
            self._report(ts, ExecType.REJECTED, None, reason=ExecReason.MALFORMED, iid=iid, order_id=oid,
                         side=o.side, price=o.price, size=o.size)
            return False
        try:
            self._jot({"t": "intent", "oid": oid, "coid": coid, "iid": iid, "sym": inst.symbol, "side": o.side,
                       "tif": o.tif, "px": o.price, "sz": o.size,
                       "oseq": o.origin_seq, "ts_ms": self._wall()})
        except OSError as exc:  # not durable, so not sent: answered, so the gateway does not count it working
            self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
            self.stats["jdoubt"] = int(self.journal.in_doubt)
            self.ctx.log.error("sender_journal_failed", order_id=oid, error=f"{type(exc).__name__}: {exc.strerror}",
                               doubt=self.journal.doubt)
            self._report(ts, ExecType.REJECTED, None, reason=ExecReason.HALTED, iid=iid, order_id=oid,
                         side=o.side, price=o.price, size=o.size)
            return False
        self.origin_ts[oid] = ts
        self.bodies[oid] = body  # the request's body, made once (the intent holds the same fields)
        self._unsynced.append((oid, o.origin, ts))
        return True

    def _commit_intents(self) -> None:
        """One fsync for every intent written since the last commit (a group commit: a burst of new
        orders pays for one, not one each), before any of them is sent. When the fsync fails, none of
        them is sent: each is journaled ``never_sent`` (best effort; a restart that finds only the
        intent reconciles it with the venue, which never saw it), answered REJECTED (HALTED), counted
        in ``journal_errors`` and logged."""
        group = self._unsynced
        if not group:
            return
        self._unsynced = []
        try:
            self.journal.sync()
        except OSError as exc:
            failed = {oid for oid, _, _ in group}
            self.outbox = collections.deque(it for it in self.outbox
                                            if not (it[0] is OrderCmd.NEW and it[1].order_id in failed))
            error = f"{type(exc).__name__}: {exc.strerror}"
            for oid, _, ts in group:
                self.stats["journal_errors"] = self.stats.get("journal_errors", 0) + 1
                self.ctx.log.error("sender_journal_failed", order_id=oid, error=error)
                self.bodies.pop(oid, None)
                self._jot({"t": "never_sent", "oid": oid})  # kept in memory when the disk refuses it
                self._report(ts, ExecType.REJECTED, self.orders[oid], reason=ExecReason.HALTED, leaves=0.0)
            return
        mark = self.ctx.mark
        for _, origin, ts in group:
            mark(mark_code(MARK_INTENT_SYNCED, origin), ts)

    def _report_duplicate(self, ts: int, o: OrderEntry) -> None:
        """The answer to a NEW whose id is already journaled: whether that order works, never a fill."""
        if o.status in WORKING:
            self._report(ts, ExecType.ACKED, o, reason=ExecReason.DUPLICATE)
        elif o.terminal:
            self._report(ts, ExecType.REJECTED, o, reason=ExecReason.DUPLICATE, leaves=0.0)
        else:
            self._report(ts, ExecType.UNKNOWN, o, reason=ExecReason.DUPLICATE)

    # ------------------------------------------------------------------------------------ outbox
    def _run_outbox(self, now: int) -> int:
        """Start queued commands in FIFO order, each place / cancel on a free order connection without
        waiting for its answer (``_read_answers``). Stops at the head when it is not due (a retry's
        back-off, a rate-limit token), when no connection is free, or when it must wait for a request
        in flight (``_must_wait``): the commands behind it wait too. A command that is not a request
        (SYNC, a CANCEL of an order no longer working) is answered once nothing is in flight and no
        fill poll is pending. Returns how many were started or answered."""
        n = 0
        outbox = self.outbox
        while outbox and n < self.ctx.batch:
            head = outbox[0]
            if head[4] > now:
                break
            cmd, o = head[0], head[1]
            single = cmd is OrderCmd.NEW or cmd is OrderCmd.CANCEL_ALL or (
                cmd is OrderCmd.CANCEL and (e := self.orders.get(o.order_id)) is not None and not e.terminal)
            if not single:  # after every answer and fill poll before it
                if self.inflight or self.job is not None or self.jobs:
                    break
                self._execute(head, now)
                outbox.popleft()
                n += 1
                continue
            if not self.free or self._must_wait(cmd, o):
                break
            if not self.bucket.take(now):
                head[4] = self.bucket.ready_at(now)
                self.stats["rl_wait"] += 1
                break
            outbox.popleft()
            self._start(head, now)
            n += 1
        return n

    def _must_wait(self, cmd: OrderCmd, o) -> bool:
        """True when a request in flight must be answered first: a CANCEL's own order's NEW (a cancel
        never overtakes its order), a CANCEL_ALL of its instrument (for a NEW or CANCEL), or any order
        of the instrument (for a CANCEL_ALL: it must not race the orders queued before it)."""
        iid = o.instrument_id
        if cmd is OrderCmd.CANCEL_ALL:
            return any(f[0][1].instrument_id == iid for f in self.inflight.values())
        oid = o.order_id
        for f in self.inflight.values():
            other = f[0][1]
            if other.order_id == oid and f[0][0] is not OrderCmd.CANCEL_ALL:
                return True
            if f[0][0] is OrderCmd.CANCEL_ALL and other.instrument_id == iid:
                return True
        return False

    def _start(self, item, now: int) -> None:
        """Write ``item``'s request on a free order connection; in flight until ``_read_answers`` reads its
        answer (a request that could not be written is answered at once)."""
        cmd, o, ts = item[0], item[1], item[2]
        if cmd is OrderCmd.NEW:
            req = self._place_request(self.orders[o.order_id])
            mark, crash_point = mark_code(MARK_ORDER_SENT, o.origin), "send"
            self._crash("journal")
            self.stats["sent"] += 1
        elif cmd is OrderCmd.CANCEL:
            entry = self.orders[o.order_id]
            req = rest.build_cancel(self.creds, self._wall(), self.instruments[entry.iid].symbol, client_oid=entry.coid)
            mark, crash_point = mark_code(MARK_CANCEL_SENT, o.origin), ""
        else:
            req = rest.build_cancel_symbol(self.creds, self._wall(), self.instruments[o.instrument_id].symbol)
            mark, crash_point = mark_code(MARK_CANCEL_SENT, o.origin), ""
        k = self.free.pop()
        conn = self.pool[k]
        res = self._send(conn, req, crash_point, sent_mark=mark, ts=ts)
        if res is None:
            self.inflight[k] = (item, req, now + self.timeout_ns)
        else:
            self.free.append(k)
            self._answered(item, res, now)

    def _read_answers(self, now: int) -> int:
        """Read the answers that have arrived (a zero-timeout select over the connections in flight)
        and act on them, in the order their requests were sent; a request unanswered past
        ``timeout_ms`` is an unknown outcome (its connection is closed). Returns how many."""
        inflight = self.inflight
        if not inflight:
            return 0
        socks = {k: self.pool[k].sock for k in inflight}
        ready = _readable(socks.values())
        n = 0
        for k in list(inflight):
            item, req, deadline = inflight[k]
            ack = mark_code(MARK_VENUE_ACK, item[1].origin) if item[0] is OrderCmd.NEW else 0
            res = self._answer(self.pool[k], req, deadline, now, socks[k] in ready, ack_mark=ack, ts=item[2])
            if res is None:
                continue
            del inflight[k]
            self.free.append(k)
            self._answered(item, res, now)
            n += 1
        return n

    def _answer(self, conn: HttpTransport, req: rest.Request, deadline: int, now: int, ready: bool, *,
                ack_mark: int = 0, ts: int = 0) -> Result | None:
        """The answer to ``req``, in flight on ``conn``: read once ``ready`` (its socket is readable or
        gone); a transport failure ("timeout", the connection closed) once ``deadline`` has passed;
        None while still waiting."""
        if ready:
            return self._receive(conn, req, ack_mark=ack_mark, ts=ts)
        if now < deadline:
            return None
        conn.close()
        self.stats["http_err"] += 1
        self.last_http_error = "timeout"
        return rest.classify_transport_error(True, "timeout")

    def _answered(self, item, res: Result, now: int) -> None:
        """Act on the answer to ``item``'s request; a retryable failure goes back to the head of the
        outbox with its back-off."""
        cmd, o = item[0], item[1]
        if cmd is OrderCmd.NEW:
            if res.ok:
                self._crash("ack")
            done = self._after(item, res, now, self._place_done)
        elif cmd is OrderCmd.CANCEL:
            entry = self.orders[o.order_id]
            done = self._after(item, res, now, lambda it, r: self._cancel_done(it, r, entry))
        else:
            done = self._after(item, res, now, lambda it, r: self._cancel_all_done(it[2], o.instrument_id, r))
        if not done:
            self.outbox.appendleft(item)

    def _execute(self, item, now: int) -> None:
        """Answer a command that is not a request, once nothing is in flight: SYNC (the state report)
        or a CANCEL of an order unknown or no longer working (REJECTED NOT_FOUND)."""
        cmd, o, ts = item[0], item[1], item[2]
        if cmd is OrderCmd.SYNC:
            self._state_report(ts)
            return
        entry = self.orders.get(o.order_id)
        self._report(ts, ExecType.REJECTED, entry, reason=ExecReason.NOT_FOUND, leaves=0.0,
                     iid=o.instrument_id, order_id=o.order_id)

    def _after(self, item, res: Result, now: int, done) -> bool:
        if res.outcome is Outcome.RETRYABLE and item[3] < self.p.max_retries:
            item[3] += 1
            self.stats["retries"] += 1
            item[4] = now + self._backoff_ns(item[3])
            return False
        done(item, res)
        return True

    # ------------------------------------------------------------------------------------ place
    def _place_request(self, o: OrderEntry) -> rest.Request:
        body = self.bodies.get(o.oid)
        if body is not None:
            return rest.build_place_with_body(self.creds, self._wall(), body)
        # not admitted by this process (never happens on the hot path): from the journaled intent
        inst = self.instruments[o.iid]
        return rest.build_place(self.creds, self._wall(), inst.symbol, o.side, o.tif, o.px, o.sz, o.coid,
                                inst.tick_size, inst.lot_size)

    def _place_done(self, item, res: Result) -> None:
        o = self.orders[item[1].order_id]
        self.bodies.pop(o.oid, None)
        ts = item[2]
        if res.ok:
            vid = str(res.data.get("orderId", "")) if isinstance(res.data, dict) else ""
            known = o.status not in (PENDING, UNKNOWN)  # a fills poll while it was in flight saw it first
            self._jot({"t": "ack", "oid": o.oid, "vid": vid})
            if not known:
                self.stats["acked"] += 1
                self._report(ts, ExecType.ACKED, o)
            return
        if res.outcome is Outcome.REJECTED and res.code == rest.CODE_DUPLICATE_OID:
            self.check[o.oid] = self.ctx.clock()  # the venue has it: ask what it is
            return
        if res.outcome is Outcome.REJECTED or (res.outcome is Outcome.RETRYABLE and res.status < 500):
            code = res.code or ("unreachable" if res.status == 0 else str(res.status))
            self._jot({"t": "reject", "oid": o.oid, "code": code})
            self.stats["rejected"] += 1
            if code == rest.CODE_RATE_LIMIT:
                self.stats["rl"] += 1
                reason = ExecReason.RATE_LIMITED
            elif code == rest.CODE_BAD_SIGNATURE:
                reason = ExecReason.BAD_SIGNATURE
            elif code == "unreachable":
                reason = ExecReason.HALTED
            else:
                reason = ExecReason.VENUE_REJECTED
            self.ctx.log.warning("sender_rejected", order_id=o.oid, code=code, msg=res.msg)
            self._report(ts, ExecType.REJECTED, o, reason=reason, leaves=0.0)
            return
        # UNKNOWN, or a 5xx after every retry: it may be at the venue
        self._jot({"t": "unknown", "oid": o.oid})
        self.stats["unknown"] += 1
        self.ctx.log.warning("sender_unknown", order_id=o.oid, why=res.msg or str(res.status))
        self._report(ts, ExecType.UNKNOWN, o, reason=ExecReason.TIMEOUT)
        self.check[o.oid] = self.ctx.clock() + self.poll_ns

    # ------------------------------------------------------------------------------------ cancel
    def _cancel_done(self, item, res: Result, o: OrderEntry) -> None:
        ts = item[2]
        if res.ok:
            def cancelled() -> None:  # after the fills: fills before the cancel are reported before it
                if not o.terminal:
                    self._jot({"t": "cancel", "oid": o.oid})
                    self.stats["cancels"] += 1
                    self._report(ts, ExecType.CANCELLED, o, leaves=0.0)

            self._after_fills(cancelled)
            return
        if res.outcome is Outcome.REJECTED and res.code == rest.CODE_NO_ORDER:
            def queried() -> None:  # the venue's view applied: a cancel of an order it still works failed
                if not o.terminal and o.status not in (PENDING, UNKNOWN):
                    self._report(ts, ExecType.REJECTED, o, reason=ExecReason.NOT_FOUND)

            self.jobs.append([self._query_gen(o, ts), [queried], _QUERY])
            return
        if res.outcome is Outcome.UNKNOWN:
            self.check[o.oid] = self.ctx.clock() + self.poll_ns
        reason = (ExecReason.RATE_LIMITED if res.code == rest.CODE_RATE_LIMIT else ExecReason.BAD_SIGNATURE
                  if res.code == rest.CODE_BAD_SIGNATURE else ExecReason.TIMEOUT if res.outcome is Outcome.UNKNOWN
                  else ExecReason.VENUE_REJECTED)
        self.ctx.log.warning("sender_cancel_failed", order_id=o.oid, code=res.code, msg=res.msg)
        self._report(ts, ExecType.REJECTED, o, reason=reason)

    def _cancel_all_done(self, ts: int, iid: int, res: Result) -> None:
        if not res.ok:
            self.ctx.log.warning("sender_cancel_all_failed", instrument_id=iid, code=res.code, msg=res.msg)
            self._report(ts, ExecType.REJECTED, None, reason=ExecReason.VENUE_REJECTED, iid=iid)
            return
        try:
            coids = set(rest.parse_cancelled(res.data))
        except ValueError:
            coids = set()
        self._after_fills(lambda: self._cancelled_all(ts, iid, coids))

    def _cancelled_all(self, ts: int, iid: int, coids: set[str]) -> None:
        """A cancel-all's outcome, once the fills before it are in: each of ours it names CANCELLED; a
        working one it does not name is queried."""
        for o in [self.orders[i] for i in sorted(self.open)]:
            if o.iid != iid or o.terminal:
                continue
            if o.coid in coids:
                self._jot({"t": "cancel", "oid": o.oid})
                self.stats["cancels"] += 1
                self._report(ts, ExecType.CANCELLED, o, leaves=0.0)
            elif o.status in WORKING:
                self.check.setdefault(o.oid, self.ctx.clock())

    # ------------------------------------------------------------------------------------ queries
    def _query(self, o: OrderEntry, ts: int) -> Result:
        """``_query_gen`` waiting for each answer (reconciliation)."""
        return self._run_sync(self._query_gen(o, ts))

    def _query_gen(self, o: OrderEntry, ts: int):
        """orderInfo for ``o``; applies and reports what the venue says (with the order's fills when
        the venue has more than we know). A request generator (``_run_sync`` or the lane); returns the
        orderInfo Result."""
        res = yield rest.build_order_info(self.creds, self._wall(), client_oid=o.coid)
        if res.ok:
            try:
                found = [v for v in rest.parse_orders(res.data) if v.clientOid == o.coid]
            except ValueError:
                found = []
            if found:
                yield from self._apply_venue_gen(o, found[0], ts)
                self.check.pop(o.oid, None)
            return res
        if res.outcome is Outcome.REJECTED and res.code == rest.CODE_NO_ORDER and o.status in (PENDING, UNKNOWN):
            if self._wall() - o.ts_ms >= self.grace_ms:
                self._jot({"t": "never_sent", "oid": o.oid})
                self.stats["never_sent"] += 1
                self.check.pop(o.oid, None)
                self.ctx.log.info("sender_never_sent", order_id=o.oid)
                self._report(ts, ExecType.REJECTED, o, reason=ExecReason.NOT_FOUND, leaves=0.0)
        elif res.outcome is Outcome.REJECTED and res.code == rest.CODE_NO_ORDER and o.status in WORKING:
            self.ctx.log.error("sender_order_lost", order_id=o.oid)  # the venue forgot an acked order
            self._jot({"t": "cancel", "oid": o.oid})
            self.check.pop(o.oid, None)
            self.stats["cancels"] += 1
            self._report(ts, ExecType.CANCELLED, o, reason=ExecReason.NOT_FOUND, leaves=0.0)
        return res

    def _apply_venue_gen(self, o: OrderEntry, v: rest.VenueOrder, ts: int):
        """Journal and report the venue's view ``v`` of ``o``: acked, its fills (fetched: a request
        generator), cancelled or filled."""
        was = o.status
        if v.status not in (LIVE, PARTIAL, FILLED, CANCELLED):
            return
        if was in (PENDING, UNKNOWN) or (v.orderId and not o.vid):
            self._jot({"t": "state", "oid": o.oid, "status": LIVE if v.status in (FILLED, CANCELLED) else v.status,
                       "vid": v.orderId})
            if was in (PENDING, UNKNOWN):
                self.stats["acked"] += 1
                self._report(ts, ExecType.ACKED, o)
        if v.baseVolume > o.filled + 1e-12:
            yield from self._fetch_fills_gen(o)
        if v.status == CANCELLED and not o.terminal:
            self._jot({"t": "cancel", "oid": o.oid})
            self.stats["cancels"] += 1
            self._report(ts, ExecType.CANCELLED, o, leaves=0.0)
        elif v.status == FILLED and not o.terminal and v.baseVolume <= o.filled + 1e-12:
            self._jot({"t": "state", "oid": o.oid, "status": FILLED, "vid": v.orderId})

    def _fetch_fills_gen(self, o: OrderEntry):
        """Every fill of ``o`` (a request per page), ingested. A request generator."""
        after = None
        while True:
            res = yield rest.build_fills(self.creds, self._wall(), symbol=o.sym, order_id=o.vid or None,
                                         id_greater_than=after)
            if not res.ok:
                return
            try:
                fills = rest.parse_fills(res.data)
            except ValueError:
                return
            self._ingest(fills, None)
            if len(fills) < FILL_PAGE:
                return
            after = fills[-1].tradeId

    def _resolve(self, now: int) -> int:
        """Queue an orderInfo query on the lane for each order whose state is owed (unknown outcomes,
        surprises) and is due, at most ``ctx.batch``, one at a time per order; a query that leaves
        it owed is due again ``poll_interval_ms`` after its answer."""
        n = 0
        for oid, due in list(self.check.items()):
            if due > now or oid in self.querying or n >= self.ctx.batch:
                continue
            o = self.orders.get(oid)
            if o is None or o.terminal:
                self.check.pop(oid, None)
                continue
            n += 1
            self.querying.add(oid)

            def then(oid=oid) -> None:
                self.querying.discard(oid)
                if oid in self.check:
                    self.check[oid] = self.ctx.clock() + self.poll_ns

            self.jobs.append([self._query_gen(o, self._ts(oid)), [then], _QUERY])
        return n

    # ------------------------------------------------------------------------------------ polling
    def _working(self) -> list[OrderEntry]:
        """The working orders (acked, not terminal)."""
        return [o for o in map(self.orders.get, sorted(self.open)) if o.status in WORKING]

    def _poll_gen(self, now: int):
        """Lane job (``_run_lane``): unfilled-orders, then every new fill; a working order missing from
        unfilled-orders is queried."""
        self.stats["polls"] += 1
        res = yield rest.build_unfilled(self.creds, self._wall())
        if not res.ok:
            return
        try:
            open_coids = {v.clientOid for v in rest.parse_orders(res.data)}
        except ValueError:
            return
        yield from self._poll_fills_gen()
        for o in self._working():
            if o.coid not in open_coids:
                self.check.setdefault(o.oid, now)

    def _poll_fills_gen(self):
        """Fetch every fill after the last trade id (a request per page); returns True when the venue
        answered. A generator: it yields each request and is sent its Result (``_run_sync`` waits for
        each answer; the lane does not)."""
        while True:
            res = yield rest.build_fills(self.creds, self._wall(), id_greater_than=self.last_tid or None)
            if not res.ok:
                return False
            try:
                fills = rest.parse_fills(res.data)
            except ValueError:
                self.stats["http_err"] += 1
                return False
            before = self.last_tid
            self._ingest(fills, None)
            if len(fills) < FILL_PAGE or self.last_tid == before:
                return True

    def _poll_fills(self) -> bool:
        """``_poll_fills_gen``, waiting for each answer (reconciliation)."""
        return self._run_sync(self._poll_fills_gen())

    def _run_sync(self, gen):
        """Drive a request generator, waiting for each answer (``_call``); its result."""
        try:
            req = next(gen)
            while True:
                req = gen.send(self._call(req))
        except StopIteration as stop:
            return stop.value

    # ------------------------------------------------------------------------------------ the lane
    def _lane_has(self, kind: str) -> bool:
        return any(job[2] == kind for job in self.jobs) or (self.job is not None and self.job[4] == kind)

    def _after_fills(self, then) -> None:
        """Run ``then`` once a fills poll that starts after now has completed (on the lane): joins a
        fills poll still queued, else queues one."""
        if self.jobs and self.jobs[-1][2] == _FILLS:
            self.jobs[-1][1].append(then)
        else:
            self.jobs.append([self._poll_fills_gen(), [then], _FILLS])

    def _run_lane(self, now: int) -> int:
        """The lane: request generators (fill polls, the periodic poll, order queries) run one request
        at a time on a connection of their own, without waiting: each answer is read when it has
        arrived (a zero-timeout select; unanswered past ``timeout_ms``: a transport failure), the
        generator is sent it and yields its next request; when it returns, its callbacks run.
        Returns the number of answers handled."""
        n = 0
        job = self.job
        if job is not None:
            gen, req, deadline, thens, kind = job
            sock = self.lane.sock
            res = self._answer(self.lane, req, deadline, now, sock in _readable((sock,)))
            if res is None:
                return 0
            self.job = None
            n = 1
            self._advance(gen, res, thens, kind, now)
        while self.job is None and self.jobs:
            gen, thens, kind = self.jobs.popleft()
            self._advance(gen, None, thens, kind, now)
        return n

    def _advance(self, gen, res: Result | None, thens, kind: str, now: int) -> None:
        """Send ``res`` into ``gen`` (None: start it) and write the request it yields on the lane; a
        request that cannot be written is answered with its failure at once. A job that raises (a
        bug) is ended as if it had returned: counted, logged, its callbacks run (an order query's
        frees the order for the next one), and the lane goes on."""
        while True:
            try:
                req = next(gen) if res is None else gen.send(res)
            except StopIteration:
                break
            except Exception as exc:
                self.stats["errors"] = self.stats.get("errors", 0) + 1
                self.ctx.log.error("sender_lane_job_failed", kind=kind, error=f"{type(exc).__name__}: {exc}"[:300])
                break
            res = self._send(self.lane, req)
            if res is None:
                self.job = (gen, req, now + self.timeout_ns, thens, kind)
                return
        for then in thens or ():
            then()

    def _ingest(self, fills: list[rest.VenueFill], ts: int | None) -> None:
        for f in fills:
            if f.tradeId > self.last_tid:
                self.last_tid = f.tradeId
            oid = order_id_from_client_oid(f.clientOid)
            o = self.orders.get(oid) if oid is not None else None
            if o is None or f.tradeId in self.state.trade_ids:
                continue
            if o.status in (PENDING, UNKNOWN):
                self._jot({"t": "state", "oid": o.oid, "status": LIVE, "vid": f.orderId})
                self.check.pop(o.oid, None)
                self.stats["acked"] += 1
                self._report(self._ts(o.oid), ExecType.ACKED, o)
            self._jot({"t": "fill", "oid": o.oid, "tid": f.tradeId, "px": f.priceAvg, "sz": f.size,
                       "side": o.side, "iid": o.iid, "ts_ms": f.cTime})
            self.stats["fills"] += 1
            self._report(self.ctx.clock() if ts is None else ts, ExecType.FILLED, o, price=f.priceAvg, size=f.size,
                         venue_ts_ns=f.cTime * _NS_PER_MS, fill_id=f.tradeId)

    # ------------------------------------------------------------------------------------ reconcile / report
    def _reconcile(self, now: int) -> bool:
        """One reconciliation attempt; True when it completed (the state report is out)."""
        if self.rec_attempt == 0:
            self.rec_t0 = now
        ts = now
        ok = self._run_sync(self._account_gen())
        for o in [self.orders[i] for i in sorted(self.open)] if ok else ():
            if o.terminal:
                continue
            res = self._query(o, ts)
            if not (res.ok or o.terminal):
                ok = False  # unreachable, or 43001 inside the grace: try again later
                if res.outcome is Outcome.REJECTED and res.code not in (rest.CODE_NO_ORDER,):
                    self.ctx.log.error("sender_reconcile_refused", order_id=o.oid, code=res.code, msg=res.msg)
        if ok:
            ok = self._poll_fills()
        if ok:
            ok = self._run_sync(self._positions_gen())
        if not ok:
            if self.rec_attempt == 0:
                self.ctx.log.warning("sender_reconcile_waiting", open_orders=len(self.open),
                                     http_errors=self.stats["http_err"], last_http_error=self.last_http_error)
            self.rec_attempt += 1
            self.rec_due = self.ctx.clock() + self._backoff_ns(self.rec_attempt)
            return False
        self.reconciling = False
        self.rec_attempt = 0
        self.stats["rec_ms"] = (self.ctx.clock() - self.rec_t0) // _NS_PER_MS
        self.stats["rec_n"] += 1
        self._state_report(self.ctx.clock())
        self.ctx.log.info("sender_reconciled", orders=len(self.orders), last_trade_id=self.last_tid,
                          positions={str(i): self.state.position(i).qty for i in self.instruments},
                          ms=self.stats["rec_ms"])
        return True

    def _account_gen(self):
        """Reconciliation, first: which venue account answers. A journal without one records it; one
        that names another account (the venue was reset: a new account) is set aside and a fresh
        journal begins, so no old order or fill is replayed into the new account
        (``_new_account``). A request generator; returns True when done."""
        uid = yield from self._account_id_gen()
        if uid is None:
            return False
        known = self.state.account
        if known and known != uid:
            try:
                self._new_account(known, uid)
            except OSError as exc:
                self.ctx.log.error("sender_journal_failed", record="account", error=f"{exc.strerror}")
                return False
        if not self.state.account:
            self._jot({"t": "account", "id": uid})
        return True

    def _account_id_gen(self):
        """account/info's account id; None when the venue refused (logged), could not be reached, or
        answered without one (counted in ``malformed``, logged). A request generator."""
        res = yield rest.build_account_info(self.creds, self._wall())
        if not res.ok:
            if res.outcome is Outcome.REJECTED:
                self.ctx.log.error("sender_reconcile_refused", request="account/info", code=res.code, msg=res.msg)
            return None
        try:
            return rest.parse_account_id(res.data)
        except ValueError as exc:
            self.stats["malformed"] += 1
            self.ctx.log.error("sender_bad_answer", request="account/info", error=str(exc))
            return None

    def _new_account(self, old: str, new: str) -> None:
        """The venue answers for account ``new``, the journal is about ``old``: the journal is renamed
        aside (``<journal>.<old>.<ms>``) and a fresh one opened; every state report from now on ends
        with SYNC_DONE reason ACCOUNT_CHANGED (the risk gateway reduces until an operator resumes).

        Raises:
            OSError: the rename or the new journal failed."""
        path = self.journal.path
        aside = path.with_name(f"{path.name}.{old}.{self._wall()}")
        self.journal.close()
        os.replace(path, aside)
        self.journal = Journal(path)
        self.state = self.journal.open()
        self.orders = self.state.orders
        self.open.clear()
        self.check.clear()
        self.origin_ts.clear()
        self.bodies.clear()
        self.last_tid = 0
        self.account_changed = True
        self.stats["acct_changed"] = self.stats.get("acct_changed", 0) + 1
        self.ctx.log.error("sender_venue_account_changed", old=old, new=new, journal_aside=str(aside))

    def _positions_gen(self):
        """Reconciliation, last: each instrument's position in the journal against the venue's balance
        of its base coin (whole lots). The balances are taken between two fill polls that agree (no new
        fill between them; up to three tries), so a fill arriving meanwhile is not a difference. A
        difference is journaled (``adjust``: the journal takes the venue's position), counted
        (``pdiff_<id>``, lots), logged (``sender_position_mismatch``) and reported in every state
        report (POSITION_MISMATCH after the POSITIONs: the gateway reduces until an operator
        resumes). A request generator; returns True when done."""
        for _ in range(3):
            before = self.last_tid
            res = yield rest.build_assets(self.creds, self._wall())
            if not res.ok:
                return False
            try:
                assets = rest.parse_assets(res.data)
            except ValueError as exc:
                self.stats["malformed"] += 1
                self.ctx.log.error("sender_bad_answer", request="account/assets", error=str(exc))
                return False
            if not (yield from self._poll_fills_gen()):
                return False
            if self.last_tid == before:
                break
        else:
            return False  # fills keep coming: try again later
        for iid, inst in sorted(self.instruments.items()):
            a = assets.get(self.coins[iid])
            venue = a.total if a is not None else 0.0
            ours = self.state.position(iid).qty
            lots = round((venue - ours) / inst.lot_size)
            if lots:
                self._jot({"t": "adjust", "iid": iid, "qty": venue, "was": ours})
                self.mismatches[iid] = (ours, venue)
                self.stats[f"pdiff_{iid}"] = lots
                self.ctx.log.error("sender_position_mismatch", instrument_id=iid, symbol=inst.symbol, journal=ours,
                                   venue=venue, diff_lots=lots)
        return True

    def _state_report(self, ts: int) -> None:
        for iid in sorted(self.instruments):
            pos = self.state.position(iid)
            self._report(ts, ExecType.POSITION, None, iid=iid, price=pos.avg_px, size=pos.qty, leaves=0.0)
        for iid, (ours, venue) in sorted(self.mismatches.items()):
            self._report(ts, ExecType.POSITION_MISMATCH, None, iid=iid, price=ours, size=venue, leaves=0.0)
        for o in map(self.orders.get, sorted(self.open)):  # working, and sent or sending but not yet
            if not o.terminal:                               # answered: the gateway must count them all
                self._report(ts, ExecType.OPEN_ORDER, o)
        self._report(ts, ExecType.SYNC_DONE, None,
                     reason=ExecReason.ACCOUNT_CHANGED if self.account_changed else ExecReason.NONE)
