"""Params preflight (pipeline/runtime/supervisor/preflight.py): every process's params are converted
to its agent class's ``params_type`` before anything starts, so a typo in one stage's params stops
`up` at once, naming the process and the field, with nothing created and no process started."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import parse_config
from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.runtime.supervisor.preflight import check_stage_params
from tests.support.configtext import BACK_OFF, process, ring
from tests.support.processes import pids_running_with
from tests.support.shm import shm_entries

FEATURES = "procs.features:FeatureAgent"  # a stage with a params_type (FeatureStageParams)


def _config(features_params: str):
    """src (tests.support.agents, no params_type) -> md -> features -> feat -> sink (no params_type)."""
    return (ring("md", payload=512) + ring("feat", payload=560)
            + process("src", "SeqSource", outputs=["md"], extra=BACK_OFF, params="rate_per_s = 10, anything = 1")
            + process("features", FEATURES, inputs=["md"], outputs=["feat"], extra=BACK_OFF, params=features_params)
            + process("sink", "Idle", inputs=["feat"], extra=BACK_OFF))


def test_params_that_convert_pass_and_a_class_without_params_type_takes_any():
    check_stage_params(parse_config(_config("tau_ofi_ms = 500.0, vpin_buckets = 20")))


@pytest.mark.parametrize("params, field, why", [
    ("tau_ofi_msx = 500.0", "tau_ofi_msx", "Object contains unknown field `tau_ofi_msx`"),
    ('vpin_buckets = "20"', "vpin_buckets", "Expected `int`, got `str` - at `$.vpin_buckets`"),
    ("tau_trade_ms = -1.0", "tau_trade_ms", "Expected `float` > 0.0 - at `$.tau_trade_ms`"),
])
def test_a_bad_param_is_a_config_error_naming_the_process_and_the_field(params, field, why):
    with pytest.raises(ConfigError) as err:
        check_stage_params(parse_config(_config(params)))
    msg = str(err.value)
    assert msg == f"features: bad params: {why}" and field in msg, msg


def test_an_agent_class_that_cannot_be_loaded_is_a_startup_error_naming_the_process():
    text = ring("a") + process("ghost", "tests.support.agents:NoSuchAgent", outputs=["a"])
    with pytest.raises(StartupError,
                       match=r"^process ghost: 'tests.support.agents:NoSuchAgent' is not an Agent subclass$"):
        check_stage_params(parse_config(text))


def test_an_agent_module_that_raises_at_import_is_a_startup_error_naming_the_process():
    text = ring("a") + process("odd", "tests.pipeline.runtime.supervisor.raises_at_import:Agent", outputs=["a"])
    with pytest.raises(StartupError, match=r"^process odd: importing 'tests.pipeline.runtime.supervisor.raises_at_import:"
                                           r"Agent' raised RuntimeError: no venue credentials at import$"):
        check_stage_params(parse_config(text))


def test_a_params_preflight_that_refuses_is_a_startup_error_naming_the_process(tmp_path):
    """The llm stage's params check their model before anything starts (``LlmParams.preflight``)."""
    missing = tmp_path / "no-such-model.gguf"
    text = (ring("sig", payload=576) + ring("instr", payload=128)
            + process("llm", "procs.llm:LlmAgent", inputs=["sig"], outputs=["instr"], extra=BACK_OFF,
                      params=f'model_path = "{missing}"'))
    with pytest.raises(StartupError, match=r"^process llm: .*no-such-model\.gguf"):
        check_stage_params(parse_config(text))


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_up_with_a_typo_in_one_stages_params_fails_before_anything_starts(pipe):
    pipe.write_config(_config("tau_ofi_msx = 500.0"))
    r = pipe.cli("up", "--run-for", "20", "--status-every", "0", timeout=30)
    assert r.returncode == 2, r
    err = r.stderr.strip()
    assert err.startswith("error: features: bad params: Object contains unknown field `tau_ofi_msx`"), err
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert pids_running_with(str(pipe.cfg_path)) == []
    assert shm_entries(pipe.prefix) == []
    assert not pipe.run_dir.exists()  # not even the run lock was taken
    assert not any((pipe.log_dir / f"{name}.log").exists() for name in ("src", "features", "sink"))
