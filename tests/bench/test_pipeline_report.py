"""The pipeline bench's report (``bench.pipeline_report``): what "valid" means, the SIGNALs by label and
the model of each row."""

from __future__ import annotations

from bench.pipeline_config import Scenario, config_text
from bench.pipeline_report import NEARLY_ALL, VALIDITY_RULE, labels_line, models_table, stress_section
from pipeline.runtime.config import parse_config
from pipeline.venue.orders import DEFAULT_MAX_AWAY_TICKS


def test_the_venue_judges_orders_by_its_own_rule_and_the_report_says_what_valid_means(tmp_path):
    venue = parse_config(config_text(Scenario("x", 1_000), tmp_path, "bv1")).process("venue")
    assert venue.params["max_away_ticks"] == DEFAULT_MAX_AWAY_TICKS == 50  # not loosened
    assert f"max_away_ticks = {DEFAULT_MAX_AWAY_TICKS} ticks" in VALIDITY_RULE and "does not cross" in VALIDITY_RULE
    text = "\n".join(stress_section([]))
    assert VALIDITY_RULE in text and "strictly below the best ask" in text and "own side's best price" in text


def _result(name: str, kind: str, labels: dict) -> dict:
    return {"scenario": {"name": name}, "model": {"kind": kind, "path": f"{name}.onnx", "sha256": "abcdef012345"},
            "labels": labels, "stages": {"order_sent": {"n": 0}}}


def test_the_report_counts_each_label_and_says_when_emergency_is_nearly_every_update():
    flood = _result("ring-1k", "shipped", {"hold": 5, "lean_buy": 3, "lean_sell": 2, "emergency": 990})
    line = labels_line(flood)
    assert "EMERGENCY 990" in line and "HOLD 5" in line and "of 1,000 SIGNALs" in line and "99.0 %" in line
    assert "nearly every update" in line
    calm = _result("ring-1k-hand-set", "hand-set", {"hold": 700, "lean_buy": 150, "lean_sell": 150, "emergency": 0})
    assert "nearly every update" not in labels_line(calm) and NEARLY_ALL == 0.9
    rows = models_table([flood, calm])[2:]
    assert "shipped model" in rows[0] and "ring-1k.onnx (abcdef012345)" in rows[0] and "| 990 | 99.0 % |" in rows[0]
    assert "hand-set MLP" in rows[1] and "ring-1k-hand-set.onnx (abcdef012345)" in rows[1]
