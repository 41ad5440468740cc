"""The limit the pipeline bench reports beside each fast-path figure (``bench.pipeline_limit``):
limit = sum of the stages' hot compute + hops x the wake-up floor, and the ratio of the measured p50 to it."""

from __future__ import annotations

import pytest

from bench.pipeline_limit import PATHS, limit_line, limit_us, limits
from bench.pipeline_report import limit_section, verdicts

COMPUTE = {"feed": 10.0, "features": 12.0, "fast": 8.0, "risk": 15.0, "sender": 5.0}


@pytest.mark.parametrize("stages, hops, floor, expected", [
    (("feed", "features", "fast"), 2, 20.0, 30.0 + 40.0),
    (("feed", "features", "fast", "risk", "sender"), 4, 20.0, 50.0 + 80.0),
    (("feed",), 0, 99.0, 10.0),
    ((), 3, 1.5, 4.5),
])
def test_the_limit_is_the_sum_of_compute_plus_hops_times_the_floor(stages, hops, floor, expected):
    assert limit_us(COMPUTE, stages, hops, floor) == pytest.approx(expected)


def test_the_fast_path_figures_count_their_stages_and_hops():
    assert PATHS["signal"] == (("feed", "features", "fast"), 2)  # md, feat
    assert PATHS["order_sent"] == (("feed", "features", "fast", "risk", "sender"), 4)  # + sig_risk, orders


@pytest.mark.parametrize("bad", [{"floor": -1.0}, {"hops": -1}, {"compute": {**COMPUTE, "feed": -0.1}}])
def test_a_negative_figure_is_refused(bad):
    with pytest.raises(ValueError):
        limit_us(bad.get("compute", COMPUTE), ("feed",), bad.get("hops", 1), bad.get("floor", 1.0))


def test_a_stage_without_a_compute_figure_is_refused():
    with pytest.raises(KeyError):
        limits({}, {k: v for k, v in COMPUTE.items() if k != "risk"}, 20.0)


def test_each_figure_gets_its_limit_and_ratio_and_an_empty_one_only_its_limit():
    stages = {"signal": {"p50_us": 140.0, "n": 900}, "order_sent": {"n": 0}}
    rows = limits(stages, COMPUTE, 20.0)
    assert rows["signal"] == {"p50_us": 140.0, "limit_us": 70.0, "ratio": 2.0,
                              "formula": "feed 10.0 + features 12.0 + fast 8.0 + 2 x floor 20.0 = 70.0 µs"}
    assert rows["order_sent"]["limit_us"] == 130.0 and rows["order_sent"]["p50_us"] is None
    assert rows["order_sent"]["ratio"] is None
    line = limit_line("signal", rows["signal"])
    assert "p50 140 µs" in line and "limit = sum of compute + hops x floor" in line and "ratio 2.00x" in line
    assert "no sample" in limit_line("order_sent", rows["order_sent"])


def test_the_report_judges_order_sent_against_one_and_a_half_times_the_limit():
    def result(p50):
        stages = {"signal": {"p50_us": 100.0, "n": 9}, "order_sent": {"p50_us": p50, "p99_us": p50, "n": 9}}
        return {"scenario": {"name": "ring-1k", "rate": 1_000, "instruments": 1, "transport": "ring", "llm": True,
                             "faults": {}}, "model": {}, "labels": {}, "stages": stages, "processes": {},
                "limit": limits(stages, COMPUTE, 20.0)}
    assert any("1.50x 130 µs (goal <= 1.5x: MET)" in v for v in verdicts([result(195.0)]))
    assert any("1.51x 130 µs (goal <= 1.5x: MISSED)" in v for v in verdicts([result(196.0)]))


def test_the_report_lists_what_the_limit_was_made_of():
    limit = {"compute": {k: {"label": f"{k} compute", "p50_us": v, "p99_us": 2 * v, "n": 100} for k, v in COMPUTE.items()},
             "floor": {"label": "floor", "p50_us": 20.0, "p99_us": 60.0, "n": 3000}}
    text = "\n".join(limit_section(limit))
    assert "| risk compute | 15.0 | 30.0 | 100 |" in text and "| floor | 20.0 | 60.0 | 3000 |" in text
    assert limit_section(None) == []


def test_each_stages_compute_is_timed_in_this_process(tmp_path):
    from bench.pipeline_limit import COMPUTE_LABELS, measure_compute
    from tests.support.handmodels import imbalance_model

    got = measure_compute(imbalance_model(tmp_path / "m.onnx"), passes=1)
    assert set(got) == set(COMPUTE_LABELS) == {name for names, _ in PATHS.values() for name in names}
    for key, fig in got.items():
        assert 0 < fig["p50_us"] <= fig["p99_us"] and fig["n"] >= 300 and fig["label"] == COMPUTE_LABELS[key], key
