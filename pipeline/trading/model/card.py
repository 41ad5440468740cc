"""The model card: what a fast model is, as JSON, beside its ONNX file and inside it.

``make model`` writes ``<stem>.card.json`` beside ``<stem>.onnx`` (``card_path``): training data and
its SHA-256, the feature layout version, the label horizon, the thresholds and how they were chosen,
held-out metrics and the evaluation summary (``pipeline.trading.model``). The same card, less the
``model_file`` entry (a file cannot hold its own hash), rides in the ONNX metadata under ``card``
(``META_KEY``), so a model file copied alone still carries it. A hand-made model (the benches') gets a
short card (``hand_made_card``).

``check_card`` is what the fast stage runs before it serves a model: every card the model has (the
file beside it, the embedded one) must be valid JSON with an integer ``feature_layout_version`` equal
to ``pipeline.trading.features.FEATURE_LAYOUT_VERSION``, with ``input_bounds`` (the per-feature
bounds of its training rows, ``pipeline.trading.model.decide``: ``{"rule", "lo": [128], "hi": [128]}``,
lo <= hi, numbers), and a card file's ``model_file.sha256`` must be the model file's; a model with no
card at all is refused too (nothing says what it was trained for), and so is a card without bounds
(nothing says which inputs it may be trusted on). A hand-made card (``hand_made_card``) has bounds
every finite input lies within unless it is given others. Light on purpose: json, hashlib, numpy, the
features module and the guard's ``decide``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pipeline.trading.features import FEATURE_LAYOUT_VERSION, N_FEATURES
from pipeline.trading.model.decide import InputBounds

CARD_VERSION = 2  # 2: input_bounds (the input-range guard) and, for trained models, the at-risk side
BOUNDS_KEY = "input_bounds"
CARD_SUFFIX = ".card.json"
META_KEY = "card"
LABEL_NAMES = ("HOLD", "LEAN_BUY", "LEAN_SELL", "EMERGENCY")  # pipeline.trading.messages.Label, index order


class CardError(ValueError):
    """A model's card is missing, unreadable, or says it was made for another feature layout."""


def card_path(model_path: str | os.PathLike) -> Path:
    """Where a model's card file lives: ``<stem>.card.json`` beside it (``fast.onnx`` ->
    ``fast.card.json``)."""
    p = Path(model_path)
    return p.with_name(p.stem + CARD_SUFFIX)


def hand_made_card(kind: str, description: str, bounds: InputBounds | None = None, **extra) -> dict:
    """The card of a model whose weights were set by hand (no training data, no held-out figures):
    ``kind`` (e.g. ``"hand-set"``), what it does, the current feature layout version, its input
    bounds (``bounds``; default: every finite float32, ``InputBounds.unbounded``), and ``extra``."""
    b = InputBounds.unbounded() if bounds is None else bounds
    rule = "hand-set: any finite input" if bounds is None else "hand-set"
    return {"card_version": CARD_VERSION, "kind": kind, "description": description,
            "feature_layout_version": FEATURE_LAYOUT_VERSION, "labels": list(LABEL_NAMES),
            BOUNDS_KEY: b.to_card(rule), **extra}


def input_bounds(card: Mapping, where: str = "the card") -> InputBounds:
    """The card's per-feature input bounds (``BOUNDS_KEY``) as float32 arrays.

    Raises:
        CardError: no bounds, or bounds that are not two lists of ``N_FEATURES`` numbers with lo <= hi
            (``where`` names the card).
    """
    b = card.get(BOUNDS_KEY)
    if not isinstance(b, Mapping):
        raise CardError(f"{where} has no {BOUNDS_KEY} (the per-feature bounds of its training rows), so nothing "
                        "says which inputs it may be trusted on: retrain it (`make model`), or give a hand-made "
                        "model's card bounds (hand_made_card)")
    arrs = []
    for k in ("lo", "hi"):
        v = b.get(k)
        ok = isinstance(v, list) and len(v) == N_FEATURES and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        if not ok:
            raise CardError(f"{where}: {BOUNDS_KEY}.{k} is not a list of {N_FEATURES} numbers")
        arrs.append(np.asarray(v, np.float32))
    lo, hi = arrs
    if not (lo <= hi).all():
        k = int(np.flatnonzero(~(lo <= hi))[0])
        raise CardError(f"{where}: {BOUNDS_KEY} has lo > hi (or NaN) at slot {k}")
    return InputBounds(lo, hi)


def write_card(model_path: str | os.PathLike, card: Mapping) -> Path:
    """Write ``card`` beside the model file (``card_path``), with ``model_file`` (its name and the
    SHA-256 of its bytes) added; atomically (a temporary file, then a rename). The path written.

    Raises:
        OSError: the model cannot be read or the card written.
    """
    model = Path(model_path)
    doc = {**card, "model_file": {"name": model.name, "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}}
    out = card_path(model)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(out)
    return out


def _parse(text: str, where: str) -> dict:
    try:
        card = json.loads(text)
    except ValueError as exc:
        raise CardError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(card, dict):
        raise CardError(f"{where} is not a JSON object")
    v = card.get("feature_layout_version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise CardError(f"{where} has no integer feature_layout_version (got {v!r})")
    return card


def read_cards(model_path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> list[tuple[str, dict]]:
    """The model's cards as (where, card): the file beside it when it exists, then the one in
    ``metadata`` (the ONNX model's custom metadata map, e.g. onnxruntime's
    ``session.get_modelmeta().custom_metadata_map``) when it has ``META_KEY``.

    Raises:
        CardError: a card that is not a JSON object with an integer ``feature_layout_version``.
        OSError: the card file exists but cannot be read.
    """
    out = []
    f = card_path(model_path)
    if f.is_file():
        out.append((f"card file {str(f)!r}", _parse(f.read_text(encoding="utf-8"), f"card file {str(f)!r}")))
    if metadata is not None and META_KEY in metadata:
        where = f"the card in {str(model_path)!r}'s ONNX metadata"
        out.append((where, _parse(metadata[META_KEY], where)))
    return out


def check_card(model_path: str | os.PathLike, metadata: Mapping[str, str] | None = None,
               expected_version: int = FEATURE_LAYOUT_VERSION) -> dict:
    """The model's card (the file's when there is one, else the embedded one) once every card it has
    passes the module docstring's checks.

    Raises:
        CardError: no card; a card that cannot be parsed; a ``feature_layout_version`` other than
            ``expected_version`` (both named); a card without valid ``input_bounds``; a card file
            whose ``model_file.sha256`` is not the model file's (the card describes another model).
        OSError: the model or its card file cannot be read.
    """
    cards = read_cards(model_path, metadata)
    if not cards:
        raise CardError(f"model {str(model_path)!r} has no model card (neither {str(card_path(model_path))!r} beside "
                        f"it nor {META_KEY!r} in its ONNX metadata), so nothing says which feature layout it was "
                        "trained for: rebuild it (`make model`), or write one with "
                        "pipeline.trading.model.card.write_card")
    for where, card in cards:
        v = card["feature_layout_version"]
        if v != expected_version:
            raise CardError(f"model {str(model_path)!r}: {where} says feature layout version {v}, but this "
                            f"pipeline computes feature layout version {expected_version} "
                            "(pipeline.trading.features.FEATURE_LAYOUT_VERSION): retrain it (`make model`)")
        input_bounds(card, f"model {str(model_path)!r}: {where}")
        mf = card.get("model_file")
        if isinstance(mf, dict) and "sha256" in mf:
            got = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
            if mf["sha256"] != got:
                raise CardError(f"model {str(model_path)!r}: {where} describes another file (sha256 "
                                f"{str(mf['sha256'])[:12]}, this one's is {got[:12]})")
    return cards[0][1]
