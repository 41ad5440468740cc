"""The paper venue as a supervised stage: ``procs.venue:VenueAgent``.

It serves Bitget v2 public WebSocket market data (``pipeline.venue.server``) and the Bitget v2 spot
trade REST API (``pipeline.venue.rest``: place / cancel / cancel-all / orderInfo / unfilled-orders /
fills, every request signed and verified) on 127.0.0.1, both from one background thread with its
own asyncio loop; the runner's loop only idles (``do_work`` returns 0), beats, publishes the
counters and handles SIGTERM. No rings: the venue talks to the feed and the order sender over
sockets, like the real exchange.

Orders (``pipeline.venue.orders.OrderEngine``) are matched against the venue's own live public book
and trades, which the engine sees through the market server's listener hook on the same loop; the
public market is never changed by our orders.

The account persists, like an exchange's across its own restarts: every accepted order, fill,
cancel and admin adjustment is appended as it happens to the account log (``account_path``, default
``<run_dir>/<process name>.account``, e.g. run/venue.account; 0600; format in
``pipeline.venue.account``), and a restarted venue replays it: the same account id (``GET
/api/v2/spot/account/info`` userId), orders, fills, positions and clientOids seen (an old one is
still refused with 43118); resting orders rest again; ids continue above the old ones. A reset is on
purpose only: ``reset_account = true`` (the old file is renamed to ``<path>.<UTC ts>.bak``), or with
the venue stopped ``rm run/venue.account`` / ``python -m pipeline.venue.account reset
run/venue.account``. A reset venue is a new account (another userId, no orders, flat), which a client
can tell from the account id. A corrupt log (an invalid line before the last) fails the start.

Config (one process entry; every param optional, unknown params fail the start)::

    [[processes]]
    name = "venue"
    module = "procs.venue:VenueAgent"
    wait = "back-off"            # the runner must not busy-spin: the server thread needs the GIL
    [processes.params]
    port = 0                     # 0: a free port, written to the port file
    port_file = ""               # default <supervisor.run_dir>/<process name>.port, e.g. run/venue.port
    source = "synthetic"         # or "replay", or "encoded": frames built before anyone connects
                                 # (pipeline.venue.sources.EncodedSource, looping; published by
                                 # pipeline.venue.encoded_server: the venue's CPU stays small), from
                                 # the capture when one is given, else from the synthetic model
    capture = ""                 # replay / encoded: a capture file (cryptofeed line format, v1 or v2 frames)
    encoded_units = 2000         # encoded: units built (synthetic steps or capture frames), then looped
    encoded_channels = ["books15", "trade"]  # encoded: the channels built (books1/5/15, trade); the
                                 # faults that change frames (jumps, gaps, bad checksums) are refused
    speed = 1.0                  # market time per real time; 0 = as fast as the clients take it
    seed = 1                     # synthetic model seed (and the drop_prob fault's)
    market = "default"           # synthetic: "default" (the model's defaults: a spread of a tick or two,
                                 # 20 ms steps) or "calibrated" (pipeline.venue.synthetic.CALIBRATED: the
                                 # shared Bitget capture's spread, volatility, depth, trades and pace,
                                 # 550 ms steps; python -m pipeline.venue.calibration measures both);
                                 # another name fails the start
    step_ms = 20                 # synthetic step (one book update per instrument per step); unset: the
                                 # market's own (20 ms default, 550 ms calibrated)
    loop = false                 # replay: start again at the end
    delay_ms = 0.0               # faults at start (see pipeline.venue.faults): every frame's extra delay
                                 # (with delay_jitter_ms > 0: the mean of the jittered delay)
    drop_prob = 0.0              # each data push to each client dropped with this probability
    # stress faults (make stress), all off by default; seeded by `seed`, counted in faults_injected and
    # each in its own counter:
    delay_jitter_ms = 0.0        # 0..50: each frame's delay drawn from N(delay_ms, delay_jitter_ms),
                                 # clipped to [0, 50] ms; frames keep their order per connection
                                 # (jitter_frames counts the jittered frames)
    jump_prob = 0.0              # synthetic: chance per step and instrument that the whole book jumps by
                                 # k ticks, k uniform in 1..jump_ticks, random sign; replay: chance per book
                                 # event of an instrument that every later price of it moves so
                                 # (pipeline.venue.jumps; its tick: the config instrument's, else the
                                 # capture's price precision); published as ordinary book updates with
                                 # checksums of the shifted book, so they still verify (jumps)
    jump_ticks = 3               # >= 1
    disconnect_every_s = 0.0     # cut every WebSocket connection every N s of market time (disconnects)
    gap_every_s = 0.0            # every N s of market time: the next books update of every instrument
                                 # steps its seq back by 4: a sequence gap (gaps)
    bad_checksum_every_s = 0.0   # every N s of market time: the next books update of every instrument
                                 # carries a wrong checksum (bad_checksums)
                                 # (market time: real time x speed while the venue publishes)
    max_away_ticks = 50          # order validity (orders_valid / orders_invalid): an order arriving
                                 # further than this from its own side's best price is invalid
    itch_port = 0                # > 0: also send an ITCH 5.0 session over MoldUDP64 to this UDP port on
                                 # 127.0.0.1 (re-requests: to the packets' source port)
    itch_port_file = ""          # or: the feed's UDP port read from this file (waited for, re-read every 0.5 s)
    itch_file = ""               # the session: a BinaryFILE (.gz too; a truncated file is sent as far as it
                                 # goes, counted in itch_file_truncated); "": the synthetic session
    itch_session = "PAPER"       # the MoldUDP64 session name (1..10 printable ASCII)
    itch_events = 100000         # synthetic: order-flow messages (pipeline.trading.itch.synth)
    itch_rate = 10000.0          # messages a second (0 = as fast as possible), unless itch_speed > 0
    itch_speed = 0.0             # > 0: at the pace of the ITCH timestamps times this (1.0: as recorded)
    itch_drop_prob = 0.0         # fault: data packets dropped at random
    itch_drop_seqs = []          # fault: the packets holding these sequence numbers dropped (first sending)
    itch_unanswered_seqs = []    # fault: these sequence numbers never retransmitted (an unrecoverable gap)
    itch_delay_ms = 0.0          # fault: every packet (data, heartbeats, re-request answers) sent this much
                                 # later (0..600000), in the order sent (itch_delayed_packets)
    itch_delay_jitter_ms = 0.0   # 0..50; > 0: each packet's delay drawn from N(itch_delay_ms, this), clipped
                                 # to [0, 50] ms, order still kept
    itch_jump_prob = 0.0         # fault: chance per Add / Replace message that its stock's later Add / Replace
                                 # prices move by k $0.01 ticks, k uniform in 1..itch_jump_ticks, random sign,
                                 # all its new orders alike (pipeline.venue.jumps; itch_jumps)
    itch_jump_ticks = 3          # >= 1
    itch_orders = false          # true: our orders match against the ITCH book of the paper instruments
                                 # (pipeline.venue.itch_market: $0.01 ticks, whole shares), not the WebSocket
                                 # market
    itch_stocks = {}             # with itch_orders: {ITCH stock: instrument id} (default: stocks named as the
                                 # instruments), e.g. { AAPL = 1 } for the instrument AAPLUSDT
    rest_port = 0                # order REST API port; 0: a free port, written to the REST port file
    rest_port_file = ""          # default <supervisor.run_dir>/<process name>.rest.port, e.g. run/venue.rest.port
    key_file = "secrets/paper.json"  # the one API key accepted (0600 JSON; a relative path is taken from
                                 # the repo root; created with a random paper key when missing);
                                 # "" = from SHMPIPE_API_KEY / SHMPIPE_API_SECRET / SHMPIPE_API_PASSPHRASE
    rate_limit_per_s = 10.0      # place-order requests a second per key; every other endpoint's documented
                                 # rate scaled alike (pipeline.venue.limits; over it: 429 "429")
    max_notional = 0.0           # > 0: an order with price * size above it is refused (43012); 0: no limit
    recv_window_ms = 30000       # ACCESS-TIMESTAMP further than this from the venue's clock: 40008
    latency_ms = 0.0             # artificial latency before each place / cancel is processed
    account_path = ""            # the account log; default <supervisor.run_dir>/<process name>.account
    reset_account = false        # true: start a new account (the old log renamed aside to .<ts>.bak);
                                 # at EVERY start while it stays true, supervisor restarts included
    allow_admin = false          # true: serve POST /api/v2/paper/adjust-position (change a position
                                 # without an order, persisted: a chaos test's "behind the back");
                                 # false: it answers 403 "40014"
    # matching realism (pipeline.venue.orders), all off by default:
    maker_fee_bps = 10.0         # fees: both or neither (unset: no fees); bps of a fill's notional,
    taker_fee_bps = 10.0         # paid in USDT (maker may be negative: a rebate); Bitget's standard
                                 # rates are in pipeline.venue.fees (spot 10 / 10, USDT-M futures 2 / 6)
    queue_model = false          # true: a resting order waits behind the displayed size at its price
                                 # (pipeline.venue.queue)

Instruments: the synthetic source makes a market in every ``[[instruments]]`` entry with
``venue = "paper"`` (symbol, tick_size, lot_size); a replay serves the instruments of its capture.
Each is published and subscribed under its own ``product_type`` as instType (a perpetual's books and
trades under "USDT-FUTURES", spot under "SPOT"; the encoded source: spot only).

Order sanity uses the config instruments' ``tick_size`` / ``lot_size`` (any venue) of each served
symbol; a replayed symbol without a config entry is checked for positive finite numbers only.

Finding the ports: the venue writes the bound ports (decimal + newline, atomically) to the port
file and the REST port file once it listens, and removes both on a clean stop. A client reads them
with ``pipeline.runtime.portfile.read_port_file`` and connects to ``ws://127.0.0.1:<port>/v2/ws/public``
and ``http://127.0.0.1:<rest port>``.

Secrets: the key file's content is never logged, published or put in an exception; the start log
line names the key by its fingerprint only.

Counters (``ctx.stats``, shown by ``status``): connections, subscriptions, frames_sent,
frames_dropped, faults_injected, slow_disconnects, book_events, trade_events, listener_errors;
of the stress faults jitter_frames, jumps, disconnects, gaps, bad_checksums; of the order side
orders_placed, orders_rejected, fills, cancels, bad_signatures (bad or missing key, passphrase or
signature), stale_timestamps, rate_limited, and orders_valid / orders_invalid (each order that
reaches the book, placed or refused as a crossing post_only: valid when, against the venue's book
as it arrived, it did not cross the opposite best price (a buy below the best ask, a sell above the
best bid) and was within max_away_ticks of its own side's best price; see
``pipeline.venue.orders``); the ledger: dup_coid (places refused because the clientOid was already
placed, 43118: a client that sent an order twice) and positions (``{symbol: signed base position}``
of the account: every fill since the account was created, restored ones included, plus admin
adjustments; a float per symbol, for reconciliation with the sender and the risk gateway); and
itch_msgs (messages sent over MoldUDP64), itch_packets_dropped, itch_requests (re-requests received),
itch_retransmitted_packets, itch_file_truncated / itch_file_oversized / itch_file_read_errors, with
itch_orders itch_listener_errors, and with their faults on itch_delayed_packets / itch_jumps, when ITCH
is on. The counters are this process's own: they start at 0 after a restart, the account does not.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress
from pathlib import Path
from typing import Annotated

import msgspec

from pipeline.runtime.agent import Agent, AgentContext
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.runtime.portfile import write_port_file
from pipeline.trading.bitget.signing import Credentials, generate_paper_credentials, load_credentials
from pipeline.venue.account import AccountLog
from pipeline.venue.errors import VenueConfigError, VenueError
from pipeline.venue.fees import MAX_FEE_BPS, FeeSchedule
from pipeline.venue.itch_market import make_itch
from pipeline.venue.itch_market import rules as itch_rules
from pipeline.venue.order_fields import CODE_DUPLICATE, OrderRejected, rules_from_config
from pipeline.venue.orders import OrderEngine
from pipeline.venue.private_ws import PrivateChannels
from pipeline.venue.rest import RestApi, RestServer
from pipeline.venue.server import VenueServer
from pipeline.venue.service import VenueThread
from pipeline.venue.encoded_server import EncodedVenueServer
from pipeline.venue.sources import ENCODED_CHANNELS, MARKETS, instrument_specs, make_source

FAULT_STATS = ("jitter_frames", "jumps", "disconnects", "gaps", "bad_checksums")
MARKET_STATS = ("connections", "subscriptions", "frames_sent", "frames_dropped", "faults_injected",
                "slow_disconnects", "book_events", "trade_events", "listener_errors") + FAULT_STATS
ORDER_STATS = ("orders_placed", "orders_rejected", "fills", "cancels", "bad_signatures", "stale_timestamps",
               "rate_limited")
VALIDITY_STATS = ("orders_valid", "orders_invalid")
#: the venue's own ledger, for reconciliation (chaos scenarios): refusals of a clientOid it already had
#: (43118), and ``{symbol: signed base position}`` from our fills (last: dropped first if the status
#: record's 760 bytes cannot hold every counter)
LEDGER_STATS = ("dup_coid", "positions")
PUBLISHED_STATS = MARKET_STATS + ORDER_STATS + VALIDITY_STATS + LEDGER_STATS
STATS_INTERVAL_NS = 100_000_000
DEFAULT_KEY_FILE = "secrets/paper.json"
REPO_ROOT = Path(__file__).resolve().parents[1]

_Period = Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]  # a timed fault's period in s (0: off)


class VenueParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The stage's params (each one in the module docstring); an unknown or ill-typed field, or one
    out of its range, fails the start (``parse_params``)."""

    port: int = 0
    port_file: str = ""
    source: str = "synthetic"
    capture: str = ""
    encoded_units: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 2_000
    encoded_channels: tuple[str, ...] = ("books15", "trade")
    speed: float = 1.0
    seed: int = 1
    market: str = "default"
    step_ms: int | None = None
    loop: bool = False
    delay_ms: float = 0.0
    drop_prob: float = 0.0
    delay_jitter_ms: Annotated[float, msgspec.Meta(ge=0.0, le=50.0)] = 0.0
    jump_prob: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    jump_ticks: Annotated[int, msgspec.Meta(ge=1)] = 3
    disconnect_every_s: _Period = 0.0
    gap_every_s: _Period = 0.0
    bad_checksum_every_s: _Period = 0.0
    max_away_ticks: Annotated[int, msgspec.Meta(ge=0)] = 50
    itch_port: int = 0
    itch_port_file: str = ""
    itch_file: str = ""
    itch_session: Annotated[str, msgspec.Meta(min_length=1, max_length=10, pattern="^[ -~]+$")] = "PAPER"
    itch_events: Annotated[int, msgspec.Meta(ge=1)] = 100_000
    itch_rate: float = 10_000.0
    itch_speed: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    itch_drop_prob: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    itch_drop_seqs: tuple[int, ...] = ()
    itch_unanswered_seqs: tuple[int, ...] = ()
    itch_delay_ms: Annotated[float, msgspec.Meta(ge=0.0, le=600_000.0)] = 0.0
    itch_delay_jitter_ms: Annotated[float, msgspec.Meta(ge=0.0, le=50.0)] = 0.0
    itch_jump_prob: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    itch_jump_ticks: Annotated[int, msgspec.Meta(ge=1)] = 3
    itch_orders: bool = False
    itch_stocks: dict[str, int] | None = None
    rest_port: int = 0
    rest_port_file: str = ""
    key_file: str = DEFAULT_KEY_FILE
    rate_limit_per_s: float = 10.0
    max_notional: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0  # 0: no limit
    recv_window_ms: int = 30_000
    latency_ms: float = 0.0
    account_path: str = ""
    reset_account: bool = False
    allow_admin: bool = False
    maker_fee_bps: Annotated[float, msgspec.Meta(ge=-MAX_FEE_BPS, le=MAX_FEE_BPS)] | None = None
    taker_fee_bps: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_FEE_BPS)] | None = None
    queue_model: bool = False


#: every param the stage takes
PARAMS = frozenset(VenueParams.__struct_fields__)


def parse_params(name: str, params) -> VenueParams:
    """``params`` of process ``name`` as ``VenueParams``.

    Raises:
        VenueConfigError: an unknown param (``<name>: unknown venue params [...]; known: [...]``), one
            of the wrong type or out of its range (the message names the field), a market not in
            ``MARKETS`` (the message names ``market``), or only one of maker_fee_bps / taker_fee_bps.
    """
    unknown = sorted(set(params) - PARAMS)
    if unknown:
        raise VenueConfigError(f"{name}: unknown venue params {unknown}; known: {sorted(PARAMS)}")
    try:
        p = parse_stage_params(name, params, VenueParams)
    except ConfigError as exc:
        raise VenueConfigError(str(exc)) from None
    if p.market not in MARKETS:
        raise VenueConfigError(f"{name}: market must be one of {sorted(MARKETS)}, got {p.market!r}")
    if p.source == "encoded":
        fixed = [f for f in ("jump_prob", "gap_every_s", "bad_checksum_every_s") if getattr(p, f)]
        if fixed:
            raise VenueConfigError(f"{name}: {', '.join(fixed)}: source 'encoded' publishes fixed frames; "
                                   f"these faults need source 'synthetic'")
        bad = sorted(set(p.encoded_channels) - ENCODED_CHANNELS)
        if bad or not p.encoded_channels:
            raise VenueConfigError(f"{name}: encoded_channels must be some of {sorted(ENCODED_CHANNELS)}, "
                                   f"got {list(p.encoded_channels)}")
    if (p.maker_fee_bps is None) != (p.taker_fee_bps is None):
        raise VenueConfigError(f"{name}: maker_fee_bps and taker_fee_bps go together: set both (fees) or "
                               f"neither (no fees)")
    return p


def fee_schedule(p: VenueParams) -> FeeSchedule | None:
    """The engine's fee schedule from the params (None: no fees)."""
    if p.maker_fee_bps is None or p.taker_fee_bps is None:
        return None
    return FeeSchedule(maker_bps=p.maker_fee_bps, taker_bps=p.taker_fee_bps)


def paper_credentials(key_file: str) -> Credentials:
    """The venue's key: from ``key_file`` (relative to the repo root; a random paper key is created
    there, 0600, when it is missing), or from the environment when ``key_file`` is "".

    Raises:
        ConfigError: the file is unreadable, too open, malformed; or an environment variable is
            missing (the message names the file or variable, never a value).
    """
    if not key_file:
        return load_credentials(None)
    path = Path(key_file)
    if not path.is_absolute():
        path = REPO_ROOT / path
    with suppress(FileExistsError):  # another process (the order sender) created it meanwhile
        generate_paper_credentials(path)
    for attempt in range(20):  # a file created by another process this instant may not be complete yet
        try:
            return load_credentials(path)
        except ConfigError:
            if attempt == 19:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


class CountingOrderEngine(OrderEngine):
    """``OrderEngine`` that also counts the places it refused as a duplicate clientOid (43118) in
    ``duplicate_refusals`` (a client that sends the same clientOid twice, e.g. after a crash)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.duplicate_refusals = 0

    def place(self, body):
        """``OrderEngine.place``; raises what it raises (OrderRejected), counting 43118."""
        try:
            return super().place(body)
        except OrderRejected as exc:
            if exc.code == CODE_DUPLICATE:
                self.duplicate_refusals += 1
            raise


class VenueAgent(Agent):
    """Runs a ``VenueServer`` in a thread for the runner (see the module docstring)."""

    params_type = VenueParams

    def on_start(self, ctx: AgentContext) -> None:
        """Raises:
        VenueError: an unknown param, a bad value (``VenueConfigError`` for both), no paper
            instrument, an unreadable capture, a corrupt account log or one another venue process
            holds, or the server thread not starting. ConfigError: the key file or environment key
            cannot be loaded (the message names the file or variable only). OSError: a port cannot
            be bound, the account log cannot be created, read or renamed.
        """
        self.ctx = ctx
        p = parse_params(ctx.name, ctx.params)
        run_dir = Path(ctx.config.supervisor.run_dir)
        self.server = self._make_market(p)
        self.itch, self.itch_market, self.itch_counts = make_itch(p, ctx.config.instruments, ctx.log)
        creds = paper_credentials(p.key_file)
        rules, levels = ((itch_rules(self.itch_market.symbols), self.itch_market.levels) if self.itch_market else
                         (rules_from_config(ctx.config.instruments, self.server.inst_ids), self.server.market.levels))
        self.engine = CountingOrderEngine(rules, levels, lambda: time.time_ns() // 1_000_000,
                                          max_notional=p.max_notional if p.max_notional > 0 else None,
                                          max_away_ticks=p.max_away_ticks, fees=fee_schedule(p),
                                          queue_model=p.queue_model)
        self.account = AccountLog(p.account_path or run_dir / f"{ctx.name}.account")
        records = self.account.open(reset=p.reset_account)
        try:  # the account log is open (and locked): closed again when the start fails
            self._restore_account(records)
            self._serve(p, creds, run_dir)
        except BaseException:
            thread = getattr(self, "thread", None)
            if thread is not None:
                thread.stop()
            self.account.close()
            raise

    def _make_market(self, p: VenueParams) -> VenueServer:
        """The market-data server over the source ``p`` asks for.

        Raises:
            VenueError: no paper instrument for a synthetic source (or an encoded one without a
                capture), a perpetual with the encoded source (``VenueConfigError``); what
                ``make_source`` and ``VenueServer`` raise.
        """
        specs = instrument_specs(self.ctx.config.instruments)
        if (p.source == "synthetic" or (p.source == "encoded" and not p.capture)) and not specs:
            raise VenueError("no [[instruments]] with venue = 'paper' to make a market in")
        source = make_source(p.source, instruments=specs, capture=p.capture or None, seed=p.seed,
                             step_ms=p.step_ms, jump_prob=p.jump_prob, jump_ticks=p.jump_ticks, market=p.market,
                             encoded_units=p.encoded_units, encoded_channels=p.encoded_channels)
        # each instrument's market data under its own instType (a perpetual: "USDT-FUTURES")
        inst_types = {i.symbol: i.product_type for i in self.ctx.config.instruments if i.venue == "paper"}
        if p.source == "encoded" and set(inst_types.values()) - {"SPOT"}:
            raise VenueConfigError(f"{self.ctx.name}: source 'encoded' publishes SPOT frames only (a perpetual "
                                   "instrument needs source 'synthetic' or 'replay')")
        server = EncodedVenueServer if p.source == "encoded" else VenueServer
        return server(source, port=p.port, speed=p.speed, loop_replay=p.loop, delay_ms=p.delay_ms,
                      drop_prob=p.drop_prob, fault_seed=p.seed, delay_jitter_ms=p.delay_jitter_ms,
                      disconnect_every_s=p.disconnect_every_s, gap_every_s=p.gap_every_s,
                      bad_checksum_every_s=p.bad_checksum_every_s, inst_types=inst_types)

    def _restore_account(self, records: list[dict]) -> None:
        """Rebuild the engine's account from the log's records; from now on every change is appended
        to the log (``venue_account`` logged).

        Raises:
            VenueError: a corrupt record (``OrderEngine.restore``).
        """
        engine, account = self.engine, self.account
        engine.restore(records)
        engine.on_event = account.append
        self.ctx.log.info("venue_account", path=str(account.path), account_id=engine.account_id,
                          new=account.created, reset_backup=str(account.backup or ""),
                          orders=len(engine.orders), open_orders=len(engine.open_orders()),
                          fills=len(engine.fills), torn_bytes=account.torn_bytes,
                          positions={sym: str(q) for sym, q in engine.positions().items()})

    def _serve(self, p: VenueParams, creds: Credentials, run_dir: Path) -> None:
        """Start the market server, the REST API (and the ITCH sender) in their thread, then write
        both port files (``venue_listening`` logged).

        Raises:
            VenueError: a bad REST value, the thread not starting. OSError: a port cannot be bound.
        """
        ctx = self.ctx
        (self.itch_market or self.server).add_market_listener(self.engine)  # itch_orders: the ITCH book
        api = RestApi(self.engine, creds, recv_window_ms=p.recv_window_ms, rate_limit_per_s=p.rate_limit_per_s,
                      log=ctx.log, allow_admin=p.allow_admin,
                      perps={i.symbol: i.margin_coin for i in ctx.config.instruments if i.perpetual})
        self.server.add_market_listener(api.public)  # public market data: the trades behind tickers / candles
        self.private = PrivateChannels(api)  # the private WebSocket: login, orders / fill / account pushed
        self.server.set_private(self.private.handler)
        self.rest = RestServer(api, port=p.rest_port, latency_ms=p.latency_ms, log=ctx.log)
        extra = [self.itch] if self.itch else []
        self.thread = VenueThread(self.server, name=f"{ctx.name}-ws", extra=[*extra, self.rest])
        port = self.thread.start()
        self.port_file = Path(p.port_file or run_dir / f"{ctx.name}.port")
        self.rest_port_file = Path(p.rest_port_file or run_dir / f"{ctx.name}.rest.port")
        write_port_file(self.port_file, port)
        write_port_file(self.rest_port_file, self.rest.port)
        self._next_stats_ns = 0
        self._dead = False
        self._publish_stats()
        ctx.log.info("venue_listening", url=self.server.url, rest_url=self.rest.url, source=p.source,
                     instruments=self.server.inst_ids, port_file=str(self.port_file),
                     rest_port_file=str(self.rest_port_file), key_fingerprint=f"#{creds.fingerprint}")

    def _publish_stats(self) -> None:
        s = self.server.stats()
        self.ctx.stats.update({k: s[k] for k in MARKET_STATS})
        r = self.rest.stats()
        self.ctx.stats.update({k: r[k] for k in ORDER_STATS + VALIDITY_STATS})
        self.ctx.stats["dup_coid"] = self.engine.duplicate_refusals
        self.ctx.stats["positions"] = {sym: float(q) for sym, q in self.engine.positions().items()}
        if self.itch is not None:
            self.ctx.stats["itch_msgs"] = self.itch.stats["messages_sent"]
            self.ctx.stats.update({f"itch_{k}": v for k, v in self.itch.stats.items()
                                   if k in ("packets_dropped", "requests", "retransmitted_packets")})
            self.ctx.stats.update({f"itch_file_{k}": v for k, v in self.itch_counts.items()
                                   if k not in ("messages", "jumps")})
            if self.itch.delay.active:  # the stress faults' counters only while on (the record is small)
                self.ctx.stats["itch_delayed_packets"] = self.itch.stats["delayed_packets"]
            if self.itch_counts.get("jumps"):
                self.ctx.stats["itch_jumps"] = self.itch_counts["jumps"]
        if self.itch_market is not None:
            self.ctx.stats["itch_listener_errors"] = self.itch_market.listener_errors
            while self.itch_market.listener_failures:
                self.ctx.log.error("order_engine_hook_failed", error=self.itch_market.listener_failures.pop(0)[:300])
        failures = self.server.listener_failures
        while failures:
            self.ctx.log.error("order_engine_hook_failed", error=failures.pop(0)[:300])

    def do_work(self) -> int:
        """Publish the counters now and then; raise if the server thread died. Never any work."""
        if self._dead:  # every call raises, so the runner's error limit ends the process (exit 70)
            raise VenueError(f"venue server thread ended: {self.thread.error!r}")
        now = self.ctx.clock()
        if now >= self._next_stats_ns:
            self._next_stats_ns = now + STATS_INTERVAL_NS
            self._publish_stats()
            if not self.thread.alive:
                self._dead = True
                raise VenueError(f"venue server thread ended: {self.thread.error!r}")
        return 0

    def wait_for_work(self, timeout_ns: int) -> bool:
        """The runner's park: sleep until the next heartbeat or counters are due. The server thread
        does the venue's work; waking the main thread more often would only take the GIL from it and
        the CPU from whatever shares this core. SIGTERM ends the stop at the next wake (at most a
        heartbeat interval later)."""
        left_ns = min(timeout_ns, max(self._next_stats_ns - self.ctx.clock(), 0))
        if left_ns > 0:
            time.sleep(left_ns / 1e9)
        return False

    def on_close(self) -> None:
        thread = getattr(self, "thread", None)
        if thread is None:
            account = getattr(self, "account", None)
            if account is not None:
                account.close()
            return
        thread.stop()
        self.account.close()
        self._publish_stats()
        for f in (self.port_file, self.rest_port_file):
            with suppress(OSError):
                os.unlink(f)
        self.ctx.log.info("venue_stopped", **self.server.stats(), **{k: v for k, v in self.rest.stats().items()
                                                                     if k in ORDER_STATS + VALIDITY_STATS})
