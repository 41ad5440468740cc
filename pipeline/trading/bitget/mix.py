"""Bitget v2 USDT-margined perpetuals ("mix") REST, order side, sans-I/O: the signed requests and the
parsing of their answers, in the shapes of ``pipeline.trading.bitget.rest`` (``Request``, ``VenueOrder``,
``VenueFill``), so the order sender's cores handle both products alike. Signing is ``rest``'s.

Requests (every body and query carries ``productType`` = ``"USDT-FUTURES"``; bodies ``marginCoin``):

=======================  ==========================================  ===================================
builder                  endpoint                                    body / query (in this order)
=======================  ==========================================  ===================================
``build_place``          POST /api/v2/mix/order/place-order          symbol, productType, marginMode,
                                                                     marginCoin, size, price, side,
                                                                     orderType, force, clientOid,
                                                                     reduceOnly ("YES" / "NO")
``build_cancel``         POST /api/v2/mix/order/cancel-order         symbol, productType, marginCoin,
                                                                     clientOid | orderId
``build_batch_cancel``   POST /api/v2/mix/order/batch-cancel-orders  symbol, productType, marginCoin
                                                                     [, orderIdList: [{clientOid}]]
                                                                     (no list: every order of symbol)
``build_cancel_all``     POST /api/v2/mix/order/cancel-all-orders    productType, marginCoin
``build_order_detail``   GET  /api/v2/mix/order/detail               clientOid | orderId, productType,
                                                                     symbol (sorted by key)
``build_pending``        GET  /api/v2/mix/order/orders-pending       productType [, symbol]
``build_fills``          GET  /api/v2/mix/order/fills                productType [, symbol, orderId,
                                                                     idGreaterThan]
``build_positions``      GET  /api/v2/mix/position/all-position      marginCoin, productType
=======================  ==========================================  ===================================

One-way position mode: ``side`` is buy / sell, no ``tradeSide``; ``reduceOnly = "YES"`` marks an order
that may only shrink the position (the venue refuses it, 22002, when there is none to reduce).
Sizes are base-coin amounts (a whole number of contracts times the contract size, which is the
instrument's ``lot_size``). Answers: ``parse_orders`` reads detail (one object) and orders-pending
(``entrustedList``); ``parse_fills`` reads ``fillList`` (no clientOid there: ``""``, matched by orderId);
``parse_cancelled`` reads ``successList``; ``parse_positions`` gives symbol -> signed position
(``holdSide`` long: +total, short: -total). The venue writes ``canceled``; it is read as ``cancelled``.
An empty amount (``priceAvg`` of a live order) reads as 0.

The fills page: the exchange documents ``idLessThan`` / time bounds (newest first); ``idGreaterThan``
(oldest first, the spot cursor the sender's fill polls use) is what the paper venue serves.
"""

from __future__ import annotations

import math

import msgspec

from pipeline.trading.bitget.rest import (FORCE, SIDE, Request, VenueFill, VenueOrder, _dumps, _signed, fmt_decimal,
                                          on_step)
from pipeline.trading.bitget.signing import Credentials, query_string
from pipeline.trading.messages import Side, TimeInForce

PRODUCT = "USDT-FUTURES"
PLACE_PATH = "/api/v2/mix/order/place-order"
CANCEL_PATH = "/api/v2/mix/order/cancel-order"
BATCH_CANCEL_PATH = "/api/v2/mix/order/batch-cancel-orders"
CANCEL_ALL_PATH = "/api/v2/mix/order/cancel-all-orders"
DETAIL_PATH = "/api/v2/mix/order/detail"
PENDING_PATH = "/api/v2/mix/order/orders-pending"
FILLS_PATH = "/api/v2/mix/order/fills"
POSITIONS_PATH = "/api/v2/mix/position/all-position"
MARGIN_MODES = ("crossed", "isolated")
STATUS_ALIASES = {"canceled": "cancelled"}


class MixInstrument(msgspec.Struct, frozen=True):
    """What a mix request needs of an instrument (``InstrumentConfig`` has these fields)."""

    symbol: str
    tick_size: float
    lot_size: float
    margin_coin: str = "USDT"
    margin_mode: str = "crossed"


def place_body(inst, side: int, tif: int, price: float, size: float, client_oid: str, *,
               reduce_only: bool = False) -> str:
    """The mix place-order body text (``inst``: symbol, tick_size, lot_size, margin_coin, margin_mode).

    Raises:
        ValueError: unknown side, time in force or margin mode; price or size not positive, not finite,
            or off its tick / lot (contract) step.
    """
    try:
        side_t, force = SIDE[Side(side)], FORCE[TimeInForce(tif)]
    except (ValueError, KeyError):
        raise ValueError(f"bad side {side} or time in force {tif}") from None
    if inst.margin_mode not in MARGIN_MODES:
        raise ValueError(f"bad margin mode {inst.margin_mode!r}")
    for name, v, step in (("price", price, inst.tick_size), ("size", size, inst.lot_size)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} {v!r} is not positive and finite")
        if not on_step(v, step):
            raise ValueError(f"{name} {v!r} is not a multiple of {step!r}")
    return _dumps({"symbol": inst.symbol, "productType": PRODUCT, "marginMode": inst.margin_mode,
                   "marginCoin": inst.margin_coin, "size": fmt_decimal(size, inst.lot_size),
                   "price": fmt_decimal(price, inst.tick_size), "side": side_t, "orderType": "limit",
                   "force": force, "clientOid": client_oid, "reduceOnly": "YES" if reduce_only else "NO"})


def build_place(creds: Credentials, ts_ms: int, inst, side: int, tif: int, price: float, size: float,
                client_oid: str, *, reduce_only: bool = False) -> Request:
    """POST place-order. Raises ValueError as ``place_body``."""
    return build_place_with_body(creds, ts_ms, place_body(inst, side, tif, price, size, client_oid,
                                                          reduce_only=reduce_only))


def build_place_with_body(creds: Credentials, ts_ms: int, body: str) -> Request:
    """POST place-order with a body ``place_body`` already made (and so validated)."""
    return _signed(creds, ts_ms, "POST", PLACE_PATH, "", body)


def _ids(client_oid: str | None, order_id: str | None, what: str) -> dict:
    if client_oid:
        return {"clientOid": client_oid}
    if order_id:
        return {"orderId": order_id}
    raise ValueError(f"{what} needs a clientOid or an orderId")


def build_cancel(creds: Credentials, ts_ms: int, inst, *, client_oid: str | None = None,
                 order_id: str | None = None) -> Request:
    """POST cancel-order by clientOid (preferred) or orderId. Raises ValueError: neither id given."""
    body = {"symbol": inst.symbol, "productType": PRODUCT, "marginCoin": inst.margin_coin,
            **_ids(client_oid, order_id, "cancel")}
    return _signed(creds, ts_ms, "POST", CANCEL_PATH, "", _dumps(body))


def build_batch_cancel(creds: Credentials, ts_ms: int, inst, client_oids: list[str] | None = None) -> Request:
    """POST batch-cancel-orders: the listed orders of ``inst`` (at most 50), or, with no list, every
    order of its symbol (the sender's per-instrument cancel-all).

    Raises:
        ValueError: more than 50 ids.
    """
    body = {"symbol": inst.symbol, "productType": PRODUCT, "marginCoin": inst.margin_coin}
    if client_oids:
        if len(client_oids) > 50:
            raise ValueError(f"batch cancel takes at most 50 orders, got {len(client_oids)}")
        body["orderIdList"] = [{"clientOid": c} for c in client_oids]
    return _signed(creds, ts_ms, "POST", BATCH_CANCEL_PATH, "", _dumps(body))


def build_cancel_all(creds: Credentials, ts_ms: int, margin_coin: str = "USDT") -> Request:
    """POST cancel-all-orders: every order of the product type in ``margin_coin``."""
    return _signed(creds, ts_ms, "POST", CANCEL_ALL_PATH, "",
                   _dumps({"productType": PRODUCT, "marginCoin": margin_coin}))


def build_order_detail(creds: Credentials, ts_ms: int, symbol: str, *, client_oid: str | None = None,
                       order_id: str | None = None) -> Request:
    """GET order detail of ``symbol`` by clientOid or orderId. Raises ValueError: neither id given."""
    q = query_string({"symbol": symbol, "productType": PRODUCT, **_ids(client_oid, order_id, "detail")})
    return _signed(creds, ts_ms, "GET", DETAIL_PATH, q)


def build_pending(creds: Credentials, ts_ms: int, symbol: str | None = None) -> Request:
    """GET orders-pending (every symbol of the product type when ``symbol`` is None)."""
    return _signed(creds, ts_ms, "GET", PENDING_PATH, query_string({"productType": PRODUCT, "symbol": symbol}))


def build_fills(creds: Credentials, ts_ms: int, *, symbol: str | None = None, order_id: str | None = None,
                id_greater_than: int | None = None) -> Request:
    """GET fills, oldest first, optionally of one symbol / order and after trade id ``id_greater_than``."""
    q = query_string({"productType": PRODUCT, "symbol": symbol, "orderId": order_id,
                      "idGreaterThan": None if id_greater_than is None else int(id_greater_than)})
    return _signed(creds, ts_ms, "GET", FILLS_PATH, q)


def build_positions(creds: Credentials, ts_ms: int, margin_coin: str = "USDT") -> Request:
    """GET all-position of the product type in ``margin_coin``."""
    return _signed(creds, ts_ms, "GET", POSITIONS_PATH,
                   query_string({"productType": PRODUCT, "marginCoin": margin_coin}))


# ---------------------------------------------------------------------------------------- answers
_AMOUNTS = ("price", "size", "baseVolume", "priceAvg")


def _order_doc(d: dict) -> dict:
    """A mix order object in ``VenueOrder``'s terms: ``status`` (or the detail's ``state``) with
    ``canceled`` read as ``cancelled``, empty amounts as 0."""
    out = dict(d)
    status = str(out.get("status") or out.get("state") or "")
    out["status"] = STATUS_ALIASES.get(status, status)
    for k in _AMOUNTS:
        if out.get(k) in ("", None):
            out[k] = 0
    out.setdefault("clientOid", "")
    return out


def parse_orders(data) -> list[VenueOrder]:
    """detail data (one order object) or orders-pending data (``entrustedList``; null: none).

    Raises:
        ValueError: neither shape, or an order object that does not validate.
    """
    if data is None:
        return []
    if isinstance(data, dict) and "orderId" in data:
        items = [data]
    elif isinstance(data, dict):
        items = data.get("entrustedList") or []
    else:
        raise ValueError("bad mix order data")
    if not isinstance(items, list) or not all(isinstance(d, dict) for d in items):
        raise ValueError("bad mix order list")
    try:
        return msgspec.convert([_order_doc(d) for d in items], list[VenueOrder], strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad mix order list: {exc}") from None


def parse_fills(data) -> list[VenueFill]:
    """fills data (``fillList``), sorted by trade id; ``baseVolume`` is the fill's size, ``price`` its
    price, ``clientOid`` "" when the venue gives none.

    Raises:
        ValueError: not a fill list, or a fill that does not validate.
    """
    items = (data or {}).get("fillList") if isinstance(data, dict) or data is None else None
    if items is None:
        items = []
    if not isinstance(items, list) or not all(isinstance(d, dict) for d in items):
        raise ValueError("bad mix fill list")
    docs = [{"orderId": d.get("orderId"), "clientOid": d.get("clientOid") or "", "symbol": d.get("symbol"),
             "side": d.get("side"), "tradeId": d.get("tradeId"), "priceAvg": d.get("price"),
             "size": d.get("baseVolume"), "cTime": d.get("cTime") or 0} for d in items]
    try:
        fills = msgspec.convert(docs, list[VenueFill], strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad mix fill list: {exc}") from None
    return sorted(fills, key=lambda f: f.tradeId)


def parse_cancelled(data) -> list[str]:
    """batch-cancel / cancel-all data: the clientOids in ``successList``. Raises ValueError: malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("successList", []), list):
        raise ValueError("bad mix cancel data")
    return [str(c.get("clientOid", "")) for c in data.get("successList", []) if isinstance(c, dict)]


def parse_positions(data) -> dict[str, float]:
    """all-position data -> symbol -> signed position in base units (long +total, short -total;
    a symbol with both, as hedge mode would give, nets them).

    Raises:
        ValueError: not a list of position objects, an unknown holdSide, or a non-finite total.
    """
    if data is None:
        return {}
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ValueError("bad position list")
    out: dict[str, float] = {}
    for d in data:
        side = d.get("holdSide")
        try:
            total = float(d.get("total") or 0)
        except (TypeError, ValueError):
            raise ValueError(f"bad position total {d.get('total')!r}") from None
        if side not in ("long", "short") or not math.isfinite(total):
            raise ValueError(f"bad position {side!r} {total!r}")
        sym = str(d.get("symbol", ""))
        out[sym] = out.get(sym, 0.0) + (total if side == "long" else -total)
    return out
