"""Pure pieces of the runtime: the core plan, the GPU budget, and the golden bytes of the process
table and of the CONTROL payload."""

from __future__ import annotations

import mmap
import struct
import uuid

import pytest

from pipeline.runtime import proctable as PT
from pipeline.runtime.config import GpuConfig
from pipeline.runtime.errors import StartupError
from pipeline.runtime.gpu import GpuInfo, check_budget, needed_mib
from pipeline.trading.messages import CONTROL, ControlCmd, ControlReason, Kind, pack_control, unpack_control
from pipeline.runtime.pinning import plan_cores
from tests.pipeline._support import SHM_DIR, shm_entries


# ------------------------------------------------------------------------------------- pinning
def test_one_core_each_means_busy_spin_for_auto():
    plan = plan_cores([("a", "auto", "auto"), ("b", "auto", "auto"), ("c", "auto", "back-off")], [0, 1, 2, 3])
    assert plan.cores == {"a": 0, "b": 1, "c": 2}
    assert plan.shared is False
    assert plan.wait == {"a": "busy-spin", "b": "busy-spin", "c": "back-off"}  # explicit waits are kept
    assert "one core each" in plan.note


def test_fewer_cores_than_processes_round_robin_shared_blocking():
    plan = plan_cores([(n, "auto", "auto") for n in "abcde"], [0, 1])
    assert plan.cores == {"a": 0, "b": 1, "c": 0, "d": 1, "e": 0}
    assert plan.shared is True
    assert set(plan.wait.values()) == {"blocking"}
    assert "round-robin" in plan.note and "blocking" in plan.note


def test_explicit_cores_kept_and_autos_take_free_cores_first():
    plan = plan_cores([("a", "auto", "auto"), ("b", 0, "busy-spin"), ("c", "auto", "auto")], [0, 1, 2])
    assert plan.cores == {"b": 0, "a": 1, "c": 2}
    assert plan.shared is False
    assert plan.wait == {"a": "busy-spin", "b": "busy-spin", "c": "busy-spin"}


def test_explicit_unusable_core_raises():
    with pytest.raises(ValueError, match=r"core 7 is not usable"):
        plan_cores([("a", 7, "auto")], [0, 1])


def test_no_usable_cores_raises():
    with pytest.raises(ValueError):
        plan_cores([("a", "auto", "auto")], [])


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
def test_proctable_layout_constants():
    assert (PT.HEADER_BYTES, PT.RECORD_BYTES, PT.ERROR_BYTES, PT.STATS_BYTES) == (64, 1024, 160, 760)
    offsets = [PT.OFF_PID, PT.OFF_HEARTBEAT_NS, PT.OFF_PHASE, PT.OFF_CORE_PLUS_ONE, PT.OFF_MSGS_IN, PT.OFF_MSGS_OUT,
               PT.OFF_ERRORS, PT.OFF_LAT_P50_NS, PT.OFF_LAT_P99_NS, PT.OFF_STARTED_NS, PT.OFF_READY_NS,
               PT.OFF_ERROR_LEN, PT.OFF_LAST_ERROR, PT.OFF_STATS_LEN, PT.OFF_STAGE_STATS]
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 256, 264]
    assert PT.OFF_LAST_ERROR + PT.ERROR_BYTES == 256
    assert PT.OFF_STAGE_STATS + PT.STATS_BYTES == 1024
    assert (PT.PHASE_NONE, PT.PHASE_STARTING, PT.PHASE_READY, PT.PHASE_STOPPING) == (0, 1, 2, 3)
    assert PT.MAGIC.to_bytes(8, "little") == b"PROCTAB\x00"


def raw_len_and_text(prefix: str, base_record: int) -> tuple[int, bytes]:
    with open(SHM_DIR / f"{prefix}.procs", "rb") as f:
        raw = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        base = 64 + 1024 * base_record
        n = struct.unpack_from("<Q", raw, base + 256)[0]
        return n, bytes(raw[base + 264 : base + 264 + n])
    finally:
        raw.close()


def test_proctable_golden_bytes_in_the_segment():
    """Write through ProcRecord; read the segment's bytes independently at literal offsets."""
    prefix = "t" + uuid.uuid4().hex[:8]
    table = PT.ProcTable.create(prefix, 3)
    try:
        rec = table.record(1)
        values = {0: 4242, 8: 0x1122334455667788, 16: 2, 24: 3, 32: 1000, 40: 999, 48: 7, 56: 1500, 64: 9000,
                  72: 123456789, 80: 123456999}
        for off, v in values.items():
            rec.set(off, v)
        rec.set_last_error("boom: é")
        assert (SHM_DIR / f"{prefix}.procs").stat().st_mode & 0o777 == 0o600
        with open(SHM_DIR / f"{prefix}.procs", "rb") as f:
            raw = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            assert len(raw) == 64 + 3 * 1024
            assert raw[0:16] == b"PROCTAB\x00" + bytes.fromhex("03000000" "03000000")
            base = 64 + 1024
            for off, v in values.items():
                assert struct.unpack_from("<Q", raw, base + off)[0] == v, off
            err = "boom: é".encode()
            assert struct.unpack_from("<Q", raw, base + 88)[0] == len(err)
            assert raw[base + 96 : base + 96 + len(err)] == err
            assert raw[64 : 64 + 1024] == bytes(1024) and raw[64 + 2048 :] == bytes(1024)  # neighbours untouched
        finally:
            raw.close()
        assert rec.last_error() == "boom: é"
        rec.set_stage_stats({"reconnects": 3, "resyncs": 1})
        stats = b'{"reconnects":3,"resyncs":1}'
        assert raw_len_and_text(prefix, base_record=1) == (len(stats), stats)
        assert rec.stage_stats() == {"reconnects": 3, "resyncs": 1}
        rec.set_stage_stats({f"counter_{i:03d}": 10**12 for i in range(40)})  # too big: whole entries dropped
        assert 0 < len(rec.stage_stats()) < 40 and all(v == 10**12 for v in rec.stage_stats().values())
        rec.set_last_error("x" * 500)
        assert rec.last_error() == "x" * 160  # truncated to the field
        attached = PT.ProcTable.attach(prefix)
        assert attached.n == 3 and attached.record(1).get(PT.OFF_PID) == 4242
        attached.close()
    finally:
        table.close()
        PT.ProcTable.unlink(prefix)
    assert shm_entries(prefix) == []


def test_proctable_attach_missing_raises():
    with pytest.raises(StartupError, match="does not exist"):
        PT.ProcTable.attach("t" + uuid.uuid4().hex[:8])


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
