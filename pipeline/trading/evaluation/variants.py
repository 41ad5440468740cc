"""What a variant of the evaluation is, and what it takes from the pipeline's config. Pure apart from
reading the config file.

A variant is ``NAME=CONFIG`` with CONFIG a comma-separated ``key=value`` list::

    kind=onnx,path=models/x.onnx,buy=0.6,sell=0.6,emergency=0.9,lean_lots=1
    kind=rule,rule=imbalance,depth=5,eps=0.2
    kind=rule,rule=hold
    kind=onnx,llm=1                      the model's fast path plus the slow path (the LLM hub)

Keys: ``kind`` (``onnx`` | ``rule``); for ``onnx``: ``path`` (default: the fast process's
``model_path``), ``buy`` / ``sell`` / ``emergency`` (default: the fast process's ``thresholds``, as the
stage applies them), ``llm`` (0 / 1: add the slow path; ``llm_model``: its GGUF, default the llm
process's ``model_path``); for ``rule``: ``rule`` (``hold`` | ``imbalance``), ``depth`` (imbalance
levels: 1, 3, 5, 10, 15; default 5), ``eps`` (dead band; default 0.2); for both: ``lean_lots`` (the
risk gateway's fast-path quote size in lots; default: the risk process's ``lean_lots`` when it is above
0, else ``EVAL_LEAN_LOTS``, because with 0 the fast path only cancels and nothing would trade). A bare
NAME picks a preset (``PRESETS``: model, hold, imbalance, model+llm). An unknown key, a key of the
other kind, or a value that does not parse is an ``EvaluationError`` naming it.

``PipelineConfig.load`` reads the rest from the pipeline's TOML: the instruments, the fast process's
model and thresholds, the feature stage's params, the risk process's limits, the llm process's params.
"""

from __future__ import annotations

import math

import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from pipeline.trading.evaluation.replay import EvaluationError, TapeInstrument

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = REPO / "configs" / "default.toml"
EVAL_LEAN_LOTS = 1  # the fast path's quote size when the config's lean_lots is 0 (see the module docstring)
DEFAULT_IMBALANCE_DEPTH = 5
DEFAULT_IMBALANCE_EPS = 0.2
_MODULES = {"fast": "procs.fast:FastAgent", "risk": "procs.risk:RiskAgent", "llm": "procs.llm:LlmAgent",
            "features": "procs.features:FeatureAgent"}


class VariantSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One variant, its defaults resolved (``parse_variant``)."""

    name: str
    kind: Literal["onnx", "rule"]
    path: str = ""
    buy: float = 0.0
    sell: float = 0.0
    emergency: float = 0.0
    rule: Literal["hold", "imbalance", ""] = ""
    depth: int = DEFAULT_IMBALANCE_DEPTH
    eps: float = DEFAULT_IMBALANCE_EPS
    lean_lots: int = EVAL_LEAN_LOTS
    llm: bool = False
    llm_model: str = ""

    @property
    def fast_only(self) -> bool:
        return not self.llm


class PipelineConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the evaluation takes from the pipeline's config (``load``)."""

    source: str
    instruments: tuple[TapeInstrument, ...]
    model_path: str
    thresholds: dict[str, float]
    thresholds_source: str
    feature_params: dict[str, Any]
    risk_limits: dict[str, Any]
    llm_params: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path = DEFAULT_CONFIG) -> PipelineConfig:
        """Read ``path`` (see the module docstring).

        Raises:
            EvaluationError: the file cannot be read or parsed, or a process's params are refused by
                its stage (the message names them).
        """
        from pipeline.runtime.errors import ConfigError
        from procs.fast import parse_params as fast_params

        path = Path(path)
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise EvaluationError(f"config {str(path)!r}: {exc}") from None
        procs, names = {}, {}
        for pr in doc.get("processes", []):
            for key, module in _MODULES.items():
                if pr.get("module") == module and key not in procs:
                    procs[key] = pr.get("params", {}) or {}
                    names[key] = pr.get("name", key)
        try:
            fp = fast_params(names.get("fast", "fast"), procs.get("fast", {}))
        except ConfigError as exc:
            raise EvaluationError(f"config {str(path)!r}: {exc}") from None
        where = path.resolve()
        where = where.relative_to(REPO) if where.is_relative_to(REPO) else where
        if "fast" not in procs:
            th_src = f"{where} has no {_MODULES['fast']} process: FastParams defaults"
        elif "thresholds" not in procs["fast"]:
            th_src = f"{where}, process {names['fast']!r}, which sets none: FastParams defaults"
        else:
            th_src = f"{where}, process {names['fast']!r}"
        t = fp.thresholds
        instruments = tuple(TapeInstrument(id=int(i["id"]), symbol=str(i["symbol"]), tick_size=float(i["tick_size"]),
                                           lot_size=float(i["lot_size"])) for i in doc.get("instruments", []))
        return cls(source=str(path), instruments=instruments, model_path=fp.model_path,
                   thresholds={"buy": float(t.buy), "sell": float(t.sell), "emergency": float(t.emergency)},
                   thresholds_source=th_src,
                   feature_params=dict(procs.get("features", {})), risk_limits=dict(procs.get("risk", {}).get("limits")
                                                                                    or {}),
                   llm_params=dict(procs.get("llm", {})))

    def lean_lots(self) -> int:
        """The evaluation's default fast-path quote size (see the module docstring)."""
        v = self.risk_limits.get("lean_lots", 0)
        return int(v) if isinstance(v, int) and v > 0 else EVAL_LEAN_LOTS


_COMMON = ("kind", "lean_lots")
_KEYS = {"onnx": _COMMON + ("path", "buy", "sell", "emergency", "llm", "llm_model"),
         "rule": _COMMON + ("rule", "depth", "eps")}
PRESETS = {"model": "kind=onnx", "hold": "kind=rule,rule=hold", "imbalance": "kind=rule,rule=imbalance",
           "model+llm": "kind=onnx,llm=1"}
DEFAULT_VARIANTS = ("model", "hold", "imbalance")


def _number(name: str, key: str, text: str, cast):
    try:
        return cast(text)
    except ValueError:
        raise EvaluationError(f"variant {name!r}: {key}={text!r} is not a {cast.__name__}") from None


def _flag(name: str, key: str, text: str) -> bool:
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise EvaluationError(f"variant {name!r}: {key}={text!r} must be 0 or 1")


def parse_variant(text: str, cfg: PipelineConfig) -> VariantSpec:
    """``NAME=CONFIG`` or a preset NAME into a ``VariantSpec`` with the config's defaults.

    Raises:
        EvaluationError: an empty name, an unknown preset, a pair that is not ``key=value``, an unknown
            key (or one of the other kind), a repeated key, a value that does not parse or is out of
            range; the message names the variant and the key.
    """
    name, sep, conf = text.partition("=")
    name = name.strip()
    if not name:
        raise EvaluationError(f"variant {text!r}: no name (NAME=key=value,...)")
    if not sep:
        if name not in PRESETS:
            raise EvaluationError(f"variant {name!r}: no CONFIG and not a preset ({', '.join(PRESETS)})")
        conf = PRESETS[name]
    pairs: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in conf.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise EvaluationError(f"variant {name!r}: {item!r} is not key=value")
        if key in pairs:
            raise EvaluationError(f"variant {name!r}: key {key!r} given twice")
        pairs[key] = value.strip()
    kind = pairs.get("kind", "onnx")
    if kind not in _KEYS:
        raise EvaluationError(f"variant {name!r}: kind={kind!r} is not one of {sorted(_KEYS)}")
    for key in pairs:
        if key not in _KEYS[kind]:
            raise EvaluationError(f"variant {name!r}: unknown key {key!r} for kind={kind} "
                                  f"(known: {', '.join(_KEYS[kind])})")
    lean = _number(name, "lean_lots", pairs["lean_lots"], int) if "lean_lots" in pairs else cfg.lean_lots()
    if lean < 0:
        raise EvaluationError(f"variant {name!r}: lean_lots must be >= 0, got {lean}")
    if kind == "rule":
        rule = pairs.get("rule", "")
        if rule not in ("hold", "imbalance"):
            raise EvaluationError(f"variant {name!r}: rule={rule!r} is not one of hold, imbalance")
        depth = _number(name, "depth", pairs.get("depth", str(DEFAULT_IMBALANCE_DEPTH)), int)
        eps = _number(name, "eps", pairs.get("eps", str(DEFAULT_IMBALANCE_EPS)), float)
        if depth not in (1, 3, 5, 10, 15) or not eps >= 0:
            raise EvaluationError(f"variant {name!r}: depth must be 1, 3, 5, 10 or 15 and eps >= 0 "
                                  f"(got depth={depth}, eps={eps})")
        return VariantSpec(name=name, kind="rule", rule=rule, depth=depth, eps=eps, lean_lots=lean)
    th = {k: _number(name, k, pairs[k], float) if k in pairs else cfg.thresholds[k]
          for k in ("buy", "sell", "emergency")}
    for k, v in th.items():  # above 1: that label is off (no probability reaches it), as in the fast stage
        if not (v >= 0.0 and math.isfinite(v)):
            raise EvaluationError(f"variant {name!r}: {k}={v} is not a threshold >= 0 (above 1: the label is off)")
    llm = _flag(name, "llm", pairs["llm"]) if "llm" in pairs else False
    return VariantSpec(name=name, kind="onnx", path=pairs.get("path", cfg.model_path), lean_lots=lean, llm=llm,
                       llm_model=pairs.get("llm_model", str(cfg.llm_params.get("model_path", ""))), **th)


def variant_list(given: list[str], cfg: PipelineConfig) -> list[VariantSpec]:
    """The defaults (``DEFAULT_VARIANTS``) followed by the given ones; a given variant with a default's
    name takes its place.

    Raises:
        EvaluationError: as ``parse_variant``; two given variants with one name.
    """
    specs = {n: parse_variant(n, cfg) for n in DEFAULT_VARIANTS}
    seen: set[str] = set()
    for text in given:
        v = parse_variant(text, cfg)
        if v.name in seen:
            raise EvaluationError(f"variant {v.name!r} given twice")
        seen.add(v.name)
        specs[v.name] = v
    return list(specs.values())


def decisions_for(spec: VariantSpec, table, models: dict | None = None):
    """The fast-path ``Decisions`` of ``spec`` over a ``FeatureTable``; ``models`` caches loaded
    ``OnnxModel`` by path (a model shared by two variants is loaded once).

    Raises:
        EvaluationError: the model cannot be loaded or does not fit the feature layout (named).
    """
    from pipeline.trading.evaluation import decisions as D

    if spec.kind == "rule":
        return D.hold_decisions(table) if spec.rule == "hold" else D.imbalance_decisions(table, spec.depth, spec.eps)
    models = {} if models is None else models
    model = models.get(spec.path)
    if model is None:
        try:
            model = models[spec.path] = D.OnnxModel(spec.path)
        except EvaluationError as exc:
            raise EvaluationError(f"variant {spec.name!r}: {exc}") from None
    return D.model_decisions(table, model, spec.buy, spec.sell, spec.emergency)
