"""The fast path's inputs and decisions in the evaluation: features once per market as the stage
computes them, rejections counted, the rules' and the model's labels by hand."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pipeline.trading.bitget.book import BOOK_STRUCT
from pipeline.trading.evaluation.decisions import (FeatureTable, OnnxModel, compute_features, feature_params,
                                                  features_of_instrument, hold_decisions, imbalance_decisions,
                                                  label_counts, marks_of, merge_features, model_decisions)
from pipeline.trading.evaluation.replay import EvaluationError, InstrumentPart, MarketEvent, Tape, TapeInstrument
from pipeline.trading.features import (F_BASIS_AVAILABLE, F_IMBALANCE_1, F_IMBALANCE_5, FeatureParams, FeatureState,
                                       compute)
from pipeline.trading.messages import FEATURES_DTYPE, TRADE_STRUCT, Kind, Label
from pipeline.trading.model.card import hand_made_card, write_card
from tests.pipeline.trading.evaluation.test_simulator import INS, MS, T0, book, trade


def test_features_are_the_stage_s_and_rejections_are_counted():
    events = [book(T0, 100.0, 5, 100.2, 4, 1),
              MarketEvent(T0 + MS, Kind.TRADE, 1, TRADE_STRUCT.pack(1, 9, 1, T0 + MS, 100.1, 1.0)),  # bad side
              book(T0 + 2 * MS, 100.1, 5, 100.1, 4, 2),  # locked
              book(T0 + 3 * MS, 100.1, 2, 100.3, 6, 3)]
    tape = Tape((INS,), events)
    table = compute_features(tape)
    assert table.rejected == {"trade_bad_side": 1, "book_crossed_book": 1}
    assert table.event_index.tolist() == [0, 3] and table.ts_ns.tolist() == [T0, T0 + 3 * MS]
    st = FeatureState(1, 0.1, FeatureParams(vpin_bucket_volume=1000.0))  # the stage's: 1000 lots of 1.0
    want = np.zeros(1, FEATURES_DTYPE)
    for e in (events[0], events[3]):
        compute(st, e.payload, want, e.ts_ns)
    assert table.rows[-1].tobytes() == want.tobytes()
    marks = marks_of(table)
    assert marks.ts_ns[1].tolist() == [T0, T0 + 3 * MS] and marks.mid[1].tolist() == pytest.approx([100.1, 100.2])


def _table(values: dict[int, list[float]]) -> FeatureTable:
    n = len(next(iter(values.values())))
    rows = np.zeros(n, FEATURES_DTYPE)
    for slot, v in values.items():
        rows["features"][:, slot] = v
    return FeatureTable(rows, np.arange(n), np.arange(n) * MS)


def test_rules_by_hand():
    t = _table({F_IMBALANCE_5: [0.5, -0.3, 0.1, 0.2], F_IMBALANCE_1: [-0.9, 0.9, 0.0, 0.0]})
    d = imbalance_decisions(t, 5, 0.2)
    assert d.labels.tolist() == [Label.LEAN_BUY, Label.LEAN_SELL, Label.HOLD, Label.HOLD]  # 0.2 is not > 0.2
    assert d.value.tolist() == pytest.approx([0.5, -0.3, 0.1, 0.2])
    assert imbalance_decisions(t, 1, 0.0).labels.tolist() == [Label.LEAN_SELL, Label.LEAN_BUY, Label.HOLD, Label.HOLD]
    h = hold_decisions(t)
    assert label_counts(h) == {"HOLD": 4, "LEAN_BUY": 0, "LEAN_SELL": 0, "EMERGENCY": 0} and not h.value.any()
    with pytest.raises(EvaluationError, match="depth must be one of"):
        imbalance_decisions(t, 2, 0.1)


def _softmax_model(path, width: int, bias: list[float], card: bool = True) -> None:
    """A model whose probabilities are softmax(bias + x[0] * (0, 1, -1, 0)) (feature 0 moves buy / sell)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.zeros((width, 4), np.float32)
    w[0] = [0.0, 1.0, -1.0, 0.0]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Add", ["z", "b"], ["l"]),
         helper.make_node("Softmax", ["l"], ["y"], axis=-1)], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(bias, np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    if card:
        write_card(path, hand_made_card("hand-set", "a test model"))


def test_model_labels_are_the_fast_stage_rule(tmp_path):
    p = tmp_path / "m.onnx"
    _softmax_model(p, 128, [0.0, 0.0, 0.0, -10.0])
    t = _table({0: [3.0, -3.0, 0.0]})
    d = model_decisions(t, OnnxModel(p), 0.5, 0.5, 0.5)
    e3 = np.exp(3.0)
    pb = e3 / (1 + e3 + np.exp(-3.0) + np.exp(-10.0))  # P(buy) of the first row: 0.9502
    assert d.probs[0, Label.LEAN_BUY] == pytest.approx(pb, rel=1e-5)
    # row 0: P(buy) 0.95 >= 0.5; row 1: P(sell) 0.95; row 2: every P(.) about 1/3 < 0.5: HOLD
    assert d.labels.tolist() == [Label.LEAN_BUY, Label.LEAN_SELL, Label.HOLD]
    assert d.value[0] == pytest.approx(pb - np.exp(-3.0) / (1 + e3 + np.exp(-3.0) + np.exp(-10.0)), rel=1e-5)
    assert model_decisions(t, OnnxModel(p), 0.96, 0.96, 0.5).labels.tolist() == [Label.HOLD] * 3
    assert model_decisions(t, OnnxModel(p), 0.95, 0.96, 0.5).labels.tolist() == [Label.LEAN_BUY, Label.HOLD, Label.HOLD]


def test_a_model_that_does_not_fit_the_layout_is_named(tmp_path):
    p = tmp_path / "wide.onnx"
    _softmax_model(p, 130, [0, 0, 0, 0])
    with pytest.raises(EvaluationError, match=r"wide.onnx' maps \['N', 130\] -> \['N', 4\]; the feature layout needs"):
        OnnxModel(p)
    with pytest.raises(EvaluationError, match="does not exist"):
        OnnxModel(tmp_path / "none.onnx")
    bare = tmp_path / "bare.onnx"
    _softmax_model(bare, 128, [0, 0, 0, 0], card=False)
    with pytest.raises(EvaluationError, match="bare.onnx' has no model card"):
        OnnxModel(bare)
    old = tmp_path / "old.onnx"
    _softmax_model(old, 128, [0, 0, 0, 0], card=False)
    write_card(old, {**hand_made_card("hand-set", "trained for another layout"), "feature_layout_version": 0})
    with pytest.raises(EvaluationError, match="old.onnx'.* says feature layout version 0, but this pipeline computes"):
        OnnxModel(old)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(EvaluationError, match="onnxruntime cannot load it"):
        OnnxModel(junk)


def _of(iid: int, ev: MarketEvent) -> MarketEvent:
    """``ev`` as instrument ``iid``'s (its payload's instrument id too)."""
    p = bytearray(ev.payload)
    struct.pack_into("<H", p, 0, iid)
    return MarketEvent(ev.ts_ns, ev.kind, iid, bytes(p))


def test_features_per_instrument_merged_are_the_whole_tape_s():
    other = TapeInstrument(id=2, symbol="XYZUSDT", tick_size=0.01, lot_size=1.0)
    bad_trade = MarketEvent(T0 + MS, Kind.TRADE, 1, TRADE_STRUCT.pack(1, 9, 1, T0 + MS, 100.1, 1.0))
    events = [book(T0, 100.0, 5, 100.2, 4, 1), _of(2, book(T0, 20.0, 3, 20.02, 9, 1)), bad_trade,
              _of(2, trade(T0 + MS, 20.01, 2.0, 7)), _of(2, book(T0 + MS, 20.01, 3, 20.02, 8, 2)),
              book(T0 + 2 * MS, 100.1, 5, 100.1, 4, 2),  # locked: rejected
              _of(2, book(T0 + 2 * MS, 20.01, 1, 20.01, 8, 3)),  # locked: rejected
              book(T0 + 3 * MS, 100.1, 2, 100.3, 6, 3), _of(2, book(T0 + 3 * MS, 20.0, 4, 20.03, 1, 4))]
    tape = Tape((INS, other), events)
    params = feature_params(tape.instruments)
    parts = []
    for ins in reversed(tape.instruments):  # any order of parts
        mine = [k for k, e in enumerate(events) if e.instrument_id == ins.id]
        sub = [events[k] for k in mine]
        parts.append(InstrumentPart(ins, np.array(mine), features_of_instrument(params, ins, sub), 0.0, 0.0))
    whole = compute_features(tape, params)
    merged = merge_features(parts)
    assert merged.event_index.tolist() == whole.event_index.tolist() == [0, 1, 4, 7, 8]
    assert merged.ts_ns.tolist() == whole.ts_ns.tolist() == [T0, T0, T0 + MS, T0 + 3 * MS, T0 + 3 * MS]
    assert merged.rows.tobytes() == whole.rows.tobytes()
    assert merged.rows["instrument_id"].tolist() == [1, 2, 2, 1, 2]
    assert merged.rejected == whole.rejected == {"book_crossed_book": 2, "trade_bad_side": 1}


def test_the_random_labeler_draws_with_the_other_variant_s_label_and_side_shares():
    """200,000 rows of a variant with label shares HOLD 0.90, LEAN_BUY 0.04, LEAN_SELL 0.05, EMERGENCY
    0.01 and, among its EMERGENCYs, bid at risk 30 %, ask 50 %, no side 20 %. Limit fixed before the run:
    each share drawn within 5 binomial standard errors of its target."""
    from pipeline.trading.evaluation.decisions import Decisions, random_decisions
    from pipeline.trading.messages import SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID

    n = 200_000
    counts = {Label.HOLD: 180_000, Label.LEAN_BUY: 8_000, Label.LEAN_SELL: 10_000, Label.EMERGENCY: 2_000}
    labels = np.concatenate([np.full(c, lab, np.uint8) for lab, c in counts.items()])
    flags = np.zeros(n, np.uint8)
    em = np.flatnonzero(labels == Label.EMERGENCY)
    flags[em[:600]] = SIGNAL_FLAG_AT_RISK_BID
    flags[em[600:1600]] = SIGNAL_FLAG_AT_RISK_ASK
    like = Decisions(labels, np.zeros((n, 4), np.float32), np.zeros(n), "the model", flags)
    r = random_decisions(like, seed=7)
    for lab, c in counts.items():
        p = c / n
        assert abs(np.mean(r.labels == lab) - p) <= 5 * np.sqrt(p * (1 - p) / n), lab.name
    drawn = r.labels == Label.EMERGENCY
    m = int(drawn.sum())
    for bit, p in ((SIGNAL_FLAG_AT_RISK_BID, 0.3), (SIGNAL_FLAG_AT_RISK_ASK, 0.5), (0, 0.2)):
        share = np.mean(r.flags[drawn] == bit)
        assert abs(share - p) <= 5 * np.sqrt(p * (1 - p) / m), bit
    assert not r.flags[~drawn].any()  # a side only on an EMERGENCY
    assert r.value.tolist() == ((r.labels == Label.LEAN_BUY).astype(float) - (r.labels == Label.LEAN_SELL)).tolist()
    again, other = random_decisions(like, seed=7), random_decisions(like, seed=8)
    assert np.array_equal(again.labels, r.labels) and np.array_equal(again.flags, r.flags)
    assert not np.array_equal(other.labels, r.labels)
    assert "HOLD 0.9000" in r.describe and "seed 7" in r.describe


def test_the_imbalance_emergency_rule_names_the_side_the_pressure_threatens():
    from pipeline.trading.evaluation.decisions import imbalance_emergency_decisions
    from pipeline.trading.messages import SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID

    t = _table({F_IMBALANCE_5: [0.7, -0.8, 0.6, 0.1]})
    d = imbalance_emergency_decisions(t, 5, 0.6)
    assert d.labels.tolist() == [Label.EMERGENCY, Label.EMERGENCY, Label.HOLD, Label.HOLD]  # 0.6 is not > 0.6
    # buyers press (imbalance > 0): our ask is the order they will take; sellers: our bid
    assert d.flags.tolist() == [SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, 0, 0]


def test_the_model_s_flags_are_the_fast_stage_s_side_and_range_guard(tmp_path):
    """A hand-set model (tests.support.handmodels: EMERGENCY when |imbalance| is large, its at-risk side
    from the imbalance's sign) with a card whose bounds leave slot 3 in [-1, 1]: the decisions are
    ``pipeline.trading.model.decide.deployed_decisions``' (the function the fast stage is held to)."""
    from pipeline.trading.messages import SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE
    from pipeline.trading.model.decide import InputBounds, deployed_decisions
    from tests.support.handmodels import imbalance_model

    p = imbalance_model(tmp_path / "h.onnx", lean=4.0, emergency=(20.0, 12.0), side=6.0)
    lo, hi = InputBounds.unbounded().lo.copy(), InputBounds.unbounded().hi.copy()
    lo[3], hi[3] = -1.0, 1.0
    write_card(p, hand_made_card("hand-set", "bounded", bounds=InputBounds(lo, hi)))
    t = _table({F_IMBALANCE_5: [0.9, -0.9, 0.3, 0.9, 0.0], 3: [0.0, 0.0, 0.0, 5.0, 0.0]})
    model = OnnxModel(p)
    assert model.has_side
    d = model_decisions(t, model, 0.6, 0.6, 0.5, side=0.6)
    assert d.labels.tolist() == [Label.EMERGENCY, Label.EMERGENCY, Label.LEAN_BUY, Label.HOLD, Label.HOLD]
    assert d.flags.tolist() == [SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, 0, SIGNAL_FLAG_OUT_OF_RANGE, 0]
    probs, at_risk = model.outputs(t.X)
    want = deployed_decisions(probs, at_risk, t.X, model.bounds, 0.6, 0.6, 0.5, 0.6)
    assert np.array_equal(d.labels, want[0]) and np.array_equal(d.flags, want[1])
    assert model_decisions(t, model, 0.6, 0.6, 0.5).flags.tolist() == [0, 0, 0, SIGNAL_FLAG_OUT_OF_RANGE, 0]
    with pytest.raises(EvaluationError, match="side threshold must be above 0.5"):
        model_decisions(t, model, 0.6, 0.6, 0.5, side=0.4)


# ------------------------------------------------------------------------------------- basis pairs
def _leg_book(iid: int, t_ns: int, mid: float, seq: int) -> MarketEvent:
    z = [0.0] * 14
    payload = BOOK_STRUCT.pack(iid, 0, 1, 1, seq, t_ns, mid - 0.05, *z, 2.0, *z, mid + 0.05, *z, 3.0, *z)
    return MarketEvent(t_ns, Kind.BOOK, iid, payload)


def test_a_paired_configs_features_are_the_live_stage_s_on_the_same_books():
    from pipeline.runtime.config import ProcessConfig
    from procs.features import FeatureAgent
    from tests.support.configtext import INSTRUMENTS, ring
    from tests.support.context import stage_context
    from tests.support.ports import ListInput, RecordingPort

    perp = '\n[[instruments]]\nid = 3\nsymbol = "BTCUSDT"\ntick_size = 0.1\nlot_size = 0.0001\n' \
           'product_type = "USDT-FUTURES"\ncontract_size = 0.0001\n'
    ins = (TapeInstrument(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001),
           TapeInstrument(id=2, symbol="ETHUSDT", tick_size=0.01, lot_size=0.001),
           TapeInstrument(id=3, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001))
    rng = np.random.default_rng(7)
    events, mid = [], {1: 50_000.0, 2: 3_000.0, 3: 50_010.0}
    for k in range(120):  # the legs' books interleaved, the perpetual's mid drifting from the spot's
        iid = int(rng.integers(1, 4))
        mid[iid] = round(mid[iid] + float(rng.normal(0, 2.0)), 1)
        events.append(_leg_book(iid, T0 + k * 7 * MS, mid[iid], k + 1))
        if k % 10 == 3:
            events.append(MarketEvent(T0 + k * 7 * MS + 1, Kind.TRADE, iid,
                                      TRADE_STRUCT.pack(iid, 1, k, T0 + k * 7 * MS + 1, mid[iid], 0.01)))
    params = {"basis_pairs": [{"spot": 1, "perp": 3}], "tau_basis_ms": 500.0}
    table = compute_features(Tape(ins, events), feature_params(ins, params))
    proc = ProcessConfig(name="features", module="procs.features:FeatureAgent", inputs=["md"], outputs=["feat"],
                         params=params)
    ctx = stage_context(ring("md", payload=512) + ring("feat", payload=560) + INSTRUMENTS + perp, proc,
                        inputs={"md": ListInput([(e.kind, e.payload, e.ts_ns) for e in events])},
                        outputs={"feat": RecordingPort()})
    agent = FeatureAgent()
    agent.on_start(ctx)
    while agent.do_work():
        pass
    live = [bytes(p) for _, p, _, _ in ctx.outputs["feat"].msgs]
    basis = table.X[:, F_BASIS_AVAILABLE]
    assert len(table) == sum(e.kind == Kind.BOOK for e in events) and (basis[table.instrument_id == 2] == 0).all()
    assert basis[table.instrument_id != 2].mean() > 0.9, "both legs carry the basis once each has a book"
    assert [r.tobytes() for r in table.rows] == live, "row for row, the live stage's FEATURES"


def test_a_pair_the_stage_would_refuse_or_a_leg_alone_is_an_evaluation_error():
    ins = (TapeInstrument(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001),
           TapeInstrument(id=3, symbol="BTCUSDT", tick_size=0.1, lot_size=0.0001))
    with pytest.raises(EvaluationError, match=r"instrument 9 is not configured - at `\$\.basis_pairs\[0\]\.perp`"):
        feature_params(ins, {"basis_pairs": [{"spot": 1, "perp": 9}]})
    params = feature_params(ins, {"basis_pairs": [{"spot": 1, "perp": 3}]})
    assert params.pairs == ((1, 3, 60_000_000_000),)
    with pytest.raises(EvaluationError, match="leg of the basis pair"):
        features_of_instrument(params, ins[0], [])
