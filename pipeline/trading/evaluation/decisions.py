"""The fast path's inputs and decisions in the evaluation, sans-I/O apart from loading a model file.

- ``compute_features``: a tape's BOOK / TRADE payloads through ``pipeline.trading.features`` as the
  feature stage runs it (``procs.features``: one ``FeatureState`` per instrument, its ``FeatureParams``
  from the stage's params, the legs of its ``basis_pairs`` paired with ``tau_basis_ms``
  (``feature_params``' ``StageFeatureParams.pairs``), each message's simulated time as the fallback
  time), ONCE per market: every
  variant reads the same ``FeatureTable``. A BOOK the features reject gives no row (the stage passes
  nothing on); the rejections are counted by reason. For the synthetic market the same rows come
  per instrument from the processes that replay it (``features_of_instrument``, ``merge_features``),
  unless the instrument is a pair's leg (its basis needs the other leg's books: the whole tape then).
- ``marks_of``: the mid at every BOOK with both sides (the P&L marks).
- Decisions, one label, one set of SIGNAL flags and one signal value per row: ``model_decisions`` (an
  ONNX model run over all rows at once through onnxruntime on the CPU, labelled and flagged by the
  fast stage's rule, ``pipeline.trading.model.decide.deployed_decisions``, which a test holds to
  ``procs.fast``'s own: the thresholds, the at-risk side of an EMERGENCY from the model's ``at_risk``
  output, the input-range guard from its card's bounds; value P(LEAN_BUY) - P(LEAN_SELL)),
  ``hold_decisions`` (always HOLD, value 0), ``imbalance_decisions`` (the sign of a book-imbalance
  feature beyond a dead band; value the feature), ``imbalance_emergency_decisions`` (the same
  imbalance beyond a wider band as an EMERGENCY for the side it threatens), ``random_decisions`` (a
  seeded random labeler with another variant's label and side frequencies).

The flags a variant sets are the SIGNAL's ``SIGNAL_FLAG_AT_RISK_BID`` / ``_ASK`` / ``_OUT_OF_RANGE``
bits; ``SIGNAL_FLAG_WARMUP`` is the simulator's, from the FEATURES header, as in the fast stage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.trading.evaluation.metrics import MarkSeries
from pipeline.trading.evaluation.replay import EvaluationError, InstrumentPart, MarketEvent, Tape, TapeInstrument
from pipeline.trading.features import (F_IMBALANCE_1, F_IMBALANCE_3, F_IMBALANCE_5, F_IMBALANCE_10, F_IMBALANCE_15,
                                       OK, FeatureParams, FeatureState, Reason, compute, pair_basis,
                                       update_from_trade)
from pipeline.trading.messages import (FEATURES_DTYPE, FEATURES_LEN, SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID,
                                       Kind, Label)

N_LABELS = len(Label)
IMBALANCE_SLOTS = {1: F_IMBALANCE_1, 3: F_IMBALANCE_3, 5: F_IMBALANCE_5, 10: F_IMBALANCE_10, 15: F_IMBALANCE_15}
ONNX_CHUNK_ROWS = 65_536  # rows per onnxruntime call (bounds the output's memory, not its speed)
#: the imbalance EMERGENCY rule's default band: |imbalance| beyond it threatens one side's quotes
DEFAULT_EMERGENCY_EPS = 0.6
_SIDE_BITS = (SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_AT_RISK_ASK)


@dataclass
class FeatureTable:
    """One row per BOOK the feature stage accepted, in tape order: the FEATURES records (``rows``:
    ``FEATURES_DTYPE``: header and the 128 features), the tape event each came from and its time."""

    rows: np.ndarray  # FEATURES_DTYPE [n]
    event_index: np.ndarray  # int64 [n]: index into Tape.events
    ts_ns: np.ndarray  # int64 [n]
    rejected: dict[str, int] = field(default_factory=dict)  # BOOK / TRADE rejections by reason

    @property
    def X(self) -> np.ndarray:
        """The feature vectors, float32 [n, 128] (a view)."""
        return self.rows["features"]

    @property
    def instrument_id(self) -> np.ndarray:
        return self.rows["instrument_id"].astype(np.int64)

    def __len__(self) -> int:
        return len(self.rows)


class StageFeatureParams(dict):
    """What the feature stage builds from its params: instrument id -> ``FeatureParams``, and
    ``pairs``: its spot-perpetual basis pairs, ``(spot id, perp id, tau_basis_ns)`` each (none by default)."""

    def __init__(self, params: Mapping[int, FeatureParams], pairs: Sequence[tuple[int, int, int]] = ()):
        super().__init__(params)
        self.pairs = tuple(pairs)


def feature_params(instruments: Sequence[TapeInstrument], stage_params: Mapping | None = None) -> StageFeatureParams:
    """Each instrument's ``FeatureParams`` and the basis pairs, as ``procs.features.FeatureAgent``
    builds them from its params (None: the stage's defaults; the VPIN bucket is 1000 lots unless the
    params set one; ``basis_pairs`` / ``tau_basis_ms`` checked as the stage checks them, by
    ``procs.features.check_basis_pairs``: a tape's instruments name no product type, so the legs'
    products are left to the pipeline's own start to check).

    Raises:
        EvaluationError: params the stage would refuse (named, a pair's field included).
    """
    from types import SimpleNamespace

    from pipeline.runtime.errors import ConfigError
    from procs.features import check_basis_pairs, parse_params

    try:
        p = parse_params("features", dict(stage_params or {}))
        legs = [SimpleNamespace(id=i.id, symbol=i.symbol, venue=getattr(i, "venue", "")) for i in instruments]
        pairs = [(spot, perp, int(p.tau_basis_ms * 1_000_000))
                 for _where, spot, perp in check_basis_pairs("features", p.basis_pairs, legs)]
    except ConfigError as exc:
        raise EvaluationError(str(exc)) from None
    out = {}
    for ins in instruments:
        bucket = p.vpin_bucket_volume
        vol = (bucket.get(ins.symbol) if isinstance(bucket, dict) else bucket) or 1000 * ins.lot_size
        out[ins.id] = FeatureParams(
            tau_ofi_ns=int(p.tau_ofi_ms * 1_000_000), tau_trade_ns=int(p.tau_trade_ms * 1_000_000),
            tau_vol_fast_ns=int(p.tau_vol_fast_ms * 1_000_000), tau_vol_slow_ns=int(p.tau_vol_slow_ms * 1_000_000),
            vpin_bucket_volume=float(vol), vpin_buckets=p.vpin_buckets)
    return StageFeatureParams(out, pairs)


def _states(instruments: Sequence[TapeInstrument], params: Mapping[int, FeatureParams]) -> dict[int, FeatureState]:
    """One ``FeatureState`` per instrument, the legs of ``params.pairs`` (when it has them) paired
    (``features.pair_basis``), as the feature stage's ``on_start`` makes them.

    Raises:
        EvaluationError: a pair names an instrument the tape lacks, or a ``tau_basis_ns`` not > 0.
    """
    states = {i.id: FeatureState(i.id, i.tick_size, params[i.id]) for i in instruments}
    for spot, perp, tau_ns in getattr(params, "pairs", ()):
        if spot not in states or perp not in states:
            raise EvaluationError(f"the basis pair ({spot}, {perp}) needs both legs' books: instruments "
                                  f"{sorted(states)} only")
        try:
            pair_basis(states[spot], states[perp], tau_ns)
        except ValueError as exc:
            raise EvaluationError(f"features: bad basis pair: {exc}") from None
    return states


def compute_features(tape: Tape, params: Mapping[int, FeatureParams] | None = None) -> FeatureTable:
    """The feature stage over the whole tape (see the module docstring); ``params``: per instrument id,
    with its basis pairs when it is a ``StageFeatureParams`` (default ``feature_params(tape.instruments)``).

    Raises:
        EvaluationError: a basis pair whose legs are not both in the tape.
    """
    states = _states(tape.instruments, params if params is not None else feature_params(tape.instruments))
    n_books = sum(1 for e in tape.events if e.kind == Kind.BOOK)
    rows = np.zeros(n_books, FEATURES_DTYPE)
    index = np.zeros(n_books, np.int64)
    ts = np.zeros(n_books, np.int64)
    buf = np.zeros(1, FEATURES_DTYPE)
    rejected: dict[str, int] = {}
    n = 0
    for k, (t, kind, iid, payload) in enumerate(tape.events):
        st = states[iid]
        if kind == Kind.BOOK:
            code = compute(st, payload, buf, t)
            if code == OK:
                rows[n] = buf[0]
                index[n] = k
                ts[n] = t
                n += 1
            else:
                key = "book_" + Reason(code).name.lower()
                rejected[key] = rejected.get(key, 0) + 1
        else:
            code = update_from_trade(st, payload, t)
            if code != OK:
                key = "trade_" + Reason(code).name.lower()
                rejected[key] = rejected.get(key, 0) + 1
    return FeatureTable(rows[:n], index[:n], ts[:n], rejected)


def features_of_instrument(params: Mapping[int, FeatureParams], instrument: TapeInstrument,
                           events: list[MarketEvent]) -> FeatureTable:
    """``compute_features`` over one instrument's own events (``params`` per instrument id): the
    ``per_instrument`` step of ``replay.synthetic_parts``, run in the process that replayed them.

    Raises:
        EvaluationError: the instrument is a leg of one of ``params``' basis pairs (its features need
            the other leg's books: ``compute_features`` over the whole tape).
    """
    for spot, perp, _tau in getattr(params, "pairs", ()):
        if instrument.id in (spot, perp):
            raise EvaluationError(f"instrument {instrument.id} is a leg of the basis pair ({spot}, {perp}): its "
                                  f"features need both legs' books (compute_features over the whole tape)")
    return compute_features(Tape((instrument,), events), {instrument.id: params[instrument.id]})


def merge_features(parts: Sequence[InstrumentPart]) -> FeatureTable:
    """The ``FeatureTable`` of a whole tape from its instruments' own (``features_of_instrument``,
    the parts of ``replay.synthetic_parts``): the feature stage keeps one state per instrument, fed
    only that instrument's messages, so each row is the one ``compute_features`` over the whole tape
    gives; rows in tape order, event indices into the merged tape, rejections summed."""
    where = [p.positions[p.result.event_index] for p in parts]  # each part's rows' places in the tape
    event_index = np.concatenate(where)
    order = np.argsort(event_index, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    rows = np.empty(len(order), FEATURES_DTYPE)
    ts = np.empty(len(order), np.int64)
    start = 0
    for p, w in zip(parts, where):  # each part's rows straight to their places
        at = rank[start:start + len(w)]
        rows[at] = p.result.rows
        ts[at] = p.result.ts_ns
        start += len(w)
    rejected: dict[str, int] = {}
    for p in parts:
        for key, n in p.result.rejected.items():
            rejected[key] = rejected.get(key, 0) + n
    return FeatureTable(rows, event_index[order], ts, dict(sorted(rejected.items())))


def marks_of(table: FeatureTable) -> MarkSeries:
    """The mid (``ref_mid``) of every accepted BOOK, per instrument (the P&L marks)."""
    iid = table.instrument_id
    ts, mid = {}, {}
    for i in sorted(set(iid.tolist())):
        sel = iid == i
        ts[i] = table.ts_ns[sel]
        mid[i] = table.rows["ref_mid"][sel].astype(np.float64)
    return MarkSeries(ts, mid)


@dataclass
class Decisions:
    """A variant's fast-path decision per feature row: the label, the probabilities the SIGNAL
    carries (float32 [n, 4]; a rule's are 0), the signal's value for the IC, and the SIGNAL flags
    (uint8 [n], module docstring; None: none set)."""

    labels: np.ndarray  # uint8 [n]
    probs: np.ndarray  # float32 [n, 4]
    value: np.ndarray  # float64 [n]
    describe: str = ""
    flags: np.ndarray | None = None  # uint8 [n]

    def flag_bits(self) -> np.ndarray:
        """The flags, uint8 [n] (zeros when none were set)."""
        return np.zeros(len(self.labels), np.uint8) if self.flags is None else self.flags.astype(np.uint8)


def hold_decisions(table: FeatureTable) -> Decisions:
    """Always HOLD; value 0 (its IC is undefined)."""
    n = len(table)
    return Decisions(np.zeros(n, np.uint8), np.zeros((n, N_LABELS), np.float32), np.zeros(n), "always HOLD")


def imbalance_decisions(table: FeatureTable, depth: int, eps: float) -> Decisions:
    """LEAN_BUY when the imbalance of the best ``depth`` levels is > ``eps``, LEAN_SELL when < -``eps``,
    else HOLD (never EMERGENCY); value: that imbalance.

    Raises:
        EvaluationError: a depth without an imbalance feature, or a negative eps.
    """
    if depth not in IMBALANCE_SLOTS:
        raise EvaluationError(f"imbalance depth must be one of {sorted(IMBALANCE_SLOTS)}, got {depth}")
    if not eps >= 0:
        raise EvaluationError(f"imbalance eps must be >= 0, got {eps}")
    X = table.X
    slot = IMBALANCE_SLOTS[depth]
    v = X[:, slot]
    labels = np.full(len(table), int(Label.HOLD), np.uint8)
    labels[v > eps] = Label.LEAN_BUY
    labels[v < -eps] = Label.LEAN_SELL
    return Decisions(labels, np.zeros((len(table), N_LABELS), np.float32), X[:, slot].astype(np.float64),
                     f"imbalance sign of the best {depth} level(s), dead band {eps:g}")


class OnnxModel:
    """An ONNX fast-path model on the CPU, checked as the fast stage checks it before serving it: its
    model card (``pipeline.trading.model.card.check_card``: a card beside it or in its metadata, whose
    feature layout version is this pipeline's, with input bounds: ``bounds``) and its shapes ([N, 128]
    -> [N, 4]; a second output named ``at_risk``, [N, 2], gives an EMERGENCY's side: ``has_side``).

    Raises (constructor):
        EvaluationError: the file is missing or onnxruntime cannot load it, its card is missing, names
            another feature layout version or has no input bounds, or its input is not [N, 128] / its
            output not [N, 4] (the path, the versions or the shapes named).
    """

    def __init__(self, path: str | Path):
        import onnxruntime as ort

        self.path = Path(path)
        if not self.path.is_file():
            raise EvaluationError(f"model {str(path)!r} does not exist (make model)")
        data = self.path.read_bytes()
        self.sha256_12 = hashlib.sha256(data).hexdigest()[:12]
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types with a message
            raise EvaluationError(f"model {str(path)!r}: onnxruntime cannot load it: {exc}"[:400]) from None
        inp, out = self.sess.get_inputs()[0], self.sess.get_outputs()[0]
        if inp.shape[-1] != FEATURES_LEN or out.shape[-1] != N_LABELS:
            raise EvaluationError(f"model {str(path)!r} maps {inp.shape} -> {out.shape}; the feature layout "
                                  f"needs [N, {FEATURES_LEN}] -> [N, {N_LABELS}] "
                                  "(HOLD, LEAN_BUY, LEAN_SELL, EMERGENCY)")
        self.in_name, self.out_name = inp.name, out.name
        from pipeline.trading.model.card import CardError, check_card, input_bounds
        from pipeline.trading.model.decide import AT_RISK_OUTPUT

        outs = self.sess.get_outputs()
        self.has_side = len(outs) > 1 and outs[1].name == AT_RISK_OUTPUT
        try:
            self.card = check_card(self.path, self.sess.get_modelmeta().custom_metadata_map)
            self.bounds = input_bounds(self.card, f"model {str(path)!r}: its card")
        except (CardError, OSError) as exc:
            raise EvaluationError(str(exc)) from None

    def outputs(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(probabilities float32 [n, 4], at-risk float32 [n, 2] or None without that output) of feature
        rows, in chunks of ``ONNX_CHUNK_ROWS``."""
        X = np.ascontiguousarray(X, np.float32)
        out = np.zeros((len(X), N_LABELS), np.float32)
        side = np.zeros((len(X), 2), np.float32) if self.has_side else None
        names = [self.out_name] + ([self.sess.get_outputs()[1].name] if self.has_side else [])
        for a in range(0, len(X), ONNX_CHUNK_ROWS):
            got = self.sess.run(names, {self.in_name: X[a:a + ONNX_CHUNK_ROWS]})
            out[a:a + ONNX_CHUNK_ROWS] = got[0]
            if side is not None:
                side[a:a + ONNX_CHUNK_ROWS] = got[1]
        return out, side

    def probs(self, X: np.ndarray) -> np.ndarray:
        """Probabilities (float32 [n, 4]) of feature rows."""
        return self.outputs(X)[0]


def model_decisions(table: FeatureTable, model: OnnxModel, buy: float, sell: float, emergency: float,
                    side: float | None = None) -> Decisions:
    """The fast stage's labels and flags for every row (module docstring; ``side``: the at-risk
    threshold, None: never, so no side bit); value P(LEAN_BUY) - P(LEAN_SELL).

    Raises:
        EvaluationError: a side threshold the fast stage refuses (not above 0.5).
    """
    from pipeline.trading.model.decide import deployed_decisions
    from pipeline.trading.model.thresholds import NEVER

    probs, at_risk = model.outputs(table.X)
    side = NEVER if side is None else side
    try:
        labels, flags = deployed_decisions(probs, at_risk, table.X, model.bounds, buy, sell, emergency, side)
    except ValueError as exc:
        raise EvaluationError(f"model {str(model.path)!r}: {exc}") from None
    value = probs[:, Label.LEAN_BUY].astype(np.float64) - probs[:, Label.LEAN_SELL].astype(np.float64)
    return Decisions(labels, probs, value, f"{model.path} (sha256 {model.sha256_12}), thresholds buy {buy:g}, "
                     f"sell {sell:g}, emergency {emergency:g}, side {side:g}", flags)


def imbalance_emergency_decisions(table: FeatureTable, depth: int, eps: float) -> Decisions:
    """EMERGENCY when the imbalance of the best ``depth`` levels is beyond ``eps`` in size: > ``eps``
    (buyers press: our ask is the order at risk, ``SIGNAL_FLAG_AT_RISK_ASK``) or < -``eps`` (our bid,
    ``SIGNAL_FLAG_AT_RISK_BID``); else HOLD. Value: that imbalance.

    Raises:
        EvaluationError: as ``imbalance_decisions``.
    """
    d = imbalance_decisions(table, depth, eps)
    labels = np.where(d.labels == Label.HOLD, Label.HOLD, Label.EMERGENCY).astype(np.uint8)
    flags = np.zeros(len(table), np.uint8)
    flags[d.labels == Label.LEAN_BUY] = SIGNAL_FLAG_AT_RISK_ASK
    flags[d.labels == Label.LEAN_SELL] = SIGNAL_FLAG_AT_RISK_BID
    return Decisions(labels, d.probs, d.value, f"EMERGENCY on the side the imbalance of the best {depth} level(s) "
                     f"threatens beyond {eps:g}", flags)


def random_decisions(like: Decisions, seed: int) -> Decisions:
    """A random labeler with ``like``'s frequencies: each row's label drawn independently with the
    share of each label among ``like``'s rows, an EMERGENCY's side bit (bid / ask / none) with the
    shares among ``like``'s EMERGENCY rows; seeded (``numpy.random.default_rng([seed, 1])``), so the
    same seed gives the same labels. Value: +1 LEAN_BUY, -1 LEAN_SELL, else 0."""
    n = len(like.labels)
    rng = np.random.default_rng([int(seed) & 0xFFFF_FFFF_FFFF_FFFF, 1])
    freq = np.bincount(like.labels, minlength=N_LABELS).astype(np.float64)
    labels = np.zeros(n, np.uint8)
    flags = np.zeros(n, np.uint8)
    if n:
        labels = rng.choice(N_LABELS, size=n, p=freq / freq.sum()).astype(np.uint8)
        em = like.labels == Label.EMERGENCY
        lf = like.flag_bits()[em]
        sides = np.array([np.count_nonzero(lf & b) for b in _SIDE_BITS] + [0], np.float64)
        sides[2] = em.sum() - sides[0] - sides[1]
        drawn = labels == Label.EMERGENCY
        if drawn.any() and sides.sum() > 0:
            pick = rng.choice(3, size=int(drawn.sum()), p=sides / sides.sum())
            flags[drawn] = np.array([*_SIDE_BITS, 0], np.uint8)[pick]
    value = (labels == Label.LEAN_BUY).astype(np.float64) - (labels == Label.LEAN_SELL)
    shares = ", ".join(f"{lab.name} {freq[lab] / max(n, 1):.4f}" for lab in Label)
    return Decisions(labels, np.zeros((n, N_LABELS), np.float32), value,
                     f"random labeler, seed {seed}, with the label shares of {like.describe or 'another variant'} "
                     f"({shares})", flags)


def label_counts(d: Decisions) -> dict[str, int]:
    """Rows per label, by name."""
    c = np.bincount(d.labels, minlength=N_LABELS)
    return {lab.name: int(c[lab]) for lab in Label}
