"""The paper venue's public market data over REST (sans-I/O), in Bitget v2 spot shapes: server time,
coins, symbols with the config's tick and lot, tickers, depth (full and merged), recent trades and
candles. ``PublicMarket`` answers each route from the venue's live book (``book(symbol, n)``, the
order engine's view) and from the trades it is told of as a market listener (``traded``; the
venue server calls it on its loop, like the order engine's). No auth: ``RestApi`` serves these
routes unsigned.

Routes (GET; the query's parameters; ``PUBLIC_ROUTES``)::

    /api/v2/public/time            {"serverTime": "<ms>"}
    /api/v2/spot/public/coins      [{"coinId","coin","transfer":"false","chains":[],"areaCoin":"no"}]
                                   (every base coin of the served symbols, then USDT; ?coin= one)
    /api/v2/spot/public/symbols    [{"symbol","baseCoin","quoteCoin","minTradeAmount":"0",
                                     "maxTradeAmount","takerFeeRate","makerFeeRate","pricePrecision",
                                     "quantityPrecision","quotePrecision","status":"online",
                                     "minTradeUSDT":"0","areaSymbol":"no","orderQuantity":"200",
                                     "openTime"}] (?symbol= one); precisions: the decimals of the
                                   config's tick and lot (a symbol without config rules: 8)
    /api/v2/spot/market/tickers    [{"symbol","high24h","open","lastPr","low24h","quoteVolume",
                                     "baseVolume","usdtVolume","bidPr","askPr","bidSz","askSz",
                                     "openUtc","ts","changeUtc24h","change24h"}] (?symbol= one)
    /api/v2/spot/market/orderbook  ?symbol&type=step0&limit (1..150, default 150):
                                   {"asks":[[p,s]..],"bids":[[p,s]..],"ts"}
    /api/v2/spot/market/merge-depth ?symbol&precision=scale0..scale3&limit (1|5|15|50|max, default
                                   100): levels merged to the tick times 10**n (bids down, asks up),
                                   {"asks","bids","ts","scale","precision","isMaxPrecision"}
    /api/v2/spot/market/fills      ?symbol&limit (1..500, default 100): newest first
                                   [{"symbol","tradeId","side","price","size","ts"}]
    /api/v2/spot/market/candles    ?symbol&granularity&startTime&endTime&limit (1..1000, default 100):
                                   oldest first [[ts, open, high, low, close, baseVol, usdtVol,
                                   quoteVol]] (strings); granularity 1min 3min 5min 15min 30min 1h
                                   4h 6h 12h 1day
    /api/v2/margin/currencies      [] (the paper venue lends no margin)

USDT-FUTURES perpetuals (``perps``: symbol -> margin coin; the spot routes above neither list nor
answer them, 40034), every route taking ``productType`` (one of the exchange's six, any case; a
type other than USDT-FUTURES has no contract here: [] or 40034) and, where named, a perpetual's
``symbol``::

    /api/v2/mix/market/contracts   ?productType[&symbol]: [{"symbol","baseCoin","quoteCoin",
                                   "supportMarginCoins":[coin],"minTradeNum","sizeMultiplier"
                                   (the lot),"volumePlace","pricePlace","priceEndStep" (tick =
                                   priceEndStep / 10**pricePlace),"symbolType":"perpetual",
                                   "symbolStatus":"normal","makerFeeRate","takerFeeRate",...}]
    /api/v2/mix/market/ticker      ?symbol&productType: [one ticker]; /api/v2/mix/market/tickers
                                   ?productType: every perpetual's. The spot ticker's fields
                                   ("open" as "open24h") with "indexPrice" / "markPrice" (the last
                                   price: no index is simulated), "fundingRate":"0" (no funding),
                                   "holdingAmount":"0"
    /api/v2/mix/market/merge-depth ?symbol&productType&precision&limit: as spot's merge-depth
    /api/v2/mix/market/fills       ?symbol&productType&limit (1..100, default 100): as spot's fills
    /api/v2/mix/market/candles     ?symbol&productType&granularity&startTime&endTime&limit (1..1000,
                                   default 100): oldest first [[ts, open, high, low, close,
                                   baseVolume, quoteVolume]]; granularity 1m 3m 5m 15m 30m 1H 2H 4H
                                   6H 12H 1D (and the 6Hutc .. 1Dutc names: the same, UTC buckets)

The 24 h figures of a ticker (open, high, low, volumes, change) come from the trades of the last 24
hours the venue published (kept as one-minute candles, at most ``MAX_MINUTES``); ``lastPr`` is the
last trade's price, the best bid before any trade. Refusals (``OrderRejected``): 40019 a missing
symbol, granularity or productType, 40034 an unknown symbol, 40020 a bad limit, precision,
granularity or productType.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

from pipeline.trading.bitget.protocol import QUOTE_COIN, base_coin
from pipeline.venue.order_fields import (
    CODE_PARAM_EMPTY,
    CODE_PARAM_ERROR,
    InstrumentRules,
    OrderRejected,
    check_symbol,
    fmt,
)

TIME = "/api/v2/public/time"
COINS = "/api/v2/spot/public/coins"
SYMBOLS = "/api/v2/spot/public/symbols"
TICKERS = "/api/v2/spot/market/tickers"
ORDERBOOK = "/api/v2/spot/market/orderbook"
MERGE_DEPTH = "/api/v2/spot/market/merge-depth"
MARKET_FILLS = "/api/v2/spot/market/fills"
CANDLES = "/api/v2/spot/market/candles"
MARGIN_CURRENCIES = "/api/v2/margin/currencies"
MIX = "/api/v2/mix/market/"
CONTRACTS = MIX + "contracts"
MIX_TICKER = MIX + "ticker"
MIX_TICKERS = MIX + "tickers"
MIX_DEPTH = MIX + "merge-depth"
MIX_FILLS = MIX + "fills"
MIX_CANDLES = MIX + "candles"
MIX_PRODUCT = "USDT-FUTURES"
PRODUCT_TYPES = ("USDT-FUTURES", "COIN-FUTURES", "USDC-FUTURES", "SUSDT-FUTURES", "SCOIN-FUTURES", "SUSDC-FUTURES")
#: path -> the ``PublicMarket`` method answering it
PUBLIC_ROUTES = {TIME: "time", COINS: "coins", SYMBOLS: "symbols", TICKERS: "tickers", ORDERBOOK: "orderbook",
                 MERGE_DEPTH: "merge_depth", MARKET_FILLS: "recent_fills", CANDLES: "candles",
                 MARGIN_CURRENCIES: "margin_currencies", CONTRACTS: "contracts", MIX_TICKER: "mix_ticker",
                 MIX_TICKERS: "mix_tickers", MIX_DEPTH: "mix_merge_depth", MIX_FILLS: "mix_fills",
                 MIX_CANDLES: "mix_candles"}

MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS
MAX_MINUTES = 2 * 24 * 60  # one-minute candles kept per symbol
RECENT_FILLS = 500
GRANULARITY_MS = {"1min": MINUTE_MS, "3min": 3 * MINUTE_MS, "5min": 5 * MINUTE_MS, "15min": 15 * MINUTE_MS,
                  "30min": 30 * MINUTE_MS, "1h": 60 * MINUTE_MS, "4h": 240 * MINUTE_MS, "6h": 360 * MINUTE_MS,
                  "12h": 720 * MINUTE_MS, "1day": DAY_MS}
MIX_GRANULARITY_MS = {"1m": MINUTE_MS, "3m": 3 * MINUTE_MS, "5m": 5 * MINUTE_MS, "15m": 15 * MINUTE_MS,
                      "30m": 30 * MINUTE_MS, "1H": 60 * MINUTE_MS, "2H": 120 * MINUTE_MS, "4H": 240 * MINUTE_MS,
                      "6H": 360 * MINUTE_MS, "12H": 720 * MINUTE_MS, "1D": DAY_MS, "6Hutc": 360 * MINUTE_MS,
                      "12Hutc": 720 * MINUTE_MS, "1Dutc": DAY_MS}
MERGE_LIMITS = {"1": 1, "5": 5, "15": 15, "50": 50, "max": None}
_ZERO = Decimal(0)


class _Candle:
    """One minute of one symbol's trades: open, high, low, close, base and quote volume."""

    __slots__ = ("start_ms", "open", "high", "low", "close", "base", "quote")

    def __init__(self, start_ms: int, price: Decimal) -> None:
        self.start_ms = start_ms
        self.open = self.high = self.low = self.close = price
        self.base = self.quote = _ZERO

    def add(self, price: Decimal, size: Decimal) -> None:
        self.high = max(self.high, price)
        self.low = min(self.low, price)
        self.close = price
        self.base += size
        self.quote += price * size


class PublicMarket:
    """The public routes' answers (see the module docstring).

    ``rules``: symbol -> ``InstrumentRules`` (the served symbols); ``book(symbol, n)``: the live
    (bids, asks) best first as [price, size] strings; ``now_ms``: the venue's wall clock;
    ``fee_rates``: (maker, taker) as fractions for the symbols' fee fields, or None (no fees: "0");
    ``perps``: the perpetuals among ``rules``, symbol -> margin coin (served by the mix routes only).
    """

    def __init__(self, rules: Mapping[str, InstrumentRules], book: Callable[[str, int | None], tuple],
                 now_ms: Callable[[], int], fee_rates: tuple[Decimal, Decimal] | None = None,
                 perps: Mapping[str, str] | None = None) -> None:
        self.rules = dict(rules)
        self.perps = {s: c for s, c in (perps or {}).items() if s in self.rules}
        self.spot_rules = {s: r for s, r in self.rules.items() if s not in self.perps}
        self._book = book
        self._now_ms = now_ms
        self._fees = fee_rates
        self._open_ms = int(now_ms())
        self._minutes: dict[str, deque[_Candle]] = {s: deque(maxlen=MAX_MINUTES) for s in self.rules}
        self._fills: dict[str, deque[dict]] = {s: deque(maxlen=RECENT_FILLS) for s in self.rules}
        self.coin_list: list[str] = []  # base coins of the served symbols, then the quote coin
        for s in self.rules:
            try:
                c = base_coin(s)
            except ValueError:
                continue
            if c not in self.coin_list:
                self.coin_list.append(c)
        self.coin_list.append(QUOTE_COIN)

    # -- the market listener ------------------------------------------------------------------

    def book_changed(self, symbol: str) -> int:
        """A book change: nothing to keep (the book is read live). Returns 0."""
        return 0

    def traded(self, symbol: str, trades) -> int:
        """Public trades of ``symbol`` (v2 objects: ts, price, size, side, tradeId), oldest first:
        kept for ``recent_fills`` and folded into the one-minute candles. A trade that is not a
        positive size at a finite price, or without a whole ts, is skipped. Returns how many were kept."""
        minutes, fills = self._minutes.get(symbol), self._fills.get(symbol)
        if minutes is None:
            return 0
        n = 0
        for t in trades:
            try:
                price, size, ts = Decimal(t["price"]), Decimal(t["size"]), int(t["ts"])
            except (KeyError, TypeError, ValueError, InvalidOperation):
                continue
            if not (price.is_finite() and size.is_finite()) or size <= 0:
                continue
            start = ts - ts % MINUTE_MS
            if not minutes or minutes[-1].start_ms < start:
                minutes.append(_Candle(start, price))
            elif minutes[-1].start_ms > start:  # older than the current minute: out of order, skipped
                continue
            minutes[-1].add(price, size)
            fills.append({"symbol": symbol, "tradeId": str(t.get("tradeId", "")), "side": str(t.get("side", "")),
                          "price": fmt(price), "size": fmt(size), "ts": str(ts)})
            n += 1
        return n

    # -- routes -------------------------------------------------------------------------------

    def answer(self, path: str, query: dict):
        """The data of public route ``path`` for ``query``.

        Raises:
            KeyError: not a public route. OrderRejected: see the module docstring.
        """
        return getattr(self, PUBLIC_ROUTES[path])(query)

    def time(self, q: dict) -> dict:
        return {"serverTime": str(int(self._now_ms()))}

    def margin_currencies(self, q: dict) -> list:
        return []

    def contracts(self, q: dict) -> list:
        maker, taker = (fmt(r) for r in self._fees) if self._fees is not None else ("0", "0")
        out = []
        for s in self._perps(q):
            r = self.rules[s]
            price_dp, size_dp = _decimals(r.tick_size), _decimals(r.lot_size)
            end_step = fmt(r.tick_size.scaleb(price_dp)) if r.tick_size else "1"
            try:
                base = base_coin(s)
            except ValueError:
                base = s
            out.append({"symbol": s, "baseCoin": base, "quoteCoin": QUOTE_COIN, "buyLimitPriceRatio": "0.05",
                        "sellLimitPriceRatio": "0.05", "feeRateUpRatio": "0", "makerFeeRate": maker,
                        "takerFeeRate": taker, "openCostUpRatio": "0", "supportMarginCoins": [self.perps[s]],
                        "minTradeNum": fmt(r.lot_size) if r.lot_size else "0", "priceEndStep": end_step,
                        "volumePlace": str(size_dp), "pricePlace": str(price_dp),
                        "sizeMultiplier": fmt(r.lot_size) if r.lot_size else "0", "symbolType": "perpetual",
                        "minTradeUSDT": "0", "maxSymbolOrderNum": "200", "maxProductOrderNum": "400",
                        "maxPositionNum": "150", "symbolStatus": "normal", "offTime": "-1", "limitOpenTime": "-1",
                        "deliveryTime": "", "deliveryStartTime": "", "deliveryPeriod": "",
                        "launchTime": str(self._open_ms), "fundInterval": "8", "minLever": "1", "maxLever": "1",
                        "posLimit": "1", "maintainTime": ""})
        return out

    def mix_tickers(self, q: dict) -> list[dict]:
        now = int(self._now_ms())
        return [_mix_ticker(self._ticker(s, now)) for s in self._perps(q)]

    def mix_ticker(self, q: dict) -> list[dict]:
        return self.mix_tickers({**q, "symbol": self._perp(q)})

    def mix_merge_depth(self, q: dict) -> dict:
        return self._merge_depth(self._perp(q), q)

    def mix_fills(self, q: dict) -> list[dict]:
        return self._recent_fills(self._perp(q), q, 100)

    def mix_candles(self, q: dict) -> list[list[str]]:
        return [row[:7] for row in self._candles(self._perp(q), q, MIX_GRANULARITY_MS)]

    def coins(self, q: dict) -> list[dict]:
        """The coins of the served symbols (``coin`` keeps one, case-insensitive)."""
        want = (q.get("coin") or "").upper()
        return [{"coinId": str(i + 1), "coin": c, "transfer": "false", "chains": [], "areaCoin": "no"}
                for i, c in enumerate(self.coin_list) if not want or c == want]

    def symbols(self, q: dict) -> list[dict]:
        maker, taker = (fmt(r) for r in self._fees) if self._fees is not None else ("0", "0")
        out = []
        for s in self._symbols(q):
            r = self.rules[s]
            price_dp, size_dp = _decimals(r.tick_size), _decimals(r.lot_size)
            try:
                base, quote = base_coin(s), QUOTE_COIN
            except ValueError:
                base, quote = s, ""
            out.append({"symbol": s, "baseCoin": base, "quoteCoin": quote, "minTradeAmount": "0",
                        "maxTradeAmount": "10000000000", "takerFeeRate": taker, "makerFeeRate": maker,
                        "pricePrecision": str(price_dp), "quantityPrecision": str(size_dp),
                        "quotePrecision": str(price_dp), "status": "online", "minTradeUSDT": "0",
                        "areaSymbol": "no", "orderQuantity": "200", "openTime": str(self._open_ms)})
        return out

    def tickers(self, q: dict) -> list[dict]:
        now = int(self._now_ms())
        return [self._ticker(s, now) for s in self._symbols(q)]

    def _ticker(self, s: str, now: int) -> dict:
        """Symbol ``s``'s ticker at ``now`` (ms), in the spot ticker's fields."""
        bids, asks = self._book(s, 1)
        bid, ask = (bids[0] if bids else ["", ""]), (asks[0] if asks else ["", ""])
        day = [c for c in self._minutes[s] if c.start_ms > now - DAY_MS]
        last = day[-1].close if day else (self._minutes[s][-1].close if self._minutes[s] else None)
        last_text = fmt(last) if last is not None else bid[0]
        open_p = day[0].open if day else last
        change = (last - open_p) / open_p if day and open_p else _ZERO
        quote = sum((c.quote for c in day), _ZERO)
        return {"symbol": s, "high24h": fmt(max(c.high for c in day)) if day else last_text,
                "open": fmt(open_p) if open_p is not None else last_text,
                "lastPr": last_text, "low24h": fmt(min(c.low for c in day)) if day else last_text,
                "quoteVolume": fmt(quote), "baseVolume": fmt(sum((c.base for c in day), _ZERO)),
                "usdtVolume": fmt(quote), "bidPr": bid[0], "askPr": ask[0], "bidSz": bid[1],
                "askSz": ask[1], "openUtc": fmt(open_p) if open_p is not None else last_text,
                "ts": str(now), "changeUtc24h": fmt(change.quantize(Decimal("1e-5"))),
                "change24h": fmt(change.quantize(Decimal("1e-5")))}

    def orderbook(self, q: dict) -> dict:
        symbol = self._symbol(q)
        limit = _int_param(q, "limit", 150, 1, 150)
        bids, asks = self._book(symbol, limit)
        return {"asks": [list(lv) for lv in asks], "bids": [list(lv) for lv in bids], "ts": str(int(self._now_ms()))}

    def merge_depth(self, q: dict) -> dict:
        return self._merge_depth(self._symbol(q), q)

    def _merge_depth(self, symbol: str, q: dict) -> dict:
        precision = q.get("precision") or "scale0"
        if precision not in ("scale0", "scale1", "scale2", "scale3"):
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter precision error: scale0..scale3")
        text = q.get("limit") or "100"
        if text not in MERGE_LIMITS and text != "100":
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter limit error: 1, 5, 15, 50 or max")
        limit = 100 if text == "100" else MERGE_LIMITS[text]
        tick = self.rules[symbol].tick_size
        step = tick * (10 ** int(precision[-1])) if tick else None
        bids, asks = self._book(symbol, None)
        return {"asks": _merged(asks, step, ROUND_CEILING, limit), "bids": _merged(bids, step, ROUND_FLOOR, limit),
                "ts": str(int(self._now_ms())), "scale": fmt(step) if step else "", "precision": precision,
                "isMaxPrecision": "YES" if precision == "scale0" else "NO"}

    def recent_fills(self, q: dict) -> list[dict]:
        return self._recent_fills(self._symbol(q), q, RECENT_FILLS)

    def _recent_fills(self, symbol: str, q: dict, most: int) -> list[dict]:
        limit = _int_param(q, "limit", 100, 1, most)
        fills = self._fills[symbol]
        return [fills[i] for i in range(len(fills) - 1, max(len(fills) - 1 - limit, -1), -1)]

    def candles(self, q: dict) -> list[list[str]]:
        return self._candles(self._symbol(q), q, GRANULARITY_MS)

    def _candles(self, symbol: str, q: dict, granularities: Mapping[str, int]) -> list[list[str]]:
        """[ts, open, high, low, close, base volume, quote volume, quote volume] rows, oldest first."""
        gran = q.get("granularity")
        if not gran:
            raise OrderRejected(CODE_PARAM_EMPTY, "Parameter granularity cannot be empty")
        width = granularities.get(gran)
        if width is None:
            raise OrderRejected(CODE_PARAM_ERROR, f"Parameter granularity error: one of {', '.join(granularities)}")
        limit = _int_param(q, "limit", 100, 1, 1000)
        start = _int_param(q, "startTime", 0, 0, 10 ** 15)
        end = _int_param(q, "endTime", 10 ** 15, 0, 10 ** 15)
        buckets: dict[int, list] = {}
        for c in self._minutes[symbol]:
            b = c.start_ms - c.start_ms % width
            if not start <= b <= end:
                continue
            row = buckets.get(b)
            if row is None:
                buckets[b] = [b, c.open, c.high, c.low, c.close, c.base, c.quote]
            else:
                row[2], row[3], row[4] = max(row[2], c.high), min(row[3], c.low), c.close
                row[5] += c.base
                row[6] += c.quote
        rows = [buckets[b] for b in sorted(buckets)][-limit:]
        return [[str(r[0]), fmt(r[1]), fmt(r[2]), fmt(r[3]), fmt(r[4]), fmt(r[5]), fmt(r[6]), fmt(r[6])]
                for r in rows]

    # -- helpers ------------------------------------------------------------------------------

    def _symbol(self, q: dict) -> str:
        """The query's spot symbol. Raises OrderRejected: 40019 none, 40034 not a spot symbol here."""
        symbol = q.get("symbol")
        if not symbol:
            raise OrderRejected(CODE_PARAM_EMPTY, "Parameter symbol cannot be empty")
        check_symbol(self.spot_rules, symbol)
        return symbol

    def _symbols(self, q: dict) -> list[str]:
        return [self._symbol(q)] if q.get("symbol") else list(self.spot_rules)

    def _product(self, q: dict) -> bool:
        """Whether the query's productType is USDT-FUTURES (another of the six: False).

        Raises:
            OrderRejected: 40019 none, 40020 not one of the exchange's six.
        """
        product = q.get("productType")
        if not product:
            raise OrderRejected(CODE_PARAM_EMPTY, "Parameter productType cannot be empty")
        if product.upper() not in PRODUCT_TYPES:
            raise OrderRejected(CODE_PARAM_ERROR, "Parameter productType error")
        return product.upper() == MIX_PRODUCT

    def _perp(self, q: dict) -> str:
        """The query's perpetual. Raises OrderRejected: 40019 / 40020 (``_product``), 40019 no
        symbol, 40034 not a perpetual of the query's product type here."""
        usdt = self._product(q)
        symbol = q.get("symbol")
        if not symbol:
            raise OrderRejected(CODE_PARAM_EMPTY, "Parameter symbol cannot be empty")
        check_symbol(self.perps if usdt else {}, symbol)
        return symbol

    def _perps(self, q: dict) -> list[str]:
        if q.get("symbol"):
            return [self._perp(q)]
        return list(self.perps) if self._product(q) else []


def _mix_ticker(t: dict) -> dict:
    """A spot-field ticker as the mix tickers write it (no funding, no index: the last price)."""
    out = {k: v for k, v in t.items() if k != "open"}
    out.update({"open24h": t["open"], "indexPrice": t["lastPr"], "markPrice": t["lastPr"], "fundingRate": "0",
                "holdingAmount": "0", "deliveryStartTime": None, "deliveryTime": None, "deliveryStatus": ""})
    return out


def _decimals(step: Decimal | None) -> int:
    """Decimal places of a tick / lot (None: 8)."""
    if step is None:
        return 8
    return max(0, -step.normalize().as_tuple().exponent)


def _int_param(q: dict, name: str, default: int, lo: int, hi: int) -> int:
    """A whole-number query parameter within lo..hi (absent or empty: ``default``).

    Raises:
        OrderRejected: 40020 anything else.
    """
    v = q.get(name)
    if v is None or v == "":
        return default
    if not (v.isascii() and v.isdigit() and len(v) <= 16 and lo <= int(v) <= hi):
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter {name} error: a whole number in {lo}..{hi}")
    return int(v)


def _merged(levels: list, step: Decimal | None, rounding: str, limit: int | None) -> list[list[str]]:
    """Levels best first merged onto multiples of ``step`` (bids rounded down, asks up), sizes
    summed; at most ``limit`` (None: all). No step: the levels as they are."""
    out: list[list] = []
    for p, s in levels:
        price = Decimal(p)
        key = (price / step).to_integral_value(rounding) * step if step else price
        if out and out[-1][0] == key:
            out[-1][1] += Decimal(s)
        else:
            if limit is not None and len(out) >= limit:
                break
            out.append([key, Decimal(s)])
    return [[fmt(k), fmt(v)] for k, v in out]
