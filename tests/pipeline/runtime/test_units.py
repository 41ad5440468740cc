"""Pure pieces of the runtime: the GPU budget, and the golden bytes of the CONTROL payload (the core
plan is in test_pinning.py, the process table in test_proctable.py)."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import GpuConfig
from pipeline.runtime.errors import StartupError
from pipeline.runtime.gpu import GpuInfo, check_budget, needed_mib
from pipeline.trading.messages import CONTROL, ControlCmd, ControlReason, Kind, pack_control, unpack_control


# ------------------------------------------------------------------------------------- GPU budget
def test_no_gpu_not_required_gives_a_verdict():
    verdict = check_budget(GpuConfig(require=False), None, "no NVIDIA driver found")
    assert isinstance(verdict, str)
    assert "no GPU" in verdict and "no NVIDIA driver found" in verdict


def test_no_gpu_but_required_raises_naming_the_cause():
    with pytest.raises(StartupError) as info:
        check_budget(GpuConfig(require=True), None, "no NVIDIA driver found")
    msg = str(info.value)
    assert "demands a GPU" in msg and "gpu.require" in msg and "no NVIDIA driver found" in msg, msg


def test_gpu_too_small_raises_with_the_figures():
    cfg = GpuConfig(require=True, llm_weights_mib=6000, llm_kv_cache_mib=1500, onnx_mem_limit_mib=500, reserve_mib=1024)
    info = GpuInfo(device_id=0, name="FakeCard 8GB", total_mib=8192, free_mib=7000, source="nvml")
    assert needed_mib(cfg) == 9024
    with pytest.raises(StartupError) as exc:
        check_budget(cfg, info)
    msg = str(exc.value)
    for figure in ("FakeCard 8GB", "need 9024 MiB", "6000", "1500", "500", "1024", "7000 of 8192 MiB"):
        assert figure in msg, (figure, msg)


def test_gpu_that_fits_is_ok():
    cfg = GpuConfig(require=True, llm_weights_mib=4000, reserve_mib=1024)
    info = GpuInfo(device_id=0, name="FakeCard 24GB", total_mib=24576, free_mib=20000, source="nvidia-smi")
    verdict = check_budget(cfg, info)
    assert "need 5024 MiB of 20000 MiB free" in verdict and "FakeCard 24GB" in verdict


def test_budget_exactly_equal_to_free_fits():
    info = GpuInfo(device_id=1, name="Fake", total_mib=2048, free_mib=2048, source="nvml")
    check_budget(GpuConfig(llm_weights_mib=1024, reserve_mib=1024), info)


def test_the_budget_counts_what_the_llm_and_fast_stages_will_put_on_the_gpu(tmp_path):
    from pipeline.runtime.config import parse_config
    from pipeline.runtime.gpu import budget_from_config

    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"\0" * (3 * 2**20 + 1))  # 3 MiB and a byte: 4 MiB counted
    body = ('[[processes]]\nname = "llm"\nmodule = "procs.llm:LlmAgent"\n'
            f'params = {{ model_path = "{weights}", n_gpu_layers = 99 }}\n'
            '[[processes]]\nname = "fast"\nmodule = "procs.fast:FastAgent"\n'
            'params = { providers = "auto", gpu_mem_limit_mib = 300 }\n')
    got = budget_from_config(parse_config(body))
    assert (got.llm_weights_mib, got.onnx_mem_limit_mib) == (4, 300)
    info = GpuInfo(device_id=0, name="Fake", total_mib=2048, free_mib=1024 + 300 + 3, source="nvml")
    with pytest.raises(StartupError, match="llm weights 4 \\+ kv cache 0 \\+ onnx 300"):
        check_budget(got, info)
    on_cpu = parse_config(body.replace("n_gpu_layers = 99", "n_gpu_layers = 0").replace('"auto"', '"cpu"'))
    assert (budget_from_config(on_cpu).llm_weights_mib, budget_from_config(on_cpu).onnx_mem_limit_mib) == (0, 0)
    explicit = parse_config(body + "[gpu]\nllm_weights_mib = 5000\n")
    assert budget_from_config(explicit).llm_weights_mib == 5000, "an explicit [gpu] figure wins"


# ------------------------------------------------------------------------------------- golden layouts
def test_control_payload_golden_bytes():
    assert CONTROL.size == 16
    assert int(Kind.CONTROL) == 8
    got = pack_control(ControlCmd.HALT, ControlReason.OPERATOR, 0x0102030405060708)
    assert got == bytes.fromhex("0100" "0100" "00000000" "0807060504030201")
    assert pack_control(ControlCmd.RESUME, ControlReason.STAGE_FATAL, 1) == bytes.fromhex("0200" "0200" "00000000" "0100000000000000")
    assert unpack_control(got) == (ControlCmd.HALT, ControlReason.OPERATOR, 0x0102030405060708)


def test_control_payload_malformed_is_none():
    assert unpack_control(b"\x01\x00") is None
    assert unpack_control(bytes.fromhex("0900" "0100" "00000000" "0000000000000000")) is None  # unknown cmd
    assert unpack_control(bytes.fromhex("0100" "0900" "00000000" "0000000000000000")) is None  # unknown reason
