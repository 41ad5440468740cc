"""The GPU budget asks each stage's params what it will put on the GPU (``gpu_need``): the fast and
llm stages' own rules, and ``budget_from_config`` going through each process's agent class, whatever
its module is called."""

from __future__ import annotations

import msgspec
import pytest

from pipeline.runtime.agent import Agent
from pipeline.runtime.config import parse_config
from pipeline.runtime.gpu import NO_GPU, GpuNeed, budget_from_config, stage_gpu_need
from pipeline.trading.llm.hub import LlmParams
from procs.fast import FastParams

ME = "tests.pipeline.runtime.test_gpu_need"


def test_the_fast_stage_needs_its_arena_limit_unless_it_runs_on_the_cpu():
    assert FastParams().gpu_need() == GpuNeed(onnx_mem_limit_mib=256)
    assert FastParams(providers="cuda", gpu_mem_limit_mib=300).gpu_need() == GpuNeed(onnx_mem_limit_mib=300)
    assert FastParams(providers="cpu", gpu_mem_limit_mib=300).gpu_need() == NO_GPU


def test_the_llm_stage_needs_its_weights_files_when_layers_are_offloaded(tmp_path):
    model, lora = tmp_path / "m.gguf", tmp_path / "a.gguf"
    model.write_bytes(b"\0" * (3 * 2**20 + 1))  # 3 MiB and a byte: 4 MiB
    lora.write_bytes(b"\0")  # 1 MiB
    assert LlmParams(model_path=str(model), n_gpu_layers=99).gpu_need() == GpuNeed(llm_weights_mib=4)
    assert LlmParams(model_path=str(model), lora_path=str(lora), n_gpu_layers=1).gpu_need() == GpuNeed(llm_weights_mib=5)
    assert LlmParams(model_path=str(model), n_gpu_layers=0).gpu_need() == NO_GPU
    assert LlmParams(model_path=str(tmp_path / "absent.gguf"), n_gpu_layers=99).gpu_need() == NO_GPU


class GreedyParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    weights_mib: int = 0
    arena_mib: int = 0

    def gpu_need(self) -> GpuNeed:
        return GpuNeed(llm_weights_mib=self.weights_mib, onnx_mem_limit_mib=self.arena_mib)


class GreedyAgent(Agent):
    """A stage of no known module whose params say it needs the GPU."""

    params_type = GreedyParams


class PlainAgent(Agent):
    """A stage with no params type: it needs nothing."""


def _proc(name: str, module: str, params: str = "") -> str:
    return f'[[processes]]\nname = "{name}"\nmodule = "{module}"\nparams = {{ {params} }}\n'


def test_the_budget_asks_each_process_s_params_type_whatever_its_module():
    cfg = parse_config(_proc("a", f"{ME}:GreedyAgent", "weights_mib = 700, arena_mib = 30")
                       + _proc("b", f"{ME}:GreedyAgent", "arena_mib = 12")
                       + _proc("c", f"{ME}:PlainAgent", "anything = 1"))
    got = budget_from_config(cfg)
    assert (got.llm_weights_mib, got.onnx_mem_limit_mib) == (700, 42)


@pytest.mark.parametrize("module, params", [
    (f"{ME}:NoSuchAgent", ""),  # the class cannot be loaded
    ("tests.no_such_module:Agent", ""),  # nor the module
    (f"{ME}:GreedyAgent", "weights_mb = 700"),  # a param that does not convert
    (f"{ME}:GreedyAgent", 'weights_mib = "700"'),
])
def test_a_stage_that_cannot_say_counts_nothing_and_its_own_start_reports_why(module, params):
    proc = parse_config(_proc("x", module, params)).processes[0]
    assert stage_gpu_need(proc) == NO_GPU
