"""The paper venue's ITCH market: the session it publishes over MoldUDP64, and the Level-3 book our
orders are matched against.

- ``load_session(path)``: the messages of a BinaryFILE (``.gz`` too), or of the synthetic session
  generator when no path is given; what a broken file does is counted, never raised: a file that
  ends inside a frame or without its end marker (``truncated``), a message too long for one MoldUDP64
  datagram (``oversized``, left out: no ITCH 5.0 message is longer than 50 bytes). Messages that do
  not decode are kept (the feed counts them, as a real feed would see them).
- ``ItchVenueMarket``: an ``ExecutionBook`` of the served symbols, fed every message as it is
  published (``on_published``, the publisher's hook: dropped packets too, since the venue's book
  follows the session, not the wire), with the order engine's market interface: ``levels(symbol,
  n)`` (bids, asks) best first as ``[price, size]`` strings, and listeners told
  ``book_changed(symbol)`` after each change and ``traded(symbol, [{"price", "size"}])`` for each
  execution (E, printable C, and P) before it, as ``pipeline.venue.server`` tells its own.

Equity rules the venue applies to our orders (``rules(symbols)``): prices in $0.01 ticks (SEC Reg NMS
Rule 612's minimum increment for quotes at $1.00 or more; the $0.0001 it allows below $1.00 is not
applied: every order of a served symbol is held to $0.01), sizes in whole shares (lot 1: NASDAQ
accepts odd lots; the round lot of 100 in the directory message is informational and not enforced).
A listener that raises is counted (``listener_errors``) and the first few kept in
``listener_failures``; the market goes on.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Mapping

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.errors import IncompleteSession, ItchError, TruncatedFrame
from pipeline.trading.itch.executions import ExecutionBook
from pipeline.trading.itch.framing import MOLD_HEADER_BYTES, iter_file_frames
from pipeline.trading.itch.synth import generate_session
from pipeline.trading.messages import TRADE_STRUCT
from pipeline.venue.errors import VenueError
from pipeline.venue.itch_udp import DEFAULT_DATAGRAM_BYTES, ItchUdpPublisher, MoldStream
from pipeline.venue.jumps import shift_itch_prices
from pipeline.venue.order_fields import InstrumentRules

EQUITY_TICK = Decimal("0.01")
EQUITY_LOT = Decimal("1")
_MAX_MESSAGE_BYTES = DEFAULT_DATAGRAM_BYTES - MOLD_HEADER_BYTES - 2
_KEEP_FAILURES = 10


def load_session(path: str | None, *, seed: int = 1, n_events: int = 100_000,
                 symbols: tuple[str, ...] | None = None) -> tuple[list[bytes], dict[str, int]]:
    """``(messages, counts)``: the BinaryFILE at ``path`` (None or "": the synthetic session of
    ``seed`` / ``n_events`` over ``symbols``, default the generator's), its messages in order, and
    ``counts`` (``messages``, ``truncated``, ``oversized``, ``read_errors``).

    Raises:
        VenueError: the file cannot be opened at all, or it holds no message.
    """
    counts = {"messages": 0, "truncated": 0, "oversized": 0, "read_errors": 0}
    if not path:
        kw = {"symbols": symbols} if symbols else {}
        msgs = [M.encode(r) for r in generate_session(seed, n_events, **kw)]
        counts["messages"] = len(msgs)
        return msgs, counts
    msgs = []
    try:
        for _off, m in iter_file_frames(path, require_end=True):
            if len(m) > _MAX_MESSAGE_BYTES:
                counts["oversized"] += 1
            else:
                msgs.append(bytes(m))
    except (TruncatedFrame, IncompleteSession, EOFError):
        counts["truncated"] += 1
    except FileNotFoundError as exc:
        raise VenueError(f"ITCH file {path!r} cannot be read: {exc}") from None
    except (ItchError, OSError) as exc:  # a corrupt .gz mid-way: keep what was read
        if not msgs:
            raise VenueError(f"ITCH file {path!r} cannot be read: {type(exc).__name__}: {exc}") from None
        counts["read_errors"] += 1
    if not msgs:
        raise VenueError(f"ITCH file {path!r} holds no message")
    counts["messages"] = len(msgs)
    return msgs, counts


def rules(symbols: Mapping[str, object]) -> dict[str, InstrumentRules]:
    """The equity ``InstrumentRules`` (tick $0.01, lot 1 share) of each symbol in ``symbols``."""
    return {s: InstrumentRules(s, EQUITY_TICK, EQUITY_LOT) for s in symbols}


def _p4_text(p4: int) -> str:
    whole, frac = divmod(int(p4), 10_000)
    return f"{whole}.{frac:04d}".rstrip("0").rstrip(".") if frac else str(whole)


class ItchVenueMarket:
    """The venue's Level-3 book of the served ``symbols`` (``{order symbol: id}``) over the published
    ``messages`` (module docstring); ``stocks`` (``{ITCH stock: id}``, default the order symbols
    themselves) names each one's stock in the session (e.g. ``AAPL`` for the order symbol ``AAPLUSDT``:
    the paper account is quoted in USDT)."""

    def __init__(self, messages: list[bytes], symbols: Mapping[str, int], stocks: Mapping[str, int] | None = None):
        """Raises:
        VenueError: no symbol, ids that are not distinct ints in 0..65535, a stock whose id is no
            symbol's.
        """
        if not symbols:
            raise VenueError("the ITCH market needs at least one symbol")
        stocks = dict(symbols if stocks is None else stocks)
        unknown = sorted(s for s, i in stocks.items() if i not in set(symbols.values()))
        if unknown:
            raise VenueError(f"ITCH stocks {unknown} map to ids no served symbol has ({dict(symbols)})")
        try:
            self.book = ExecutionBook(stocks, on_trade=self._on_trade)
        except ItchError as exc:
            raise VenueError(str(exc)) from None
        self.messages = messages
        self.symbols = dict(symbols)
        self._by_iid = {i: s for s, i in self.symbols.items()}
        self._listeners: list = []
        self.listener_errors = 0
        self.listener_failures: list[str] = []
        self.applied = 0

    @property
    def inst_ids(self) -> list[str]:
        """The served symbols (the order engine's instruments)."""
        return list(self.symbols)

    def add_market_listener(self, listener) -> None:
        """``listener.book_changed(symbol)`` / ``listener.traded(symbol, trades)`` from now on."""
        self._listeners.append(listener)

    def on_published(self, first_seq: int, n: int) -> None:
        """Messages ``first_seq .. first_seq + n - 1`` were published: into the book, listeners told."""
        book = self.book
        for seq in range(first_seq, first_seq + n):
            m = self.messages[seq - 1]
            iid = book.apply_raw(m, 0, len(m), seq)
            self.applied += 1
            if iid >= 0:
                self._notify("book_changed", self._by_iid[iid])

    def _on_trade(self, payload) -> None:
        iid, _side, _tid, _ts, price, size = TRADE_STRUCT.unpack_from(payload, 0)
        symbol = self._by_iid.get(iid)
        if symbol is not None:
            self._notify("traded", symbol, [{"price": repr(price), "size": repr(size)}])

    def _notify(self, method: str, *args) -> None:
        for listener in self._listeners:
            try:
                getattr(listener, method)(*args)
            except Exception as exc:  # the market goes on; the stage logs the first few
                self.listener_errors += 1
                if len(self.listener_failures) < _KEEP_FAILURES:
                    self.listener_failures.append(f"{type(exc).__name__}: {exc}")

    def levels(self, symbol: str, n: int | None = None) -> tuple[list, list]:
        """(bids, asks) of ``symbol`` best first as ``[price, size]`` strings, at most ``n`` a side
        (all when None); empty for a symbol without a book yet. Raises nothing."""
        iid = self.symbols.get(symbol)
        st = self.book._by_iid.get(iid) if iid is not None else None
        if st is None:
            return [], []
        bids, asks = st.bids, st.asks
        bp = bids.prices[::-1] if n is None else bids.prices[:-n - 1:-1]
        ap = asks.prices if n is None else asks.prices[:n]
        return ([[_p4_text(p), str(bids.size[p])] for p in bp], [[_p4_text(p), str(asks.size[p])] for p in ap])


def make_itch(p, instruments, log=None):
    """The venue's ITCH side from its params ``p`` (``procs.venue.VenueParams``: ``itch_port`` /
    ``itch_port_file``, ``itch_file``, ``itch_events``, ``itch_rate``, ``itch_speed``, ``itch_drop_prob``,
    ``itch_drop_seqs``, ``itch_unanswered_seqs``, ``itch_delay_ms``, ``itch_delay_jitter_ms``,
    ``itch_jump_prob``, ``itch_jump_ticks``, ``itch_orders``, ``itch_stocks``, ``seed``) and the config's
    ``instruments``: ``(publisher, market, counts)``; ``(None, None, {})`` when ITCH is off (no port,
    no port file); ``market`` None unless ``itch_orders`` (then our orders match against the ITCH book
    of the paper instruments); ``counts`` as ``load_session``'s plus ``jumps``. ``log`` (optional) is
    told them. With ``itch_jump_prob`` the session's prices jump (``pipeline.venue.jumps.shift_itch_prices``)
    before anything uses it: the wire and the venue's own book see the same shifted session.

    Raises:
        VenueError: a bad ITCH value (a delay or jump value out of its range too), an unreadable or
            empty file, ``itch_orders`` without paper instruments or without the session on.
    """
    if not p.itch_port and not p.itch_port_file:
        if p.itch_orders:
            raise VenueError("itch_orders needs the ITCH session on: set itch_port or itch_port_file")
        return None, None, {}
    paper = {i.symbol: i.id for i in instruments if getattr(i, "venue", "paper") == "paper"}
    msgs, counts = load_session(p.itch_file or None, seed=p.seed, n_events=p.itch_events)
    msgs, counts["jumps"] = shift_itch_prices(msgs, p.itch_jump_prob, p.itch_jump_ticks, p.seed)
    if log is not None:
        log.info("itch_session", path=p.itch_file or "(synthetic)", **counts)
    market = None
    if p.itch_orders:
        if not paper:
            raise VenueError("itch_orders needs [[instruments]] with venue = 'paper' (the symbols to match)")
        market = ItchVenueMarket(msgs, paper, dict(p.itch_stocks) if p.itch_stocks else None)
    stream = MoldStream(p.itch_session, msgs)
    publisher = ItchUdpPublisher(
        stream, p.itch_port, target_port_file=p.itch_port_file, rate_msgs_per_s=p.itch_rate, speed=p.itch_speed,
        drop_prob=p.itch_drop_prob, fault_seed=p.seed, drop_seqs=p.itch_drop_seqs,
        unanswered_seqs=p.itch_unanswered_seqs, on_published=market.on_published if market else None,
        delay_ms=p.itch_delay_ms, delay_jitter_ms=p.itch_delay_jitter_ms)
    return publisher, market, counts
