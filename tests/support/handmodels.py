"""Hand-set ONNX fast-path models with their cards, for tests that need a model whose decisions are
known from its inputs (no training): each reads the 5-level book imbalance ``m = x[F_IMBALANCE_5]``.

``imbalance_model(path, lean=a, emergency=(c, d), side=k)``: logits ``(0, a m, -a m, c |m| - d)``
through a softmax (output ``probs``, [N, 4]), so it LEANs with the imbalance and calls EMERGENCY when
``|m|`` is large; with ``side`` a second output ``at_risk`` ([N, 2]) = softmax(-k m, k m): the bid is
the order at risk when sellers press (m < 0), the ask when buyers do. A card beside it
(``hand_made_card``: any finite input in range)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def imbalance_model(path: str | Path, *, lean: float = 4.0, emergency: tuple[float, float] | None = None,
                    side: float | None = None, width: int = 128) -> Path:
    """Write the model of the module docstring to ``path`` (and its card); returns ``path``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.trading.features import F_IMBALANCE_5
    from pipeline.trading.model.card import hand_made_card, write_card

    pick = np.zeros((width, 1), np.float32)
    pick[F_IMBALANCE_5, 0] = 1.0
    c, d = emergency if emergency is not None else (0.0, 50.0)
    inits = [numpy_helper.from_array(pick, "pick"),
             numpy_helper.from_array(np.array([[0.0, lean, -lean, 0.0]], np.float32), "lean_w"),
             numpy_helper.from_array(np.array([[0.0, 0.0, 0.0, c]], np.float32), "em_w"),
             numpy_helper.from_array(np.array([0.0, 0.0, 0.0, -d], np.float32), "em_b")]
    nodes = [helper.make_node("MatMul", ["x", "pick"], ["m"]), helper.make_node("MatMul", ["m", "lean_w"], ["zl"]),
             helper.make_node("Abs", ["m"], ["am"]), helper.make_node("MatMul", ["am", "em_w"], ["ze0"]),
             helper.make_node("Add", ["ze0", "em_b"], ["ze"]), helper.make_node("Add", ["zl", "ze"], ["z"]),
             helper.make_node("Softmax", ["z"], ["probs"], axis=-1)]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 4])]
    if side is not None:
        inits.append(numpy_helper.from_array(np.array([[-side, side]], np.float32), "side_w"))
        nodes += [helper.make_node("MatMul", ["m", "side_w"], ["zs"]),
                  helper.make_node("Softmax", ["zs"], ["at_risk"], axis=-1)]
        outputs.append(helper.make_tensor_value_info("at_risk", TensorProto.FLOAT, ["N", 2]))
    g = helper.make_graph(nodes, "hand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the project's own export writes (pipeline.trading.model.mlp.to_onnx)
    path = Path(path)
    onnx.save(model, str(path))
    write_card(path, hand_made_card("hand-set", "tests.support.handmodels.imbalance_model"))
    return path


def hand_set_eval_config(folder: Path) -> str:
    """configs/default.toml written into ``folder`` with the fast process's model the hand-set one of
    ``imbalance_model`` (leaning with the 5-level imbalance, EMERGENCY when it is beyond about 0.75 in
    size, the side it threatens at risk) and thresholds that use all of it, so an evaluation run sends
    orders whatever model setup built; returns the config's path."""
    import re

    from tests.support.paths import REPO_ROOT

    imbalance_model(folder / "lean.onnx", lean=4.0, emergency=(20.0, 12.0), side=6.0)
    text = (REPO_ROOT / "configs" / "default.toml").read_text()
    line = re.search(r'^params = \{ model_path = "models/generated/fast.onnx".*$', text, re.M)
    assert line, "the fast process's params line"
    (folder / "eval.toml").write_text(text.replace(line.group(0), f'params = {{ model_path = "{folder / "lean.onnx"}", '
                                                   'thresholds = { buy = 0.6, sell = 0.6, emergency = 0.5, side = 0.6 } }'))
    return str(folder / "eval.toml")
