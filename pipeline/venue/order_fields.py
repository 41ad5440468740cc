"""The paper venue's order vocabulary and request checks (sans-I/O, pure): the error codes, the
instrument rules, and a place-order body checked field by field into a ``PlaceRequest``.

Checks (``OrderRejected`` with the venue's code, Bitget v2 numbering): 40001 malformed field
(missing, not a string, not a positive finite decimal, off the instrument's tick or lot, unknown
side / orderType / force, bad clientOid, a bad id), 40034 unknown symbol, 43012 size * price above
the engine's ``max_notional``. The engine adds the checks that need its state (43118 duplicate
clientOid, 43027 post_only would cross, 43001 unknown order).

Numbers are ``decimal.Decimal`` inside; amounts and prices are decimal strings outside (``fmt``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

# Venue error codes (Bitget v2 numbering)
CODE_BAD_REQUEST = "40001"
CODE_UNKNOWN_SYMBOL = "40034"
CODE_NO_ORDER = "43001"
CODE_NOTIONAL = "43012"
CODE_DUPLICATE = "43118"
CODE_POST_ONLY = "43027"

SIDES = ("buy", "sell")
FORCES = ("gtc", "post_only", "ioc", "fok")
ORDER_TYPES = ("limit",)

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
    """A place-order body that passed the field checks (``parse_place``)."""

    symbol: str
    side: str
    force: str
    price: Decimal
    size: Decimal
    price_text: str  # the texts received (kept for orderInfo and the account record)
    size_text: str
    client_oid: str | None  # None: the venue names the order


def check_symbol(rules: Mapping[str, InstrumentRules], symbol) -> InstrumentRules:
    """The rules of ``symbol``.

    Raises:
        OrderRejected: 40034 a symbol the venue does not serve (or not a string).
    """
    found = rules.get(symbol) if isinstance(symbol, str) else None
    if found is None:
        raise OrderRejected(CODE_UNKNOWN_SYMBOL, f"symbol {str(symbol)[:32]!r} is not traded here")
    return found


def parse_place(body, rules: Mapping[str, InstrumentRules], max_notional: Decimal | None) -> PlaceRequest:
    """A place-order body (strings: symbol, side, orderType, force, price, size, clientOid) checked
    in that order against the served symbols' ``rules`` and the notional limit (None: none).

    Raises:
        OrderRejected: 40001 a malformed field; 40034 an unknown symbol; 43012 above ``max_notional``.
    """
    if not isinstance(body, Mapping):
        raise OrderRejected(CODE_BAD_REQUEST, "the body must be a JSON object")
    symbol = body.get("symbol")
    if not isinstance(symbol, str) or not symbol:
        raise OrderRejected(CODE_BAD_REQUEST, "symbol is missing")
    inst = check_symbol(rules, symbol)
    side = _choice(body, "side", SIDES)
    _choice(body, "orderType", ORDER_TYPES)
    force = _choice(body, "force", FORCES)
    price, price_text = _decimal_field(body, "price")
    size, size_text = _decimal_field(body, "size")
    if not _multiple(price, inst.tick_size):
        raise OrderRejected(CODE_BAD_REQUEST, f"price {price_text} is not a multiple of the tick {fmt(inst.tick_size)}")
    if not _multiple(size, inst.lot_size):
        raise OrderRejected(CODE_BAD_REQUEST, f"size {size_text} is not a multiple of the lot {fmt(inst.lot_size)}")
    if max_notional is not None and price * size > max_notional:
        raise OrderRejected(CODE_NOTIONAL, f"order notional {fmt(price * size)} is above the limit "
                                           f"{fmt(max_notional)}")
    coid = body.get("clientOid")
    if coid is None or coid == "":
        coid = None
    elif not (isinstance(coid, str) and len(coid) <= MAX_CLIENT_OID_CHARS and coid.isascii() and coid.isprintable()):
        raise OrderRejected(CODE_BAD_REQUEST, f"clientOid must be 1..{MAX_CLIENT_OID_CHARS} printable ASCII characters")
    return PlaceRequest(symbol, side, force, price, size, price_text, size_text, coid)


def parse_delta(delta: Decimal | str) -> Decimal:
    """A position adjustment: a non-zero finite decimal (a string of at most 40 characters, or a
    Decimal).

    Raises:
        OrderRejected: 40001 anything else.
    """
    if isinstance(delta, str):
        if not delta or len(delta) > 40:
            raise OrderRejected(CODE_BAD_REQUEST, "delta must be a decimal string")
        try:
            d = Decimal(delta)
        except InvalidOperation:
            raise OrderRejected(CODE_BAD_REQUEST, f"delta is not a decimal: {delta!r}") from None
    elif isinstance(delta, Decimal):
        d = delta
    else:
        raise OrderRejected(CODE_BAD_REQUEST, "delta must be a decimal string")
    if not d.is_finite() or d == 0:
        raise OrderRejected(CODE_BAD_REQUEST, "delta must be a non-zero finite decimal")
    return d


def int_id(v, name: str) -> int:
    """An order or trade id given as a non-negative int or a decimal string of at most 30 digits.

    Raises:
        OrderRejected: 40001 anything else (the message names ``name``).
    """
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str) and 0 < len(v) <= 30 and v.isascii() and v.isdigit():
        return int(v)
    raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be a non-negative decimal integer")


def _decimal_field(body: Mapping, name: str) -> tuple[Decimal, str]:
    v = body.get(name)
    if v is None:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} is missing")
    if not isinstance(v, str) or not v or len(v) > 40:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be a decimal string")
    try:
        d = Decimal(v)
    except InvalidOperation:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} is not a decimal: {v!r}") from None
    if not d.is_finite() or d <= 0:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be a positive finite decimal, got {v!r}")
    return d, v


def _choice(body: Mapping, name: str, choices: tuple[str, ...]) -> str:
    v = body.get(name)
    if v is None:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} is missing")
    if v not in choices:
        raise OrderRejected(CODE_BAD_REQUEST, f"{name} must be one of {', '.join(choices)}, got {str(v)[:32]!r}")
    return v


def _multiple(value: Decimal, step: Decimal | None) -> bool:
    return step is None or (value % step) == 0
