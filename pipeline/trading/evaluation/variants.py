"""What a variant of the evaluation is, and what it takes from the pipeline's config. Pure apart from
reading the config file.

A variant is ``NAME=CONFIG`` with CONFIG a comma-separated ``key=value`` list::

    kind=onnx,path=models/x.onnx,buy=0.6,sell=0.6,emergency=0.9,side=0.6,lean_lots=1
    kind=rule,rule=imbalance,depth=5,eps=0.2
    kind=rule,rule=hold
    kind=onnx,llm=1                      the model's fast path plus the slow path (the LLM hub)
    kind=onnx,quote=1,fast=off           the quoting scenario with the fast path off
    kind=random,quote=1,seed=3           a random labeler with the model's label frequencies
    kind=onnx,planner=depth              the model's decisions through the depth-aware planner

Two scenarios. Directional (``quote=0``, the default): the fast path's LEAN signals trade through the
risk gateway's planner (``lean_lots`` lots), its EMERGENCYs cancel. Quoting (``quote=1``): one bid
and one ask of ``quote_lots`` lots rest where the planner puts passive orders (``quoting.Quoter``),
and the fast path's signals act on them as deployed (an EMERGENCY cancels, with a side bit only that
side; LEANs plan toward +/- ``lean_lots``, 0 by default as in the shipped config: the fast path only
cancels). ``fast=off``: every SIGNAL reaches the gateway as HOLD without flags (its mid and spread
still do), so nothing of the fast path acts: in the quoting scenario that is the always-HOLD control.

Keys: ``kind`` (``onnx`` | ``rule`` | ``random``); for ``onnx``: ``path`` (default: the fast process's
``model_path``), ``buy`` / ``sell`` / ``emergency`` / ``side`` (default: the fast process's
``thresholds``, as the stage applies them; ``side`` is the at-risk side's threshold), ``llm`` (0 / 1:
add the slow path; ``llm_model``: its GGUF, default the llm process's ``model_path``); for ``rule``:
``rule`` (``hold`` | ``imbalance`` | ``imbalance_emergency``), ``depth`` (imbalance levels: 1, 3, 5,
10, 15; default 5), ``eps`` (dead band; default 0.2, and ``decisions.DEFAULT_EMERGENCY_EPS`` for
``imbalance_emergency``); for ``random``: the ``onnx`` keys naming the model whose label frequencies
it draws with, and ``seed`` (default: the market's seed); for all: ``lean_lots`` (the risk gateway's
fast-path quote size in lots; default: the risk process's ``lean_lots`` when it is above 0, else
``EVAL_LEAN_LOTS`` in the directional scenario, because with 0 the fast path only cancels and nothing
would trade; in the quoting scenario the risk process's value as it is), ``quote`` (0 / 1),
``quote_lots`` (>= 1, default 1), ``fast`` (``on`` / ``off``, default on), ``planner`` (the risk
gateway's: ``simple`` | ``depth``, design document 000 section 3.3's depth-aware planner; default the
risk process's ``execution.planner``, else simple). A bare NAME picks a preset
(``PRESETS``). An unknown key, a key of another kind, or a value that does not parse is an
``EvaluationError`` naming it.

``PipelineConfig.load`` reads the rest from the pipeline's TOML: the instruments, the fast process's
model and thresholds, the feature stage's params, the risk process's limits, the llm process's params.
"""

from __future__ import annotations

import math

import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from pipeline.trading.evaluation.decisions import DEFAULT_EMERGENCY_EPS
from pipeline.trading.evaluation.replay import EvaluationError, TapeInstrument

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = REPO / "configs" / "default.toml"
EVAL_LEAN_LOTS = 1  # the fast path's quote size when the config's lean_lots is 0 (see the module docstring)
DEFAULT_IMBALANCE_DEPTH = 5
DEFAULT_IMBALANCE_EPS = 0.2
NEVER_SIDE = 1.01  # pipeline.trading.model.thresholds.NEVER: no at-risk side bit
_MODULES = {"fast": "procs.fast:FastAgent", "risk": "procs.risk:RiskAgent", "llm": "procs.llm:LlmAgent",
            "features": "procs.features:FeatureAgent", "venue": "procs.venue:VenueAgent"}
#: the paper venue's synthetic markets by the name its ``market`` param gives (``synthetic_params``)
SYNTHETIC_MARKETS = ("calibrated", "default")


class VariantSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One variant, its defaults resolved (``parse_variant``)."""

    name: str
    kind: Literal["onnx", "rule", "random"]
    path: str = ""
    buy: float = 0.0
    sell: float = 0.0
    emergency: float = 0.0
    side: float = NEVER_SIDE
    rule: Literal["hold", "imbalance", "imbalance_emergency", ""] = ""
    depth: int = DEFAULT_IMBALANCE_DEPTH
    eps: float = DEFAULT_IMBALANCE_EPS
    lean_lots: int = EVAL_LEAN_LOTS
    llm: bool = False
    llm_model: str = ""
    quote: bool = False
    quote_lots: int = 1
    fast: bool = True
    seed: int | None = None
    planner: Literal["simple", "depth"] = "simple"

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
    market: str = "default"  # the venue process's ``market`` param (its synthetic market), "default" without one
    risk_execution: dict[str, Any] = {}  # the risk process's ``execution`` table (its planner)

    @property
    def planner(self) -> str:
        """The risk process's planner (``execution.planner``; "simple" when it sets none)."""
        return str(self.risk_execution.get("planner", "simple"))

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
                   thresholds={"buy": float(t.buy), "sell": float(t.sell), "emergency": float(t.emergency),
                               "side": float(t.side)},
                   thresholds_source=th_src,
                   feature_params=dict(procs.get("features", {})), risk_limits=dict(procs.get("risk", {}).get("limits")
                                                                                    or {}),
                   llm_params=dict(procs.get("llm", {})),
                   market=str(procs.get("venue", {}).get("market", "default")),
                   risk_execution=dict(procs.get("risk", {}).get("execution") or {}))

    def lean_lots(self, quote: bool = False) -> int:
        """The evaluation's default fast-path LEAN size (see the module docstring)."""
        v = self.risk_limits.get("lean_lots", 0)
        v = int(v) if isinstance(v, int) and v > 0 else 0
        return v if quote or v > 0 else EVAL_LEAN_LOTS


_COMMON = ("kind", "lean_lots", "quote", "quote_lots", "fast", "planner")
_MODEL = ("path", "buy", "sell", "emergency", "side")
_KEYS = {"onnx": _COMMON + _MODEL + ("llm", "llm_model"), "rule": _COMMON + ("rule", "depth", "eps"),
         "random": _COMMON + _MODEL + ("seed",)}
_RULES = ("hold", "imbalance", "imbalance_emergency")
PRESETS = {"model": "kind=onnx", "hold": "kind=rule,rule=hold", "imbalance": "kind=rule,rule=imbalance",
           "random": "kind=random", "model+llm": "kind=onnx,llm=1",
           "quote-model": "kind=onnx,quote=1", "quote-off": "kind=onnx,quote=1,fast=off",
           "quote-imbalance": "kind=rule,rule=imbalance_emergency,quote=1", "quote-random": "kind=random,quote=1",
           "model-depth": "kind=onnx,planner=depth", "imbalance-depth": "kind=rule,rule=imbalance,planner=depth"}
#: the directional scenario's variants and its controls, then the quoting scenario's (module docstring), then
#: the planner comparison's depth-aware variants (``PLANNER_PAIRS``)
DEFAULT_VARIANTS = ("model", "hold", "imbalance", "random", "quote-model", "quote-off", "quote-imbalance",
                    "quote-random", "model-depth", "imbalance-depth")
#: the quoting scenario's fast path on / off, and its controls (the tables and verdicts name them)
QUOTE_ON, QUOTE_OFF, QUOTE_CONTROLS = "quote-model", "quote-off", ("quote-imbalance", "quote-random")
DIRECTIONAL, DIRECTIONAL_CONTROLS = "model", ("hold", "imbalance", "random")
#: the planner comparison: each depth-aware variant beside the same decisions through the simple planner
PLANNER_PAIRS = (("model-depth", "model"), ("imbalance-depth", "imbalance"))


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


def _pairs(name: str, conf: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in conf.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise EvaluationError(f"variant {name!r}: {item!r} is not key=value")
        if key in pairs:
            raise EvaluationError(f"variant {name!r}: key {key!r} given twice")
        pairs[key] = value.strip()
    return pairs


def _common(name: str, pairs: dict[str, str], cfg: PipelineConfig) -> dict:
    """The keys every kind has (``_COMMON``), defaults resolved."""
    quote = _flag(name, "quote", pairs["quote"]) if "quote" in pairs else False
    lean = _number(name, "lean_lots", pairs["lean_lots"], int) if "lean_lots" in pairs else cfg.lean_lots(quote)
    if lean < 0:
        raise EvaluationError(f"variant {name!r}: lean_lots must be >= 0, got {lean}")
    qlots = _number(name, "quote_lots", pairs.get("quote_lots", "1"), int)
    if qlots < 1:
        raise EvaluationError(f"variant {name!r}: quote_lots must be >= 1, got {qlots}")
    fast = pairs.get("fast", "on")
    if fast not in ("on", "off"):
        raise EvaluationError(f"variant {name!r}: fast={fast!r} must be on or off")
    planner = pairs.get("planner", cfg.planner)
    if planner not in ("simple", "depth"):
        raise EvaluationError(f"variant {name!r}: planner={planner!r} must be simple or depth")
    return {"lean_lots": lean, "quote": quote, "quote_lots": qlots, "fast": fast == "on", "planner": planner}


def _model_keys(name: str, pairs: dict[str, str], cfg: PipelineConfig) -> dict:
    """The keys naming a model and its thresholds (``_MODEL``), defaults resolved."""
    th = {k: _number(name, k, pairs[k], float) if k in pairs else cfg.thresholds[k]
          for k in ("buy", "sell", "emergency", "side")}
    for k, v in th.items():  # above 1: that label is off (no probability reaches it), as in the fast stage
        if not (v >= 0.0 and math.isfinite(v)):
            raise EvaluationError(f"variant {name!r}: {k}={v} is not a threshold >= 0 (above 1: the label is off)")
    if not th["side"] > 0.5:
        raise EvaluationError(f"variant {name!r}: side={th['side']} must be above 0.5 (at most one side at risk)")
    return {"path": pairs.get("path", cfg.model_path), **th}


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
    pairs = _pairs(name, conf)
    kind = pairs.get("kind", "onnx")
    if kind not in _KEYS:
        raise EvaluationError(f"variant {name!r}: kind={kind!r} is not one of {sorted(_KEYS)}")
    for key in pairs:
        if key not in _KEYS[kind]:
            raise EvaluationError(f"variant {name!r}: unknown key {key!r} for kind={kind} "
                                  f"(known: {', '.join(_KEYS[kind])})")
    common = _common(name, pairs, cfg)
    if kind == "rule":
        rule = pairs.get("rule", "")
        if rule not in _RULES:
            raise EvaluationError(f"variant {name!r}: rule={rule!r} is not one of {', '.join(_RULES)}")
        depth = _number(name, "depth", pairs.get("depth", str(DEFAULT_IMBALANCE_DEPTH)), int)
        eps_default = DEFAULT_EMERGENCY_EPS if rule == "imbalance_emergency" else DEFAULT_IMBALANCE_EPS
        eps = _number(name, "eps", pairs.get("eps", str(eps_default)), float)
        if depth not in (1, 3, 5, 10, 15) or not eps >= 0:
            raise EvaluationError(f"variant {name!r}: depth must be 1, 3, 5, 10 or 15 and eps >= 0 "
                                  f"(got depth={depth}, eps={eps})")
        return VariantSpec(name=name, kind="rule", rule=rule, depth=depth, eps=eps, **common)
    model = _model_keys(name, pairs, cfg)
    if kind == "random":
        seed = _number(name, "seed", pairs["seed"], int) if "seed" in pairs else None
        return VariantSpec(name=name, kind="random", seed=seed, **model, **common)
    llm = _flag(name, "llm", pairs["llm"]) if "llm" in pairs else False
    return VariantSpec(name=name, kind="onnx", llm=llm,
                       llm_model=pairs.get("llm_model", str(cfg.llm_params.get("model_path", ""))), **model, **common)


def synthetic_params(market: str):
    """The ``pipeline.venue.synthetic.SyntheticParams`` of a synthetic market by name
    (``SYNTHETIC_MARKETS``: ``calibrated`` is ``CALIBRATED``, the market calibrated to real data;
    ``default`` the venue's original ``SyntheticParams()``).

    Raises:
        EvaluationError: an unknown name (the names listed).
    """
    from pipeline.venue.synthetic import CALIBRATED, SyntheticParams

    if market not in SYNTHETIC_MARKETS:
        raise EvaluationError(f"market {market!r} is not one of {', '.join(SYNTHETIC_MARKETS)}")
    return CALIBRATED if market == "calibrated" else SyntheticParams()


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


def decisions_for(spec: VariantSpec, table, models: dict | None = None, seed: int = 0):
    """The fast-path ``Decisions`` of ``spec`` over a ``FeatureTable``; ``models`` caches loaded
    ``OnnxModel`` by path (a model shared by two variants is loaded once); ``seed``: the market's (a
    random labeler's default). ``fast=off``: every row HOLD without flags.

    Raises:
        EvaluationError: the model cannot be loaded or does not fit the feature layout (named).
    """
    from pipeline.trading.evaluation import decisions as D

    if not spec.fast:
        d = D.hold_decisions(table)
        d.describe = "fast path off: every SIGNAL reaches the gateway as HOLD without flags (always-HOLD)"
        return d
    if spec.kind == "rule":
        if spec.rule == "hold":
            return D.hold_decisions(table)
        if spec.rule == "imbalance_emergency":
            return D.imbalance_emergency_decisions(table, spec.depth, spec.eps)
        return D.imbalance_decisions(table, spec.depth, spec.eps)
    models = {} if models is None else models
    model = models.get(spec.path)
    if model is None:
        try:
            model = models[spec.path] = D.OnnxModel(spec.path)
        except EvaluationError as exc:
            raise EvaluationError(f"variant {spec.name!r}: {exc}") from None
    d = D.model_decisions(table, model, spec.buy, spec.sell, spec.emergency, spec.side)
    if spec.kind == "random":
        return D.random_decisions(d, seed if spec.seed is None else spec.seed)
    return d
