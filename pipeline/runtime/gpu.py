"""GPU budget: what the configured models need must fit the device's free memory with a reserve.

Pure ``check_budget`` plus a probe (NVML through nvidia-ml-py when installed, else ``nvidia-smi``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import msgspec

from pipeline.runtime.config import GpuConfig
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


def budget_from_config(cfg) -> GpuConfig:
    """The GPU budget of a whole ``Config``: ``cfg.gpu`` with what the stages will take filled in where
    the ``[gpu]`` table leaves it at 0.

    - LLM weights: the size of each ``procs.llm`` stage's ``model_path`` (plus ``lora_path``) when its
      ``n_gpu_layers`` is above 0 (all layers offloaded is the worst case the budget must cover).
    - ONNX: each ``procs.fast`` stage's ``gpu_mem_limit_mib`` (default 256) unless ``providers = "cpu"``.

    A model file that does not exist counts 0 here; the stage itself fails its start with the path.
    """
    gpu = cfg.gpu
    llm_mib = onnx_mib = 0
    for proc in cfg.processes:
        prm = proc.params
        if proc.module.startswith("procs.llm:") and int(prm.get("n_gpu_layers", 0)) > 0:
            for key in ("model_path", "lora_path"):
                path = prm.get(key)
                if path and os.path.exists(path):
                    llm_mib += -(-os.path.getsize(path) // 2**20)
        elif proc.module.startswith("procs.fast:") and str(prm.get("providers", "auto")) != "cpu":
            onnx_mib += int(prm.get("gpu_mem_limit_mib", 256))
    return msgspec.structs.replace(
        gpu, llm_weights_mib=gpu.llm_weights_mib or llm_mib, onnx_mem_limit_mib=gpu.onnx_mem_limit_mib or onnx_mib)


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
