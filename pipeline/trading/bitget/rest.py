"""Bitget v2 spot REST, order side, sans-I/O: signed requests from ORDER records, parsed responses,
and the classification of every outcome. No sockets here; ``procs.sender`` does the I/O.

Requests (``Request``: method, path, query, body, headers) are built by ``build_place``,
``build_cancel``, ``build_cancel_symbol``, ``build_order_info``, ``build_unfilled``, ``build_fills``
and, for the position reconciliation, ``build_account_info`` (the account's id: a venue reset to a new
account answers another) and ``build_assets`` (spot balances; ``parse_assets``). Bodies are compact JSON with the keys in the contract's order (the exact text
is what is signed); GET query strings are sorted by key (``signing.query_string``). Headers come
from ``Credentials.headers``; a ``Request``'s repr never shows them.

Amounts are decimal strings: ``fmt_decimal(x, step)`` writes ``x`` with the step's decimals,
trailing zeros stripped (``23222.5``, ``0.01``). ``build_place`` refuses (``ValueError``) a price or
size that is not positive, finite, and on its tick / lot step.

Outcomes (``classify_response`` / ``classify_transport_error`` -> ``Result``):

====================  ==========================================================================
OK                    HTTP 200 and code "00000"
REJECTED(code)        any other answer with an error code (4xx; 200 with a non-zero code)
RETRYABLE             HTTP 429 (code "429"), HTTP 5xx, or a failure before the request was sent
                      (connection refused, no port file)
UNKNOWN               the request may have reached the venue and no usable answer came back:
                      timeout, connection lost after sending, an unparsable 200
====================  ==========================================================================

``CODES`` names what each v2 error code the sender distinguishes means to it (``CodeClass``), spot and
USDT-FUTURES alike; ``NO_ORDER_CODES`` and ``DUPLICATE_OID_CODES`` are the sets it acts on (an order
the venue does not know is queried; a clientOid the venue has seen is never resent). The perpetuals'
requests are ``pipeline.trading.bitget.mix``'s; ``pipeline.trading.bitget.orderapi`` picks per instrument.
"""

from __future__ import annotations

import enum
import math
from decimal import Decimal

import msgspec
import orjson

from pipeline.trading.bitget.signing import Credentials, query_string
from pipeline.trading.messages import Side, TimeInForce

PLACE_PATH = "/api/v2/spot/trade/place-order"
CANCEL_PATH = "/api/v2/spot/trade/cancel-order"
CANCEL_SYMBOL_PATH = "/api/v2/spot/trade/cancel-symbol-order"
ORDER_INFO_PATH = "/api/v2/spot/trade/orderInfo"
UNFILLED_PATH = "/api/v2/spot/trade/unfilled-orders"
FILLS_PATH = "/api/v2/spot/trade/fills"
ACCOUNT_INFO_PATH = "/api/v2/spot/account/info"
ASSETS_PATH = "/api/v2/spot/account/assets"

CODE_OK = "00000"
CODE_MALFORMED = "40001"
CODE_STALE_TS = "40008"
CODE_BAD_KEY = "40006"
CODE_BAD_SIGNATURE = "40009"
CODE_RATE_LIMIT = "429"
CODE_NO_ORDER = "43001"
CODE_DUPLICATE_OID = "43118"
CODE_BALANCE = "43012"
CODE_POST_ONLY = "43027"
CODE_BAD_SYMBOL = "40034"
CODE_INTERNAL = "50000"



class CodeClass(enum.Enum):
    """What a venue error code means to the order sender (``CODES``)."""

    OK = "ok"
    AUTH = "auth"  # key, signature, timestamp or passphrase refused
    MALFORMED = "malformed"  # a parameter the venue refuses (the request is wrong, retrying will not help)
    RATE_LIMIT = "rate_limit"  # retried after a back-off
    NO_ORDER = "no_order"  # the order named is not known (or no longer cancellable)
    DUPLICATE = "duplicate"  # the clientOid was used before: the order is queried, never resent
    FUNDS = "funds"  # balance / margin / size bounds
    POST_ONLY = "post_only"  # a post-only order would have taken
    BAD_SYMBOL = "bad_symbol"
    NO_POSITION = "no_position"  # reduce-only with no position to reduce (mix, one-way mode)
    POSITION_MODE = "position_mode"  # the order's position mode is not the account's (mix)
    INTERNAL = "internal"  # the venue's own failure


# Every v2 code the sender distinguishes (spot and mix), with its meaning. Sources: the exchange's v2
# error-code pages (spot and contract), as mirrored in public API references.
CODES: dict[str, tuple[CodeClass, str]] = {
    CODE_OK: (CodeClass.OK, "success"),
    CODE_MALFORMED: (CodeClass.MALFORMED, "the request is malformed"),
    CODE_BAD_KEY: (CodeClass.AUTH, "bad ACCESS-KEY"),
    CODE_STALE_TS: (CodeClass.AUTH, "request timestamp expired"),
    CODE_BAD_SIGNATURE: (CodeClass.AUTH, "sign signature error"),
    "40012": (CodeClass.AUTH, "apikey / password incorrect"),
    CODE_BAD_SYMBOL: (CodeClass.BAD_SYMBOL, "parameter (symbol) does not exist"),
    CODE_RATE_LIMIT: (CodeClass.RATE_LIMIT, "too many requests"),
    CODE_NO_ORDER: (CodeClass.NO_ORDER, "order does not exist"),
    CODE_BALANCE: (CodeClass.FUNDS, "insufficient balance"),
    CODE_POST_ONLY: (CodeClass.POST_ONLY, "post-only order would take liquidity"),
    CODE_DUPLICATE_OID: (CodeClass.DUPLICATE, "duplicate clientOid"),
    "45110": (CodeClass.FUNDS, "less than the minimum order amount"),
    CODE_INTERNAL: (CodeClass.INTERNAL, "internal error"),
    # mix (USDT-FUTURES)
    "22001": (CodeClass.NO_ORDER, "no order to cancel"),
    "22002": (CodeClass.NO_POSITION, "no position to close"),
    "40109": (CodeClass.NO_ORDER, "the order cannot be found"),
    "40768": (CodeClass.NO_ORDER, "order does not exist"),
    "40786": (CodeClass.DUPLICATE, "duplicate clientOid"),
    "40762": (CodeClass.FUNDS, "the order amount exceeds the balance"),
    "40774": (CodeClass.POSITION_MODE, "the order type for a one-way position must be the one-way type"),
    "40020": (CodeClass.MALFORMED, "parameter productType error"),
}
NO_ORDER_CODES = frozenset(c for c, (k, _) in CODES.items() if k is CodeClass.NO_ORDER)
DUPLICATE_OID_CODES = frozenset(c for c, (k, _) in CODES.items() if k is CodeClass.DUPLICATE)


def code_class(code: str) -> CodeClass | None:
    """The sender's reading of a venue code; None for a code it does not know (a plain rejection)."""
    entry = CODES.get(code)
    return entry[0] if entry is not None else None


FORCE = {TimeInForce.GTC: "gtc", TimeInForce.POST_ONLY: "post_only", TimeInForce.IOC: "ioc"}
SIDE = {Side.BUY: "buy", Side.SELL: "sell"}
SIDE_FROM_TEXT = {"buy": Side.BUY, "sell": Side.SELL}
WORKING_STATUSES = ("live", "partially_filled")
TERMINAL_STATUSES = ("filled", "cancelled")


class Outcome(enum.IntEnum):
    OK = 0
    REJECTED = 1
    RETRYABLE = 2
    UNKNOWN = 3


class Request(msgspec.Struct, frozen=True):
    """One signed HTTP request. ``target`` is what goes on the request line."""

    method: str
    path: str
    query: str
    body: str
    headers: dict

    @property
    def target(self) -> str:
        return f"{self.path}?{self.query}" if self.query else self.path

    def __repr__(self) -> str:  # the headers carry the key: never shown
        return f"Request({self.method} {self.target} body={self.body!r})"

    __str__ = __repr__


class Result(msgspec.Struct, frozen=True):
    """A classified outcome: ``code`` is the venue's code ("" when there was none), ``data`` its data."""

    outcome: Outcome
    status: int = 0
    code: str = ""
    msg: str = ""
    data: object = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


class _OrderReport(msgspec.Struct, frozen=True):
    """What the venue's order and fill reports both name: the order (its id and our client id), the
    symbol and the side."""

    orderId: str
    clientOid: str
    symbol: str
    side: str


class VenueOrder(_OrderReport, frozen=True):
    """An order as orderInfo / unfilled-orders report it (amounts parsed to float)."""

    price: float
    size: float
    baseVolume: float
    priceAvg: float
    status: str
    uTime: int = 0


class VenueFill(_OrderReport, frozen=True):
    """One fill as the fills endpoint reports it."""

    tradeId: int
    priceAvg: float
    size: float
    cTime: int = 0


class VenueAsset(msgspec.Struct, frozen=True):
    """One coin's balance as the assets endpoint reports it (amounts parsed to float)."""

    coin: str
    available: float
    frozen: float = 0.0
    locked: float = 0.0

    @property
    def total(self) -> float:
        return self.available + self.frozen + self.locked


# ---------------------------------------------------------------------------------------- amounts
def step_decimals(step: float) -> int:
    """Decimal places of a tick / lot step (0.1 -> 1, 0.0001 -> 4, 5 -> 0)."""
    exp = Decimal(repr(float(step))).normalize().as_tuple().exponent
    return max(0, -int(exp))


def on_step(x: float, step: float) -> bool:
    """True when ``x`` is a whole number of ``step`` (relative tolerance 1e-6 of a step)."""
    q = x / step
    return abs(q - round(q)) < 1e-6


def fmt_decimal(x: float, step: float) -> str:
    """``x`` rounded to ``step``, with the step's decimals, trailing zeros stripped."""
    d = step_decimals(step)
    text = f"{round(x / step) * step:.{d}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _dumps(obj: dict) -> str:
    return orjson.dumps(obj).decode("utf-8")


def _signed(creds: Credentials, ts_ms: int, method: str, path: str, query: str = "", body: str = "") -> Request:
    return Request(method, path, query, body, creds.headers(ts_ms, method, path, query, body))


# ---------------------------------------------------------------------------------------- requests
def place_body(symbol: str, side: int, tif: int, price: float, size: float, client_oid: str, tick_size: float,
               lot_size: float) -> str:
    """The place-order body text.

    Raises:
        ValueError: unknown side or time in force; price or size not positive, not finite, or off
            its tick / lot step.
    """
    try:
        side_t, force = SIDE[Side(side)], FORCE[TimeInForce(tif)]
    except (ValueError, KeyError):
        raise ValueError(f"bad side {side} or time in force {tif}") from None
    for name, v, step in (("price", price, tick_size), ("size", size, lot_size)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} {v!r} is not positive and finite")
        if not on_step(v, step):
            raise ValueError(f"{name} {v!r} is not a multiple of {step!r}")
    return _dumps({"symbol": symbol, "side": side_t, "orderType": "limit", "force": force,
                   "price": fmt_decimal(price, tick_size), "size": fmt_decimal(size, lot_size),
                   "clientOid": client_oid})


def build_place(creds: Credentials, ts_ms: int, symbol: str, side: int, tif: int, price: float, size: float,
                client_oid: str, tick_size: float, lot_size: float) -> Request:
    """POST place-order. Raises ValueError as ``place_body``."""
    return build_place_with_body(creds, ts_ms, place_body(symbol, side, tif, price, size, client_oid, tick_size,
                                                          lot_size))


def build_place_with_body(creds: Credentials, ts_ms: int, body: str) -> Request:
    """POST place-order with a body ``place_body`` already made (and so validated)."""
    return _signed(creds, ts_ms, "POST", PLACE_PATH, "", body)


def build_cancel(creds: Credentials, ts_ms: int, symbol: str, *, client_oid: str | None = None,
                 order_id: str | None = None) -> Request:
    """POST cancel-order by clientOid (preferred) or venue orderId.

    Raises:
        ValueError: neither id given.
    """
    if client_oid:
        body = {"symbol": symbol, "clientOid": client_oid}
    elif order_id:
        body = {"symbol": symbol, "orderId": order_id}
    else:
        raise ValueError("cancel needs a clientOid or an orderId")
    return _signed(creds, ts_ms, "POST", CANCEL_PATH, "", _dumps(body))


def build_cancel_symbol(creds: Credentials, ts_ms: int, symbol: str) -> Request:
    """POST cancel-symbol-order (every working order of ``symbol``)."""
    return _signed(creds, ts_ms, "POST", CANCEL_SYMBOL_PATH, "", _dumps({"symbol": symbol}))


def build_order_info(creds: Credentials, ts_ms: int, *, client_oid: str | None = None,
                     order_id: str | None = None) -> Request:
    """GET orderInfo by clientOid or orderId. Raises ValueError: neither id given."""
    if not client_oid and not order_id:
        raise ValueError("orderInfo needs a clientOid or an orderId")
    q = query_string({"clientOid": client_oid} if client_oid else {"orderId": order_id})
    return _signed(creds, ts_ms, "GET", ORDER_INFO_PATH, q)


def build_unfilled(creds: Credentials, ts_ms: int, symbol: str | None = None) -> Request:
    """GET unfilled-orders (every symbol when ``symbol`` is None)."""
    return _signed(creds, ts_ms, "GET", UNFILLED_PATH, query_string({"symbol": symbol}))


def build_fills(creds: Credentials, ts_ms: int, *, symbol: str | None = None, order_id: str | None = None,
                id_greater_than: int | None = None) -> Request:
    """GET fills, oldest first, optionally after trade id ``id_greater_than``."""
    q = query_string({"symbol": symbol, "orderId": order_id,
                      "idGreaterThan": None if id_greater_than is None else int(id_greater_than)})
    return _signed(creds, ts_ms, "GET", FILLS_PATH, q)


# ---------------------------------------------------------------------------------------- responses
def build_account_info(creds: Credentials, ts_ms: int) -> Request:
    """GET account/info (``data.userId``: the account's id)."""
    return _signed(creds, ts_ms, "GET", ACCOUNT_INFO_PATH)


def build_assets(creds: Credentials, ts_ms: int) -> Request:
    """GET account/assets (every coin)."""
    return _signed(creds, ts_ms, "GET", ASSETS_PATH)


def classify_response(status: int, body: bytes | str | None) -> Result:
    """Classify an HTTP answer (see the module docstring's table). Never raises."""
    doc = None
    if body:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
    code = str(doc.get("code", "")) if isinstance(doc, dict) else ""
    msg = str(doc.get("msg", ""))[:200] if isinstance(doc, dict) else ""
    data = doc.get("data") if isinstance(doc, dict) else None
    if status == 429 or code == CODE_RATE_LIMIT:
        return Result(Outcome.RETRYABLE, status, code or CODE_RATE_LIMIT, msg)
    if status >= 500:
        return Result(Outcome.RETRYABLE, status, code, msg)
    if status == 200:
        if code == CODE_OK:
            return Result(Outcome.OK, status, code, msg, data)
        if not code:  # an answer we cannot read: the venue may have acted on the request
            return Result(Outcome.UNKNOWN, status, "", "unparsable answer")
        return Result(Outcome.REJECTED, status, code, msg)
    return Result(Outcome.REJECTED, status, code, msg)


def classify_transport_error(sent: bool, what: str = "") -> Result:
    """A transport failure: RETRYABLE when the request never left (``sent`` False), else UNKNOWN."""
    return Result(Outcome.UNKNOWN if sent else Outcome.RETRYABLE, 0, "", what[:200])


_ORDER_LIST = list[VenueOrder]
_FILL_LIST = list[VenueFill]


def parse_orders(data) -> list[VenueOrder]:
    """orderInfo / unfilled-orders data. Raises ValueError: not a list of order objects."""
    try:
        return msgspec.convert(data if data is not None else [], _ORDER_LIST, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad order list: {exc}") from None


def parse_fills(data) -> list[VenueFill]:
    """fills data, sorted by trade id. Raises ValueError: not a list of fill objects."""
    try:
        fills = msgspec.convert(data if data is not None else [], _FILL_LIST, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad fill list: {exc}") from None
    return sorted(fills, key=lambda f: f.tradeId)


def parse_cancelled(data) -> list[str]:
    """cancel-symbol-order data: the clientOids cancelled. Raises ValueError: malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("cancelled", []), list):
        raise ValueError("bad cancel-symbol-order data")
    return [str(c.get("clientOid", "")) for c in data.get("cancelled", []) if isinstance(c, dict)]


def parse_account_id(data) -> str:
    """account/info's ``userId``. Raises ValueError: no non-empty string userId."""
    uid = data.get("userId") if isinstance(data, dict) else None
    if not isinstance(uid, str) or not uid:
        raise ValueError("account/info without a userId")
    return uid


def parse_assets(data) -> dict[str, VenueAsset]:
    """account/assets data -> coin -> balance. Raises ValueError: not a list of asset objects, or a
    non-finite amount."""
    try:
        assets = msgspec.convert(data if data is not None else [], list[VenueAsset], strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad asset list: {exc}") from None
    if not all(math.isfinite(a.total) for a in assets):
        raise ValueError("non-finite balance")
    return {a.coin: a for a in assets}
