"""``bench.evaluate``'s inputs (``bench.evaluate_inputs``): the order latency is a distribution from the
newest pipeline report of the target scenario (by the stamp in its name) or from a stated file, a bad
source is refused by name, each order draws its own latency (the seed reproduces the draws), and the
report names the latency's file, its p50 / p99, and each judged model's sha256 and card."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from bench import evaluate as E
from bench import evaluate_inputs as I
from pipeline.trading.evaluation.variants import REPO

QUICK = ["--quick", "--steps", "600", "--no-plots"]
ROW = "| -> order request sent, fast path (sender) |"


def report_text(sections: dict[str, str], head: str = "# Pipeline benchmark 2026-01-01T00:00:00+00:00") -> str:
    """A pipeline report in bench.pipeline's layout: per scenario name, its order-sent row's cells
    ("n | p50 | p99 | p99.9 | max"); a name starting with "rate-" gets the rate sweep's heading."""
    out = [head, "", "## Verdicts", "", "- something", ""]
    for name, cells in sections.items():
        what = ("5,000 updates/s offered, 16 instrument(s), transport ring" if name.startswith("rate-")
                else "1,000 updates/s offered, 1 instrument(s), transport ring, venue source synthetic")
        out += [f"## {name}: {what}", "",
                "| stage (latency since the frame was received) | n | p50 µs | p99 µs | p99.9 µs | max µs |",
                "|---|---|---|---|---|---|", "| -> SIGNAL written (fast) | 10 | 1 | 2 | 3 | 4 |", f"{ROW} {cells} |", ""]
    return "\n".join(out) + "\n"


def _write(path, text: str, mtime: int) -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_the_newest_pipeline_report_of_the_target_scenario_is_chosen_by_the_stamp_in_its_name(tmp_path):
    """Candidates by the stamp in the name (file times say otherwise here); reports of other setups
    (the rate sweep, an A/B without the target sections) and names without a stamp are not candidates;
    in the chosen one, the first target section with orders."""
    _write(tmp_path / "20260101T000000Z-pipeline.md", report_text({"ring-1k": "22 | 2,500 | 4000 | 5000 | 6000"}),
           3_000)
    _write(tmp_path / "20260301T000000Z-pipeline-limit.md",
           report_text({"ring-1k": "0 | - | - | - | -", "ring-1k-hand-set": "614 | 871 | 3144 | 4243 | 7803"}), 1_000)
    _write(tmp_path / "20260201T000000Z-pipeline.md", report_text({"ring-1k": "22 | 812 | 900 | 950 | 990"}), 5_000)
    _write(tmp_path / "20260401T000000Z-pipeline-rates.md", report_text({"rate-5000-16i": "9 | 1 | 2 | 3 | 4"}), 6_000)
    _write(tmp_path / "20260501T000000Z-pipeline-sched-ab.md", "# SCHED_FIFO A/B\n\n| arm | order sent |\n", 7_000)
    _write(tmp_path / "latest-pipeline.md", report_text({"ring-1k": "5 | 1 | 2 | 3 | 4"}), 8_000)
    names = [p.name for p in I.pipeline_reports(tmp_path)]
    assert names == ["20260101T000000Z-pipeline.md", "20260201T000000Z-pipeline.md",
                     "20260301T000000Z-pipeline-limit.md"]
    d = I.default_latency(tmp_path)
    assert d.source.endswith("20260301T000000Z-pipeline-limit.md") and "ring-1k-hand-set" in d.what
    assert (d.p50_us, d.p99_us) == (871.0, 3144.0) and len(d.values_us) == I.TABLE_SIZE
    assert min(d.values_us) == 871.0 and max(d.values_us) == 7803.0  # under the median: the median
    # a tie on the stamp: the name decides, whatever order the directory lists them in
    _write(tmp_path / "20260301T000000Z-pipeline-zz.md", report_text({"ring-1k": "3 | 10 | 20 | 30 | 40"}), 0)
    assert I.default_latency(tmp_path).source.endswith("20260301T000000Z-pipeline-zz.md")


def test_the_committed_reports_give_the_newest_target_report():
    d = I.default_latency()
    stamps = sorted(p.name[:16] for p in (REPO / "bench" / "reports").glob("*-pipeline*.md")
                    if re.match(r"\d{8}T\d{6}Z-", p.name) and "\n## ring-1k" in p.read_text())
    assert stamps and os.path.basename(d.source).startswith(stamps[-1])
    assert 0 < d.p50_us < d.p99_us and min(d.values_us) < max(d.values_us)


def test_a_stated_file_wins_over_the_newest_report(tmp_path):
    samples = tmp_path / "lat.txt"
    samples.write_text("# per-order latencies, µs\n100\n\n2000  # slow\n9000\n")
    args = E.parse_args(["--latency-from", str(samples)])
    d = E.latency_dist(args)
    assert d.source == str(samples) and d.values_us == (100.0, 2000.0, 9000.0) and (d.p50_us, d.p99_us) == (2000, 9000)
    rep = tmp_path / "20990101T000000Z-pipeline.md"
    rep.write_text(report_text({"ring-1k": "22 | 500 | 700 | 800 | 900"}))
    d = E.latency_dist(E.parse_args(["--latency-from", str(rep)]))
    assert d.source == str(rep) and (d.p50_us, d.p99_us) == (500, 700)
    assert E.latency_dist(E.parse_args(["--latency-us", "250"])).values_us == (250.0,)


@pytest.mark.parametrize("name, text, said", [
    ("missing.txt", None, "is not a file"),
    ("words.txt", "100\nfast\n", "line 2: 'fast' is not a latency"),
    ("negative.txt", "100\n-5\n", "line 2: '-5' is not a latency"),
    ("empty.txt", "# nothing\n\n", "holds no latency"),
    ("other.md", "# SCHED_FIFO A/B\n", "is not a pipeline report of the target scenario"),
    ("no-orders.md", report_text({"ring-1k": "0 | - | - | - | -"}), "no fast-path order was measured"),
    ("bad-cell.md", report_text({"ring-1k": "22 | 500 | x | 800 | 900"}), "is not n, p50, p99, p99.9, max"),
    ("falling.md", report_text({"ring-1k": "22 | 500 | 400 | 800 | 900"}), "not rising numbers"),
    ("no-row.md", report_text({"ring-1k": "1 | 2 | 3 | 4 | 5"}).replace(ROW, "| -> something else |"), "no row"),
])
def test_a_bad_latency_source_is_refused_by_name(tmp_path, capsys, name, text, said):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(I.LatencySourceError, match=re.escape(said)):
        I.load(path)
    assert E.main([*QUICK, "--latency-from", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert said in err and name in err and not (tmp_path / "o").exists()


def test_no_candidate_report_is_an_error_not_a_fallback(tmp_path):
    (tmp_path / "20260101T000000Z-pipeline-rates.md").write_text(report_text({"rate-5000-16i": "9 | 1 | 2 | 3 | 4"}))
    with pytest.raises(I.LatencySourceError, match="no pipeline report of the target scenario"):
        I.default_latency(tmp_path)
    with pytest.raises(I.LatencySourceError, match="no pipeline report"):
        I.default_latency(tmp_path / "absent")
    assert E.main([*QUICK, "--latency-us", "5", "--latency-from", "x.txt"]) == 2  # both: refused


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> str:
    """configs/default.toml with the hand-set model (``tests.support.handmodels.hand_set_eval_config``),
    so these runs send orders whatever model setup built."""
    from tests.support.handmodels import hand_set_eval_config

    return hand_set_eval_config(tmp_path_factory.mktemp("cfg"))


@pytest.fixture(scope="module")
def drawn_runs(tmp_path_factory, config):
    """Two quick runs with the same latency samples file and seed 7."""
    d = tmp_path_factory.mktemp("lat")
    (d / "lat.txt").write_text("100\n2000\n9000\n")
    outs = []
    for k in range(2):
        out = d / f"run{k}"
        assert E.main([*QUICK, "--config", config, "--latency-from", str(d / "lat.txt"), "--latency-seed", "7",
                       "--out", str(out)]) == 0
        outs.append(out)
    return d / "lat.txt", outs


def test_each_order_draws_its_latency_and_the_seed_reproduces_the_run(drawn_runs):
    lat, (a, b) = drawn_runs
    res = json.loads((a / "results.json").read_text())
    assert res["latency_per_order"] and res["latency_seed"] == 7 and res["latency_source"] == str(lat)
    imb = next(v for v in res["markets"][0]["variants"] if v["name"] == "imbalance")
    drawn = imb["order_latency_us"]
    assert drawn["n"] > 10 and drawn["min"] == 100.0 and drawn["max"] == 9000.0  # varies from order to order
    assert (a / "results.json").read_bytes() == (b / "results.json").read_bytes()


def test_the_report_names_the_latency_file_its_percentiles_and_the_judged_model(drawn_runs, config):
    lat, (a, _b) = drawn_runs
    md = (a / "report.md").read_text()
    assert f"from {lat}, per-order samples (n 3)" in md and "p50 2000 µs, p99 9000 µs" in md and "seed 7" in md
    assert re.search(r"^- imbalance: .*; order latency drawn for \d+ order\(s\): .*\(min 100, max 9000\)$", md, re.M)
    model = re.search(r'model_path = "([^"]+lean\.onnx)"', open(config).read()).group(1)
    sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
    m = re.search(r"^- Judged model (\S+) sha256 ([0-9a-f]{64}) \(variants ([^)]*)\); card (\S+), copied beside "
                  r"this report as (\S+)\.$", md, re.M)
    assert m, md[:2000]
    assert m.group(1) == model and m.group(2) == sha and "model" in m.group(3).split(", ")
    assert m.group(4) == model.replace(".onnx", ".card.json")
    assert re.fullmatch(r"\d{8}T\d{6}Z-lean-model-card\.json", m.group(5))
    copy = json.loads((a / m.group(5)).read_text())
    assert copy["model_file"]["sha256"] == sha


def test_a_card_that_describes_another_model_is_refused(tmp_path, capsys, config):
    from tests.support.handmodels import imbalance_model

    imbalance_model(tmp_path / "m.onnx", lean=4.0)
    card = tmp_path / "m.card.json"
    doc = json.loads(card.read_text())
    doc["model_file"]["sha256"] = "0" * 64
    card.write_text(json.dumps(doc))
    other = f"other=kind=onnx,path={tmp_path / 'm.onnx'}"
    assert E.main([*QUICK, "--config", config, "--latency-us", "100", "--variant", other, "--out",
                   str(tmp_path / "o")]) == 2
    assert "m.card.json describes another file (model_file.sha256 000000000000" in capsys.readouterr().err
