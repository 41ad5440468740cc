"""The committed evaluation is of the shipped model: the newest evaluation report under bench/reports/
(by the stamp in its name) names the shipped model's sha256 and a copy of its card committed beside it,
the copy's sha256 is the report's, and it is the model ``make setup`` builds now
(models/generated/fast.onnx and its card; the build is deterministic). When the shipped model changes,
re-run ``make evaluate`` and commit its report and card copy."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from pipeline.trading.evaluation.variants import REPO, PipelineConfig

REPORTS = REPO / "bench" / "reports"
_NAME = re.compile(r"^(\d{8})T(\d{4}|\d{6})Z-evaluate[\w-]*\.md$")
_JUDGED = re.compile(r"^- Judged model (\S+) sha256 ([0-9a-f]{64}) \([^)]*\); card (\S+), copied beside this report "
                     r"as (\S+)\.$", re.M)
REDO = ("re-run `make evaluate` and commit its report.md as bench/reports/<stamp>-evaluate.md with the card copy "
        "written beside it (<stamp>-fast-model-card.json)")


def newest_evaluation_report(reports: Path = REPORTS) -> Path:
    """The evaluation report with the latest stamp in its name (HHMM stamps count as HHMM00; ties: the name)."""
    found = [((m.group(1), m.group(2).ljust(6, "0")), p.name, p) for p in reports.glob("*-evaluate*.md")
             if (m := _NAME.match(p.name))]
    assert found, f"no evaluation report under {reports}: {REDO}"
    return max(found)[2]


def judged(report: Path, model: str) -> tuple[str, dict]:
    """(the sha256 the report judged ``model`` at, the card committed beside it), each checked to be there.

    Raises:
        AssertionError: the report names no such model or card copy, or the copy describes another file."""
    got = {m.group(1): m for m in _JUDGED.finditer(report.read_text(encoding="utf-8"))}
    assert model in got, f"{report.name} names no judged model {model} with its sha256 and card copy: {REDO}"
    m = got[model]
    copy = report.parent / m.group(4)
    assert copy.is_file(), f"{report.name} names the card copy {m.group(4)}, which is not committed beside it: {REDO}"
    card = json.loads(copy.read_text(encoding="utf-8"))
    assert card["model_file"]["sha256"] == m.group(2), (
        f"{copy.name} describes sha256 {card['model_file']['sha256']}, but {report.name} judged "
        f"{m.group(2)}: {REDO}")
    return m.group(2), card


def test_the_newest_evaluation_report_judged_the_model_setup_builds():
    model = PipelineConfig.load().model_path
    report = newest_evaluation_report()
    sha, _card = judged(report, model)
    shipped = REPO / model
    built_card = shipped.with_name(shipped.stem + ".card.json")
    assert shipped.is_file() and built_card.is_file(), f"{model} or its card is missing: run `make setup`"
    built = hashlib.sha256(shipped.read_bytes()).hexdigest()
    carded = json.loads(built_card.read_text(encoding="utf-8"))["model_file"]["sha256"]
    assert built == carded == sha, (
        f"the shipped model changed: setup built {model} sha256 {built} (its card says {carded}), but the "
        f"newest evaluation report {report.name} judged {sha}: {REDO}")


def _report(path: Path, model: str, sha: str, copy: str) -> None:
    path.write_text(f"# Strategy evaluation\n\n- Judged model {model} sha256 {sha} (variants model); card "
                    f"{model[:-5]}.card.json, copied beside this report as {copy}.\n")


def test_the_check_takes_the_newest_report_and_names_a_card_that_differs(tmp_path):
    a, b = "a" * 64, "b" * 64
    (tmp_path / "c-a.json").write_text(json.dumps({"model_file": {"name": "fast.onnx", "sha256": a}}))
    _report(tmp_path / "20261201T2359Z-evaluate-old.md", "m/fast.onnx", b, "c-a.json")
    _report(tmp_path / "20261202T000001Z-evaluate.md", "m/fast.onnx", a, "c-a.json")
    _report(tmp_path / "20261201T235959Z-evaluate.md", "m/fast.onnx", a, "missing.json")
    newest = newest_evaluation_report(tmp_path)
    assert newest.name == "20261202T000001Z-evaluate.md" and judged(newest, "m/fast.onnx")[0] == a
    for name, said in (("20261201T2359Z-evaluate-old.md", "describes sha256 " + a + ", but"),
                       ("20261201T235959Z-evaluate.md", "which is not committed beside it")):
        with pytest.raises(AssertionError, match=re.escape(said) + ".*re-run `make evaluate`"):
            judged(tmp_path / name, "m/fast.onnx")
    with pytest.raises(AssertionError, match="names no judged model other.onnx"):
        judged(newest, "other.onnx")
