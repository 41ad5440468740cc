"""The paper venue's account in memory (sans-I/O): our orders by id and clientOid, the fills, the
positions and cash, when each balance last changed, and the id counters; every change is first
handed as a record to the ``on_event`` callback, then applied, and ``restore`` rebuilds the whole
account from those records. The matching (``pipeline.venue.orders.OrderEngine``) decides what
changes; ``pipeline.venue.account`` writes the records to the account log file and reads them back.

Records (JSON-able dicts; decimals as strings, ids and ms as ints; ``ACCOUNT_RECORDS``)::

    account  account_id created_ms                 the first record: the account's identity
    order    id coid sym side force px sz ts seq   an order accepted (px / sz: the texts received)
             [type bsz]                            a market order: ``type`` "market" (absent: limit);
                                                   a market buy's ``sz`` is the quote coin to spend,
                                                   ``bsz`` the base size it was given (what fills)
    fill     tid id px sz scope ts [fee]           one fill of order ``id`` at ``px``; ``fee``: its
                                                   quote-coin fee (decimal string), present only when
                                                   not 0 (a record without it, e.g. one written before
                                                   fees existed, restores with fee 0)
    cancel   id ts                                 order ``id`` cancelled (by request, ioc remainder,
                                                   killed fok)
    adjust   sym delta ts                          admin: the position of ``sym`` changed by ``delta``
                                                   without an order (``adjust_position``)

Balances: the position of a symbol is the sum of its signed fills (buys +, sells -) and adjustments;
the quote coin's (USDT) cash is -sum(signed price * size + fee) of every fill of a USDT-quoted
symbol (the fee is 0 unless the engine has a ``pipeline.venue.fees.FeeSchedule``; an adjustment
moves no cash). Both may go negative: the paper venue lends without limit (a negative base balance
is a paper short).

Ids: every fill gets a new, increasing ``tradeId``; orderIds are increasing too. Both start from a
base taken from the account's creation time (``created_ms * 1000``), or above the account's last
ones after ``restore`` (whichever is higher), so ids do not repeat after a venue restart.
``clientOid`` is unique for the account's whole life (restored orders included).

Watchers (``watchers``: callables ``(kind, order, fill)``) are told of each change AFTER it is
applied ("order" accepted, "fill", "cancel", "adjust" with order None): the private WebSocket's
pushes (``pipeline.venue.private_ws``). Restoring tells them nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import NamedTuple

from pipeline.trading.bitget.protocol import QUOTE_COIN
from pipeline.venue.errors import VenueError
from pipeline.venue.order_fields import (CODE_PARAM_EMPTY, CODE_PARAM_ERROR, FORCES, ORDER_TYPES, SIDES, OrderRejected, fmt,
                                         int_id)

#: ``on_event`` record types (field lists in the module docstring)
ACCOUNT_RECORDS = frozenset(("account", "order", "fill", "cancel", "adjust"))

STATUS_LIVE = "live"
STATUS_PARTIAL = "partially_filled"
STATUS_FILLED = "filled"
STATUS_CANCELLED = "cancelled"
OPEN_STATUSES = (STATUS_LIVE, STATUS_PARTIAL)

_ZERO = Decimal(0)
_AVG_QUANT = Decimal("1e-12")


class Fill(NamedTuple):
    """One fill of one of our orders. ``fee``: what it cost in the symbol's quote coin (0 without a
    fee schedule; negative: a maker rebate); ``scope`` (alias ``liquidity``): "maker" | "taker"."""

    trade_id: int
    order_id: int
    client_oid: str
    symbol: str
    side: str
    price: Decimal
    size: Decimal
    scope: str  # "maker" | "taker"
    ts_ms: int
    fee: Decimal = _ZERO
    order_type: str = "limit"

    @property
    def liquidity(self) -> str:
        """``scope``: "maker" (our resting order was hit) or "taker" (our order took the book)."""
        return self.scope

    def to_json(self) -> dict:
        """The ``fills`` endpoint's object. A fill with a fee also carries Bitget v2's ``feeDetail``
        object: ``{"deduction": "no", "feeCoin": <quote coin>, "totalDeductionFee": "0",
        "totalFee": <-fee>}`` (Bitget's sign: a fee paid is negative); a fill without one (no fee
        schedule) has no ``feeDetail``, as before fees existed."""
        out = {"tradeId": str(self.trade_id), "orderId": str(self.order_id), "clientOid": self.client_oid,
               "symbol": self.symbol, "orderType": self.order_type, "side": self.side, "priceAvg": fmt(self.price),
               "size": fmt(self.size), "amount": fmt(self.price * self.size), "tradeScope": self.scope,
               "cTime": str(self.ts_ms), "uTime": str(self.ts_ms)}
        if self.fee != 0:
            out["feeDetail"] = {"deduction": "no", "feeCoin": QUOTE_COIN if self.symbol.endswith(QUOTE_COIN) else "",
                                "totalDeductionFee": "0", "totalFee": fmt(-self.fee)}
        return out


class Order:
    """One of our orders at the venue (mutable state owned by the account)."""

    __slots__ = ("order_id", "client_oid", "symbol", "side", "force", "price", "size", "price_text", "size_text",
                 "filled", "notional", "status", "c_ms", "u_ms", "seq", "order_type", "fee")

    def __init__(self, order_id: int, client_oid: str, symbol: str, side: str, force: str, price: Decimal | None,
                 size: Decimal, price_text: str, size_text: str, now_ms: int, seq: int,
                 order_type: str = "limit") -> None:
        """``price`` None: a market order (``order_type`` "market"); ``size``: the base size that
        fills (a market buy's ``size_text`` is the quote coin it was given to spend)."""
        self.order_id = order_id
        self.client_oid = client_oid
        self.symbol = symbol
        self.side = side
        self.force = force
        self.price = price
        self.size = size
        self.price_text = price_text
        self.size_text = size_text
        self.filled = _ZERO
        self.notional = _ZERO  # sum of price * size of the fills
        self.status = STATUS_LIVE
        self.c_ms = now_ms
        self.u_ms = now_ms
        self.seq = seq
        self.order_type = order_type
        self.fee = _ZERO  # the fills' fees in the quote coin

    @property
    def remaining(self) -> Decimal:
        return self.size - self.filled

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @property
    def avg_price(self) -> Decimal:
        return (self.notional / self.filled).quantize(_AVG_QUANT, ROUND_HALF_EVEN) if self.filled else _ZERO

    def to_json(self) -> dict:
        """The ``orderInfo`` / ``unfilled-orders`` object (Bitget v2's fields; ``size`` of a market buy
        is the quote coin it was given; ``feeDetail``, only when the fills paid a fee, is a JSON
        TEXT, as the exchange sends it: ``{"<coin>": {"deduction": false, "feeCoinCode", "totalFee":
        <-fee>, "totalDeductionFee": 0}}``)."""
        out = {"orderId": str(self.order_id), "clientOid": self.client_oid, "symbol": self.symbol,
               "side": self.side, "orderType": self.order_type, "force": self.force, "price": self.price_text,
               "size": self.size_text, "baseVolume": fmt(self.filled), "quoteVolume": fmt(self.notional),
               "priceAvg": fmt(self.avg_price), "status": self.status, "enterPointSource": "API",
               "orderSource": "market" if self.order_type == "market" else "normal", "cTime": str(self.c_ms),
               "uTime": str(self.u_ms)}
        if self.fee != 0:
            coin = QUOTE_COIN if self.symbol.endswith(QUOTE_COIN) else ""
            out["feeDetail"] = ('{"%s":{"deduction":false,"feeCoinCode":"%s","totalDeductionFee":0,"totalFee":%s}}'
                                % (coin, coin, fmt(-self.fee)))
        return out


class AccountState:
    """One account's orders, fills and balances (see the module docstring).

    ``symbols``: the served symbols (each starts with a zero position); ``created_ms``: the
    construction time, the id base and, until ``restore``, the account's creation time (with a
    random ``account_id`` of its own: an account that lives as long as this object);
    ``on_event``: called with each record BEFORE the change it describes is applied, or None. What
    it raises propagates out of the change (which is then not applied).
    """

    def __init__(self, symbols: Iterable[str], created_ms: int,
                 on_event: Callable[[dict], None] | None = None) -> None:
        self.on_event = on_event
        self.account_id = str(secrets.randbits(63) or 1)  # an account of this object's life until restored
        self.created_ms = int(created_ms)
        base = self.created_ms * 1000
        self.next_order_id = base + 1
        self.next_trade_id = base + 1
        self.seq = 0
        self.orders: dict[int, Order] = {}
        self.by_client_oid: dict[str, Order] = {}
        self.fills: list[Fill] = []
        self.positions: dict[str, Decimal] = dict.fromkeys(symbols, _ZERO)
        self.cash = _ZERO  # quote coin: -sum(signed price * size + fee) of the fills
        self._u_ms: dict[str, int] = {}  # symbol or QUOTE_COIN -> ms of its last balance change
        self._restored = False
        #: told of each change after it is applied (see the module docstring)
        self.watchers: list[Callable[[str, Order | None, Fill | None], None]] = []

    # -- queries ------------------------------------------------------------------------------

    def balance_u_ms(self, symbol_or_quote: str) -> int:
        """When the position of a symbol (or, given ``QUOTE_COIN``, the cash) last changed, in ms;
        ``created_ms`` when it never did."""
        return self._u_ms.get(symbol_or_quote, self.created_ms)

    def find(self, order_id, client_oid) -> Order | None:
        """An order by venue id (when given) or clientOid; None when there is no such order.

        Raises:
            OrderRejected: 40019 neither given; 40020 a bad id, a clientOid that is not a string.
        """
        if order_id not in (None, ""):
            return self.orders.get(int_id(order_id, "orderId"))
        if client_oid not in (None, ""):
            if not isinstance(client_oid, str):
                raise OrderRejected(CODE_PARAM_ERROR, "Parameter clientOid error: a string")
            return self.by_client_oid.get(client_oid)
        raise OrderRejected(CODE_PARAM_EMPTY, "Parameter orderId or clientOid cannot be empty")

    def fills_since(self, symbol: str | None = None, order_id: int | str | None = None,
                    id_greater_than: int | str | None = None, limit: int | None = None) -> list[Fill]:
        """The fills, oldest first, filtered by symbol, orderId, and tradeId > ``id_greater_than``;
        at most ``limit`` (the oldest ones) when given.

        Raises:
            OrderRejected: 40001 a non-integer id.
        """
        oid = int_id(order_id, "orderId") if order_id is not None else None
        gt = int_id(id_greater_than, "idGreaterThan") if id_greater_than is not None else None
        out = []
        for f in self.fills:  # trade ids increase along the list
            if gt is not None and f.trade_id <= gt:
                continue
            if (symbol is None or f.symbol == symbol) and (oid is None or f.order_id == oid):
                out.append(f)
                if limit is not None and len(out) >= limit:
                    break
        return out

    # -- changes (each one recorded, then applied) --------------------------------------------

    def open_order(self, client_oid: str | None, symbol: str, side: str, force: str, price: Decimal | None,
                   size: Decimal, price_text: str, size_text: str, now_ms: int, order_type: str = "limit") -> Order:
        """Accept a new order (the next id and seq; ``client_oid`` None: "venue<id>"); returns it.
        A market order has ``price`` None; ``size`` is the base size that fills."""
        order_id = self.next_order_id
        seq = self.seq + 1
        coid = client_oid if client_oid is not None else f"venue{order_id}"
        rec = {"t": "order", "id": order_id, "coid": coid, "sym": symbol, "side": side, "force": force,
               "px": price_text, "sz": size_text, "ts": now_ms, "seq": seq}
        if order_type != "limit":
            rec["type"] = order_type
            rec["bsz"] = fmt(size)
        self._emit(rec)
        self.next_order_id += 1
        self.seq = seq
        o = Order(order_id, coid, symbol, side, force, price, size, price_text, size_text, now_ms, seq, order_type)
        self.orders[order_id] = o
        self.by_client_oid[o.client_oid] = o
        self._tell("order", o, None)
        return o

    def record_fill(self, o: Order, price: Decimal, qty: Decimal, scope: str, now_ms: int,
                    fee: Decimal = _ZERO) -> None:
        """One fill of ``o`` (the next trade id) costing ``fee`` in the quote coin (recorded only when
        not 0)."""
        tid = self.next_trade_id
        rec = {"t": "fill", "tid": tid, "id": o.order_id, "px": fmt(price), "sz": fmt(qty), "scope": scope,
               "ts": now_ms}
        if fee != 0:
            rec["fee"] = fmt(fee)
        self._emit(rec)
        self.next_trade_id += 1
        self._apply_fill(o, tid, price, qty, scope, now_ms, fee)
        self._tell("fill", o, self.fills[-1])

    def record_cancel(self, o: Order, now_ms: int) -> None:
        """``o`` cancelled (by request, an ioc remainder, a killed fok)."""
        self._emit({"t": "cancel", "id": o.order_id, "ts": now_ms})
        o.status = STATUS_CANCELLED
        o.u_ms = now_ms
        self._tell("cancel", o, None)

    def record_adjust(self, symbol: str, delta: Decimal, now_ms: int) -> Decimal:
        """The position of ``symbol`` changed by ``delta`` without an order; returns the new position."""
        self._emit({"t": "adjust", "sym": symbol, "delta": fmt(delta), "ts": now_ms})
        self._apply_adjust(symbol, delta, now_ms)
        self._tell("adjust", None, None)
        return self.positions[symbol]

    def _emit(self, rec: dict) -> None:
        if self.on_event is not None:
            self.on_event(rec)

    def _tell(self, kind: str, o: Order | None, fill: Fill | None) -> None:
        for watch in self.watchers:
            watch(kind, o, fill)

    def _apply_fill(self, o: Order, tid: int, price: Decimal, qty: Decimal, scope: str, now_ms: int,
                    fee: Decimal) -> None:
        """The account side of one fill (shared by ``record_fill`` and ``restore``)."""
        o.filled += qty
        o.notional += price * qty
        o.status = STATUS_FILLED if o.filled >= o.size else STATUS_PARTIAL
        o.u_ms = now_ms
        o.fee += fee
        self.fills.append(Fill(tid, o.order_id, o.client_oid, o.symbol, o.side, price, qty, scope, now_ms, fee,
                               o.order_type))
        signed = qty if o.side == "buy" else -qty
        self.positions[o.symbol] += signed
        self._u_ms[o.symbol] = now_ms
        if o.symbol.endswith(QUOTE_COIN):  # a symbol of another quote moves no USDT
            self.cash -= signed * price + fee
            self._u_ms[QUOTE_COIN] = now_ms

    def _apply_adjust(self, symbol: str, delta: Decimal, now_ms: int) -> None:
        self.positions[symbol] += delta
        self._u_ms[symbol] = now_ms

    # -- restore ------------------------------------------------------------------------------

    def restore(self, records: Iterable[Mapping]) -> int:
        """Rebuild the account from its records (what ``on_event`` was given, in order; the first
        one the ``account`` record), on a fresh account: orders with their fields and status, fills,
        positions, cash, the clientOids seen, ``account_id`` / ``created_ms``; the next order / trade
        id goes above the last ones (and never below the construction base). ``on_event`` is not
        called. Returns the number of records.

        Raises:
            VenueError: the account was already restored or has orders; no records; the first record
                not an ``account`` one (or a later one that is); a record of an unknown type, with a
                missing or malformed field, a repeated id or clientOid, or about an order no earlier
                record placed (the message names the record's index). The account is then left
                half-restored: discard it.
        """
        if self._restored or self.orders or self.fills:
            raise VenueError("restore needs a fresh engine (no account, no orders)")
        self._restored = True
        n = 0
        for rec in records:
            try:
                self._restore_one(rec, n == 0)
            except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
                raise VenueError(f"account record {n}: {type(exc).__name__}: {exc}"[:300]) from None
            n += 1
        if n == 0:
            raise VenueError("no account record to restore")
        if self.orders:
            self.next_order_id = max(self.next_order_id, max(self.orders) + 1)
            self.seq = max(self.seq, max(o.seq for o in self.orders.values()))
        if self.fills:
            self.next_trade_id = max(self.next_trade_id, max(f.trade_id for f in self.fills) + 1)
        return n

    def _restore_one(self, rec: Mapping, first: bool) -> None:
        t = rec["t"]
        if first != (t == "account"):
            raise ValueError("the account record must be the first record, and only it")
        if t == "account":
            aid = rec["account_id"]
            if not (isinstance(aid, str) and aid.isascii() and aid.isdigit() and len(aid) <= 20):
                raise ValueError("account_id must be a decimal string")
            self.account_id = aid
            self.created_ms = _rec_int(rec, "created_ms")
        elif t == "order":
            self._restore_order(rec)
        elif t == "fill":
            o = self.orders.get(_rec_int(rec, "id"))
            if o is None:
                raise ValueError(f"a fill of order {rec['id']} that no earlier record placed")
            tid = _rec_int(rec, "tid")
            if self.fills and tid <= self.fills[-1].trade_id:
                raise ValueError(f"trade id {tid} not above the previous one")
            scope = rec["scope"]
            if scope not in ("maker", "taker"):
                raise ValueError(f"bad scope {scope!r}")
            fee = Decimal(_rec_str(rec, "fee")) if "fee" in rec else _ZERO  # older records: no fee
            if not fee.is_finite():
                raise ValueError(f"bad fee {rec['fee']!r}")
            self._apply_fill(o, tid, Decimal(_rec_str(rec, "px")), Decimal(_rec_str(rec, "sz")), scope,
                             _rec_int(rec, "ts"), fee)
        elif t == "cancel":
            o = self.orders.get(_rec_int(rec, "id"))
            if o is None:
                raise ValueError(f"a cancel of order {rec['id']} that no earlier record placed")
            o.status = STATUS_CANCELLED
            o.u_ms = _rec_int(rec, "ts")
        elif t == "adjust":
            sym = _rec_str(rec, "sym")
            self.positions.setdefault(sym, _ZERO)
            self._apply_adjust(sym, Decimal(_rec_str(rec, "delta")), _rec_int(rec, "ts"))
        else:
            raise ValueError(f"unknown record type {str(t)[:32]!r}")

    def _restore_order(self, rec: Mapping) -> None:
        oid, seq, ts = _rec_int(rec, "id"), _rec_int(rec, "seq"), _rec_int(rec, "ts")
        coid, sym, px, sz = (_rec_str(rec, k) for k in ("coid", "sym", "px", "sz"))
        side, force, otype = rec["side"], rec["force"], rec.get("type", "limit")
        if side not in SIDES or force not in FORCES or otype not in ORDER_TYPES:
            raise ValueError(f"bad side, force or type {side!r} {force!r} {otype!r}")
        if oid in self.orders or coid in self.by_client_oid:
            raise ValueError(f"order {oid} / clientOid {coid!r} placed twice")
        market = otype == "market"
        o = Order(oid, coid, sym, side, force, None if market else Decimal(px),
                  Decimal(_rec_str(rec, "bsz") if market else sz), px, sz, ts, seq, otype)
        self.orders[oid] = o
        self.by_client_oid[coid] = o
        self.positions.setdefault(sym, _ZERO)


def _rec_int(rec: Mapping, name: str) -> int:
    """An integer field of an account record. Raises KeyError (missing), TypeError (not an int)."""
    v = rec[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    return v


def _rec_str(rec: Mapping, name: str) -> str:
    """A non-empty string field of an account record. Raises KeyError (missing), TypeError."""
    v = rec[name]
    if not isinstance(v, str) or not v:
        raise TypeError(f"{name} must be a non-empty string")
    return v
