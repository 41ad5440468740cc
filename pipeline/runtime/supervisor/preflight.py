"""Checks ``up`` makes before it creates anything: every stage's params, the GPU budget."""

from __future__ import annotations

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.runtime.gpu import budget_from_config, check_budget, probe_gpu
from pipeline.runtime.log import EventLog


def check_stage_params(cfg: Config) -> None:
    """Convert every process's ``params`` to the ``params_type`` of its agent class (a class without
    one takes any params), so that a typo in a param stops ``up`` before any process starts rather
    than failing that stage's start; then the params' own ``preflight()`` where they have one (the llm
    stage: its model file resolves and is a whole GGUF). Imports each agent module
    (``module = "pkg.mod:Class"``).

    Raises:
        ConfigError: an unknown or ill-typed param, naming the process and the field
            (``features: bad params: Object contains unknown field `tau_ofi_msx```).
        StartupError: an agent module or class cannot be loaded, its module raised while imported, or
            its params' ``preflight()`` refused (naming the process and why).
    """
    from pipeline.runtime.runner import load_stage_params  # (the stages' code: only for `up`, not every CLI call)

    for proc in cfg.processes:
        try:
            params = load_stage_params(proc)
            check = getattr(params, "preflight", None)
            if callable(check):
                check()
        except ConfigError:
            raise
        except StartupError as exc:
            raise StartupError(f"process {proc.name}: {exc}") from None
        except Exception as exc:  # the agent module raised while it was imported
            raise StartupError(f"process {proc.name}: importing {proc.module!r} raised {type(exc).__name__}: {exc}") from None


def check_gpu_budget(cfg: Config, log: EventLog) -> None:
    """Probe the GPU and check what the configured stages will put on it (``pipeline.runtime.gpu``);
    logs the verdict.

    Raises:
        StartupError: the GPU budget fails.
    """
    info, why = probe_gpu(cfg.gpu.device_id)
    verdict = check_budget(budget_from_config(cfg), info, why)
    log.info("gpu_budget", verdict=verdict)
