"""The pipeline bench's rate sweep over the encoded venue (``--rates``, ``--source``): the venue's params
for pre-encoded frames, the sweep's scenarios, and the report's drops per ring and venue CPU."""

from __future__ import annotations

from bench.pipeline import rate_plan
from bench.pipeline_config import ENCODED_LOOP_MS, Scenario, config_text
from bench.pipeline_report import rate_lines, scenario_section
from pipeline.runtime.config import parse_config
from procs.venue import parse_params


def test_an_encoded_scenario_builds_two_seconds_of_frames_on_the_feeds_channels(tmp_path):
    sc = Scenario("e", 20_000, instruments=16, source="encoded", model="hand-set")
    venue = parse_config(config_text(sc, tmp_path, "be1")).process("venue")
    p = parse_params("venue", venue.params)  # the stage takes them
    assert p.source == "encoded" and p.step_ms == 1 and p.speed == 1.25
    assert p.encoded_units == ENCODED_LOOP_MS // 1 and p.encoded_channels == ("books15", "trade")
    plain = parse_config(config_text(Scenario("s", 1_000, model="hand-set"), tmp_path, "be2")).process("venue")
    assert parse_params("venue", plain.params).source == "synthetic"  # the default stays the model


def test_the_rate_sweep_runs_each_rate_over_the_instruments():
    plan = rate_plan([5_000, 20_000], 16, 3.0, "encoded", "hand-set")
    assert [s.name for s in plan] == ["rate-5000-16i-encoded", "rate-20000-16i-encoded"]
    assert all(s.instruments == 16 and s.source == "encoded" and s.seconds == 3.0 and s.model == "hand-set"
               for s in plan)


def _result(rate: int, drops: dict, measured: float | None = None) -> dict:
    sc = {"name": f"rate-{rate}-16i-encoded", "rate": rate, "instruments": 16, "transport": "ring", "llm": True,
          "faults": {}, "source": "encoded", "model": "hand-set"}
    return {"scenario": sc, "model": {"kind": "hand-set"}, "labels": {}, "books_per_s": float(rate if measured is None else measured),
            "stages": {"signal": {"label": "SIGNAL", "p50_us": 80.0, "p99_us": 400.0, "p999_us": 500.0,
                                  "max_us": 600.0, "n": 10}, "order_sent": {"label": "sent", "n": 0}},
            "ring_drops": drops, "drops_total": sum(drops.values()), "seconds": 3.0, "load_avg": (1, 1, 1),
            "plan": {}, "processes": {"venue": {"cpu_pct": 12.5, "core": 0, "wait": "back-off", "msgs_in": 0,
                                                   "msgs_out": 0, "drops": 0}}}


def test_the_report_gives_drops_per_ring_and_the_venues_cpu_for_each_rate():
    lines = rate_lines([_result(20_000, {"md": 0, "feat": 3}), _result(5_000, {"md": 0, "feat": 0})])
    assert lines[0].startswith("- 5,000/s") and "0 ring drops: KEPT UP (md 0, feat 0)" in lines[0]
    assert "3 ring drops: DID NOT KEEP UP (md 0, feat 3)" in lines[1] and "venue CPU 12.5 % of a core" in lines[1]
    head = "\n".join(scenario_section(_result(20_000, {"md": 0, "feat": 3}))[:6])
    assert "venue source encoded" in head and "venue CPU 12.5 % of a core" in head


def test_a_rate_delivered_short_of_the_offer_did_not_keep_up_even_without_drops():
    (short,) = rate_lines([_result(20_000, {"md": 0}, measured=7_703.0)])
    assert "0 ring drops, 39% of the offered rate delivered (< 95%): DID NOT KEEP UP" in short
    (enough,) = rate_lines([_result(20_000, {"md": 0}, measured=19_100.0)])
    assert "0 ring drops: KEPT UP" in enough
    (both,) = rate_lines([_result(10_000, {"sig_llm": 114}, measured=9_617.0)])
    assert "114 ring drops: DID NOT KEEP UP" in both
