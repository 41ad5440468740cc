"""The default model file is derived from the packaged one, whole and named for what it was made from."""

from __future__ import annotations

import json

import pytest

from pipeline.runtime.errors import StartupError
from pipeline.trading.llm import requant
from pipeline.trading.llm.modelfile import DEFAULT_MODEL, PACKAGED_MODEL, check_model, read_header


@pytest.mark.parametrize("file_type", ["q4_0", "q8_0"])
def test_derive_writes_the_packaged_model_as_asked_and_says_what_it_came_from(tmp_path, file_type):
    out = tmp_path / f"m.{file_type}.gguf"
    made = requant.derive(PACKAGED_MODEL, out, file_type)
    header, source = read_header(out), check_model(PACKAGED_MODEL).header
    assert header.metadata["general.file_type"] == requant.FILE_TYPES[file_type]
    assert header.tensors == source.tensors and header.data_bytes_needed == header.file_bytes == out.stat().st_size
    assert json.loads((tmp_path / f"{out.name}.json").read_text()) == made
    assert made["source"] == PACKAGED_MODEL and made["file_type"] == file_type and len(made["source_sha256"]) == 64
    assert not list(tmp_path.glob("*.tmp"))


def test_setup_s_default_model_is_what_derive_writes_byte_for_byte(tmp_path):
    out = requant.derive(PACKAGED_MODEL, tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == check_model(DEFAULT_MODEL).path.read_bytes()
    assert out["file_type"] == "q4_0"


def test_a_bad_source_or_type_writes_nothing(tmp_path):
    with pytest.raises(StartupError, match="no-such-distribution-xyz"):
        requant.derive("package:no-such-distribution-xyz/m.gguf", tmp_path / "m.gguf")
    with pytest.raises(ValueError, match="file type must be one of"):
        requant.derive(PACKAGED_MODEL, tmp_path / "m.gguf", "q2_k")
    assert list(tmp_path.iterdir()) == []
