"""The quoting scenario's resting orders, sans I/O: one bid and one ask kept where the risk gateway's
planner puts a passive order, as a slow path that keeps two-sided quotes would have them placed; the
fast path's EMERGENCYs then pull them (or not: fast path off), and the evaluation judges the fills.

``Quoter.on_book(instrument_id)`` runs at every BOOK of the instrument, after the gateway has seen the
BOOK's SIGNAL. For each side that has no working order (one not being cancelled), it places one of
``quote_lots`` lots at the planner's passive price (``Planner.limit_price`` with no extra offset: the
mid -/+ max(half the spread, 0.3 * sigma * risk_aversion), rounded away from crossing; the touch
while the spread dominates) through the gateway's pre-trade checks (``Planner.submit``: a denial is
an ``OrderDenied`` event like any other), origin LLM (the slow path's instructions' origin), unless:

- the instrument is in its EMERGENCY cool-down (the checks would deny it: COOLDOWN) or the gateway is
  not ACTIVE (REDUCING / HALTED: new quotes would be denied or would not reduce);
- it could take the position beyond ``max_position_lots`` (the position plus every open order of
  that side, cancelling ones included, plus this one): a quoter at its limit quotes one side only;
- the gateway denied that side's last quote less than ``retry_ns`` ago (default ``QUOTE_RETRY_NS``:
  a slow path asks again at its own pace, of the order of the llm process's ``min_gap_ms``, not at
  every book; without it every BOOK under the order rate limit would add a denial).

A quote leaves the book by a fill, by the gateway's own reprice rule (the mid moved beyond
``max(reprice_sigmas * sigma, tick)`` from where it was placed: a cancel, why ``moved``: the quote's
expiry), or by an EMERGENCY cancel; the next BOOK after that places it again. Order ids:
``order_id_for(instrument, n, QUOTE_LEG + side, epoch)``, ``n`` the quoter's running count: unique
and the same on every run.
"""

from __future__ import annotations

from pipeline.trading.messages import OrderOrigin, Side, order_id_for
from pipeline.trading.risk.checks import TradingState
from pipeline.trading.risk.limits import EPS, decimals_of

#: the leg numbers of quotes (bid: QUOTE_LEG + BUY, ask: QUOTE_LEG + SELL), apart from the planner's
QUOTE_LEG = 1 << 20
#: how long a side waits after a denied quote: 200 ms (a slow path's pace; module docstring)
QUOTE_RETRY_NS = 200_000_000


class Quoter:
    """Two-sided quotes of ``quote_lots`` lots per instrument through ``gateway`` (module docstring).
    ``counts``: quotes placed (approved), denied, and skipped for the cool-down or the position limit.

    Raises (constructor):
        ValueError: ``quote_lots`` < 1 or ``retry_ns`` < 0.
    """

    def __init__(self, gateway, quote_lots: int, retry_ns: int = QUOTE_RETRY_NS):
        if quote_lots < 1 or retry_ns < 0:
            raise ValueError(f"quote_lots must be >= 1 and retry_ns >= 0, got {quote_lots} and {retry_ns}")
        self.gw = gateway
        self.quote_lots = int(quote_lots)
        self.retry_ns = int(retry_ns)
        self.n = 0
        self.retry_at: dict[tuple[int, int], int] = {}  # (instrument, side) -> no quote before this time
        self.counts = {"quotes_placed": 0, "quotes_denied": 0, "skipped_cooldown": 0, "skipped_position": 0}

    def on_book(self, instrument_id: int) -> list:
        """The gateway events of this BOOK's quoting (module docstring): OrderApproved / OrderDenied."""
        gw = self.gw
        bk = gw.books.get(instrument_id)
        if bk is None or not bk.mid > 0 or gw.state != TradingState.ACTIVE:
            return []
        bid = ask = False
        for w in bk.working.values():
            if not w.cancelling:
                if w.side == Side.BUY:
                    bid = True
                else:
                    ask = True
        if bid and ask:
            return []
        now = gw.clock()
        if bk.cooldown_until_ns > now:
            self.counts["skipped_cooldown"] += 1
            return []
        spec = bk.spec
        size = round(self.quote_lots * spec.lot, decimals_of(spec.lot))
        max_pos = spec.max_position_lots * spec.lot * (1 + EPS)
        buys, sells = bk.open_sizes()
        out: list = []
        for side, have in ((Side.BUY, bid), (Side.SELL, ask)):
            if have or self.retry_at.get((instrument_id, side), -1) > now:
                continue
            worst = bk.position + buys + size if side == Side.BUY else -(bk.position - sells - size)
            if worst > max_pos:
                self.counts["skipped_position"] += 1
                continue
            self.n += 1
            oid = order_id_for(spec.id, self.n, QUOTE_LEG + int(side), gw.epoch)
            ok = gw.submit(bk, oid, side, gw.limit_price(bk, side, 0), size, None, 0, out, OrderOrigin.LLM)
            self.counts["quotes_placed" if ok else "quotes_denied"] += 1
            if not ok:
                self.retry_at[(instrument_id, side)] = now + self.retry_ns
        return out
