"""The paper venue's private WebSocket (Bitget v2 spot and USDT-FUTURES): the login op, then the
``orders``, ``fill`` and ``account`` channels (and, for perpetuals, ``positions``) pushed as the account
changes, so a client sees its fills pushed, not only polled. Served on the market server's port at
``/v2/ws/private`` (``VenueServer.set_private``), on its loop, where the order engine runs too.

Dialect (what an exchange client such as ccxt's pro client sends and reads)::

    client: ping                                   server: pong
    client: {"op":"login","args":[{"apiKey","passphrase","timestamp":"<s>","sign"}]}
    server: {"event":"login","code":0,"msg":""}    or {"event":"error","code":<30011..30016>,"msg"}
            (``RestApi.verify_login``: the exchange's signature over timestamp + "GET/user/verify")
    client: {"op":"subscribe","args":[{"instType":"SPOT","channel":"orders","instId":"default"}]}
    server: {"event":"subscribe","arg":{...}} per entry, or {"event":"error","code":"30004",...}
            before a login, {"event":"error","code":"30001",...} an unknown channel / instType /
            instId (instType SPOT: the spot symbols, channels orders / fill / account;
            USDT-FUTURES: the perpetuals, orders / fill / positions / account); an ``account``
            subscription ({"channel":"account","coin":"default"}) is answered with a snapshot of the
            balances at once, a ``positions`` one with the positions
    client: {"op":"unsubscribe","args":[...]}      server: {"event":"unsubscribe","arg":{...}}

Pushes ``{"action":"snapshot","arg":<the subscription>,"data":[...],"ts":<ms>}`` after each account
change (``AccountState.watchers``), to every subscription it concerns (instId "default": every
symbol; coin "default": every coin):

- ``orders``: the order on acceptance (live), each fill (partially_filled / filled, with the
  fill's fillPrice, tradeId, baseVolume (the fill's size), fillTime, fillFee, fillFeeCoin,
  tradeScope) and its cancel: instId, orderId, clientOid, price (limit only), size / newSize (what
  was asked: a market buy's in the quote coin), notional, orderType, force, side, accBaseVolume,
  priceAvg, status, feeDetail [{"feeCoin","fee"}], enterPointSource, cTime, uTime.
- ``fill``: each fill as the REST fills route shows it, with ``feeDetail`` a list of one.
- ``account``: the coins a fill or adjustment changed (base coin and USDT), as the assets route.

Under instType USDT-FUTURES (a perpetual's changes only; ``pipeline.venue.mix_api``'s data):

- ``orders``: instId, orderId, clientOid, price, size, orderType, force, side, posSide "net",
  tradeSide "<side>_single", posMode "one_way_mode", marginMode "crossed", marginCoin, leverage "1",
  accBaseVolume, priceAvg, status (``canceled``), notionalUsd, feeDetail, enterPointSource, cTime,
  uTime, and a fill's fillPrice, tradeId, baseVolume, fillTime, fillFee, fillFeeCoin, fillNotionalUsd,
  tradeScope, pnl "0".
- ``fill``: each fill as the mix fills route shows it, with uTime.
- ``positions``: after each fill or adjustment, every open position (``all-position``'s objects with
  instId and posId), [] when flat.
- ``account``: after each fill, the margin coin's account (``accounts``: marginCoin, frozen "0",
  available, maxOpenPosAvailable, maxTransferOut, equity, usdtEquity, crossedRiskRate "0",
  unrealizedPL).

A connection whose queue (``max_queue`` frames) fills up is closed (a client that does not read).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from typing import NamedTuple

import orjson
from websockets.exceptions import ConnectionClosed

from pipeline.trading.bitget.protocol import QUOTE_COIN, base_coin
from pipeline.venue.mix_api import MIX_STATUS, PRODUCT, fill_json
from pipeline.venue.order_fields import fmt

PATH = "/v2/ws/private"
INST_TYPE = "SPOT"
MIX_INST_TYPE = PRODUCT  # USDT-FUTURES
CHANNELS = ("orders", "fill", "account")
MIX_CHANNELS = ("orders", "fill", "positions", "account")
CODE_NEED_LOGIN = "30004"
CODE_NO_CHANNEL = "30001"
CODE_BAD_OP = "30003"
MAX_MESSAGE_BYTES = 64 * 1024


def frame(obj) -> str:
    return orjson.dumps(obj).decode()


class Kind(NamedTuple):
    """What one instType serves: its channels, instIds and coins, and the data a subscription's first
    push carries (``snapshot(channel, target or None)``; None: no first push)."""

    channels: tuple[str, ...]
    symbols: frozenset
    coins: frozenset
    snapshot: Callable[[str, str | None], list[dict] | None]


class Session:
    """One private connection's state, sans-I/O: ``on_text`` turns a client message into the
    frames to answer; ``subs``: the (instType, channel, instId or coin) subscribed. ``kinds``:
    instType -> its ``Kind``."""

    def __init__(self, verify_login: Callable[[object], tuple[str, str] | None], kinds: dict[str, Kind]) -> None:
        self._verify = verify_login
        self._kinds = dict(kinds)
        self.logged_in = False
        self.subs: dict[tuple[str, str, str], dict] = {}  # (instType, channel, instId / coin) -> the arg as sent

    def on_text(self, text) -> list[str]:
        """The frames answering one client message (never raises)."""
        if text == "ping":
            return ["pong"]
        try:
            msg = orjson.loads(text)
            op, args = msg["op"], msg.get("args", [])
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return [frame({"event": "error", "code": CODE_BAD_OP, "msg": "invalid request"})]
        if op == "login":
            refused = self._verify(args[0] if isinstance(args, list) and args else None)
            if refused is not None:
                return [frame({"event": "error", "code": refused[0], "msg": refused[1]})]
            self.logged_in = True
            return [frame({"event": "login", "code": 0, "msg": ""})]
        if op not in ("subscribe", "unsubscribe") or not isinstance(args, list):
            return [frame({"event": "error", "code": CODE_BAD_OP, "msg": f"invalid op {str(op)[:32]}"})]
        return [f for arg in args for f in self._sub(op, arg)]

    def _sub(self, op: str, arg) -> list[str]:
        if not isinstance(arg, dict):
            return [frame({"event": "error", "code": CODE_BAD_OP, "msg": "args must be objects"})]
        if not self.logged_in:
            return [frame({"event": "error", "code": CODE_NEED_LOGIN, "msg": "User not logged in", "arg": arg})]
        channel, inst_type = arg.get("channel"), str(arg.get("instType", "")).upper()
        target = arg.get("coin") if channel == "account" else arg.get("instId")
        kind = self._kinds.get(inst_type)
        known = () if kind is None else kind.coins if channel == "account" else kind.symbols
        if kind is None or channel not in kind.channels or not (target == "default" or target in known):
            return [frame({"event": "error", "code": CODE_NO_CHANNEL, "arg": arg,
                           "msg": f"instType:{inst_type},channel:{channel},instId:{target} doesn't exist"})]
        key = (inst_type, channel, target)
        if op == "unsubscribe":
            self.subs.pop(key, None)
            return [frame({"event": "unsubscribe", "arg": arg})]
        self.subs[key] = arg
        out = [frame({"event": "subscribe", "arg": arg})]
        first = kind.snapshot(channel, None if target == "default" else target)
        if first is not None:
            out.append(push(arg, first, _now_ms()))
        return out

    def wants(self, channel: str, target: str, inst_type: str = INST_TYPE) -> dict | None:
        """The subscription arg a push of ``channel`` about ``target`` (symbol / coin) of
        ``inst_type`` goes to."""
        return self.subs.get((inst_type, channel, target)) or self.subs.get((inst_type, channel, "default"))


def push(arg: dict, data: list, ts_ms: int) -> str:
    return frame({"action": "snapshot", "arg": arg, "data": data, "ts": ts_ms})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def order_push(o, fill) -> dict:
    """An ``orders`` push's object of order ``o`` (after ``fill``, when one)."""
    fee_coin = QUOTE_COIN if o.symbol.endswith(QUOTE_COIN) else ""
    out = {"instId": o.symbol, "orderId": str(o.order_id), "clientOid": o.client_oid, "size": o.size_text,
           "newSize": o.size_text, "notional": fmt(o.notional), "orderType": o.order_type, "force": o.force,
           "side": o.side, "accBaseVolume": fmt(o.filled), "priceAvg": fmt(o.avg_price), "status": o.status,
           "feeDetail": [{"feeCoin": fee_coin, "fee": fmt(-o.fee)}] if o.fee else [],
           "enterPointSource": "API", "cTime": str(o.c_ms), "uTime": str(o.u_ms)}
    if o.order_type == "limit":
        out["price"] = o.price_text
    if fill is not None:
        out.update({"fillPrice": fmt(fill.price), "tradeId": str(fill.trade_id), "baseVolume": fmt(fill.size),
                    "fillTime": str(fill.ts_ms), "fillFee": fmt(-fill.fee), "fillFeeCoin": fee_coin,
                    "tradeScope": "T" if fill.scope == "taker" else "M"})
    return out


def mix_order_push(o, fill, margin_coin: str) -> dict:
    """A USDT-FUTURES ``orders`` push's object of order ``o`` (after ``fill``, when one)."""
    out = {"instId": o.symbol, "orderId": str(o.order_id), "clientOid": o.client_oid, "size": o.size_text,
           "notionalUsd": fmt(o.notional), "orderType": o.order_type, "force": o.force, "side": o.side,
           "posSide": "net", "tradeSide": f"{o.side}_single", "posMode": "one_way_mode", "marginMode": "crossed",
           "marginCoin": margin_coin, "leverage": "1", "accBaseVolume": fmt(o.filled), "priceAvg": fmt(o.avg_price),
           "status": MIX_STATUS.get(o.status, o.status), "enterPointSource": "API",
           "feeDetail": [{"feeCoin": margin_coin, "fee": fmt(-o.fee)}] if o.fee else [],
           "cTime": str(o.c_ms), "uTime": str(o.u_ms)}
    if o.order_type == "limit":
        out["price"] = o.price_text
    if fill is not None:
        out.update({"fillPrice": fmt(fill.price), "tradeId": str(fill.trade_id), "baseVolume": fmt(fill.size),
                    "fillTime": str(fill.ts_ms), "fillFee": fmt(-fill.fee), "fillFeeCoin": margin_coin,
                    "fillNotionalUsd": fmt(fill.price * fill.size), "pnl": "0",
                    "tradeScope": "T" if fill.scope == "taker" else "M"})
    return out


def fill_push(fill) -> dict:
    """A ``fill`` push's object: the REST fill with ``feeDetail`` as a list of one."""
    out = fill.to_json()
    out["feeDetail"] = [out.get("feeDetail") or {"deduction": "no", "feeCoin": QUOTE_COIN,
                                                  "totalDeductionFee": "0", "totalFee": "0"}]
    return out


class PrivateChannels:
    """The private WebSocket over a ``RestApi`` (its key, its engine's account; see the module
    docstring). ``handler`` serves one connection (``VenueServer.set_private``); construct it on
    (or before starting) the loop the engine runs on. ``stats``: connections, logins, pushes,
    slow_closed, push_errors (a push that failed to build: counted, the engine's command goes on)."""

    def __init__(self, api, *, max_queue: int = 10_000) -> None:
        self.api = api
        self.max_queue = int(max_queue)
        self._perps: dict[str, str] = dict(api.mix.perps)  # symbol -> margin coin
        symbols = [s for s in api.engine.rules if s not in self._perps]
        coins = []
        for s in symbols:
            with suppress(ValueError):
                coins.append(base_coin(s))
        self._coins = [*coins, QUOTE_COIN]
        self.kinds = {INST_TYPE: Kind(CHANNELS, frozenset(symbols), frozenset(self._coins), self._spot_snapshot)}
        if self._perps:
            self.kinds[MIX_INST_TYPE] = Kind(MIX_CHANNELS, frozenset(self._perps), frozenset(self._perps.values()),
                                             self._mix_snapshot)
        self._conns: dict[Session, asyncio.Queue] = {}
        self.stats = {"connections_total": 0, "logins": 0, "pushes": 0, "slow_closed": 0, "push_errors": 0}
        api.engine.account.watchers.append(self._on_change)

    def session(self) -> Session:
        return Session(self.api.verify_login, self.kinds)

    def _balances(self, coin: str | None) -> list[dict]:
        return self.api.balances(coin)

    def _spot_snapshot(self, channel: str, target: str | None) -> list[dict] | None:
        return self._balances(target) if channel == "account" else None

    def _mix_snapshot(self, channel: str, target: str | None) -> list[dict] | None:
        if channel == "positions":
            return self._positions()
        return self._mix_accounts(target) if channel == "account" else None

    def _positions(self) -> list[dict]:
        return [{**p, "instId": p["symbol"], "posId": p["symbol"], "frozen": "0", "marginRate": "0"}
                for p in self.api.mix.positions({"productType": MIX_INST_TYPE})]

    def _mix_accounts(self, coin: str | None) -> list[dict]:
        return [{"marginCoin": a["marginCoin"], "frozen": "0", "available": a["available"],
                 "maxOpenPosAvailable": a["available"], "maxTransferOut": a["maxTransferOut"],
                 "equity": a["accountEquity"], "usdtEquity": a["usdtEquity"], "crossedRiskRate": "0",
                 "unrealizedPL": a["unrealizedPL"]}
                for a in self.api.mix.accounts({"productType": MIX_INST_TYPE}) if coin in (None, a["marginCoin"])]

    async def handler(self, ws) -> None:
        """Serve one private connection until it closes."""
        sess, queue = self.session(), asyncio.Queue(self.max_queue)
        self._conns[sess] = queue
        self.stats["connections_total"] += 1
        writer = asyncio.create_task(self._writer(ws, queue))
        try:
            async for msg in ws:
                if isinstance(msg, bytes) or len(msg) > MAX_MESSAGE_BYTES:
                    msg = ""
                before = sess.logged_in
                for f in sess.on_text(msg):
                    self._send(sess, f)
                self.stats["logins"] += int(sess.logged_in and not before)
        except ConnectionClosed:
            pass
        finally:
            self._conns.pop(sess, None)
            writer.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await writer

    async def _writer(self, ws, queue: asyncio.Queue) -> None:
        while True:
            text = await queue.get()
            if text is None:
                await ws.close(1008, "too slow")
                return
            await ws.send(text)

    def _send(self, sess: Session, text: str) -> None:
        queue = self._conns.get(sess)
        if queue is None:
            return
        try:
            queue.put_nowait(text)
        except asyncio.QueueFull:
            self.stats["slow_closed"] += 1
            self._conns.pop(sess, None)
            with suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            queue.put_nowait(None)

    def _on_change(self, kind: str, o, fill) -> None:
        """An account change (``AccountState.watchers``): the pushes it makes. Never raises (it runs
        inside the engine's command): a failure is counted in ``push_errors``."""
        if not self._conns:
            return
        try:
            self._push_change(kind, o, fill)
        except Exception:  # noqa: BLE001 - a bug here must not stop the engine's command halfway
            self.stats["push_errors"] += 1

    def _push_change(self, kind: str, o, fill) -> None:
        now = _now_ms()
        symbol = o.symbol if o is not None else fill.symbol if fill is not None else None
        if symbol in self._perps or (symbol is None and kind == "adjust" and self._perps):
            self._push_mix(kind, o, fill, now)
        if symbol in self._perps:
            return
        coins = []
        if o is not None:
            data = order_push(o, fill)
            self._fan("orders", o.symbol, [data], now)
        if fill is not None:
            self._fan("fill", fill.symbol, [fill_push(fill)], now)
            with suppress(ValueError):
                coins.append(base_coin(fill.symbol))
            coins.append(QUOTE_COIN)
        elif kind == "adjust":
            coins = list(self._coins)
        for c in coins:
            self._fan("account", c, self._balances(c), now)

    def _push_mix(self, kind: str, o, fill, now: int) -> None:
        """A perpetual's change under USDT-FUTURES: its order, its fill, then the positions and the
        margin coin's account (an adjustment of unknown symbol: the positions of every perpetual)."""
        m = MIX_INST_TYPE
        if o is not None:
            self._fan("orders", o.symbol, [mix_order_push(o, fill, self._perps[o.symbol])], now, m)
        if fill is not None:
            self._fan("fill", fill.symbol, [{**fill_json(fill), "uTime": str(fill.ts_ms)}], now, m)
        if fill is not None or kind == "adjust":
            positions = self._positions()
            for sess in list(self._conns):  # once per connection, whichever perpetual it watches
                targets = [fill.symbol] if fill is not None else list(self._perps)
                arg = next((a for a in (sess.wants("positions", t, m) for t in targets) if a), None)
                if arg is not None:
                    self.stats["pushes"] += 1
                    self._send(sess, push(arg, positions, now))
        if fill is not None:
            coin = self._perps[fill.symbol]
            self._fan("account", coin, self._mix_accounts(coin), now, m)

    def _fan(self, channel: str, target: str, data: list, now: int, inst_type: str = INST_TYPE) -> None:
        for sess in list(self._conns):
            arg = sess.wants(channel, target, inst_type)
            if arg is not None:
                self.stats["pushes"] += 1
                self._send(sess, push(arg, data, now))
