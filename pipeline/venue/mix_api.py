"""The paper venue's USDT-FUTURES ("mix") order routes (sans-I/O), served by ``rest_api.RestApi``
beside the spot ones: the bodies and queries of Bitget v2's perpetual endpoints in, the answer's data
out, against the same ``OrderEngine`` (one book, one matching, one account per symbol).

A symbol is a perpetual when the config says so (``InstrumentConfig.product_type = "USDT-FUTURES"``;
``MixRoutes(engine, perps)``, ``perps``: symbol -> margin coin). Its contract size is its lot: sizes are
base-coin amounts on the lot step, as the exchange's are, a market buy's too (``MixRoutes`` marks the
perpetuals ``base_sized`` on the engine; a spot market buy spends quote coin). The position is the
engine's signed position of the symbol, in one-way mode (``posMode`` "one_way_mode"; ``all-position``
gives it as ``holdSide`` long / short and ``total`` = |position|). Funding is not simulated: a paper
perpetual's position costs nothing to hold, and its cash is spot's (fills' notional and fees), not
margin; the leverage is 1.

Routes (every one refuses a ``productType`` other than USDT-FUTURES, any case, with 40020, a symbol
that is not a perpetual here with 40034, and a ``marginCoin``, when given, other than the symbol's with
40020)::

    POST /api/v2/mix/order/place-order         symbol, productType, marginMode, marginCoin, size, price,
                                               side, orderType, force, clientOid, reduceOnly (YES / NO)
    POST /api/v2/mix/order/cancel-order        symbol, productType, orderId | clientOid
    POST /api/v2/mix/order/batch-cancel-orders symbol, productType [, orderIdList]: successList / failureList
    POST /api/v2/mix/order/cancel-all-orders   productType [, marginCoin]: every perpetual's open orders
    GET  /api/v2/mix/order/detail              symbol, productType, orderId | clientOid
    GET  /api/v2/mix/order/orders-pending      productType [, symbol]: {"entrustedList", "endId"}
    GET  /api/v2/mix/order/fills               productType [, symbol, orderId, idGreaterThan, limit]:
                                               {"fillList", "endId"} (no clientOid, as the exchange)
    GET  /api/v2/mix/position/all-position     productType [, marginCoin]: the non-zero positions
    GET  /api/v2/mix/account/accounts          productType: one account per margin coin, {"marginCoin",
                                               "locked":"0","available","crossedMaxAvailable",
                                               "isolatedMaxAvailable","maxTransferOut","accountEquity",
                                               "usdtEquity","btcEquity":"0","crossedRiskRate":"0",
                                               "unrealizedPL","coupon":"0","unionTotalMargin",
                                               "unionAvailable","unionMm":"0","assetMode":"single"}:
                                               accountEquity: the perpetuals' cash (-sum of signed fill
                                               notional and fees) plus their positions at the book's mid
                                               (the account's P&L since it opened: it starts at 0);
                                               unrealizedPL: the positions' (mid - openPriceAvg) * size;
                                               nothing is held as margin: available = maxTransferOut =
                                               accountEquity

A position's ``openPriceAvg`` is the average price of the fills that opened it (a fill that reduces
it leaves the average; one that crosses zero opens the new side at its price).

The exchange's codes: a reduce-only order that would open or grow a position (none to reduce, the
same side as the position, or more than it) 22002; an unknown order on cancel 40768, on detail 40109;
a clientOid seen before 40786; a notional above the venue's limit 40762; the engine's field checks
keep their codes (40019 / 40020 / 41103 / 40808 / 43027).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Callable

from pipeline.venue.order_fields import (CODE_DUPLICATE, CODE_NO_ORDER, CODE_NOTIONAL, CODE_PARAM_ERROR,
                                         CODE_SIZE_SCALE, CODE_UNKNOWN_SYMBOL, OrderRejected, fmt)

PRODUCT = "USDT-FUTURES"
PREFIX = "/api/v2/mix/order/"
PLACE = PREFIX + "place-order"
CANCEL = PREFIX + "cancel-order"
BATCH_CANCEL = PREFIX + "batch-cancel-orders"
CANCEL_ALL = PREFIX + "cancel-all-orders"
DETAIL = PREFIX + "detail"
PENDING = PREFIX + "orders-pending"
FILLS = PREFIX + "fills"
POSITIONS = "/api/v2/mix/position/all-position"
ACCOUNTS = "/api/v2/mix/account/accounts"
ROUTES = {PLACE: "POST", CANCEL: "POST", BATCH_CANCEL: "POST", CANCEL_ALL: "POST", DETAIL: "GET", PENDING: "GET",
          FILLS: "GET", POSITIONS: "GET", ACCOUNTS: "GET"}
RATE_LIMITED = frozenset({PLACE, CANCEL, BATCH_CANCEL, CANCEL_ALL})

CODE_NO_POSITION = "22002"
CODE_CANCEL_NO_ORDER = "40768"
CODE_DETAIL_NO_ORDER = "40109"
CODE_MIX_DUPLICATE = "40786"
CODE_MIX_BALANCE = "40762"
_CODE_MAP = {CODE_DUPLICATE: CODE_MIX_DUPLICATE, CODE_NOTIONAL: CODE_MIX_BALANCE}
MIX_STATUS = {"cancelled": "canceled"}


def _mix_error(exc: OrderRejected, no_order: str) -> OrderRejected:
    """The engine's refusal in the mix endpoints' codes."""
    code = no_order if exc.code == CODE_NO_ORDER else _CODE_MAP.get(exc.code, exc.code)
    return OrderRejected(code, exc.msg) if code != exc.code else exc


class MixRoutes:
    """The mix handlers (see the module docstring): ``handlers`` maps each path to its function
    (body or query in, data out; raises ``OrderRejected``)."""

    def __init__(self, engine, perps: dict[str, str]):
        self.engine = engine
        self.perps = dict(perps)  # symbol -> margin coin
        engine.base_sized = engine.base_sized | frozenset(self.perps)  # a perpetual's market buy: base size
        self.handlers: dict[str, Callable[[dict], object]] = {
            PLACE: self.place, CANCEL: self.cancel, BATCH_CANCEL: self.batch_cancel, CANCEL_ALL: self.cancel_all,
            DETAIL: self.detail, PENDING: self.pending, FILLS: self.fills, POSITIONS: self.positions,
            ACCOUNTS: self.accounts}

    # -- checks -------------------------------------------------------------------------------
    def _product(self, args: dict) -> None:
        pt = args.get("productType")
        if not isinstance(pt, str) or pt.upper() != PRODUCT:
            raise OrderRejected(CODE_PARAM_ERROR, f"Parameter productType error: {str(pt)[:20]!r}")
        coin = args.get("marginCoin")
        if coin is not None and (not isinstance(coin, str) or coin.upper() not in self.perps.values()):
            raise OrderRejected(CODE_PARAM_ERROR, f"Parameter marginCoin error: {str(coin)[:20]!r}")

    def _symbol(self, args: dict, required: bool = True) -> str | None:
        self._product(args)
        sym = args.get("symbol")
        if sym in (None, "") and not required:
            return None
        if not isinstance(sym, str) or sym.upper() not in self.perps:
            raise OrderRejected(CODE_UNKNOWN_SYMBOL, f"Parameter {str(sym)[:32]} does not exist")
        sym = sym.upper()
        coin = args.get("marginCoin")
        if coin is not None and coin.upper() != self.perps[sym]:
            raise OrderRejected(CODE_PARAM_ERROR, f"Parameter marginCoin error: {sym} settles in {self.perps[sym]}")
        return sym

    def _reduce_only(self, sym: str, side: object, size: object) -> None:
        """A reduce-only order must shrink the position without crossing zero. Raises OrderRejected 22002."""
        try:
            qty = Decimal(str(size))
        except ArithmeticError:
            return  # the engine's field check refuses it
        pos = self.engine.position(sym)
        if side == "buy":
            ok = pos < 0 and qty <= -pos
        elif side == "sell":
            ok = pos > 0 and qty <= pos
        else:
            return
        if not ok:
            raise OrderRejected(CODE_NO_POSITION, f"No position to close: reduce-only {side} {qty} against "
                                                  f"position {fmt(pos)}")

    def _on_lot(self, sym: str, size: object) -> None:
        """Raises OrderRejected: 40808 a size off the symbol's lot (anything not a decimal: the engine's check)."""
        lot = self.engine.rules[sym].lot_size
        try:
            qty = Decimal(str(size))
        except ArithmeticError:
            return
        if lot and qty.is_finite() and qty % lot != 0:
            raise OrderRejected(CODE_SIZE_SCALE, f"Parameter verification exception size checkBDScale error "
                                                 f"value={size} lot={fmt(lot)}")

    # -- POST ---------------------------------------------------------------------------------
    def place(self, body: dict) -> dict:
        sym = self._symbol(body)
        reduce_only = str(body.get("reduceOnly") or "NO").upper()
        if reduce_only not in ("YES", "NO"):
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter reduceOnly error: YES or NO")
        if body.get("marginMode", "crossed") not in ("crossed", "isolated"):
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter marginMode error: crossed or isolated")
        if reduce_only == "YES":
            self._reduce_only(sym, body.get("side"), body.get("size"))
        if body.get("orderType") == "market" and body.get("side") == "buy":  # base-sized: on the lot
            self._on_lot(sym, body.get("size"))
        spot = {k: body[k] for k in ("side", "orderType", "force", "price", "size", "clientOid") if k in body}
        try:
            o = self.engine.place({**spot, "symbol": sym})
        except OrderRejected as exc:
            raise _mix_error(exc, CODE_CANCEL_NO_ORDER) from None
        return {"orderId": str(o.order_id), "clientOid": o.client_oid}

    def cancel(self, body: dict) -> dict:
        sym = self._symbol(body)
        try:
            o = self.engine.cancel(sym, body.get("orderId"), body.get("clientOid"))
        except OrderRejected as exc:
            raise _mix_error(exc, CODE_CANCEL_NO_ORDER) from None
        return {"orderId": str(o.order_id), "clientOid": o.client_oid}

    def batch_cancel(self, body: dict) -> dict:
        sym = self._symbol(body)
        ids = body.get("orderIdList")
        if ids is None:
            done = self.engine.cancel_symbol(sym)
            return {"successList": [_ids(o) for o in done], "failureList": []}
        if not isinstance(ids, list) or not 0 < len(ids) <= 50 or not all(isinstance(e, dict) for e in ids):
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter orderIdList error: 1..50 objects")
        ok, failed = [], []
        for e in ids:
            try:
                ok.append(_ids(self.engine.cancel(sym, e.get("orderId"), e.get("clientOid"))))
            except OrderRejected as exc:
                err = _mix_error(exc, CODE_CANCEL_NO_ORDER)
                failed.append({"orderId": str(e.get("orderId") or ""), "clientOid": str(e.get("clientOid") or ""),
                               "errorMsg": err.msg, "errorCode": err.code})
        return {"successList": ok, "failureList": failed}

    def cancel_all(self, body: dict) -> dict:
        self._product(body)
        coin = body.get("marginCoin")
        done = []
        for sym, c in sorted(self.perps.items()):
            if coin is None or coin.upper() == c:
                done.extend(self.engine.cancel_symbol(sym))
        return {"successList": [_ids(o) for o in done], "failureList": []}

    # -- GET ----------------------------------------------------------------------------------
    def detail(self, q: dict) -> dict:
        sym = self._symbol(q)
        try:
            o = self.engine.order(q.get("orderId"), q.get("clientOid"))
        except OrderRejected as exc:
            raise _mix_error(exc, CODE_DETAIL_NO_ORDER) from None
        if o.symbol != sym:
            raise OrderRejected(CODE_DETAIL_NO_ORDER, "the order does not exist")
        return self._order_json(o)

    def pending(self, q: dict) -> dict:
        sym = self._symbol(q, required=False)
        orders = [o for o in self.engine.open_orders(sym) if o.symbol in self.perps]
        return {"entrustedList": [self._order_json(o) for o in orders] or None,
                "endId": str(orders[-1].order_id) if orders else ""}

    def fills(self, q: dict) -> dict:
        sym = self._symbol(q, required=False)
        limit = q.get("limit")
        if limit is not None:
            if not (limit.isascii() and limit.isdigit() and 0 < int(limit) <= 1_000_000):
                raise OrderRejected(CODE_PARAM_ERROR, "Parameter limit error: a positive integer")
            limit = int(limit)
        got = self.engine.fills_since(sym, q.get("orderId") or None, q.get("idGreaterThan") or None, None)
        rows = [f for f in got if f.symbol in self.perps][:limit]
        return {"fillList": [fill_json(f) for f in rows] or None, "endId": str(rows[-1].trade_id) if rows else ""}

    def positions(self, q: dict) -> list[dict]:
        self._product(q)
        coin = q.get("marginCoin")
        out = []
        for sym, c in sorted(self.perps.items()):
            pos = self.engine.position(sym)
            if pos == 0 or (coin is not None and coin.upper() != c):
                continue
            u, entry, mid = str(self.engine.balance_u_ms(sym)), self._entry(sym), self._mid(sym)
            out.append({"marginCoin": c, "symbol": sym, "holdSide": "long" if pos > 0 else "short",
                        "openDelegateSize": "0", "marginSize": "0", "available": fmt(abs(pos)), "locked": "0",
                        "total": fmt(abs(pos)), "leverage": "1", "achievedProfits": "0", "openPriceAvg": fmt(entry),
                        "marginMode": "crossed", "posMode": "one_way_mode", "unrealizedPL": fmt(pos * (mid - entry)),
                        "markPrice": fmt(mid), "totalFee": "", "assetMode": "single", "cTime": u, "uTime": u})
        return out

    def accounts(self, q: dict) -> list[dict]:
        self._product(q)
        out = []
        for coin in sorted(set(self.perps.values())):
            syms = [s for s, c in self.perps.items() if c == coin]
            cash = -sum(((f.price * f.size if f.side == "buy" else -f.price * f.size) + f.fee
                         for f in self.engine.fills if f.symbol in syms), Decimal(0))
            equity = fmt(cash + sum((self.engine.position(s) * self._mid(s) for s in syms), Decimal(0)))
            upl = fmt(sum((self.engine.position(s) * (self._mid(s) - self._entry(s)) for s in syms), Decimal(0)))
            out.append({"marginCoin": coin, "locked": "0", "available": equity, "crossedMaxAvailable": equity,
                        "isolatedMaxAvailable": equity, "maxTransferOut": equity, "accountEquity": equity,
                        "usdtEquity": equity, "btcEquity": "0", "crossedRiskRate": "0", "unrealizedPL": upl,
                        "coupon": "0", "unionTotalMargin": equity, "unionAvailable": equity, "unionMm": "0",
                        "assetMode": "single", "crossedUnrealizedPL": upl, "isolatedUnrealizedPL": "0"})
        return out

    def _entry(self, sym: str) -> Decimal:
        """The average opening price of ``sym``'s position (0 when flat; see the module docstring)."""
        pos = avg = Decimal(0)
        for f in self.engine.fills:
            if f.symbol != sym:
                continue
            signed = f.size if f.side == "buy" else -f.size
            if pos == 0 or (pos > 0) == (signed > 0):  # opens or grows
                avg = (avg * abs(pos) + f.price * f.size) / (abs(pos) + f.size)
            elif abs(signed) > abs(pos):  # crosses zero: the rest opens the other side at this price
                avg = f.price
            pos += signed
        return avg if pos != 0 else Decimal(0)

    def _mid(self, sym: str) -> Decimal:
        """The mid of ``sym``'s book (one side only: that side's best; an empty book: 0)."""
        bids, asks = self.engine.book_levels(sym, 1)
        best = [Decimal(lv[0][0]) for lv in (bids, asks) if lv]
        return sum(best, Decimal(0)) / len(best) if best else Decimal(0)

    def _order_json(self, o) -> dict:
        """An order as detail / orders-pending write it."""
        d = o.to_json()
        return {"symbol": d["symbol"], "size": d["size"], "orderId": d["orderId"], "clientOid": d["clientOid"],
                "baseVolume": d["baseVolume"], "fee": "", "price": d["price"],
                "priceAvg": d["priceAvg"] if o.filled else "", "status": MIX_STATUS.get(d["status"], d["status"]),
                "side": d["side"], "force": d["force"], "totalProfits": "0", "posSide": "net",
                "marginCoin": self.perps.get(o.symbol, "USDT"), "quoteVolume": d["quoteVolume"], "leverage": "1",
                "marginMode": "crossed", "enterPointSource": "API", "tradeSide": f"{d['side']}_single",
                "posMode": "one_way_mode", "orderType": d["orderType"], "orderSource": d["orderSource"],
                "cTime": d["cTime"], "uTime": d["uTime"]}


def _ids(o) -> dict:
    return {"orderId": str(o.order_id), "clientOid": o.client_oid}


#: a fill's fee detail without a fee schedule (the exchange always lists one)
_NO_FEE = {"deduction": "no", "feeCoin": PRODUCT.split("-")[0], "totalDeductionFee": "0", "totalFee": "0"}


def fill_json(f) -> dict:
    """A fill as the mix fills endpoint writes it (no clientOid; ``baseVolume``, ``price``; ``feeDetail``
    a list of one, a zero fee without a fee schedule)."""
    d = f.to_json()
    fee = d.get("feeDetail")
    return {"tradeId": d["tradeId"], "symbol": d["symbol"], "orderId": d["orderId"], "price": d["priceAvg"],
            "baseVolume": d["size"], "feeDetail": [fee or _NO_FEE], "side": d["side"],
            "quoteVolume": d["amount"], "profit": "0", "enterPointSource": "api", "tradeSide": f"{d['side']}_single",
            "posMode": "one_way_mode", "tradeScope": d["tradeScope"], "cTime": d["cTime"]}
