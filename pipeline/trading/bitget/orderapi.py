"""The order sender's venue requests chosen by each instrument's product type, sans-I/O: spot
(``pipeline.trading.bitget.rest``) or USDT-FUTURES perpetuals (``pipeline.trading.bitget.mix``).

``OrderApi(creds, instruments)`` builds the signed request of each command for an instrument
(``InstrumentConfig``: ``product_type``, ``symbol``, ``tick_size``, ``lot_size``, ``margin_coin``,
``margin_mode``); the account-wide queries (open orders, fills after a trade id, positions) are one
request per product type configured (``products``), spot first. The answers' parsers
(``parse_orders``, ``parse_fills``, ``parse_cancelled``) read either product's shape: spot answers
a list (``{"cancelled": [...]}`` for a cancel-symbol), mix an object (``entrustedList``, ``fillList``,
``successList``, or one order's detail).

Positions: a spot instrument's is the balance of its base coin (account/assets), a perpetual's its
signed position (all-position); ``positions`` reads the answers of ``position_requests`` into
instrument id -> venue position in base units.
"""

from __future__ import annotations

from pipeline.trading.bitget import mix, rest
from pipeline.trading.bitget.protocol import base_coin
from pipeline.trading.bitget.rest import Request, VenueFill, VenueOrder
from pipeline.trading.bitget.signing import Credentials

SPOT = "SPOT"
PERP = mix.PRODUCT


def product_of(inst) -> str:
    """An instrument's product type (``"SPOT"`` when it names none)."""
    return getattr(inst, "product_type", SPOT) or SPOT


class OrderApi:
    """Requests per product type (see the module docstring). Stateless but for the key."""

    def __init__(self, creds: Credentials, instruments: dict):
        self.creds = creds
        self.instruments = instruments
        self.by_symbol = {i.symbol: i for i in instruments.values()}
        present = {product_of(i) for i in instruments.values()} or {SPOT}
        self.products = [p for p in (SPOT, PERP) if p in present]
        self.margin_coins = sorted({i.margin_coin for i in instruments.values() if product_of(i) == PERP})

    # ------------------------------------------------------------------------------------ per order
    @staticmethod
    def place_body(inst, side: int, tif: int, price: float, size: float, client_oid: str, *,
                   reduce_only: bool = False) -> str:
        """The place-order body (needs no key). Raises ValueError: as ``rest.place_body`` /
        ``mix.place_body``; a reduce-only spot order (spot has no such flag)."""
        if product_of(inst) == PERP:
            return mix.place_body(inst, side, tif, price, size, client_oid, reduce_only=reduce_only)
        if reduce_only:
            raise ValueError("reduce-only applies to perpetuals only")
        return rest.place_body(inst.symbol, side, tif, price, size, client_oid, inst.tick_size, inst.lot_size)

    def place_with_body(self, inst, ts_ms: int, body: str) -> Request:
        """POST place-order with a body ``place_body`` made."""
        if product_of(inst) == PERP:
            return mix.build_place_with_body(self.creds, ts_ms, body)
        return rest.build_place_with_body(self.creds, ts_ms, body)

    def place(self, inst, ts_ms: int, side: int, tif: int, price: float, size: float, client_oid: str) -> Request:
        """POST place-order. Raises ValueError: as ``place_body``."""
        return self.place_with_body(inst, ts_ms, self.place_body(inst, side, tif, price, size, client_oid))

    def cancel(self, inst, ts_ms: int, client_oid: str) -> Request:
        """POST cancel-order by clientOid."""
        if product_of(inst) == PERP:
            return mix.build_cancel(self.creds, ts_ms, inst, client_oid=client_oid)
        return rest.build_cancel(self.creds, ts_ms, inst.symbol, client_oid=client_oid)

    def cancel_all(self, inst, ts_ms: int) -> Request:
        """Every working order of ``inst``: spot cancel-symbol-order, mix batch-cancel-orders by symbol."""
        if product_of(inst) == PERP:
            return mix.build_batch_cancel(self.creds, ts_ms, inst)
        return rest.build_cancel_symbol(self.creds, ts_ms, inst.symbol)

    def order_info(self, symbol: str, ts_ms: int, *, client_oid: str | None = None,
                   order_id: str | None = None) -> Request:
        """One order by clientOid or orderId (spot orderInfo; mix detail, which needs the symbol).
        Raises ValueError: neither id given."""
        inst = self.by_symbol.get(symbol)
        if inst is not None and product_of(inst) == PERP:
            return mix.build_order_detail(self.creds, ts_ms, symbol, client_oid=client_oid, order_id=order_id)
        return rest.build_order_info(self.creds, ts_ms, client_oid=client_oid, order_id=order_id)

    def order_fills(self, symbol: str, ts_ms: int, *, order_id: str | None = None,
                    id_greater_than: int | None = None) -> Request:
        """The fills of one symbol (and order)."""
        inst = self.by_symbol.get(symbol)
        if inst is not None and product_of(inst) == PERP:
            return mix.build_fills(self.creds, ts_ms, symbol=symbol, order_id=order_id,
                                   id_greater_than=id_greater_than)
        return rest.build_fills(self.creds, ts_ms, symbol=symbol, order_id=order_id, id_greater_than=id_greater_than)

    # ------------------------------------------------------------------------------------ account-wide
    def open_orders(self, product: str, ts_ms: int) -> Request:
        """Every open order of one product type."""
        if product == PERP:
            return mix.build_pending(self.creds, ts_ms)
        return rest.build_unfilled(self.creds, ts_ms)

    def fills(self, product: str, ts_ms: int, id_greater_than: int | None = None) -> Request:
        """Every fill of one product type after trade id ``id_greater_than``."""
        if product == PERP:
            return mix.build_fills(self.creds, ts_ms, id_greater_than=id_greater_than)
        return rest.build_fills(self.creds, ts_ms, id_greater_than=id_greater_than)

    def position_requests(self, ts_ms: int) -> list[tuple[str, Request]]:
        """(product, request) for every product's positions: spot assets, mix all-position per margin coin."""
        out = []
        if SPOT in self.products:
            out.append((SPOT, rest.build_assets(self.creds, ts_ms)))
        for coin in self.margin_coins:
            out.append((PERP, mix.build_positions(self.creds, ts_ms, coin)))
        return out

    def positions(self, answers: list[tuple[str, object]]) -> dict[int, float]:
        """Instrument id -> the venue's position (base units) from the data of ``position_requests``'
        answers, in order. Raises ValueError: a malformed answer, or a spot symbol without a base coin."""
        balances: dict[str, float] = {}
        perps: dict[str, float] = {}
        for product, data in answers:
            if product == PERP:
                for sym, qty in mix.parse_positions(data).items():
                    perps[sym] = perps.get(sym, 0.0) + qty
            else:
                balances.update({c: a.total for c, a in rest.parse_assets(data).items()})
        out = {}
        for iid, inst in self.instruments.items():
            if product_of(inst) == PERP:
                out[iid] = perps.get(inst.symbol, 0.0)
            else:
                out[iid] = balances.get(base_coin(inst.symbol), 0.0)
        return out


# ---------------------------------------------------------------------------------------- answers
def parse_orders(data) -> list[VenueOrder]:
    """Spot (a list) or mix (an object) order data. Raises ValueError: malformed."""
    return mix.parse_orders(data) if isinstance(data, dict) else rest.parse_orders(data)


def parse_fills(data) -> list[VenueFill]:
    """Spot (a list) or mix (``fillList``) fill data, sorted by trade id. Raises ValueError: malformed."""
    return mix.parse_fills(data) if isinstance(data, dict) else rest.parse_fills(data)


def parse_cancelled(data) -> list[str]:
    """The clientOids a cancel-symbol (spot) or batch cancel (mix) cancelled. Raises ValueError: malformed."""
    if isinstance(data, dict) and "successList" in data:
        return mix.parse_cancelled(data)
    return rest.parse_cancelled(data)
