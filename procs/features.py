"""The feature stage: BOOK / TRADE from the ``md`` ring in, one FEATURES message per accepted BOOK out.

``FeatureAgent`` (``module = "procs.features:FeatureAgent"``) keeps one ``pipeline.trading.features.FeatureState``
per configured instrument (tick size from the config). Per message read with ``Reader.poll``:

- TRADE (40 B): ``update_from_trade``; a rejected trade is counted (``trade_rej_<reason>``).
- BOOK (504 B): ``compute`` into one preallocated FEATURES record (552 B), written to the output
  with the BOOK's ``ts_origin_ns`` unchanged; a rejected BOOK is counted (``rejected`` and
  ``rej_<reason>``) and nothing is emitted, except for a crossed one that says so
  (``BOOK_FLAG_CROSSED``, ITCH) of an instrument with an accepted BOOK before: a stale marker
  (``stale_markers``: ``FEATURES_FLAG_STALE_BOOK``, the last accepted mid, spread 0, a zero vector),
  so that risk stops new orders at once. A BOOK flagged rebuilding or invalid (``BOOK_FLAGS_STALE``)
  is computed as any and its FEATURES carry ``FEATURES_FLAG_STALE_BOOK``.
- anything else: counted (``unknown_kind``, ``bad_size``, ``unknown_instrument``). The handler never
  raises: an unexpected error is counted (``errors``) and logged once, and the message is skipped.

Params (``[[processes]] params = {...}``): ``input`` / ``output`` ring names (default: the only
one), ``tau_ofi_ms`` (1000), ``tau_trade_ms`` (1000), ``tau_vol_fast_ms`` (1000),
``tau_vol_slow_ms`` (10000), ``vpin_buckets`` (50), ``vpin_bucket_volume``: a number, or a
``{symbol: volume}`` table of configured symbols (default, and for a symbol the table leaves out: 1000
lots of the instrument), ``basis_pairs`` (none by default): ``[{spot = ID, perp = ID}, ...]``, the
instrument ids of the spot and the USDT-FUTURES perpetual of one base (the same symbol, the same
venue: two subscriptions of one feed), whose BOOKs then give each other the basis slots 90..93
(``pipeline.trading.features.pair_basis``), and ``tau_basis_ms`` (60000), the basis statistics' decay.
A pair naming an unconfigured id, the same id twice, an id of another pair, two symbols or venues, or
a leg of the wrong product type is a ConfigError naming the field (``$.basis_pairs[0].perp``), raised
by the start. Typed (``FeatureStageParams``): an unknown or ill-typed field is a ConfigError
naming the process and the field (``features: bad params: ...``), raised by the supervisor's check
before any process starts, and by the start itself.

Counters (``ctx.stats``): books, trades, emitted, rejected, out_drops, then rej_<reason>,
trade_rej_<reason>, unknown_kind, bad_size, unknown_instrument, errors.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from pipeline.runtime.agent import Agent
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.trading.features import OK, FeatureParams, FeatureState, Reason, compute, pair_basis, update_from_trade
from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_CROSSED, BOOK_FLAGS_STALE, BOOK_HEAD_STRUCT,
                                       FEATURES_DTYPE, FEATURES_FLAG_STALE_BOOK, TRADE_DTYPE, Kind)

_BOOK_BYTES = BOOK_DTYPE.itemsize
_TRADE_BYTES = TRADE_DTYPE.itemsize
_U16 = np.dtype("<u2")


_Positive = Annotated[float, msgspec.Meta(gt=0)]
_InstrumentId = Annotated[int, msgspec.Meta(ge=1, le=65_535)]


class BasisPairParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One spot-perpetual pair of one base, by instrument id."""

    spot: _InstrumentId
    perp: _InstrumentId


class FeatureStageParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The stage's params (see the module docstring); an unknown or ill-typed field fails the start."""

    input: str | None = None  # default: the only input
    output: str | None = None  # default: the only output
    tau_ofi_ms: _Positive = 1000.0
    tau_trade_ms: _Positive = 1000.0
    tau_vol_fast_ms: _Positive = 1000.0
    tau_vol_slow_ms: _Positive = 10_000.0
    vpin_buckets: Annotated[int, msgspec.Meta(ge=1)] = 50
    vpin_bucket_volume: _Positive | dict[str, _Positive] | None = None  # None: 1000 lots of each instrument
    basis_pairs: list[BasisPairParams] = []
    tau_basis_ms: _Positive = 60_000.0


def parse_params(name: str, params: dict) -> FeatureStageParams:
    """``params`` of process ``name`` as ``FeatureStageParams``.

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process.
    """
    return parse_stage_params(name, params, FeatureStageParams)


def check_basis_pairs(name: str, pairs: list[BasisPairParams], instruments) -> list[tuple[str, int, int]]:
    """``pairs`` checked against the configured ``instruments``: ``[(where, spot id, perp id), ...]``.

    Raises:
        ConfigError: naming process ``name`` and the field (``$.basis_pairs[i].spot`` / ``.perp``): an id
            that is not configured, one id as both legs or in two pairs, legs of two symbols or two
            venues, or a leg whose ``product_type`` is not its role's (SPOT / USDT-FUTURES).
    """
    by_id = {inst.id: inst for inst in instruments}
    seen: set[int] = set()
    out = []
    for i, pair in enumerate(pairs):
        where = f"$.basis_pairs[{i}]"

        def bad(field: str, why: str):
            return ConfigError(f"{name}: bad params: {why} - at `{where}.{field}`")

        for field, iid in (("spot", pair.spot), ("perp", pair.perp)):
            if iid not in by_id:
                raise bad(field, f"instrument {iid} is not configured")
            if iid in seen:
                raise bad(field, f"instrument {iid} is already a leg of a basis pair")
            seen.add(iid)
            want = "SPOT" if field == "spot" else "USDT-FUTURES"
            got = getattr(by_id[iid], "product_type", want)
            if got != want:
                raise bad(field, f"instrument {iid} is {got}, the {field} leg must be {want}")
        spot, perp = by_id[pair.spot], by_id[pair.perp]
        if spot.symbol != perp.symbol or spot.venue != perp.venue:
            raise bad("perp", f"the legs of one base are one symbol on one venue, not {spot.symbol} on {spot.venue} "
                              f"and {perp.symbol} on {perp.venue}")
        out.append((where, pair.spot, pair.perp))
    return out


class FeatureAgent(Agent):
    """BOOK / TRADE in, FEATURES out (see the module docstring)."""

    #: the struct ``ctx.params`` must convert to (the supervisor converts it before any process starts)
    params_type = FeatureStageParams

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.p = p = parse_params(ctx.name, ctx.params)
        self.inp = ctx.input(p.input)
        self.out = ctx.output(p.output)
        bucket = p.vpin_bucket_volume
        if isinstance(bucket, dict):
            unknown = sorted(set(bucket) - {inst.symbol for inst in ctx.config.instruments})
            if unknown:
                raise ConfigError(f"{ctx.name}: bad params: vpin_bucket_volume names unconfigured instruments "
                                  f"{unknown} - at `$.vpin_bucket_volume`")
        self.states: dict[int, FeatureState] = {}
        for inst in ctx.config.instruments:
            vol = (bucket.get(inst.symbol) if isinstance(bucket, dict) else bucket) or 1000 * inst.lot_size
            try:
                params = FeatureParams(
                    tau_ofi_ns=int(p.tau_ofi_ms * 1_000_000), tau_trade_ns=int(p.tau_trade_ms * 1_000_000),
                    tau_vol_fast_ns=int(p.tau_vol_fast_ms * 1_000_000),
                    tau_vol_slow_ns=int(p.tau_vol_slow_ms * 1_000_000),
                    vpin_bucket_volume=float(vol), vpin_buckets=p.vpin_buckets)
            except ValueError as exc:  # a decay constant under 1 ns
                raise ConfigError(f"{ctx.name}: bad params: {exc}") from None
            self.states[inst.id] = FeatureState(inst.id, inst.tick_size, params)
        for _where, spot, perp in check_basis_pairs(ctx.name, p.basis_pairs, ctx.config.instruments):
            try:
                pair_basis(self.states[spot], self.states[perp], int(p.tau_basis_ms * 1_000_000))
            except ValueError as exc:  # a decay constant under 1 ns
                raise ConfigError(f"{ctx.name}: bad params: {exc} - at `$.tau_basis_ms`") from None
        self.buf = np.zeros(1, FEATURES_DTYPE)
        self.payload = memoryview(self.buf).cast("B")
        marker = np.zeros(1, FEATURES_DTYPE)  # _stale_marker's record (its vector stays 0)
        self._marker, self._marker_bytes = marker[0], memoryview(marker).cast("B")
        self.stats = ctx.stats
        self.stats.update(books=0, trades=0, emitted=0, rejected=0, out_drops=0)
        self._logged_error = False
        self._warm_book: bytes | None = None  # keep_warm: a copy of the latest BOOK, when asked for
        self._warm_state: FeatureState | None = None
        self._warm_buf = np.zeros(1, FEATURES_DTYPE)
        self._warm_ns = 0
        self._keep_book = ctx.process.keep_warm_us > 0

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): the latest BOOK again through ``compute``, on a
        private state and into a private record (the real per-instrument state is untouched; nothing
        emitted or counted). Nothing to do before the first BOOK."""
        book = self._warm_book
        if book is None:
            return
        if self._warm_state is None:
            real = self.states[int(np.frombuffer(book, _U16, 1)[0])]
            self._warm_state = FeatureState(real.instrument_id, real.tick_size, real.params)
        self._warm_ns += 10_000_000
        compute(self._warm_state, book, self._warm_buf, self._warm_ns)

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def _on(self, seq, ts_origin_ns, kind, payload) -> None:
        try:
            if kind == Kind.BOOK:
                self._book(payload, ts_origin_ns)
            elif kind == Kind.TRADE:
                self._trade(payload, ts_origin_ns)
            else:
                self._count("unknown_kind")
        except Exception as exc:  # never out of the hot loop: count, log once, skip the message
            self._count("errors")
            if not self._logged_error:
                self._logged_error = True
                self.ctx.log.error("feature_error", error=repr(exc), kind=int(kind))

    def _state_for(self, payload, nbytes: int):
        """The instrument state a BOOK/TRADE payload is for; None (counted) when its size is wrong
        or its instrument is not configured."""
        if len(payload) != nbytes:
            self._count("bad_size")
            return None
        st = self.states.get(int(np.frombuffer(payload, _U16, 1)[0]))
        if st is None:
            self._count("unknown_instrument")
        return st

    def _book(self, payload, ts_origin_ns: int) -> None:
        st = self._state_for(payload, _BOOK_BYTES)
        if st is None:
            return
        self.stats["books"] += 1
        if self._keep_book:
            self._warm_book = bytes(payload)
        code = compute(st, payload, self.buf, ts_origin_ns)
        buf = self.payload
        if code != OK:
            self.stats["rejected"] += 1
            self._count("rej_" + Reason(code).name.lower())
            if not (payload[2] & BOOK_FLAG_CROSSED and code == Reason.CROSSED_BOOK and st.books):
                return
            buf = self._stale_marker(st, payload)  # risk must hear at once that this book cannot be traded on
        elif payload[2] & BOOK_FLAGS_STALE:  # rebuilding / invalid: computed as any, flagged stale
            self.buf["flags"] |= FEATURES_FLAG_STALE_BOOK
        if self.ctx.emit(self.out, Kind.FEATURES, buf, ts_origin_ns):
            self.stats["emitted"] += 1
        else:
            self.stats["out_drops"] += 1

    def _stale_marker(self, st: FeatureState, book) -> memoryview:
        """The FEATURES that stands for a crossed BOOK (which ``compute`` refuses): the instrument's id,
        the BOOK's seq and time, ``FEATURES_FLAG_STALE_BOOK``, its last accepted mid, spread 0 and a
        zero vector (the fast stage says HOLD with SIGNAL_FLAG_STALE_BOOK; risk takes no new order)."""
        m = self._marker
        _iid, _fl, _nb, _na, seq, exch_ts = BOOK_HEAD_STRUCT.unpack_from(book, 0)
        m["instrument_id"], m["flags"] = st.instrument_id, FEATURES_FLAG_STALE_BOOK
        m["book_seq"], m["exch_ts_ns"] = seq, exch_ts
        m["ref_mid"], m["ref_spread"] = st.prev_mid, 0.0
        self.stats["stale_markers"] = self.stats.get("stale_markers", 0) + 1
        return self._marker_bytes

    def _trade(self, payload, ts_origin_ns: int) -> None:
        st = self._state_for(payload, _TRADE_BYTES)
        if st is None:
            return
        self.stats["trades"] += 1
        code = update_from_trade(st, payload, ts_origin_ns)
        if code != OK:
            self._count("trade_rej_" + Reason(code).name.lower())

    def do_work(self) -> int:
        n = self.inp.poll(self._on, self.ctx.batch)
        if n:
            self.ctx.received(n)
        return n
