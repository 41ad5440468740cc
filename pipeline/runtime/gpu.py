"""GPU budget: what the configured models need must fit the device's free memory with a reserve.

Each stage says what it needs (its params' ``gpu_need()``, a ``GpuNeed``: the llm stage its weights
file and its KV cache from the GGUF header, the fast stage its ONNX arena limit); ``budget_from_config``
adds them up, pure ``check_budget`` decides, and a probe (NVML through nvidia-ml-py when installed,
else ``nvidia-smi``) says what the device has free.

The ``[gpu]`` table's figures are floors: each budget line is the larger of the table's figure and
what the stages say. A config can so state the budget it was planned for (the 7B example: design
document 002's LLM ~4.4 GiB + ONNX 2 GiB + reserve on a 12 GB card) and still be held to a model file
bigger than planned; with the file not yet in place, the planned figure is what is checked.
"""

from __future__ import annotations

import shutil
import subprocess

import msgspec

from pipeline.runtime.config import GpuConfig, ProcessConfig
from pipeline.runtime.errors import StartupError


class GpuInfo(msgspec.Struct, frozen=True):
    device_id: int
    name: str
    total_mib: int
    free_mib: int
    source: str  # "nvml" or "nvidia-smi"


def probe_gpu(device_id: int) -> tuple[GpuInfo | None, str]:
    """Return (info, "") for the device, or (None, why) when there is no usable GPU."""
    try:
        import pynvml  # nvidia-ml-py, optional

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(device_id)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            return GpuInfo(device_id, name, mem.total // 2**20, mem.free // 2**20, "nvml"), ""
        finally:
            pynvml.nvmlShutdown()
    except ImportError:
        pass
    except Exception as exc:  # NVML present but no driver/device
        return None, f"NVML: {exc}"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "no NVIDIA driver found (nvidia-smi not on PATH, nvidia-ml-py not installed)"
    try:
        out = subprocess.run([smi, f"--id={device_id}", "--query-gpu=name,memory.total,memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if out.returncode != 0 or not out.stdout.strip():
        return None, f"nvidia-smi found no device {device_id}: {out.stderr.strip() or out.stdout.strip()}"
    name, total, free = [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")]
    return GpuInfo(device_id, name, int(float(total)), int(float(free)), "nvidia-smi"), ""


class GpuNeed(msgspec.Struct, frozen=True, kw_only=True):
    """What one stage will put on the GPU, by line of the budget (the ``[gpu]`` fields of that name).

    A stage's params type says it with a method ``gpu_need(self) -> GpuNeed`` (``FastParams``,
    ``LlmParams``); ``budget_from_config`` adds up every process's.
    """

    llm_weights_mib: int = 0
    llm_kv_cache_mib: int = 0
    onnx_mem_limit_mib: int = 0


NO_GPU = GpuNeed()


def stage_gpu_need(proc: ProcessConfig) -> GpuNeed:
    """What process ``proc`` will put on the GPU: its params, converted to its agent class's
    ``params_type``, asked with ``gpu_need()``.

    ``NO_GPU`` when the class has no ``params_type`` or that type no ``gpu_need``, and when the class
    cannot be loaded or its params do not convert: the stage itself then fails its start, naming
    the cause (as it does for a model file that does not exist). Never raises.
    """
    from pipeline.runtime.runner import load_stage_params  # (the stages' code: only for `up`, not every CLI call)

    try:
        params = load_stage_params(proc)
    except Exception:  # the module fails to import, or its params do not convert (the preflight says which)
        return NO_GPU
    need = getattr(params, "gpu_need", None)
    return need() if callable(need) else NO_GPU


def budget_from_config(cfg) -> GpuConfig:
    """The GPU budget of a whole ``Config``: each line of ``cfg.gpu`` (weights, KV cache, ONNX arena)
    raised to the sum of every process's ``stage_gpu_need`` where that is larger (the table's figures
    are floors: the module docstring)."""
    gpu = cfg.gpu
    llm_mib = kv_mib = onnx_mib = 0
    for proc in cfg.processes:
        need = stage_gpu_need(proc)
        llm_mib += need.llm_weights_mib
        kv_mib += need.llm_kv_cache_mib
        onnx_mib += need.onnx_mem_limit_mib
    return msgspec.structs.replace(
        gpu, llm_weights_mib=max(gpu.llm_weights_mib, llm_mib), llm_kv_cache_mib=max(gpu.llm_kv_cache_mib, kv_mib),
        onnx_mem_limit_mib=max(gpu.onnx_mem_limit_mib, onnx_mib))


def needed_mib(cfg: GpuConfig) -> int:
    """LLM weights + KV cache + ONNX arena limit + reserve."""
    return cfg.llm_weights_mib + cfg.llm_kv_cache_mib + cfg.onnx_mem_limit_mib + cfg.reserve_mib


def check_budget(cfg: GpuConfig, info: GpuInfo | None, why_none: str = "") -> str:
    """Decide before anything starts. Returns a one-line verdict for the log.

    Raises:
        StartupError: the config requires a GPU and there is none, or the budget does not fit.
    """
    if info is None:
        if cfg.require:
            raise StartupError(f"the config demands a GPU (gpu.require = true) but none is usable: {why_none}")
        return f"no GPU ({why_none}); models run on the CPU"
    need = needed_mib(cfg)
    if need > info.free_mib:
        raise StartupError(
            f"GPU budget does not fit device {info.device_id} ({info.name}): need {need} MiB "
            f"(llm weights {cfg.llm_weights_mib} + kv cache {cfg.llm_kv_cache_mib} + onnx {cfg.onnx_mem_limit_mib} "
            f"+ reserve {cfg.reserve_mib}) but only {info.free_mib} of {info.total_mib} MiB are free")
    return f"GPU {info.device_id} ({info.name}): need {need} MiB of {info.free_mib} MiB free"
