"""The fast path's inputs and decisions in the evaluation, sans-I/O apart from loading a model file.

- ``compute_features``: a tape's BOOK / TRADE payloads through ``pipeline.trading.features`` as the
  feature stage runs it (``procs.features``: one ``FeatureState`` per instrument, its ``FeatureParams``
  from the stage's params, each message's simulated time as the fallback time), ONCE per market: every
  variant reads the same ``FeatureTable``. A BOOK the features reject gives no row (the stage passes
  nothing on); the rejections are counted by reason. For the synthetic market the same rows come
  per instrument from the processes that replay it (``features_of_instrument``, ``merge_features``).
- ``marks_of``: the mid at every BOOK with both sides (the P&L marks).
- Decisions, one label and one signal value per row: ``model_decisions`` (an ONNX model run over all
  rows at once through onnxruntime on the CPU, labelled by the fast stage's threshold rule,
  ``pipeline.trading.model.thresholds.deployed_labels``, which a test holds to ``procs.fast``'s own;
  value P(LEAN_BUY) - P(LEAN_SELL)), ``hold_decisions`` (always HOLD, value 0), ``imbalance_decisions``
  (the sign of a book-imbalance feature beyond a dead band; value the feature).
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
                                       OK, FeatureParams, FeatureState, Reason, compute, update_from_trade)
from pipeline.trading.messages import FEATURES_DTYPE, FEATURES_LEN, Kind, Label

N_LABELS = len(Label)
IMBALANCE_SLOTS = {1: F_IMBALANCE_1, 3: F_IMBALANCE_3, 5: F_IMBALANCE_5, 10: F_IMBALANCE_10, 15: F_IMBALANCE_15}
ONNX_CHUNK_ROWS = 65_536  # rows per onnxruntime call (bounds the output's memory, not its speed)


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


def feature_params(instruments: Sequence[TapeInstrument],
                   stage_params: Mapping | None = None) -> dict[int, FeatureParams]:
    """Each instrument's ``FeatureParams`` as ``procs.features.FeatureAgent`` builds them from its
    params (None: the stage's defaults; the VPIN bucket is 1000 lots unless the params set one).

    Raises:
        EvaluationError: params the stage would refuse (named).
    """
    from pipeline.runtime.errors import ConfigError
    from procs.features import parse_params

    try:
        p = parse_params("features", dict(stage_params or {}))
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
    return out


def compute_features(tape: Tape, params: Mapping[int, FeatureParams] | None = None) -> FeatureTable:
    """The feature stage over the whole tape (see the module docstring); ``params``: per instrument id
    (default ``feature_params(tape.instruments)``)."""
    params = dict(params) if params is not None else feature_params(tape.instruments)
    states = {i.id: FeatureState(i.id, i.tick_size, params[i.id]) for i in tape.instruments}
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
    ``per_instrument`` step of ``replay.synthetic_parts``, run in the process that replayed them."""
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
    carries (float32 [n, 4]; a rule's are 0), and the signal's value for the IC."""

    labels: np.ndarray  # uint8 [n]
    probs: np.ndarray  # float32 [n, 4]
    value: np.ndarray  # float64 [n]
    describe: str = ""


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
    feature layout version is this pipeline's) and its shapes ([N, 128] -> [N, 4]).

    Raises (constructor):
        EvaluationError: the file is missing or onnxruntime cannot load it, its card is missing or
            names another feature layout version, or its input is not [N, 128] / its output not
            [N, 4] (the path, the versions or the shapes named).
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
        from pipeline.trading.model.card import CardError, check_card

        try:
            self.card = check_card(self.path, self.sess.get_modelmeta().custom_metadata_map)
        except (CardError, OSError) as exc:
            raise EvaluationError(str(exc)) from None

    def probs(self, X: np.ndarray) -> np.ndarray:
        """Probabilities (float32 [n, 4]) of feature rows, in chunks of ``ONNX_CHUNK_ROWS``."""
        X = np.ascontiguousarray(X, np.float32)
        out = np.zeros((len(X), N_LABELS), np.float32)
        for a in range(0, len(X), ONNX_CHUNK_ROWS):
            out[a:a + ONNX_CHUNK_ROWS] = self.sess.run([self.out_name], {self.in_name: X[a:a + ONNX_CHUNK_ROWS]})[0]
        return out


def model_decisions(table: FeatureTable, model: OnnxModel, buy: float, sell: float, emergency: float) -> Decisions:
    """The fast stage's labels for every row (module docstring); value P(LEAN_BUY) - P(LEAN_SELL)."""
    from pipeline.trading.model.thresholds import deployed_labels

    probs = model.probs(table.X)
    labels = deployed_labels(probs, buy, sell, emergency).astype(np.uint8)
    value = probs[:, Label.LEAN_BUY].astype(np.float64) - probs[:, Label.LEAN_SELL].astype(np.float64)
    return Decisions(labels, probs, value, f"{model.path} (sha256 {model.sha256_12}), thresholds buy {buy:g}, "
                     f"sell {sell:g}, emergency {emergency:g}")


def label_counts(d: Decisions) -> dict[str, int]:
    """Rows per label, by name."""
    c = np.bincount(d.labels, minlength=N_LABELS)
    return {lab.name: int(c[lab]) for lab in Label}
