"""The paper venue's order vocabulary and request checks (sans-I/O, pure): the error codes, the
instrument rules, and a place-order body checked field by field into a ``PlaceRequest``.

Checks (``OrderRejected`` with the exchange's code and message shape, Bitget v2 numbering, as its
answers show them): 40019 "Parameter <name> cannot be empty" (a required field missing or empty),
40020 "Parameter <name> error" (not a string, not a positive finite decimal, an unknown side /
orderType / force, a bad clientOid or id), 41103 a price off the instrument's tick ("param price
scale error"), 40808 a size off its lot ("Parameter verification exception size checkBDScale
error"), 40034 unknown symbol ("Parameter <symbol> does not exist"), 43012 size * price above the
engine's ``max_notional``. The engine adds the checks that need its state (43118 duplicate
clientOid, 43027 post_only would cross, 43001 unknown order).

Enumerations are accepted the way the exchange accepts them: ``side``, ``orderType`` and ``force``
in any letter case (ccxt sends ``"force": "GTC"``), kept lower case. ``orderType`` is ``limit`` or
``market``; a market order needs no price and no force (the exchange ignores both), and its size is
in the quote coin for a buy (USDT to spend) and in the base coin for a sell.

Numbers are ``decimal.Decimal`` inside; amounts and prices are decimal strings outside (``fmt``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

# Venue error codes (Bitget v2 numbering)
CODE_BAD_REQUEST = "40001"  # the request itself (headers, HTTP, body that is not a JSON object)
CODE_PARAM_EMPTY = "40019"  # "Parameter {name} cannot be empty"
CODE_PARAM_ERROR = "40020"  # "Parameter {name} error"
CODE_PRICE_SCALE = "41103"  # a price off the tick
CODE_SIZE_SCALE = "40808"  # a size off the lot
CODE_UNKNOWN_SYMBOL = "40034"
CODE_NO_ORDER = "43001"
CODE_NOTIONAL = "43012"
CODE_DUPLICATE = "43118"
CODE_POST_ONLY = "43027"

SIDES = ("buy", "sell")
FORCES = ("gtc", "post_only", "ioc", "fok")
ORDER_TYPES = ("limit", "market")
#: the codes of a malformed request or field (counted as bad requests)
MALFORMED_CODES = frozenset((CODE_BAD_REQUEST, CODE_PARAM_EMPTY, CODE_PARAM_ERROR, CODE_PRICE_SCALE, CODE_SIZE_SCALE))

MAX_CLIENT_OID_CHARS = 64


class OrderRejected(Exception):
    """A request the engine refuses: ``code`` (the venue's error code) and ``msg``. Raised by
    ``OrderEngine`` methods and the checks here; the engine's state is unchanged. Never carries
    request secrets."""

    def __init__(self, code: str, msg: str) -> None:
        super().__init__(f"{code}: {msg}")
        self.code = code
        self.msg = msg


class InstrumentRules(NamedTuple):
    """The price tick and size lot orders of a symbol must be multiples of (None: not checked)."""

    symbol: str
    tick_size: Decimal | None = None
    lot_size: Decimal | None = None


def rules_from_config(instruments: Iterable, symbols: Iterable[str]) -> dict[str, InstrumentRules]:
    """``InstrumentRules`` for every served symbol: tick / lot from the config instruments
    (``tick_size``, ``lot_size`` floats) whose symbol matches, unchecked when none does."""
    by_symbol = {i.symbol: i for i in instruments}
    out = {}
    for s in symbols:
        i = by_symbol.get(s)
        out[s] = (InstrumentRules(s, Decimal(repr(float(i.tick_size))), Decimal(repr(float(i.lot_size))))
                  if i is not None else InstrumentRules(s))
    return out


def fmt(d: Decimal) -> str:
    """A decimal as a plain string without exponent or trailing zeros (``Decimal("1.50")`` -> "1.5")."""
    if d == 0:
        return "0"
    s = format(d.normalize(), "f")
    return s


class PlaceRequest(NamedTuple):
    """A place-order body that passed the field checks (``parse_place``). A market order has
    ``price`` None (``price_text`` "0") and ``force`` "ioc" (what it does); a market buy's ``size``
    is the quote coin to spend."""

    symbol: str
    side: str
    force: str
    price: Decimal | None
    size: Decimal
    price_text: str  # the texts received (kept for orderInfo and the account record)
    size_text: str
    client_oid: str | None  # None: the venue names the order
    order_type: str = "limit"


def check_symbol(rules: Mapping[str, InstrumentRules], symbol) -> InstrumentRules:
    """The rules of ``symbol``.

    Raises:
        OrderRejected: 40034 a symbol the venue does not serve (or not a string).
    """
    found = rules.get(symbol) if isinstance(symbol, str) else None
    if found is None:
        raise OrderRejected(CODE_UNKNOWN_SYMBOL, f"Parameter {str(symbol)[:32]} does not exist")
    return found


def parse_place(body, rules: Mapping[str, InstrumentRules], max_notional: Decimal | None) -> PlaceRequest:
    """A place-order body (strings: symbol, side, orderType, force, price, size, clientOid) checked
    in that order against the served symbols' ``rules`` and the notional limit (None: none; a
    market order's notional is not known in advance and is not checked).

    Raises:
        OrderRejected: 40001 not an object; 40019 / 40020 a missing / malformed field; 41103 /
            40808 a price / size off the tick / lot; 40034 an unknown symbol; 43012 above
            ``max_notional``.
    """
    if not isinstance(body, Mapping):
        raise OrderRejected(CODE_BAD_REQUEST, "the body must be a JSON object")
    symbol = body.get("symbol")
    if symbol is None or symbol == "":
        raise OrderRejected(CODE_PARAM_EMPTY, "Parameter symbol cannot be empty")
    inst = check_symbol(rules, symbol)
    side = _choice(body, "side", SIDES)
    order_type = _choice(body, "orderType", ORDER_TYPES)
    market = order_type == "market"
    force = "ioc" if market else _choice(body, "force", FORCES)
    size, size_text = _decimal_field(body, "size")
    if market:
        price, price_text = None, "0"
        lot = None if side == "buy" else inst.lot_size  # a market buy spends quote coin
    else:
        price, price_text = _decimal_field(body, "price")
        if not _multiple(price, inst.tick_size):
            raise OrderRejected(CODE_PRICE_SCALE, f"param price scale error: {price_text} is not a multiple of "
                                                  f"the tick {fmt(inst.tick_size)}")
        lot = inst.lot_size
    if not _multiple(size, lot):
        raise OrderRejected(CODE_SIZE_SCALE, f"Parameter verification exception size checkBDScale error "
                                             f"value={size_text} lot={fmt(lot)}")
    if max_notional is not None and price is not None and price * size > max_notional:
        raise OrderRejected(CODE_NOTIONAL, f"order notional {fmt(price * size)} is above the limit "
                                           f"{fmt(max_notional)}")
    coid = body.get("clientOid")
    if coid is None or coid == "":
        coid = None
    elif not (isinstance(coid, str) and len(coid) <= MAX_CLIENT_OID_CHARS and coid.isascii() and coid.isprintable()):
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter clientOid error: 1..{MAX_CLIENT_OID_CHARS} printable "
                                              f"ASCII characters")
    return PlaceRequest(symbol, side, force, price, size, price_text, size_text, coid, order_type)


def market_plan(levels, side: str, size: Decimal, lot: Decimal | None) -> list[tuple[Decimal, Decimal]]:
    """The fills of a market order, as (price, base size), against the opposite side's ``levels``
    ((price, size still available), best first): a sell takes up to ``size`` (base coin), a buy
    spends up to ``size`` (quote coin) in whole ``lot``s. Empty: it would fill nothing."""
    plan, left = [], size
    for p, avail in levels:
        if side == "buy":
            q = min(avail, left / p)
            if lot is not None and lot > 0:
                q = (q // lot) * lot
        else:
            q = min(avail, left)
        if q <= 0:
            break
        plan.append((p, q))
        left -= p * q if side == "buy" else q
    return plan


def parse_delta(delta: Decimal | str) -> Decimal:
    """A position adjustment: a non-zero finite decimal (a string of at most 40 characters, or a
    Decimal).

    Raises:
        OrderRejected: 40020 anything else.
    """
    if isinstance(delta, str):
        if not delta or len(delta) > 40:
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter delta error: a decimal string")
        try:
            d = Decimal(delta)
        except InvalidOperation:
            raise OrderRejected(CODE_PARAM_ERROR, f"Parameter delta error: not a decimal: {delta!r}") from None
    elif isinstance(delta, Decimal):
        d = delta
    else:
        raise OrderRejected(CODE_PARAM_ERROR, "Parameter delta error: a decimal string")
    if not d.is_finite() or d == 0:
        raise OrderRejected(CODE_PARAM_ERROR, "Parameter delta error: a non-zero finite decimal")
    return d


def int_id(v, name: str) -> int:
    """An order or trade id given as a non-negative int or a decimal string of at most 30 digits.

    Raises:
        OrderRejected: 40020 anything else (the message names ``name``).
    """
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str) and 0 < len(v) <= 30 and v.isascii() and v.isdigit():
        return int(v)
    raise OrderRejected(CODE_PARAM_ERROR, f"Parameter {name} error: a non-negative decimal integer")


def _decimal_field(body: Mapping, name: str) -> tuple[Decimal, str]:
    v = body.get(name)
    if v is None or v == "":
        raise OrderRejected(CODE_PARAM_EMPTY, f"Parameter {name} cannot be empty")
    if not isinstance(v, str) or len(v) > 40:
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter {name} error: a decimal string")
    try:
        d = Decimal(v)
    except InvalidOperation:
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter {name} error: not a decimal: {v!r}") from None
    if not d.is_finite() or d <= 0:
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter {name} error: a positive finite decimal, got {v!r}")
    return d, v


def _choice(body: Mapping, name: str, choices: tuple[str, ...]) -> str:
    """The field's value in lower case (any case accepted, as the exchange does)."""
    v = body.get(name)
    if v is None or v == "":
        raise OrderRejected(CODE_PARAM_EMPTY, f"Parameter {name} cannot be empty")
    low = v.lower() if isinstance(v, str) else None
    if low not in choices:
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter {name} error: one of {', '.join(choices)}, "
                                              f"got {str(v)[:32]!r}")
    return low


def _multiple(value: Decimal, step: Decimal | None) -> bool:
    return step is None or (value % step) == 0
