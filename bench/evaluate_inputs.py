"""``bench.evaluate``'s inputs, each named with where it came from: the order latency's distribution
and the models it judged (their sha256 and their model cards).

Order latency (decision -> exchange), a distribution drawn once per order (``simulator.SimParams``'s
``order_latency_table_ns``, seeded), from one of:

- the newest pipeline report (``default_latency``): of ``bench/reports/<UTC stamp>-pipeline[-what].md``,
  those with a section of the pipeline bench's target scenario (``TARGET_SCENARIOS``: one instrument
  at 1,000 updates/s over the rings, the default config; the shipped model's and the hand-set
  model's), the one whose name has the latest stamp (ties: the name's order); other pipeline reports
  (the two-host run, the rate sweep, the A/Bs) measure other setups and are not candidates;
- a file stated on the command line (``load``): such a report, or a samples file (one per-order
  latency in µs a line; blank lines and ``#`` comments skipped).

From a report: the first target section whose row ``-> order request sent, fast path (sender)`` has
orders (n > 0); its recorded percentiles p50, p99, p99.9 and max are the knots of a piecewise-linear
quantile function, evaluated at ``TABLE_SIZE`` equally likely probabilities (k / TABLE_SIZE, k = 1 ..
TABLE_SIZE: the table's own p50 / p99 / p99.9 / max are the report's). A report records nothing under
its median, so the lower half of the table is the median (the distribution is never faster than what
was measured). From a samples file: the samples themselves, sorted. ``constant``: one value (the
command line's ``--latency-us``).

Judged models (``judged_models``): every ONNX file a variant reads (its model, or a random labeler's
label shares), its sha256 and its card file (``pipeline.trading.model.card.card_path``); a card whose
``model_file.sha256`` is not the file's is refused. ``copy_cards`` copies each card beside the report as
``<stamp>-<model stem>-model-card.json``.

Raises (everywhere): ``LatencySourceError`` (an ``EvaluationError``) for a missing, unreadable or
unparsable source, named with what is wrong; never a silent fallback.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pipeline.trading.evaluation.replay import EvaluationError
from pipeline.trading.evaluation.variants import REPO

REPORTS = REPO / "bench" / "reports"
TARGET_SCENARIOS = ("ring-1k", "ring-1k-hand-set")
TABLE_SIZE = 1000
ORDER_ROW = "-> order request sent, fast path (sender)"
_NAME = re.compile(r"^(\d{8}T\d{6}Z)-pipeline(?:-[A-Za-z0-9-]+)?\.md$")
_SECTION = re.compile(r"^## ([\w-]+): 1,000 updates/s offered, 1 instrument\(s\), transport ring\b[^\n]*$", re.M)
_KNOTS = (50.0, 99.0, 99.9, 100.0)


class LatencySourceError(EvaluationError):
    """The order latency's source is missing, unreadable or not what it should be (named)."""


class LatencyDist(NamedTuple):
    """Equally likely order latencies (µs, sorted), where they came from (``source``: a file, or
    "command line") and what in it (``what``), with their p50 and p99 (inverted-CDF percentiles of
    ``values_us``)."""

    values_us: tuple[float, ...]
    source: str
    what: str
    p50_us: float
    p99_us: float


def _rel(p: Path) -> str:
    p = p.resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def _dist(values, source: str, what: str) -> LatencyDist:
    v = np.sort(np.asarray(values, dtype=np.float64))
    p50, p99 = np.percentile(v, [50, 99], method="inverted_cdf")
    return LatencyDist(tuple(float(x) for x in v), source, what, float(p50), float(p99))


def constant(us: float) -> LatencyDist:
    """One latency for every order (``--latency-us``).

    Raises:
        LatencySourceError: negative or not finite."""
    if not (math.isfinite(us) and us >= 0):
        raise LatencySourceError(f"--latency-us must be a finite number >= 0 µs, got {us}")
    return _dist([us], "command line", "--latency-us, one value for every order")


def quantile_table(knots: list[tuple[float, float]], size: int = TABLE_SIZE) -> np.ndarray:
    """``size`` equally likely values of the piecewise-linear quantile function through ``knots``
    ((percentile, µs), percentiles rising), at percentiles 100 k / size, k = 1 .. size; flat below
    the first knot."""
    qs, vs = zip(*knots)
    return np.interp(100.0 * np.arange(1, size + 1) / size, qs, vs)


def _row_values(section: str, where: str) -> tuple[int, list[float]] | None:
    """(n, [p50, p99, p99.9, max]) of the order-sent row of a section; None when n is 0.

    Raises:
        LatencySourceError: no such row, or its cells are not numbers that rise."""
    line = next((ln for ln in section.splitlines() if ln.startswith(f"| {ORDER_ROW} |")), None)
    if line is None:
        raise LatencySourceError(f"{where}: no row {ORDER_ROW!r} in its stage table")
    cells = [c.strip() for c in line.strip().strip("|").split("|")][1:]
    try:
        n = int(cells[0].replace(",", ""))
        if n == 0:
            return None
        vals = [float(c.replace(",", "")) for c in cells[1:5]]
    except (ValueError, IndexError):
        raise LatencySourceError(f"{where}: row {ORDER_ROW!r} is not n, p50, p99, p99.9, max: {line.strip()!r}") \
            from None
    if len(vals) != 4 or not all(math.isfinite(x) and x >= 0 for x in vals) or vals != sorted(vals):
        raise LatencySourceError(f"{where}: row {ORDER_ROW!r} has percentiles that are not rising numbers >= 0: "
                                 f"{line.strip()!r}")
    return n, vals


def _target_sections(text: str) -> list[tuple[str, str]]:
    """(scenario name, section text) of each target-scenario section, in the report's order."""
    heads = list(_SECTION.finditer(text))
    out = []
    for m in heads:
        if m.group(1) in TARGET_SCENARIOS:
            nxt = text.find("\n## ", m.end())
            out.append((m.group(1), text[m.start(): len(text) if nxt < 0 else nxt]))
    return out


def from_report(path: Path) -> LatencyDist:
    """The distribution of a pipeline report (module docstring).

    Raises:
        LatencySourceError: unreadable, no target section, no target section with orders, a bad row."""
    text = _read(path)
    where = _rel(path)
    sections = _target_sections(text)
    if not sections:
        raise LatencySourceError(f"{where} is not a pipeline report of the target scenario (no section "
                                 f"'## {TARGET_SCENARIOS[0]}: 1,000 updates/s offered, 1 instrument(s), transport ring'"
                                 f" or of {TARGET_SCENARIOS[1]!r})")
    for name, sec in sections:
        got = _row_values(sec, f"{where}, scenario {name}")
        if got is not None:
            n, vals = got
            what = (f"scenario {name}, row '{ORDER_ROW}' (n {n}; p50 / p99 / p99.9 / max "
                    f"{' / '.join(f'{v:g}' for v in vals)} µs; under the median: the median)")
            return _dist(quantile_table(list(zip(_KNOTS, vals))), where, what)
    raise LatencySourceError(f"{where}: no fast-path order was measured in scenario(s) "
                             f"{', '.join(n for n, _ in sections)} (n 0): no latency to draw from; state another "
                             "source with --latency-from FILE")


def from_samples(path: Path) -> LatencyDist:
    """The per-order latencies of a samples file (module docstring).

    Raises:
        LatencySourceError: unreadable, a line that is not a finite number >= 0, no value."""
    where = _rel(path)
    vals = []
    for k, line in enumerate(_read(path).splitlines(), 1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        try:
            v = float(s)
        except ValueError:
            v = float("nan")
        if not (math.isfinite(v) and v >= 0):
            raise LatencySourceError(f"{where} line {k}: {line.strip()!r} is not a latency in µs (a finite number "
                                     ">= 0); a latency file is a pipeline report (.md) or one µs value a line")
        vals.append(v)
    if not vals:
        raise LatencySourceError(f"{where} holds no latency (one µs value a line, or a pipeline report .md)")
    return _dist(vals, where, f"per-order samples (n {len(vals)})")


def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LatencySourceError(f"latency source {str(path)!r} cannot be read: {exc}") from None


def load(path: str | Path) -> LatencyDist:
    """``--latency-from FILE``: a pipeline report when its name ends in ``.md``, else a samples file.

    Raises:
        LatencySourceError: as ``from_report`` / ``from_samples``."""
    p = Path(path)
    if not p.is_file():
        raise LatencySourceError(f"latency source {str(path)!r} is not a file")
    return from_report(p) if p.suffix == ".md" else from_samples(p)


def pipeline_reports(reports: Path = REPORTS) -> list[Path]:
    """The candidates of ``default_latency`` (module docstring), oldest first: by the stamp in the
    name, then the name."""
    found = []
    for p in reports.glob("*-pipeline*.md") if reports.is_dir() else ():
        m = _NAME.match(p.name)
        if m and _target_sections(_read(p)):
            found.append((m.group(1), p.name, p))
    return [p for _, _, p in sorted(found)]


def default_latency(reports: Path = REPORTS) -> LatencyDist:
    """The distribution of the newest candidate pipeline report (module docstring).

    Raises:
        LatencySourceError: no candidate in ``reports``; the newest one has no order sample or a bad row."""
    found = pipeline_reports(reports)
    if not found:
        raise LatencySourceError(f"no pipeline report of the target scenario ({', '.join(TARGET_SCENARIOS)}) under "
                                 f"{_rel(reports)}: run `make bench-pipeline` and commit its report, or state a "
                                 "source with --latency-from FILE (or --latency-us N)")
    return from_report(found[-1])


# ------------------------------------------------------------------------------------ judged models
def judged_models(specs) -> list[dict]:
    """``{"path", "sha256", "card", "variants"}`` per ONNX file the variants read, in their order.

    Raises:
        EvaluationError: a card file that is not JSON or whose ``model_file.sha256`` is not the model's."""
    from pipeline.trading.model.card import card_path

    by_path: dict[str, dict] = {}
    for spec in specs:
        if spec.kind not in ("onnx", "random") or not spec.fast or not spec.path:
            continue
        if spec.path in by_path:
            by_path[spec.path]["variants"].append(spec.name)
            continue
        model = Path(spec.path)
        if not model.is_file():
            continue  # the variant itself names the missing file (decisions_for)
        sha = hashlib.sha256(model.read_bytes()).hexdigest()
        card = card_path(model)
        if card.is_file():
            try:
                stated = json.loads(card.read_text(encoding="utf-8")).get("model_file", {}).get("sha256")
            except (ValueError, AttributeError, OSError) as exc:
                raise EvaluationError(f"model card {_rel(card)} cannot be read as a card: {exc}") from None
            if stated != sha:
                raise EvaluationError(f"model card {_rel(card)} describes another file (model_file.sha256 "
                                      f"{str(stated)[:12]}, {_rel(model)}'s is {sha[:12]}): rebuild it (make model)")
        by_path[spec.path] = {"path": _rel(model), "sha256": sha, "card": _rel(card) if card.is_file() else None,
                              "variants": [spec.name]}
    return list(by_path.values())


def copy_cards(models: list[dict], out_dir: Path, stamp: str) -> dict[str, str]:
    """Each judged model's card copied into ``out_dir`` as ``<stamp>-<model stem>-model-card.json``
    (``-2``, ``-3`` ... when two models share a stem): {model path: the copy's file name}."""
    copies: dict[str, str] = {}
    for m in models:
        if m["card"] is None:
            continue
        base = f"{stamp}-{Path(m['path']).stem}-model-card"
        name, k = f"{base}.json", 1
        while name in copies.values():
            k += 1
            name = f"{base}-{k}.json"
        card = Path(m["card"])
        shutil.copyfile(card if card.is_absolute() else REPO / card, out_dir / name)
        copies[m["path"]] = name
    return copies
