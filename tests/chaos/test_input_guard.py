"""The fast stage's input-range guard against the real pipeline (``bench.chaos.input_guard``): the config
it runs, the model it narrows, and the scenario once in quick mode (its sabotaged run, the guard off, is
in ``tests/chaos/sabotage.py``)."""

from __future__ import annotations

import pytest

from bench.chaos.harness import PASS
from bench.chaos.input_guard import BOUND, MIN_OOR, NO_LEAN_CHECK, NO_ORDER_CHECK, guard_config, input_range_guard, narrow_model
from pipeline.trading.features import F_IMBALANCE_5
from tests.chaos._support import TrackingPipeline, left_nothing


def test_the_narrowed_model_vouches_for_the_imbalance_only_within_the_bound(tmp_path):
    from pipeline.trading.model.card import check_card, input_bounds

    b = input_bounds(check_card(narrow_model(tmp_path / "m.onnx")))
    assert (float(b.lo[F_IMBALANCE_5]), float(b.hi[F_IMBALANCE_5])) == pytest.approx((-BOUND, BOUND))
    others = [i for i in range(len(b.lo)) if i != F_IMBALANCE_5]
    assert (b.lo[others] < -1e38).all() and (b.hi[others] > 1e38).all()


def test_the_config_runs_the_narrowed_model_with_orders_flowing(tmp_path):
    from bench.pipeline_config import Scenario, config_text

    text = guard_config(tmp_path / "narrow.onnx")(config_text(Scenario("t", 1000, llm=False, model="hand-set"),
                                                             tmp_path, "t"))
    assert f'model_path = "{tmp_path / "narrow.onnx"}"' in text and 'tif = "GTC"' in text
    with pytest.raises(ValueError):
        guard_config(tmp_path / "x.onnx")('module = "procs.fast:FastAgent"\n')


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_rows_outside_the_models_range_are_held_and_never_trade():
    TrackingPipeline.runs = []
    row = input_range_guard(TrackingPipeline, True)
    assert row.verdict == PASS, f"{row.verdict}: {row.did}; {row.figure}; checks {row.details.get('checks')}"
    checks = row.details["checks"]
    assert checks[NO_LEAN_CHECK] and checks[NO_ORDER_CHECK]
    assert row.details["fast"]["out_of_range"] >= MIN_OOR
    left_nothing()
