"""The feature stage: BOOK / TRADE from the ``md`` ring in, one FEATURES message per accepted BOOK out.

``FeatureAgent`` (``module = "procs.features:FeatureAgent"``) keeps one ``pipeline.trading.features.FeatureState``
per configured instrument (tick size from the config). Per message read with ``Reader.poll``:

- TRADE (40 B): ``update_from_trade``; a rejected trade is counted (``trade_rej_<reason>``).
- BOOK (504 B): ``compute`` into one preallocated FEATURES record (552 B), written to the output
  with the BOOK's ``ts_origin_ns`` unchanged; a rejected BOOK is counted (``rejected`` and
  ``rej_<reason>``) and nothing is emitted.
- anything else: counted (``unknown_kind``, ``bad_size``, ``unknown_instrument``). The handler never
  raises: an unexpected error is counted (``errors``) and logged once, and the message is skipped.

Params (``[[processes]] params = {...}``): ``input`` / ``output`` ring names (default: the only
one), ``tau_ofi_ms`` (1000), ``tau_trade_ms`` (1000), ``tau_vol_fast_ms`` (1000),
``tau_vol_slow_ms`` (10000), ``vpin_buckets`` (50), ``vpin_bucket_volume``: a number, or a
``{symbol: volume}`` table of configured symbols (default, and for a symbol the table leaves out: 1000
lots of the instrument). Typed (``FeatureStageParams``): an unknown or ill-typed field is a ConfigError
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
from pipeline.trading.features import OK, FeatureParams, FeatureState, Reason, compute, update_from_trade
from pipeline.trading.messages import BOOK_DTYPE, FEATURES_DTYPE, TRADE_DTYPE, Kind

_BOOK_BYTES = BOOK_DTYPE.itemsize
_TRADE_BYTES = TRADE_DTYPE.itemsize
_U16 = np.dtype("<u2")


_Positive = Annotated[float, msgspec.Meta(gt=0)]


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


def parse_params(name: str, params: dict) -> FeatureStageParams:
    """``params`` of process ``name`` as ``FeatureStageParams``.

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process.
    """
    return parse_stage_params(name, params, FeatureStageParams)


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
        self.buf = np.zeros(1, FEATURES_DTYPE)
        self.payload = memoryview(self.buf).cast("B")
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
        if code != OK:
            self.stats["rejected"] += 1
            self._count("rej_" + Reason(code).name.lower())
            return
        if self.ctx.emit(self.out, Kind.FEATURES, self.payload, ts_origin_ns):
            self.stats["emitted"] += 1
        else:
            self.stats["out_drops"] += 1

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
